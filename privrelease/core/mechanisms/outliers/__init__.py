"""DP outlier statistics (Okada et al.): the count of distance-based outliers in a subspace, and
the top-h subspaces holding the most outliers.

A record is an outlier in subspace S when fewer than k *other* records lie within RMS distance r
(closed ball). Counts are released with Gaussian noise scaled to the smooth upper bound S_UB of
the local sensitivity (Theorem 2 with p = 1); subspaces are chosen by h exact permute-and-flip
draws without replacement on the counts q (sensitivity GS^UB_c), each epsilon/h-DP like the
paper's exponential mechanism and never worse in expected utility. Neighbouring tables differ in
one record (replace-one) and N is public, as in the paper. All noise is ``privrelease.core.noise``'s exact
discrete noise on a public grid (no float noise is published).

Two things are released privately that the paper leaves raw: the noise scale (S_UB/α is a
function of the data; its logarithm has sensitivity β, so it is released with Laplace noise on a
small share of the budget), and data-derived standardization (a charged Gaussian estimate).
Theorem 2 holds only up to a per-count epsilon (smooth_epsilon_max), enforced before any charge;
which max-cover bound runs is decided from public values (cover_plan), so no run stops on the
data; released counts are clamped to their range.

This module holds the parameters and the release; ``outliers_geometry`` the distances and max ball
covers, ``outliers_sensitivity`` the noise scales and the budget split, ``outliers_report`` what a
release says, and its preview before it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import combinations
from typing import Annotated, Literal

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from privrelease.core import noise
from privrelease.core.errors import InternalError, ParameterError
from privrelease.core.ledger import legacy
from privrelease.core.mechanisms.base import Plan, Result
from privrelease.core.mechanisms.outliers import scale as outliers_scale
from privrelease.core.mechanisms.outliers import sensitivity as sens
from privrelease.core.mechanisms.outliers.geometry import COORD_LIMIT, Cover, degrees, subspace_points
from privrelease.core.mechanisms.outliers.report import describe, expected_counts, expected_lines, expected_selection, too_noisy
from privrelease.core.mechanisms.outliers.sensitivity import (
    Allocation,
    Counted,
    Smooth,
    alpha,
    beta,
    cover_plan,
    global_noise,
    gs_upper,
    privacy_events,
    smooth_bound,
    smooth_epsilon_max,
    uses_global,
)
from privrelease.core.params import StrictParams
from privrelease.core.privacy import draws, events
from privrelease.core.privacy.accuracy import Z95
from privrelease.core.privacy.adjacency import ReplaceRecord
from privrelease.core.privacy.budget import Budget
from privrelease.core.privacy.cost import DPCost
from privrelease.core.tables.schema import Needs

NAME = "outliers"
ROWS_PARAM = "rows"  # filled from the dataset's registration (N is public under the record unit)
COLUMNS_PARAM = "columns"  # left empty, filled with the registered columns: the plan knows the dimension it draws in
MAX_SUBSPACES = 20_000
CountDelta = Annotated[float, Field(gt=0, lt=1)]  # a count's delta (Params checks it; the count form's schema states it)

# -- parameters -------------------------------------------------------------------------------------


class Params(StrictParams):
    """Public parameters of an outlier-statistics release. ``epsilon``/``delta`` are the total."""

    query: Literal["count", "top_subspaces"] = Field(
        "count", description="count: outliers in one subspace; top_subspaces: the h c-dim subspaces with most outliers"
    )
    columns: list[str] | None = Field(
        None, min_length=1, description="count: the subspace; top_subspaces: the candidate columns (default: every column)"
    )
    k: int = Field(ge=1, le=10_000, description="an outlier has fewer than k other records within r")
    r: float = Field(
        gt=0,
        allow_inf_nan=False,
        description="radius, in RMS distance over the subspace (standardized units unless standardize is false)",
    )
    epsilon: float = Field(gt=0, le=100, description="total epsilon charged")
    delta: float = Field(0.0, ge=0, lt=1, description="total delta charged (needed by counts and by a private standardization)")
    c: int = Field(1, ge=1, le=64, description="top_subspaces: dimension of the candidate subspaces")
    h: int = Field(1, ge=1, le=1000, description="top_subspaces: number of subspaces chosen")
    release_counts: bool = Field(True, description="top_subspaces: also release the noisy count of each chosen subspace")
    count_share: float = Field(0.5, gt=0, lt=1, description="top_subspaces: fraction of the query budget for the counts")
    scale_share: float = Field(
        0.1, ge=0, lt=1, description="fraction of each count's budget spent releasing its noise std (0: not released)"
    )
    standardize: Literal[False] | dict[str, outliers_scale.PublicScale] | outliers_scale.PrivateScale | None = Field(
        None, description="false (raw units), public {column: {mean, std}}, or {bounds, share} for a charged estimate"
    )
    noise: Literal["auto", "smooth", "global"] = Field(
        "auto",
        description="count noise: smooth sensitivity (S_UB/α), global sensitivity (min(N, k·K_c+1)), or auto: global whenever it beats the least noise smooth sensitivity could give for this N (public)",
    )
    exact_until: int | None = Field(
        None,
        ge=0,
        description="compute the max ball cover exactly for t < exact_until and use the band count beyond (public switch); default exact throughout (in 3-D and above, cover_plan decides from N and the dimension)",
    )
    rows: int | None = Field(
        None,
        ge=2,
        description="the public number of records N declared with the dataset, set by the service from its registration (never by the analyst): counts are then clamped to [0, N] and must come from a table of N records",
    )

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
        if isinstance(self.standardize, outliers_scale.PrivateScale) and self.delta == 0:
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


def allocate(params: Params) -> Allocation:
    s = params.standardize.share if isinstance(params.standardize, outliers_scale.PrivateScale) else 0.0
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
    if isinstance(params.standardize, dict | outliers_scale.PrivateScale):
        given = params.standardize if isinstance(params.standardize, dict) else params.standardize.bounds
        absent = [c for c in columns if c not in given]
        if absent:
            raise ParameterError(
                f"outliers: standardize gives no scale for columns {absent}; add them or set standardize: false."
            )
    if params.query == "count":
        return columns, [tuple(columns)]
    if params.c > len(columns):
        raise ParameterError(f"outliers: c={params.c} is larger than the {len(columns)} candidate columns.")
    n_sub = math.comb(len(columns), params.c)
    if params.h > n_sub:
        raise ParameterError(f"outliers: h={params.h} is more than the {n_sub} candidate subspaces of dimension {params.c}.")
    if n_sub > MAX_SUBSPACES:
        raise ParameterError(
            f"outliers: {n_sub} candidate subspaces is more than {MAX_SUBSPACES}; list fewer columns or lower c."
        )
    return columns, list(combinations(columns, params.c))


def needs(params: Params, schema: tuple[str, ...]) -> Needs:
    columns, _ = resolve(params, schema)
    return Needs(columns=tuple(columns), numeric=tuple(columns))


def plan(params: Params) -> Plan:
    a = allocate(params)
    what = "count of outliers" if params.query == "count" else f"top-{params.h} subspaces of dimension {params.c}"
    cost = Budget(params.epsilon, params.delta if (a.counts or a.standardize.delta) else 0.0)
    return Plan(
        cost=DPCost(events.charge(privacy_events(params, a), cost.epsilon, cost.delta), ReplaceRecord()),
        guarantee=f"record-level (epsilon={cost.epsilon:g}, delta={cost.delta:g})-differential privacy: DP {what} (Okada et al.)",
        detail={
            "standardize": [a.standardize.epsilon, a.standardize.delta],
            "select_epsilon": a.select,
            "count": [a.count.epsilon, a.count.delta],
            "scale_epsilon": a.scale,
            "counts": a.counts,
        },
    )


# -- before a release: the preview's views (the contract's ``base.Declared``, worded by ``outliers_report``) -----


def accuracy(params: Params, plan_: Plan, columns: tuple[str, ...]) -> dict:
    """Each count's noise and 95% interval, and the top-h selection's odds, from public values (N among them)."""
    a, (_, subspaces) = allocate(params), resolve(params, columns)
    return {"counts": expected_counts(params, a, len(subspaces[0])), "selection": expected_selection(params, a, len(subspaces))}


def warnings(params: Params, plan_: Plan, columns: tuple[str, ...]) -> list[str]:
    """A count that would be mostly noise, said before its budget is spent."""
    return too_noisy(params, accuracy(params, plan_, columns)["counts"])


accuracy_lines = expected_lines


# -- release -------------------------------------------------------------------------------------------


def standardized(
    frame: pd.DataFrame, columns: list[str], params: Params, event: events.Event, rng: np.random.Generator
) -> tuple[np.ndarray, dict]:
    """The columns as a float matrix in the units r is given in, and the scales used (public); a private
    estimate draws with the plan's leaf (``event``: the charged plan's)."""
    x = frame[columns].to_numpy(dtype=float)
    spec = params.standardize
    if spec is False:
        return np.clip(x, -COORD_LIMIT, COORD_LIMIT), {"method": "none"}
    if isinstance(spec, dict):
        mean = np.array([spec[c].mean for c in columns])
        std = np.array([spec[c].std for c in columns])
        method = "public"
    else:
        bounds = np.array([spec.bounds[c] for c in columns])
        mean, std, sampled = outliers_scale.private_scale(x, bounds, events.find(event, sens.PRIVATE), rng)
        method = "private (Gaussian mechanism, charged)"
    scales = {c: {"mean": float(m), "std": float(s)} for c, m, s in zip(columns, mean, std)}
    if method != "public":  # each estimated mean's noise and 95% interval (of the clipped values' mean)
        for c, m, (lo, hi) in zip(columns, mean, bounds):
            half = Z95 * sampled * (hi - lo) / 2 / len(x)
            scales[c]["mean_noise"] = {
                "family": "discrete Gaussian on the clipped sum",
                "std": sampled * (hi - lo) / 2 / len(x),
                "interval": [max(lo, m - half), min(hi, m + half)],
                "of": "the mean of the values clipped to the bounds (on the noise grid)",
            }
    with np.errstate(over="ignore"):
        z = (x - mean) / std
    return np.clip(z, -COORD_LIMIT, COORD_LIMIT), {"method": method, "scales": scales}


def select_top(quality: np.ndarray, sensitivity: int, leaves: list[events.PermuteAndFlip], rng) -> np.ndarray:
    """h distinct indices, one exact permute-and-flip draw without replacement per leaf (the plan's: epsilon/h
    each, so epsilon-DP in total) on the integer counts (sensitivity ``sensitivity``)."""
    left = np.arange(len(quality))
    picked = []
    for leaf in leaves:  # h selections, not records
        i = draws.select(rng, leaf, quality[left], sensitivity)
        picked.append(int(left[i]))
        left = np.delete(left, i)
    return np.array(picked, dtype=np.int64)


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


def noisy_count(
    z: np.ndarray,
    subspace: tuple[str, ...],
    params: Params,
    a: Allocation,
    event: events.Event,
    rng: np.random.Generator,
    measured: Measured | None = None,
) -> Counted:
    """q + (S_UB/α)·N(0,1) with ln(S_UB/α) released as ln + Laplace(β/ε_scale), or q + GS·σ·N(0,1), with the
    leaves of ``event``, the charged plan's (one it does not declare is never drawn). The ledger is charged already."""
    n = len(z)
    use_global = uses_global(params, a, n, len(subspace))
    al, be = alpha(a.count.epsilon, a.count.delta), beta(a.count.epsilon, a.count.delta)
    m = measured or measure(z, params, not use_global, be)
    if use_global:
        leaf = events.find(event, sens.GLOBAL)
        noise.check_shift(leaf.sensitivity, leaf.sigma)
        unit = min(1.0, noise.grid(leaf.sigma))  # its std is public, so is its grid
        noisy = float(np.rint(draws.values(rng, leaf, np.array([round(m.q / unit)]), unit)[0]))
        return Counted(subspace, "global", m.q, noisy, leaf.sigma, leaf.sigma, leaf.sigma, None)
    gs, _ = global_noise(n, params.k, len(subspace), a)  # shown beside the smooth std
    std = m.smooth.value / al
    # std is data: its grid must not be. S_UB >= smooth_floor(N, β) gives a public one (the leaf's); exact
    # Python-integer sampling covers any std/unit. Published rounded to an integer (post-processing).
    leaf = events.find(event, sens.SMOOTH)
    noisy = float(np.rint(draws.smooth(rng, leaf, std, round(m.q / leaf.unit))))
    released = None
    if a.scale > 0:  # S_UB is β-smooth, so ln S_UB has sensitivity β; on a grid, β + one step
        unit = noise.grid(be / a.scale)  # the grid ``std_leaf``'s steps are on
        leaf = events.find(event, sens.STD)
        log = draws.values(rng, leaf, np.array([round(math.log(std) / unit)]), unit)[0]
        released = float(math.exp(log))
    return Counted(subspace, "smooth", m.q, noisy, std, released, gs, m.smooth)


