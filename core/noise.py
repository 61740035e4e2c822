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


def gaussian(rng: np.random.Generator, sigma: float, size: int) -> np.ndarray:
    """Independent N(0, sigma^2) draws."""
    return rng.normal(0.0, sigma, size)


def gaussian_tail(rng: np.random.Generator, sigma: float, threshold: float, size: int) -> np.ndarray:
    """N(0, sigma^2) draws conditioned on exceeding ``threshold`` (a zero-weight item that passed)."""
    from scipy.stats import truncnorm

    if size == 0:
        return np.empty(0)
    return truncnorm.rvs(threshold / sigma, np.inf, scale=sigma, size=size, random_state=rng)


def laplace(rng: np.random.Generator, scale: float, size: int) -> np.ndarray:
    """Independent Laplace(0, scale) draws."""
    return rng.laplace(0.0, scale, size)


def gumbel(rng: np.random.Generator, size: int) -> np.ndarray:
    """Standard Gumbel draws: the argmax of log-weight + Gumbel is an exponential-mechanism draw."""
    return rng.gumbel(0.0, 1.0, size)
