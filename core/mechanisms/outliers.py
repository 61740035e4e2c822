"""DP outlier statistics (Okada et al.): the count of distance-based outliers in a subspace, and
the top-h subspaces holding the most outliers.

A record is an outlier in subspace S when fewer than k *other* records lie within RMS distance r
(closed ball). Counts are released with Gaussian noise scaled to the smooth upper bound S_UB of
the local sensitivity (Theorem 2 with p = 1); subspaces are chosen by h exact permute-and-flip
draws without replacement on the counts q (sensitivity GS^UB_c), each epsilon/h-DP like the
paper's exponential mechanism and never worse in expected utility. Neighbouring tables differ in
one record (replace-one) and N is public, as in the paper. All noise is ``core.noise``'s exact
discrete noise on a public grid (no float noise is published).

Two things are released privately that the paper leaves raw: the noise scale (S_UB/α is a
function of the data; its logarithm has sensitivity β, so it is released with Laplace noise on a
small share of the budget), and data-derived standardization (a charged Gaussian estimate).
Theorem 2 holds only up to a per-count epsilon (smooth_epsilon_max), enforced before any charge;
which max-cover bound runs is decided from public values (cover_plan), so no run stops on the
data; released counts are clamped to their range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from itertools import combinations, product
from typing import Annotated, Literal

import numpy as np
import pandas as pd
from pydantic import Field, model_validator
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree
from scipy.special import log_ndtr  # log Φ; scipy.stats would add 0.3 s to every command's start

from core import noise
from core.accounting import Budget, gaussian_sigma
from core.errors import InternalError, ParameterError
from core.mechanisms.base import Chart, DPCost, Plan, Result, StrictParams
from core.parallel import fan_out
from core.schema import Needs

NAME = "outliers"
ROWS_PARAM = "rows"  # filled from the dataset's registration (N is public under the record unit)
RADIUS_SLACK = 1e-9  # relative: points at exactly distance r stay inside despite float rounding
SEB_SLACK = 1e-7  # relative: miniball's tolerance, resolved towards inclusion (covers only grow)
MAX_SUBSPACES = 20_000
MAX_BALLS = 2_000_000  # enclosing balls one count may compute; cover_plan keeps the worst case under it
MAX_BLOCK_ENTRIES = 10_000_000  # worst-case size of the blocks bound's incidence matrix
# Coordinates are clipped to ±COORD_LIMIT (a public, per-record map, so DP is unaffected): squared
# distances then never overflow, so no table can make the search fail where its neighbour does not.
COORD_LIMIT = 1e15

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


def gs_lower(n: int, k: int, c: int) -> int:
    """The paper's 'Global' baseline: the GS *lower* bound min(N, 2ck+1). Not a valid DP scale."""
    return min(n, 2 * c * k + 1)


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
    log_dilation = math.log(2) + float(log_ndtr(-math.sqrt((epsilon + 2 * b) / math.expm1(2 * b))))
    log_sliding = float(log_ndtr(-(epsilon / (2 * a) - a / 2)))
    return float(np.logaddexp(log_dilation, epsilon / 2 + log_sliding))


@lru_cache(maxsize=256)
def smooth_epsilon_max(delta: float) -> float:
    """The largest per-count epsilon for which the smooth-sensitivity Gaussian is (epsilon, delta)-DP
    by Theorem 2's proof: the root of smooth_log_failure(ε, δ) = ln δ (the failure grows with ε)."""
    from scipy.optimize import brentq  # imported here: only requests that use smooth noise need it

    return float(brentq(lambda e: smooth_log_failure(e, delta) - math.log(delta), 1e-9, 1e3, xtol=1e-12, rtol=1e-14))


def paper_global_std(gs: float, epsilon: float, delta: float) -> float:
    """Theorem 1's noise std for global sensitivity ``gs`` (the paper's constant 2 ln(2/δ), valid
    for epsilon < 1); for reproducing its comparison. Releases use the analytic Gaussian."""
    return gs * math.sqrt(2 * math.log(2 / delta)) / epsilon


# -- parameters -------------------------------------------------------------------------------------


class PublicScale(StrictParams):
    mean: float = Field(allow_inf_nan=False, description="public mean of the column")
    std: float = Field(gt=0, allow_inf_nan=False, description="public standard deviation of the column")


class PrivateScale(StrictParams):
    """Estimate means and standard deviations from the data with the Gaussian mechanism (charged)."""

    bounds: dict[str, tuple[Annotated[float, Field(allow_inf_nan=False)], Annotated[float, Field(allow_inf_nan=False)]]] = Field(
        min_length=1, description="public clipping range [low, high] per column for the estimate"
    )
    share: float = Field(0.1, gt=0, lt=1, description="fraction of epsilon and delta spent on the estimate")

    @model_validator(mode="after")
    def _ordered(self) -> PrivateScale:
        for column, (lo, hi) in self.bounds.items():
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise ValueError(f"standardize.bounds[{column!r}] must be finite with low < high")
        return self


