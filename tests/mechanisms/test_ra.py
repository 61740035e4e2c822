"""RA and Enhanced RA: closed forms, structure, and seeded statistical tests.

Statistical tests use fixed seeds and z-scores against exact variances; each asserts
|z| < 4.5 (two-sided false-alarm rate 6.8e-6 per comparison, < 1e-4 per test).
"""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from privrelease.core import noise
from privrelease.core.datasets.demo import census
from privrelease.core.mechanisms import ra
from tests.conftest import ADULT_QI, REPO, adult_clean
from tests.support.helpers import planned_run

Z_LIMIT = 4.5


def fig1() -> pd.DataFrame:
    """The marginals of the paper's Fig. 1 (10 medical records)."""
    return pd.DataFrame(
        {
            "age": ["20-30"] + ["30-40"] * 4 + ["40-50"] + ["50-60"] * 3 + ["60-70"],
            "job": ["Doctor"] + ["Clerk"] * 4 + ["Trader"] * 2 + ["Engineer"] + ["Banker"] * 2,
            "country": ["USA"] * 6 + ["Germany"] + ["UK"] * 2 + ["India"],
            "disease": ["Flu"] * 5 + ["Hypertension"] * 5,
        }
    )


def associated(n: int = 120, seed: int = 7) -> pd.DataFrame:
    """A small table with strong QI-QI and QI-sensitive associations."""
    rng = np.random.default_rng(seed)
    a = rng.choice(["a0", "a1", "a2"], size=n, p=[0.5, 0.3, 0.2])
    b = np.where(a == "a0", rng.choice(["b0", "b1"], size=n), rng.choice(["b1", "b2", "b3"], size=n))
    c = np.where(b == "b1", "c0", rng.choice(["c0", "c1"], size=n))
    s = np.where(a == "a0", "s0", rng.choice(["s1", "s2"], size=n))
    return pd.DataFrame({"A": a, "B": b, "C": c, "S": s, "other": np.arange(n)})


def params(**kw) -> ra.Params:
    base = {"qi": ["A", "B", "C"], "sensitive": "S"}
    return ra.Params(**(base | kw))


