"""Failed sign-ins, throttled per name and per address before any password is hashed.

Each name and each address has a leaky bucket: a failed sign-in adds one, and the bucket leaks one
every ``LEAK_S`` seconds. A full bucket (``CAPACITY``) refuses the next attempt with 429 and a
Retry-After before its password is hashed (an Argon2id hash costs 64 MiB and tens of milliseconds of
a core, so a flood of wrong passwords would otherwise queue the right ones behind it). A name's full
bucket does not lock its owner out: it refuses only addresses that have themselves failed a sign-in
recently, so a guesser needs a fresh address per guess, and the owner (from an address without
failures) still signs in. A sign-in the gate checked before skips the hash and the throttle. At most
``MAX_KEYS`` buckets are kept, the least recently used dropped first.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict

CAPACITY = 3.0  # failed sign-ins before the next one waits
LEAK_S = 60.0  # seconds for one failed sign-in to leak out
MAX_KEYS = 10_000  # buckets kept (names and addresses); about 100 bytes each


class Throttle:
    def __init__(self, capacity: float = CAPACITY, leak_s: float = LEAK_S, max_keys: int = MAX_KEYS):
        self.capacity, self.leak_s, self.max_keys = capacity, leak_s, max_keys
        self._buckets: OrderedDict[tuple[str, str], tuple[float, float]] = OrderedDict()  # key -> (level, at)

    def _level(self, key: tuple[str, str], now: float) -> float:
        level, at = self._buckets.get(key, (0.0, now))
        return max(0.0, level - (now - at) / self.leak_s)

    def wait(self, name: str, address: str, now: float | None = None) -> int | None:
        """Seconds until ``name`` may try again from ``address``, or None: it may try now."""
        now = time.monotonic() if now is None else now
        by_address = self._level(("address", address), now)
        by_name = self._level(("name", name), now) if by_address > 0 else 0.0
        over = max(by_address, by_name) - self.capacity + 1
        return math.ceil(over * self.leak_s) if over > 0 else None

    def failed(self, name: str, address: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for key in (("address", address), ("name", name)):
            self._buckets[key] = (self._level(key, now) + 1, now)
            self._buckets.move_to_end(key)
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)

    def __len__(self) -> int:
        return len(self._buckets)
