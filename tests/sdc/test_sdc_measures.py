"""The SDC report's measures, each against hand-computed values on small tables, a brute-force
oracle, sdcMicro's own published figures, a direct evaluation of the risk's series and integral,
and (pMSE) a simulation of its null distribution."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pandas as pd
import pytest
from scipy import integrate, stats

from privrelease.core.sdc import measures as m
from privrelease.core.sdc import risk
from tests.mechanisms.test_swapping import seeded as generator


def _con(**tables: pd.DataFrame) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for name, frame in tables.items():
        con.register(name, frame)
    return con


# sdcMicro's unit test of indivRisk (tests/testthat/test_indivRisk.R, "weighted, method = exact"):
# key columns A, B, C and sampling weights; its expected r_k to 8 decimals.
SDCMICRO = pd.DataFrame({
    "A": [2, 3, 2, 2, 3, 3, 1, 2], "B": [3, 3, 3, 3, 3, 3, 4, 3], "C": [1, 3, 1, 2, 1, 1, 1, 1],
    "weight": [18.0, 45.5, 39.0, 17.0, 92.0, 8.0, 123.5, 51.0],
})  # fmt: skip
SDCMICRO_RK = [0.01355297, 0.08579129, 0.01355297, 0.17707583, 0.01877883, 0.01877883, 0.03931625, 0.01355297]


def test_individual_risk_reproduces_sdcmicros_published_figures():
    # by hand: cells (2,3,1) rows 1,3,8: f = 3, F = 18 + 39 + 51 = 108; (3,3,3): f = 1, F = 45.5;
    # (2,3,2): f = 1, F = 17; (3,3,1): f = 2, F = 92 + 8 = 100; (1,4,1): f = 1, F = 123.5
    f = np.array([3, 1, 3, 1, 2, 2, 1, 3])
    big_f = np.array([108, 45.5, 108, 17, 100, 100, 123.5, 108])
    assert risk.nb_risk(f, big_f) == pytest.approx(SDCMICRO_RK, abs=5e-9)
    cells = risk.cells(SDCMICRO, ["A", "B", "C"], weight="weight")
    assert sorted(zip(cells["fk"], cells["pop_fk"])) == [(1, 17), (1, 45.5), (1, 123.5), (2, 100), (3, 108)]
    figures = risk.disclosure(SDCMICRO, ["A", "B", "C"], weight="weight")
    assert figures["expected_reidentifications"] == pytest.approx(sum(SDCMICRO_RK), abs=5e-8)
    assert figures["max_individual_risk"] == pytest.approx(0.17707583, abs=5e-9)
    # unweighted (sdcMicro's survey = FALSE, and its weighted figures where F = f): r_k = 1/f_k
    assert risk.nb_risk(f, f) == pytest.approx(1 / f)
    assert risk.disclosure(SDCMICRO, ["A", "B", "C"])["expected_reidentifications"] == 5


@pytest.mark.parametrize("f,p", [(1, 0.3), (1, 0.01), (2, 0.5), (2, 0.02), (3, 1 / 36), (5, 0.2), (12, 0.6), (40, 0.9)])
def test_individual_risk_equals_its_series_and_its_integral(f, p):
    """r = E[1/F | f] with F − f ~ NegBin(f, p): the series Σ_y C(f+y−1, y) p^f q^y / (f+y), summed
    directly, and the integral ∫_0^1 p^f t^(f−1) (1 − q t)^(−f) dt, by quadrature."""
    q = 1 - p
    y = np.arange(0, 200_000)
    log_terms = stats.nbinom.logpmf(y, f, p) - np.log(f + y)
    series = float(np.exp(log_terms).sum())
    integral, _ = integrate.quad(lambda t: p**f * t ** (f - 1) * (1 - q * t) ** (-f), 0, 1, epsabs=0, epsrel=1e-12)
    r = float(risk.nb_risk(np.array([f]), np.array([f / p]))[0])
    assert r == pytest.approx(series, rel=1e-9) and r == pytest.approx(integral, rel=1e-9)
    if f == 1:  # sdcMicro's closed forms for f = 1 and f = 2
        assert r == pytest.approx(p / q * math.log(1 / p), rel=1e-12)
    if f == 2:
        assert r == pytest.approx(p / q - (p / q) ** 2 * math.log(1 / p), rel=1e-9)


# A small table, by hand: cells (1,x): f = 3, sensitive {p, q}; (1,y): f = 1, {p}; (2,y): f = 2, {q};
# (3,z): f = 1, {r}.
SMALL = pd.DataFrame({"a": [1, 1, 1, 1, 2, 2, 3], "b": list("xxxyyyz"), "s": list("pqppqqr")})


def test_disclosure_figures_of_a_small_table_by_hand():
    figures = risk.disclosure(SMALL, ["a", "b"], "s")
    assert figures == {
        "records": 7,
        "cells": 4,
        "k": 1,
        "records_f_below_2": 2,
        "records_f_below_3": 4,
        "expected_reidentifications": 4.0,
        "global_risk": 4 / 7,
        "max_individual_risk": 1.0,
        "records_by_cell_size": {"1": 2, "2": 2, "3-4": 3, "5-9": 0, "10+": 0},
        "l_min": 1,
        "records_l_below_2": 4,
    }


def _oracle(frame: pd.DataFrame, keys: list[str], sensitive: str, count: str, persons: pd.DataFrame | None = None) -> dict:
    """Brute force, record by record: f_k and distinct l over the records in its anonymity set. freqcalc: the
    records matching it, a missing key matching every value (sdcMicro); released: the records with the same
    released key, a missing value one value; intruder: the records whose every non-missing key value equals the
    person's (row i of ``persons``). A missing sensitive value counts as one value."""
    rows = [tuple(None if pd.isna(v) else v for v in r) for r in frame[keys].itertuples(index=False)]
    people = rows if persons is None else [tuple(r) for r in persons[keys].itertuples(index=False)]
    sens = ["<NA>" if pd.isna(v) else v for v in frame[sensitive]]
    f, ell = [], []

    def match(record, x):
        if count == "released":
            return record == x
        return all(a is None or (b is None and count == "freqcalc") or a == b for a, b in zip(record, x))

    for x in people:
        same = [j for j, other in enumerate(rows) if match(other, x)]
        f.append(len(same))
        ell.append(len({sens[j] for j in same}))
    f, ell = np.array(f), np.array(ell)
    return {
        "records": len(rows),
        "cells": len(set(rows)),
        "records_f_below_2": int((f < 2).sum()),
        "records_f_below_3": int((f < 3).sum()),
        "expected_reidentifications": float((1 / f).sum()),
        "max_individual_risk": float((1 / f).max()),
        "l_min": int(ell.min()),
        "records_l_below_2": int((ell < 2).sum()),
    }


