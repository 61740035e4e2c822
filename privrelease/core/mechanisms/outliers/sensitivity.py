"""The noise scales of DP outlier counts (Okada et al.): global sensitivity bounds, Theorem 2's
smooth-sensitivity constants and their valid range, and the smooth upper bound S_UB (Theorem 6,
Algorithm 2), computed on the max ball covers of ``outliers_geometry``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import scipy  # submodules load on first use; scipy.special.log_ndtr is log Φ (scipy.stats would cost 0.3 s)

from privrelease.core import noise
from privrelease.core.mechanisms.outliers import geometry as geometry
from privrelease.core.privacy import events
from privrelease.core.privacy.budget import Budget, boundary, gaussian_sigma

# Upper bounds on the kissing number K_d (exact for d = 1, 2, 3, 4, 8, 24; otherwise the
# semidefinite-programming bounds of Mittelmann & Vallentin 2010, which later work only lowers).
KISSING_UPPER = {
    1: 2, 2: 6, 3: 12, 4: 24, 5: 44, 6: 78, 7: 134, 8: 240, 9: 364, 10: 554, 11: 870, 12: 1357,
    13: 2069, 14: 3183, 15: 4866, 16: 7355, 17: 11072, 18: 16572, 19: 24812, 20: 36764,
    21: 54584, 22: 82340, 23: 124416, 24: 196560,
}  # fmt: skip


def kissing_upper(d: int) -> int:
    """A valid upper bound on the kissing number in R^d (3^d − 1 by volume beyond the table)."""
    if d < 1:
        raise ValueError("dimension must be >= 1")
    return KISSING_UPPER.get(d, 3**d - 1)


def gs_upper(n: int, k: int, c: int) -> int:
    """Theorem 4's upper bound on the global sensitivity of q_count in a c-dimensional subspace."""
    return min(n, k * kissing_upper(c) + 1)


def alpha(epsilon: float, delta: float) -> float:
    """Theorem 2 (p = 1): the noise is S/α · N(0, 1)."""
    return epsilon / (5 * math.sqrt(2 * (math.log(2) - math.log(delta))))


def beta(epsilon: float, delta: float) -> float:
    """Theorem 2 (p = 1): the smoothness S must have."""
    return epsilon / (4 * (1 + math.log(2) - math.log(delta)))


def smooth_log_failure(epsilon: float, delta: float) -> float:
    """ln(δ_D + e^{ε/2}·δ_S): the δ Theorem 2's proof delivers (docs/REPRODUCTION.md derives it).

    δ_D = Pr[(e^{2β} − 1)Z²/2 − β > ε/2], the dilation property's failure mass at its worst λ = β;
    δ_S = Pr[αZ + α²/2 > ε/2], the sliding property's at its worst |Δ| = α; Z ~ N(0, 1).
    """
    a, b = alpha(epsilon, delta), beta(epsilon, delta)
    log_dilation = math.log(2) + float(scipy.special.log_ndtr(-math.sqrt((epsilon + 2 * b) / math.expm1(2 * b))))
    log_sliding = float(scipy.special.log_ndtr(-(epsilon / (2 * a) - a / 2)))
    return float(np.logaddexp(log_dilation, epsilon / 2 + log_sliding))


@lru_cache(maxsize=256)
def smooth_epsilon_max(delta: float) -> float:
    """The largest per-count epsilon for which the smooth-sensitivity Gaussian is (epsilon, delta)-DP
    by Theorem 2's proof: the root of smooth_log_failure(ε, δ) = ln δ (the failure grows with ε)."""
    # the largest epsilon whose failure is at most ln(delta), from the safe side (as -x: the least x)
    return -boundary(lambda x: smooth_log_failure(-x, delta) <= math.log(delta), -1e3, -1e-9, rtol=1e-14)


# -- the budget split and a drawn count ----------------------------------------------------------------


