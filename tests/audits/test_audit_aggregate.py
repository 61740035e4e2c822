"""The statistical privacy auditor (tests/support/auditor.py) on aggregate releases at the parameter extremes:
the real ``aggregate.run`` on D and on D' = D without one user (or with one record replaced), many
fresh seeds each, and an empirical lower bound on epsilon that must stay at or below the claim.

- one group: every row in one key, the removed user holding max_rows rows of it (selected keys);
- a user in every group: the removed user holds max_rows rows in each of max_groups keys;
- bounds that clip everything: every value far above the upper bound, so each of the user's rows
  moves the sum by the whole bound (public keys, the sum alone; and a sum beside a mean of the same
  bounds, read from the mean's centred sum and the count);
- a median one user moves: two camps of users at 10 and 90, the removed user's rows in one of them
  (the exponential mechanism's draw, with the histogram it draws inside);
- a 0.99 quantile whose top rows the removed user holds (most of the budget on the draw);
- the record unit: one record moved from one key to another (replace one record).

The watched output is the first key's published value (nan when the key is not released). A weakened
run (the count's noise std divided by 20; the median drawn at 20 times its epsilon) is caught by the same
auditor, so the test can fail.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from privrelease.core import noise
from privrelease.core.mechanisms import aggregate as agg
from privrelease.core.privacy import draws
from tests.support.auditor import ALPHA, audit, record, runs
from tests.support.helpers import planned_run


def _users(keys: int, rows_per_key: int, users: int) -> pd.DataFrame:
    """``users`` users, each with ``rows_per_key`` rows in every one of ``keys`` keys, value 100."""
    n = keys * rows_per_key * users
    return pd.DataFrame({"user": np.arange(n) // (keys * rows_per_key), "g": np.tile(np.repeat(np.arange(keys), rows_per_key), users),
                         "x": np.full(n, 100.0)})  # fmt: skip


def _without_first_user(d: pd.DataFrame) -> pd.DataFrame:
    return d[d["user"] != 0].reset_index(drop=True)


def _moved_record(d: pd.DataFrame) -> pd.DataFrame:
    d2 = d.copy()
    d2.loc[0, "g"] = 1
    return d2


def _two_camps() -> pd.DataFrame:
    """One key, 12 users of 3 rows: users 0-5 at 10, 6-11 at 90, so the removed user 0 moves the median's rank
    by the most a user can (R max(q, 1 - q) = 1.5) and the median jumps between the camps."""
    n = 36
    return pd.DataFrame({"user": np.arange(n) // 3, "g": np.zeros(n, int), "x": np.where(np.arange(n) < 18, 10.0, 90.0)})


def _top_user() -> pd.DataFrame:
    """One key, 100 users of 3 rows: users 0-2 at 90, the rest at 10, so the 0.99 quantile (rank 297 of 300) is at 90
    and removing user 0 moves q n by 0.99 R and the 10-step's score by the whole sensitivity R max(q, 1 - q)."""
    n = 300
    user = np.arange(n) // 3
    return pd.DataFrame({"user": user, "g": np.zeros(n, int), "x": np.where(user < 3, 90.0, 10.0)})


