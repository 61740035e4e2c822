"""The statistical auditor on SDC tables (#56), at the extremes of every parameter the steward and the analyst set.

SDC tables make no epsilon claim; the auditor holds each to what docs/mechanisms/sdc_table.md says it publishes, measured
from outside the product on random tables (``runs``: a few in ``make test``, many in ``make audit``):

- cell suppression: every published table's sensitive cells reach their protection intervals in the independent LP
  attack (tests/support/table_attack.py), whatever the rules' parameters (each at its bounds or between), the
  secondary method, the cost, counts or sums, with or without sub-totals;
- the cell key method, counts: every published count within D of the truth, none in 1..js, zeros kept, for D, V and
  js at their bounds;
- the cell key method, sums: every sensitive cell of a published table has an intruder's chance of guessing its
  largest contribution within the policy's precision of at most max_guess, the chance worked out by the intruder
  written out in tests/sdc/test_sdc_cellkey_sums.py (every way the steps fall, every way they could have).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from privrelease.core.errors import UserError
from privrelease.core.mechanisms import sdc_table
from privrelease.core.noise import keys
from privrelease.core.sdc.cells import cellkey
from privrelease.core.sdc.cells.rules import CellKey
from privrelease.core.sdc.enforce import RECORD_KEY
from tests.sdc.test_sdc_cellkey_sums import _intruder
from tests.sdc.test_sdc_table import HIER, _assert_protected, _params, _policy, _protection, _release
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


def test_published_sums_by_the_cell_key_method_keep_every_guess_under_max_guess(test_mode):
    """Parameters at their bounds (share up to what keeps share × (D + mu_c) under 1, one or two weights, mu_c 0 to
    5, D 1 to 5, max_guess 0.3 to 1): for every table the audit lets out, each sensitive cell's chance, worked out
    by the written-out intruder over every way its steps can fall, is at most max_guess; and a table holding a
    cell above it was refused."""
    checked = refused = 0
    for seed in range(runs(4, 30)):
        rng = np.random.default_rng(900 + seed)
        D = int(rng.choice([1, 3, 5]))
        mu_c = float(rng.choice([0.0, 1.0, 5.0]))
        share = float(rng.uniform(0.01, 0.99 / (D + mu_c)))
        rule = {"D": D, "V": float(min(D * D, rng.choice([0.3, 1.5, 5.0]))), "js": 0, "share": share,
                "weights": [[1.0], [1.0, 0.5], [1.0, 1.0]][seed % 3], "mu_c": mu_c, "max_guess": float(rng.choice([0.3, 0.6, 1.0]))}  # fmt: skip
        tables = {"min_frequency": 2, "p_percent": {"p": float(rng.choice([5.0, 10.0, 30.0]))}, "cell_key": rule}
        frame = _table(seed)
        frame = frame.assign(**{RECORD_KEY: keys.record_keys(bytes([seed + 1]) * 32, frame)})
        try:
            params = _params(_policy(**tables), method="cell_key", measure="sum", column="x")
        except (ValueError, UserError):
            continue  # a perturbation table the policy refuses
        result = _release(frame, params)
        _, _, missed = sdc_table.assess(frame, result, params)
        ck = CellKey(**rule)
        values = truth(frame, result.data, ["a", "b"], {}, "x")
        lo, hi = _protection(params, frame, result.data, values)
        chances = []
        for i in np.flatnonzero((lo > 0) | (hi > 0)):
            row = result.data.iloc[i]
            mask = np.ones(len(frame), dtype=bool)
            for d in ("a", "b"):
                if row[f"{d}_level"]:
                    mask &= (frame[d] == row[d]).to_numpy()
            top = sorted(frame[mask].groupby("hh")["x"].sum().tolist(), reverse=True) + [0.0, 0.0]
            chances.append(_chance(values[i], top, ck, tables["p_percent"]["p"] / 100))
        if missed:
            refused += 1
            assert max(chances, default=0.0) > ck.max_guess or "less than its protection" in missed[-1] or "moved" in missed[-1]
            continue
        checked += 1
        assert max(chances, default=0.0) <= ck.max_guess + 1e-9, (seed, rule, max(chances))
    assert checked + refused > 0


def _chance(total: float, top: list[float], rule: CellKey, precision: float) -> float:
    """The intruder's chance over every way the steps fall: each way's published sum, the intruder's interval for it
    (``_intruder``), whether the true largest contribution is inside, weighted by the way's chance."""
    d, p = cellkey.row(rule.D + rule.js + 1, CellKey(D=rule.D, V=rule.V, js=rule.js))
    firsts = [(np.sign(v) * (rule.mu_c + abs(v)), q) for v, q in zip(d, p) if v != 0]
    firsts += [(rule.mu_c, p[d == 0][0] / 2), (-rule.mu_c, p[d == 0][0] / 2)]
    others = top[1 : len(rule.weights)]
    rest = total - top[0]
    hit = 0.0
    for s1, q1 in firsts:
        for steps in np.array(np.meshgrid(*([d] * len(others)), indexing="ij")).reshape(len(others), -1).T if others else [()]:
            chance = q1 * np.prod([p[list(d).index(v)] for v in steps])
            published = total + rule.share * (s1 * top[0] + sum(w * x * v for w, x, v in zip(rule.weights[1:], others, steps)))
            low, high = _intruder(published, rest, others, rule, precision, top[1])
            hit += chance * (low * (1 - 1e-9) <= top[0] <= high * (1 + 1e-9))
    return hit
