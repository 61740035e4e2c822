"""Magnitudes by the cell key method (#56): each sum moved by steps of a share of its largest contributions, the
steps picked by the cell's key turned (cellKey's top-contribution variant).

Checked against an oracle written here from the method's statement, cell by cell from the records (a cell's key the
sum of its records' keys mod 2^32, contributions summed by household, a key's 32 bits rotated with Python integers);
the steps' distribution against the perturbation table's symmetric row (chi-square, error rate 1e-3); every sum within
its reach and never below zero; a sensitive cell never its truth and moved at least its protection, else the table is
refused (and the same table with a larger mu_c passes); the same cell gets the same sum in two tables; and sums of a
column are published by one method only (a cell's exact sum beside its perturbed one would give away its largest
contribution), refused either way round."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from privrelease.core.errors import UserError
from privrelease.core.mechanisms import sdc_table
from privrelease.core.mechanisms.base import Earlier
from privrelease.core.sdc.cells import cellkey
from privrelease.core.sdc.cells.rules import CellKey
from privrelease.core.sdc.policy import Policy
from tests.sdc.test_sdc_cellkey import _with_keys
from tests.sdc.test_sdc_table import HIER, _frame, _params, _policy, _protection, _release
from tests.support.table_attack import cover

RULE = {"D": 3, "V": 1.5, "js": 2, "share": 0.1, "weights": [1.0, 0.5], "mu_c": 5.0, "max_guess": 0.9}
# max_guess 0.9: a steward who accepts that a sensitive cell's largest contribution is guessed within p% as often
# as these steps allow (its chance is tested below; the default, 0.1, refuses these tables)


def _sum_policy(**rule) -> dict:
    return _policy(min_frequency=3, p_percent={"p": 10}, frequency_range=20, cell_key=RULE | rule)


def _sums(policy: dict, **request) -> sdc_table.Params:
    return _params(policy, method="cell_key", measure="sum", column="x", **request)


def _oracle(frame: pd.DataFrame, published: pd.DataFrame, params: sdc_table.Params) -> tuple[np.ndarray, np.ndarray]:
    """Each published row's true sum and its perturbed sum by the method's statement, from the records alone."""
    rule = params.policy.tables.cell_key
    hier = {d: HIER[d] for d in params.subtotals}
    leaves = {d: sorted(frame[d].astype(str).unique()) for d in params.group_by}
    d, p = cellkey.row(rule.D + rule.js + 1, CellKey(D=rule.D, V=rule.V, js=rule.js))
    edges = np.cumsum(p)
    true, shown = np.zeros(len(published)), np.zeros(len(published))
    for i, row in enumerate(published.to_dict("records")):
        mask = np.ones(len(frame), dtype=bool)
        for dim in params.group_by:
            mask &= frame[dim].astype(str).isin(cover(row[dim], row[f"{dim}_level"], leaves[dim], hier.get(dim, []))).to_numpy()
        key = int(sum(int(k) for k in frame.loc[mask, "__record_key"])) % 2**32
        contributions = sorted(frame[mask].groupby("hh")["x"].sum().tolist(), reverse=True)
        x = float(frame.loc[mask, "x"].sum())
        values = _sensitive_here(params, frame[mask], x)
        value = x
        for j, w in enumerate(rule.weights):
            turn = (8 * (j + 1)) % 32
            k = ((key << turn) | (key >> (32 - turn))) & (2**32 - 1)
            v = float(d[min(int(np.searchsorted(edges, k / 2**32, side="right")), d.size - 1)])
            if j == 0 and values:
                away = np.sign(v) if v != 0 else (1.0 if (key >> 16) & 1 else -1.0)
                v = away * (abs(v) + rule.mu_c)
            top = contributions[j] if j < len(contributions) else 0.0
            value += rule.share * w * top * v
        true[i], shown[i] = x, max(value, 0.0)
    return true, shown


def _sensitive_here(params, records: pd.DataFrame, x: float) -> bool:
    """Whether a cell of these records fails one of the policy's rules (their closed forms)."""
    r = params.policy.tables
    contrib = records.groupby("hh")["x"].sum().sort_values(ascending=False).to_numpy()
    if not contrib.size:
        return False
    if r.min_frequency and contrib.size < r.min_frequency:
        return True
    if r.dominance and contrib[: r.dominance.n].sum() > r.dominance.k / 100 * x:
        return True
    x2 = contrib[1] if contrib.size > 1 else 0.0
    return bool(r.p_percent and r.p_percent.p / 100 * contrib[0] - (x - contrib[0] - x2) > 0)


