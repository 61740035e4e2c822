"""SDC tables (#56): the table and its relations, the primary rules' closed forms, secondary suppression against a
brute-force optimum, and every published table against the intruder's LP attack written apart from the product
(``tests/support/table_attack.py``), alone and linked with the tables published before; refusals before anything runs."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privrelease.core.errors import ParameterError
from privrelease.core.mechanisms import sdc_table
from privrelease.core.sdc.cells import audit, rules, secondary, table
from privrelease.core.sdc.policy import Policy
from tests.support.table_attack import attack, truth

HIER = {"a": [{"a1": "A", "a2": "A", "a3": "B", "a4": "B"}]}


def _frame(n: int = 400, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "a": rng.choice(["a1", "a2", "a3", "a4"], n, p=[0.5, 0.3, 0.15, 0.05]),
            "b": rng.choice(["b1", "b2", "b3"], n, p=[0.6, 0.3, 0.1]),
            "hh": rng.integers(0, n * 3 // 4, n),
            "x": np.round(rng.lognormal(3, 1, n), 2),
        }
    )


def _policy(**tables) -> dict:
    return {
        "keys": {"categorical": ["a", "b"]},
        "publishable": ["x"],
        "cluster": "hh",
        "hierarchies": HIER,
        "tables": tables or {"min_frequency": 3, "dominance": {"n": 1, "k": 60}, "p_percent": {"p": 10}},
    }


def _params(policy: dict | None = None, **request) -> sdc_table.Params:
    return sdc_table.Params.model_validate({"group_by": ["a", "b"]} | request | {"policy": policy or _policy()})


def _release(frame, params):
    result = sdc_table.run(frame, params, sdc_table.plan(params), np.random.default_rng(0))
    sdc_table.check(frame, result, params)
    return result


def _protection(params, frame, published, values):
    """Each row's protection interval from the policy's rules, by their closed forms on the records."""
    r = params.policy.tables
    lo, hi = np.zeros(len(published)), np.zeros(len(published))
    for i, row in enumerate(published.to_dict("records")):
        mask = np.ones(len(frame), dtype=bool)
        for d in params.group_by:
            if row[f"{d}_level"] == 0:
                continue
            groups = {v: v for v in frame[d].unique()} | {v: g for v, g in HIER.get(d, [{}])[0].items()}
            sub = d in params.subtotals
            mask &= frame[d].map(lambda v, lab=row[d], g=groups, sub=sub: lab in (v, g.get(v) if sub else v))
        by = frame[mask].groupby("hh")["x" if params.measure == "sum" else "a"]
        contrib = (by.sum() if params.measure == "sum" else by.size()).sort_values(ascending=False).to_numpy(dtype=float)
        x, up = values[i], 0.0
        if contrib.size and r.min_frequency and contrib.size < r.min_frequency:
            up = max(up, r.frequency_range / 100 * x if params.measure == "sum" else max(1.0, r.frequency_range / 100 * x))
        if contrib.size and params.measure == "sum" and r.dominance and contrib[: r.dominance.n].sum() > r.dominance.k / 100 * x:
            up = max(up, 100 / r.dominance.k * contrib[: r.dominance.n].sum() - x)
        if contrib.size and params.measure == "sum" and r.p_percent:
            x2 = contrib[1] if contrib.size > 1 else 0.0
            up = max(up, r.p_percent.p / 100 * contrib[0] - (x - contrib[0] - x2))
        lo[i], hi[i] = min(up, x), up
    return lo, hi


def _assert_protected(frame, params, result):
    """The independent attack: every primary cell's interval reaches its protection interval; returns the attack."""
    data = result.data
    value = "count" if params.measure == "count" else f"sum_{params.column}"
    hier = {d: HIER[d] for d in params.subtotals}
    values = truth(frame, data, params.group_by, hier, params.column)
    published = data["status"].isin(["published", "empty"]).to_numpy()
    assert np.allclose(data[value].astype("Float64").to_numpy(dtype=float, na_value=np.nan)[published], values[published])
    lo, hi = _protection(params, frame, data, values)
    assert ((lo > 0) | (hi > 0) == (data["status"] == "primary")).all()  # primary: exactly the cells the rules name
    found = attack(data, frame, params.group_by, hier, value)
    for i in np.flatnonzero(data["status"] == "primary"):
        low, high = found[i]
        assert low <= values[i] - lo[i] + 1e-6 * max(1, values[i]) and high >= values[i] + hi[i] - 1e-6 * max(1, values[i]), (
            data.iloc[i].to_dict(), values[i], lo[i], hi[i], low, high)  # fmt: skip
    return found


