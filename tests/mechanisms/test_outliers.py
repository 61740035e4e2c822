"""DP outlier statistics: oracles, sensitivity constructions, smoothness, selection and noise."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from bench.outliers_baselines import gs_lower, paper_global_std
from privrelease.core import noise
from privrelease.core.errors import ParameterError
from privrelease.core.mechanisms import outliers as o
from privrelease.core.mechanisms.outliers import geometry as geo
from privrelease.core.mechanisms.outliers import scale as outliers_scale
from privrelease.core.mechanisms.outliers import sensitivity as sens
from privrelease.core.privacy.budget import gaussian_sigma
from privrelease.core.privacy.events import Composed, PermuteAndFlip
from privrelease.core.release.spec import parse
from tests.support.helpers import planned_run


def brute_degrees(x: np.ndarray, r: float) -> np.ndarray:
    """Exact on integer data: other records y with sum (x - y)^2 <= |S| r^2."""
    d2 = ((x[:, None, :] - x[None, :, :]) ** 2).sum(axis=2)
    return (d2 <= x.shape[1] * r * r).sum(axis=1) - 1


def q(x: np.ndarray, k: int, r: float) -> int:
    return int((geo.degrees(geo.subspace_points(x), r) < k).sum())


def bounds_by_t(deg: np.ndarray, k: int, cover: geo.Cover, exact_until: int | None = None) -> np.ndarray:
    """B_t = min(N, max(M_k^(t), M_{k−1}^(t)) + t + 1) for every t = 0..N: Theorem 6's bounds
    without Algorithm 2's early stop, the oracle its smooth bound is checked against."""
    n = len(deg)
    stop = n + 1 if exact_until is None else min(exact_until, n + 1)
    bands = np.maximum(sens.band_sizes(deg, k, n), sens.band_sizes(deg, k - 1, n))
    out = np.empty(n + 1)
    for t in range(n + 1):
        m = max(cover.max_cover(np.abs(deg - j) <= t) for j in (k, k - 1)) if t < stop else bands[t]
        out[t] = min(n, m + t + 1)
    return out


def bounds(x: np.ndarray, k: int, r: float, exact_until: int | None = None) -> np.ndarray:
    pts = geo.subspace_points(x)
    return bounds_by_t(geo.degrees(pts, r), k, geo.Cover(pts, r), exact_until)


def s_ub(x: np.ndarray, k: int, r: float, b: float, exact_until: int | None = None) -> float:
    pts = geo.subspace_points(x)
    return sens.smooth_bound(geo.degrees(pts, r), k, b, geo.Cover(pts, r), exact_until).value


def neighbour(x: np.ndarray, rng: np.random.Generator, high: int) -> np.ndarray:
    """Replace one record (a random one) with a random grid point: ties and exact distances abound."""
    y = x.copy()
    y[rng.integers(len(x))] = rng.integers(0, high, x.shape[1])
    return y


# -- degrees and counts ------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_degrees_match_brute_force_with_ties_and_exact_distances(dim):
    rng = np.random.default_rng(dim)
    for _ in range(200):
        x = rng.integers(0, 5, (int(rng.integers(1, 30)), dim)).astype(float)
        r = float(rng.choice([0.5, 1.0, 2.0, math.sqrt(2)]))
        expected = brute_degrees(x, r)
        assert np.array_equal(geo.degrees(geo.subspace_points(x), r), expected)
        for k in (1, 2, 4):
            assert q(x, k, r) == int((expected < k).sum())


def test_self_is_not_a_neighbour_but_a_duplicate_is():
    assert geo.degrees(np.array([[0.0]]), 1.0).tolist() == [0]
    assert geo.degrees(np.array([[3.0], [3.0], [9.0]]), 1.0).tolist() == [1, 1, 0]
    assert q(np.array([[0.0], [10.0], [20.0]]), 3, 100.0) == 3  # N - 1 < k: every record is an outlier


