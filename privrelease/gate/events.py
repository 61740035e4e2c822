"""Which of Prefect's events a person reads: by allow-list.

Prefect records events of everything (a variable created or updated carries its name and value, a
worker's carry its host), and ``POST /api/events/filter`` answers whatever the caller's filter asks
for. The gate rebuilds the filter passed on: the caller's narrowing kept (time window, order, ids,
names, resources; plain text only, no SQL wildcards), the event names cut to ``ALLOWED`` (flow-run,
task-run and artifact events), and for an analyst only events related to a run of their own (tagged
``requested-by:<account>``, a tag only the gate puts on runs). Each event answered is checked again
and keeps of its payload only the state change (``PAYLOAD``). The next page's token
(``GET /api/events/filter/next``) encodes the filter (Prefect's ``to_page_token``: base64 of JSON,
itself base64 in the URL): the gate decodes it and rebuilds its filter the same way, as it does the
filter of the feed's counts (``POST /api/events/count-by/{countable}``).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any
from urllib.parse import urlsplit

from privrelease.core.people import ANALYST, REQUESTED_BY
from privrelease.gate import bounds
from privrelease.gate.accounts import Account
from privrelease.gate.bounds import OutOfBounds

NEXT = "/api/events/filter/next"  # the next page's route: answered by the gate, read through the proxy
ALLOWED = ("prefect.flow-run.", "prefect.task-run.", "prefect.artifact.")
NOTHING = "privrelease.no-such-event"  # a name no event has: an empty intersection matches nothing
MAX_ITEMS, MAX_TEXT = 10, 200  # per list, per string of a filter (the UI's feed filters by a few resources)
# Prefect matches each label condition with a JSON query over every event in the window: 20 related filters
# of 400 labels took its server 13 s (issue #39's second attack). What the Event Feed sends is a few of each.
MAX_RELATED, MAX_LABELS, MAX_LABEL_VALUES = 3, 5, 5
PAYLOAD = ("intended", "initial_state", "validated_state")  # a state change: what a run's page shows
STATE = ("type", "name", "message", "timestamp")
RESOURCE_KEYS = {"resource": ("id", "id_prefix", "labels"), "any_resource": ("id", "id_prefix", "labels"),
                 "related": ("id", "role", "labels")}  # fmt: skip


def _texts(value: Any, what: str) -> list[str] | None:
    """A list of plain strings (None stays None); OutOfBounds otherwise."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        raise OutOfBounds(f"{what} takes a list of at most {MAX_ITEMS} strings")
    for text in value:
        if not isinstance(text, str) or len(text) > MAX_TEXT or "%" in text or "\\" in text:
            raise OutOfBounds(f"{what} takes strings of at most {MAX_TEXT} characters without '%' or '\\'")
    return value


def _names(asked: Any) -> dict:
    """The caller's event-name filter cut to ``ALLOWED``."""
    asked = asked if isinstance(asked, dict) else {}
    prefixes = _texts(asked.get("prefix"), "event.prefix")
    if not prefixes:  # none, or an empty list (which Prefect reads as none)
        kept = list(ALLOWED)
    else:  # a prefix under an allowed one is kept; an allowed one under a prefix asked for replaces it
        kept = [p for p in prefixes if p.startswith(ALLOWED)] + [a for a in ALLOWED if any(a.startswith(p) for p in prefixes)]
    out: dict = {"prefix": sorted(set(kept)) or [NOTHING]}
    for key in ("name", "exclude_prefix", "exclude_name"):
        if (texts := _texts(asked.get(key), f"event.{key}")) is not None:
            out[key] = texts
    return out


def _resource(asked: Any, kind: str) -> dict | None:
    if not isinstance(asked, dict):
        return None
    out: dict = {}
    for key in RESOURCE_KEYS[kind]:
        if key == "labels" and isinstance(asked.get(key), dict):
            labels = asked[key]
            if len(labels) > MAX_LABELS or any(
                len(_texts(v, f"{kind}.labels") or []) > MAX_LABEL_VALUES for v in labels.values()
            ):
                raise OutOfBounds(f"{kind}.labels takes at most {MAX_LABELS} labels of at most {MAX_LABEL_VALUES} values each")
            out[key] = {_texts(k, f"{kind}.labels")[0]: _texts(v, f"{kind}.labels") for k, v in labels.items()}
        elif (texts := _texts(asked.get(key), f"{kind}.{key}")) is not None:
            out[key] = texts
    return out or None


def _mine(account: Account) -> str:
    return f"prefect.tag.{REQUESTED_BY}{account.name}"