def _suppressed(seed: int, n: int = 150) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A table of true keys and the same with about a tenth of its key values and sensitive values missing."""
    rng = generator(seed)
    true = pd.DataFrame(
        {
            "a": rng.integers(0, 8, n).astype(float),
            "b": rng.choice(list("uvw"), n),
            "c": rng.integers(0, 5, n),
            "s": rng.choice(["p", "q", "r", "t"], n),
        }
    )
    released = true.astype({"c": "Int64"}).copy()
    for column in ("a", "b", "c", "s"):
        released.loc[rng.random(n) < 0.1, column] = None
    return true, released


@pytest.mark.parametrize("count", ["freqcalc", "released", "intruder"])
@pytest.mark.parametrize("seed", range(4))
def test_k_anonymity_and_l_diversity_against_a_brute_force_oracle(seed, count):
    true, frame = _suppressed(seed)
    persons = true if count == "intruder" else None
    found = risk.disclosure(frame, ["a", "b", "c"], "s", count=count, persons=persons)
    expected = _oracle(frame, ["a", "b", "c"], "s", count, persons)
    assert {k: found[k] for k in expected} == pytest.approx(expected)
    assert found["records_f_below_2"] > 0 and found["records_l_below_2"] > found["records_f_below_2"]  # both exercised


@pytest.mark.parametrize("seed", range(4))
def test_the_released_count_is_at_most_the_intruders_which_is_at_most_freqcalcs(seed):
    """Per record: the records of its released cell are all compatible with its person's true key, and every
    record compatible with it matches it under freqCalc; on these tables each inequality is strict somewhere."""
    true, frame = _suppressed(seed)
    fk = {c: risk.record_cells(frame, ["a", "b", "c"], count=c, persons=true)["fk"].to_numpy() for c in risk.COUNTS}
    assert (fk["released"] <= fk["intruder"]).all() and (fk["intruder"] <= fk["freqcalc"]).all()
    assert (fk["released"] < fk["intruder"]).any() and (fk["intruder"] < fk["freqcalc"]).any()


def test_the_released_count_is_pycanons_with_the_suppression_mark_as_a_value():
    """pyCANON (an independent implementation) on the released table with a missing key value written '*'."""
    from pycanon import anonymity

    for seed in range(4):
        _, frame = _suppressed(seed)
        marked = frame.astype(object).where(frame.notna(), "*")
        found = risk.disclosure(frame, ["a", "b", "c"], "s")
        assert found["k"] == anonymity.k_anonymity(marked, ["a", "b", "c"])
        assert found["l_min"] == anonymity.l_diversity(marked, ["a", "b", "c"], ["s"])


def test_rank_linkage_by_hand():
    original = pd.DataFrame({"x": [1.0, 2, 3, 4], "y": [10.0, 20, 30, 40], "z": [5.0, 6, 7, 8]})
    # mid-ranks: (2i + 1)/8 per column. Swap x between records 0 and 1: released record 0 sits at
    # (3/8, 1/8, 1/8), its own original at (1/8, 1/8, 1/8) (distance 1/4), record 1's at
    # (3/8, 3/8, 3/8) (distance √2/4): linked; the same for record 1.
    released = original.assign(x=[2.0, 1, 3, 4])
    assert m.linkage(original, released, ["x", "y", "z"]) == {"perturbed_records": 2, "linkage_rate": 1.0}
    # on (x, y) only: released record 0 is 1/4 from its own and 1/4 from record 1's: a tie, half a link each
    assert m.linkage(original, released, ["x", "y"]) == {"perturbed_records": 2, "linkage_rate": 0.5}
    # on x alone each released value is exactly the other record's: never linked
    assert m.linkage(original, released, ["x"]) == {"perturbed_records": 2, "linkage_rate": 0.0}
    assert m.linkage(original, original, ["x"]) == {"perturbed_records": 0, "linkage_rate": None}


def _linkage_oracle(original: pd.DataFrame, released: pd.DataFrame, columns: list[str]) -> float:
    """Record by record in Python: a moved record is linked when no original is nearer than its own (by
    more than 1e-12), and then counts 1/(originals as near as its own)."""
    x, y = original[columns].to_numpy(float), released[columns].to_numpy(float)
    o = np.column_stack([m.mid_ranks(x[:, j], x[:, j]) for j in range(len(columns))]).tolist()
    r = np.column_stack([m.mid_ranks(x[:, j], y[:, j]) for j in range(len(columns))]).tolist()
    moved = [i for i in range(len(x)) if (x[i] != y[i]).any()]
    total = 0.0
    for i in moved:
        d = [math.dist(r[i], p) for p in o]
        if d[i] <= min(d) + 1e-12:
            total += 1 / sum(v <= d[i] + 1e-12 for v in d)
    return total / len(moved)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("tree", [False, True])
def test_rank_linkage_is_the_brute_force_oracles_by_direct_distances_and_by_the_kd_tree(seed, tree, monkeypatch):
    """Both exact ways of ``linkage`` (direct distances to the distinct originals; the k-d tree above
    ``BRUTE_PAIRS``) give the oracle's rate, on few distinct values (ties everywhere) and on one
    continuous column."""
    rng = generator(seed)
    n = 600
    original = pd.DataFrame({"a": rng.integers(0, 6, n), "b": rng.integers(0, 8, n), "c": rng.normal(size=n).round(2)})
    released = original.copy()
    moved = rng.choice(n, 150, replace=False)
    released.loc[moved, "a"] = rng.integers(0, 6, 150)
    released.loc[moved[:50], "c"] += 0.01
    monkeypatch.setattr(m, "BRUTE_PAIRS", 0 if tree else 10**12)
    monkeypatch.setattr(m, "BLOCK", 64)  # several blocks of queries
    rates = []
    for columns in (["a", "b"], ["a", "b", "c"]):
        found = m.linkage(original, released, columns)
        assert found["linkage_rate"] == pytest.approx(_linkage_oracle(original, released, columns), rel=1e-12)
        rates.append(found["linkage_rate"])
    assert 0 < rates[1] < 1  # some links, some not (on (a, b) a moved record mostly lands on another's cell)


def test_il1s_and_changes_of_means_and_correlations_by_hand():
    original = pd.DataFrame({"x": [1.0, 2, 3, 4], "y": [1.0, 2, 3, 4], "k": [7.0, 7, 7, 7]})
    released = original.assign(y=[2.0, 1, 3, 4], k=[7.0, 7, 7, 7])
    con = _con(o=original, r=released)
    # Σ|y − y'| = 2 over n = 4 records and p = 1 column (k has S = 0 and is left out); S_y = √(5/3)
    assert m.il1s(con, "o", "r", ["y", "k"]) == pytest.approx(2 / (4 * math.sqrt(2) * math.sqrt(5 / 3)), rel=1e-12)
    shifted = original.assign(x=[2.0, 3, 4, 6])  # mean 2.5 → 3.75
    found = m.changes(_con(o=original, r=shifted), "o", "r", ["x", "y"])
    assert found["means"]["x"]["change"] == pytest.approx(1.25) and found["means"]["x"]["relative"] == pytest.approx(0.5)
    # corr(x, y') with y' = (2, 1, 3, 4): centred (−1.5, −.5, .5, 1.5)·(−.5, −1.5, .5, 1.5) = 4, each Σ² = 5
    found = m.changes(con, "o", "r", ["x", "y"])
    assert found["correlation_changes"] == {"x ~ y": pytest.approx(0.8 - 1.0)}
    assert found["max_abs_correlation_change"] == pytest.approx(0.2) and found["means"]["y"]["change"] == 0


def test_pmse_of_a_saturated_model_by_hand():
    # one binary column: the fitted propensity is the released share within each level,
    # a: 1 of 4 (0.25), b: 3 of 4 (0.75); c = 1/2, so pMSE = mean (±0.25)² = 0.0625
    original = pd.DataFrame({"v": list("aaab")})
    released = pd.DataFrame({"v": list("abbb")})
    found = m.pmse(original, released, ["v"], set())
    assert found["pmse"] == pytest.approx(0.0625, abs=1e-6)
    assert found["parameters"] == 2 and found["null_expectation"] == pytest.approx(1 * 0.25 * 0.5 / 8)


def test_pmse_null_expectation_matches_simulation():
    """Snoke et al.'s null: the released table is drawn from the original's own distribution (here
    resampled from it). N·pMSE/((1−c)²c) is then asymptotically χ²(k − 1), so the ratio pMSE/null
    averages 1 ± √(2/(k−1)/150) over 150 simulations: a two-sided z-test at level 1e-3. Two
    independent samples of one distribution average 1/(1 − c) = 2 instead, tested the same way."""
    rng = generator(26)
    n, reps = 200, 150

    def draw(size: int) -> pd.DataFrame:
        return pd.DataFrame({"x": rng.normal(size=size), "g": rng.choice(list("abc"), size)})

    from_original, independent, k = [], [], None
    for _ in range(reps):
        original = draw(n)
        found = m.pmse(original, original.sample(n, replace=True, random_state=rng), ["x", "g"], {"x"})
        k = found["parameters"]  # intercept, 2 dummies, x and x²
        assert found["null_expectation"] == pytest.approx((k - 1) * 0.25 * 0.5 / (2 * n))
        from_original.append(found["ratio"])
        independent.append(m.pmse(original, draw(n), ["x", "g"], {"x"})["ratio"])
    assert k == 5
    sd = math.sqrt(2 / (k - 1) / reps)
    assert abs(np.mean(from_original) - 1) / sd < 3.29, np.mean(from_original)
    assert abs(np.mean(independent) - 2) / (2 * sd) < 3.29, np.mean(independent)
    # control: a released table whose x is shifted by half a standard deviation is far above the null
    shifted = m.pmse(draw(n), draw(n).assign(x=lambda d: d["x"] + 0.5), ["x", "g"], {"x"})
    assert shifted["ratio"] > 10


def test_pmse_sees_a_broken_correlation_through_its_product_term():
    """Swapping each column on its own keeps every marginal: only the x·y term sees the change."""
    rng = generator(3)
    xy = rng.multivariate_normal([0, 0], [[1, 0.8], [0.8, 1]], size=2000)
    original = pd.DataFrame({"x": xy[:, 0], "y": xy[:, 1]})
    released = original.assign(y=rng.permutation(original["y"].to_numpy()))
    found = m.pmse(original, released, ["x", "y"], {"x", "y"})
    assert found["parameters"] == 6 and found["ratio"] > 50
    assert m.pmse(original, original, ["x", "y"], {"x", "y"})["pmse"] == pytest.approx(0, abs=1e-12)


def test_pmse_on_a_large_table_is_fitted_on_every_s_th_record(monkeypatch):
    monkeypatch.setattr(m, "MAX_PMSE_ROWS", 4)
    original = pd.DataFrame({"v": list("aaabbbaaab")})
    released = pd.DataFrame({"v": list("abbbaaabbb")})
    found = m.pmse(original, released, ["v"], set())
    # stride 3: records 0, 3, 6, 9 of each: original a b a b, released a b a b; N = 8, identical shares
    assert found["every"] == 3 and found["pmse"] == pytest.approx(0, abs=1e-12)
    assert found["null_expectation"] == pytest.approx(1 * 0.25 * 0.5 / 8)


def _matrix(design) -> np.ndarray:
    """The design's X as one matrix: each categorical column one-hot without its level 0, then the dense block."""
    return np.column_stack([np.eye(size)[c][:, 1:] for c, size in zip(design.codes, design.levels)] + [design.dense])