@dataclass(frozen=True)
class Allocation:
    """How the total (epsilon, delta) is split between the parts of the query."""

    standardize: Budget
    select: float  # epsilon of the whole top-h selection (0 for a count)
    count: Budget  # per released count
    scale: float  # epsilon per released noise std
    counts: int  # number of released counts

    @property
    def whole(self) -> Budget:
        """A global-noise count's budget: its count's share and its std's (a global std is public and
        is not released with noise, so the one Gaussian has both)."""
        return Budget(self.count.epsilon + self.scale, self.count.delta)


@dataclass(frozen=True)
class Counted:
    """One subspace's count as drawn: the noisy value and the scales; only DP outputs of it are released."""

    subspace: tuple[str, ...]
    method: str  # "smooth" or "global"
    true_count: int  # never released
    noisy: float
    noise_std: float  # the std drawn with; released exactly only for "global"
    noise_std_released: float | None
    global_std: float
    smooth: Smooth | None


# -- the smooth upper bound (Theorem 6, Algorithm 2) -------------------------------------------------


@dataclass(frozen=True)
class Smooth:
    value: float  # S_UB
    argmax: int  # the t attaining it
    steps: int  # exact-cover steps Algorithm 2 ran before its early stop


def band_sizes(deg: np.ndarray, j: int, n: int) -> np.ndarray:
    """|P_j^(t)| = #{y : |deg(y) − j| <= t} for t = 0..n."""
    cum = np.concatenate([[0], np.cumsum(np.bincount(deg, minlength=n))])  # cum[i] = #{deg < i}
    t = np.arange(n + 1)
    hi = np.minimum(j + t, n - 1) + 1
    lo = np.clip(j - t, 0, n)
    return np.maximum(cum[np.clip(hi, 0, n)] - cum[lo], 0)


def cover_plan(n: int, c: int, exact_until: int | None) -> tuple[str, int]:
    """The max-cover method of Algorithm 2 and the steps t it runs for (band counts after), from
    public values only, so that no table can make the search stop or run out of memory.

    1-D covers are exact and linear; 2-D covers are exact when their worst-case incidence (about
    N^3 entries at most, nearly reached on clustered data) fits MAX_BLOCK_ENTRIES: every step up to exact_until.
    In 3-D and above
    the exact search computes at most 2^N − 1 enclosing balls per cover (one per subset of
    distinct points) and two covers per step: it runs only when that worst case, over every step,
    stays within MAX_BALLS. Otherwise the blocks bound runs, when its worst-case size (3^c entries
    per record) stays within MAX_BLOCK_ENTRIES; otherwise band counts throughout.
    """
    stop = n + 1 if exact_until is None else min(exact_until, n + 1)
    if c == 1 or (c == 2 and n**3 <= geometry.MAX_BLOCK_ENTRIES):  # the 2-D centres x points incidence is < N^3
        return geometry.Cover.METHODS[c - 1], stop
    if c >= 3 and n <= 40 and 2 * stop * (2**n - 1) <= geometry.MAX_BALLS:
        return "search", stop
    if 3**c * n <= geometry.MAX_BLOCK_ENTRIES:
        return "blocks", stop
    return "band", 0


def smooth_bound(deg: np.ndarray, k: int, b: float, cover: geometry.Cover | None, exact_until: int | None = None) -> Smooth:
    """S_UB = max_t e^{−tβ} B_t by Algorithm 2: exact covers for t < exact_until with the
    look-ahead early stop; band counts (always >= the cover) from exact_until on."""
    n = len(deg)
    t_all = np.arange(n + 1)
    decay = np.exp(-t_all * b)
    bands = np.stack([band_sizes(deg, k, n), band_sizes(deg, k - 1, n)])
    stop = n + 1 if exact_until is None else min(exact_until, n + 1)
    tail = decay[stop:] * np.minimum(n, bands[:, stop:].max(axis=0) + t_all[stop:] + 1)
    best, arg = (float(tail.max()), stop + int(tail.argmax())) if tail.size else (0.0, 0)
    m_prev, p_prev = np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.int64)
    for t in range(stop):
        # Proposition 1: no later step can beat M^(t−1) plus every record of the new bands.
        s = slice(t, stop)
        ahead = (m_prev[:, None] + bands[:, s] - p_prev[:, None]).max(axis=0)
        if (decay[s] * np.minimum(n, ahead + t_all[s] + 1)).max() <= best:
            return Smooth(best, arg, t)
        m = np.array(
            [
                m_prev[i] if t and bands[i, t] == p_prev[i] else cover.max_cover(np.abs(deg - j) <= t)
                for i, j in enumerate((k, k - 1))
            ]
        )
        value = decay[t] * min(n, m.max() + t + 1)
        if value > best:
            best, arg = float(value), t
        m_prev, p_prev = m, bands[:, t].copy()
    return Smooth(best, arg, stop)


