"""The exponential mechanism over weighted candidates, sampled exactly.

Candidate k has an integer weight w_k (how many public grid points it stands for) and an interval
[a_k, b_k] of integers; its score is minus the distance from a public rational target t to that
interval, d_k = max(0, a_k - t, t - b_k). One draw returns k with probability

    P[k] = w_k exp(-r d_k) / sum_j w_j exp(-r d_j),

r a rational rate (epsilon / (2 Delta), ``privrelease.core.noise.rate``). This is the exponential mechanism with
a base measure (McSherry & Talwar 2007): epsilon-DP and epsilon-bounded-range, so epsilon^2 / 8 zCDP
(Cesar & Rogers 2021), when the scores have sensitivity Delta.

Exact sampling by inversion of one uniform U in [0, 1), read lazily as 64-bit words: k is the first
candidate whose cumulative weight passes U Z. The weights are irrational, so they are bounded, not
computed:

1. a float pass computes every weight and the cumulative sums, each within a bound E of the true value
   (below), and decides k when U Z lies farther than 2 E + Z 2^-50 from every cumulative sum; it does
   not decide with probability at most about (K + 4096 + r) 2^-47 per candidate boundary crossed;
2. otherwise interval arithmetic in MPFR (``gmpy2``, correctly rounded with directed rounding) bounds
   each weight and sum from below and above at 128 bits, then at twice as many with 64 more bits of the
   same U, until the bounds decide k.

Both passes invert the same U, so the law drawn is the exact law above. The float pass's bound E: the
least distance d_min is found exactly (each d_k is an integer plus -1, 0 or 1 times the target's fraction
f = t - floor(t)), and each e_k = d_k - d_min is computed from an integer difference and at most 2 f, with
absolute error at most (1 + e_k) 2^-51 (never as a difference of two large rounded distances: targets far
from every candidate stay exact); each weight's relative error is then at most r (1 + e_k) 2^-50, under
(745 + r) 2^-50 while exp(-r e_k) is a normal float (past that the weight is below 2^-1000 of the largest,
which is at least 1), plus exp's own (within a few units in the last place in glibc and NumPy: taken as
2^-50) and the product's 2^-53; a cumulative sum of K positive terms adds K 2^-53 relative.
E = Z (K + 4096 + r) 2^-50 holds all of it with room. Integers past 2^61 are left to the exact pass.
"""

from __future__ import annotations

import math
from fractions import Fraction

import gmpy2
import numpy as np

from privrelease.core import noise

FIRST_BITS = 128  # the exact pass's first precision
SMALL = 2**61  # the float pass's integers (targets, ranks) stay below this, so their differences fit int64
MAX_BITS = 1 << 16  # past this the bounds have not met: a draw with probability below 2^-60000


def exponential(rng: np.random.Generator, weights, low, high, target: Fraction, rate: Fraction) -> int:
    """One exact draw of k with probability proportional to ``weights[k] * exp(-rate * d_k)``, d_k the
    distance from ``target`` to [``low[k]``, ``high[k]``] (integers, low <= high; weights >= 0, one > 0)."""
    return int(exponentials(rng, [(weights, low, high, target)], rate)[0])


def exponentials(rng: np.random.Generator, rows: list[tuple], rate: Fraction) -> np.ndarray:
    """One exact draw per row ``(weights, low, high, target)`` (as ``exponential``), all at one ``rate``: the
    rows' float passes run together, rows of similar length padded into one matrix (a key's draw costs
    microseconds, not a hundred numpy calls); a row they leave undecided goes to its own exact pass."""
    checked = [_checked(*row) for row in rows]
    words = [int(x) for x in noise.words(rng, len(rows))]
    found = _float_rows(checked, rate, words)
    return np.array(
        [k if k is not None else _exact_pass(rng, *row, rate, word) for k, row, word in zip(found, checked, words)], np.int64
    )


def _checked(weights, low, high, target: Fraction) -> tuple[np.ndarray, np.ndarray, np.ndarray, Fraction]:
    w = np.asarray(weights, dtype=np.int64)
    low, high = np.asarray(low, dtype=np.int64), np.asarray(high, dtype=np.int64)
    if w.ndim != 1 or w.shape != low.shape or w.shape != high.shape or not (w >= 0).all() or not (low <= high).all():
        raise ValueError("exponential: weights, low and high must be 1-D of one length, weights >= 0, low <= high")
    if not (w > 0).any():
        raise ValueError("exponential: no candidate has weight")
    return w, low, high, Fraction(target)


def _float_pass(w: np.ndarray, low: np.ndarray, high: np.ndarray, target: Fraction, rate: Fraction, word: int) -> int | None:
    """k when the floats decide it for U in [word 2^-64, (word + 1) 2^-64), else None (one row)."""
    return _float_rows([(w, low, high, Fraction(target))], rate, [word])[0]


def _float_rows(rows: list[tuple], rate: Fraction, words: list[int]) -> list[int | None]:
    """Each row's k when the floats decide it, else None; rows padded with weight 0 to the next power of two."""
    out: list[int | None] = [None] * len(rows)
    width = np.array([max(len(r[0]), 1) for r in rows])
    shelf = np.ceil(np.log2(width)).astype(int)
    for b in np.unique(shelf):
        at = [i for i in np.flatnonzero(shelf == b) if _in_range(rows[i])]  # past int64's safe range: the exact pass
        if at:
            for i, k in zip(at, _float_block([rows[i] for i in at], 1 << int(b), rate, [words[i] for i in at])):
                out[i] = k
    return out


