"""Calls in the gate at once, bounded per account and in all, and the total shared fairly.

Each signed-in call holds one of the gate's slots until it is answered (its reads of Prefect, or of the
catalogue, included). An account may hold at most ``per_account`` (``$PRIVRELEASE_ACCOUNT_CALLS``; a
browser opens at most 6 connections to one host), and everyone together at most ``total``
(``$PRIVRELEASE_GATE_CALLS``: Prefect's one process and SQLite, and the gate's threads, work on what
is in progress together; nine accounts at 16 each slowed a 12 ms read to 2.7 s and made Prefect answer
500 in issue #39's fifth attack). While ``k`` accounts have calls in the gate (the asker counted), each may hold at most its
share, ``ceil(total / k)`` and at least ``bounds.MIN_SHARE``; past it, or past the total, a call is
refused at once (429, Retry-After: 1; no queue holds the proxy's connections). An account holding fewer
than ``bounds.MIN_SHARE`` calls is let in even when the total is reached, so that a flood of other
accounts never shuts anyone out (a page of the UI makes a few calls at once): the total is exceeded only
while more than ``total / MIN_SHARE`` accounts call, and then by at most ``MIN_SHARE`` calls of each.
"""

from __future__ import annotations

import math

from privrelease.gate import bounds


class Slots:
    def __init__(self, total: int, per_account: int):
        self.total, self.per_account = total, per_account
        self._held: dict[str, int] = {}  # calls in the gate, per account (only accounts with some)

    def held(self, account: str | None = None) -> int:
        """Calls in the gate: the account's, or everyone's."""
        return self._held.get(account, 0) if account is not None else sum(self._held.values())

    def share(self, account: str) -> int:
        """The most calls ``account`` may hold while the accounts in the gate now (and it) call."""
        active = len(self._held) + (account not in self._held)
        return min(self.per_account, max(bounds.MIN_SHARE, math.ceil(self.total / active)))

    def take(self, account: str) -> str | None:
        """Take a slot for one call of ``account``; None if taken, else why not (a message saying what to do)."""
        mine, everyone = self.held(account), self.held()
        if mine >= self.per_account:
            return f"{self.per_account} of your calls are in progress already; try again when they are answered"
        if mine >= self.share(account):
            return (
                f"{mine} of your calls are in progress already: your share while {len(self._held)} accounts call "
                f"(at most {self.total} calls in all); try again when they are answered"
            )
        if mine >= bounds.MIN_SHARE and everyone >= self.total:
            return f"{everyone} calls are in progress, the most at once for everyone; try again when yours are answered"
        self._held[account] = mine + 1
        return None

    def give(self, account: str) -> None:
        """Give back a slot ``take`` gave."""
        left = self._held[account] - 1
        if left:
            self._held[account] = left
        else:
            del self._held[account]
