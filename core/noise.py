"""The one place that makes randomness for privacy mechanisms.

Releases draw from the operating system's entropy. A fixed seed is accepted only in test mode
(``PRIVRELEASE_TEST_MODE=1``), so a seed in a production spec cannot weaken a release.
"""

from __future__ import annotations

import os

import numpy as np

from core.errors import SpecError

TEST_MODE_ENV = "PRIVRELEASE_TEST_MODE"


def test_mode() -> bool:
    """Whether fixed seeds are allowed in this process."""
    return os.environ.get(TEST_MODE_ENV, "") == "1"


def check_seed(test_seed: int | None) -> None:
    """Refuse a fixed seed outside test mode (called when a spec is read, and again before use)."""
    if test_seed is not None and not test_mode():
        raise SpecError(
            f"a fixed seed is accepted only in test mode; remove 'seed' from the spec, or set "
            f"{TEST_MODE_ENV}=1 for a test run (its release is marked as a test release)."
        )


def generator(test_seed: int | None = None) -> np.random.Generator:
    """A generator seeded from OS entropy, or from ``test_seed`` in test mode only."""
    check_seed(test_seed)
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(test_seed)))