def test_invariances_and_monotonicity():
    rng = np.random.default_rng(7)
    for _ in range(100):
        x = rng.integers(0, 8, (25, 3)).astype(float)
        k, r = int(rng.integers(1, 5)), float(rng.choice([1.0, 1.5, 2.0]))
        base = q(x, k, r)
        assert q(x + np.array([5.0, -3.0, 11.0]), k, r) == base
        assert q(x[rng.permutation(len(x))], k, r) == base
        assert q(4 * x, k, 4 * r) == base
        # the RMS distance: repeating a coordinate inside S leaves every distance unchanged
        assert q(np.repeat(x[:, :1], 3, axis=1), k, r) == q(x[:, :1], k, r)
        assert q(x, k, r * 1.5) <= base <= q(x, k + 1, r)


# -- global sensitivity ------------------------------------------------------------------------------


def test_kissing_table_is_exact_where_known_and_monotone():
    assert [sens.kissing_upper(d) for d in (1, 2, 3, 4, 8, 24)] == [2, 6, 12, 24, 240, 196560]
    table = [sens.kissing_upper(d) for d in range(1, 40)]
    assert all(a < b for a, b in zip(table, table[1:]))
    assert sens.kissing_upper(25) == 3**25 - 1
    assert sens.gs_upper(1000, 3, 1) == 7 and sens.gs_upper(1000, 3, 2) == 19 and sens.gs_upper(50, 3, 4) == 50
    assert gs_lower(50, 3, 2) == 13 and gs_lower(50, 3, 7) == 43


def _move_far(x: np.ndarray) -> np.ndarray:
    y = x.copy()
    y[0] = 1e6
    return y


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_construction_1d_reaches_2k_plus_1(k):
    r = 1.0
    x = np.array([[0.0]] + [[-r]] * k + [[r]] * k)
    assert q(x, k, r) == 0 and q(_move_far(x), k, r) == 2 * k + 1 == sens.gs_upper(len(x), k, 1)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_construction_2d_pentagon_reaches_5k_plus_1(k):
    r = 1.0
    angles = 2 * np.pi * np.arange(5) / 5
    ring = np.sqrt(2) * r * np.stack([np.cos(angles), np.sin(angles)], axis=1)  # RMS distance r from the centre
    x = np.vstack([[0.0, 0.0], np.repeat(ring, k, axis=0)])
    assert q(x, k, r) == 0 and q(_move_far(x), k, r) == 5 * k + 1 <= sens.gs_upper(len(x), k, 2)


@pytest.mark.parametrize("dim,k", [(1, 2), (2, 3), (3, 2), (4, 1)])
def test_cross_construction_reaches_2dk_plus_1(dim, k):
    r = 1.0
    arms = np.vstack([np.eye(dim), -np.eye(dim)]) * math.sqrt(dim) * r  # RMS distance r along each axis
    x = np.vstack([np.zeros(dim), np.repeat(arms, k, axis=0)])
    assert q(x, k, r) == 0 and q(_move_far(x), k, r) == 2 * dim * k + 1 <= sens.gs_upper(len(x), k, dim)


# -- max ball cover ----------------------------------------------------------------------------------


def _exhaustive_cover(p: np.ndarray, r: float) -> int:
    """Algorithm 1 without pruning: the largest subset whose smallest enclosing ball fits."""
    for size in range(len(p), 0, -1):
        for chosen in itertools.combinations(range(len(p)), size):
            if geo.enclosing_ball(p[list(chosen)])[1] <= r * r * (1 + 1e-7):
                return size
    return 0


@pytest.mark.parametrize("dim,oracle", [(1, "window"), (2, "centres")])
def test_branch_and_bound_matches_the_1d_and_2d_oracles(dim, oracle):
    rng = np.random.default_rng(11 + dim)
    for _ in range(300):
        n = int(rng.integers(1, 40))
        p = (rng.integers(0, 6, (n, dim)) if rng.random() < 0.5 else rng.normal(0, 1.5, (n, dim))).astype(float)
        r = float(rng.choice([0.5, 1.0, 1.7]))
        mask = rng.random(n) < 0.8
        assert geo.Cover(p, r, "search").max_cover(mask) == geo.Cover(p, r, oracle).max_cover(mask)
    assert geo.Cover(np.zeros((3, dim)), 1.0).max_cover(np.zeros(3, bool)) == 0
    assert geo.Cover(np.zeros((1, dim)), 1.0).max_cover(np.ones(1, bool)) == 1


