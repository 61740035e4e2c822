"""Neighbouring relations as typed values: what a DP guarantee is stated under, stored as a code.

A DP cost holds its adjacency (``privrelease.core.privacy.cost.DPCost``), and a dataset's charges must all be
under one: the ledger compares the typed values, never the words, so rewording a sentence cannot
lock a dataset out. Each value has a ``code`` (what the ledger stores), the ``sentence`` the manifest,
the report and ``ledger totals`` show (exactly the words used before codes), and its privacy
``unit`` (what a registered dataset's unit must be for the guarantee to hold).

``read`` takes what a ledger row holds: a code, or a sentence written before codes (each known
sentence maps to its value); a text that is neither stays what it was, an adjacency known only by
its words (``Described``), equal only to the same words, as every adjacency was compared before.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class ReplaceRecord:
    """Neighbours differ in one record, replaced by another; the number of records is public."""

    code: ClassVar[str] = "replace-record"
    unit: ClassVar[str] = "record"

    @property
    def sentence(self) -> str:
        return "replace one record (the number of records N is public)"


@dataclass(frozen=True)
class AddRemoveUser:
    """Neighbours differ by all the records of one user (those sharing a ``column`` value), added or removed."""

    column: str
    unit: ClassVar[str] = "user"

    def __post_init__(self) -> None:
        if not self.column:
            raise ValueError("add or remove one user: the column naming each user is needed")

    @property
    def code(self) -> str:
        return f"add-remove-user:{self.column}"

    @property
    def sentence(self) -> str:
        return f"add or remove one user (all records sharing a {self.column!r} value)"


@dataclass(frozen=True)
class ReplaceMessage:
    """Neighbours differ in one message, replaced by another; each user's number of messages is public."""

    code: ClassVar[str] = "replace-message"
    unit: ClassVar[str] = "message"

    @property
    def sentence(self) -> str:
        return "replace one message (each user's number of messages is public)"


@dataclass(frozen=True)
class Described:
    """An adjacency read from a ledger row that names none of the above: known only by its words."""

    text: str
    unit: ClassVar[str] = "unknown"

    @property
    def code(self) -> str:
        return self.text

    @property
    def sentence(self) -> str:
        return self.text


Adjacency = ReplaceRecord | AddRemoveUser | ReplaceMessage  # what a DP cost is stated under
Read = Adjacency | Described  # what a ledger row may hold

_USER_SENTENCE = re.compile(r"add or remove one user \(all records sharing a (.+) value\)")


def read(stored: str) -> Read:
    """The typed value of what a ledger row's ``adjacency`` holds: a code, or a sentence from before codes."""
    for value in (ReplaceRecord(), ReplaceMessage()):
        if stored in (value.code, value.sentence):
            return value
    if stored.startswith("add-remove-user:") and stored[len("add-remove-user:") :]:
        return AddRemoveUser(stored[len("add-remove-user:") :])
    found = _USER_SENTENCE.fullmatch(stored)
    if found:
        try:
            column = ast.literal_eval(found.group(1))
        except (ValueError, SyntaxError):
            column = None
        if isinstance(column, str) and column and AddRemoveUser(column).sentence == stored:
            return AddRemoveUser(column)
    return Described(stored)