class Params(StrictParams):
    """Public parameters of an outlier-statistics release. ``epsilon``/``delta`` are the total."""

    query: Literal["count", "top_subspaces"] = Field("count", description="count: outliers in one subspace; top_subspaces: the h c-dim subspaces with most outliers")
    columns: list[str] | None = Field(None, min_length=1, description="count: the subspace; top_subspaces: the candidate columns (default: every column)")
    k: int = Field(ge=1, le=10_000, description="an outlier has fewer than k other records within r")
    r: float = Field(gt=0, allow_inf_nan=False, description="radius, in RMS distance over the subspace (standardized units unless standardize is false)")
    epsilon: float = Field(gt=0, le=100, description="total epsilon charged")
    delta: float = Field(0.0, ge=0, lt=1, description="total delta charged (needed by counts and by a private standardization)")
    c: int = Field(1, ge=1, le=64, description="top_subspaces: dimension of the candidate subspaces")
    h: int = Field(1, ge=1, le=1000, description="top_subspaces: number of subspaces chosen")
    release_counts: bool = Field(True, description="top_subspaces: also release the noisy count of each chosen subspace")
    count_share: float = Field(0.5, gt=0, lt=1, description="top_subspaces: fraction of the query budget for the counts")
    scale_share: float = Field(0.1, ge=0, lt=1, description="fraction of each count's budget spent releasing its noise std (0: not released)")
    standardize: Literal[False] | dict[str, PublicScale] | PrivateScale | None = Field(
        None, description="false (raw units), public {column: {mean, std}}, or {bounds, share} for a charged estimate"
    )
    noise: Literal["auto", "smooth", "global"] = Field(
        "auto", description="count noise: smooth sensitivity (S_UB/α), global sensitivity (min(N, k·K_c+1)), or auto: global whenever it beats the least noise smooth sensitivity could give for this N (public)"
    )
    exact_until: int | None = Field(None, ge=0, description="compute the max ball cover exactly for t < exact_until and use the band count beyond (public switch); default exact throughout (in 3-D and above, cover_plan decides from N and the dimension)")
    rows: int | None = Field(None, ge=2, description="the public number of records N declared with the dataset, set by the service from its registration (never by the analyst): counts are then clamped to [0, N] and must come from a table of N records")

    @model_validator(mode="after")
    def _consistent(self) -> Params:
        if self.standardize is None:
            raise ValueError(
                "standardize is required: give the public mean and std per column ({column: {mean, std}}), "
                "{bounds: {column: [low, high]}} to estimate them privately (charged), or false for raw units"
            )
        if self.columns is not None and len(set(self.columns)) != len(self.columns):
            raise ValueError("columns lists a column twice")
        if self.query == "count" and self.delta == 0:
            raise ValueError("a count is released with Gaussian noise and needs delta > 0")
        if self.query == "top_subspaces" and self.release_counts and self.delta == 0:
            raise ValueError("release_counts needs delta > 0 (the counts get Gaussian noise); or set release_counts: false")
        if isinstance(self.standardize, PrivateScale) and self.delta == 0:
            raise ValueError("a private standardization uses the Gaussian mechanism and needs delta > 0")
        a = allocate(self)  # refuses a budget below the exact sampler's slack (noise.continuous_budget)
        if a.counts and self.noise == "smooth" and a.count.epsilon > smooth_epsilon_max(a.count.delta):
            raise ValueError(
                f"epsilon per count is {a.count.epsilon:.6g}, above {smooth_epsilon_max(a.count.delta):.6g}: the most "
                f"the smooth-sensitivity Gaussian's proof covers at delta per count {a.count.delta:.3g} (Theorem 2; "
                "docs/REPRODUCTION.md derives the bound). Lower epsilon or use noise: global"
            )
        if self.columns is not None:
            try:
                resolve(self, tuple(self.columns))
            except ParameterError as exc:
                raise ValueError(str(exc).removeprefix("outliers: ").rstrip(".")) from None
        return self


@dataclass(frozen=True)
class Allocation:
    """How the total (epsilon, delta) is split between the parts of the query."""

    standardize: Budget
    select: float  # epsilon of the whole top-h selection (0 for a count)
    count: Budget  # per released count
    scale: float  # epsilon per released noise std
    counts: int  # number of released counts


def allocate(params: Params) -> Allocation:
    s = params.standardize.share if isinstance(params.standardize, PrivateScale) else 0.0
    eps, delta = params.epsilon * (1 - s), params.delta * (1 - s)
    if params.query == "count":
        counts, select = 1, 0.0
    elif params.release_counts:
        counts, select = params.h, eps * (1 - params.count_share)
        eps *= params.count_share
    else:
        counts, select, eps = 0, eps, 0.0
    per = eps / counts if counts else 0.0
    # each count's continuous proof is calibrated a hair inside its share, for the discrete sampler
    # (the smooth count uses exact_gaussian, whose slack is smaller: ETA covers both)
    count = Budget(*noise.continuous_budget(per * (1 - params.scale_share), delta / counts, 1)) if counts else Budget(0.0)
    return Allocation(
        standardize=Budget(params.epsilon * s, params.delta * s),
        select=select,
        count=count,
        scale=per * params.scale_share,
        counts=counts,
    )


