"""Fault injection for tests: kill this process, as ``kill -9`` would, at a named step boundary.

``PRIVRELEASE_FAULT=<step>`` takes effect only in test mode (``PRIVRELEASE_TEST_MODE=1``); outside
it the variable is refused (``check``), so a production run can never be cut short on purpose.
``PRIVRELEASE_FAULT=pause:<step>`` instead says ``paused at <step>`` on stderr and waits there for a
signal, so a test can interrupt (Ctrl-C) a run at a known step, or change the machine under it (fill a disk, make a
folder read-only) and let it carry on (SIGUSR1).
"""

from __future__ import annotations

import os
import signal
import sys
import time

from privrelease.core import noise, settings
from privrelease.core.errors import UserError

STEPS = ("prepare", "load", "charge", "privatize", "staged", "publish", "settle")


def check() -> None:
    """Refuse a fault request outside test mode, or one naming no step."""
    step = settings.get(settings.FAULT)
    if step is None:
        return
    if not noise.test_mode():
        raise UserError(f"{settings.FAULT} is a test hook, accepted only in test mode; unset it.")
    if step.removeprefix("pause:") not in STEPS:
        raise UserError(f"{settings.FAULT} names a step boundary, one of {', '.join(STEPS)}; not {step!r}.")


def point(step: str) -> None:
    """The boundary after ``step``: SIGKILL this process, or wait for a signal, if the test asked for it here."""
    asked = settings.get(settings.FAULT)
    if asked == step and noise.test_mode():
        os.kill(os.getpid(), signal.SIGKILL)
    if asked == f"pause:{step}" and noise.test_mode():
        go_on: list[int] = []
        signal.signal(signal.SIGUSR1, lambda *_: go_on.append(1))  # SIGUSR1: carry on from here
        print(f"paused at {step}", file=sys.stderr, flush=True)
        while not go_on:  # not signal.pause(): a signal landing between the print and pause() would leave it waiting for another
            time.sleep(0.05)  # a signal's handler runs on return from the sleep it interrupts, or at the loop's next turn
