"""Exact samplers of core.noise: their laws (exact pmfs, fixed seeds, stated false-alarm rates), the
grid lemma's inequality, outputs on the grid, and OS randomness outside test mode."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from scipy.special import ndtr

from privrelease.core import noise, settings
from privrelease.core.errors import SpecError
from privrelease.core.mechanisms import dpne
from tests.support.helpers import planned_run

ALARM = 1e-3  # each statistical test below fails by chance with probability 0.001


def _chisquare(draws: np.ndarray, support: np.ndarray, weights: np.ndarray) -> float:
    """Chi-square p-value of integer draws against pmf ∝ weights on ``support`` (rest lumped in the end bins)."""
    clipped = np.clip(draws, support[0], support[-1])
    observed = np.array([(clipped == k).sum() for k in support])
    return float(stats.chisquare(observed, weights / weights.sum() * len(draws)).pvalue)


def _tail_weights(support: np.ndarray, weight, far: int) -> np.ndarray:
    """pmf weights on ``support`` with the end bins holding their whole tails (summed to ``far``)."""
    w = np.array([weight(k) for k in support], dtype=float)
    w[0] = sum(weight(k) for k in range(-far, int(support[0]) + 1))
    w[-1] = sum(weight(k) for k in range(int(support[-1]), far))
    return w


def test_uniform_words_and_exact_bernoulli_exp(test_mode):
    rng = noise.generator(1)
    draws = noise.below(rng, np.full(70_000, 7))
    assert stats.chisquare(np.bincount(draws, minlength=7)).pvalue > ALARM
    big = noise.below(rng, np.full(70_000, 3 * 2**61 + 1))  # rejection keeps a huge range unbiased too
    assert big.max() < 3 * 2**61 + 1 and stats.chisquare(np.bincount(big // 2**60, minlength=7)[:6]).pvalue > ALARM
    for num, den in [(0, 1), (1, 3), (1, 1), (5, 2), (7, 1)]:
        n = 40_000
        hits = noise.bernoulli_exp(rng, np.full(n, num), np.full(n, den)).sum()
        p = math.exp(-num / den)
        assert abs(hits - n * p) <= 3.29 * math.sqrt(n * p * (1 - p)) + 1e-9  # two-sided 0.001


def test_discrete_laplace_matches_its_exact_pmf(test_mode):
    t = 3
    draws = noise.discrete_laplace(noise.generator(2), t, 60_000)
    support = np.arange(-15, 16)
    assert _chisquare(draws, support, _tail_weights(support, lambda k: math.exp(-abs(k) / t), 400)) > ALARM


def test_discrete_gaussian_matches_its_exact_pmf(test_mode):
    s2 = 12  # t = 4, c = 3: the sampler's variance is exactly 12
    draws = noise.discrete_gaussian_units(noise.generator(3), s2, 60_000)
    support = np.arange(-12, 13)
    weights = _tail_weights(support, lambda k: math.exp(-k * k / (2 * s2)), 200)
    assert _chisquare(draws, support, weights) > ALARM
    # at the production scale (s >= 2^20) the law is the continuous one to within 1e-6 in KS distance
    sigma = 3.0
    unit = noise.grid(sigma)
    z = noise.gaussian(noise.generator(4), sigma, np.zeros(20_000, np.int64), unit)
    s = unit * math.sqrt(noise.gaussian_variance_units(sigma, unit))
    assert sigma <= s <= sigma * (1 + 2**-20)
    assert stats.kstest(z / s, "norm").pvalue > ALARM


def test_tail_sampler_is_the_same_law_conditioned_on_passing(test_mode):
    # small scale (unit 1, s2 = 12) for an exact pmf: k >= 5 with weight exp(-k^2 / 24)
    draws = noise.gaussian_tail(noise.generator(5), 3.0, 1.0, 4.0, 40_000).astype(int)
    assert draws.min() == 5
    support = np.arange(5, 16)
    w = np.array([math.exp(-k * k / 24) for k in support])
    w[-1] = sum(math.exp(-k * k / 24) for k in range(15, 200))
    assert _chisquare(draws, support, w) > ALARM
    # production scale against the truncated normal, and the pass probability it is paired with
    sigma, rho = 2.0, 7.0
    unit = noise.grid(sigma)
    tail = noise.gaussian_tail(noise.generator(6), sigma, unit, rho, 20_000)
    assert (tail > rho).all() and np.allclose(tail / unit, np.round(tail / unit), rtol=0, atol=0)
    s = unit * math.sqrt(noise.gaussian_variance_units(sigma, unit))
    assert stats.kstest(tail, stats.truncnorm(rho / s, np.inf, scale=s).cdf).pvalue > ALARM
    assert noise.tail_probability(sigma, unit, rho) == pytest.approx(stats.norm.sf(rho / s), rel=1e-5)


@pytest.mark.parametrize("s2", [1, 2, 5, 12, 40])
def test_grid_lemma_and_discrete_tail_bound_hold_pointwise(s2):
    """ln(r(k)/d(k)) lies in [-1/(8 s^2) - tau, k^2/(24 s^4) + tau] for the rounded Gaussian r and the
    discrete Gaussian d (the lemma of docs/mechanisms/noise.md), and P[Z >= n] <= P[N(0, s^2) >= n - 1] (DPNE's rho_1)."""
    s = math.sqrt(s2)
    k = np.arange(-6 * int(math.ceil(s)), 6 * int(math.ceil(s)) + 1)
    far = np.arange(-60 * int(math.ceil(s)), 60 * int(math.ceil(s)) + 1)
    d = np.exp(-(k**2) / (2 * s2)) / np.exp(-(far**2) / (2 * s2)).sum()
    r = ndtr((k + 0.5) / s) - ndtr((k - 0.5) / s)
    tau = 2 * sum(math.exp(-2 * math.pi**2 * s2 * n * n) for n in range(1, 5))
    log_ratio = np.log(r / d)
    assert (log_ratio >= -1 / (8 * s2) - tau - 1e-12).all()
    assert (log_ratio <= k**2 / (24 * s2**2) + tau + 1e-12).all()
    weights = np.exp(-(far**2) / (2 * s2)) / np.exp(-(far**2) / (2 * s2)).sum()
    for n in range(1, 6 * int(math.ceil(s))):
        assert weights[far >= n].sum() <= stats.norm.sf((n - 1) / s) + 1e-15


def test_outputs_carry_no_low_order_bits_of_the_input(test_mode):
    """Attack: two inputs that share their grid point but differ in low-order bits; the analyst guesses
    which one from the output's fractional part. On the grid the guess is a coin flip; the weakened
    variant (exact noise, but the true value not put on the grid first) gives the input away."""
    sigma = 1.5
    unit = noise.grid(sigma)
    inputs = np.array([10.0, 10.0 + unit / 3])  # same grid point, different low-order bits
    rng = noise.generator(7)
    secret = noise.below(rng, np.full(4000, 2))

    def guess(out: np.ndarray) -> np.ndarray:
        return (np.abs(np.mod(out - inputs[1], unit)) < 1e-9 * unit).astype(int)

    units = np.rint(inputs[secret] / unit).astype(np.int64)
    on_grid = noise.gaussian(rng, sigma, units, unit)
    assert np.array_equal(on_grid / unit, np.round(on_grid / unit))
    accuracy = (guess(on_grid) == secret).mean()
    assert abs(accuracy - 0.5) < 3.29 * math.sqrt(0.25 / len(secret))  # chance, two-sided 0.001
    weakened = inputs[secret] + noise.gaussian(rng, sigma, np.zeros(len(secret), np.int64), unit)
    assert (guess(weakened) == secret).mean() > 0.99


def test_dpne_publishes_weights_on_its_grids(test_mode):
    frame = pd.DataFrame({"user": range(600), "text": ["a b c"] * 400 + ["a b"] * 200})
    p = dpne.Params(user_column="user", text_column="text", epsilon=4.0, delta=1e-7, T=3, delta0=5, publish_weights=True)
    out = planned_run(dpne, frame, p, noise.generator(8))
    units = dpne.accounting(p).units
    assert len(out.data) >= 3
    for n, weight in zip(out.data["n"], out.data["noisy_weight"]):
        step = weight / units[n - 1]
        assert step == round(step)


def test_production_draws_come_from_the_operating_system(monkeypatch):
    monkeypatch.delenv(settings.TEST_MODE, raising=False)
    with pytest.raises(SpecError, match="only in test mode"):
        noise.generator(3)
    rng = noise.generator()  # any draw: it asserts where the words come from, not what they are
    calls = []

    def urandom(n: int) -> bytes:
        calls.append(n)
        return bytes(range(8)) * (n // 8)

    monkeypatch.setattr(noise.os, "urandom", urandom)
    assert list(noise.words(rng, 3)) == [int.from_bytes(bytes(range(8)), "little")] * 3 and calls == [24]


def test_python_integer_path_for_data_dependent_stds(test_mode):
    rng = noise.generator(9)
    draws = np.array([noise._scalar_laplace(rng, 3) for _ in range(20_000)])
    support = np.arange(-12, 13)
    assert _chisquare(draws, support, _tail_weights(support, lambda k: math.exp(-abs(k) / 3), 400)) > ALARM
    draws = np.array([noise._scalar_gaussian(rng, 10) for _ in range(20_000)])  # pmf ∝ exp(-k^2/20)
    support = np.arange(-10, 11)
    assert _chisquare(draws, support, _tail_weights(support, lambda k: math.exp(-k * k / 20), 200)) > ALARM
    hits = sum(noise._scalar_bernoulli_exp(rng, 7, 3) for _ in range(20_000))
    p = math.exp(-7 / 3)
    assert abs(hits - 20_000 * p) <= 3.29 * math.sqrt(20_000 * p * (1 - p))
    unit = noise.scalar_grid(2.0)  # a public grid from a lower bound on the std
    z = np.array([noise.exact_gaussian(rng, 7.0, 0, unit) for _ in range(3000)])
    assert stats.kstest(z / 7.0, "norm").pvalue > ALARM
    with pytest.raises(ValueError, match="std/unit"):
        noise.exact_gaussian(rng, 7.0, 0, noise.grid(7.0))  # only 2^20 steps: refused


def test_noise_below_the_lemmas_range_is_refused_with_the_bound():
    noise.check_shift(40.0, 1.0)  # at the bound: fine
    with pytest.raises(ValueError, match="below 1/40 of the sensitivity: lower epsilon or delta"):
        noise.check_shift(40.5, 1.0)
    with pytest.raises(ValueError, match="too small for the exact sampler"):
        noise.continuous_budget(1e-12, 1e-9, 10**4)


@pytest.mark.parametrize("rho_in_sigmas", [0.0, 1e-9, 1e-4, 0.5, 0.999, 1.001])
def test_tail_sampler_below_one_std_and_at_zero(test_mode, rho_in_sigmas):
    """Finding 1 of the privacy review: with rho_k = 0 (eta = 0.5) or tiny, the old proposal's j*j
    overflowed int64 and simulated zero-weight n-grams got weights around 10^6 sigma. The tail must
    be the same law as the bulk sampler's conditioned on passing, for every threshold >= 0."""
    sigma = 2.12
    unit = noise.grid(sigma)
    s = unit * math.sqrt(noise.gaussian_variance_units(sigma, unit))
    rho = rho_in_sigmas * sigma
    tail = noise.gaussian_tail(noise.generator(11), sigma, unit, rho, 4000)
    assert (tail > rho).all() and tail.max() < rho + 8 * s
    assert stats.kstest(tail, stats.truncnorm(rho / s, np.inf, scale=s).cdf).pvalue > ALARM
    bulk = noise.gaussian(noise.generator(12), sigma, np.zeros(40_000, np.int64), unit)
    passed = bulk[bulk > rho][:4000]  # the same law, conditioned on passing, drawn the slow way
    assert stats.ks_2samp(tail, passed).pvalue > ALARM


def test_tail_sampler_at_the_largest_std(test_mode):
    """s near 2^27.5 grid steps (the integer range's top): j^2 passes int64 and is split exactly."""
    unit = 1.0
    sigma = 2.0**27.4
    s = math.sqrt(noise.gaussian_variance_units(sigma, unit))
    for rho in (0.0, 2.0 * sigma, 30.0 * sigma):
        tail = noise.gaussian_tail(noise.generator(13), sigma, unit, rho, 2000)
        assert (tail > rho).all() and tail.max() < rho + 8 * s
        assert stats.kstest(tail, stats.truncnorm(rho / s, np.inf, scale=s).cdf).pvalue > ALARM


def test_bulk_sampler_draws_exactly_the_stated_variance(test_mode, monkeypatch):
    """Finding 2: ``gaussian`` must draw N_Z(0, s2) with s2 = gaussian_variance_units (what rho_1, the
    tail probability and the zero-weight simulation use), not a second rounding of it. Algorithm 3
    draws variance t*c with den = 2 t c, so the largest acceptance denominator tells the variance drawn."""
    dens: list[int] = []
    split = noise._bernoulli_exp_split

    def spy(rng, whole, frac, den):
        dens.append(int(np.asarray(den).reshape(-1)[0]) if np.size(den) else 0)
        return split(rng, whole, frac, den)

    monkeypatch.setattr(noise, "_bernoulli_exp_split", spy)
    wrong = []
    for sigma in np.geomspace(0.013, 977.0, 60):
        unit = noise.grid(float(sigma))
        dens.clear()
        noise.gaussian(noise.generator(14), float(sigma), np.zeros(64, np.int64), unit)
        stated = noise.gaussian_variance_units(float(sigma), unit)
        if max(dens) != 2 * stated:  # the Laplace step's dens are t ~ s and 1, far below 2 s2
            wrong.append(float(sigma))
    assert wrong == []


def test_discrete_gaussian_with_a_square_variance_has_that_variance(test_mode):
    """s2 = t^2 (half of the variances gaussian_variance_units returns): the old bulk sampler drew
    t(t+1) instead (20 for 16), which an exact-pmf test sees at small scale."""
    s2 = 16
    draws = noise.discrete_gaussian_units(noise.generator(15), s2, 60_000)
    support = np.arange(-14, 15)
    assert _chisquare(draws, support, _tail_weights(support, lambda k: math.exp(-k * k / (2 * s2)), 200)) > ALARM
    with pytest.raises(ValueError, match="not t"):
        noise.discrete_gaussian_units(noise.generator(15), 17, 10)  # neither t(t-1) nor t^2
