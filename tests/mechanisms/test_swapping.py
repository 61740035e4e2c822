"""MEWS, MEDS and EDS: value invariance, cell invariance, bounds, pruning, pairing, edge cases."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError
from scipy.stats import chisquare

from privrelease.core.errors import ParameterError
from privrelease.core.mechanisms import swapping as sw
from privrelease.core.mechanisms.swapping import bins as sb
from tests.support.helpers import planned_run


def seeded(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


def binormal(n: int, rho: float = 0.5, seed: int = 0, extra: bool = True) -> pd.DataFrame:
    """Standard binormal data truncated to [-2, 2]^2 (the paper's Section 5.1), plus other columns."""
    rng = seeded(seed)
    x = rng.multivariate_normal([0, 0], [[1, rho], [rho, 1]], size=int(n * 1.2))
    x = x[(np.abs(x) <= 2).all(axis=1)][:n]
    frame = pd.DataFrame({"x": x[:, 0], "y": x[:, 1]})
    if extra:
        frame["z"] = rng.normal(size=n)
        frame["id"] = np.arange(n)
        frame["label"] = np.where(rng.random(n) < 0.5, "a", "b")
    return frame


def mews(**kw) -> sw.MEWSParams:
    return sw.MEWSParams(**({"swap_set": ["x", "y"], "widths": 0.5, "width_units": "absolute"} | kw))


def cells(frame: pd.DataFrame, widths: np.ndarray) -> np.ndarray:
    return sw.cell_keys(frame[["x", "y"]].to_numpy(float), widths)


# -- invariants -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["cyclic", "pairs", "block"])
def test_mews_value_and_cell_invariance_and_bound(mode):
    frame = binormal(5000)
    p = mews(swap_mode=mode, singletons="suppress")
    result = planned_run(sw.MEWS, frame, p, seeded(1))
    kept = frame[frame.index.isin(np.flatnonzero(_kept_mask(frame, 0.5)))].reset_index(drop=True)
    out = result.data
    assert len(out) == len(kept) == len(frame) - result.privacy["suppressed_tuples"]
    before, after = cells(kept, np.array([0.5, 0.5])), cells(out, np.array([0.5, 0.5]))
    lo = frame[["x", "y"]].min().to_numpy()
    assert (sw.cell_keys(np.vstack([kept[["x", "y"]].to_numpy(), lo]), np.array([0.5, 0.5]))[:-1] == before).all()
    assert (before == after).all()  # every tuple stays in its cell ...
    assert (np.abs(out[["x", "y"]].to_numpy() - kept[["x", "y"]].to_numpy()) < 0.5).all()  # ... so moves < t
    for key in np.unique(before)[:200]:  # value invariance per bin and column
        rows = before == key
        for c in ("x", "y"):
            assert sorted(out.loc[rows, c]) == sorted(kept.loc[rows, c])
    for c in ("z", "id", "label"):
        assert out[c].equals(kept[c])
    if mode == "block":  # the whole x[S] vector moves: the multiset of (x, y) rows is unchanged
        assert sorted(map(tuple, out[["x", "y"]].to_numpy())) == sorted(map(tuple, kept[["x", "y"]].to_numpy()))
    else:
        assert (out["x"] != kept["x"]).mean() > 0.99  # cyclic/pairs: (almost) every value moves


def _kept_mask(frame: pd.DataFrame, t: float) -> np.ndarray:
    keys = cells(frame, np.array([t, t]))
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    return counts[inverse] >= 2


def test_values_exactly_on_cell_edges():
    # integers with width 1: every value sits exactly on an edge; half-open cells keep it in [c, c+1)
    frame = pd.DataFrame({"x": np.repeat(np.arange(10.0), 4), "y": np.tile([0.0, 1.0, 0.0, 1.0], 10)})
    result = planned_run(sw.MEWS, frame, mews(widths=1.0), seeded(3))
    assert (result.data["x"] == frame["x"]).all()  # each cell holds one x value: nothing can move
    assert result.privacy["partition_degree"] == 20 and result.privacy["minimal_bin_size"] == 2
    wide = planned_run(sw.MEWS, frame, mews(widths=2.0), seeded(3))
    assert (np.abs(wide.data["x"] - frame["x"]) <= 1.0).all()  # cells [0,2), [2,4): change < 2
    assert (np.floor(wide.data["x"] / 2) == np.floor(frame["x"] / 2)).all()


def test_partition_degree_bounds_and_nesting():
    frame = binormal(3000, extra=False)
    values = frame.to_numpy()
    previous = None
    for t in (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0):  # doubling widths with one origin: nested grids
        part = sw.partition(sw.cell_keys(values, np.array([t, t])))
        span = values.max(axis=0) - values.min(axis=0)
        total = np.prod(np.floor(span / t) + 1)
        assert 1 <= part.degree <= min(len(frame), total)
        assert part.degree == len(np.unique(sw.cell_keys(values, np.array([t, t]))))
        if previous is not None:
            assert part.degree <= previous
        previous = part.degree
    assert previous == 1  # width >= range: one cell


def test_pruning_rules():
    frame = binormal(4000, extra=False)
    values = frame.to_numpy()
    found = sw.candidate_partitions(values, np.ones(2), (0.05, 1.5), 120)
    assert found and all(0.05 <= t <= 1.5 for t, _ in found)
    assert all(p.sizes.min() >= 2 for _, p in found)  # feasible
    assert len({p.fingerprint for _, p in found}) == len(found)  # no duplicate partitions
    again = sw.candidate_partitions(values, np.ones(2), (0.05, 1.5), 120)
    assert [t for t, _ in again] == [t for t, _ in found]  # q_ew is deterministic
    # a rejected grid point is infeasible or repeats a kept partition
    kept = {p.fingerprint for _, p in found}
    for t in np.linspace(0.05, 1.5, 120):
        part = sw.partition(sw.cell_keys(values, np.array([t, t])))
        assert part.sizes.min() < 2 or part.fingerprint in kept


def test_hand_computed_pruning():
    # x = 0, 1, 2, 3 (y constant), cells floor(x / t). Grid 1.0, 1.25, ..., 4.0:
    # t <= 1.5 leaves 3 alone (floor(3/t) > floor(2/t)); 1.75 and 2.0 give {0,1},{2,3} (kept once);
    # 2.25 .. 3.0 give {0,1,2},{3} (infeasible); t >= 3.25 gives one cell.
    frame = np.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
    found = sw.candidate_partitions(frame, np.ones(2), (1.0, 4.0), 13)  # step 0.25
    assert [round(t, 2) for t, _ in found] == [1.75, 3.25]
    assert [list(p.sizes) for _, p in found] == [[2, 2], [4]]


def test_risk_known_and_hidden():
    frame = binormal(20_000, rho=0.5, extra=False)
    fixed = planned_run(sw.MEWS, frame, mews(widths=0.25, singletons="merge"), seeded(2))
    nmdb = fixed.privacy["minimal_bin_size"]
    assert fixed.privacy["p_known"] == pytest.approx(1 / (nmdb - 1))
    assert fixed.privacy["p_hidden"] == fixed.privacy["p_known"]
    hidden = planned_run(sw.MEWS, frame, mews(widths=None, t_range=(0.1, 1.2), candidates=60), seeded(2))
    priv = hidden.privacy
    assert priv["q_ew"] >= 2 and "widths" not in priv  # the width drawn is never reported
    assert 0 < priv["p_hidden"] <= 1 and 0 < priv["p_hidden_given_published"] <= 1
    assert 1 <= priv["q_consistent"] <= priv["q_ew"]


def test_hidden_width_risk_against_brute_force():
    frame = binormal(300, extra=False).to_numpy()
    found = [p for _, p in sw.candidate_partitions(frame, np.ones(2), (0.3, 2.0), 40)]
    assert len(found) >= 3
    src = sb.partner_positions(found[1].labels, "cyclic", seeded(6))
    worst = 0.0
    for i in range(len(frame)):
        terms = []
        for part in found:
            same = part.labels[i] == part.labels[src[i]]
            size = int((part.labels == part.labels[i]).sum())
            terms.append(same / (size - 1))
        worst = max(worst, sum(terms) / len(found))
    assert sw._risk({"x": src}, found) == pytest.approx(worst)
    assert sw._risk({"x": src}, [found[1]]) == pytest.approx(1 / (found[1].sizes.min() - 1))


def test_pairs_are_valid():
    bins = np.repeat(np.arange(50), np.r_[np.full(25, 2), np.arange(3, 28)])
    src = sb.partner_positions(bins, "pairs", seeded(4))
    assert (bins[src] == bins).all()  # partners share a bin
    for b in np.unique(bins):
        rows = np.flatnonzero(bins == b)
        moved = src[rows]
        assert sorted(moved) == sorted(rows)  # a permutation of the bin
        fixed_points = (moved == rows).sum()
        assert fixed_points == 0
        two_cycles = sum(src[src[r]] == r for r in rows)
        assert two_cycles == (len(rows) if len(rows) % 2 == 0 else len(rows) - 3)


def test_cyclic_partner_is_uniform_over_the_bin():
    bins = np.zeros(6, dtype=np.int64)
    rng = seeded(5)
    partners = [sb.partner_positions(bins, "cyclic", rng)[0] for _ in range(6000)]
    counts = np.bincount(partners, minlength=6)
    assert counts[0] == 0  # a tuple never keeps its own value
    assert chisquare(counts[1:]).pvalue > 1e-4


def test_meds_bins_and_first_pair_is_the_diameter():
    for seed in range(4):
        frame = binormal(157, seed=seed, extra=False)
        values = frame.to_numpy()
        bins, first = sw.meds_bins(values, 10)
        assert (bins >= 0).all() and sorted(np.unique(bins)) == list(range(bins.max() + 1))
        sizes = np.bincount(bins)
        assert sizes.min() >= 10 and len(sizes) == 157 // 10
        z = (values - values.mean(0)) / values.std(0)
        d = ((z[:, None, :] - z[None, :, :]) ** 2).sum(2)
        assert d[first] == pytest.approx(d.max())
    big = binormal(2600, extra=False).to_numpy()  # large enough for the convex-hull path
    _, first = sw.meds_bins(big, 600)
    z = (big - big.mean(0)) / big.std(0)
    best = max(((z[i] - z) ** 2).sum(1).max() for i in range(len(z)))
    assert ((z[first[0]] - z[first[1]]) ** 2).sum() == pytest.approx(best)


def test_eds_ranks_and_values():
    frame = binormal(1003, extra=False)
    bins = sw.rank_bins(frame["x"].to_numpy(), 10, seeded(1))
    assert np.bincount(bins).min() >= 10 and np.bincount(bins).max() <= 19
    out = planned_run(sw.EDS, frame, sw.DepthParams(swap_set=["x"], k=10), seeded(1)).data
    assert sorted(out["x"]) == sorted(frame["x"]) and out["y"].equals(frame["y"])
    rank_before = np.argsort(np.argsort(frame["x"].to_numpy()))
    rank_after = np.argsort(np.argsort(out["x"].to_numpy()))
    assert (np.abs(rank_after - rank_before) < 19).all()  # a value moves within its bin of <= 19 ranks
    assert (rank_after != rank_before).mean() > 0.99


def test_others_with_eds_and_value_invariance_everywhere():
    frame = binormal(2000)
    result = planned_run(sw.MEWS, frame, mews(others="eds", k=5), seeded(8))
    assert result.privacy["others_swapped_with_eds"] == ["id", "z"]
    for c in ("x", "y", "z", "id"):
        assert sorted(result.data[c]) == sorted(frame[c])
    assert result.data["label"].equals(frame["label"])
    sw.MEWS.check(frame, result, mews(others="eds", k=5))


# -- edge cases and errors ---------------------------------------------------------------------------------


def test_edge_cases():
    one = pd.DataFrame({"x": [1.0], "y": [2.0]})
    with pytest.raises(ParameterError, match="at least 2 rows"):
        planned_run(sw.MEWS, one, mews(), seeded(0))
    same = pd.DataFrame({"x": [3.0] * 6, "y": [1.0] * 6})
    out = planned_run(sw.MEWS, same, mews(widths=1e-9), seeded(0))
    assert out.data.equals(same) and out.privacy["partition_degree"] == 1  # all identical rows
    const = pd.DataFrame({"x": [5.0] * 8, "y": np.arange(8.0)})
    result = planned_run(sw.MEWS, const, mews(widths=1.0, width_units="sd"), seeded(0))
    assert (result.data["x"] == 5).all()
    wide = planned_run(sw.MEWS, binormal(300, extra=False), mews(widths=100.0), seeded(0))
    assert wide.privacy["partition_degree"] == 1  # width >= range: one cell, a global swap
    tiny = binormal(300, extra=False)
    with pytest.raises(ValueError, match="singletons: error is not offered"):
        mews(widths=1e-6, singletons="error")
    with pytest.raises(ParameterError, match="every tuple is alone"):
        planned_run(sw.MEWS, tiny, mews(widths=1e-6, singletons="merge"), seeded(0))
    with pytest.raises(ParameterError, match="no width in t_range"):
        planned_run(sw.MEWS, tiny, mews(widths=None, t_range=(1e-6, 2e-6)), seeded(0))
    bad = binormal(50, extra=False)
    bad.loc[3, "x"] = np.nan
    with pytest.raises(ParameterError, match="NaN or infinite"):
        planned_run(sw.MEWS, bad, mews(), seeded(0))
    bad.loc[3, "x"] = np.inf
    with pytest.raises(ParameterError, match="NaN or infinite"):
        planned_run(sw.MEWS, bad, mews(), seeded(0))


def test_merged_singletons_bound():
    frame = pd.DataFrame({"x": [0.0, 0.1, 0.2, 0.3, 3.9, 9.0, 9.1], "y": [0.0] * 7})
    result = planned_run(sw.MEWS, frame, mews(widths=1.0), seeded(0))
    assert result.privacy["merged_singletons"] == 1
    assert result.privacy["max_change_bound"]["x"] == pytest.approx(4.0)  # 3 cells away: cells 0..3, 4 t
    assert (np.abs(result.data["x"] - frame["x"]) <= 4.0).all()
    clipped = planned_run(sw.MEWS, frame[:5], mews(widths=1.0), seeded(0))  # the same bin, but x spans only 3.9
    assert clipped.privacy["max_change_bound"]["x"] == pytest.approx(3.9)


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"widths": -1.0}, "finite and positive"),
        ({"widths": None}, "exactly one of"),
        ({"t_range": (0.5, 1.0)}, "exactly one of"),
        ({"widths": None, "t_range": (1.0, 0.5)}, "t_lb < t_ub"),
        ({"widths": {"x": 1.0}}, "exactly the swap_set"),
        ({"others": "eds"}, "needs k"),
        ({"swap_set": ["x", "x"]}, "twice"),
        ({"swap_mode": "shuffle"}, "cyclic"),
    ],
)
def test_bad_parameters(kw, message):
    with pytest.raises(ValidationError, match=message):
        mews(**kw)


