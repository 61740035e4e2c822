"""DP outlier statistics: the parameter ranges its proofs cover, clamping, and a search that never
stops on the data."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from privrelease.core import noise
from privrelease.core.errors import InternalError
from privrelease.core.mechanisms import outliers as o
from privrelease.core.mechanisms.outliers import geometry as geo
from privrelease.core.mechanisms.outliers import sensitivity as sens
from privrelease.core.privacy import accountant as acc
from privrelease.core.privacy import events as ev
from privrelease.core.privacy.budget import gaussian_sigma
from tests.mechanisms.test_outliers import bounds_by_t, neighbour, planted, q
from tests.support.helpers import planned_run

DELTAS = [1e-2, 1e-4, 1e-7, 1e-12]


def density_mass(log_ratio, eps: float) -> float:
    """Pr_{Z~N(0,1)}[log_ratio(Z) > eps], by a fine trapezoid over z (an oracle independent of the closed forms)."""
    z = np.linspace(-40, 40, 2_000_001)
    f = np.exp(-z * z / 2) / math.sqrt(2 * math.pi) * (log_ratio(z) > eps)
    return float(np.trapezoid(f, z))


def hockey_stick(eps: float, shift: float, log_scale: float) -> float:
    """sup_S Pr[P ∈ S] − e^eps Pr[Q ∈ S] for P = N(0, 1), Q = N(shift, e^{2·log_scale}), numerically."""
    s = math.exp(log_scale)
    y = np.linspace(-60 * max(1, s), 60 * max(1, s), 1_000_001)
    p = np.exp(-y * y / 2) / math.sqrt(2 * math.pi)
    qq = np.exp(-((y - shift) ** 2) / (2 * s * s)) / (s * math.sqrt(2 * math.pi))
    return float(np.trapezoid(np.maximum(p - math.exp(eps) * qq, 0), y))


# -- the smooth-sensitivity Gaussian's epsilon range ------------------------------------------------


@pytest.mark.parametrize("delta", DELTAS)
def test_epsilon_bound_is_exactly_where_the_proof_condition_stops_holding(delta):
    e = sens.smooth_epsilon_max(delta)
    assert 12 < e < 19
    assert sens.smooth_log_failure(e * (1 - 1e-9), delta) < math.log(delta) < sens.smooth_log_failure(e * (1 + 1e-9), delta)
    # the failure grows with epsilon, so everything below the bound is covered
    grid = np.linspace(0.01, 2 * e, 200)
    logs = [sens.smooth_log_failure(x, delta) for x in grid]
    assert all(a < b for a, b in zip(logs, logs[1:]))


@pytest.mark.parametrize("delta", [1e-2, 1e-4])
def test_failure_masses_match_a_numerical_oracle_and_their_worst_cases(delta):
    """The closed forms are the largest failure masses of the dilation (over |λ| <= β) and the sliding
    (over |Δ| <= α) properties at epsilon/2, each integrated here from the density."""
    eps = 0.9 * sens.smooth_epsilon_max(delta)
    a, b = sens.alpha(eps, delta), sens.beta(eps, delta)
    dilation = [density_mass(lambda z, lam=lam: math.expm1(2 * lam) * z * z / 2 - lam, eps / 2) for lam in np.linspace(-b, b, 9)]
    sliding = [density_mass(lambda z, d=d: z * d + d * d / 2, eps / 2) for d in np.linspace(-a, a, 9)]
    assert max(dilation) == pytest.approx(dilation[-1], rel=1e-9) and dilation[0] == 0.0
    assert max(sliding) == pytest.approx(sliding[-1], rel=1e-9) == sliding[0]
    assert sliding[-1] == pytest.approx(float(norm.sf(eps / (2 * a) - a / 2)), rel=2e-3)
    log_dilation = math.log(2) + float(norm.logsf(math.sqrt((eps + 2 * b) / math.expm1(2 * b))))
    assert dilation[-1] == pytest.approx(math.exp(log_dilation), rel=2e-3)
    total = dilation[-1] + math.exp(eps / 2) * sliding[-1]
    assert total == pytest.approx(math.exp(sens.smooth_log_failure(eps, delta)), rel=2e-3) and total < delta


@pytest.mark.parametrize("delta", [1e-4, 1e-7])
def test_the_guarantee_holds_at_the_bound_and_fails_far_outside_it(delta):
    """Neighbouring outputs are N(q, σ²) and N(q', σ'²) with |ln σ'/σ| <= β and |q − q'| <= α·min(σ, σ').
    At the bound their privacy loss stays within (epsilon, delta) for every such pair; at the
    epsilon = 100 once accepted, a scale change alone breaks delta by orders of magnitude."""
    for eps, ok in ((sens.smooth_epsilon_max(delta), True), (100.0, False)):
        a, b = sens.alpha(eps, delta), sens.beta(eps, delta)
        worst = max(hockey_stick(eps, a * min(1, math.exp(lam)), lam) for lam in np.linspace(-b, b, 9))
        assert (worst <= delta) is ok
    assert worst > 30 * delta


def _spec(**params) -> o.Params:
    """Validated as a release spec's parameters are, before anything is charged."""
    return o.Params.model_validate(params)


@pytest.mark.parametrize("delta", [1e-4, 1e-7])
def test_smooth_noise_is_refused_just_outside_the_bound_and_accepted_just_inside(delta):
    per_count = sens.smooth_epsilon_max(delta)
    total = per_count / 0.9  # scale_share 0.1 of the count's budget goes to its released std
    base = {"k": 3, "r": 0.1, "delta": delta, "standardize": False, "noise": "smooth"}
    inside = _spec(epsilon=total * (1 - 1e-7), **base)
    assert o.allocate(inside).count.epsilon <= per_count
    with pytest.raises(Exception) as info:
        _spec(epsilon=total * (1 + 1e-7), **base)
    message = str(info.value)
    assert f"above {per_count:.6g}" in message and f"delta per count {delta:.3g}" in message
    assert "Lower epsilon or use noise: global" in message
    # auto is never refused: beyond the range it takes global noise, decided from public values
    auto = _spec(epsilon=total * (1 + 1e-7), **{**base, "noise": "auto"})
    assert o.uses_global(auto, o.allocate(auto), 10**6, 8)
    assert _spec(epsilon=100, **{**base, "noise": "global"}).epsilon == 100


# -- a global-noise count declares the Gaussian it draws --------------------------------------------


def drawn_against_declared(params: o.Params, monkeypatch, handed: ev.Event | None = None) -> list[str]:
    """Run ``params`` on a planted table with ``privrelease.core.noise``'s samplers spied on, and say where what the
    counts drew differs from the plan's events (empty: the plan states exactly the Gaussians drawn).
    ``handed``: the event the run is handed instead of its plan's (the weakened variants)."""
    drawn, shifts, laplace = [], [], []
    real_gaussian, real_shift, real_laplace = noise.gaussian, noise.check_shift, noise.laplace
    monkeypatch.setattr(noise, "gaussian", lambda rng, sigma, *a: drawn.append(sigma) or real_gaussian(rng, sigma, *a))
    monkeypatch.setattr(noise, "check_shift", lambda sens_, sigma: shifts.append(sens_) or real_shift(sens_, sigma))
    monkeypatch.setattr(noise, "laplace", lambda *a: laplace.append(a) or real_laplace(*a))
    planned = o.plan(params)
    if handed is not None:
        planned = replace(planned, cost=replace(planned.cost, event=ev.charge([handed], params.epsilon, params.delta)))
    result = o.run(planted(params.rows), params, planned, np.random.default_rng(5))
    parts = acc.parts(o.plan(params).cost.event)
    found = [] if result.privacy["noise"] == ["global"] else [f"the counts drew {result.privacy['noise']} noise"]
    gauss = [(leaf, n) for leaf, n in parts if isinstance(leaf, ev.Gaussian)]
    if len(gauss) != 1:
        return [*found, f"the plan states {len(gauss)} Gaussian parts"]
    ((g, count),) = gauss
    if len(drawn) != count or any(sigma != g.sigma for sigma in drawn):
        found.append(f"drew sigma {drawn} where the plan states {count} x {g.sigma!r}")
    if any(s != g.sensitivity for s in shifts):
        found.append(f"calibrated to sensitivity {shifts} where the plan states {g.sensitivity}")
    others = [(leaf, n) for leaf, n in parts if leaf is not g and not isinstance(leaf, ev.PermuteAndFlip)]
    if others != [(ev.sampler_slack(count), 1)]:
        found.append(f"the plan states more than the selection and the sampler's slack beside the Gaussian: {parts}")
    if laplace:
        found.append(f"drew {len(laplace)} Laplace values (no std is released with noise)")
    return found


GLOBAL_COUNTS = [  # (query, epsilon, delta, noise, h): the example, both ends of epsilon and delta, auto, top-h
    ("count", 1.0, 1e-4, "global", 1), ("count", 100.0, 0.5, "global", 1), ("count", 1e-3, 1e-12, "global", 1),
    ("count", 0.05, 1e-6, "auto", 1), ("top_subspaces", 2.0, 1e-6, "auto", 3), ("top_subspaces", 100.0, 0.9, "global", 2),
]  # fmt: skip


@pytest.mark.parametrize(("query", "epsilon", "delta", "noise_", "h"), GLOBAL_COUNTS)
def test_a_global_count_declares_the_gaussian_it_draws(query, epsilon, delta, noise_, h, monkeypatch):
    params = o.Params(
        query=query,
        columns=["a", "b"] if query == "count" else None,
        c=1 if query == "count" else 2,
        h=h,
        k=3,
        r=0.5,
        epsilon=epsilon,
        delta=delta,
        noise=noise_,
        standardize=False,
        rows=120,
    )
    assert drawn_against_declared(params, monkeypatch) == []
    ((g, count),) = [(leaf, n) for leaf, n in acc.parts(o.plan(params).cost.event) if isinstance(leaf, ev.Gaussian)]
    a = o.allocate(params)  # calibrated to the count's whole share, its (unreleased) std's included
    assert g.sensitivity == sens.gs_upper(120, 3, 2) and count == a.counts
    assert gaussian_sigma(a.count.epsilon + a.scale, a.count.delta) * g.sensitivity == g.sigma


def test_a_draw_that_drifts_from_the_plan_is_caught(monkeypatch):
    """The weakened variant: a run that draws with a leaf other than its plan's (its std or sensitivity moved)."""
    params = o.Params(columns=["a", "b"], k=3, r=0.5, epsilon=1.0, delta=1e-4, noise="global", standardize=False, rows=120)
    leaf = sens.global_leaf(120, 3, 2, o.allocate(params))
    drifted = replace(leaf, sigma=leaf.sigma * (1 + 1e-12))
    assert drawn_against_declared(params, monkeypatch, drifted)[0].startswith("drew sigma [")
    drifted = replace(leaf, sensitivity=leaf.sensitivity - 1)
    assert drawn_against_declared(params, monkeypatch, drifted)[0].startswith("calibrated to sensitivity [18]")
    smooth = params.model_copy(update={"noise": "smooth"})  # and a plan that states no Gaussian at all
    assert drawn_against_declared(smooth, monkeypatch)[:2] == [
        "the counts drew ['smooth'] noise",
        "the plan states 0 Gaussian parts",
    ]


def test_the_bound_applies_to_each_count_of_a_top_h_release():
    """h counts share the budget: the bound is on epsilon and delta *per count*."""
    base = {
        "query": "top_subspaces",
        "h": 2,
        "count_share": 0.9,
        "k": 3,
        "r": 0.1,
        "delta": 2e-4,
        "standardize": False,
        "noise": "smooth",
    }
    limit = sens.smooth_epsilon_max(1e-4)  # count_share 0.9, then 2 counts, then scale_share 0.1
    assert o.allocate(_spec(epsilon=limit * 2 / 0.81 * 0.999, **base)).count.delta == pytest.approx(1e-4)
    with pytest.raises(Exception, match="above"):
        _spec(epsilon=limit * 2 / 0.81 * 1.001, **base)


@pytest.mark.parametrize(
    "params,message",
    [
        ({"delta": 1e-301}, "delta 1e-301 are too small for the exact sampler, which needs epsilon above"),
        (
            {"standardize": {"bounds": {"a": [0, 1]}, "share": 0.4}, "delta": 2e-300, "columns": ["a"]},
            "are too small for the exact sampler",
        ),
        ({"query": "top_subspaces", "columns": ["a", "b"], "c": 3}, "c=3 is larger than the 2 candidate columns"),
        (
            {"query": "top_subspaces", "columns": [f"x{i}" for i in range(30)], "c": 5},
            "142506 candidate subspaces is more than 20000",
        ),
        ({"query": "top_subspaces", "delta": 0}, "release_counts needs delta > 0"),
        (
            {
                "query": "top_subspaces",
                "delta": 0,
                "release_counts": False,
                "standardize": {"bounds": {"a": [0, 1]}},
                "columns": ["a"],
            },
            "private standardization uses the Gaussian mechanism and needs delta > 0",
        ),
        ({"rows": 1}, "Input should be greater than or equal to 2"),
        ({"epsilon": 101, "noise": "global"}, "Input should be less than or equal to 100"),
    ],
    ids=[
        "delta-per-count",
        "delta-standardize",
        "c-too-large",
        "too-many-subspaces",
        "counts-need-delta",
        "private-scale-needs-delta",
        "rows",
        "epsilon-cap",
    ],
)
def test_other_parameters_outside_their_proofs_are_refused(params, message):
    with pytest.raises(Exception) as info:
        _spec(**{"k": 3, "r": 0.1, "epsilon": 1.0, "delta": 1e-4, "standardize": False, **params})
    assert message in str(info.value)


def test_a_table_of_one_record_or_of_another_size_than_declared_is_refused():
    params = o.Params(k=1, r=1, epsilon=1, delta=1e-3, standardize=False, noise="global")
    with pytest.raises(Exception, match="at least 2 records"):
        o.run(pd.DataFrame({"a": [1.0]}), params, o.plan(params), np.random.default_rng(0))
    with pytest.raises(InternalError, match="number of records declared"):
        planned_run(o, pd.DataFrame({"a": [1.0, 2.0, 3.0]}), params.model_copy(update={"rows": 4}), np.random.default_rng(0))


# -- clamping and the report -------------------------------------------------------------------------


def _counted(noisy: float) -> o.Counted:
    return o.Counted(("a",), "global", 5, noisy, 496.0, 496.0, 496.0, None)


def test_counts_are_clamped_to_their_range_as_post_processing():
    assert o.clamped(_counted(-596.0), 351).noisy == 0.0
    assert o.clamped(_counted(900.0), 351).noisy == 351.0
    assert o.clamped(_counted(120.5), 351).noisy == 120.5
    assert o.clamped(_counted(900.0), None).noisy == 900.0 and o.clamped(_counted(-3.0), None).noisy == 0.0
    # through run(): the released count is the clamp of q + noise drawn from the same seed
    frame = planted(351)
    params = o.Params(columns=["a", "b"], k=3, r=0.1, epsilon=0.05, delta=1e-6, standardize=False, noise="global", rows=351)
    counts = [planned_run(o, frame, params, np.random.default_rng(seed)).manifest["result"]["count"] for seed in range(40)]
    assert min(counts) == 0.0 and max(counts) == 351.0 and all(0 <= c <= 351 for c in counts)
    a = o.allocate(params)
    raw = o.noisy_count(frame[["a", "b"]].to_numpy(), ("a", "b"), params, a, o.plan(params).cost.event, np.random.default_rng(3))
    assert counts[3] == float(np.clip(raw.noisy, 0, 351))


def test_the_report_says_when_the_noise_dwarfs_every_possible_count():
    frame = planted(351)
    swamped = o.Params(columns=["a", "b"], k=3, r=0.1, epsilon=0.05, delta=1e-6, standardize=False, noise="global", rows=351)
    result = planned_run(o, frame, swamped, np.random.default_rng(0))
    assert "exceeds 351, the whole range of possible counts" in result.report and "clamped to [0, 351]" in result.report
    assert result.privacy["clamped_to"] == [0, 351]
    # the statement uses public values only: the same on a neighbouring table
    other = planned_run(o, frame.assign(a=frame["a"].where(frame.index != 7, 40.0)), swamped, np.random.default_rng(0))
    assert [ln for ln in other.report.splitlines() if "exceeds" in ln] == [
        ln for ln in result.report.splitlines() if "exceeds" in ln
    ]
    fine = planned_run(o, frame, swamped.model_copy(update={"epsilon": 50.0}), np.random.default_rng(0))
    assert "exceeds" not in fine.report
    undeclared = swamped.model_copy(update={"rows": None})
    with pytest.raises(ev.Undeclared):  # without a public N the plan leaves the count's noise open: nothing is drawn
        o.run(frame, undeclared, o.plan(undeclared), np.random.default_rng(0))
    # smooth noise with no released std: the public least std for N is what the report may state
    hidden = swamped.model_copy(update={"noise": "smooth", "scale_share": 0.0, "epsilon": 0.5})
    text = planned_run(o, frame, hidden, np.random.default_rng(0)).report
    assert "noise std (at least " in text


# -- the exact-cover search never stops on the data ------------------------------------------------


def test_one_cover_computes_at_most_one_ball_per_subset_of_distinct_points():
    """The premise of cover_plan: a search over m distinct points computes at most 2^m − 1 balls."""
    rng = np.random.default_rng(21)
    for _ in range(150):
        n = int(rng.integers(2, 12))
        p = (rng.integers(0, 3, (n, 3)) if rng.random() < 0.5 else rng.normal(0, 0.6, (n, 3))).astype(float)
        cover = geo.Cover(p, float(rng.choice([0.5, 1.0, 1.5])))
        mask = rng.random(n) < 0.9
        cover.max_cover(mask)
        m = len(np.unique(p[mask], axis=0))
        assert cover.work <= 2**m - 1


def test_cover_plan_is_a_public_function_that_keeps_the_worst_case_within_the_limits():
    assert sens.cover_plan(1000, 1, None) == ("window", 1001) and sens.cover_plan(200, 2, 7) == ("centres", 7)
    assert sens.cover_plan(1000, 2, 7) == ("blocks", 7)  # the centres' N^3 worst case would exceed the limit
    assert sens.cover_plan(15, 3, None) == ("search", 16) and sens.cover_plan(16, 3, None) == ("blocks", 17)
    assert sens.cover_plan(100, 3, 30) == ("blocks", 30) and sens.cover_plan(400_000, 3, None) == ("band", 0)
    for n in range(2, 60):
        for c in range(3, 12):
            method, steps = sens.cover_plan(n, c, None)
            assert steps <= n + 1
            assert method != "search" or 2 * steps * (2**n - 1) <= geo.MAX_BALLS
            assert method != "blocks" or 3**c * n <= geo.MAX_BLOCK_ENTRIES


@pytest.mark.parametrize("dim", [1, 2, 3, 4])
def test_the_blocks_bound_is_an_upper_bound_that_grows_by_at_most_one_per_point(dim):
    """What Theorem 6's smoothness and Proposition 1's early stop use of a max cover: it bounds the
    exact cover, never shrinks when a point is added, and grows by at most one."""
    rng = np.random.default_rng(40 + dim)
    exact = {1: "window", 2: "centres"}.get(dim, "search")
    for _ in range(150):
        n = int(rng.integers(2, 14))
        p = (rng.integers(0, 4, (n, dim)) if rng.random() < 0.5 else rng.normal(0, 1, (n, dim))).astype(float)
        r = float(rng.choice([0.5, 1.0, 1.5]))
        blocks, oracle = geo.Cover(p, r, "blocks"), geo.Cover(p, r, exact)
        mask = rng.random(n) < 0.7
        assert blocks.max_cover(mask) >= oracle.max_cover(mask)
        for extra in np.flatnonzero(~mask)[:3]:
            more = mask.copy()
            more[extra] = True
            assert blocks.max_cover(mask) <= blocks.max_cover(more) <= blocks.max_cover(mask) + 1


@pytest.mark.parametrize("dim,trials", [(3, 200), (4, 100)])
def test_blocks_bounds_keep_local_sensitivity_and_smoothness_on_random_neighbours(dim, trials):
    rng = np.random.default_rng(300 + dim)
    b = sens.beta(0.5, 0.01)
    for trial in range(trials):
        n = int(rng.integers(2, 14))
        x = rng.integers(0, 3, (n, dim)).astype(float)
        y = neighbour(x, rng, 3)
        k, r = int(rng.integers(1, 4)), float(rng.choice([0.5, 1.0, 1.5]))
        until = None if trial % 3 else int(rng.integers(0, 4))
        px, py = geo.subspace_points(x), geo.subspace_points(y)
        dx, dy = geo.degrees(px, r), geo.degrees(py, r)
        bx = bounds_by_t(dx, k, geo.Cover(px, r, "blocks"), until)
        by = bounds_by_t(dy, k, geo.Cover(py, r, "blocks"), until)
        assert abs(q(x, k, r) - q(y, k, r)) <= bx[0] and np.all(by[:-1] <= bx[1:])
        sx = sens.smooth_bound(dx, k, b, geo.Cover(px, r, "blocks"), until).value
        sy = sens.smooth_bound(dy, k, b, geo.Cover(py, r, "blocks"), until).value
        assert sx == pytest.approx((np.exp(-np.arange(n + 1) * b) * bx).max(), rel=1e-12)
        assert sy <= math.exp(b) * sx * (1 + 1e-12)


def test_a_dense_3d_table_completes_and_publishes_nothing_that_depends_on_the_search(monkeypatch):
    monkeypatch.setattr(geo, "MAX_BALLS", 300)  # what 2,000,000 is to large tables, 300 is to these
    rng = np.random.default_rng(0)
    dense = rng.normal(0, 1, (30, 3))
    sparse = dense * 10
    r, k, b = 0.8, 3, sens.beta(1.0, 1e-4)
    # the weakened variant, an exact search under the limit, stops on the dense table only
    with pytest.raises(InternalError):
        pts = geo.subspace_points(dense)
        sens.smooth_bound(geo.degrees(pts, r), k, b, geo.Cover(pts, r), None)
    pts = geo.subspace_points(sparse)
    sens.smooth_bound(geo.degrees(pts, r), k, b, geo.Cover(pts, r), None)
    # the release completes on both and on a neighbour, and publishes the same non-DP fields
    params = o.Params(k=k, r=r, epsilon=1.0, delta=1e-4, standardize=False, noise="smooth", rows=30)
    privacy = []
    for x in (dense, neighbour(dense, rng, 2), sparse):
        frame = pd.DataFrame(x, columns=["a", "b", "c"])
        result = planned_run(o, frame, params, np.random.default_rng(1))
        o.check(frame, result, params)
        privacy.append(result.privacy)
    assert privacy[0]["cover"] == {"method": "blocks", "steps": 31} and privacy[0] == privacy[1] == privacy[2]
    # the blocks bound used instead is still an upper bound on the local sensitivity ...
    y = neighbour(dense, rng, 2)
    m = o.measure(dense, params, True, b)
    assert abs(q(dense, k, r) - q(y, k, r)) <= m.smooth.value
    # ... and beta-smooth on neighbours
    for _ in range(30):
        y = neighbour(dense, rng, 3)
        assert o.measure(y, params, True, b).smooth.value <= math.exp(b) * m.smooth.value * (1 + 1e-12)