def test_branch_and_bound_matches_exhaustive_search_in_3d():
    rng = np.random.default_rng(5)
    for _ in range(120):
        n = int(rng.integers(1, 11))
        p = (rng.integers(0, 4, (n, 3)) if rng.random() < 0.5 else rng.normal(0, 1, (n, 3))).astype(float)
        r = float(rng.choice([0.5, 1.0, 1.5]))
        assert geo.Cover(p, r).max_cover(np.ones(n, bool)) == _exhaustive_cover(p, r)


def test_enclosing_ball_agrees_with_miniball_in_general_position():
    import miniball

    rng = np.random.default_rng(3)
    for _ in range(200):
        dim = int(rng.integers(2, 6))
        p = rng.normal(0, 1, (int(rng.integers(1, 30)), dim))
        assert geo.enclosing_ball(p)[1] == pytest.approx(miniball.get_bounding_ball(p)[1], rel=1e-6, abs=1e-12)


def test_enclosing_ball_handles_collinear_grid_points_that_break_miniball():
    p = np.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [2.0, 0.0]])
    centre, r2 = geo.enclosing_ball(p)
    assert r2 == pytest.approx(1.0) and centre == pytest.approx([1.0, 0.0])


# -- the smooth upper bound ----------------------------------------------------------------------------


@pytest.mark.parametrize("dim,trials,high", [(1, 2500, 6), (2, 400, 4), (3, 150, 3)])
def test_local_sensitivity_and_smoothness_on_random_neighbours(dim, trials, high):
    """|q(X) − q(X')| <= B_0(X) <= S_UB(X), B_t(X') <= B_{t+1}(X), S_UB(X') <= e^β S_UB(X)."""
    rng = np.random.default_rng(100 + dim)
    b = sens.beta(0.5, 0.01)
    for trial in range(trials):
        n = int(rng.integers(2, 14))
        x = rng.integers(0, high, (n, dim)).astype(float)
        y = neighbour(x, rng, high)
        k, r = int(rng.integers(1, 4)), float(rng.choice([0.5, 1.0, 1.5]))
        until = None if trial % 3 else int(rng.integers(0, 4))  # the public switch to band counts, too
        bx, by = bounds(x, k, r, until), bounds(y, k, r, until)
        assert abs(q(x, k, r) - q(y, k, r)) <= bx[0]
        assert np.all(by[:-1] <= bx[1:])
        sx, sy = s_ub(x, k, r, b, until), s_ub(y, k, r, b, until)
        assert bx[0] <= sx and sy <= math.exp(b) * sx * (1 + 1e-12)
        assert np.all((bx >= np.arange(n + 1) + 1) | (bx == n)) and np.all(bx <= n)


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 0.9, 3.0])
def test_early_stop_equals_the_full_maximum(epsilon):
    rng = np.random.default_rng(int(epsilon * 10))
    b = sens.beta(epsilon, 0.01)
    for dim in (1, 2, 3):
        for _ in range(6):
            x = np.vstack([rng.normal(0, 1, (30, dim)), rng.normal(8, 5, (4, dim))])
            for until in (None, 5):
                full = (np.exp(-np.arange(len(x) + 1) * b) * bounds(x, 3, 0.6, until)).max()
                assert s_ub(x, 3, 0.6, b, until) == pytest.approx(full, rel=1e-12)


def test_synthetic_1_smooth_bound_at_the_paper_parameters():
    """The reading notes' exact values on their Synthetic-1 draw (numpy seed 0), t* near 1/β."""
    rng = np.random.default_rng(0)
    x = np.vstack([rng.normal(0, 1, (45, 2)), rng.normal(20, 10, (5, 2))])
    assert q(x, 3, 1.1) == 5
    got = [s_ub(x, 3, 1.1, sens.beta(e, 0.01)) for e in (0.1, 0.5, 0.7, 0.9)]
    assert got == pytest.approx([45.28, 30.44, 25.15, 20.79], abs=0.01)


# -- mechanism parameters and noise --------------------------------------------------------------------