def seeded(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


# -- Pa closed forms ---------------------------------------------------------------------------


def test_fig1_pa_uniform_and_optimal():
    frame = fig1()
    uniform = planned_run(ra, frame, ra.Params(qi=["age", "job", "country"], sensitive="disease"), seeded(1))
    best = planned_run(ra, frame, ra.Params(qi=["age", "job", "country"], sensitive="disease", p="entropy"), seeded(1))
    assert uniform.privacy["pa"] == pytest.approx(11.2986, abs=5e-5)
    assert best.privacy["pa"] == pytest.approx(11.4546, abs=5e-5)
    assert best.privacy["pa_max"] == pytest.approx(11.4546, abs=5e-5)
    assert best.privacy["p"] == pytest.approx([0.36063, 0.38000, 0.25937], abs=5e-5)


def test_pa_is_entropy_of_attribute_value_pair():
    frame = associated()
    h = ra.entropies(frame, ["A", "B", "C"])
    p = np.array([0.5, 0.3, 0.2])
    pairs = np.concatenate([p[i] * frame[c].value_counts(normalize=True).to_numpy() for i, c in enumerate(["A", "B", "C"])])
    assert ra.log_pa(h, p) == pytest.approx(-(pairs * np.log(pairs)).sum(), rel=1e-12)


def test_entropy_choice_maximizes_pa():
    h = ra.entropies(associated(), ["A", "B", "C"])
    best = ra.log_pa(h, ra.choice_probabilities(params(p="entropy"), h))
    assert best == pytest.approx(math.log(np.exp(h).sum()), rel=1e-12)
    for p in np.random.default_rng(3).dirichlet(np.ones(3), size=500):
        assert ra.log_pa(h, p) <= best + 1e-12


def test_enhanced_ra_pa_formula_and_k1_matches_uniform():
    h = ra.entropies(associated(), ["A", "B", "C"])
    for k in (1, 2, 3):
        assert ra.log_pa(h, k=k) == pytest.approx(math.log(math.comb(3, k)) + k / 3 * h.sum(), rel=1e-12)
    assert ra.log_pa(h, k=1) == pytest.approx(ra.log_pa(h, np.full(3, 1 / 3)), rel=1e-12)


def test_pa_max_is_the_best_choice_over_k_subsets():
    # Brute-force oracle: Pa_max = Σ over k-subsets S of Π_{i∈S} e^{H_i}; the choice q_S ∝ Π e^{H_i}
    # reaches it, and no other distribution over k-subsets (uniform = Enhanced RA) exceeds it.
    rng = np.random.default_rng(11)
    for h in (ra.entropies(associated(), ["A", "B", "C"]), rng.uniform(0.0, 4.0, 6)):
        m = len(h)
        for k in range(1, m + 1):
            subsets = list(itertools.combinations(range(m), k))
            w = np.array([h[list(s)].sum() for s in subsets])  # ln Π e^{H_i}
            assert ra.log_pa_max(h, k) == pytest.approx(math.log(np.exp(w).sum()), rel=1e-12)
            best = np.exp(w - w.max()) / np.exp(w - w.max()).sum()
            assert -(best * np.log(best)).sum() + best @ w == pytest.approx(ra.log_pa_max(h, k), rel=1e-12)
            for q in rng.dirichlet(np.ones(len(subsets)), size=200):
                live = q > 0
                assert -(q[live] * np.log(q[live])).sum() + q @ w <= ra.log_pa_max(h, k) + 1e-12
            assert ra.log_pa(h, k=k) <= ra.log_pa_max(h, k) + 1e-12
    assert ra.log_pa_max(h, 1) == pytest.approx(math.log(np.exp(h).sum()), rel=1e-12)  # Prop. 7 for RA


DEMO_QI = ["age", "workclass", "education", "marital-status", "relationship", "race", "sex", "native-country", "salary"]


@pytest.mark.parametrize("data", ["demo", "adult"])
def test_reported_pa_never_exceeds_pa_max(data):
    # The demo's table and Adult, RA (uniform, entropy p) and Enhanced RA for every k: Pa ≤ Pa_max,
    # as the report's words say. Before, Pa_max was RA's Σ e^H, which Enhanced RA's Pa exceeds from k = 2.
    frame, qi = (census(), DEMO_QI) if data == "demo" else (adult_clean(), ADULT_QI)
    old_pa_max = float(np.exp(ra.entropies(frame, qi)).sum())
    settings = [*({"k": k} for k in range(1, len(qi) + 1)), {}, {"p": "entropy"}]
    results = [planned_run(ra, frame, ra.Params(qi=qi, sensitive="occupation", **kw), seeded(0)) for kw in settings]
    for kw, result in zip(settings, results):
        pa, pa_max = result.privacy["pa"], result.privacy["pa_max"]
        assert pa <= pa_max, (kw, pa, pa_max)
        if kw.get("k", 1) >= 2:
            assert pa > old_pa_max  # the figure the report used to call the upper bound
    for result in results:
        pa_max = result.privacy["pa_max"]
        assert f"Pa_max = {pa_max:.4f} ≥ Pa" in result.report and result.headline["pa_max"] == pa_max


def test_report_and_chart_state_only_the_risk_figures():
    # Neighbours differing in one record's QI values: under uniform p (drawn without looking at the data)
    # and the same seed, the chart is identical and the report differs only in Pa and Pa_max, the stated
    # risk figures. Per-column diversities or expected changed fractions of the original would differ.
    frame = associated()
    other = frame.copy()
    other.loc[0, ["A", "B", "C"]] = ["a0", "b0", "c0"]
    assert (frame.loc[0, ["A", "B", "C"]] != other.loc[0, ["A", "B", "C"]]).all()
    for kw in ({}, {"k": 2}):
        a, b = (planned_run(ra, t, params(**kw), seeded(5)) for t in (frame, other))
        rate = 2 / 3 if kw else 1 / 3  # k/m, or the uniform p
        assert a.charts == b.charts and a.charts[0].series == {"redrawn": pytest.approx([rate] * 3)}
        assert a.privacy["pa"] != b.privacy["pa"]
        masked = [re.sub(r"(Pa(_max)? = |1/Pa = )[0-9.]+", r"\1#", r.report) for r in (a, b)]
        assert masked[0] == masked[1]
        others = [{k: v for k, v in r.privacy.items() if k not in ("pa", "pa_max")} for r in (a, b)]
        assert others[0] == others[1]


def test_pa_of_constant_columns_is_m():
    frame = pd.DataFrame({"x": ["a"] * 5, "y": [1] * 5, "s": list("abcde")})
    out = planned_run(ra, frame, ra.Params(qi=["x", "y"], sensitive="s"), seeded(0))
    assert out.privacy["pa"] == pytest.approx(2.0)
    assert out.data.equals(frame)


def test_adult_pa_is_34():
    frame = adult_clean()
    assert len(frame) == 30_162
    p = ra.Params(qi=ADULT_QI, sensitive="occupation")
    result = planned_run(ra, frame, p, noise.Randomness(34))
    assert result.privacy["pa"] == pytest.approx(34.0, abs=0.1)
    ra.check(frame, result, p)


# -- structure ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kw,limit", [({}, 1), ({"p": [0.6, 0.4, 0.0]}, 1), ({"k": 2}, 2), ({"k": 3}, 3)])
def test_structure(kw, limit):
    frame = associated(n=2000)
    p = params(**kw)
    out = planned_run(ra, frame, p, seeded(11)).data
    assert list(out.columns) == list(frame.columns) and len(out) == len(frame)
    assert out["S"].equals(frame["S"]) and out["other"].equals(frame["other"])
    changed = sum((out[c] != frame[c]).to_numpy(dtype=int) for c in p.qi)
    assert changed.max() <= limit
    assert changed.max() == limit  # 2000 records: reaching the limit is certain in practice
    for c in p.qi:
        assert set(out[c]) <= set(frame[c])
    if kw.get("p") == [0.6, 0.4, 0.0]:
        assert out["C"].equals(frame["C"])  # a column with p = 0 is never chosen


def test_same_seed_same_output_other_seed_differs():
    frame = associated(n=500)
    first = planned_run(ra, frame, params(k=2), seeded(5)).data
    assert first.equals(planned_run(ra, frame, params(k=2), seeded(5)).data)
    assert not first.equals(planned_run(ra, frame, params(k=2), seeded(6)).data)


def test_numeric_qi_keeps_dtype_and_domain():
    frame = pd.DataFrame({"age": np.arange(100) % 37, "s": ["x"] * 100})
    out = planned_run(ra, frame, ra.Params(qi=["age"], sensitive="s"), seeded(2)).data
    assert out["age"].dtype == frame["age"].dtype
    assert set(out["age"]) <= set(frame["age"])


def test_check_rejects_a_broken_output():
    frame = associated(n=200)
    p = params()
    result = planned_run(ra, frame, p, seeded(1))
    broken = result.data.copy()
    broken.loc[0, "A"] = "never-seen"
    with pytest.raises(Exception, match="outside the original domain"):
        ra.check(frame, ra.Result(broken, result.privacy, result.report), p)
    broken = result.data.copy()
    broken.loc[0, ["A", "B"]] = ["a2" if frame.loc[0, "A"] != "a2" else "a1", "b3" if frame.loc[0, "B"] != "b3" else "b2"]
    with pytest.raises(Exception, match="more than 1"):
        ra.check(frame, ra.Result(broken, result.privacy, result.report), p)


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"p": [0.5, 0.3, 0.1]}, "p must sum to 1"),
        ({"p": [0.5, 0.5]}, "p has 2 entries"),
        ({"p": [1.2, -0.1, -0.1]}, "non-negative"),
        ({"k": 0}, "k must be between 1 and"),
        ({"k": 4}, "k must be between 1 and"),
        ({"k": 2, "p": "entropy"}, "uniformly"),
        ({"qi": ["A", "A"]}, "twice"),
        ({"qi": ["A", "S"]}, "cannot also be a QI"),
        ({"p": "optimal"}, "Input should be"),
        ({"epsilon": 1}, "Extra inputs"),
    ],
)
def test_bad_parameters(kw, message):
    with pytest.raises(ValidationError, match=message):
        params(**kw)


