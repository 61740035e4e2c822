"""Signing in: a name and a password checked, in an order that holds against guessing and lock-out.

1. The throttle (``privrelease.gate.throttle``): a throttled or banned address, or a name throttled for an address that
   failed, is refused (429 and a Retry-After) whatever it sends, a right password remembered from before too.
2. A password this gate checked right before, for an account that has not changed since, is let in without a
   second hash (a keyed digest of the name and password is kept, one per account).
3. The same name and password already being checked (a page's first calls, sent at once): the call waits
   for that check's answer instead of hashing again.
4. The name, looked up by a keyed digest (HMAC-SHA256 under a key made at the start) among the accounts,
   reread every ``ACCOUNTS_TTL_S`` seconds. The check is counted by the throttle from here until it is
   answered (a right password gives the count back), so an address gets ``throttle.CAPACITY`` checks at
   once, however many it sends.
   - A name no account has is never hashed: the call waits about as long as a check of a real name takes
     now (a draw from the last ``SAMPLES`` checks' times, plus the wait for a free check) and is refused
     like a wrong password (401). At most ``STRANGERS_WAITING`` such calls wait at once; the rest are
     refused at once (429), so strangers hold few of the proxy's connections and none of the checks.
   - A name an account has is hashed (Argon2id, 64 MiB) in its own lane: one check of a name at a time, and
     one more waiting (past that 429 at once), ``NAMES_WAITING`` in all; ``HASHES_AT_ONCE`` checks at once in
     all (``Turns``), names without failures first, then the others first come first served. Only the names of
     accounts take these, so a flood delays a sign-in of a name that has not failed by the check in progress
     (and the few names no one has failed yet), and the memory of ``HASHES_AT_ONCE`` hashes is the most the
     checks take.

Under a flood of strangers that fills their share, a stranger is refused at once (429) while a real name is
checked: the same answer and timing for both holds while the share is not full.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import secrets
import statistics
import time
from collections import deque
from dataclasses import dataclass

import anyio
import anyio.to_thread

from privrelease.gate.accounts import Account, Accounts, decoy, matches
from privrelease.gate.throttle import Throttle

HASHES_AT_ONCE = 1  # Argon2id checks at once (64 MiB each), in all: one already works on 4 threads (its parallelism)
NAME_WAITING = 2  # sign-ins of one name being checked or waiting for it; more are refused (429) at once
NAMES_WAITING = 32  # sign-ins of names accounts have, being checked or waiting, in all; more are refused (429) at once
STRANGERS_WAITING = 32  # sign-ins of names no account has, waiting as long as a check takes; more are refused
ACCOUNTS_TTL_S = 2.0  # a removed account is refused within this time
SAMPLES = 16  # the last checks' times a stranger's wait is drawn from
log = logging.getLogger("privrelease.gate")


@dataclass(frozen=True)
class Refusal:
    """Not checked now: 429 with this message, and Retry-After ``wait`` seconds."""

    wait: int
    message: str


BUSY = Refusal(1, "too many sign-ins are being checked; try again in a second")
INTERRUPTED = Refusal(1, "the sign-in was interrupted before it was checked; try again")


class _Pending:
    """A check in progress, and its answer once there is one."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.answer: Account | Refusal | None = INTERRUPTED


class Turns:
    """Turns to check a password, ``at_once`` at a time; a call waiting for one is served first from the line of
    names without failures (a real person's first sign-in, most likely), then from the line of names that failed."""

    def __init__(self, at_once: int):
        self.free = at_once
        self.lines: tuple[deque[anyio.Event], deque[anyio.Event]] = (deque(), deque())

    def waiting(self) -> int:
        return len(self.lines[0]) + len(self.lines[1])

    @contextlib.asynccontextmanager
    async def turn(self, clean: bool):
        if self.free and not self.waiting():
            self.free -= 1
        else:
            called, line = anyio.Event(), self.lines[0 if clean else 1]
            line.append(called)
            try:
                await called.wait()  # the turn is handed over by the call before (``_next``)
            except BaseException:
                line.remove(called) if called in line else self._next()  # gone before its turn, or with it
                raise
        try:
            yield
        finally:
            self._next()

    def _next(self) -> None:
        for line in self.lines:
            if line:
                line.popleft().set()
                return
        self.free += 1