@pytest.mark.parametrize("seed", [3, 9, 21])
def test_each_sum_is_the_methods_statement_worked_from_the_records(seed):
    frame = _with_keys(_frame(seed=seed), bytes([seed]) * 32)
    params = _sums(_sum_policy(), subtotals=["a"])
    result = _release(frame, params)
    true, expected = _oracle(frame, result.data, params)
    published = result.data["sum_x"].to_numpy(dtype=float)
    assert published == pytest.approx(expected, abs=1e-5)
    assert (published != true).sum() > len(true) // 2 and (published >= 0).all()
    assert set(result.data.status) == {"published"} and "__record_key" not in result.data.columns


def test_the_steps_follow_the_perturbation_tables_symmetric_row():
    """20,000 cells of one contribution each, none sensitive: (published − truth) / (share · x) is the step, whose
    frequencies match the row's probabilities (chi-square over its 7 values, error rate 1e-3; fixed keys)."""
    rule = CellKey(**(RULE | {"weights": [1.0]}))
    rng = np.random.default_rng(7)
    n = 20_000
    x = rng.uniform(1_000, 2_000, n)
    keys = rng.integers(0, 2**32, n) / 2**32
    steps = (cellkey.perturb_sums(x, np.c_[x, np.zeros(n)], keys, rule, np.zeros(n, bool)) - x) / (rule.share * x)
    assert np.allclose(steps, np.rint(steps), atol=1e-9)
    d, p = cellkey.row(rule.D + rule.js + 1, rule)
    observed = np.array([(np.rint(steps) == v).sum() for v in d])
    assert observed.sum() == n and stats.chisquare(observed, p * n).pvalue > 1e-3
    assert p @ d == pytest.approx(0, abs=1e-6) and p @ d**2 == pytest.approx(rule.V, rel=1e-4)


@pytest.mark.parametrize("seed", [3, 9])
def test_every_sum_within_its_reach_and_a_sensitive_cell_moved_at_least_its_protection(seed):
    frame = _with_keys(_frame(seed=seed), bytes([seed + 1]) * 32)
    params = _sums(_sum_policy())
    result = _release(frame, params)
    true, _ = _oracle(frame, result.data, params)
    shown = result.data["sum_x"].to_numpy(dtype=float)
    lo, hi = _protection(params, frame, result.data, true)
    sensitive = (lo > 0) | (hi > 0)
    assert sensitive.any() and not result.internal["exposed"]
    moved = shown - true
    assert (np.where(moved >= 0, moved >= hi - 1e-6, -moved >= lo - 1e-6) | ~sensitive).all()
    assert (shown[sensitive] != true[sensitive]).all()
    rule = params.policy.tables.cell_key
    for i, row in enumerate(result.data.to_dict("records")):  # the reach, from each cell's own contributions
        mask = np.ones(len(frame), dtype=bool)
        for dim in params.group_by:
            if row[f"{dim}_level"]:
                mask &= (frame[dim] == row[dim]).to_numpy()
        top = sorted(frame[mask].groupby("hh")["x"].sum().tolist(), reverse=True) + [0.0, 0.0]
        reach = rule.share * (rule.D + rule.mu_c) * (top[0] + 0.5 * top[1])
        assert abs(moved[i]) <= reach + 1e-6


def test_a_sensitive_cell_moved_less_than_its_protection_stops_the_release():
    """Without the extra steps (mu_c 0) some sensitive cells move less than the p% rule's protection, or not at all:
    the audit refuses the table in the policy's words and says what the steward changes; mu_c 5 passes."""
    frame = _with_keys(_frame(seed=3))
    weak = _sums(_sum_policy(mu_c=0.0))
    result = _release(frame, weak)
    _, internal, missed = sdc_table.assess(frame, result, weak, [])
    assert internal["exposed"] and "changes the perturbation (share, D, V, mu_c)" in missed[-1]
    assert any("within 10%" in m for m in missed)
    strong = _sums(_sum_policy())
    external, _, missed = sdc_table.assess(frame, _release(frame, strong), strong, [])
    assert missed == [] and external["audit"] == "passed"