def test_alpha_beta_and_noise_scales_at_the_reference_parameters():
    assert sens.alpha(1, 0.01) == pytest.approx(0.0614393, rel=1e-6)
    assert sens.beta(1, 0.01) == pytest.approx(0.0396931, rel=1e-5)
    assert sens.alpha(0.5, 0.01) == pytest.approx(0.030720, rel=1e-4) and sens.beta(0.5, 0.01) == pytest.approx(
        0.019847, rel=1e-4
    )
    assert 1 / sens.alpha(1, 0.01) == pytest.approx(16.276236, rel=1e-7)
    assert paper_global_std(13, 0.5, 0.01) == pytest.approx(84.636, abs=1e-3)


def test_released_count_noise_has_std_s_over_alpha_and_the_released_scale_is_lognormal_laplace():
    rng = np.random.default_rng(2024)
    z = np.concatenate([rng.normal(0, 1, 60), rng.normal(9, 4, 5)])[:, None]
    params = o.Params(columns=["a"], k=3, r=0.5, epsilon=1.0, delta=0.01, standardize=False, noise="smooth", rows=65)
    a, event = o.allocate(params), o.plan(params).cost.event
    draws = [o.noisy_count(z, ("a",), params, a, event, rng) for _ in range(3000)]
    std, q0 = draws[0].noise_std, draws[0].true_count
    assert std == pytest.approx(draws[0].smooth.value / sens.alpha(a.count.epsilon, a.count.delta))
    noise = np.array([d.noisy for d in draws]) - q0
    assert (noise == np.round(noise)).all()  # published on the public integer grid, whatever S_UB is
    # KS against N(0, std^2); a false alarm has probability 0.001
    assert stats.kstest(noise / std, "norm").pvalue > 1e-3
    logs = np.log([d.noise_std_released for d in draws]) - math.log(std)
    assert stats.kstest(logs, "laplace", args=(0, sens.beta(a.count.epsilon, a.count.delta) / a.scale)).pvalue > 1e-3


def test_auto_noise_is_decided_from_public_parameters_only():
    """Global sensitivity wins at the paper's N = 50; smooth sensitivity can win for large N in 8-D."""
    small = o.Params(k=3, r=1.1, epsilon=0.5, delta=0.01, standardize=False)
    assert o.uses_global(small, o.allocate(small), 50, 2)
    large = o.Params(k=3, r=0.1, epsilon=1.0, delta=1e-6, standardize=False)
    assert not o.uses_global(large, o.allocate(large), 100_000, 8)
    forced = large.model_copy(update={"noise": "global"})
    assert o.uses_global(forced, o.allocate(forced), 100_000, 8)
    # the drawn std of a global count is public: it is the same for any table of that size
    rng = np.random.default_rng(4)
    small = small.model_copy(update={"columns": ["a", "b"], "rows": 50})
    a, event = o.allocate(small), o.plan(small).cost.event
    stds = {o.noisy_count(rng.normal(0, 1, (50, 2)), ("a", "b"), small, a, event, rng).noise_std_released for _ in range(3)}
    assert len(stds) == 1 and stds.pop() == pytest.approx(19 * gaussian_sigma(0.5, 0.01))


def test_budget_allocation_adds_up():
    p = o.Params(
        query="top_subspaces",
        k=3,
        r=0.1,
        epsilon=2.0,
        delta=1e-4,
        h=4,
        count_share=0.25,
        standardize=outliers_scale.PrivateScale(bounds={"a": (0, 1)}, share=0.1),
    )
    a = o.allocate(p)
    spent = a.standardize.epsilon + a.select + a.counts * (a.count.epsilon + a.scale)
    assert spent == pytest.approx(2.0) and a.standardize.delta + a.counts * a.count.delta == pytest.approx(1e-4)
    assert a.select == pytest.approx(2.0 * 0.9 * 0.75) and o.plan(p).cost.budget.epsilon == 2.0
    silent = o.Params(query="top_subspaces", k=3, r=0.1, epsilon=1.0, h=2, release_counts=False, standardize=False)
    assert o.allocate(silent).select == 1.0 and o.plan(silent).cost.budget.delta == 0.0


# -- top-h selection -----------------------------------------------------------------------------------


def _permute_and_flip(q: np.ndarray, rate: float) -> np.ndarray:
    """Brute force over all orders: P(i) = mean over orders of p_i * prod over earlier j of (1 - p_j)."""
    p = np.exp(-rate * (q.max() - q))
    out = np.zeros(len(q))
    orders = list(itertools.permutations(range(len(q))))
    for order in orders:
        stay = 1.0
        for i in order:
            out[i] += stay * p[i] / len(orders)
            stay *= 1 - p[i]
    return out