def resolve(params: Params, schema: tuple[str, ...]) -> tuple[list[str], list[tuple[str, ...]]]:
    """The columns used and the candidate subspaces, from public parameters and the column names."""
    columns = list(params.columns) if params.columns is not None else list(schema)
    missing = [c for c in columns if c not in schema]
    if missing:
        raise ParameterError(f"outliers: columns {missing} are not in the table (it has {list(schema)}).")
    if isinstance(params.standardize, dict | PrivateScale):
        given = params.standardize if isinstance(params.standardize, dict) else params.standardize.bounds
        absent = [c for c in columns if c not in given]
        if absent:
            raise ParameterError(f"outliers: standardize gives no scale for columns {absent}; add them or set standardize: false.")
    if params.query == "count":
        return columns, [tuple(columns)]
    if params.c > len(columns):
        raise ParameterError(f"outliers: c={params.c} is larger than the {len(columns)} candidate columns.")
    n_sub = math.comb(len(columns), params.c)
    if params.h > n_sub:
        raise ParameterError(f"outliers: h={params.h} is more than the {n_sub} candidate subspaces of dimension {params.c}.")
    if n_sub > MAX_SUBSPACES:
        raise ParameterError(f"outliers: {n_sub} candidate subspaces is more than {MAX_SUBSPACES}; list fewer columns or lower c.")
    return columns, list(combinations(columns, params.c))


def needs(params: Params, schema: tuple[str, ...]) -> Needs:
    columns, _ = resolve(params, schema)
    return Needs(columns=tuple(columns), numeric=tuple(columns))


def plan(params: Params) -> Plan:
    a = allocate(params)
    what = "count of outliers" if params.query == "count" else f"top-{params.h} subspaces of dimension {params.c}"
    cost = Budget(params.epsilon, params.delta if (a.counts or a.standardize.delta) else 0.0)
    return Plan(
        cost=DPCost(cost, "record"),
        guarantee=f"record-level (epsilon={cost.epsilon:g}, delta={cost.delta:g})-differential privacy: DP {what} (Okada et al.)",
        detail={
            "accountant": "basic",
            "standardize": [a.standardize.epsilon, a.standardize.delta],
            "select_epsilon": a.select,
            "count": [a.count.epsilon, a.count.delta],
            "scale_epsilon": a.scale,
            "counts": a.counts,
        },
    )


# -- geometry: degrees, counts and the exact max ball cover -----------------------------------------


def subspace_points(z: np.ndarray) -> np.ndarray:
    """Coordinates scaled by 1/sqrt(|S|), so Euclidean distance is the paper's RMS distance."""
    return np.ascontiguousarray(z, dtype=float) / math.sqrt(z.shape[1])


def degrees(points: np.ndarray, r: float) -> np.ndarray:
    """Number of *other* records within distance r of each record (closed ball), by KD-tree.

    Coordinates must lie within ±COORD_LIMIT (``standardized`` clips them): beyond it squared
    distances can overflow, and scipy's threaded query then returns uninitialised memory."""
    if not np.isfinite(points).all() or np.abs(points).max(initial=0.0) > COORD_LIMIT:
        raise InternalError("outliers: coordinates beyond the clipping limit reached the distance search")
    tree = cKDTree(points)
    return tree.query_ball_point(points, r * (1 + RADIUS_SLACK), return_length=True, workers=-1) - 1


