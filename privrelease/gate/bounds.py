"""What the gate bounds in every JSON body it reads, and in the read queries (Prefect's ``/filter``,
``/count``, ``/paginate`` and ``/history`` routes) it passes on.

Every body: at most ``MAX_DEPTH`` levels of nesting (deeper is refused with 400 before anything
recurses over it: Python's parser raises RecursionError near a thousand levels, Prefect's
validation earlier). A query's body is rebuilt with ``limit`` at most ``MAX_LIMIT``, lists of at
most ``MAX_LIST`` items and text filters (``like_``, ``startswith_``) of at most ``MAX_LIKE``
characters without SQL wildcards: Prefect wraps a ``like_`` value in ``%...%`` (a ``startswith_``
item in ``...%``) and hands it to ``LIKE`` unescaped, whose matching backtracks on every ``%`` a
caller adds. ``offset`` at most ``MAX_OFFSET`` and ``page`` at most ``MAX_PAGE``: past SQLite's
integers Prefect answers 500 and closes its connection, which the next caller would have been
handed. The logs' text search is refused: on SQLite Prefect's query for it fails (500) whatever
the text.

A run form's values (its parameters, and the values the UI checks against its schema) hold at
most ``MAX_FORM_VALUES`` values: they name a dataset and its settings, and Prefect's validation of
them costs its event loop time that grows faster than their number.

Every field a query may hold that Prefect turns into SQL or time arithmetic is bounded by ``FIELDS``, by
its name wherever it appears (one table; the allow-list way: what the gate cannot read as the field's
kind within its range is refused, 403 naming the field and its range). A time is parsed with the type
Prefect's server parses it with, must be text, and is passed on rewritten in ISO 8601, so that Prefect
reads the time the gate checked (pendulum also reads ordinal dates, epoch seconds and milliseconds
written as text, and "now"). Every body is read with ``loads``: numbers finite and within 64 bits, and
``unfit`` holds every string to UTF-8 (a lone surrogate, valid JSON, made Prefect's database driver
fail: 500).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from prefect.types import DateTime
from pydantic import TypeAdapter, ValidationError
from starlette.requests import Request

MAX_BODY = 1 << 20  # bytes: the largest request body passed on (a filter, a form's parameters)
MAX_DEPTH = 32  # levels of JSON nesting in any body (a release form's parameters use under 8)
MAX_NODES = 5_000  # values (objects, lists and scalars) in any body: Prefect's validation of a long list of
# errors grows with its square (19,000 wrong items held its event loop 9 s: issue #39's attack)
MAX_LIMIT = 200  # rows a query returns (Prefect's own default limit)
MAX_LIST = 500  # items of any list in a query (ids to match, states)
MAX_TAGS = 50  # items of a tag list (SQLite's JSON functions fail past 127 arguments: a 500 for everyone's next call)
MAX_LIKE = 100  # characters of a text filter
MAX_OFFSET = 100_000  # rows a query skips
MAX_PAGE = 1_000  # pages of a paginated query
MAX_FORM_VALUES = 500  # values in a run form's parameters (a release form's use under 100)
MIN_SHARE = 4  # calls in the gate at once an account may always hold, however many accounts call (privrelease.gate.fair)
MAX_INT = 2**63 - 1  # SQLite's (and Prefect's) whole numbers: past them its queries fail (500)
MAX_INTERVAL = 1000  # time units in one bucket of an events count (the UI's feed asks for 1)
EVENTS_PAGE = 50  # Prefect's page of events (INTERACTIVE_PAGE_SIZE)
TEN_YEARS = 10 * 365 * 86_400  # seconds: a runs' history's widest bucket (Prefect's last may end one bucket past 2199)
YEARS = (1970, 2200)  # a time's year lies strictly between: past them Prefect's time arithmetic overflows (500)
TIME = TypeAdapter(DateTime)  # what Prefect's server parses its times with (pendulum below Python 3.13)
TEXT_FILTERS = ("like_", "startswith_")
WILDCARDS = ("%", "\\")  # LIKE's many-character wildcard, and the escape that would smuggle one


class OutOfBounds(ValueError):
    """A query outside the bounds; its message says which and what is allowed."""


@dataclass(frozen=True)
class Bound:
    """What one field takes: a ``kind`` ("whole", "number" or "time") from ``low`` to ``high`` (a time's: years,
    strictly between); a whole number past ``cap`` is lowered to it rather than refused."""

    kind: str
    low: float
    high: float
    cap: int | None = None

    def says(self, key: str) -> str:
        if self.kind == "time":
            return (
                f"{key} takes a time between the years {self.low} and {self.high}, as ISO 8601 text (e.g. 2026-01-31T00:00:00Z)"
            )
        what = "a whole number" if self.kind == "whole" else "a number"
        return f"{key} takes {what} from {_shown(self.low)} to {_shown(self.high)}"

    def held(self, key: str, value: Any) -> Any:
        """``value`` as passed on (a time in ISO 8601, a whole number capped); OutOfBounds when it is not held."""
        if self.kind == "time" and isinstance(value, str):
            try:
                when = TIME.validate_python(value)
            except (ValidationError, ValueError, OverflowError):
                when = None
            if when is not None and self.low < when.year < self.high:
                return when.isoformat()
        elif self.kind != "time" and isinstance(value, int | float) and not isinstance(value, bool):
            if (self.kind == "number" or isinstance(value, int)) and self.low <= value <= self.high:
                return min(value, self.cap) if self.cap is not None else value
        raise OutOfBounds(f"{self.says(key)}, not {json.dumps(value)[:40]}")


def _shown(number: float) -> str:
    return f"{int(number):,}" if number == int(number) else str(number)


# Each field a query may hold that Prefect turns into SQL or time arithmetic, by its name wherever it appears.
FIELDS: dict[str, Bound] = {
    "limit": Bound("whole", 0, MAX_INT, cap=MAX_LIMIT),  # rows a query returns: past MAX_LIMIT lowered, not refused
    "offset": Bound("whole", 0, MAX_OFFSET),  # rows skipped (a query's, and the events' page token's)
    "page": Bound("whole", 0, MAX_PAGE),
    "ge_": Bound("whole", 0, MAX_INT), "le_": Bound("whole", 0, MAX_INT),  # a log level, a concurrency limit
    "history_interval_seconds": Bound("number", 1, TEN_YEARS),  # a runs' history bucket (Prefect: at least 1 s)
    "time_interval": Bound("number", 0.01, MAX_INTERVAL),  # time units in an events count's bucket
    "page_size": Bound("whole", 0, EVENTS_PAGE), "count": Bound("whole", 0, MAX_INT),  # the events' page token
    **{key: Bound("time", *YEARS) for key in ("after_", "before_", "since", "until", "history_start", "history_end")},
}  # fmt: skip


def held(key: str, value: Any) -> Any:
    """``value`` of the field ``key`` as passed on; OutOfBounds naming the field and its range when not held."""
    return FIELDS[key].held(key, value)


def loads(text: bytes | str) -> Any:
    """A JSON body as the gate reads it: numbers finite and within 64 bits (1e999 is read as infinity, and sent on
    as Infinity; a whole number past SQLite's fails Prefect's query); ValueError saying why it is not read."""
    try:
        return json.loads(text, parse_constant=_constant, parse_float=_float, parse_int=_whole)
    except json.JSONDecodeError:
        raise ValueError("the body is not JSON") from None
    except UnicodeDecodeError:
        raise ValueError("the body is not JSON: it is not UTF-8 text") from None


def _constant(name: str) -> None:
    raise ValueError(f"the body is not JSON: {name} is not a JSON number")


def _float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"the body's number {text[:40]} is past a 64-bit float's range: send finite numbers")
    return number


def _whole(text: str) -> int:
    if len(text.lstrip("-")) > 19 or not -MAX_INT - 1 <= int(text) <= MAX_INT:
        raise ValueError(f"the body's number {text[:40]} is past 64 bits: whole numbers lie within ±{MAX_INT}")
    return int(text)


async def body(request: Request) -> bytes | None:
    """The request body, or None past MAX_BODY bytes (read no further)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def depth(value: Any) -> int:
    """How deeply ``value`` nests (a scalar: 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            deepest = max(deepest, level + 1)
            stack.extend((child, level + 1) for child in node)
    return deepest


def _held(value: Any):
    """Every value ``value`` holds, itself included (without recursion)."""
    stack = [value]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def nodes(value: Any) -> int:
    """How many values ``value`` holds, itself included."""
    return sum(1 for _ in _held(value))


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate ("\udfff"): Python's JSON parser keeps it
        return False
    return True


def unfit(value: Any) -> str | None:
    """Why a JSON body ``value`` is refused (400): its nesting, its size in values, or a string (a key, a value) that
    is not text (a lone surrogate); None: it is not."""
    found = depth(value)
    if found > MAX_DEPTH:
        return f"the JSON body nests {found} levels deep; at most {MAX_DEPTH} are allowed"
    many = nodes(value)
    if many > MAX_NODES:
        return f"the JSON body holds {many} values; at most {MAX_NODES} are allowed"
    for node in _held(value):
        for text in node if isinstance(node, dict) else [node] if isinstance(node, str) else []:  # keys, strings
            if not text.isascii() and not _utf8(text):
                return (
                    f"the JSON body holds a string that is not UTF-8 text ({ascii(text[:40])}, a lone surrogate): send text only"
                )
    return None


def query(doc: Any) -> Any:
    """A read query's body within the bounds (``FIELDS``; ``limit`` lowered to ``MAX_LIMIT``); raises OutOfBounds."""
    if isinstance(doc, list):
        if len(doc) > MAX_LIST:
            raise OutOfBounds(f"a list in a query may hold at most {MAX_LIST} items, not {len(doc)}")
        return [query(x) for x in doc]
    if not isinstance(doc, dict):
        return doc
    out: dict = {}
    for key, value in doc.items():
        if key == "tags" and isinstance(value, dict) and any(isinstance(v, list) and len(v) > MAX_TAGS for v in value.values()):
            raise OutOfBounds(f"a tag filter may list at most {MAX_TAGS} tags")
        if key in FIELDS and value is not None:  # None: the field is not asked (or Prefect refuses it, 422)
            out[key] = held(key, value)
        elif key == "logs" and isinstance(value, dict) and value.get("text") is not None:
            raise OutOfBounds("the logs' text search does not work on this server's database: filter by run or level instead")
        elif key in TEXT_FILTERS and value is not None:
            texts = value if isinstance(value, list) and len(value) <= MAX_LIST else [value]  # startswith_: a list
            if not all(isinstance(t, str) and len(t) <= MAX_LIKE and not any(w in t for w in WILDCARDS) for t in texts):
                raise OutOfBounds(
                    f"{key} takes text of at most {MAX_LIKE} characters without {' or '.join(repr(w) for w in WILDCARDS)}"
                )
            out[key] = value
        else:
            out[key] = query(value)
    return out