def scoped(asked: Any, account: Account) -> dict:
    """The filter passed on for ``account``, made from the one ``asked``; OutOfBounds when it is malformed."""
    asked = asked if isinstance(asked, dict) else {}
    out: dict = {"event": _names(asked.get("event"))}
    occurred = asked.get("occurred")
    if isinstance(occurred, dict):
        # within the years every time the gate passes on keeps (from year 1 Prefect's counts answer 500)
        out["occurred"] = bounds.query({k: occurred[k] for k in ("since", "until") if occurred.get(k) is not None})
    if asked.get("order") in ("ASC", "DESC"):
        out["order"] = asked["order"]
    if isinstance(asked.get("id"), dict) and (ids := _texts(asked["id"].get("id"), "id.id")) is not None:
        out["id"] = {"id": ids}
    for kind in ("resource", "any_resource"):
        if (kept := _resource(asked.get(kind), kind)) is not None:
            out[kind] = kept
    related = asked.get("related")
    related = [r for r in (related if isinstance(related, list) else [related]) if isinstance(r, dict)]
    if len(related) > MAX_RELATED:
        raise OutOfBounds(f"related takes at most {MAX_RELATED} resource filters")
    related = [kept for r in related if (kept := _resource(r, "related")) is not None]
    if account.role == ANALYST and {"id": [_mine(account)]} not in related:  # (a next page's token holds it already)
        related.append({"id": [_mine(account)]})
    if related:
        out["related"] = related
    return out


def query(body: dict, account: Account) -> dict:
    """``POST /api/events/filter``'s body passed on."""
    limit = body.get("limit")
    page = bounds.EVENTS_PAGE
    limit = min(limit, page) if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0 else page
    return {"filter": scoped(body.get("filter"), account), "limit": limit}


def count(body: dict, account: Account) -> dict:
    """``POST /api/events/count-by/{countable}``'s body passed on (Prefect bounds the number of buckets)."""
    out: dict = {"filter": scoped(body.get("filter"), account)}
    if isinstance(body.get("time_unit"), str):
        out["time_unit"] = body["time_unit"]
    if body.get("time_interval") is not None:  # a bucket of a million weeks ends past year 9999: Prefect's 500
        out["time_interval"] = bounds.held("time_interval", body["time_interval"])
    return out


def page_token(token: str, account: Account) -> str:
    """The next page's token (as the URL carries it) with its filter rebuilt; OutOfBounds if it is not one."""
    try:
        inner = base64.b64decode(token.encode(), validate=True)
        doc = bounds.loads(base64.b64decode(inner, validate=True))
    except (binascii.Error, ValueError, UnicodeError, RecursionError):
        raise OutOfBounds("the page token is not one the gate answered") from None
    numbers = ("count", "page_size", "offset")
    if bounds.unfit(doc) is not None or not isinstance(doc, dict) or any(doc.get(k) is None for k in numbers):
        raise OutOfBounds("the page token is not one the gate answered")
    count, size, offset = (bounds.held(k, doc[k]) for k in numbers)  # offset: past SQLite's whole numbers, a 500
    rebuilt = {"filter": scoped(doc.get("filter"), account), "count": count, "page_size": size, "offset": offset}
    return base64.b64encode(base64.b64encode(json.dumps(rebuilt).encode())).decode()


def shown(page: Any, account: Account) -> Any:
    """Prefect's page of events as the caller reads it: only allowed events (an analyst's own runs'),
    each payload cut to its state change, and the next page named by the gate's own path (Prefect's names its
    own address, which only the gate reaches)."""
    if not isinstance(page, dict) or not isinstance(page.get("events"), list):
        return page
    kept = []
    for event in page["events"]:
        related = {r.get("prefect.resource.id") for r in event.get("related") or []}
        if not str(event.get("event", "")).startswith(ALLOWED):
            continue
        if account.role == ANALYST and _mine(account) not in related:
            continue
        payload = event.get("payload") if isinstance(event.get("payload"), dict) else {}
        cut = {k: payload[k] for k in PAYLOAD if k in payload}
        for key in ("initial_state", "validated_state"):
            if isinstance(cut.get(key), dict):
                cut[key] = {k: cut[key][k] for k in STATE if k in cut[key]}
        kept.append(event | {"payload": cut})
    following = page.get("next_page")
    if isinstance(following, str):
        parts = urlsplit(following)
        following = f"{NEXT}?{parts.query}" if parts.path.endswith(NEXT) and parts.query else None
    return page | {"events": kept} | ({"next_page": following} if "next_page" in page else {})
