"""``python -m tests.support.slow_gate``: the gate as ``python -m privrelease.gate`` starts it, with two more rows, and with
$PRIVRELEASE_TEST_LEAK_S and $PRIVRELEASE_TEST_WEAKENED changing its sign-in (the variants the attack tests run):

- ``GET /slow``, open to anyone, answered after SLOW seconds: the stand-in for any call without credentials that
  waits for Prefect (its settings or health read while it is busy, a page it answers), which holds one of the
  proxy's connections to the gate while it waits (tests/system/attacks/test_proxy_connections_and_logs.py);
- ``GET /api/slow-download``, for people: an answer streamed over DOWNLOAD_S seconds after the gate's decision, the
  stand-in for a file of the catalogue streamed from disk (tests/system/attacks/test_proxy_downloads_and_framing.py);
- $PRIVRELEASE_TEST_LEAK_S: the throttle's seconds for one failed sign-in to leak out (a test waits them);
- $PRIVRELEASE_TEST_WEAKENED: one defence of issue #53 taken out, as it was before (``WEAKENED``)."""

from __future__ import annotations

import os
import sys

import anyio
from starlette.responses import StreamingResponse

import privrelease.gate.app
from privrelease.gate import access, signin, throttle
from privrelease.gate.__main__ import main
from privrelease.gate.accounts import decoy

SLOW = 2.0
DOWNLOAD_S = 5.0  # a download's time in the gate (a large file of the catalogue on a busy disk)
_create_app = privrelease.gate.app.create_app


async def _slow(call) -> bool:
    await anyio.sleep(SLOW)
    return True


async def _slow_download(call) -> StreamingResponse:
    async def chunks():
        yield b"x" * 1024
        await anyio.sleep(DOWNLOAD_S)
        yield b"x" * 1024

    return StreamingResponse(chunks(), media_type="application/octet-stream")


class CacheFirst(signin.SignIn):
    """A password checked right before is let in before the throttle is asked (issue #53's first finding)."""

    async def check(self, name: str, password: str, address: str, proven: bool = False):
        account = (await self._accounts()).get(self._digest(name))
        if account is not None and self._verified.get(name) == (self._digest(name, password), account.hash):
            return account
        return await super().check(name, password, address, proven)


class CountedAfter(throttle.Throttle):
    """Failures counted once answered, not while checked, and no bans: an address's guesses sent at once are all
    checked, and its wait never grows."""

    def charge(self, name: str, address: str, now: float | None = None) -> None:
        pass

    def cleared(self, name: str, address: str, now: float | None = None) -> None:
        pass

    def failed(self, name: str, address: str, now: float | None = None, proven: bool = False) -> None:
        now = self._now(now)
        for key in (("address", address), ("name", name)):
            self._add(key, 1.0, now)


class AddressStrikes(throttle.Throttle):
    """A strike only when the address's own bucket is full (as before the independent attack on #53): addresses that
    share the guessing of one name never fill their own, and are never banned."""

    def strikes_for(self, name: str | None, address: str, now: float) -> bool:
        return self._level(("address", address), now) > self.capacity - 1


class OneQueue(signin.SignIn):
    """Every sign-in hashed, a name no account has against the decoy, in one queue of 24 for everyone (as before
    issue #53: strangers filled it, and a real account's sign-in was refused)."""

    queued = 0

    async def _checked(self, name, password, address, account, digest, proven=False):
        if self.queued >= 24:
            return signin.BUSY
        self.queued += 1
        try:
            if account is None:
                async with self._turns.turn(clean=True):
                    await anyio.to_thread.run_sync(self._timed, decoy(), password)
                self.throttle.charge(name, address)
                self.throttle.failed(name, address)
                return None
            return await super()._checked(name, password, address, account, digest, proven)
        finally:
            self.queued -= 1


class EarlySlot(privrelease.gate.app.Gate):
    """An account's slot given back once the gate has decided, before its answer is sent (a file streamed from disk
    then counted nowhere)."""

    async def handle(self, request):
        answer = await super().handle(request)
        if isinstance(answer, privrelease.gate.app.Held):
            answer.give()
            return answer.response
        return answer


WEAKENED = {"cache-first": CacheFirst, "counted-after": CountedAfter, "one-queue": OneQueue, "early-slot": EarlySlot}


def create_app(*args, **kwargs):
    rows = (
        access.Rule(access.ANYONE, "GET", "/slow", answer=_slow),
        access.Rule(access.PEOPLE, "GET", "/api/slow-download", answer=_slow_download),
    )
    weakened = WEAKENED.get(os.environ.get("PRIVRELEASE_TEST_WEAKENED", ""))
    if isinstance(weakened, type) and issubclass(weakened, privrelease.gate.app.Gate):
        kwargs["gate_class"] = weakened
    app = _create_app(*args, **kwargs, rules=(*rows, *access.RULES))
    the_gate = app.state.gate
    if isinstance(weakened, type) and issubclass(weakened, signin.SignIn):
        the_gate.signin = weakened(the_gate.accounts)
    if weakened is CountedAfter or os.environ.get("PRIVRELEASE_TEST_LEAK_S"):
        kind = CountedAfter if weakened is CountedAfter else throttle.Throttle
        the_gate.signin.throttle = kind(leak_s=float(os.environ.get("PRIVRELEASE_TEST_LEAK_S", throttle.LEAK_S)))
    return app


if __name__ == "__main__":  # started as a gate (python -m tests.support.slow_gate): only then is the app replaced,
    # never in a test process that imports the weakened classes (another test there builds the real gate's app)
    privrelease.gate.app.create_app = create_app  # what gate.__main__.main imports when it starts
    sys.exit(main())
