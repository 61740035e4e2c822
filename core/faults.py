"""Fault injection for tests: kill this process, as ``kill -9`` would, at a named step boundary.

``PRIVRELEASE_FAULT=<step>`` takes effect only in test mode (``PRIVRELEASE_TEST_MODE=1``); outside
it the variable is refused (``check``), so a production run can never be cut short on purpose.
"""

from __future__ import annotations

import os
import signal

from core import noise
from core.errors import UserError

FAULT_ENV = "PRIVRELEASE_FAULT"
STEPS = ("prepare", "load", "charge", "privatize", "staged", "publish", "settle")


def check() -> None:
    """Refuse a fault request outside test mode, or one naming no step."""
    step = os.environ.get(FAULT_ENV)
    if step is None:
        return
    if not noise.test_mode():
        raise UserError(f"{FAULT_ENV} is a test hook, accepted only in test mode; unset it.")
    if step not in STEPS:
        raise UserError(f"{FAULT_ENV} names a step boundary, one of {', '.join(STEPS)}; not {step!r}.")


def point(step: str) -> None:
    """The boundary after ``step``: SIGKILL this process if the test asked for it here."""
    if os.environ.get(FAULT_ENV) == step and noise.test_mode():
        os.kill(os.getpid(), signal.SIGKILL)
