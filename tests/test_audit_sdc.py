"""The statistical auditor (tests/auditor.py) on the two SDC releases the third privacy review named:
MEWS suppressing lone tuples (widths in sd units) and RA with ``p: entropy``.

SDC makes no epsilon claim, so the auditor is held to what the mechanism pages (docs/mechanisms/) say each publishes of one
record. The real mechanisms run many times with fresh seeds on a table and a neighbour; each run is
reduced to one float, and the auditor's lower bound on epsilon (false alarm at most ALPHA, as for the
DP audits) must be 0 where the documentation says the record leaves no trace:

- MEWS with ``singletons: suppress``: the released column where the lone tuple's value would show, a kept record's released
  value, on tables that differ only in where the lone tuple lies (a move that changes neither the
  grid nor which tuples are alone; docs/mechanisms/swapping.md says a move that does can change the suppressed count);
- RA with ``p: entropy``: the published p and a released cell, on tables whose QI marginals have the
  same entropies (another joint); and p separates tables whose entropies differ, as ``ra.REVEALS`` says.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core import noise
from core.mechanisms import ra, swapping
from tests.auditor import ALPHA, audit, record, runs
from tests.helpers import planned_run
from tests.test_sdc_policy import _outlier

MEWS = swapping.MEWSParams(swap_set=["x", "y"], widths=3.0, singletons="suppress")


def _mews(frame: pd.DataFrame, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per run: the largest released x (where the lone tuple's value would show), the released x of record 5
    (row 4 once the lone tuple, row 0, is suppressed: the kept rows keep their order), the suppressed count."""
    own, kept, count = [], [], []
    for seed in range(n):
        result = planned_run(swapping.MEWS, frame, MEWS, noise.generator(10_000 + seed))
        assert len(result.data) == len(frame) - 1
        own.append(result.data["x"].max())
        kept.append(result.data["x"].iloc[4])
        count.append(result.privacy["suppressed_tuples"])
    return np.array(own, dtype=float), np.array(kept, dtype=float), np.array(count, dtype=float)


def test_mews_suppression_leaves_no_trace_of_the_lone_tuple(test_mode):
    n = runs(300, 3000)
    d, d_prime = _outlier((97.31, 71.4)), _outlier((60.0, 40.0))
    own, kept, count = _mews(d, n)
    own_p, kept_p, count_p = _mews(d_prime, n)
    assert (own < 60).all() and (own_p < 60).all()  # its value is nowhere in the release
    assert (count == 1).all() and (count_p == 1).all()
    for name, a, b in (("largest released x", own, own_p), ("a kept record", kept, kept_p), ("suppressed count", count, count_p)):
        found = audit(a, b, 0.0, 0.0, ALPHA)
        record(f"MEWS, singletons: suppress, lone tuple moved: {name}", found)
        assert found.epsilon_lb <= 0.0, (name, found)
    # control: the auditor sees the count when the neighbour's tuple is not alone (it joins the bulk)
    joined = _outlier((5.0, 8.0))
    counts = [
        planned_run(swapping.MEWS, joined, MEWS, noise.generator(10_000 + seed)).privacy["suppressed_tuples"] for seed in range(n)
    ]
    assert audit(count, np.array(counts, dtype=float), 0.0, 0.0, ALPHA).epsilon_lb > 2.0  # 300 runs: about 3


def _ra(frame: pd.DataFrame, n: int) -> tuple[np.ndarray, np.ndarray]:
    params = ra.Params(qi=["age", "sex", "race", "education"], sensitive="occupation", p="entropy")
    first, cell = [], []
    for seed in range(n):
        result = planned_run(ra, frame, params, noise.generator(20_000 + seed))
        first.append(result.privacy["p"][0])
        cell.append(float(result.data["sex"].iloc[0] == "Male"))
    return np.array(first), np.array(cell)


def test_ra_p_entropy_reveals_the_entropies_and_no_more(test_mode):
    from core.datasets.demo import census

    n = runs(200, 2000)
    d = census(400)
    other_sex = int(np.flatnonzero(d["sex"].to_numpy() != d.loc[0, "sex"])[0])
    same = d.copy()  # record 0 and the first of the other sex exchange it: the same marginals, another joint
    same.loc[[0, other_sex], "sex"] = d.loc[[other_sex, 0], "sex"].to_numpy()
    assert not same.equals(d)
    p_d, cell_d = _ra(d, n)
    p_s, _ = _ra(same, n)
    found = audit(p_d, p_s, 0.0, 0.0, ALPHA)
    record("RA, p: entropy, the same QI entropies: published p", found)
    assert found.epsilon_lb <= 0.0
    other = d.copy()  # one record's sex changed: the entropy of sex moves, and with it p
    other.loc[0, "sex"] = "Female" if d.loc[0, "sex"] == "Male" else "Male"
    p_o, _ = _ra(other, n)
    assert audit(p_d, p_o, 0.0, 0.0, ALPHA).epsilon_lb > 2.0  # p tells the two apart, as REVEALS says
    assert 0 < cell_d.mean() < 1  # the released cell is a draw, not the record's value