def _sklearn(x: np.ndarray, label: np.ndarray) -> np.ndarray:
    from sklearn.linear_model import LogisticRegression

    fitted = LogisticRegression(C=1e6, solver="newton-cholesky", tol=1e-8, max_iter=1000).fit(x, label)
    return fitted.predict_proba(x)[:, 1]


def _loss(p: np.ndarray, y: np.ndarray) -> float:
    return float(-np.sum(y * np.log(p) + (1 - y) * np.log(1 - p)))


def test_pmse_propensities_are_scikit_learns():
    """``privrelease.core.sdc.logistic`` fits the model pMSE fitted with scikit-learn (C = 1e6, Newton–Cholesky): the same
    propensities on one-hot designs with numeric terms; where a level is in one table only (separable: its
    coefficient runs off, held only by the penalty) both stop on a flat stretch, ours no higher, and pMSE
    agrees to 5 digits."""
    from privrelease.core.sdc import logistic

    rng = generator(8)
    for trial in range(4):
        n = 3000
        frame = pd.DataFrame(
            {
                "g": rng.choice(list("abcde"), n),
                "h": rng.choice(list("xyz"), n),
                "v": rng.normal(size=n),
                "w": rng.gamma(2, size=n),
            }
        )
        released = frame.sample(n, replace=True, random_state=rng)
        released["v"] += 0.1 * trial
        if trial % 2:
            released.loc[released.index[:40], "g"] = "only-released"  # a level the original lacks
        design, _ = m.design(pd.concat([frame, released], ignore_index=True), ["g", "h", "v", "w"], {"v", "w"})
        label = np.r_[np.zeros(n), np.ones(n)]
        ours, theirs = logistic.propensities(design, label), _sklearn(_matrix(design), label)
        assert np.max(np.abs(ours - theirs)) < (1e-5 if trial % 2 else 1e-10), trial
        assert _loss(ours, label) <= _loss(theirs, label) + 1e-9
        assert np.mean((ours - 0.5) ** 2) == pytest.approx(np.mean((theirs - 0.5) ** 2), rel=1e-5)
    # a weakened fit (one Newton step) is not the same model: the comparison can fail
    one_step = logistic.MAX_STEPS
    try:
        logistic.MAX_STEPS = 1
        assert np.max(np.abs(logistic.propensities(design, label) - theirs)) > 1e-3
    finally:
        logistic.MAX_STEPS = one_step