def smooth_floor(n: int, b: float) -> float:
    """The least S_UB any table of n records can have: B_t >= min(n, t + 1)."""
    t = np.arange(n + 1)
    return float((np.exp(-t * b) * np.minimum(n, t + 1)).max())


def global_std(n: int, k: int, c: int, budget: Budget) -> float:
    """Noise std of the Gaussian mechanism on GS^UB (the analytic Gaussian: exact for every epsilon)."""
    return gs_upper(n, k, c) * gaussian_sigma(budget.epsilon, budget.delta)


def global_noise(n: int, k: int, c: int, a: Allocation) -> tuple[float, int]:
    """A global-noise count's draw: the std ``noise.gaussian`` is called with and the sensitivity it is
    calibrated to (GS^UB; one value, so l1 = l2), both in records. The draw and its privacy event
    (``global_events``) both take them from here."""
    return global_std(n, k, c, a.whole), gs_upper(n, k, c)


GLOBAL, PRIVATE, SELECTION, STD, SMOOTH = (
    "outlier count (global sensitivity)",
    "private standardization",
    "top-h selection",
    "released noise std (log scale)",
    "outlier count (smooth or global sensitivity)",  # the label smooth counts have always been recorded with
)  # the parts a run draws with, by name


def global_leaf(n: int, k: int, c: int, a: Allocation) -> events.DiscreteGaussian:
    """A global-noise count's noise: one exact discrete Gaussian (``noise.gaussian``) at ``global_noise``'s
    std, calibrated at ``noise.continuous_budget(.., 1)`` of the count's share, for sensitivity GS^UB."""
    return events.DiscreteGaussian(*global_noise(n, k, c, a), part=GLOBAL)


def private_leaf(budget: Budget, d: int) -> events.DiscreteGaussian:
    """A private standardization's noise on d columns' clipped sums and sums of squares: l2 sensitivity
    sqrt(5d), std from the continuous proof at ``noise.continuous_budget`` for 2d coordinates."""
    root = math.sqrt(5 * d)
    return events.DiscreteGaussian(
        root * gaussian_sigma(*noise.continuous_budget(budget.epsilon, budget.delta, 2 * d)), root, part=PRIVATE
    )


def smooth_leaf(n: int, a: Allocation, epsilon: float, delta: float) -> events.SmoothGaussian:
    """A smooth count's noise, S_UB/α N(0, 1) (Theorem 2: (``epsilon``, ``delta``)-DP, its share of the release,
    calibrated a hair inside at ``a.count``): its std is data, declared with the bounds every table of ``n``
    records keeps it in: S_UB >= ``smooth_floor`` (B_t >= min(N, t + 1)) and S_UB <= N (B_t <= N); drawn exactly
    on the public grid of the least std (``noise.scalar_grid``)."""
    al, be = alpha(a.count.epsilon, a.count.delta), beta(a.count.epsilon, a.count.delta)
    low = smooth_floor(n, be) / al
    return events.SmoothGaussian(epsilon, delta, low, n / al, noise.scalar_grid(low), part=SMOOTH)


def std_leaf(a: Allocation) -> events.DiscreteLaplace:
    """A smooth count's released noise std: ln S_UB on the grid of beta / eps_scale, Lap_Z(t) with t =
    ceil(step / eps_scale) steps for sensitivity step = ceil(beta / grid) + 1 (S_UB is beta-smooth)."""
    unit = noise.grid(beta(a.count.epsilon, a.count.delta) / a.scale)
    step = math.ceil(beta(a.count.epsilon, a.count.delta) / unit) + 1
    return events.DiscreteLaplace(math.ceil(step / a.scale), step, part=STD)