# -- statistics over many seeded runs -------------------------------------------------------------


def _runs(frame: pd.DataFrame, p: ra.Params, runs: int, seed: int) -> list[pd.DataFrame]:
    rng = seeded(seed)
    return [planned_run(ra, frame, p, rng).data for _ in range(runs)]


def _selection_rates(p: ra.Params) -> np.ndarray:
    m = len(p.qi)
    if p.k is not None:
        return np.full(m, p.k / m)
    return np.full(m, 1 / m) if p.p == "uniform" else np.asarray(p.p)


def _z(observed_mean: float, expected: float, variance: float, runs: int) -> float:
    return (observed_mean - expected) / math.sqrt(variance / runs)


@pytest.mark.parametrize("kw", [{}, {"p": [0.5, 0.3, 0.2]}, {"k": 2}, {"k": 3}])
def test_marginals_are_unbiased(kw):
    frame, p, runs = associated(), params(**kw), 400
    outs = _runs(frame, p, runs, seed=101)
    for i, column in enumerate(p.qi):
        s = _selection_rates(p)[i]
        f = frame[column].value_counts(normalize=True)
        for value, fv in f.items():
            has = (frame[column] == value).to_numpy()
            pi = (1 - s) * has + s * fv
            counts = np.array([(o[column] == value).sum() for o in outs])
            z = _z(counts.mean(), has.sum(), (pi * (1 - pi)).sum(), runs)
            assert abs(z) < Z_LIMIT, (column, value, z)


