"""Sign-ins, throttled per name and per address before anything else is looked at, and addresses that keep
failing banned for longer and longer (fail2ban's escalation).

Each name and each address has a leaky bucket: a sign-in that is checked adds one when the check starts
(``charge``), a right password takes it out again (``cleared``), and the bucket leaks one every
``LEAK_S`` seconds. So the checks in progress count as failures until they are answered: an address that
sends a hundred guesses at once has ``CAPACITY`` of them checked, not a hundred. A full bucket refuses the
next sign-in with 429 and a Retry-After, whatever its password (a right one too, remembered or not), before
its name is looked up or its password hashed. A name's full bucket does not lock its owner out: it refuses
only addresses that have themselves failed a sign-in recently, so a guesser needs a fresh address per
guess, and the owner (from an address without failures) still signs in.

Each failure that leaves an address throttled earns it a strike, and it is banned for ``LEAK_S`` seconds
times two to the power of its strikes less one (1, 2, 4, 8 ... minutes), at most ``BAN_MAX_S``; strikes
are forgotten ``FORGET_S`` seconds after the last one; the address's bucket stays full until its ban ends.
From one address a guesser therefore gets 3 guesses, then one after a minute, one after two more, four
more, and so on up to one an hour. A failure at a name whose own bucket is full earns a strike too, so guessers
sharing a name over several addresses each climb the same ladder (one address per guess is not enough: each
address's next guess waits a minute, then two, four ...). At most
``MAX_KEYS`` buckets and as many bans are kept, the least recently used dropped first.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict

CAPACITY = 3.0  # sign-ins (failed, or being checked) before the next one waits
LEAK_S = 60.0  # seconds for one failed sign-in to leak out
BAN_MAX_S = 3600.0  # the longest ban an address earns
FORGET_S = 86_400.0  # an address's strikes are forgotten this long after its last one
MAX_KEYS = 10_000  # buckets kept (names and addresses), and bans; about 100 bytes each


class Throttle:
    def __init__(self, capacity: float = CAPACITY, leak_s: float = LEAK_S, max_keys: int = MAX_KEYS):
        self.capacity, self.leak_s, self.max_keys = capacity, leak_s, max_keys
        self._buckets: OrderedDict[tuple[str, str], tuple[float, float]] = OrderedDict()  # key -> (level, at)
        self._bans: OrderedDict[str, tuple[int, float, float]] = OrderedDict()  # address -> (strikes, until, at)

    @staticmethod
    def _now(now: float | None) -> float:
        return time.monotonic() if now is None else now

    def _level(self, key: tuple[str, str], now: float) -> float:
        level, at = self._buckets.get(key, (0.0, now))
        return max(0.0, level - (now - at) / self.leak_s)

    def _add(self, key: tuple[str, str], amount: float, now: float) -> float:
        level = max(0.0, self._level(key, now) + amount)
        self._buckets[key] = (level, now)
        self._buckets.move_to_end(key)
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        return level

    def _strikes(self, address: str, now: float) -> tuple[int, float]:
        strikes, until, at = self._bans.get(address, (0, now, now))
        return (0, now) if now - at > FORGET_S else (strikes, until)

    def wait(self, name: str, address: str, now: float | None = None, proven: bool = False) -> int | None:
        """Seconds until ``name`` may sign in from ``address``, or None: it may now. ``proven``: the credential
        brings the gate's proof that it signed in before, so the name's bucket (guessers elsewhere) does not
        hold it back, only its own address's."""
        now = self._now(now)
        by_address = self._level(("address", address), now)
        by_name = self._level(("name", name), now) if by_address > 0 and not proven else 0.0
        over = max(by_address, by_name) - self.capacity + 1
        banned = self._strikes(address, now)[1] - now
        wait = max(over * self.leak_s, banned)
        return math.ceil(wait) if wait > 0 else None

    def failures(self, name: str, now: float | None = None) -> float:
        """The failures (and checks in progress) counted against ``name`` now."""
        return self._level(("name", name), self._now(now))

    def charge(self, name: str, address: str, now: float | None = None) -> None:
        """A sign-in of ``name`` from ``address`` is being checked: counted as failed until it is ``cleared``."""
        now = self._now(now)
        for key in (("address", address), ("name", name)):
            self._add(key, 1.0, now)

    def cleared(self, name: str, address: str, now: float | None = None) -> None:
        """The sign-in ``charge`` counted was right: its count is given back."""
        now = self._now(now)
        for key in (("address", address), ("name", name)):
            self._add(key, -1.0, now)

    def failed(self, name: str, address: str, now: float | None = None, proven: bool = False) -> int | None:
        """The sign-in ``charge`` counted was wrong: if it leaves the address throttled, a strike and a longer ban.
        The ban's seconds, or None. A ``proven`` caller's typo is judged by its own address only (the owner's
        browser, mistyping once while the name is under attack, is not banned with the guessers)."""
        now = self._now(now)
        if not self.strikes_for(None if proven else name, address, now):
            return None  # the address may still sign in, and the name was not under attack: no strike
        strikes = self._strikes(address, now)[0] + 1
        ban = min(BAN_MAX_S, self.leak_s * 2 ** min(strikes - 1, 32))
        self._bans[address] = (strikes, now + ban, now)
        self._bans.move_to_end(address)
        # the bucket full until the ban ends: then one more guess, whose failure earns the next strike
        self._buckets[("address", address)] = (self.capacity - 1 + ban / self.leak_s, now)
        while len(self._bans) > self.max_keys:
            self._bans.popitem(last=False)
        return math.ceil(ban)

    def strikes_for(self, name: str | None, address: str, now: float) -> bool:
        """Whether a failure of ``name`` from ``address`` earns the address a strike: it leaves the address's bucket
        full, or it was a guess at a name whose bucket is full (a name under attack from several addresses: each of
        them climbs the ladder, though none fills its own bucket; the independent attack on #53 found two addresses
        guessing one name once a minute each, for ever, and never banned)."""
        full = self.capacity - 1
        by_name = 0.0 if name is None else self._level(("name", name), now)  # None: the address's own only
        return self._level(("address", address), now) > full or by_name > full

    def __len__(self) -> int:
        return len(self._buckets)