def test_the_same_cell_gets_the_same_sum_in_two_tables():
    frame = _with_keys(_frame(seed=3))
    policy = _sum_policy()
    ab = _release(frame, _sums(policy, subtotals=["a"])).data
    a = _release(frame, _sums(policy, group_by=["a"], subtotals=["a"])).data
    margin = ab[ab.b_level == 0].set_index(["a", "a_level"])["sum_x"]
    assert margin.to_dict() == a.set_index(["a", "a_level"])["sum_x"].to_dict() and len(margin) == 7


@pytest.mark.parametrize(("first", "then"), [("suppression", "cell_key"), ("cell_key", "suppression")])
def test_sums_of_a_column_are_published_by_one_method(first, then):
    frame = _with_keys(_frame(seed=3))
    policy = _sum_policy()
    before = _params(policy, method=first, measure="sum", column="x")
    now = _params(policy, method=then, measure="sum", column="x")
    earlier = [Earlier("t1", before.model_dump(mode="json"), _release(frame, before).data, True)]
    _, internal, missed = sdc_table.assess(frame, _release(frame, now), now, earlier)
    assert missed and "a cell's exact sum beside its perturbed one" in missed[0] and "t1" in missed[0]
    assert internal["linked"]["other_method"] == ["t1"]
    alike = [Earlier("t1", now.model_dump(mode="json"), _release(frame, now).data, True)]
    assert sdc_table.assess(frame, _release(frame, now), now, alike)[2] == []


@pytest.mark.parametrize(
    ("rule", "said"),
    [
        ({"share": None}, "tables.cell_key.share"),
        ({"weights": [0.5, 1.0]}, "the first is 1"),
        ({"weights": [1.0, 0.6, 0.8]}, "no larger than the one before"),
        ({"weights": [1.0, 0.5, 0.2, 0.1]}, "at most 3 items"),
    ],
)
def test_a_sums_request_the_perturbation_table_cannot_serve_is_refused(rule, said):
    with pytest.raises((ValueError, UserError), match=said):
        params = _sums(_sum_policy(**rule))
        Policy.model_validate(params.policy.model_dump())
        sdc_table.needs(params, ("a", "b", "x"))


def test_a_cell_key_table_of_sums_through_the_pipeline(home, test_mode):
    """Released as a request file gives it: every cell published, the manifest's perturbation with its share, no key
    in any file; the same request without a share in the policy is refused before anything is charged."""
    import json
    from pathlib import Path

    from privrelease.core.release import pipeline
    from privrelease.core.release.home import Home
    from privrelease.core.release.spec import parse
    from tests.sdc.test_sdc_table import _register

    _register(home, _frame(seed=3), _sum_policy()["tables"])
    doc = {"release_id": "s1", "dataset": "ds", "seed": 5,
           "mechanism": {"name": "sdc_table", "params": {"group_by": ["a", "b"], "measure": "sum", "column": "x", "method": "cell_key"}}}  # fmt: skip
    folder = Path(pipeline.release(Home(home), parse(doc))["folder"])
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["privacy"]["perturbation"]["share"] == 0.1 and manifest["sdc_report"]["audit"] == "passed"
    assert "__record_key" not in "".join(p.read_text(errors="replace") for p in folder.glob("*"))
    assert "sums of x by a × b, by the cell key method" in (folder / "report.md").read_text()


def test_a_sums_preview_says_the_steps_and_the_one_method_rule(home, test_mode):
    from privrelease.core.release import preview
    from privrelease.core.release.home import Home
    from privrelease.core.release.spec import parse
    from tests.sdc.test_sdc_table import _register

    _register(home, _frame(seed=3), _sum_policy()["tables"])
    params = {"group_by": ["a", "b"], "measure": "sum", "column": "x", "method": "cell_key"}
    shown = preview.text(
        preview.preview(Home(home), parse({"dataset": "ds", "mechanism": {"name": "sdc_table", "params": params}}))
    )
    assert "every sum moved by up to 3 steps (variance 1.5) of 0.1 of its 2 largest contributions" in shown
    assert "a sensitive cell 5 steps more" in shown and "published from a dataset by one method" in shown
    assert "verdict: **admitted**" in shown