class Cover:
    """max over balls B(x, r), x anywhere, of |B ∩ P| for subsets P of one point set.

    Exact: 1-D, a sliding window of width 2r; 2-D, candidate centres (each point, and the two
    centres of radius-r circles through each pair); higher, branch and bound over cliques of the
    2r-graph, with the smallest enclosing ball deciding whether a set fits, per connected
    component, on distinct points weighted by multiplicity. ``blocks`` is a polynomial upper bound
    in any dimension: the most points in one block of 2^d grid cells of side 2r (every ball fits in
    one). ``cover_plan`` picks the method from public values; ``method`` overrides the dimension's
    exact default, for tests.
    """

    METHODS = ("window", "centres", "search")

    def __init__(self, points: np.ndarray, r: float, method: str | None = None):
        self.rho = r * (1 + RADIUS_SLACK)
        self.work = 0  # enclosing balls computed, against MAX_BALLS
        dim = points.shape[1]
        self.method = method or self.METHODS[min(dim, 3) - 1]
        if {"window": dim == 1, "centres": dim == 2, "search": True, "blocks": True}.get(self.method) is not True:
            raise ValueError(f"cover method {self.method!r} does not apply in {dim} dimensions")
        if self.method == "window":
            x = points[:, 0]
            self.order = np.argsort(x, kind="stable")
            xs = x[self.order]
            self.window_end = np.searchsorted(xs, xs + 2 * self.rho, side="right")
            return
        self.unique, self.inverse = np.unique(points, axis=0, return_inverse=True)
        self.inverse = self.inverse.ravel()
        if self.method == "blocks":
            self.incidence = _block_incidence(self.unique, self.rho)
            return
        tree = cKDTree(self.unique)
        if self.method == "centres":
            centres = np.vstack([self.unique, *_circle_centres(self.unique, tree.query_pairs(2 * self.rho, output_type="ndarray"), self.rho)])
            self.incidence = _incidence(cKDTree(centres), tree, self.rho, len(centres), len(self.unique))
            return
        pairs = tree.query_pairs(2 * self.rho, output_type="ndarray")
        m = len(self.unique)
        ones = np.ones(len(pairs), dtype=np.int8)
        self.graph = csr_matrix((ones, (pairs[:, 0], pairs[:, 1])), shape=(m, m))
        self.graph = (self.graph + self.graph.T).tocsr()
        self.incidence = _incidence(tree, tree, self.rho, m, m)  # balls centred on the points: a lower bound

    def max_cover(self, mask: np.ndarray) -> int:
        """The largest number of masked records one closed ball of radius r can hold."""
        if not mask.any():
            return 0
        if self.method == "window":
            inside = mask[self.order].astype(np.int64)
            cum = np.concatenate([[0], np.cumsum(inside)])
            starts = np.flatnonzero(inside)
            return int((cum[self.window_end[starts]] - cum[starts]).max())
        weight = np.bincount(self.inverse, weights=mask, minlength=len(self.unique)).astype(np.int64)
        if self.method in ("centres", "blocks"):
            return int((self.incidence @ weight).max())
        return self._branch_and_bound(weight)

    def _branch_and_bound(self, weight: np.ndarray) -> int:
        live = np.flatnonzero(weight)
        best = int((self.incidence[:, live] @ weight[live]).max())
        sub = self.graph[live][:, live]
        n_comp, label = connected_components(sub, directed=False)
        totals = np.bincount(label, weights=weight[live], minlength=n_comp)
        limit = self.rho**2 * (1 + SEB_SLACK)
        for comp in np.argsort(-totals, kind="stable"):
            if totals[comp] <= best:
                break
            members = live[label == comp]
            neighbours = {v: set(self.graph.indices[self.graph.indptr[v]:self.graph.indptr[v + 1]]) for v in members}

            def expand(chosen: list[int], ball: tuple[np.ndarray, float], have: int, cands: list[int]) -> None:
                nonlocal best
                room = sum(int(weight[v]) for v in cands)
                for i, v in enumerate(cands):
                    if have + room <= best:
                        return
                    room -= int(weight[v])
                    grown = ball
                    if not _inside(self.unique[v], ball):
                        self.work += 1
                        if self.work > MAX_BALLS:  # cover_plan rules this out for every table
                            raise InternalError(f"outliers: the max-ball search passed {MAX_BALLS:,} enclosing balls")
                        grown = _ball_through(self.unique[chosen], self.unique[v])
                    if grown[1] <= limit:
                        best = max(best, have + int(weight[v]))
                        rest = np.array([u for u in cands[i + 1:] if u in neighbours[v]], dtype=np.int64)  # noqa: B023 - used at once
                        if rest.size:  # a radius-r ball holding the chosen set is centred within
                            reach = self.rho + math.sqrt(max(limit - grown[1], 0.0))  # sqrt(r² − seb²) of its centre
                            rest = rest[((self.unique[rest] - grown[0]) ** 2).sum(axis=1) <= reach**2 * (1 + SEB_SLACK)]
                        expand([*chosen, v], grown, have + int(weight[v]), rest.tolist())

            expand([], (np.zeros(self.unique.shape[1]), -1.0), 0, sorted(members, key=lambda v: -weight[v]))
        return best


# -- smallest enclosing balls --------------------------------------------------------------------------
#
# Welzl's algorithm in Gärtner's move-to-front form, with the circumsphere of the boundary set
# solved by least squares in its affine hull. Boundary sets on real data are often affinely
# dependent (grid-valued columns, ties); miniball 1.2 solves them exactly and raises
# LinAlgError, so it serves only as a test oracle on points in general position.


def _inside(p: np.ndarray, ball: tuple[np.ndarray, float]) -> bool:
    centre, r2 = ball
    return r2 >= 0 and float(((p - centre) ** 2).sum()) <= r2 * (1 + 1e-12) + 1e-300


def _circumball(boundary: list[np.ndarray]) -> tuple[np.ndarray, float]:
    """The smallest ball with every boundary point on its sphere (centre in their affine hull)."""
    p0 = boundary[0]
    if len(boundary) == 1:
        return p0.copy(), 0.0
    u = np.array(boundary[1:]) - p0
    gram = u @ u.T
    lam = np.linalg.lstsq(gram, np.diag(gram) / 2, rcond=None)[0]
    centre = p0 + lam @ u
    return centre, float(((centre - p0) ** 2).sum())


def _move_to_front(points: list[np.ndarray], end: int, boundary: list[np.ndarray], dim: int) -> tuple[np.ndarray, float]:
    ball = _circumball(boundary) if boundary else (np.zeros(dim), -1.0)
    if len(boundary) == dim + 1:
        return ball
    for i in range(end):
        if not _inside(points[i], ball):
            ball = _move_to_front(points, i, [*boundary, points[i]], dim)
            points.insert(0, points.pop(i))
    return ball


def enclosing_ball(points: np.ndarray) -> tuple[np.ndarray, float]:
    """The smallest ball holding every row of ``points``: (centre, squared radius)."""
    points = np.asarray(points, dtype=float)
    return _move_to_front(list(points), len(points), [], points.shape[1])


def _ball_through(inside: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, float]:
    """The smallest ball holding ``inside`` and p, for p outside the smallest ball of ``inside``
    (p is then on its boundary)."""
    return _move_to_front(list(np.asarray(inside, dtype=float)), len(inside), [p], len(p))