def _match_probability(frame: pd.DataFrame, p: ra.Params, q: dict, s_value: str | None) -> np.ndarray:
    """Per-record probability that the released record matches q (and the sensitive value).

    Brute force over T, the chosen QI columns among q's attributes A: the record keeps its
    values on A \\ T, and each column in T is redrawn to q's value with probability f_j(q_j).
    """
    m, attrs = len(p.qi), list(q)
    rates = _selection_rates(p)
    f = {a: (frame[a] == q[a]).mean() for a in attrs}
    keep_s = np.ones(len(frame), bool) if s_value is None else (frame[p.sensitive] == s_value).to_numpy()
    pi = np.zeros(len(frame))
    for size in range(len(attrs) + 1):
        for chosen in itertools.combinations(attrs, size):
            if p.k is None:
                if size > 1:
                    continue
                prob = rates[p.qi.index(chosen[0])] if size else 1 - sum(rates[p.qi.index(a)] for a in attrs)
            else:
                if size > p.k or p.k - size > m - len(attrs):
                    continue
                prob = math.comb(m - len(attrs), p.k - size) / math.comb(m, p.k)
            kept = np.ones(len(frame), bool)
            for a in attrs:
                if a not in chosen:
                    kept &= (frame[a] == q[a]).to_numpy()
            pi += prob * kept * keep_s * math.prod(f[a] for a in chosen)
    return pi


@pytest.mark.parametrize(
    "kw,q,s_value",
    [
        ({}, {"A": "a0", "B": "b1"}, "s0"),
        ({"p": [0.5, 0.3, 0.2]}, {"A": "a1", "B": "b2", "C": "c1"}, None),
        ({"p": [0.5, 0.3, 0.2]}, {"A": "a0"}, "s0"),
        ({"k": 2}, {"A": "a0", "C": "c0"}, "s0"),
        ({"k": 2}, {"A": "a2", "B": "b3", "C": "c1"}, "s2"),
        ({"k": 3}, {"A": "a0", "B": "b0", "C": "c1"}, "s0"),
    ],
)
def test_expected_supports_match_closed_form(kw, q, s_value):
    frame, p, runs = associated(), params(**kw), 400
    pi = _match_probability(frame, p, q, s_value)
    outs = _runs(frame, p, runs, seed=202)
    counts = []
    for o in outs:
        hit = np.ones(len(o), bool)
        for a, v in q.items():
            hit &= (o[a] == v).to_numpy()
        if s_value is not None:
            hit &= (o["S"] == s_value).to_numpy()
        counts.append(hit.sum())
    z = _z(np.mean(counts), pi.sum(), (pi * (1 - pi)).sum(), runs)
    assert abs(z) < Z_LIMIT, z
    if kw.get("k") == 3:  # k = m: the QI columns are independent of each other and of S
        f = [frame[a].eq(v).mean() for a, v in q.items()]
        assert pi.sum() / len(frame) == pytest.approx((frame["S"] == s_value).mean() * math.prod(f))