# -- the table and its relations ---------------------------------------------------------------------------------


def test_a_dimensions_tree_follows_the_policys_levels_and_leaves_out_single_child_groups():
    d = table.dimension("a", ["a1", "a2", "a3", "a4", "a5"], [{"a1": "A", "a2": "A", "a3": "B", "a4": "B", "a5": "C"},
                                                               {"A": "AB", "B": "AB", "C": "C"}])  # fmt: skip
    assert d.labels == ["Total", "AB", "A", "a1", "a2", "B", "a3", "a4", "a5"] and d.depth == [0, 1, 2, 3, 3, 2, 3, 3, 1]
    assert d.children == {0: [1, 8], 1: [2, 5], 2: [3, 4], 5: [6, 7]}  # C (a5 alone) is a5's cell again
    flat = table.dimension("b", ["y", "x"])
    assert flat.labels == ["Total", "x", "y"] and flat.children == {0: [1, 2]}


def test_cells_are_the_records_counts_and_the_relations_hold():
    frame = _frame()
    params = _params(subtotals=["a"], measure="sum", column="x")
    t = sdc_table.tabulate(frame, params)
    a = table.relations(t.shape, t.dims)
    assert np.allclose(a @ t.values, 0) and a.shape[0] == 3 * 4 + 1 * 7  # a: 3 parents by 4 b nodes; b: 1 by 7 a nodes
    tidy = sdc_table.run(frame, _params(subtotals=["a"], policy=_policy(min_frequency=1)), None, None).data
    assert (tidy["status"] == "published").all()  # nothing sensitive at n = 1
    inner = tidy[(tidy.a_level == 2) & (tidy.b_level == 1)].set_index(["a", "b"])["count"]
    assert inner.to_dict() == frame.groupby(["a", "b"]).size().to_dict()
    assert tidy.loc[(tidy.a == "B") & (tidy.b_level == 0), "count"].item() == frame.a.isin(["a3", "a4"]).sum()
    # the largest contributions are by household: two records of one household are one contributor
    assert t.contributors[0] == frame.hh.nunique() and t.top[0, 0] == pytest.approx(frame.groupby("hh").x.sum().max())


# -- primary suppression -------------------------------------------------------------------------------------------


def test_the_rules_closed_forms():
    r = rules.TableRules(min_frequency=3, dominance={"n": 2, "k": 80}, p_percent={"p": 20}, frequency_range=30)
    # cells: 2 contributors (frequency), dominance 2 of 3 at 90 of 100, p%: 100 = 60 + 30 + 10, safe: 100 = 30+30+40.. 4 contributors
    top = np.array([[60.0, 30.0, 0], [60.0, 30.0, 10.0], [60.0, 30.0, 10.0], [30.0, 30.0, 20.0], [0, 0, 0]])
    values, n = np.array([90.0, 100.0, 100.0, 100.0, 0.0]), np.array([2, 3, 3, 5, 0])
    sens, lo, up, failed = rules.primary(r, "sum", n, values, top)
    assert sens.tolist() == [True, True, True, False, False]
    # dominance: U = 100/80 * 90 - 100 = 12.5; p%: U = 0.2 * 60 - (100 - 90) = 2; frequency on 90: 27
    assert up[1] == pytest.approx(12.5) and failed[1] == 2 | 4 and up[0] == pytest.approx(max(27, 100 / 80 * 90 - 90, 12 - 0))
    assert lo.tolist() == up.tolist()
    counts = rules.primary(r, "count", np.array([1, 2, 3, 0]), np.array([1.0, 2.0, 3.0, 0.0]), np.zeros((4, 2)))
    assert counts[0].tolist() == [True, True, False, False] and counts[2][:2].tolist() == [1.0, 1.0]  # at least 1
    assert counts[1][:2].tolist() == [1.0, 1.0]  # lower: at most the value


# -- secondary suppression against a brute-force optimum ------------------------------------------------------------