def test_permute_and_flip_frequencies_match_exact_probabilities(test_mode):
    rng = noise.generator(99)
    q, gs = np.array([0, 2, 4, 5, 8]), 2
    eps, trials = 1.5, 20_000
    picks = np.array([o.select_top(q, gs, [PermuteAndFlip(eps)], rng)[0] for _ in range(trials)])
    p = _permute_and_flip(q, float(noise.rate(eps, gs)))
    assert p.sum() == pytest.approx(1.0)
    observed = np.bincount(picks, minlength=len(q))
    assert stats.chisquare(observed, p * trials).pvalue > 1e-3  # false alarm rate 0.001
    # the epsilon-DP ratio for a neighbour (every count moves by at most gs) holds exactly
    for shift in itertools.product([-gs, 0, gs], repeat=len(q)):
        ratio = p / _permute_and_flip(q + np.array(shift), float(noise.rate(eps, gs)))
        assert ratio.max() <= math.exp(eps) * (1 + 1e-12)
    # two draws without replacement: the first from all five, the second from the other four
    pairs = [tuple(o.select_top(q, gs, [PermuteAndFlip(2 * eps / 2)] * 2, rng)) for _ in range(trials)]
    exact = {}
    for i in range(5):
        rest = [j for j in range(5) if j != i]
        second = _permute_and_flip(q[rest], float(noise.rate(eps, gs)))
        exact.update({(i, j): p[i] * second[n] for n, j in enumerate(rest)})
    counts = pd.Series(pairs).value_counts()
    observed = np.array([counts.get(key, 0) for key in exact])
    assert stats.chisquare(observed, np.array(list(exact.values())) * trials).pvalue > 1e-3


def test_top_h_returns_distinct_items_and_the_extremes_behave(test_mode):
    rng = noise.generator(1)
    u = rng.permutation(12) * 3
    for h in range(1, 13):
        chosen = o.select_top(u, 3, [PermuteAndFlip(1.0 / h)] * h, rng)
        assert len(set(chosen.tolist())) == h
    assert sorted(o.select_top(u, 3, [PermuteAndFlip(1.0 / 12)] * 12, rng)) == list(range(12))
    assert set(o.select_top(u, 3, [PermuteAndFlip(1e6 / 3)] * 3, rng)) == set(np.argsort(-u)[:3])
    uniform = np.bincount([o.select_top(u, 3, [PermuteAndFlip(0.0)], rng)[0] for _ in range(12_000)], minlength=12)
    assert stats.chisquare(uniform).pvalue > 1e-3


def test_utility_has_sensitivity_at_most_one_for_c_equal_1():
    rng = np.random.default_rng(8)
    for _ in range(1500):
        x = rng.integers(0, 6, (int(rng.integers(3, 20)), 1)).astype(float)
        k = int(rng.integers(1, 4))
        y = neighbour(x, rng, 6)
        assert abs(q(x, k, 1.0) - q(y, k, 1.0)) / sens.gs_upper(len(x), k, 1) <= 1


# -- run on a frame ------------------------------------------------------------------------------------