@pytest.mark.parametrize("kw", [{"p": [0.5, 0.3, 0.2]}, {"k": 2}])
def test_changed_fraction_matches_the_marginals(kw):
    frame, p, runs = associated(), params(**kw), 400
    rng = seeded(303)
    results = [planned_run(ra, frame, p, rng) for _ in range(runs)]
    for i, column in enumerate(p.qi):
        s = _selection_rates(p)[i]
        f = frame[column].map(frame[column].value_counts(normalize=True)).to_numpy()
        q = s * (1 - f)
        changed = np.array([(r.data[column] != frame[column]).sum() for r in results])
        assert abs(_z(changed.mean(), q.sum(), (q * (1 - q)).sum(), runs)) < Z_LIMIT


def test_the_report_says_what_pa_and_p_tell_of_the_registered_table():
    """Third privacy review, finding 4: Pa and the entropy p are the registered marginals' entropies, to six
    decimals; the report and the RA page (docs/mechanisms/ra.md) say so, and each column's entropy follows from the published p."""
    frame = fig1()
    best = planned_run(ra, frame, ra.Params(qi=["age", "job", "country"], sensitive="disease", p="entropy"), seeded(1))
    h = ra.entropies(frame, ["age", "job", "country"])
    p = np.asarray(best.privacy["p"])
    assert np.log(p / p[0]) == pytest.approx(h - h[0], abs=1e-6)  # the H_i's differences, from p alone
    assert ra.REVEALS in best.report
    page = " ".join((REPO / "docs" / "mechanisms" / "ra.md").read_text().split())
    assert ra.REVEALS in page


def test_what_p_entropy_publishes_is_a_function_of_the_qi_entropies_alone(test_mode):
    """Third privacy review, finding 4, as the report says it (``ra.REVEALS``): with ``p: entropy`` the
    published p, Pa and Pa_max follow from each QI column's marginal entropy and nothing else. Tables with
    the same marginals up to a relabelling of categories but another joint (each QI column shuffled on its
    own, and one column's categories renamed) publish the same figures; moving one record to another
    category of a QI column moves them, and its entropy is recovered from p exactly (ln of p's ratios)."""
    from privrelease.core.datasets.demo import census

    params = ra.Params(qi=["age", "sex", "race", "education"], sensitive="occupation", p="entropy")
    d = census(400)
    rng = np.random.default_rng(5)
    other = d.copy()
    for column in params.qi:
        other[column] = rng.permutation(other[column].to_numpy())  # another joint, the same marginals
    other["race"] = other["race"].map({v: f"r{i}" for i, v in enumerate(sorted(d["race"].unique()))})

    def published(frame: pd.DataFrame) -> dict:
        p = planned_run(ra, frame, params, noise.generator(1)).privacy
        return {k: p[k] for k in ("pa", "pa_max", "p")}

    assert published(d) == published(other)
    moved = d.copy()
    moved.loc[moved.index[0], "sex"] = "Female" if moved["sex"].iloc[0] == "Male" else "Male"
    assert published(moved) != published(d)
    p = np.array(published(d)["p"])
    h = ra.entropies(d, params.qi)
    assert np.log(p / p[0]) == pytest.approx(h - h[0], abs=1e-8)  # p is softmax(H): its log-ratios are the entropies'
