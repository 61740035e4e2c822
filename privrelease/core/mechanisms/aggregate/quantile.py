"""An aggregate quantile's estimate: one exponential-mechanism draw per key over the answer grid's steps
inside the interval its noisy histogram gave (Smith 2011's quantile mechanism, on a public grid).

The candidates of a key are the steps in [lo, hi) (``lo`` and ``hi`` public: they come from the noisy
histogram, so restricting the draw to them is a choice made on a DP output). Steps holding no row
between two that do score alike, so each such run is one candidate weighted by its length; each
occupied step is a candidate of weight 1. A candidate's values span the ranks [a, b] (a rows of the
key lie below it, b up to its end), and its score is minus the distance from q n to [a, b]: 0 for the
step holding the ceil(q n)-th smallest value, the first candidate scoring 0 (``best``). The draw is
``privrelease.core.privacy.draws.exponential`` (exact, ``privrelease.core.noise.exponential``), then a uniform step inside the
candidate; the estimate is that step's midpoint.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from privrelease.core.mechanisms.aggregate.budget import Pick
from privrelease.core.privacy import draws, events


def candidates(steps: np.ndarray, counts: np.ndarray, lo: int, hi: int, below: int) -> tuple[np.ndarray, ...]:
    """(weights, a, b, first step) of each candidate over [lo, hi): the runs of empty steps and the occupied
    steps interleaved (run 0, step f_0, run 1, ..., run m); ``below`` rows of the key lie under ``lo``."""
    steps, counts = np.asarray(steps, np.int64), np.asarray(counts, np.int64)
    m = len(steps)
    rank = below + np.concatenate([[0], np.cumsum(counts)])  # rows below f_j: rank[j]
    run_start = np.concatenate([[lo], steps + 1])
    run_len = np.concatenate([steps, [hi]]) - run_start
    weights, a, b, first = (np.empty(2 * m + 1, np.int64) for _ in range(4))
    weights[0::2], a[0::2], b[0::2], first[0::2] = run_len, rank, rank, run_start
    weights[1::2], a[1::2], b[1::2], first[1::2] = 1, rank[:-1], rank[1:], steps
    return weights, a, b, first


def target(q: float, n: int) -> Fraction:
    """q n exactly, q read as the decimal it is written as (0.9 is 9/10, not the binary float nearest it)."""
    return events.exact(q) * int(n)


def steps(
    rng: np.random.Generator, pick: Pick, found: list, lo: np.ndarray, hi: np.ndarray, below: np.ndarray, n: np.ndarray
) -> np.ndarray:
    """Per key, the step drawn: ``found[k]`` its occupied steps in [lo_k, hi_k) and their rows."""
    cands = [candidates(f, c, int(lo_k), int(hi_k), int(b)) for (f, c), lo_k, hi_k, b in zip(found, lo, hi, below)]
    chosen = draws.exponential(
        rng, pick.leaf, [(w, a, b, target(pick.q, nk)) for (w, a, b, _), nk in zip(cands, n)], pick.sensitivity
    )
    return np.array([c[3][k] + offset for c, (k, offset) in zip(cands, chosen)], dtype=np.int64)


def best(weights: np.ndarray, a: np.ndarray, b: np.ndarray, t: Fraction) -> int:
    """The first candidate of weight with score 0 (no noise: the one holding the ceil(q n)-th smallest value)."""
    return int(np.flatnonzero((weights > 0) & (a <= t) & (t <= b))[0])