def count_dimension(params) -> int | None:
    """The dimension of the counted subspaces, from the parameters (None: a count over every column)."""
    if params.query == "top_subspaces":
        return params.c
    return len(params.columns) if params.columns else None


def uses_global(params, a: Allocation, n: int, c: int) -> bool:
    """Whether a count in c dimensions gets global-sensitivity noise (``outliers.Params``' ``noise``, its
    allocation and N): decided from public parameters and N only, never from the data."""
    if params.noise != "auto":
        return params.noise == "global"
    if a.count.epsilon > smooth_epsilon_max(a.count.delta):
        return True  # beyond the range Theorem 2's proof covers (plain smooth is refused there)
    smooth_least = smooth_floor(n, beta(a.count.epsilon, a.count.delta)) / alpha(a.count.epsilon, a.count.delta)
    return global_std(n, params.k, c, a.whole) <= smooth_least


def planned_noise(params, a: Allocation) -> str | None:
    """The counts' noise, "global" or "smooth", from the parameters alone; None when it turns on a
    number they do not state (N undeclared, or the dimension of a count over every column): the registry
    states both (``outliers.ROWS_PARAM``, ``outliers.COLUMNS_PARAM``), so only a plan of unbound parameters
    leaves it open, and a run of such a plan draws no count (``events.Undeclared``)."""
    c = count_dimension(params)
    if params.rows is None or c is None:
        return None
    if params.noise == "smooth":
        return "smooth"
    return "global" if uses_global(params, a, params.rows, c) else "smooth"


def privacy_events(params, a: Allocation) -> list[events.Event]:
    """An outlier release's privacy event, part by part (``outliers.Params`` and its allocation), as it
    runs. A private standardization is one discrete Gaussian (``private_leaf``, on its d columns) plus the
    sampler's slack; the top-h selection h permute-and-flip draws (pure epsilon/h each). Global-noise counts
    are the Gaussian they draw (``global_leaf``, and the sampler's slack; their std is public, so nothing
    else is drawn). A smooth-sensitivity count is Theorem 2's Gaussian of a data-dependent std
    (``smooth_leaf``, accounted as its (epsilon, delta)), and its released noise std is a discrete Laplace
    draw on its grid (``std_leaf``). Where the parameters leave a draw open (columns or N unstated: unbound
    parameters), its share is one (epsilon, delta) part, which bounds any draw, and no run draws it."""
    out: list[events.Event] = []
    private = getattr(params.standardize, "bounds", None) is not None  # a PrivateScale
    if private:
        if params.columns:  # d columns, all of them with bounds (the slack is stated for every bound given)
            d = len(params.columns)
            out += [private_leaf(a.standardize, d), events.sampler_slack(2 * max(d, len(params.standardize.bounds)))]
        else:
            out.append(
                events.EpsilonDelta(a.standardize.epsilon, a.standardize.delta, part=f"{PRIVATE} (columns unstated: never drawn)")
            )
    if a.select:
        out.append(events.times(events.PermuteAndFlip(a.select / params.h, part=SELECTION), params.h))
    if a.counts:
        s = params.standardize.share if private else 0.0
        eps = params.epsilon * (1 - s) * (params.count_share if params.query == "top_subspaces" else 1) / a.counts
        delta = params.delta * (1 - s) / a.counts
        kind = planned_noise(params, a)
        if kind == "global":
            leaf = global_leaf(params.rows, params.k, count_dimension(params), a)
            return out + [events.times(leaf, a.counts), events.sampler_slack(a.counts)]
        if kind is None:
            return out + [
                events.times(
                    events.EpsilonDelta(
                        eps,
                        delta,
                        part="outlier count and its noise std (smooth or "
                        "global noise: decided from N and the dimension when it runs)",
                    ),
                    a.counts,
                )
            ]
        out.append(events.times(smooth_leaf(params.rows, a, eps * (1 - params.scale_share), delta), a.counts))
        if a.scale > 0:
            out.append(events.times(std_leaf(a), a.counts))
    return out