def test_pmse_structured_design_is_the_one_hot_model_with_missing_values_and_one_table_levels():
    """The design's codes are pandas' one-hot columns (text levels sorted, a missing value the level "<NA>",
    the first dropped), constant columns leave the model, and its fit is scikit-learn's on the one-hot matrix.
    Columns: x numeric with missing values (z, its indicator, z²), u numeric ±1 in equal shares (z_u; its
    square is constant and dropped), their product; g text with missing values and a level only the
    release has; b boolean; one a single level (no column); n more than ``MAX_LEVELS`` levels (left out)."""
    from privrelease.core.sdc import logistic

    rng = generator(11)
    n = 2000

    def table() -> pd.DataFrame:
        frame = pd.DataFrame(
            {
                "x": rng.normal(size=n).round(1),
                "u": np.repeat([-1.0, 1.0], n // 2),
                "g": rng.choice(["p", "q", "r", None], n),
                "b": rng.random(n) < 0.3,
                "one": "same",
                "n": rng.integers(0, 400, n),
            }
        )
        frame.loc[rng.random(n) < 0.05, "x"] = np.nan
        return frame

    original, released = table(), table()
    released.loc[:29, "g"] = "s"  # in the release only
    columns = ["x", "u", "g", "b", "one", "n"]
    stacked = pd.concat([original, released], ignore_index=True)
    design, left_out = m.design(stacked, columns, {"x", "u"})
    assert left_out == ["n"] and design.levels == [5, 2]  # g: <NA> p q r s; b: False True
    one_hot = pd.get_dummies(stacked[["g", "b"]].astype("string").fillna("<NA>"), drop_first=True).to_numpy(float)
    x = _matrix(design)
    assert np.array_equal(x[:, :5], one_hot)
    assert design.dense.shape[1] == 5 and (x.std(axis=0) > 0).all()  # z_x, missing, z_u, z_x², z_x·z_u
    label = np.r_[np.zeros(n), np.ones(n)]
    ours, theirs = logistic.propensities(design, label), _sklearn(x, label)
    assert np.max(np.abs(ours - theirs)) < 1e-5 and _loss(ours, label) <= _loss(theirs, label) + 1e-9
    found = m.pmse(original, released, columns, {"x", "u"})
    assert found["parameters"] == 1 + 4 + 1 + 5 and found["left_out"] == ["n"]
    assert found["pmse"] == pytest.approx(np.mean((theirs - 0.5) ** 2), rel=1e-5)
    assert found["ratio"] > 1  # the level only the release has shows


def test_pmse_fit_starts_a_level_in_one_table_only_near_its_optimum(monkeypatch):
    """A level only the release has is separable: from 0, Newton's steps gain about 1 each on its coefficient,
    whose optimum is near W(m/PENALTY) ≈ 15, and the fit takes 18 steps. Started there it takes a few, and
    gives the same propensities (and scikit-learn's). The weakened variant starts at 0."""
    from privrelease.core.sdc import logistic

    rng = generator(5)
    n = 3000
    frame = pd.DataFrame({"g": rng.choice(list("abcd"), n), "v": rng.normal(size=n)})
    released = frame.sample(n, replace=True, random_state=rng)
    released.loc[released.index[:40], "g"] = "only-released"
    design, _ = m.design(pd.concat([frame, released], ignore_index=True), ["g", "v"], {"v"})
    label = np.r_[np.zeros(n), np.ones(n)]
    hessian, steps = logistic._Operator.hessian, []

    def counted(self, w):
        steps[-1] += 1
        return hessian(self, w)

    monkeypatch.setattr(logistic._Operator, "hessian", counted)
    fits = []
    for start in (logistic._start, lambda one_sided: np.zeros(len(one_sided))):
        monkeypatch.setattr(logistic, "_start", start)
        steps.append(0)
        fits.append(logistic.propensities(design, label))
    assert steps[0] <= 5 < 12 <= steps[1], steps
    assert np.max(np.abs(fits[0] - fits[1])) < 1e-9
    assert np.max(np.abs(fits[0] - _sklearn(_matrix(design), label))) < 1e-5
