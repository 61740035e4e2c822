"""What the rows of ``privrelease.gate.policy`` call: conditions (``when=``), body rewrites (``body=``) and the
gate's own answers (``answer=``).

Each gets a ``Call``: the caller's account, the route's parameters (the named parts of the row's
template, e.g. ``{id}``, as the path filled them in) and Prefect's records, read with the operator's
credential. A condition is an async test of the call; a rewrite makes the body passed on from the
body asked (or says, as a string, why it is refused); a reply makes the answer passed back from
Prefect's; an answer is the JSON the gate returns itself (or raises ``Refused``). Each carries
``says``: its words in the docs' policy table and in the gate's refusals.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

import anyio

from privrelease.core import limits
from privrelease.core.params import ID_PATTERN
from privrelease.core.people import PUBLISHES, REQUESTED_BY
from privrelease.gate import bounds, events, schemas
from privrelease.gate.accounts import Account

MAX_NAME = 100  # a run's name: shown on every page that lists it, copied into its logs and events


class Records(Protocol):
    catalogue: Any  # the home's published releases and registered datasets (privrelease.core.release.catalogue.Catalogue)

    async def read(self, path: str) -> Any | None:
        """GET ``path`` of Prefect's server with the operator's credential: its JSON, None unless it is found."""

    async def find(self, path: str, body: dict) -> Any | None:
        """POST ``body`` (a query) to ``path`` with the operator's credential: its JSON, None unless it is found."""


@dataclass(frozen=True)
class Call:
    account: Account | None  # None: a caller without credentials (only rows open to "anyone")
    params: Mapping[str, str]  # the route template's parameters, from the path
    prefect: Records
    query: Mapping[str, str] = field(default_factory=dict)  # the URL's query parameters
    referer: str = ""  # the page the browser made the call from (its Referer header), if it names one


class Refused(Exception):
    """An answer's refusal: the gate answers ``status`` with ``message``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


Condition = Callable[[Call], Awaitable[bool]]
Rewrite = Callable[[dict, Call], Awaitable[dict | str]]
Reply = Callable[[Any, Call], Any]
Answer = Callable[[Call], Awaitable[Any]]
PUBLIC_SETTINGS = {"server": {"ui": {"show_promotional_content": False}}}


def says(words: str):
    """Give a condition, a rewrite or an answer its words (the docs' table, the gate's refusals)."""

    def mark(fn):
        fn.says = words
        return fn

    return mark


def _tag(call: Call) -> str:
    assert call.account is not None  # conditions and rewrites are only on rows for people
    return f"{REQUESTED_BY}{call.account.name}"


# -- conditions: checked against Prefect's own records ------------------------------------------------


def deployment_in(names: Iterable[str]) -> Condition:
    """The deployment ``{id}`` is one of ``names``."""
    names = tuple(names)
    listed = ", ".join(f"`{n}`" for n in names)

    @says(f"the deployment is {listed}" if len(names) == 1 else f"the deployment is one of {listed}")
    async def holds(call: Call) -> bool:
        deployment = await call.prefect.read(f"/api/deployments/{call.params['id']}")
        return deployment is not None and deployment["name"] in names

    return holds


async def _run(call: Call) -> tuple[dict | None, bool]:
    """The flow run ``{id}``, and whether the caller started it through the gate (its requester tag)."""
    run = await call.prefect.read(f"/api/flow_runs/{call.params['id']}")
    return run, run is not None and _tag(call) in run.get("tags", [])


@says(f"the run is the caller's own (tagged `{REQUESTED_BY}<account>`)")
async def own_run(call: Call) -> bool:
    _, mine = await _run(call)
    return mine


@says("the run is paused for approval and is not the caller's own")
async def awaits_approval(call: Call) -> bool:
    run, mine = await _run(call)
    return run is not None and not mine and run["state"]["type"] == "PAUSED"


# -- rewrites: the body passed on is made from the body asked --------------------------------------------


def release_id(asked: object, call: Call) -> str | None:
    """A release id the caller chose, in their own namespace: ``<account>.<id>`` (kept if it is already theirs),
    so no one takes an id another account's scheduled run will use. None: not an id the gate passes on."""
    assert call.account is not None
    mine = f"{call.account.name}."
    if not isinstance(asked, str):
        return None
    named = asked if asked.startswith(mine) else mine + asked
    own = named.removeprefix(mine)
    return named if own and "." not in own and re.fullmatch(ID_PATTERN, named) else None


async def unnamed(parameters: dict, call: Call) -> list[str]:
    """The parameters the deployment ``{id}``'s form does not name (Prefect's schema check lets them through,
    and they would be stored with the run and fail it only when it starts, holding a slot until then)."""
    deployment = await call.prefect.read(f"/api/deployments/{call.params['id']}")
    named = ((deployment or {}).get("parameter_openapi_schema") or {}).get("properties") or {}
    return sorted(set(parameters) - set(named))