def _protects(a, values, suppressed, sensitive, lo, up) -> bool:
    return audit.audit(a, values, suppressed, sensitive, lo, up).passed


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_exact_method_finds_the_brute_force_optimum(seed):
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"a": rng.choice(["a1", "a2", "a3"], 60, p=[0.5, 0.4, 0.1]), "b": rng.choice(["b1", "b2", "b3"], 60)})
    params = sdc_table.Params.model_validate({"group_by": ["a", "b"], "policy": {"keys": {"categorical": ["a", "b"]},
                                              "tables": {"min_frequency": 4, "cost": "count"}}})  # fmt: skip
    t = sdc_table.tabulate(frame, params)
    sens, lo, up, _ = rules.primary(params.policy.tables, "count", t.contributors, t.values, t.top)
    empty = t.contributors == 0
    a = table.relations(t.shape, t.dims)
    exact = secondary.exact(a, t.values, sens, lo, up, empty, "count")
    assert exact.optimal and _protects(a, t.values, exact.suppressed, sens, lo, up)
    free = np.flatnonzero(~sens & ~empty)
    best = None
    for k in range(len(free) + 1):  # the fewest extra cells that protect every sensitive one
        for extra in itertools.combinations(free, k):
            s = sens.copy()
            s[list(extra)] = True
            if _protects(a, t.values, s, sens, lo, up):
                best = k
                break
        if best is not None:
            break
    assert exact.suppressed.sum() - sens.sum() == best
    heuristic = secondary.heuristic(a, t.values, sens, lo, up, empty, "count")
    assert _protects(a, t.values, heuristic.suppressed, sens, lo, up) and heuristic.suppressed.sum() >= exact.suppressed.sum()


# -- the independent attack ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_",
    [
        {},
        {"subtotals": ["a"]},
        {"measure": "sum", "column": "x"},
        {"measure": "sum", "column": "x", "subtotals": ["a"], "secondary": "heuristic"},
        {"secondary": "heuristic", "subtotals": ["a"]},
    ],
)
def test_no_primary_cell_is_narrower_than_its_protection(request_):
    frame = _frame(300, seed=7)
    params = _params(**request_)
    result = _release(frame, params)
    assert (result.data["status"] == "primary").sum() > 0  # the test table has sensitive cells
    _assert_protected(frame, params, result)
    external, internal, missed = sdc_table.assess(frame, result, params)
    assert missed == [] and external["audit"] == "passed" and internal["audit_passed"]


def test_primary_suppression_alone_is_exposed_and_the_audit_refuses_it():
    """A weakened product: secondary suppression left out. The independent attack recovers a primary cell exactly,
    and the product's own audit refuses the table, naming the policy's rule."""
    frame = _frame(300, seed=7)
    params = _params()
    t = sdc_table.tabulate(frame, params)
    sens, lo, up, failed = rules.primary(params.policy.tables, "count", t.contributors, t.values, t.top)
    a = table.relations(t.shape, t.dims)
    weak = audit.audit(a, t.values, sens, sens, lo, up)
    assert not weak.passed
    status = np.where(t.contributors == 0, "empty", np.where(sens, "primary", "published"))
    from privrelease.core.mechanisms.sdc_table import report as out

    data = out.tidy(t, status, params)
    found = attack(data, frame, ["a", "b"], {}, "count")
    values = truth(frame, data, ["a", "b"], {})
    assert any(found[i][0] == pytest.approx(values[i]) == pytest.approx(found[i][1]) for i in found)


# -- refusals before anything runs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "policy, request_, said",
    [
        ({"min_frequency": None, "dominance": {"n": 1, "k": 60}}, {}, "count table is protected by the policy's min_frequency"),
        ({"min_frequency": 3}, {"measure": "sum", "column": "x"}, "has neither; the data steward sets tables.dominance"),
        ({"min_frequency": 3}, {"subtotals": ["b"]}, "sub-totals of 'b' need its hierarchy in the disclosure policy"),
    ],
)
def test_a_request_the_policy_does_not_allow_is_refused(policy, request_, said):
    params = _params(_policy(**policy), **request_)
    with pytest.raises(ParameterError, match=said.replace("(", r"\(")):
        sdc_table.needs(params, ("a", "b", "hh", "x"))
    no_rules = _policy() | {"tables": None}
    with pytest.raises(ParameterError, match="sets no rules for tables"):
        sdc_table.needs(_params(no_rules), ("a", "b", "hh", "x"))


