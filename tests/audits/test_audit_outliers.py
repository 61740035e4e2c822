"""The statistical privacy auditor (tests/support/auditor.py) on DP outlier statistics: the real
``outliers.run`` on a table and on a neighbour with one record replaced by an extreme one, many
fresh seeds each, and an empirical lower bound on epsilon that must stay at or below the claim.

The stress: with k = 1 a record is an outlier when no other record lies within r. D holds tight
pairs, so nobody is an outlier; D' moves one member of a pair far away, which makes both it and its
former partner outliers: the count moves by 2, the global sensitivity's worst case in one dimension.
Run sizes as in tests/audits/test_audit.py (``make audit`` for the long run).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from privrelease.core import noise
from privrelease.core.mechanisms import outliers as o
from privrelease.core.mechanisms.outliers import sensitivity as sens
from privrelease.core.privacy import events
from tests.support.auditor import ALPHA, audit, record, runs
from tests.support.helpers import planned_run

N = 15


def _tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """D: seven tight pairs and one record between them (in both columns); D': one pair member at 10^6."""
    a = np.repeat(np.arange(7) * 10.0, 2) + np.tile([0.0, 0.1], 7)
    a = np.append(a, 35.0)
    d = pd.DataFrame({"a": a, "b": a[::-1].copy()})
    d_prime = d.copy()
    d_prime.loc[0, "a"] = 1e6
    return d, d_prime


def _params(**kw) -> o.Params:
    base = dict(query="count", columns=["a"], k=1, r=1.0, epsilon=4.0, delta=1e-5, standardize=False, rows=N)
    return o.Params(**(base | kw))


CASES = [
    pytest.param(_params(noise="global"), "noisy_count", id="count-global"),
    pytest.param(_params(epsilon=1.0, noise="global"), "noisy_count", id="count-global-eps1"),
    pytest.param(_params(noise="smooth"), "noisy_count", id="count-smooth"),
    pytest.param(_params(noise="smooth"), "noise_std", id="count-smooth-released-std"),
    pytest.param(
        _params(query="top_subspaces", columns=["a", "b"], c=1, h=1, delta=0.0, release_counts=False),
        "subspace",
        id="top-subspace-selection",
    ),
]


def outputs(params: o.Params, column: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One released value per run of ``outliers.run`` (a subspace as its index), on D and on D'."""

    def value(frame: pd.DataFrame, s: int) -> float:
        x = planned_run(o, frame, params, noise.generator(s)).data[column].iloc[0]
        return float(params.columns.index(x)) if column == "subspace" else (math.nan if x is None else float(x))

    d, d_prime = _tables()
    return (np.array([value(d, seed + i) for i in range(n)]), np.array([value(d_prime, seed + n + i) for i in range(n)]))


@pytest.mark.parametrize(("params", "column"), CASES)
def test_auditor_bound_stays_below_the_claim(test_mode, params, column):
    n = runs(500, 20_000)  # ~2 ms a run; at make-test size the bounds are at 95% confidence, else 99.9%
    result = audit(*outputs(params, column, n, seed=1), params.epsilon, params.delta, 0.05 if n < 1000 else ALPHA)
    record(
        f"outliers {params.query} ({params.noise}), released {column}: epsilon={params.epsilon:g}, "
        f"delta={params.delta:g}, N={N}, k=1, one record of a tight pair moved to 10^6",
        result,
    )
    assert result.epsilon_lb <= params.epsilon, result


def test_auditor_catches_a_count_with_too_little_noise(test_mode, monkeypatch):
    """The auditor can fail here: a weakened count (noise std divided by 20) is caught."""
    real = o.noisy_count

    def weakened(z, s, params, a, event, rng, m):  # the count's declared leaf, its sigma divided by 20
        leaf = events.find(event, sens.GLOBAL)
        return real(z, s, params, a, events.Composed((replace(leaf, sigma=leaf.sigma / 20),)), rng, m)

    monkeypatch.setattr(o, "noisy_count", weakened)
    params = _params(epsilon=0.5, noise="global")
    result = audit(*outputs(params, "noisy_count", runs(500, 10_000), seed=3), params.epsilon, params.delta, 0.05)
    assert result.epsilon_lb > params.epsilon, result