def test_seeds():
    frame = binormal(1000)
    a = planned_run(sw.MEWS, frame, mews(), seeded(9)).data
    assert a.equals(planned_run(sw.MEWS, frame, mews(), seeded(9)).data)
    assert not a.equals(planned_run(sw.MEWS, frame, mews(), seeded(10)).data)


def test_check_catches_a_value_moved_out_of_its_cell():
    frame = binormal(500)
    p = mews()
    result = planned_run(sw.MEWS, frame, p, seeded(0))
    sw.MEWS.check(frame, result, p)
    broken = result.data.copy()
    i, j = broken["x"].idxmin(), broken["x"].idxmax()
    broken.loc[[i, j], "x"] = broken.loc[[j, i], "x"].to_numpy()  # still a permutation, but far
    with pytest.raises(Exception, match="moved further than its cell allows"):
        sw.MEWS.check(frame, sw.Result(broken, result.privacy, result.report), p)


def test_refusals_after_the_rows_are_read_say_nothing_about_them():
    """Review finding 3: with singletons: error, D gave "19 tuples are alone in their cell" and a
    neighbour "18", texts the ledger kept, asked without limit (an sdc dataset has no cap). That
    option is refused when the request is checked, and every refusal left after the read has the
    same text on neighbouring tables (one record replaced)."""
    with pytest.raises(ValueError, match="not offered"):
        sw.MEWSParams(swap_set=["x", "y"], widths=0.1, singletons="error")
    d = binormal(300, extra=False)
    d_prime = d.copy()
    d_prime.loc[0, ["x", "y"]] = [50.0, -50.0]  # one record replaced by an extreme one
    requests = [
        mews(widths=1e-6, singletons="merge"),
        mews(widths=None, t_range=(1e-6, 2e-6)),
        mews(widths=1e-6, singletons="suppress"),
    ]
    for params in requests:
        outcomes = []
        for frame in (d, d_prime):
            try:
                planned_run(sw.MEWS, frame, params, seeded(0))
                outcomes.append("released")
            except ParameterError as exc:
                outcomes.append(str(exc))
        assert outcomes[0] == outcomes[1], outcomes
    d = binormal(100, extra=False).assign(u=1.0, v=2.0)
    d_prime = d.copy()
    d.loc[0, "u"], d_prime.loc[0, "v"] = np.nan, np.nan  # which column holds the gap: not the analyst's to learn
    texts = []
    for frame in (d, d_prime):
        with pytest.raises(ParameterError, match="missing values") as exc:
            planned_run(sw.MEWS, frame, mews(others="eds", k=5), seeded(0))
        texts.append(str(exc.value))
    assert texts[0] == texts[1], texts