def test_a_malformed_request_is_refused():
    for bad, said in [
        ({"group_by": ["a", "a"]}, "names a column twice"),
        ({"measure": "sum"}, "measure: sum needs column"),
        ({"subtotals": ["x"]}, "not in group_by"),
        ({"group_by": ["a", "b", "hh", "x", "y"]}, "at most 4"),
    ]:
        with pytest.raises(ValueError, match=said):
            _params(**bad)


def test_policy_tables_section_is_validated():
    with pytest.raises(ValueError):
        Policy.model_validate(_policy() | {"tables": {"dominance": {"n": 1, "k": 120}}})


# -- through the release pipeline --------------------------------------------------------------------------------------


def _register(home, frame, tables=None, dataset_id: str = "ds"):
    from tests.support.helpers import register

    doc = _policy(**(tables or {})) | {"thresholds": {"k": None}}
    return register(home, frame, dataset_id, "record", "sdc", policy=Policy.model_validate(doc))


def test_a_table_is_released_with_its_pivot_and_the_stewards_internal_report(home, test_mode):
    import json

    from privrelease.core.release import pipeline
    from privrelease.core.release.home import Home
    from privrelease.core.release.spec import parse

    frame = _frame(300, seed=7)
    _register(home, frame)
    request = {"group_by": ["a", "b"], "subtotals": ["a"], "measure": "sum", "column": "x"}
    summary = pipeline.release(
        Home(home), parse({"release_id": "t1", "dataset": "ds", "mechanism": {"name": "sdc_table", "params": request}, "seed": 5})
    )
    folder = Path(summary["folder"])
    manifest = json.loads((folder / "manifest.json").read_text())
    assert set(manifest["files"]) >= {"table.csv", "table.parquet", "pivot.csv", "report.md"}
    assert manifest["sdc_report"]["audit"] == "passed" and manifest["sdc_report"]["primary"] > 0
    published = pd.read_parquet(folder / "table.parquet")
    params = _params(**request)
    _assert_protected(frame, params, type("R", (), {"data": published})())  # the published file, attacked
    internal = json.loads((home / "sdc-reports" / "ds" / "t1" / "internal.json").read_text())
    assert (
        internal["audit_passed"]
        and internal["suppressed_cells"] == manifest["sdc_report"]["primary"] + manifest["sdc_report"]["secondary"]
    )
    assert (
        '"interval"' not in (folder / "manifest.json").read_text()
        and "suppressed_total" not in (folder / "report.md").read_text()
    )


def test_a_table_whose_audit_fails_is_not_published(home, test_mode, monkeypatch):
    """A weakened secondary suppression (none at all): the audit refuses, the failed entry names the policy's rule."""
    from privrelease.core.errors import UserError
    from privrelease.core.release import pipeline
    from privrelease.core.release.home import Home
    from privrelease.core.release.spec import parse
    from privrelease.core.sdc.cells import secondary as sec

    frame = _frame(300, seed=7)
    _register(home, frame)
    monkeypatch.setattr(sec, "choose", lambda method, a, values, sensitive, *rest: sec.Pattern(sensitive.copy(), "none", False))
    with pytest.raises(UserError, match="every published cell has at least 3 contributors"):
        pipeline.release(
            Home(home),
            parse(
                {
                    "release_id": "t2",
                    "dataset": "ds",
                    "mechanism": {"name": "sdc_table", "params": {"group_by": ["a", "b"]}},
                    "seed": 5,
                }
            ),
        )
    assert not (home / "releases" / "ds" / "t2").exists()
    assert not json_loads_ok(home / "sdc-reports" / "ds" / "t2" / "internal.json")["audit_passed"]


def json_loads_ok(path):
    import json

    return json.loads(path.read_text())


