"""The statistical auditor on SDC tables (#56), at the extremes of every parameter the steward and the analyst set.

SDC tables make no epsilon claim; the auditor holds each to what docs/mechanisms/sdc_table.md says it publishes, measured
from outside the product on random tables (``runs``: a few in ``make test``, many in ``make audit``):

- cell suppression: every published table's sensitive cells reach their protection intervals in the independent LP
  attack (tests/support/table_attack.py), whatever the rules' parameters (each at its bounds or between), the
  secondary method, the cost, counts or sums, with or without sub-totals;
- the cell key method (counts): every published count within D of the truth, none in 1..js, zeros kept, for D, V
  and js at their bounds;
- the cell key method (sums), for low, high and the p%-rule's p at their bounds: every sum within its contributions'
  smallest and largest factors (and the rounding of each), empty cells zero, every margin and sub-total the sum of the cells below it, and an
  intruder who knows every other contribution reading one factor per contributor, to the rounding, from every cell (the guarantee's
  premise: its chance is the factors' alone, tests/sdc/test_sdc_cellkey_sums.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from privrelease.core.mechanisms import sdc_table
from privrelease.core.noise import keys
from privrelease.core.sdc.cells import factors
from privrelease.core.sdc.enforce import FACTOR_KEY, RECORD_KEY
from tests.sdc.test_sdc_table import HIER, _assert_protected, _params, _policy, _release
from tests.support.auditor import runs
from tests.support.table_attack import truth


def _table(seed: int) -> pd.DataFrame:
    """A random table of 30-400 records: a (4 values), b (2-6), households of 1-3 records, skewed amounts."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(30, 401))
    return pd.DataFrame(
        {
            "a": rng.choice(["a1", "a2", "a3", "a4"], n, p=rng.dirichlet(np.ones(4))),
            "b": rng.choice([f"b{i}" for i in range(int(rng.integers(2, 7)))], n),
            "hh": rng.integers(0, max(1, n * 2 // 3), n),
            "x": np.round(rng.lognormal(3, float(rng.uniform(0.2, 2.0)), n), 2),
        }
    )


def _rules(rng: np.random.Generator, measure: str) -> dict:
    """Table rules with each parameter at a bound or between (a sum's table: a magnitude rule or two)."""
    pick = lambda *v: v[int(rng.integers(len(v)))]  # noqa: E731
    rules = {"min_frequency": pick(1, 2, 3, 10, 1000), "frequency_range": pick(0.5, 30.0, 100.0), "cost": pick("count", "value")}
    if measure == "sum":
        rules["dominance"] = {"n": pick(1, 2, 10), "k": pick(1.0, 60.0, 99.0, 100.0)}
        if rng.random() < 0.7:
            rules["p_percent"] = {"p": pick(0.5, 10.0, 50.0, 100.0)}
    return rules


@pytest.mark.parametrize("measure", ["count", "sum"])
def test_every_published_suppressed_table_holds_its_sensitive_cells_at_the_extremes(measure, test_mode):
    tables = runs(4, 40)
    published = 0
    for seed in range(tables):
        rng = np.random.default_rng(500 + seed)
        frame = _table(seed)
        request = {"secondary": ["exact", "heuristic", "auto"][seed % 3]} | ({"subtotals": ["a"]} if seed % 2 else {})
        if measure == "sum":
            request |= {"measure": "sum", "column": "x"}
        params = _params(_policy(**_rules(rng, measure)), **request)
        result = _release(frame, params)
        _, _, missed = sdc_table.assess(frame, result, params)
        if missed:  # refused: nothing published, nothing to hold
            continue
        published += 1
        _assert_protected(frame, params, result)
    assert published >= tables // 2, (published, tables)


@pytest.mark.parametrize(("D", "V", "js"), [(1, 0.01, 0), (1, 1.0, 2), (10, 10.0, 0), (10, 0.5, 10), (5, 0.01, 10), (3, 1.5, 2)])
def test_cell_key_counts_stay_in_their_reach_at_the_extremes(D, V, js, test_mode):
    for seed in range(runs(2, 20)):
        frame = _table(seed)
        frame = frame.assign(**{RECORD_KEY: keys.record_keys(bytes([seed]) * 32, frame)})
        params = _params(_policy(min_frequency=3, cell_key={"D": D, "V": V, "js": js}), method="cell_key", subtotals=["a"])
        data = _release(frame, params).data
        true = truth(frame, data, ["a", "b"], {"a": HIER["a"]})
        shown = data["count"].to_numpy(dtype=float)
        assert (np.abs(shown - true) <= D).all() and (shown >= 0).all() and (shown[true == 0] == 0).all()
        assert not ((shown >= 1) & (shown <= js)).any()


@pytest.mark.parametrize(
    ("low", "high", "p"), [(0.0, 0.01, 0.5), (0.0, 9.0, 99.0), (1.0, 9.0, 0.5), (0.1, 1.0, 10.0), (1.0, 1.01, 100.0)]
)
def test_cell_key_sums_hold_their_premise_at_the_extremes(low, high, p, test_mode):
    from tests.sdc.test_sdc_cellkey_sums import _one_factor_each

    tables = {"p_percent": {"p": p}, "cell_key_sums": {"low": low, "high": high, "max_guess": 1.0}}
    for seed in range(runs(2, 20)):
        frame = _table(seed)
        secret = bytes([seed]) * 32
        frame = frame.assign(**{FACTOR_KEY: keys.factor_keys(secret, frame.hh, "x"), RECORD_KEY: keys.record_keys(secret, frame)})
        params = _params(_policy(**tables), method="cell_key", measure="sum", column="x", subtotals=["a"])
        data = _release(frame, params).data
        true = truth(frame, data, ["a", "b"], {"a": HIER["a"]}, "x")
        shown = data["sum_x"].to_numpy(dtype=float)
        least, most = factors.reach(low, high)
        least, most = least * (1 - factors.ROUNDED), most * (1 + factors.ROUNDED)  # each contribution rounded
        assert (shown >= least * true - 1e-6).all() and (shown <= most * true + 1e-6).all() and (shown[true == 0] == 0).all()
        total = float(data[(data.a_level == 0) & (data.b_level == 0)].sum_x.iloc[0])
        for a_level, b_level in ((1, 0), (0, 1)):  # the first level below each total partitions it
            assert data[(data.a_level == a_level) & (data.b_level == b_level)].sum_x.sum() == pytest.approx(total, rel=1e-9)
        read = _one_factor_each(frame, [(data, ["a", "b"], HIER)], low, high)
        assert max(abs(r - 1) for v in read.values() for r in v) <= factors.ROUNDED + 1e-6