def _in_range(row: tuple) -> bool:
    w, low, high, target = row
    return abs(math.floor(target)) < SMALL and low.min() > -SMALL and high.max() < SMALL  # (low <= high: their extremes)


def _float_block(rows: list[tuple], width: int, rate: Fraction, words: list[int]) -> list[int | None]:
    """The float pass over rows of at most ``width`` candidates each, as one matrix."""
    n = len(rows)
    w, low, high = np.zeros((n, width), np.int64), np.zeros((n, width), np.int64), np.zeros((n, width), np.int64)
    size = np.array([len(r[0]) for r in rows])
    num = [(r[3].numerator, r[3].denominator) for r in rows]
    base = np.array([a // d for a, d in num], np.int64)
    frac = [(a - (a // d) * d, d) for a, d in num]  # f = fn / fd in [0, 1): d_k = whole_k + side_k f exactly
    for j, r in enumerate(rows):
        w[j, : size[j]], low[j, : size[j]], high[j, : size[j]] = r[0], r[1], r[2]
    positive = np.array([fn > 0 for fn, _ in frac])[:, None]
    right = low > base[:, None]
    left = (high < base[:, None]) | ((high == base[:, None]) & positive)
    whole = np.where(right, low - base[:, None], np.where(left, base[:, None] - high, 0))
    side = np.where(right, -1, np.where(left, 1, 0))
    live = w > 0
    mins = [np.where(live & (side == s), whole, SMALL).min(axis=1) for s in (-1, 0, 1)]
    least = [
        min(
            ((int(m[j]), s) for m, s in zip(mins, (-1, 0, 1)) if m[j] < SMALL), key=lambda m, f=frac[j]: m[0] * f[1] + m[1] * f[0]
        )
        for j in range(n)
    ]  # the least live distance, exactly (times fd, in integers): each d_k - d_min is then computed near 0, never as a
    # difference of large floats
    lw, ls = (np.array(x, np.int64)[:, None] for x in zip(*least))
    y = float(rate) * ((whole - lw).astype(float) + (side - ls) * np.array([fn / fd for fn, fd in frac])[:, None])
    with np.errstate(under="ignore", over="ignore"):
        weight = np.where(live, w * np.exp(-y), 0.0)
    cum = np.cumsum(weight, axis=1)
    z = cum[:, -1]
    slack = 2 * z * (size + 4096 + float(rate)) * 2.0**-50 + z * 2.0**-50
    u = np.array(words, dtype=np.uint64) * 2.0**-64 * z
    k = (cum <= u[:, None]).sum(axis=1)  # the first cumulative sum past u (searchsorted, side right)
    rows_ = np.arange(n)
    after = cum[rows_, np.minimum(k, width - 1)]
    before = np.where(k > 0, cum[rows_, np.maximum(k - 1, 0)], 0.0)
    decided = (k < size) & (u - before > slack) & (after - u > slack)
    return [int(k[j]) if decided[j] else None for j in range(n)]


def _exact_pass(
    rng: np.random.Generator, w: np.ndarray, low: np.ndarray, high: np.ndarray, target: Fraction, rate: Fraction, word: int
) -> int:
    """k by MPFR interval bounds, refining the precision and U's bits until they decide it."""
    live = np.flatnonzero(w > 0)
    gaps = [max(Fraction(0), int(a) - target, target - int(b)) for a, b in zip(low[live], high[live])]
    least = min(gaps)  # once: K candidates, not K^2 comparisons
    exps = [rate * (g - least) for g in gaps]
    bits, u = 64, word  # U in [u, u + 1) / 2^bits
    prec = FIRST_BITS
    while prec <= MAX_BITS:
        lows, highs = _cumulative(w[live], exps, prec)
        with gmpy2.context(gmpy2.get_context(), precision=prec, round=gmpy2.RoundDown):
            under = lows[-1] * gmpy2.mpq(u, 2**bits)  # at most U Z
        with gmpy2.context(gmpy2.get_context(), precision=prec, round=gmpy2.RoundUp):
            over = highs[-1] * gmpy2.mpq(u + 1, 2**bits)  # at least U Z
        for i in range(len(live)):  # the first whose sure cumulative passes every U Z in the box
            if lows[i] > over:
                if i == 0 or highs[i - 1] <= under:
                    return int(live[i])
                break
            if highs[i] > under:  # U Z may lie below this sum: undecided at this precision
                break
        prec *= 2
        bits += 64
        u = u * 2**64 + int(noise.words(rng, 1)[0])
    raise ArithmeticError("exponential: the exact bounds did not meet (probability below 2^-60000)")


def _cumulative(w: np.ndarray, exps: list[Fraction], prec: int) -> tuple[list, list]:
    """Lower and upper bounds of each cumulative weight sum_{j <= i} w_j exp(-x_j), at ``prec`` bits."""
    lows, highs = [], []
    lo_sum, hi_sum = gmpy2.mpfr(0), gmpy2.mpfr(0)
    for wi, x in zip(w, exps):
        q = gmpy2.mpq(x.numerator, x.denominator)
        with gmpy2.context(gmpy2.get_context(), precision=prec, round=gmpy2.RoundUp):
            x_up = gmpy2.mpfr(q)
        with gmpy2.context(gmpy2.get_context(), precision=prec, round=gmpy2.RoundDown):
            x_down = gmpy2.mpfr(q)
            lo_sum = lo_sum + int(wi) * gmpy2.exp(-x_up)
            lows.append(lo_sum)
        with gmpy2.context(gmpy2.get_context(), precision=prec, round=gmpy2.RoundUp):
            hi_sum = hi_sum + int(wi) * gmpy2.exp(-x_down)
            highs.append(hi_sum)
    return lows, highs
