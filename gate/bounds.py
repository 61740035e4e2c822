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
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

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
MIN_SHARE = 4  # calls in the gate at once an account may always hold, however many accounts call (gate.fair)
NUMBERS = ("limit", "offset", "page")  # whole numbers (a string, a float or NaN of these made Prefect answer 500)
TIMES = ("after_", "before_", "since", "until", "history_start", "history_end")  # times, within YEARS
YEARS = (1970, 2200)  # past these Prefect's time arithmetic overflows (500)
TEXT_FILTERS = ("like_", "startswith_")
WILDCARDS = ("%", "\\")  # LIKE's many-character wildcard, and the escape that would smuggle one


def _plausible(text: str) -> bool:
    """Whether ``text`` is no time, or one within YEARS in every time zone (Prefect refuses what is no time)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return True
    return YEARS[0] < when.year < YEARS[1]


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


def nodes(value: Any) -> int:
    """How many values ``value`` holds, itself included (without recursion)."""
    count, stack = 0, [value]
    while stack:
        node = stack.pop()
        count += 1
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


def too_deep(value: Any) -> str | None:
    """Why ``value`` is refused for its nesting or its size in values, or None."""
    found = depth(value)
    if found > MAX_DEPTH:
        return f"the JSON body nests {found} levels deep; at most {MAX_DEPTH} are allowed"
    many = nodes(value)
    return f"the JSON body holds {many} values; at most {MAX_NODES} are allowed" if many > MAX_NODES else None


class OutOfBounds(ValueError):
    """A query outside the bounds; its message says which and what is allowed."""


def query(doc: Any) -> Any:
    """A read query's body within the bounds (``limit`` lowered to ``MAX_LIMIT``); raises OutOfBounds."""
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
        if key == "limit" and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            out[key] = min(value, MAX_LIMIT)
        elif key in NUMBERS and value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise OutOfBounds(f"{key} takes a whole number, 0 or more, not {json.dumps(value)[:40]}")
        elif key in NUMBERS[1:] and value > (MAX_OFFSET if key == "offset" else MAX_PAGE):
            raise OutOfBounds(f"{key} may be at most {MAX_OFFSET if key == 'offset' else MAX_PAGE}, not {value}")
        elif key in TIMES and isinstance(value, str) and not _plausible(value):
            raise OutOfBounds(f"{key} takes a time between the years {YEARS[0]} and {YEARS[1]}, not {value[:40]!r}")
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


def no_constant(name: str) -> None:
    """NaN and Infinity are not JSON (Python's parser takes them; Prefect answered 500 to them)."""
    raise ValueError(f"{name} is not JSON")


def placeholders(value) -> bool:
    """Whether a JSON value holds an object Prefect's server would resolve (``__prefect_kind``: a workspace
    variable, a Jinja template, a JSON string) after the gate has decided on what it saw."""
    if isinstance(value, dict):
        return "__prefect_kind" in value or any(placeholders(v) for v in value.values())
    if isinstance(value, list):
        return any(placeholders(v) for v in value)
    return False
