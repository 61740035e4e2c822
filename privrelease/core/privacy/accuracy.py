"""What a DP release's answer is worth, from public values only: the interval math every mechanism
shares (a sampler's std, a 95% interval, a count's interval cut to its range, an upper bound on a
released smooth std, a permute-and-flip lead's odds). Each mechanism states its own figures with
it (its ``accuracy`` view, ``privrelease.core.mechanisms.base.Declared``; DPNE's detection table in
``privrelease.core.mechanisms.dpne.detection``): the preview before a release, the release (with its DP
outputs) after.

Nothing here reads a row: inputs are public values (a mechanism's parameters, with the
registration's public facts bound in, e.g. N under the record unit) and, after a release, its DP outputs.

Intervals:

- a Gaussian output y = q + Z with Z ~ N_Z(0, s^2) in grid units (``privrelease.core.noise``) has std
  unit * s >= sigma; y ± 1.96 · unit · s covers q with probability 95% (s >= 2^20, so the
  discrete law's coverage differs from the continuous one's by about 10^-6 at most);
- a count is published as rint(y) and clamped to its range [0, N]: rint and clamping move y no
  farther from the integer q in [0, N], so [rint(y) − ⌈h⌉, rint(y) + ⌈h⌉] ∩ [0, N] covers q
  whenever y ± h does (the interval of a clamped count is clamped too, and said so);
- a smooth-sensitivity count's std S_UB/α is data; only its DP release s' is public:
  ln s' = grid · (round(ln std / grid) + Y) with Y discrete Laplace of scale t, so
  std <= s' · e^{grid · (j + 1/2)} except with probability P[−Y >= j] <= e^{−j/t} <= 1% (j = ⌈t ln 100⌉),
  and the interval uses that upper std at z = Φ^-1(1 − 0.02) (the 4% left): 95% in all. Without a released
  std, S_UB <= N gives std <= N/α.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from privrelease.core import noise

LEVEL = 0.95
Z95 = NormalDist().inv_cdf(1 - (1 - LEVEL) / 2)
STD_MISS = 0.01  # the share of the 5% a released smooth std's upper bound may miss
Z_SMOOTH = NormalDist().inv_cdf(1 - (1 - LEVEL - STD_MISS) / 2)


def sampler_std(sigma: float, unit: float) -> float:
    """The std ``privrelease.core.noise.gaussian`` draws with for ``sigma`` on ``unit`` (never below sigma)."""
    return unit * math.sqrt(noise.gaussian_variance_units(sigma, unit))


def count_interval(value: float, half: float, rows: int | None) -> list[int]:
    """A published integer count's 95% interval: ± ⌈half⌉, cut to the count's range [0, N]."""
    h, v = math.ceil(half), round(value)
    return [max(0, v - h), v + h if rows is None else min(rows, v + h)]


def smooth_std_upper(released: float | None, grid: float, t: int, rows: int, al: float) -> float:
    """An upper bound on a smooth count's noise std that fails with probability <= STD_MISS (module doc)."""
    most = rows / al  # S_UB <= N
    if released is None:
        return most
    j = math.ceil(t * math.log(1 / STD_MISS))
    return min(most, released * math.exp(grid * (j + 0.5)))


# -- top-h selection -----------------------------------------------------------------------------------


def lead_probability(rate_eps: float, sensitivity: int, lead: int, candidates: int) -> float:
    """A lower bound on P[permute-and-flip picks a subspace whose count leads every other by ``lead``]:
    each other is accepted, if visited before it, with probability at most p = exp(−rate · lead), so
    P >= E[(1 − p)^{#visited before}] = (1 − (1 − p)^M) / (M p) over a uniform order of M candidates
    (at p = 1, a lead of 0 with a rate of 0: 1/M)."""
    p = math.exp(-float(noise.rate(rate_eps, sensitivity)) * lead)
    # 1 − (1 − p)^M as −expm1(M·log1p(−p)): the plain form is 1 − 1 = 0 once p is below the float's epsilon
    if p == 0:
        return 1.0
    return 1.0 / candidates if p >= 1 else -math.expm1(candidates * math.log1p(-p)) / (candidates * p)
