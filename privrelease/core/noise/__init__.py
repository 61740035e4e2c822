"""The one place that makes randomness for privacy mechanisms.

Releases draw from the operating system's entropy. A fixed seed is accepted only in test mode
(``PRIVRELEASE_TEST_MODE=1``), so a seed in a production spec cannot weaken a release.

No published value is made with floating-point noise: a float sample ``x + noise`` carries the
true value in its low-order bits (Mironov, "On Significance of the Least Significant Bits for
Differential Privacy"). Every DP value is ``grid * (value_units + Z)`` with integers only: the true
value is put on a public grid first (the mechanism accounts for that rounding in its sensitivity),
and ``Z`` is drawn *exactly* from the discrete Gaussian or discrete Laplace with the samplers of
Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy" (Algorithms 1-3),
vectorized, on integer arithmetic and uniform 64-bit words (rejection, so no modulo bias). The
output is a function of one integer, so it has no low-order bits of the input to leak.

Why the continuous proofs still hold (the "grid lemma", proved in docs/mechanisms/noise.md):
with ``s = sigma / grid >= 2**20``, on ``|k| <= 60 s`` the pmf of N_Z(0, s^2) is within a factor
``e^{±ETA}`` of the pmf of the *rounded* continuous Gaussian round(N(0, s^2)), which is a
post-processing of the continuous Gaussian mechanism. With neighbours at most ``MAX_SHIFT`` stds
apart per coordinate, an output leaves that range around either neighbour with probability at
most TAIL = 2 e^{-(60 - 40)^2 / 2} (N_Z is subgaussian). So a mechanism proved (epsilon, delta)-DP
with continuous Gaussian noise, whose neighbours differ in at most ``c`` noised coordinates, is
(epsilon + 2 c ETA, e^{c ETA} delta + 2 c TAIL)-DP with this sampler: ``continuous_budget``
returns the budget to calibrate the continuous proof at, ``check_shift`` the shift assumption.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction

import numpy as np

from privrelease.core import normal, settings
from privrelease.core.errors import SpecError

MIN_UNITS = 2.0**20  # sigma / grid is at least this (so the grid lemma's ETA is below 2e-10)
BULK = 60  # the lemma's range |k| <= BULK * s
MAX_SHIFT = 40  # neighbours' true values differ by at most this many noise stds per coordinate
ETA = (BULK**2 / 24 + 1 / 8) / MIN_UNITS**2 + 1e-300  # + 2 sum e^{-2 pi^2 s^2 n^2}, far below 1e-300
TAIL = 2 * math.exp(-((BULK - MAX_SHIFT) ** 2) / 2)  # P[|Z| > (BULK - MAX_SHIFT) s]: 2.8e-87
_U64_MAX = np.uint64(2**64 - 1)
FEW = 16  # up to this many values, the same algorithms run in Python integers


def test_mode() -> bool:
    """Whether fixed seeds are allowed in this process."""
    return settings.flag(settings.TEST_MODE)


def check_seed(test_seed: int | None) -> None:
    """Refuse a fixed seed outside test mode (called when a spec is read, and again before use)."""
    if test_seed is not None and not test_mode():
        raise SpecError(
            f"a fixed seed is accepted only in test mode; remove 'seed' from the spec, or set "
            f"{settings.TEST_MODE}=1 for a test run (its release is marked as a test release)."
        )


class Randomness(np.random.Generator):
    """A numpy Generator (for structural choices) whose DP noise words come from ``os.urandom``,
    or, in test mode with a seed only, from the seeded stream so a test run is reproducible."""

    def __init__(self, test_seed: int | None):
        super().__init__(np.random.PCG64(np.random.SeedSequence(test_seed)))
        self.from_os = test_seed is None


def generator(test_seed: int | None = None) -> Randomness:
    """Randomness from OS entropy, or from ``test_seed`` in test mode only."""
    check_seed(test_seed)
    return Randomness(test_seed)


def words(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` uniform 64-bit words: the only source the exact samplers read."""
    if isinstance(rng, Randomness) and rng.from_os:
        return np.frombuffer(os.urandom(8 * n), dtype=np.uint64).copy()
    return rng.bit_generator.random_raw(n).astype(np.uint64)