def _intruder(published: float, rest: float, others: list[float], rule: CellKey, precision: float, second: float) -> tuple:
    """The intruder of ``cellkey.guess``, written out: every way the steps could have fallen (the first ±(mu_c + |v|),
    a 0 either way at half its chance; then each v), the largest contribution each gives for this published sum, the
    interval a guess hits holding the most chance. Returns (low, high) of that interval."""
    d, p = cellkey.row(rule.D + rule.js + 1, CellKey(D=rule.D, V=rule.V, js=rule.js))
    firsts = [(np.sign(v) * (rule.mu_c + abs(v)), q) for v, q in zip(d, p) if v != 0]
    firsts += [(rule.mu_c, p[d == 0][0] / 2), (-rule.mu_c, p[d == 0][0] / 2)]
    candidates = []
    for (s1, q1), *rest_steps in itertools.product(firsts, *[list(zip(d, p))] * len(others)):
        moved = sum(rule.share * w * x * v for (v, _), w, x in zip(rest_steps, rule.weights[1:], others))
        x1 = (published - rest - moved) / (1 + rule.share * s1)
        if x1 >= second * (1 - 1e-12):
            candidates.append((x1, q1 * np.prod([q for _, q in rest_steps])))
    ratio = (1 + precision) / (1 - precision)
    best = max(candidates, key=lambda c: sum(q for x, q in candidates if c[0] * (1 - 1e-12) <= x <= c[0] * ratio * (1 + 1e-12)))
    return best[0], best[0] * ratio


@pytest.mark.parametrize(("top", "weights"), [([500.0], [1.0]), ([500.0, 300.0], [1.0, 0.5])])
def test_the_chance_of_a_guess_is_what_the_intruder_gets_from_published_sums(top, weights):
    """20,000 cells of the same contributions under random keys, perturbed as released: the share whose largest
    contribution the intruder (knowing the rest) brings within 10% by the interval of most chance matches
    ``cellkey.guess`` (a binomial test, error rate 1e-3); at these steps about half, far above the default 0.1."""
    rule = CellKey(**(RULE | {"weights": weights}))
    rng = np.random.default_rng(11)
    n, x = 20_000, np.array(top + [0.0] * (2 - len(top)))
    keys = rng.integers(0, 2**32, n) / 2**32
    shown = cellkey.perturb_sums(np.full(n, x.sum()), np.tile(x, (n, 1)), keys, rule, np.ones(n, bool))
    seen: dict[float, tuple] = {}
    hits = 0
    for value in np.round(shown, 9):
        if value not in seen:
            seen[value] = _intruder(value, x.sum() - x[0], list(x[1 : len(weights)]), rule, 0.10, x[1])
        low, high = seen[value]
        hits += low * (1 - 1e-9) <= x[0] <= high * (1 + 1e-9)
    chance = cellkey.guess(x.sum(), x, rule, 0.10)
    assert abs(hits / n - chance) <= 3.3 * np.sqrt(chance * (1 - chance) / n)
    assert chance > 0.4 and chance > CellKey(D=3, V=1.5).max_guess


def test_the_default_chance_refuses_a_table_its_intruder_would_read():
    """The table of the tests above under the policy's default max_guess (0.1): refused, in the rules' words and
    what the steward changes; its steward's figures say the largest chance."""
    frame = _with_keys(_frame(seed=3))
    params = _sums(_sum_policy(max_guess=0.1))
    _, internal, missed = sdc_table.assess(frame, _release(frame, params), params, [])
    assert internal["largest_guess_chance"] > 0.1 and missed[-1].startswith("the cell key method left")


def test_a_perturbation_that_could_take_a_sum_to_zero_is_refused():
    with pytest.raises(ValueError, match="keep it under 1"):
        CellKey(**(RULE | {"share": 0.2}))


def test_a_perturbation_whose_audit_would_not_end_is_refused():
    """Three weights at D 10: 9,702 ways the steps can fall, every pair weighed by the audit (94 million): refused
    at the policy, saying what to lower; D 5 (1,452 ways) is allowed."""
    with pytest.raises(ValueError, match="a smaller D or fewer weights"):
        CellKey(**(RULE | {"D": 10, "V": 5, "share": 0.05, "mu_c": 1, "weights": [1.0, 0.5, 0.25]}))
    rule = CellKey(**(RULE | {"D": 5, "V": 3, "share": 0.1, "mu_c": 1, "weights": [1.0, 0.5, 0.25]}))
    assert 0 < cellkey.guess(900.0, np.array([500.0, 300.0, 100.0]), rule, 0.1) < 1