# The URL query parameters the gate passes on, and what each is read as (the routes the access table passes name no
# other: the UI's run graph asks `since`, its state lists a run's id); every other parameter is dropped.
QUERY = {"since": "time", "flow_run_id": "id", "task_run_id": "id"}


def url_query(asked: Mapping[str, str]) -> dict[str, str]:
    """The URL's query parameters as passed on: those of ``QUERY`` only, an id read as a UUID and a time as in a body
    (``FIELDS``), passed on in UTC (Prefect reads a URL's time as a plain datetime: one without a zone, or whose zone
    took it past year 1 or 9999, made its comparison or arithmetic fail, 500); OutOfBounds naming one not held."""
    out = {}
    for key, kind in QUERY.items():
        value = asked.get(key)
        if value is None:
            continue
        if kind == "id":
            try:
                out[key] = str(uuid.UUID(value))
            except ValueError:
                raise OutOfBounds(f"{key} takes a run's id (a UUID), not {json.dumps(value)[:40]}") from None
        else:
            when = TIME.validate_python(held(key, value))
            out[key] = (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC).isoformat()
    return out


def placeholders(value) -> bool:
    """Whether a JSON value holds an object Prefect's server would resolve (``__prefect_kind``: a workspace
    variable, a Jinja template, a JSON string) after the gate has decided on what it saw."""
    if isinstance(value, dict):
        return "__prefect_kind" in value or any(placeholders(v) for v in value.values())
    if isinstance(value, list):
        return any(placeholders(v) for v in value)
    return False