def _circle_centres(points: np.ndarray, pairs: np.ndarray, rho: float) -> list[np.ndarray]:
    """Centres of the two radius-rho circles through each pair of distinct points."""
    if len(pairs) == 0:
        return []
    a, b = points[pairs[:, 0]], points[pairs[:, 1]]
    mid, diff = (a + b) / 2, b - a
    half = np.linalg.norm(diff, axis=1) / 2
    keep = half > 0
    mid, diff, half = mid[keep], diff[keep], half[keep]
    normal = np.stack([-diff[:, 1], diff[:, 0]], axis=1) / (2 * half)[:, None]
    offset = np.sqrt(np.maximum(rho**2 - half**2, 0.0))[:, None] * normal
    return [mid + offset, mid - offset]


def _block_incidence(points: np.ndarray, rho: float) -> csr_matrix:
    """Sparse 0/1 matrix: block b (2^d cells of side 2rho, by its lowest cell) holds point j.

    A closed ball of radius rho (with the enclosing-ball tolerance) spans at most two consecutive
    cells per axis, so it lies in one block. A point near a cell edge may round into either cell;
    it counts in every block either cell belongs to, so the bound holds whatever the rounding.
    Each point counts once per block: the bound grows by at most one per added point.
    """
    side = 2 * rho * (1 + SEB_SLACK)
    slack = np.abs(points) * 1e-12 + 1e-300
    lowest = np.floor((points - slack) / side).astype(np.int64) - 1  # lowest block corner per axis
    highest = np.floor((points + slack) / side).astype(np.int64)
    corners, members = [], []
    for offset in product(range(3), repeat=points.shape[1]):
        corner = lowest + np.array(offset)
        fits = (corner <= highest).all(axis=1)
        corners.append(corner[fits])
        members.append(np.flatnonzero(fits))
    _, block = np.unique(np.vstack(corners), axis=0, return_inverse=True)
    member = np.concatenate(members)
    shape = (int(block.max()) + 1, len(points))
    return csr_matrix((np.ones(len(member), dtype=np.int64), (block.ravel(), member)), shape=shape)


def _incidence(centres: cKDTree, points: cKDTree, rho: float, n_centres: int, n_points: int) -> csr_matrix:
    """Sparse 0/1 matrix: centre i's closed ball of radius rho holds point j."""
    pairs = centres.sparse_distance_matrix(points, rho * (1 + SEB_SLACK), output_type="ndarray")
    ones = np.ones(len(pairs), dtype=np.int64)
    return csr_matrix((ones, (pairs["i"], pairs["j"])), shape=(n_centres, n_points))


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
    if c == 1 or (c == 2 and n**3 <= MAX_BLOCK_ENTRIES):  # the 2-D centres x points incidence is < N^3
        return Cover.METHODS[c - 1], stop
    if c >= 3 and n <= 40 and 2 * stop * (2**n - 1) <= MAX_BALLS:
        return "search", stop
    if 3**c * n <= MAX_BLOCK_ENTRIES:
        return "blocks", stop
    return "band", 0


def bounds_by_t(deg: np.ndarray, k: int, cover: Cover, exact_until: int | None = None) -> np.ndarray:
    """B_t = min(N, max(M_k^(t), M_{k−1}^(t)) + t + 1) for every t = 0..N (no early stop)."""
    n = len(deg)
    stop = n + 1 if exact_until is None else min(exact_until, n + 1)
    bands = np.maximum(band_sizes(deg, k, n), band_sizes(deg, k - 1, n))
    out = np.empty(n + 1)
    for t in range(n + 1):
        m = max(cover.max_cover(np.abs(deg - j) <= t) for j in (k, k - 1)) if t < stop else bands[t]
        out[t] = min(n, m + t + 1)
    return out


def smooth_bound(deg: np.ndarray, k: int, b: float, cover: Cover | None, exact_until: int | None = None) -> Smooth:
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
        m = np.array([
            m_prev[i] if t and bands[i, t] == p_prev[i] else cover.max_cover(np.abs(deg - j) <= t)
            for i, j in enumerate((k, k - 1))
        ])  # fmt: skip
        value = decay[t] * min(n, m.max() + t + 1)
        if value > best:
            best, arg = float(value), t
        m_prev, p_prev = m, bands[:, t].copy()
    return Smooth(best, arg, stop)


# -- release -------------------------------------------------------------------------------------------


def standardized(frame: pd.DataFrame, columns: list[str], params: Params, budget: Budget,
                 rng: np.random.Generator) -> tuple[np.ndarray, dict]:  # fmt: skip
    """The columns as a float matrix in the units r is given in, and the scales used (public)."""
    x = frame[columns].to_numpy(dtype=float)
    spec = params.standardize
    if spec is False:
        return np.clip(x, -COORD_LIMIT, COORD_LIMIT), {"method": "none"}
    if isinstance(spec, dict):
        mean = np.array([spec[c].mean for c in columns])
        std = np.array([spec[c].std for c in columns])
        method = "public"
    else:
        mean, std = private_scale(x, np.array([spec.bounds[c] for c in columns]), budget, rng)
        method = "private (Gaussian mechanism, charged)"
    scales = {c: {"mean": float(m), "std": float(s)} for c, m, s in zip(columns, mean, std)}
    with np.errstate(over="ignore"):
        z = (x - mean) / std
    return np.clip(z, -COORD_LIMIT, COORD_LIMIT), {"method": method, "scales": scales}