class SignIn:
    def __init__(self, accounts: Accounts):
        self.accounts = accounts
        self.throttle = Throttle()
        self._key = secrets.token_bytes(32)
        self._names: dict[bytes, Account] = {}  # keyed digest of a name -> its account
        self._loaded = -ACCOUNTS_TTL_S
        self._loading = anyio.Lock()
        self._verified: dict[str, tuple[bytes, str]] = {}  # name -> (keyed digest of name and password, hash matched)
        self._pending: dict[bytes, _Pending] = {}  # keyed digest of name and password -> its check in progress
        self._asked: dict[str, int] = {}  # sign-ins of a name being checked or waiting, per name with some
        self._lanes: dict[str, anyio.Lock] = {}  # one check of a name at a time (names of accounts only)
        self._turns = Turns(HASHES_AT_ONCE)
        self._strangers = self._named = 0
        self._times: deque[float] = deque(maxlen=SAMPLES)  # seconds the last checks took, in their thread
        self._timing = anyio.Lock()

    def _digest(self, *parts: str) -> bytes:
        return hmac.new(self._key, "\0".join(parts).encode(), hashlib.sha256).digest()

    def load(self) -> dict[bytes, Account]:
        """The accounts by their names' keyed digests, as the store holds them now."""
        return {self._digest(a.name): a for a in self.accounts.all()}

    async def _accounts(self) -> dict[bytes, Account]:
        """The accounts, reread in a thread at most every ACCOUNTS_TTL_S seconds, by one call at a time."""
        if time.monotonic() - self._loaded > ACCOUNTS_TTL_S:
            async with self._loading:
                if time.monotonic() - self._loaded > ACCOUNTS_TTL_S:
                    self._names = await anyio.to_thread.run_sync(self.load)
                    self._loaded = time.monotonic()
        return self._names

    async def check(self, name: str, password: str, address: str, proven: bool = False) -> Account | Refusal | None:
        """The account ``name`` signs in to from ``address`` with ``password``; None: a wrong name or password;
        a Refusal: not checked now. ``proven``: the caller brings this gate's proof that this very credential signed
        in before (the cookie the proxy checks: OWASP's device cookie), which no guesser has: it has a place of its own
        in the name's lane and the first line of turns, so a flood of guesses at the name does not lock its owner's
        browser out (the independent attack on #53, F2: 25-60 addresses kept an account's first sign-in after a
        restart refused for as long as they went on)."""
        account = (await self._accounts()).get(self._digest(name))
        # from here to the throttle's count of this check (``_checked``), nothing awaits: no other call comes between
        wait = self.throttle.wait(name, address, proven=proven)
        if wait is not None:
            return Refusal(wait, f"too many failed sign-ins for this name or from this address; try again in {wait} seconds")
        digest = self._digest(name, password)
        if account is not None and self._verified.get(name) == (digest, account.hash):
            return account  # checked before, and the account is unchanged
        pending = self._pending.get(digest)
        if pending is not None:
            await pending.done.wait()
            return pending.answer
        room = int(proven)  # a proven credential's own place, past the guessers' share
        if self._asked.get(name, 0) >= NAME_WAITING + room or (
            self._strangers >= STRANGERS_WAITING if account is None else self._named >= NAMES_WAITING + room
        ):
            return BUSY
        return await self._checked(name, password, address, account, digest, proven)

    async def _checked(
        self, name: str, password: str, address: str, account: Account | None, digest: bytes, proven: bool = False
    ):
        self.throttle.charge(name, address)
        self._asked[name] = self._asked.get(name, 0) + 1
        pending = self._pending[digest] = _Pending()
        try:
            right = await (self._hashed(name, password, account, proven) if account else self._stranger())
            pending.answer = account if right else None
        finally:
            self._asked[name] -= 1
            if not self._asked[name]:
                del self._asked[name]
                self._lanes.pop(name, None)
            del self._pending[digest]
            pending.done.set()
        if not right:
            banned = self.throttle.failed(name, address, proven=proven)
            log.warning("failed sign-in: name %r from %s%s", name[:64], address, f"; address banned {banned} s" if banned else "")
            return None
        self.throttle.cleared(name, address)
        self._verified[name] = (digest, account.hash)
        return account

    def _timed(self, hashed: str, password: str) -> bool:
        started = time.perf_counter()
        try:
            return matches(hashed, password)
        finally:
            self._times.append(time.perf_counter() - started)

    async def _hashed(self, name: str, password: str, account: Account, proven: bool = False) -> bool:
        self._named += 1
        try:
            async with self._lanes.setdefault(name, anyio.Lock()):
                clean = proven or self.throttle.failures(name) <= 1  # no failure but this check's own count
                async with self._turns.turn(clean):
                    return await anyio.to_thread.run_sync(self._timed, account.hash, password)
        finally:
            self._named -= 1

    async def _stranger(self) -> bool:
        """A name no account has: refused after about the time a check would take, without one."""
        self._strangers += 1
        try:
            await anyio.sleep(await self.check_time())
            return False
        finally:
            self._strangers -= 1

    async def check_time(self) -> float:
        """How long a check of a real name would take now: one of the last checks' times, and the wait for a free
        check. Before any check was made, one is made of the decoy (once) to measure it."""
        if not self._times:
            async with self._timing:
                if not self._times:
                    async with self._turns.turn(clean=True):
                        await anyio.to_thread.run_sync(self._timed, decoy(), "")
        one = secrets.choice(list(self._times))
        return one + statistics.median(self._times) * self._turns.waiting() / HASHES_AT_ONCE