COUNT = [{"op": "count"}]
CASES = {
    "one-group": (lambda: _users(1, 3, 30), _without_first_user, "count",
                  {"group_by": ["g"], "measures": COUNT, "epsilon": 1.0, "delta": 1e-5, "user_column": "user", "max_rows": 3}),
    "user-in-every-group": (lambda: _users(4, 2, 80), _without_first_user, "count",
                            {"group_by": ["g"], "measures": COUNT, "epsilon": 1.0, "delta": 1e-5, "user_column": "user",
                             "max_groups": 4, "max_rows": 2}),
    "bounds-clip-everything": (lambda: _users(2, 2, 20), _without_first_user, "x_sum",
                               {"group_by": ["g"], "measures": [{"op": "sum", "column": "x", "bounds": [0, 1]}], "epsilon": 1.0,
                                "delta": 1e-5, "user_column": "user", "max_groups": 2, "max_rows": 2, "domains": {"g": [0, 1]}}),
    "sum-beside-a-mean-clips-everything": (lambda: _users(2, 2, 20), _without_first_user, "x_sum",
                                           {"group_by": ["g"], "measures": [{"op": "sum", "column": "x", "bounds": [0, 1]},
                                            {"op": "mean", "column": "x", "bounds": [0, 1]}], "epsilon": 1.0, "delta": 1e-5,
                                            "user_column": "user", "max_groups": 2, "max_rows": 2, "domains": {"g": [0, 1]}}),
    "quantile-median-user": (_two_camps, _without_first_user, "x_q50",
                             {"group_by": ["g"], "measures": [{"op": "quantile", "column": "x", "bounds": [0, 100], "q": [0.5],
                              "bins": 4, "steps": 64, "interval_share": 0.5}], "epsilon": 1.0, "delta": 1e-5,
                              "user_column": "user", "max_rows": 3, "domains": {"g": [0]}}),
    "quantile-top-user": (_top_user, _without_first_user, "x_q99",
                          {"group_by": ["g"], "measures": [{"op": "quantile", "column": "x", "bounds": [0, 100], "q": [0.99],
                           "bins": 4, "steps": 64, "interval_share": 0.1}], "epsilon": 1.0, "delta": 1e-5,
                           "user_column": "user", "max_rows": 3, "domains": {"g": [0]}}),
    "record-moved": (lambda: _users(2, 10, 1).drop(columns="user"), _moved_record, "count",
                     {"group_by": ["g"], "measures": COUNT, "epsilon": 1.0, "delta": 1e-5, "domains": {"g": [0, 1]}}),
}  # fmt: skip


def outputs(case: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    make, neighbour, column, raw = CASES[case]
    params = agg.Params.model_validate(raw)
    d = make()
    d_prime = neighbour(d)

    def value(frame: pd.DataFrame, s: int) -> float:
        table = planned_run(agg, frame, params, noise.generator(s)).data
        first = table[table["g"] == 0]
        return float(first[column].iloc[0]) if len(first) else math.nan

    return np.array([value(d, seed + i) for i in range(n)]), np.array([value(d_prime, seed + n + i) for i in range(n)])


@pytest.mark.parametrize("case", sorted(CASES))
def test_auditor_bound_stays_below_the_claim(test_mode, case):
    raw = CASES[case][3]
    n = runs(150, 10_000)  # at make-test size the bound is at 95% confidence, else 99.9%
    result = audit(*outputs(case, n, seed=1), raw["epsilon"], raw["delta"], 0.05 if n < 1000 else ALPHA)
    record(f"aggregate {case}: epsilon={raw['epsilon']:g}, delta={raw['delta']:g}", result)
    assert result.epsilon_lb <= raw["epsilon"], result


def test_auditor_catches_a_count_with_too_little_noise(test_mode, monkeypatch):
    """The auditor can fail here: the count's declared leaf drawn with its sigma divided by 20 is caught."""
    real = draws.values
    monkeypatch.setattr(
        draws, "values", lambda rng, leaf, units, unit: real(rng, replace(leaf, sigma=leaf.sigma / 20), units, unit)
    )
    result = audit(*outputs("user-in-every-group", 150, seed=3), 1.0, 1e-5, 0.05)
    assert result.epsilon_lb > 1.0, result


def test_auditor_catches_a_median_drawn_at_too_large_an_epsilon(test_mode, monkeypatch):
    """The auditor can fail on the quantile too: its exponential-mechanism leaf drawn at 20 times its epsilon is caught."""
    real = draws.exponential
    monkeypatch.setattr(draws, "exponential", lambda rng, leaf, c, s: real(rng, replace(leaf, epsilon=leaf.epsilon * 20), c, s))
    result = audit(*outputs("quantile-median-user", 150, seed=3), 1.0, 1e-5, 0.05)
    assert result.epsilon_lb > 1.0, result
