"""Differential privacy of what the spam server decrypts (privrelease.core.spam.dp): the accounting against
closed forms, the users' summed noise shares against the exact discrete law, and the collusion
attack of the review's finding 2 against a dp: run, which must see only noise of the stated scale."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privrelease.core import noise
from privrelease.core.errors import ParameterError
from privrelease.core.privacy.accountant import gdp_mu, parts
from privrelease.core.privacy.budget import gaussian_delta, gaussian_sigma
from privrelease.core.privacy.events import Gaussian
from privrelease.core.spam import dp
from privrelease.core.spam import parties as Q
from privrelease.core.spam import protocol as P
from privrelease.core.spam import wire as W
from privrelease.core.spam.aggregation import W_BITS
from tests.attacks.test_spam_server import D, Inbox, block_of, contribution, recover, summed


@pytest.mark.parametrize(
    ("epsilon", "delta", "users", "colluders", "rounds", "features", "radius"),
    [(1.0, 1e-6, 3, 1, 10, 200, 1.0), (0.3, 1e-8, 2, 1, 1, 50, 0.25), (8.0, 1e-5, 5, 3, 40, 1000, 4.0)],
)
def test_noise_calibration_against_closed_forms(epsilon, delta, users, colluders, rounds, features, radius):
    params = dp.DPParams(epsilon=epsilon, delta=delta, colluders=colluders, max_features=features, radius=radius)
    n = dp.calibrate(params, users, rounds)
    # |t_i| <= 2·C_w + C_w·R·√F + F/2, and replacing a message moves the sum by 2·√F·T
    exact_t = 2 * 2**W_BITS + radius * math.sqrt(features) * 2**W_BITS + features / 2
    assert exact_t <= n.term_bound <= exact_t * (1 + 1e-11)  # rounded up, by at most a relative 10^-12 + 1
    assert (
        n.l2 == pytest.approx(2 * math.sqrt(features) * n.term_bound, rel=1e-9) and n.l2 >= 2 * math.sqrt(features) * n.term_bound
    )
    # σ = Δ₂·√rounds·σ₁(ε, δ), shared by the honest users: h·s² >= σ², and not much more
    target = Fraction(n.l2 * math.sqrt(rounds) * gaussian_sigma(epsilon, delta)) ** 2
    assert n.honest == users - colluders and target <= n.honest * n.share_variance <= target * Fraction(1 + 1e-6) + n.honest
    # the events: rounds Gaussians of std √(h·s²) and sensitivity Δ₂, whose GDP composition meets (ε, δ) tightly
    ((event, count),) = parts(n.event())  # as the filter counts it: the Gaussian its sum is accounted as
    assert (type(event), count, event.sigma, event.sensitivity) == (Gaussian, rounds, n.sigma, n.l2)
    mu = gdp_mu(parts(n.event()))
    assert mu == pytest.approx(math.sqrt(rounds) * n.l2 / n.sigma, rel=1e-12)
    assert 0.999 * delta <= gaussian_delta(epsilon, 1 / mu) <= delta
    # KLS: τ vanishes for these share variances, so each round is exactly ρ = Δ₂² / (2·h·s²)
    assert n.share_variance >= dp.MIN_SHARE_VARIANCE and n.tau() == 0.0
    assert event.rho(count) == pytest.approx(rounds * n.l2**2 / (2 * n.honest * n.share_variance), rel=1e-12)
    room = dp.noise_bits(n.share_variance) - dp.TAIL_SIGMAS_BITS  # slot room: 2^7 std, at least
    assert 2 ** (room - 1) <= math.isqrt(n.share_variance) + 1 < 2**room


def test_colluders_must_leave_an_honest_user():
    with pytest.raises(ParameterError, match="dp.colluders is 2, but the run has 2 users: at least one user must add noise"):
        dp.calibrate(dp.DPParams(epsilon=1, delta=1e-6, colluders=2), 2, 1)


def test_caps_and_projection_are_public_bounds():
    idx = np.arange(0, 5000, 7)
    kept = dp.cap(idx, 50, seed=3)
    assert kept.size == 50 and set(kept) <= set(idx) and np.array_equal(kept, dp.cap(idx, 50, seed=3))
    assert not np.array_equal(kept, dp.cap(idx, 50, seed=4)) and np.array_equal(dp.cap(idx[:10], 50, 3), idx[:10])
    w = np.full(100, 0.5)
    assert np.linalg.norm(dp.project(w, 2.0)) <= 2.0 and np.allclose(dp.project(w, 2.0), w * 2.0 / 5.0)
    assert np.array_equal(dp.project(w, 10.0), w)


def test_the_shares_sum_follows_the_exact_discrete_law(test_mode):
    """Three users' shares N_Z(0, 3) summed, 8,000 times, against the exact law of the sum (the
    convolution of the discrete Gaussian pmfs): chi-square, false alarm 0.001. The same draws
    against the law with a 25% larger variance must be rejected (so the test can fail)."""
    rng = noise.generator(11)
    s2, users, draws = 3, 3, 8000
    sums = np.sum([noise.integer_gaussian(rng, s2, draws) for _ in range(users)], axis=0)
    k = np.arange(-40, 41)

    def law(variance: float, parts: int) -> np.ndarray:
        one = np.exp(-(k**2) / (2 * variance))
        pmf = one / one.sum()
        out = pmf
        for _ in range(parts - 1):
            out = np.convolve(out, pmf)
        return out  # on -40·parts .. 40·parts

    support = np.arange(-40 * users, 40 * users + 1)

    def pvalue(pmf: np.ndarray) -> float:
        lo, hi = -7, 7  # pooled tails outside: expected counts >= 5 in every cell
        observed = [np.sum(sums < lo)] + [np.sum(sums == v) for v in range(lo, hi + 1)] + [np.sum(sums > hi)]
        expected = [pmf[support < lo].sum()] + [pmf[support == v].sum() for v in range(lo, hi + 1)] + [pmf[support > hi].sum()]
        expected = np.array(expected) / np.sum(expected) * draws
        assert expected.min() >= 5
        return stats.chisquare(observed, expected).pvalue

    assert pvalue(law(s2, users)) > 1e-3
    assert pvalue(law(1.25 * s2, users)) < 1e-3


@pytest.mark.parametrize("weakened", [False, True])
def test_collusion_attack_on_a_dp_run_sees_only_noise(test_mode, weakened):
    """Finding 2's attack against a dp: run (epsilon 1, delta 1e-6, 2 users, 1 colluder): the server
    subtracts the colluder's exact, noise-free gradient from the sum. What is left on the victim's
    coordinates is its gradient plus its own share, which must be N_Z(0, s²) (Kolmogorov–Smirnov on
    the 400 standardized residuals, false alarm 0.001) and from which no message is recovered. The
    weakened victim adds no share: its three messages come out exactly and the residual is 0."""
    rng = np.random.default_rng(9)
    x, y = block_of(9, 3)
    cx = [np.sort(rng.choice(D, 8, replace=False)) for _ in range(1000)]
    cy = rng.choice([-1, 1], 1000)
    calibrated = dp.calibrate(dp.DPParams(epsilon=1.0, delta=1e-6, colluders=1), 2, 1)
    server = P.Server(512, rng.normal(0, 0.01, D), 0.01, share_variance=0 if weakened else calibrated.share_variance)
    w_int = np.rint(np.ldexp(server.w, W_BITS)).astype(np.int64)
    victim = P.User("user-2", x, y, noise=None if weakened else calibrated.share(0))
    colluder = P.User("user-1", cx, cy)  # adds nothing
    colluder.noise_share = lambda layout: [0] * layout.dimension
    if not weakened:
        colluder.noise = calibrated.share(0)  # same layout as the victim's, no share
    inbox, channel = Inbox(server), W.Channel()
    Q.setup(inbox, [Q.Local(colluder), Q.Local(victim)], channel)
    Q.train_round(inbox, [Q.Local(colluder), Q.Local(victim)], channel, 0)
    total = summed(server)
    left = np.array(total, dtype=object) - contribution(cx, cy, w_int)
    residual = np.array([int(v) for v in left - contribution(x, y, w_int)], dtype=float)
    found = {features for features, _, _ in recover([int(v) for v in left], w_int)}
    if weakened:
        assert not residual.any() and found == {frozenset(xi.tolist()) for xi in x}
    else:
        z = residual / math.sqrt(calibrated.share_variance)
        assert stats.kstest(z, "norm").pvalue > 1e-3 and not found


def test_with_dp_every_message_costs_the_same_work():
    """Timing: with dp: each message is capped, then padded to exactly max_features feature indices,
    the padding pointing at an encryption of 0 (``protocol.PAD``). A user's step-2 work is then
    max_features multiplications per message in its block (a public count), whatever its mail's
    lengths; the round sums stay exact (tests/spam/test_neighbours_spam.py compares them with the rule)."""
    messages = [np.array([3]), np.arange(40), np.arange(0, 400, 3)]  # 1, 40 and 134 features
    user = P.User("user-1", messages, np.array([1, -1, 1]), noise={"share_variance": 2**40, "max_features": 50, "seed": 0})
    assert [len(x) for x in user._x] == [50, 50, 50]
    assert [x.count(P.PAD) for x in user._x] == [49, 10, 0]
    assert [sorted(j for j in x if j != P.PAD) for x in user._x[:2]] == [[3], list(range(40))]
    plain = P.User("user-1", messages, np.array([1, -1, 1]))  # without dp nothing is capped or padded
    assert [len(x) for x in plain._x] == [1, 40, 134]
