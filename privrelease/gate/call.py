"""What a row of the gate's access table (``privrelease.gate.access``) hands its callables: a ``Call``, and how
they say what they do.

A ``Call`` holds the caller's account, the route's parameters (the named parts of the row's template, e.g.
``{id}``, as the path filled them in) and Prefect's records, read with the operator's credential. A condition
(``when=``) is an async test of the call; a rewrite (``body=``) makes the body passed on from the body asked
(or says, as a string, why it is refused); a reply (``reply=``) makes the answer passed back from Prefect's; an
answer (``answer=``) is the JSON the gate returns itself (or raises ``Refused``). Each carries ``says``: its
words in the docs' access table and in the gate's refusals. Conditions, rewrites and replies are in
``privrelease.gate.rewrites`` (calls passed on); answers in ``privrelease.gate.answers`` (calls the gate answers).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from privrelease.gate.accounts import Account


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


def says(words: str):
    """Give a condition, a rewrite or an answer its words (the docs' table, the gate's refusals)."""

    def mark(fn):
        fn.says = words
        return fn

    return mark