def planted(n: int = 300, seed: int = 0) -> pd.DataFrame:
    """Synthetic-2-like: outliers only in columns a and b."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (n, 5))
    x[:10, :2] = rng.normal(20, 10, (10, 2))
    return pd.DataFrame(x, columns=list("abcde"))


def test_top_subspaces_with_a_large_budget_finds_the_planted_columns():
    frame = planted()
    params = o.Params(query="top_subspaces", k=3, r=0.1, epsilon=100.0, delta=1e-3, h=2, standardize=False)
    result = planned_run(o, frame, params, np.random.default_rng(0))
    assert set(result.data["subspace"]) == {"a", "b"}
    o.check(frame, result, params)
    assert [r["subspace"] for r in result.manifest["result"]] == [["a"], ["b"]] or [
        r["subspace"] for r in result.manifest["result"]
    ] == [["b"], ["a"]]
    assert len(result.manifest["noise_std"]) == 2 and all(s > 0 for s in result.manifest["noise_std"])


def test_public_and_private_standardization():
    frame = planted(4000, seed=3)
    public = {c: {"mean": 0.0, "std": 2.0} for c in "abcde"}
    z, scaling = o.standardized(
        frame, list("ab"), o.Params(k=1, r=1, epsilon=1, delta=1e-3, standardize=public), Composed(()), np.random.default_rng(0)
    )
    assert z == pytest.approx(frame[["a", "b"]].to_numpy() / 2) and scaling["method"] == "public"
    bounds = {c: (-4.0, 4.0) for c in "cde"}
    params = o.Params(columns=list("cde"), k=1, r=1, epsilon=1, delta=1e-3, standardize={"bounds": bounds, "share": 0.5})
    z, scaling = o.standardized(frame, list("cde"), params, o.plan(params).cost.event, np.random.default_rng(0))
    # inliers are N(0, 1): the charged estimate lands close with 4000 records. Noise sd: 4 sigma / n
    # = 0.019 on a mean, 8 sigma / n = 0.039 on a std (sigma = sqrt(15) * 5.01), so the tolerances
    # are >= 5 sd (false alarm < 1e-5 per value)
    for column in "cde":
        assert scaling["scales"][column]["mean"] == pytest.approx(0.0, abs=0.1)
        assert scaling["scales"][column]["std"] == pytest.approx(1.0, abs=0.25)


@pytest.mark.parametrize(
    "params,message",
    [
        ({"k": 3, "r": 0.1, "epsilon": 1, "delta": 1e-3}, "standardize is required"),
        ({"k": 0, "r": 0.1, "epsilon": 1, "delta": 1e-3, "standardize": False}, "k: Input should be greater than or equal to 1"),
        ({"k": 3, "r": 0, "epsilon": 1, "delta": 1e-3, "standardize": False}, "r: Input should be greater than 0"),
        ({"k": 3, "r": 0.1, "epsilon": 1, "standardize": False}, "needs delta > 0"),
        (
            {
                "query": "top_subspaces",
                "columns": ["a", "b"],
                "h": 3,
                "k": 3,
                "r": 0.1,
                "epsilon": 1,
                "delta": 1e-3,
                "standardize": False,
            },
            "h=3 is more than the 2 candidate subspaces",
        ),
        ({"columns": ["a", "a"], "k": 3, "r": 0.1, "epsilon": 1, "delta": 1e-3, "standardize": False}, "twice"),
        (
            {"columns": ["a", "b"], "k": 3, "r": 0.1, "epsilon": 1, "delta": 1e-3, "standardize": {"a": {"mean": 0, "std": 1}}},
            "no scale for columns ['b']",
        ),
        ({"k": 3, "r": 0.1, "epsilon": 1, "delta": 1e-3, "standardize": {"bounds": {"a": [1, 0]}}}, "low < high"),
    ],
    ids=["no-standardize", "k-0", "r-0", "no-delta", "h-too-large", "duplicate-column", "scale-missing", "bad-bounds"],
)
def test_parameter_errors_are_clear(tmp_path, params, message):
    from privrelease.core.datasets.registry import Dataset, Unit
    from privrelease.core.release.spec import bind
    from privrelease.core.tables.schema import Column, Schema

    doc = {"dataset": "t", "mechanism": {"name": "outliers", "params": params}}
    public = Dataset("t", 1, Unit("record"), "dp", Schema(columns={c: Column(type="float") for c in "ab"}), 300, "")
    with pytest.raises(Exception) as info:
        bind(parse(doc), public)
    assert message in str(info.value)


def test_schema_checks_run_before_the_charge():
    params = o.Params(query="top_subspaces", k=3, r=0.1, epsilon=1, delta=1e-3, c=2, h=11, standardize=False)
    with pytest.raises(ParameterError, match="h=11 is more than the 10 candidate subspaces"):
        o.needs(params, tuple("abcde"))
    with pytest.raises(ParameterError, match=r"columns \['z'\] are not in the table"):
        o.needs(o.Params(columns=["a", "z"], k=3, r=0.1, epsilon=1, delta=1e-3, standardize=False), tuple("abcde"))
    needs = o.needs(params.model_copy(update={"h": 10}), tuple("abcde"))
    assert needs.numeric == needs.columns == tuple("abcde")
