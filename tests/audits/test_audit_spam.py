"""The statistical privacy auditor (tests/support/auditor.py) on the spam server's decrypted round sum with ``dp:``.

Two corpora differing in one message (a message of ``max_features`` features, its label flipped:
the worst case when R·√F is small, tests/spam/test_neighbours_spam.py) go once through the real protocol
(512-bit keys, test mode) without the users' shares: that gives the exact noiseless sums S and S′
the server would decrypt. Each audited run then adds the honest users' shares exactly as users add
them, ``privrelease.core.noise.integer_gaussian`` at the calibrated share variance, one draw per honest user and
coordinate (the colluders add nothing), and is reduced to one number, the projection of the noisy
sum on S′ − S (the most powerful test between the two sums; coordinates where S = S′ carry no
information and are not drawn). The auditor's lower bound on ε must stay at or below the claim at
the extremes of the parameters (with 99.9% confidence), and a deliberately under-noised variant
must be caught above it.

``make audit`` reruns this file with PRIVRELEASE_AUDIT=1 (the long sizes; table in
docs/PRIVACY-AUDIT.md).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from privrelease.core import noise
from privrelease.core.spam import dp
from tests.spam.test_neighbours_spam import protocol_round
from tests.support.auditor import audit, record, runs


def neighbours(params: dp.DPParams, users: int, rounds: int, d: int = 4) -> tuple[dp.Noise, list[int], list[int]]:
    """The calibrated noise and the protocol's noiseless sums on D and on D′ (the last user's first
    message, of min(F, d) features after the cap, with its label flipped), at a model on the ball."""
    rng = np.random.default_rng(users)
    corpus = [
        ([np.sort(rng.choice(d, rng.integers(1, d + 1), replace=False)) for _ in range(3)], rng.choice([-1, 1], 3))
        for _ in range(users)
    ]
    corpus[-1][0][0] = np.arange(d)
    calibrated = dp.calibrate(params, users, rounds)
    w = dp.project(np.random.default_rng(1).normal(0, 1, d), params.radius)
    s, _ = protocol_round(corpus, calibrated, w, 0.0)
    xs, ys = corpus[-1][0], corpus[-1][1].copy()
    ys[0] = -ys[0]
    s_prime, _ = protocol_round([*corpus[:-1], (xs, ys)], calibrated, w, 0.0)
    return calibrated, s, s_prime


def outputs(
    calibrated: dp.Noise, s: list[int], s_prime: list[int], n: int, seed: int, share_variance: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """n audited runs on each corpus: the noisy decrypted sum projected on S′ − S, in units of the
    calibrated σ. ``share_variance``: a variant's share variance instead of the calibrated one."""
    s2 = share_variance or calibrated.share_variance
    diff = [b - a for a, b in zip(s, s_prime)]
    support = [j for j, v in enumerate(diff) if v]
    norm = math.sqrt(sum(v * v for v in diff))
    unit = np.array([diff[j] / norm for j in support])
    found = []
    for k, shift in enumerate((0.0, norm)):
        rng = noise.generator(seed + k)
        draws = noise.integer_gaussian(rng, s2, n * calibrated.honest * len(support))
        shares = np.array(draws, dtype=float).reshape(n, calibrated.honest, len(support)).sum(axis=1)
        found.append((shares @ unit + shift) / calibrated.sigma)
    return found[0], found[1]


def _audit(name: str, params: dp.DPParams, users: int, rounds: int, n: int, seed: int, **variant):
    calibrated, s, s_prime = neighbours(params, users, rounds)
    result = audit(*outputs(calibrated, s, s_prime, n, seed, **variant), params.epsilon, params.delta)
    record(
        f"spam round sum (dp:): {name}, {users} users, {params.colluders} colluding, {rounds} rounds, "
        f"F = {params.max_features}, R = {params.radius:g}",
        result,
    )
    return calibrated, result


EXTREMES = [  # (params, users, rounds)
    pytest.param(dp.DPParams(epsilon=50, delta=0.0099, colluders=1, max_features=1, radius=1e-6), 2, 1,
                 id="largest-eps-and-delta,F=1,R-tiny"),
    pytest.param(dp.DPParams(epsilon=1e-3, delta=1e-12, colluders=1, max_features=1, radius=1e-6), 2, 1,
                 id="smallest-eps"),
    pytest.param(dp.DPParams(epsilon=8, delta=1e-6, colluders=4, max_features=1, radius=1e-6), 5, 1,
                 id="colluders=users-1"),
    pytest.param(dp.DPParams(epsilon=4, delta=1e-6, colluders=0, max_features=1, radius=0.5), 3, 10,
                 id="no-colluders,3-honest,10-rounds"),
    pytest.param(dp.DPParams(epsilon=50, delta=0.0099, colluders=1, max_features=1_000_000, radius=1e4), 2, 1,
                 id="F-and-R-largest"),
]  # fmt: skip


@pytest.mark.parametrize(("params", "users", "rounds"), EXTREMES)
def test_auditor_bound_stays_below_the_claim_at_the_extremes(test_mode, params, users, rounds):
    _, result = _audit("calibrated shares", params, users, rounds, runs(2_000, 200_000), seed=3)
    assert result.epsilon_lb <= params.epsilon, result


UNDER_NOISED = dp.DPParams(epsilon=1, delta=0.0099, colluders=9, max_features=1, radius=1e-6)


def test_auditor_catches_an_under_noised_round(test_mode):
    """Control, at ε = 1 and the largest δ accepted (where the auditor's runs can see a factor of 2
    in std): 10 users of which 9 may collude, the shares calibrated as if none did (each σ²/10
    instead of σ²: the one honest user's share alone is σ/√10), and the calibrated share variance
    divided by 4 (5 times the runs): both are caught above the claimed ε; the calibrated shares are
    not."""
    n = runs(2_000, 200_000)
    calibrated, fixed = _audit("calibrated shares", UNDER_NOISED, 10, 1, n, seed=5)
    assert fixed.epsilon_lb <= UNDER_NOISED.epsilon, fixed
    forgot = dp.calibrate(UNDER_NOISED.model_copy(update={"colluders": 0}), 10, 1).share_variance  # σ²/10
    assert abs(forgot * 10 - calibrated.share_variance) <= 10
    _, result = _audit(
        "UNDER-NOISED: colluders not subtracted (variance / 10)", UNDER_NOISED, 10, 1, n, seed=5, share_variance=forgot
    )
    assert result.epsilon_lb > UNDER_NOISED.epsilon, result
    _, result = _audit(
        "UNDER-NOISED: share variance / 4", UNDER_NOISED, 10, 1, 5 * n, seed=5, share_variance=calibrated.share_variance // 4
    )
    assert result.epsilon_lb > UNDER_NOISED.epsilon, result
