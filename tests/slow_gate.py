"""``python -m tests.slow_gate``: the gate as ``python -m gate`` starts it, with one more row open to anyone,
``GET /slow``, answered after SLOW seconds: the stand-in for any call without credentials that waits for
Prefect (its settings or health read while it is busy, a page it answers), which holds one of the proxy's
connections to the gate while it waits (tests/test_proxy_attack7.py)."""

from __future__ import annotations

import sys

import anyio

import gate.app
from gate import policy
from gate.__main__ import main

SLOW = 2.0
_create_app = gate.app.create_app


async def _slow(call) -> bool:
    await anyio.sleep(SLOW)
    return True


def create_app(*args, **kwargs):
    return _create_app(*args, **kwargs, rules=(policy.Rule(policy.ANYONE, "GET", "/slow", answer=_slow), *policy.POLICY))


gate.app.create_app = create_app  # what gate.__main__.main imports when it starts

if __name__ == "__main__":
    sys.exit(main())