@pytest.mark.parametrize(
    "request_, said",
    [
        ({"group_by": ["a", "hh"]}, "is the weight or cluster id"),
        ({"group_by": ["a", "secret"]}, "is not named by its disclosure policy"),
        ({"group_by": ["a", "b"], "subtotals": ["b"]}, "sub-totals of 'b' need its hierarchy"),
        ({"group_by": ["a", "b"], "measure": "sum", "column": "x"}, "has neither; the data steward sets tables.dominance"),
    ],
)
def test_a_bad_request_is_refused_before_anything_is_charged(home, test_mode, request_, said):
    from privrelease.core.errors import UserError
    from privrelease.core.release import pipeline
    from privrelease.core.release.home import Home
    from privrelease.core.release.spec import parse

    _register(home, _frame(100).assign(secret=1), {"min_frequency": 3})
    with pytest.raises(UserError, match=said):
        pipeline.check(
            Home(home),
            parse({"release_id": "t3", "dataset": "ds", "mechanism": {"name": "sdc_table", "params": request_}, "seed": 5}),
        )
    assert not (home / "releases" / "ds").exists()


# -- the real tables of the "done when" ------------------------------------------------------------------------


def test_adult_education_occupation_sex_with_margins_resists_the_attack():
    from tests.conftest import adult_clean

    frame = adult_clean()
    group_by = ["education", "occupation", "sex"]
    policy = {"keys": {"categorical": group_by}, "tables": {"min_frequency": 10, "cost": "count"}}
    params = sdc_table.Params.model_validate({"group_by": group_by, "secondary": "heuristic", "policy": policy})
    result = _release(frame, params)
    data = result.data
    assert len(data) == 17 * 15 * 3 and (data.status == "primary").sum() > 100 and (data.status == "secondary").sum() > 0
    values = truth(frame, data, group_by, {})
    primary = np.flatnonzero(data.status == "primary")
    assert ((values[primary] > 0) & (values[primary] < 10)).all()  # min frequency: persons are the contributors
    found = attack(data, frame, group_by, {}, "count")
    for i in primary:  # protection: 30% of the count, at least 1, both ways (at most down to zero)
        need = max(1.0, 0.3 * values[i])
        assert found[i][0] <= values[i] - min(need, values[i]) + 1e-6 and found[i][1] >= values[i] + need - 1e-6, i


def test_the_payroll_salary_sums_by_region_and_grade_resist_the_attack():
    """A magnitude table: the demo payroll's salary sums by region × grade, each person (their slips summed) one
    contributor, under (1, 60)-dominance and the 15%-rule."""
    from privrelease.core.datasets.demo import payroll

    frame = payroll(persons=160, seed=56)
    policy = {"keys": {"categorical": ["region", "grade"]}, "publishable": ["salary", "month"], "cluster": "person",
              "tables": {"min_frequency": 3, "dominance": {"n": 1, "k": 60}, "p_percent": {"p": 15}}}  # fmt: skip
    for method in ("exact", "heuristic"):
        params = sdc_table.Params.model_validate(
            {"group_by": ["region", "grade"], "measure": "sum", "column": "salary", "secondary": method, "policy": policy}
        )
        result = _release(frame, params)
        data = result.data
        assert (data.status == "primary").sum() > 0
        assert_payroll_protected(frame, data, attack(data, frame, ["region", "grade"], {}, "sum_salary"), method)


def assert_payroll_protected(frame, data, found: dict, what: str) -> None:
    """Every primary cell of a payroll salary table by region × grade reaches its protection in the attack's
    intervals ``found``: (1, 60)-dominance, the 15%-rule and 30% for fewer than 3 persons, by their closed forms
    on the persons' summed slips."""
    values = truth(frame, data, ["region", "grade"], {}, "salary")
    for i in np.flatnonzero(data.status == "primary"):
        row = data.iloc[i]
        mask = np.ones(len(frame), dtype=bool)
        for d in ("region", "grade"):
            if row[f"{d}_level"]:
                mask &= (frame[d] == row[d]).to_numpy()
        per = np.sort(frame[mask].groupby("person").salary.sum().to_numpy())[::-1]
        x1, x2 = per[0], per[1] if per.size > 1 else 0.0
        need = max(
            100 / 60 * x1 - values[i] if x1 > 0.6 * values[i] else 0.0,
            0.15 * x1 - (values[i] - x1 - x2),
            0.3 * values[i] if per.size < 3 else 0.0,
        )
        assert found[i][1] >= values[i] + need - 1e-6 * values[i], (what, i)
        assert found[i][0] <= values[i] - min(need, values[i]) + 1e-6 * values[i], (what, i)