@says(
    "passes on only the parameters the form names (checked against its schema), a printable name and a "
    f"scheduled time; a chosen release id becomes `<account>.<id>`; tags the run `{REQUESTED_BY}<account>` (and "
    f"`{PUBLISHES}` unless it is a preview)"
)
async def start_run(body: dict, call: Call) -> dict | str:
    """A run of a deployment: no tags, job variables, work queue or ``enforce_parameter_schema: false`` of
    the caller's; the release flow records the requester tag in the ledger as who asked."""
    parameters = body.get("parameters", {})
    if not isinstance(parameters, dict):
        return "parameters must be an object"
    if extra := await unnamed(parameters, call):
        shown = ", ".join(repr(name[:40]) for name in extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
        return f"this form has no parameter {shown}: remove it (the form's fields are its parameters)"
    if parameters.get("release_id"):
        named = release_id(parameters["release_id"], call)
        if named is None:
            return (
                f"release_id {parameters['release_id']!r} is not allowed: use letters, digits, '_' and '-' "
                f"(the gate names it {call.account.name}.<release_id>, at most 80 characters in all)"
            )
        parameters = parameters | {"release_id": named}
    tags = [_tag(call)] + ([] if parameters.get("preview") is True else [PUBLISHES])  # the server takes only a boolean
    out: dict = {"parameters": parameters, "tags": tags, "enforce_parameter_schema": True}
    if isinstance(body.get("name"), str):
        if len(body["name"]) > MAX_NAME:
            return f"a run's name may hold at most {MAX_NAME} characters"
        if not body["name"].isprintable():
            return "a run's name may hold printable characters only (no line breaks, tabs or control characters)"
        out["name"] = body["name"]
    state = body.get("state")
    if isinstance(state, dict) and state.get("type") == "SCHEDULED":
        details = state.get("state_details")
        when = details.get("scheduled_time") if isinstance(details, dict) else None
        out["state"] = {"type": "SCHEDULED", "state_details": {"scheduled_time": when if isinstance(when, str) else None}}
    return out


@says("only a cancellation, naming who cancelled")
async def cancel(body: dict, call: Call) -> dict | str:
    assert call.account is not None
    state = body.get("state")
    if not isinstance(state, dict) or state.get("type") not in ("CANCELLING", "CANCELLED"):
        return "you may only cancel your own runs"
    return {"state": {"type": "CANCELLING", "message": f"cancelled by {call.account.name}"}}


@says("only approve true or false; the approver's name is written into the answer")
async def answer_approval(body: dict, call: Call) -> dict | str:
    assert call.account is not None
    run_input = body.get("run_input")
    if not isinstance(run_input, dict) or not isinstance(run_input.get("approve"), bool):
        return "an approval is its form's answer: approve true or false"
    return {"run_input": {"approve": run_input["approve"], "approved_by": call.account.name}}


def _within(make: Callable[..., dict], *args: Any) -> dict | str:
    """The body ``make`` builds, or why it is out of bounds."""
    try:
        return make(*args)
    except bounds.OutOfBounds as error:
        return str(error)


@says(
    f"bounded: `limit` at most {bounds.MAX_LIMIT}, lists of at most {bounds.MAX_LIST} items, "
    f"`like_` text of at most {bounds.MAX_LIKE} characters without `%`, `offset` at most {bounds.MAX_OFFSET:,}, "
    f"`page` at most {bounds.MAX_PAGE:,}; times ISO 8601 text between the years {bounds.YEARS[0]} and {bounds.YEARS[1]}, "
    "passed on as the gate read them; a history's interval 1 s to 10 years; no logs' text search"
)
async def bounded(body: dict, call: Call) -> dict | str:
    return _within(bounds.query, body)


async def _is_stored(schema: Any, call: Call) -> bool:
    """Whether ``schema`` is a deployment's parameter schema, or the answer schema of a run paused for one (the
    flow's own); the paused runs are read only when no deployment's matches."""
    found = await call.prefect.find("/api/deployments/filter", {"limit": bounds.MAX_LIMIT}) or []
    if schemas.made_of(
        schema, [d["parameter_openapi_schema"] for d in found if isinstance(d.get("parameter_openapi_schema"), dict)]
    ):
        return True
    paused = (
        await call.prefect.find(
            "/api/flow_runs/filter", {"flow_runs": {"state": {"type": {"any_": ["PAUSED"]}}}, "limit": bounds.MAX_LIMIT}
        )
        or []
    )
    for run in paused:  # a paused or suspended run's keyset names its answer schema ("paused-1-schema", "suspended-<key>-schema")
        key = ((run.get("state") or {}).get("state_details") or {}).get("run_input_keyset", {}) or {}
        value = (
            await call.prefect.read(f"/api/flow_runs/{run['id']}/input/{quote(key['schema'], safe='')}")
            if key.get("schema")
            else None
        )
        if isinstance(value, dict) and schemas.made_of(schema, [value]):
            return True
    return False


@says(
    "only a deployment's own parameter schema, or a paused run's answer schema (as the forms send them); "
    f"values of at most {bounds.MAX_FORM_VALUES} values"
)
async def stored_schema(body: dict, call: Call) -> dict | str:
    """The UI checks a run form's values against its deployment's schema, and a paused run's answer against the
    schema the flow paused with; a schema of the caller's is refused (Prefect would run the caller's regular
    expressions in its event loop), and so are values larger than a form's (Prefect's check of them takes its
    event loop for a time that grows faster than their number)."""
    if not isinstance(body.get("values"), dict):
        return "the values checked must be an object"
    kb, many = limits.configured().parameters_kb, bounds.nodes(body["values"])
    if len(json.dumps(body["values"])) > kb * 1024 or many > bounds.MAX_FORM_VALUES:
        return (
            f"the values checked hold {many} values; a form's hold at most {bounds.MAX_FORM_VALUES} values "
            f"and {kb} KB, as a run's parameters"
        )
    if not await _is_stored(body.get("schema"), call):
        return (
            "the schema checked must be a deployment's own parameter schema or a paused run's answer schema "
            "(what their forms send); a schema of your own is not checked"
        )
    return {"schema": body["schema"], "values": body["values"]}


@says(f"only flow-run, task-run and artifact events (an analyst's: of their own runs); at most {bounds.EVENTS_PAGE} a page")
async def event_query(body: dict, call: Call) -> dict | str:
    assert call.account is not None
    return _within(events.query, body, call.account)


@says("counts of the same events (the filter rebuilt as above)")
async def event_count(body: dict, call: Call) -> dict | str:
    assert call.account is not None
    return _within(events.count, body, call.account)


# -- replies: the answer passed back is made from Prefect's ---------------------------------------------


@says("each event's payload cut to its state change")
def events_shown(answer: Any, call: Call) -> Any:
    assert call.account is not None
    return events.shown(answer, call.account)


# -- answers: the gate's own, never passed on as asked ------------------------------------------------------


@says("answered by the gate: public values only (Prefect's hold the database URL)")
async def public_settings(call: Call) -> Any:
    return PUBLIC_SETTINGS


@says("answered by the gate: Prefect's version")
async def prefect_version(call: Call) -> Any:
    return importlib.metadata.version("prefect")


@says("answered by the gate: the next page of the same events (the token's filter rebuilt as above)")
async def next_events(call: Call) -> Any:
    assert call.account is not None
    try:
        token = events.page_token(call.query.get("page-token", ""), call.account)
    except bounds.OutOfBounds as error:
        raise Refused(403, f"privrelease gate: {error}") from None
    page = await call.prefect.read(f"/api/events/filter/next?page-token={quote(token, safe='')}")
    if page is None:
        raise Refused(403, "privrelease gate: the page token is not one the gate answered")
    return events.shown(page, call.account)


RECENT_SECONDS = 5.0  # how old Prefect's answer to anyone's health check and UI settings may be


@dataclass
class _Kept:
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    at: float = float("-inf")
    answer: Any = None


_KEPT: weakref.WeakKeyDictionary[Records, dict[str, _Kept]] = weakref.WeakKeyDictionary()


async def recent(call: Call, path: str) -> Any | None:
    """Prefect's answer to GET ``path`` (None unless found), read at most once every RECENT_SECONDS and kept
    for every caller: callers without credentials ask these on every page, and each call waiting for
    Prefect held one of the proxy's connections to the gate (issue #39's seventh attack, H2)."""
    kept = _KEPT.setdefault(call.prefect, {}).setdefault(path, _Kept())
    async with kept.lock:  # one read at a time; the callers waiting for it take its answer
        if time.monotonic() - kept.at > RECENT_SECONDS:
            kept.answer, kept.at = await call.prefect.read(path), time.monotonic()
    return kept.answer


@says(f"answered by the gate: Prefect's health check, read at most every {RECENT_SECONDS:.0f} s")
async def health(call: Call) -> Any:
    answer = await recent(call, "/api/health")
    if answer is None:
        raise Refused(503, "privrelease gate: Prefect's server does not answer its health check; see its log (server.log)")
    return answer


@says(
    f"answered by the gate: Prefect's UI settings (read at most every {RECENT_SECONDS:.0f} s), with its first UI only (no `/v2`)"
)
async def ui_settings(call: Call) -> Any:
    settings = await recent(call, "/ui-settings") or {}
    return settings | {"available_uis": ["v1"], "default_ui": "v1", "v2_base_url": None}