def clamped(c: Counted, rows: int | None) -> Counted:
    """The noisy count moved into the range every count lies in: [0, N] with a public N, else [0, ∞).
    Post-processing of the DP output, so it costs nothing."""
    return replace(c, noisy=float(np.clip(c.noisy, 0, np.inf if rows is None else rows)))


def run(frame: pd.DataFrame, params: Params, plan: Plan, rng: np.random.Generator) -> Result:
    columns, subspaces = resolve(params, tuple(frame.columns))
    n = len(frame)
    if n < 2:
        raise ParameterError("outliers: the table needs at least 2 records.")
    if params.rows is not None and params.rows != n:
        raise InternalError("outliers: the table does not have the number of records declared with the dataset")
    a, event = allocate(params), plan.cost.event  # the charged plan's leaves: every draw below is made with them
    z, scaling = standardized(frame, columns, params, event, rng)
    index = {c: i for i, c in enumerate(columns)}
    cols = {s: [index[c] for c in s] for s in subspaces}
    chosen: list[tuple[str, ...]] = subspaces
    selection = None
    if params.query == "top_subspaces":
        gs = gs_upper(n, params.k, params.c)
        counts = [measure(z[:, cols[s]], params=params, smooth=False) for s in subspaces]
        picked = select_top(np.array([m.q for m in counts]), gs, events.each(event, sens.SELECTION), rng)
        chosen = [subspaces[i] for i in picked]
        selection = {"candidates": len(subspaces), "utility_divisor": gs, "epsilon": a.select}
    counted = []
    if a.counts:  # the heavy part (S_UB) first; noise is drawn here, in order
        smooth = not uses_global(params, a, n, len(chosen[0]))
        b = beta(a.count.epsilon, a.count.delta)
        measured = [measure(z[:, cols[s]], params=params, smooth=smooth, b=b) for s in chosen]
        counted = [
            clamped(noisy_count(z[:, cols[s]], s, params, a, event, rng, m), params.rows) for s, m in zip(chosen, measured)
        ]
    # the allocation as a release's manifest has always shown it, its parts with their figures
    shown = {"accountant": "basic", **plan.detail, "events": [legacy.flat(leaf, n) for leaf, n in events.leaves(event)]}
    return describe(params, a, n, scaling, chosen, counted, selection, shown)


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