def below(rng: np.random.Generator, m: np.ndarray) -> np.ndarray:
    """Exactly uniform integers in [0, m) for each entry of ``m`` (1 <= m < 2**63), by rejection."""
    m = np.asarray(m, dtype=np.uint64)
    out = np.empty(m.shape, dtype=np.uint64)
    todo = np.arange(m.size)
    flat_m, flat_out = m.reshape(-1), out.reshape(-1)
    while todo.size:
        mm = flat_m[todo]
        w = words(rng, todo.size)
        r = (_U64_MAX % mm + np.uint64(1)) % mm  # 2**64 mod m
        ok = w <= _U64_MAX - r
        flat_out[todo[ok]] = w[ok] % mm[ok]
        todo = todo[~ok]
    return out.astype(np.int64)


def bernoulli_exp(rng: np.random.Generator, num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Exact Bernoulli(exp(-num/den)) per entry (num >= 0, 1 <= den < 2**56)."""
    num, den = np.broadcast_arrays(np.asarray(num, dtype=np.int64), np.asarray(den, dtype=np.int64))
    return _bernoulli_exp_split(rng, num // den, num % den, den)


def _bernoulli_exp_split(rng: np.random.Generator, whole: np.ndarray, frac: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Bernoulli(exp(-(whole + frac/den))): the integer part as repeated Bernoulli(1/e), the fraction
    by the alternating-series method (Algorithm 1)."""
    alive = np.ones(whole.shape, dtype=bool)
    left = whole.copy()
    while True:  # each round kills ~63% of those still owing a Bernoulli(1/e)
        owe = np.flatnonzero(alive & (left > 0))
        if owe.size == 0:
            break
        alive[owe] = _bernoulli_exp_fraction(rng, np.ones(owe.size, np.int64), np.ones(owe.size, np.int64))
        left[owe] -= 1
    idx = np.flatnonzero(alive)
    alive[idx] = _bernoulli_exp_fraction(rng, frac[idx], den[idx])
    return alive


def _bernoulli_exp_fraction(rng: np.random.Generator, num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Bernoulli(exp(-g)), g = num/den in [0, 1]: K = first k with Bernoulli(g/k) = 0; 1 iff K odd."""
    k = np.ones(num.shape, dtype=np.int64)
    running = np.arange(num.size)
    while running.size:
        if k[running].max() >= 2**62 // den[running].max():  # needs K >= 128: probability < 1/127!
            raise ValueError("exact Bernoulli sampler left its integer range")
        hit = below(rng, den[running] * k[running]) < num[running]
        k[running[hit]] += 1
        running = running[hit]
    return k % 2 == 1


def _geometric(rng: np.random.Generator, a: int, b: int, size: int) -> np.ndarray:
    """Exact one-sided geometric: P[J = j] ∝ exp(-j a / b) (Algorithm 2's floor(X / a), X with ratio e^{-1/b})."""
    out = np.empty(size, dtype=np.int64)
    todo = np.arange(size)
    while todo.size:
        n = todo.size
        u = below(rng, np.full(n, b))
        ok = bernoulli_exp(rng, u, np.full(n, b))
        v = np.zeros(n, dtype=np.int64)
        going = np.flatnonzero(ok)
        while going.size:
            more = bernoulli_exp(rng, np.ones(going.size, np.int64), np.ones(going.size, np.int64))
            v[going[more]] += 1
            going = going[more]
        out[todo[ok]] = ((u + b * v) // a)[ok]
        todo = todo[~ok]
    return out


def discrete_laplace(rng: np.random.Generator, t: int, size: int) -> np.ndarray:
    """Exact Lap_Z(t): P[Y = y] ∝ exp(-|y|/t), t a positive integer (Algorithm 2 with s = 1): a
    geometric magnitude with a uniform sign, a negative zero rejected."""
    out = np.empty(size, dtype=np.int64)
    todo = np.arange(size)
    while todo.size:
        x = _geometric(rng, 1, t, todo.size)
        negative = (words(rng, todo.size) & np.uint64(1)).astype(bool)
        ok = ~(negative & (x == 0))
        out[todo[ok]] = np.where(negative, -x, x)[ok]
        todo = todo[~ok]
    return out


def laplace_scale(s2: int) -> int:
    """The Laplace scale t of Algorithm 3 for variance ``s2``: isqrt(s2) + 1 or isqrt(s2), whichever
    divides s2 (every variance ``gaussian_variance_units`` returns is t(t-1) or t^2), so that c = s2/t
    is an integer and the sampler's variance is s2 itself, not a second rounding of it."""
    root = math.isqrt(s2)
    for t in (root + 1, root):
        if t >= 1 and s2 % t == 0:
            return t
    raise ValueError(f"variance {s2} is not t(t-1) or t^2; take it from gaussian_variance_units")


def _bernoulli_exp_square(rng: np.random.Generator, a: np.ndarray, den: int) -> np.ndarray:
    """Exact Bernoulli(exp(-a^2/den)) per entry: a^2 in int64 where it fits, else split with Python
    integers (|a| >= 2^31 would overflow; rare)."""
    a = np.asarray(a, dtype=np.int64)
    big = np.abs(a) >= 2**31
    sq = np.where(big, 0, a) ** 2
    whole, frac = sq // den, sq % den
    for i in np.flatnonzero(big):
        whole[i], frac[i] = divmod(int(a[i]) ** 2, den)
    return _bernoulli_exp_split(rng, whole, frac, np.full(a.size, den))


def discrete_gaussian_units(rng: np.random.Generator, s2: int, size: int) -> np.ndarray:
    """Exact N_Z(0, s2) (Algorithm 3) for a variance s2 = t * c with t = ``laplace_scale(s2)``.

    With sigma^2/t an integer c, the acceptance exponent (|Y| - c)^2 / (2 t c) is rational with small
    integers; the variance drawn is exactly ``s2``, the one the accounting states.
    """
    t = laplace_scale(s2)
    c = s2 // t
    den = 2 * t * c
    if den >= 2**56:
        raise ValueError("noise std above 2^27.5 grid steps: outside the exact sampler's integer range")
    out = np.empty(size, dtype=np.int64)
    todo = np.arange(size)
    while todo.size:
        y = discrete_laplace(rng, t, todo.size)
        ok = _bernoulli_exp_square(rng, np.abs(y) - c, den)
        out[todo[ok]] = y[ok]
        todo = todo[~ok]
    return out


def gaussian_variance_units(sigma: float, grid: float) -> int:
    """The integer variance in grid units used for noise std ``sigma`` (never below (sigma/grid)^2):
    (sigma/grid)^2 rounded up to a multiple of t = isqrt + 1, so t(t-1) or t^2 (``laplace_scale``)."""
    s2 = math.ceil((Fraction(sigma) / Fraction(grid)) ** 2)  # exact: no float rounding below sigma^2
    t = math.isqrt(s2) + 1
    return t * -(-s2 // t)


def grid(sigma: float) -> float:
    """The public grid for noise std ``sigma``: the largest power of two with sigma/grid >= 2^20."""
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"noise std must be positive and finite, got {sigma}")
    return 2.0 ** math.floor(math.log2(sigma / MIN_UNITS))


def continuous_budget(epsilon: float, delta: float, coordinates: int) -> tuple[float, float]:
    """The (epsilon, delta) to calibrate a continuous-Gaussian proof at so that the discrete sampler,
    on at most ``coordinates`` noised values that differ between neighbours, meets (epsilon, delta).
    (``exact_gaussian``'s slack is smaller, so this covers it too.)"""
    eps = epsilon - 2 * coordinates * ETA
    dlt = (delta - 2 * coordinates * TAIL) * math.exp(-coordinates * ETA)
    if eps <= 0 or dlt <= 0:
        raise ValueError(
            f"epsilon {epsilon:.3g} and delta {delta:.3g} are too small for the exact sampler, which needs "
            f"epsilon above {2 * coordinates * ETA:.2g} and delta above {2 * coordinates * TAIL:.2g} here; "
            "raise them"
        )
    return eps, dlt


# -- one value at a time, in Python integers: for the few values whose std is data-dependent -----------

# std / grid at least this for ``exact_gaussian`` (2^39 accepted, for float slack in the caller's
# bound): the lemma then holds on |k| <= 10^6 s with eta = (10^12/24 + 1/8) / 2^78 < 1.4e-13 < ETA.
SCALAR_UNITS = 2.0**40


def scalar_grid(least_std: float) -> float:
    """A public grid for a value whose std is at least ``least_std`` (a public bound), at most 1."""
    return min(1.0, 2.0 ** math.floor(math.log2(least_std / SCALAR_UNITS)))


def exact_gaussian(rng: np.random.Generator, std: float, units: int, unit: float) -> float:
    """``unit * (units + Z)``, Z ~ N_Z(0, s2) with s2 = ceil((std/unit)^2), any size: Algorithm 3 in
    Python integers (about 0.1 ms). Requires std/unit >= 2^40 (``scalar_grid``)."""
    ratio = Fraction(std) / Fraction(unit)
    if ratio < SCALAR_UNITS / 2:
        raise ValueError("exact_gaussian needs std/unit >= 2^40; take the unit from scalar_grid")
    return float(Fraction(units + _scalar_gaussian(rng, math.ceil(ratio * ratio))) * Fraction(unit))


def integer_gaussian(rng: np.random.Generator, s2: int, size: int) -> list[int]:
    """``size`` independent exact N_Z(0, s2) for any integer variance s2 >= 1, as Python integers
    (the spam users' noise shares, whose variances exceed the vectorized sampler's int64 range)."""
    if s2 < 1:
        raise ValueError(f"the variance of a discrete Gaussian share must be an integer >= 1, got {s2}")
    return [_scalar_gaussian(rng, s2) for _ in range(size)]


def _scalar_gaussian(rng: np.random.Generator, s2: int) -> int:
    """N_Z(0, s2) for any integer s2 (Algorithm 3 with t = isqrt(s2) + 1, exact rationals)."""
    t = math.isqrt(s2) + 1
    while True:
        y = _scalar_laplace(rng, t)
        if _scalar_bernoulli_exp(rng, (abs(y) * t - s2) ** 2, 2 * s2 * t * t):
            return y


def _randbelow(rng: np.random.Generator, m: int) -> int:
    n = (m.bit_length() + 63) // 64
    while True:
        w = int.from_bytes(words(rng, n).tobytes(), "little") >> (64 * n - m.bit_length())
        if w < m:
            return w


def _scalar_bernoulli_exp(rng: np.random.Generator, num: int, den: int) -> bool:
    while num > den:
        if not _scalar_bernoulli_exp(rng, 1, 1):
            return False
        num -= den
    k = 1
    while _randbelow(rng, den * k) < num:
        k += 1
    return k % 2 == 1


def _scalar_laplace(rng: np.random.Generator, t: int) -> int:
    while True:
        u = _randbelow(rng, t)
        if not _scalar_bernoulli_exp(rng, u, t):
            continue
        v = 0
        while _scalar_bernoulli_exp(rng, 1, 1):
            v += 1
        x, negative = u + t * v, _randbelow(rng, 2) == 1
        if not (negative and x == 0):
            return -x if negative else x


def check_shift(sensitivity: float, sigma: float) -> None:
    """Refuse a noise std so small that neighbours sit more than MAX_SHIFT stds apart (only budgets
    with delta near 1 get there), outside the range the grid lemma is stated for."""
    if sensitivity > MAX_SHIFT * sigma:
        raise ValueError(f"noise std {sigma:.3g} is below 1/{MAX_SHIFT} of the sensitivity: lower epsilon or delta")


def gaussian(rng: np.random.Generator, sigma: float, units: np.ndarray, unit: float) -> np.ndarray:
    """``unit * (units + Z)``: integer true values (in grid ``unit``, from ``grid(sigma)``) plus
    exact discrete Gaussian noise of std at least ``sigma``; every output lies on the grid."""
    units = np.asarray(units, dtype=np.int64)
    s2 = gaussian_variance_units(sigma, unit)
    if units.size <= FEW:  # a handful of values: the integer loop beats numpy's per-call overhead
        z = np.array([_scalar_gaussian(rng, s2) for _ in range(units.size)], dtype=np.int64)
    else:
        z = discrete_gaussian_units(rng, s2, units.size)
    return (units + z.reshape(units.shape)).astype(float) * unit


def gaussian_tail(rng: np.random.Generator, sigma: float, unit: float, threshold: float, size: int) -> np.ndarray:
    """``unit * Z`` for Z ~ the same discrete Gaussian N_Z(0, s2) as ``gaussian`` conditioned on
    unit*Z > threshold (threshold >= 0, so Z >= n0 = floor(threshold/unit) + 1 >= 1). Both branches
    are exact for every n0:

    - n0 >= s (threshold at least one std): proposal n0 + Geometric(exp(-n0/s2)), accepted with prob
      exp(-j^2/(2 s2)), because exp(-(n0+j)^2/(2 s2)) = exp(-n0^2/(2 s2)) exp(-j n0/s2) exp(-j^2/(2 s2));
      j has mean about s2/n0 <= s, so it accepts often (about 0.6 at n0 = s) and j^2 is split into
      Python integers where it passes int64.
    - n0 < s (a threshold of 0 or below one std, e.g. eta = 0.5): the proposal's mean s2/n0 would be
      far above s and almost never accepted, so draw N_Z(0, s2) itself and keep Z >= n0 (accepted
      with probability P[Z >= s] > 0.15)."""
    s2 = gaussian_variance_units(sigma, unit)
    n0 = math.floor(threshold / unit) + 1
    if n0 < 1:
        raise ValueError("the tail sampler needs a threshold >= 0")
    out = np.empty(size, dtype=np.int64)
    todo = np.arange(size)
    while todo.size:
        n = todo.size
        if n0 * n0 < s2:
            z = discrete_gaussian_units(rng, s2, n)
            ok = z >= n0
        else:
            j = _geometric(rng, n0, s2, n)
            ok = _bernoulli_exp_square(rng, j, 2 * s2)
            z = n0 + j
        out[todo[ok]] = z[ok]
        todo = todo[~ok]
    return out.astype(float) * unit


def tail_probability(sigma: float, unit: float, threshold: float) -> float:
    """P[unit * Z > threshold] for that discrete Gaussian, to within a factor e^{±ETA} + TAIL: the
    rounded-Gaussian value P[N(0, s2) >= n0 - 1/2] (the grid lemma)."""
    s2 = gaussian_variance_units(sigma, unit)
    n0 = math.floor(threshold / unit) + 1
    return normal.ndtr(-(n0 - 0.5) / math.sqrt(s2))


def laplace(rng: np.random.Generator, scale: float, units: np.ndarray, unit: float) -> np.ndarray:
    """``unit * (units + Y)``, Y ~ Lap_Z(t) with t = ceil(scale/unit): the geometric mechanism,
    pure epsilon-DP for integer sensitivity Delta_units when t >= Delta_units / epsilon."""
    units = np.asarray(units, dtype=np.int64)
    t = math.ceil(scale / unit)
    if units.size <= FEW:
        y = np.array([_scalar_laplace(rng, t) for _ in range(units.size)], dtype=np.int64)
    else:
        y = discrete_laplace(rng, t, units.size)
    return (units + y.reshape(units.shape)).astype(float) * unit


def permute_and_flip(rng: np.random.Generator, quality: np.ndarray, rate: Fraction) -> int:
    """One exact permute-and-flip draw (McKenna & Sheldon, "Permute-and-Flip: A new mechanism for
    differentially private selection"): visit candidates in a uniform random order and stop at the
    first i accepted with prob exp(-rate (q* - q_i)). With integer qualities of sensitivity Delta
    and rate = epsilon / (2 Delta) it is epsilon-DP; the argmax is always accepted, so it stops."""
    quality = np.asarray(quality, dtype=np.int64)
    order = _permutation(rng, quality.size)
    gap = quality.max() - quality[order]
    accept = bernoulli_exp(rng, gap * rate.numerator, np.full(quality.size, rate.denominator))
    return int(order[np.argmax(accept)])


def _permutation(rng: np.random.Generator, n: int) -> np.ndarray:
    """A uniform permutation (Fisher-Yates with exact uniform indices)."""
    perm = np.arange(n)
    picks = below(rng, np.arange(n, 0, -1)) if n else np.empty(0, np.int64)
    for i, j in enumerate(picks):  # n is the number of candidates, not of records
        perm[i], perm[i + j] = perm[i + j], perm[i]
    return perm


def rate(epsilon: float, sensitivity: float | Fraction) -> Fraction:
    """epsilon / (2 Delta) rounded down to a multiple of 2^-32 (a smaller rate only adds privacy), in exact arithmetic."""
    return Fraction(math.floor(Fraction(epsilon) / (2 * Fraction(sensitivity)) * 2**32), 2**32)
