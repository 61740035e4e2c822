"""The gate's own answers (rows of ``privrelease.gate.access`` with ``answer=``): never passed on as asked. Public
values the UI asks for on every page, Prefect's health and UI settings read at most every few seconds for
everyone, and the next page of events from a token whose filter the gate rebuilds.
"""

from __future__ import annotations

import importlib.metadata
import time
import weakref
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import anyio

from privrelease.gate import bounds, events
from privrelease.gate.call import Call, Records, Refused, says

PUBLIC_SETTINGS = {"server": {"ui": {"show_promotional_content": False}}}


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