def private_scale(x: np.ndarray, bounds: np.ndarray, budget: Budget, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Means and stds from clipped sums with one Gaussian mechanism (replace-one sensitivity).

    Each column is mapped onto [−1, 1] by its public bounds and each value put on the noise grid
    (y to the nearest grid point, y^2 rounded down: still in [−1, 1] and [0, 1]); replacing a record
    moves a column's sum by at most 2 and its sum of squares by at most 1, so the l2 sensitivity is
    sqrt(5d). Sums are exact integers in grid units; the noise is ``core.noise``'s discrete Gaussian.
    """
    n, d = x.shape
    centre, half = bounds.mean(axis=1), (bounds[:, 1] - bounds[:, 0]) / 2
    y = (np.clip(x, bounds[:, 0], bounds[:, 1]) - centre) / half
    sigma = math.sqrt(5 * d) * gaussian_sigma(*noise.continuous_budget(budget.epsilon, budget.delta, 2 * d))
    noise.check_shift(math.sqrt(5 * d), sigma)
    unit = min(1.0, noise.grid(sigma))
    yu = np.rint(y / unit).astype(np.int64)
    sq = (yu * yu) // round(1 / unit)  # floor(y^2 / unit) in grid units (unit is a power of two <= 1)
    noisy = noise.gaussian(rng, sigma, np.concatenate([yu.sum(axis=0), sq.sum(axis=0)]), unit)
    m1 = np.clip(noisy[:d] / n, -1, 1)
    var = np.clip(noisy[d:] / n - m1**2, (1 / n) ** 2, 1)  # a floor keeps the scale positive
    return centre + half * m1, half * np.sqrt(var)


def select_top(quality: np.ndarray, sensitivity: int, h: int, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """h distinct indices: h exact permute-and-flip draws without replacement on the integer
    counts (sensitivity ``sensitivity``), each epsilon/h-DP, so the selection is epsilon-DP in total."""
    left = np.arange(len(quality))
    picked = []
    step = noise.rate(epsilon / h, sensitivity)
    for _ in range(h):  # h selections, not records
        i = noise.permute_and_flip(rng, quality[left], step)
        picked.append(int(left[i]))
        left = np.delete(left, i)
    return np.array(picked, dtype=np.int64)


def smooth_floor(n: int, b: float) -> float:
    """The least S_UB any table of n records can have: B_t >= min(n, t + 1)."""
    t = np.arange(n + 1)
    return float((np.exp(-t * b) * np.minimum(n, t + 1)).max())


def global_std(n: int, k: int, c: int, budget: Budget) -> float:
    """Noise std of the Gaussian mechanism on GS^UB (the analytic Gaussian: exact for every epsilon)."""
    return gs_upper(n, k, c) * gaussian_sigma(budget.epsilon, budget.delta)


def uses_global(params: Params, a: Allocation, n: int, c: int) -> bool:
    """Decided from public parameters and N only, never from the data."""
    if params.noise != "auto":
        return params.noise == "global"
    if a.count.epsilon > smooth_epsilon_max(a.count.delta):
        return True  # beyond the range Theorem 2's proof covers (plain smooth is refused there)
    whole = Budget(a.count.epsilon + a.scale, a.count.delta)
    smooth_least = smooth_floor(n, beta(a.count.epsilon, a.count.delta)) / alpha(a.count.epsilon, a.count.delta)
    return global_std(n, params.k, c, whole) <= smooth_least


@dataclass(frozen=True)
class Counted:
    subspace: tuple[str, ...]
    method: str  # "smooth" or "global"
    true_count: int  # never released
    noisy: float
    noise_std: float  # the std drawn with; released exactly only for "global"
    noise_std_released: float | None
    global_std: float
    smooth: Smooth | None


@dataclass(frozen=True)
class Measured:
    """A subspace's true count and (for smooth noise) its S_UB: pure, so it can run anywhere."""

    q: int
    smooth: Smooth | None


def measure(z: np.ndarray, params: Params, smooth: bool, b: float = 0.0) -> Measured:
    pts = subspace_points(z)
    deg = degrees(pts, params.r)
    bound = None
    if smooth:
        method, steps = cover_plan(len(z), z.shape[1], params.exact_until)
        bound = smooth_bound(deg, params.k, b, Cover(pts, params.r, method) if steps else None, steps)
    return Measured(int((deg < params.k).sum()), bound)


def noisy_count(z: np.ndarray, subspace: tuple[str, ...], params: Params, a: Allocation, rng: np.random.Generator,
                measured: Measured | None = None) -> Counted:  # fmt: skip
    """q + (S_UB/α)·N(0,1) with ln(S_UB/α) released as ln + Laplace(β/ε_scale), or q + GS·σ·N(0,1).

    The caller has charged the ledger already."""
    n = len(z)
    whole = Budget(a.count.epsilon + a.scale, a.count.delta)
    gs = global_std(n, params.k, len(subspace), whole)
    use_global = uses_global(params, a, n, len(subspace))
    al, be = alpha(a.count.epsilon, a.count.delta), beta(a.count.epsilon, a.count.delta)
    m = measured or measure(z, params, not use_global, be)
    if use_global:
        noise.check_shift(gs_upper(n, params.k, len(subspace)), gs)
        unit = min(1.0, noise.grid(gs))  # gs is public, so is its grid
        noisy = float(np.rint(noise.gaussian(rng, gs, np.array([round(m.q / unit)]), unit)[0]))
        return Counted(subspace, "global", m.q, noisy, gs, gs, gs, None)
    std = m.smooth.value / al
    # std is data: its grid must not be. S_UB >= smooth_floor(N, β) gives a public one; exact
    # Python-integer sampling covers any std/unit. Published rounded to an integer (post-processing).
    unit = noise.scalar_grid(smooth_floor(n, be) / al)
    noisy = float(np.rint(noise.exact_gaussian(rng, std, round(m.q / unit), unit)))
    released = None
    if a.scale > 0:  # S_UB is β-smooth, so ln S_UB has sensitivity β; on a grid, β + one step
        unit = noise.grid(be / a.scale)
        step = math.ceil(be / unit) + 1
        log = noise.laplace(rng, step * unit / a.scale, np.array([round(math.log(std) / unit)]), unit)[0]
        released = float(math.exp(log))
    return Counted(subspace, "smooth", m.q, noisy, std, released, gs, m.smooth)


def clamped(c: Counted, rows: int | None) -> Counted:
    """The noisy count moved into the range every count lies in: [0, N] with a public N, else [0, ∞).
    Post-processing of the DP output, so it costs nothing."""
    return replace(c, noisy=float(np.clip(c.noisy, 0, np.inf if rows is None else rows)))


def public_std(c: Counted, n: int, a: Allocation) -> tuple[float, bool]:
    """A noise std the report may state, from public values and DP outputs only: the exact global
    std, the released smooth std, or else the least smooth std for N (True: a lower bound)."""
    if c.noise_std_released is not None:
        return c.noise_std_released, False
    return smooth_floor(n, beta(a.count.epsilon, a.count.delta)) / alpha(a.count.epsilon, a.count.delta), True


def run(frame: pd.DataFrame, params: Params, rng: np.random.Generator) -> Result:
    columns, subspaces = resolve(params, tuple(frame.columns))
    n = len(frame)
    if n < 2:
        raise ParameterError("outliers: the table needs at least 2 records.")
    if params.rows is not None and params.rows != n:
        raise InternalError("outliers: the table does not have the number of records declared with the dataset")
    a = allocate(params)
    z, scaling = standardized(frame, columns, params, a.standardize, rng)
    index = {c: i for i, c in enumerate(columns)}
    cols = {s: [index[c] for c in s] for s in subspaces}
    chosen: list[tuple[str, ...]] = subspaces
    selection = None
    if params.query == "top_subspaces":
        gs = gs_upper(n, params.k, params.c)
        counts = fan_out(partial(measure, params=params, smooth=False), [z[:, cols[s]] for s in subspaces])
        picked = select_top(np.array([m.q for m in counts]), gs, params.h, a.select, rng)
        chosen = [subspaces[i] for i in picked]
        selection = {"candidates": len(subspaces), "utility_divisor": gs, "epsilon": a.select}
    counted = []
    if a.counts:  # the heavy part (S_UB) fans out; noise is drawn here, in order
        smooth = not uses_global(params, a, n, len(chosen[0]))
        measured = fan_out(partial(measure, params=params, smooth=smooth, b=beta(a.count.epsilon, a.count.delta)),
                           [z[:, cols[s]] for s in chosen])  # fmt: skip
        counted = [clamped(noisy_count(z[:, cols[s]], s, params, a, rng, m), params.rows)
                   for s, m in zip(chosen, measured)]  # fmt: skip
    return _result(params, a, n, scaling, chosen, counted, selection)


def _result(params: Params, a: Allocation, n: int, scaling: dict, chosen: list[tuple[str, ...]],
            counted: list[Counted], selection: dict | None) -> Result:  # fmt: skip
    rows = []
    for rank, s in enumerate(chosen, start=1):
        c = counted[rank - 1] if counted else None
        rows.append({
            "rank": rank, "subspace": ",".join(s),
            "noisy_count": c.noisy if c else None,
            "noise": c.method if c else None,
            "noise_std": c.noise_std_released if c else None,
            "global_noise_std": c.global_std if c else None,
        })  # fmt: skip
    data = pd.DataFrame(rows)
    if params.query == "count":
        data = data.drop(columns="rank")
        result = {"subspace": list(chosen[0]), "count": counted[0].noisy}
        noise_std: object = counted[0].noise_std_released
    else:
        result = [{"subspace": list(s), "count": (counted[i].noisy if counted else None)} for i, s in enumerate(chosen)]
        noise_std = [c.noise_std_released for c in counted] if counted else None
    planned = plan(params)
    privacy = {
        "model": "(epsilon, delta)-differential privacy",
        "epsilon": params.epsilon,
        "delta": planned.cost.budget.delta,
        "n_records": n,
        "query": params.query,
        "k": params.k,
        "r": params.r,
        "allocation": planned.detail,
        "alpha": alpha(a.count.epsilon, a.count.delta) if a.counts else None,
        "beta": beta(a.count.epsilon, a.count.delta) if a.counts else None,
        "noise": sorted({c.method for c in counted}),
        "noise_std_release": (
            {"method": "exp(grid * (round(ln(S_UB/alpha) / grid) + discrete Laplace)), Laplace scale >= (beta + grid) / epsilon_scale", "laplace_scale_log": beta(a.count.epsilon, a.count.delta) / a.scale}
            if any(c.method == "smooth" for c in counted) and a.scale > 0 else None
        ),
        "standardization": scaling,
        "selection": selection,
        "clamped_to": [0, params.rows],
        "cover": (
            dict(zip(("method", "steps"), cover_plan(n, len(chosen[0]), params.exact_until)))
            if any(c.method == "smooth" for c in counted) else None
        ),
    }  # fmt: skip
    headline = {"query": params.query, "subspaces": [",".join(s) for s in chosen]}
    report = _report(params, privacy, data, _swamped(params, a, n, counted))
    charts = [_chart(data)] if counted else []
    return Result(data, privacy, report, charts, headline, name="outliers",
                  manifest={"result": result, "noise_std": noise_std})  # fmt: skip


def _swamped(params: Params, a: Allocation, n: int, counted: list[Counted]) -> list[str]:
    """Report lines for counts whose noise std exceeds the public range [0, N] of any count."""
    if params.rows is None:
        return []
    lines = []
    for c in counted:
        std, least = public_std(c, n, a)
        if std > params.rows:
            lines.append(
                f"- **{','.join(c.subspace)}: the noise std ({'at least ' if least else ''}{std:.4g}) exceeds {params.rows}, "
                "the whole range of possible counts**: the released count says almost nothing about the true one. "
                "Raise epsilon, or ask a question with fewer records at stake."
            )  # fmt: skip
    return lines


def _report(params: Params, privacy: dict, data: pd.DataFrame, swamped: list[str]) -> str:
    lines = [
        "## DP outlier statistics",
        "",
        f"Query **{params.query}**: an outlier has fewer than k={params.k} other records within RMS distance "
        f"r={params.r:g} ({privacy['standardization']['method']} standardization), among N={privacy['n_records']} "
        "records (N is public).",
        "",
    ]
    if params.query == "top_subspaces":
        sel = privacy["selection"]
        lines += [
            f"The {params.h} subspace(s) below were chosen among {sel['candidates']} of dimension {params.c} by "
            f"permute-and-flip (epsilon={sel['epsilon']:.4g} in total, quality = count, sensitivity {sel['utility_divisor']}).",
            "",
        ]
    if data["noisy_count"].notna().any():
        lines += [
            "| " + " | ".join(data.columns) + " |",
            "|" + "---|" * len(data.columns),
            *("| " + " | ".join(_cell(v) for v in row) + " |" for row in data.itertuples(index=False)),
            "",
            "`noise` says which mechanism drew each count. With `smooth`, `noise_std` is the "
            "smooth-sensitivity scale S_UB/α, itself released with noise (Laplace on its logarithm, scale "
            f"{privacy['noise_std_release']['laplace_scale_log']:.3g}) because it depends on the data."
            if privacy["noise_std_release"] else "",
            "With `global`, the noise std is public (it depends only on N, k, c and the budget) and exact. "
            "`global_noise_std` is what the Gaussian mechanism on the global-sensitivity upper bound "
            "min(N, k·K_c + 1) needs for the same budget. "
            + (f"Counts are clamped to [0, {params.rows}], the range every count lies in (N is declared with the dataset); "
               if params.rows is not None else "Counts are clamped at 0 (no number of records was declared, so not above); ")
            + "clamping is post-processing and costs nothing. They are not rounded.",
            *([""] + swamped if swamped else []),
        ]
    else:
        lines += ["Chosen: " + "; ".join(f"{{{s}}}" for s in data["subspace"]) + " (counts not released)."]
    return "\n".join(lines) + "\n"


def _cell(v: object) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def _chart(data: pd.DataFrame) -> Chart:
    series = {"noisy count": data["noisy_count"].tolist(), "global-sensitivity noise std": data["global_noise_std"].tolist()}
    if data["noise_std"].notna().all():
        series["smooth noise std (released)"] = data["noise_std"].tolist()
    return Chart("outliers.png", "Noisy outlier counts and noise scales", data["subspace"].tolist(), series, "records")


def check(original: pd.DataFrame, result: Result, params: Params) -> None:
    """The release names distinct, existing subspaces of the right shape and finite values."""
    columns, subspaces = resolve(params, tuple(original.columns))
    names = result.data["subspace"].tolist()
    expected = 1 if params.query == "count" else params.h
    if len(names) != expected or len(set(names)) != expected:
        raise InternalError(f"outliers: expected {expected} distinct subspaces, got {len(names)}")
    known = {",".join(s) for s in subspaces}
    if not set(names) <= known:
        raise InternalError("outliers: a released subspace is not a candidate")
    counts = result.data["noisy_count"].dropna().to_numpy(dtype=float)
    if not np.isfinite(counts).all():
        raise InternalError("outliers: a released count is not finite")
    if (counts < 0).any() or (params.rows is not None and (counts > params.rows).any()):
        raise InternalError("outliers: a released count is outside its clamp range")
