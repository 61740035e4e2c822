"""Sums by the cell key method: each contributor's value multiplied by a factor its own key selects (noise
multiplication, as the US Census Bureau protects establishment tables: Evans, Zayatz & Slanta, *Journal of Official
Statistics* 14(4), 1998), so every cell of every table, a margin included, is the sum of the same perturbed
contributions.

The steward sets ``low`` and ``high`` (``tables.cell_key_sums``). A factor is ``1 + c`` or ``1 / (1 + c)``, with
``log(1 + c)`` uniform between ``log(1 + low)`` and ``log(1 + high)``; it is upward with the probability ``up`` that
makes its mean exactly 1 (``up_share``), so a total of many contributions is unbiased. A contributor's key, uniform on
[0, 1) (``privrelease.core.noise.keys.factor_keys``), picks its factor by the inverse of this distribution
(``factor``).

Each perturbed contribution is rounded to ``DIGITS`` significant figures (``moved``) before cells add them up, so
margins stay additive and no two parts of one contributor show their exact ratio: with exact products, x1 · f and
x2 · f gave x1 / x2 exactly, and integer values back from its lowest terms. Rounding only takes information away, so
the chance below still bounds the intruder.

The protection (``guess_chance``): an intruder who knows every other contribution, the method and its parameters
(not the dataset's secret) reads a contribution ``x`` as ``y = x · f``, and no more, from every table of the dataset:
the same contributor has the same factor in all of them. Guessing ``x`` within p% means ``log f`` falling in a
window of width ``log((1 + p) / (1 - p))`` that the guess places; the chance of the best window is the largest mass
of ``log f``'s density in any such window, the same whatever ``x`` is (an intruder with no prior idea of the
contribution's size, or one using the best guess of the form y divided by a constant). Closed form: the density is
piecewise constant, so the best window has an edge at one of its breakpoints.
"""

from __future__ import annotations

import math

import numpy as np

DIGITS = 2  # a perturbed contribution's significant figures
ROUNDED = 0.5 * 10.0 ** (1 - DIGITS)  # the most rounding moves one, relative to itself (5%)


def up_share(low: float, high: float) -> float:
    """The probability of an upward factor that makes the factors' mean exactly 1."""
    width = math.log1p((high - low) / (1 + low))  # log(1 + high) - log(1 + low), exact however close they are
    up = (high - low) / width  # the mean of exp(u), u uniform on [log(1 + low), log(1 + high)]
    down = up / ((1 + low) * (1 + high))  # the mean of exp(-u)
    return (1 - down) / (up - down)


def guess_chance(low: float, high: float, p_percent: float) -> float:
    """The largest chance that an intruder who knows every other contribution guesses one within ``p_percent``."""
    p = p_percent / 100
    if p >= 1:
        return 1.0
    width = math.log((1 + p) / (1 - p))
    a, b, q = math.log1p(low), math.log1p(high), up_share(low, high)

    def mass(s: float) -> float:
        up = max(0.0, min(s + width, b) - max(s, a))
        down = max(0.0, min(s + width, -a) - max(s, -b))
        return (q * up + (1 - q) * down) / (b - a)

    edges = (a, b, -a, -b)
    return min(1.0, max(mass(e - shift) for e in edges for shift in (0.0, width)))


def factor(u: np.ndarray, low: float, high: float) -> np.ndarray:
    """Each key's factor (``u`` in [0, 1)): upward below ``up_share``, downward above, each log-uniform."""
    u = np.asarray(u, dtype=np.float64)
    a, b, q = math.log1p(low), math.log1p(high), up_share(low, high)
    up = u < q
    at = np.where(up, u / q, (u - q) / (1 - q))  # the key's place within its side, in [0, 1)
    log_f = a + at * (b - a)
    return np.exp(np.where(up, log_f, -log_f))


def reach(low: float, high: float) -> tuple[float, float]:
    """The smallest and the largest factor."""
    return 1 / (1 + high), 1 + high


def moved(x: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Each contribution times its factor, to ``DIGITS`` significant figures (a zero stays zero)."""
    y = np.asarray(x, dtype=np.float64) * np.asarray(f, dtype=np.float64)
    held = y != 0
    scale = np.zeros_like(y)
    scale[held] = 10.0 ** (np.floor(np.log10(np.abs(y[held]))) - (DIGITS - 1))
    out = np.zeros_like(y)
    out[held] = np.round(y[held] / scale[held]) * scale[held]
    return out
