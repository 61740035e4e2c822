"""The accuracy a release states (``privrelease.core.privacy.accuracy``) against the noise it draws (``privrelease.core.noise``).

Statistical tests draw from the real samplers, vectorised, under fixed test seeds; each is an exact
binomial test at level 1e-3 (a correct claim fails it with probability at most 1e-3 per seed, and
the seeds are fixed, so the outcome is reproducible), with a control that a wrong claim fails.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from privrelease.core import noise
from privrelease.core.mechanisms import dpne
from privrelease.core.mechanisms.dpne import detection as dpne_accuracy
from privrelease.core.mechanisms.dpne.counts import unit_weights
from privrelease.core.privacy import accuracy, events

DRAWS = 20_000
LEVEL = 1e-3


def _z(rng, sigma: float, unit: float, n: int = DRAWS) -> np.ndarray:
    """n draws of the noise ``noise.gaussian`` adds for std sigma on ``unit`` (in value units)."""
    return noise.discrete_gaussian_units(rng, noise.gaussian_variance_units(sigma, unit), n) * unit


@pytest.mark.parametrize("sigma", [0.37, 51.458, 2_000.0])
def test_gaussian_intervals_cover_at_the_stated_rate(sigma, test_mode):
    """y ± 1.96 · sampler std covers the true value 95% of the time (two-sided: neither more nor less)."""
    unit = min(1.0, noise.grid(sigma))
    z = _z(noise.generator(1), sigma, unit)
    covered = int((np.abs(z) <= accuracy.Z95 * accuracy.sampler_std(sigma, unit)).sum())
    assert binomtest(covered, DRAWS, accuracy.LEVEL).pvalue > LEVEL, covered / DRAWS
    narrow = int((np.abs(z) <= 1.9 * accuracy.sampler_std(sigma, unit)).sum())  # control: a 94.3% interval
    assert binomtest(narrow, DRAWS, accuracy.LEVEL).pvalue < LEVEL


@pytest.mark.parametrize("true", [0, 3, 150, 299])
def test_clamped_rounded_count_intervals_cover_at_least_the_stated_rate(true, test_mode):
    """A published count clip(rint(q + Z), 0, N) with its interval cut to [0, N] still covers q at >= 95%,
    also next to the bounds, where clamping acts (one-sided test: coverage is not below 95%)."""
    n, gs = 300, 51.458
    unit = min(1.0, noise.grid(gs))
    published = np.clip(np.rint(true + _z(noise.generator(2 + true), gs, unit)), 0, n)
    half = accuracy.Z95 * accuracy.sampler_std(gs, unit)
    intervals = [accuracy.count_interval(float(p), half, n) for p in published]
    covered = sum(lo <= true <= hi for lo, hi in intervals)
    assert binomtest(covered, DRAWS, accuracy.LEVEL, alternative="less").pvalue > LEVEL, covered / DRAWS
    assert all(0 <= lo <= hi <= n for lo, hi in intervals)


def test_smooth_count_intervals_cover_with_the_released_std(test_mode):
    """Smooth noise: the std is data, released as exp(grid · (round(ln std / grid) + discrete Laplace)); the
    interval from that released std (``smooth_std_upper``, z = 2.05) covers q at >= 95%; the release's
    upper bound on the std holds at >= 99%."""
    rng = noise.generator(5)
    std, grid, t, n, al = 40.0, 2.0**-10, 300, 1000, 0.05
    log = grid * (round(math.log(std) / grid) + noise.discrete_laplace(rng, t, DRAWS))
    released = np.exp(log)
    upper = np.array([accuracy.smooth_std_upper(float(r), grid, t, n, al) for r in released])
    assert binomtest(int((upper >= std).sum()), DRAWS, 1 - accuracy.STD_MISS, alternative="less").pvalue > LEVEL
    published = np.clip(np.rint(500 + _z(rng, std, noise.grid(std))), 0, n)
    covered = sum(
        lo <= 500 <= hi
        for lo, hi in (accuracy.count_interval(float(p), accuracy.Z_SMOOTH * u, n) for p, u in zip(published, upper))
    )
    assert binomtest(covered, DRAWS, accuracy.LEVEL, alternative="less").pvalue > LEVEL
    # control: the released std itself, without the bound, is below the true one about half the time
    assert binomtest(int((released >= std).sum()), DRAWS, 1 - accuracy.STD_MISS, alternative="less").pvalue < LEVEL


def test_dpne_detection_table_matches_simulation(test_mode):
    """The detection probability of an n-gram held by m users against the mechanism's own ``threshold``
    (level 1 at rho_1; a level-2 threshold, where m = 0 is a spurious candidate's chance)."""
    params = dpne.Params(user_column="u", text_column="t", epsilon=1.0, delta=1e-6, T=2, delta0=4, eta=0.05)
    acc = dpne.accounting(params)
    rho_2 = dpne.level_threshold(acc.sigmas[1], params.eta, 10, 10)
    rng = noise.generator(8)
    leaves = events.each(dpne.plan(params).cost.event, dpne.LEVEL)  # each level's declared noise
    for k, rho, weight in ((1, acc.rho_1, 1), (1, acc.rho_1, 4), (2, rho_2, 1)):
        sigma, unit = leaves[k - 1].sigma, acc.units[k - 1]
        w = int(unit_weights(4, unit)[weight])
        table = dict(
            zip(
                *[
                    dpne_accuracy.levels(params, acc.sigmas, acc.units, acc.rho_1, [acc.rho_1, rho_2])[k - 1][x]
                    for x in ("holders", "p_weight_1" if weight == 1 else "p_weight_cap")
                ]
            )
        )
        middle = [m for m, p in table.items() if 0.05 < p < 0.95] + ([0] if k == 2 else [])
        assert middle, table
        for m in middle:
            stated = float(dpne_accuracy.detection(sigma, unit, rho, w, np.array([m]))[0])
            if m in table:
                assert stated == table[m]
            noisy, _ = dpne.threshold(rng, leaves[k - 1], unit, rho, np.full(DRAWS, m * w), 0)
            assert binomtest(int((noisy > rho).sum()), DRAWS, stated).pvalue > LEVEL, (k, weight, m, stated)
    assert binomtest(int((noisy > rho + sigma / 4).sum()), DRAWS, stated).pvalue < LEVEL  # control: a shifted threshold
    for weight in (1, 4):  # the preview's "users a word needs": the first m whose release probability is >= 1/2
        w = int(unit_weights(4, acc.units[0])[weight])
        m = dpne_accuracy.holders_needed(acc.units[0], acc.rho_1, w)
        p = dpne_accuracy.detection(acc.sigmas[0], acc.units[0], acc.rho_1, w, np.array([m - 1, m]))
        assert p[0] < 0.5 <= p[1]


def test_top_h_lead_probability_against_permute_and_flip(test_mode):
    """The stated chance that a subspace leading by Δ is chosen is exact when every other trails by exactly Δ,
    and a lower bound when they trail by more."""
    rng, draws, eps, sens, lead = noise.generator(4), 2500, 0.5, 7, 14
    stated = accuracy.lead_probability(eps, sens, lead, 4)
    found = {}
    for quality, exact in (([100, 86, 86, 86], True), ([100, 86, 72, 58], False)):
        q = np.array(quality)
        found[exact] = sum(noise.permute_and_flip(rng, q, noise.rate(eps, sens)) == 0 for _ in range(draws))
        assert binomtest(found[exact], draws, stated, alternative="two-sided" if exact else "less").pvalue > LEVEL
    assert binomtest(found[True], draws, stated + 0.05).pvalue < LEVEL  # control: a claim 5 points off is caught


def test_a_private_standardization_states_its_means_interval(test_mode):
    """The charged estimate of each column's mean carries its noise and a 95% interval that covers the mean
    of the clipped values at the stated rate (the mechanism's own ``standardized``, 1,000 runs, 2 columns)."""
    import pandas as pd

    from privrelease.core.mechanisms import outliers

    x = np.random.default_rng(0).uniform(0, 10, (400, 2))
    frame = pd.DataFrame(x, columns=["a", "b"])
    params = outliers.Params(
        query="count",
        columns=["a", "b"],
        k=3,
        r=0.5,
        epsilon=1.0,
        delta=1e-5,
        standardize={"bounds": {"a": [0, 10], "b": [0, 10]}, "share": 0.5},
    )
    rng, covered, narrow, runs = noise.generator(6), 0, 0, 1000
    for _ in range(runs):
        _, scaling = outliers.standardized(frame, ["a", "b"], params, outliers.plan(params).cost.event, rng)
        for i, c in enumerate("ab"):
            scale = scaling["scales"][c]
            lo, hi = scale["mean_noise"]["interval"]
            covered += lo <= x[:, i].mean() <= hi
            narrow += abs(scale["mean"] - x[:, i].mean()) <= 1.5 * scale["mean_noise"]["std"]
    assert binomtest(covered, 2 * runs, accuracy.LEVEL).pvalue > LEVEL, covered / (2 * runs)
    assert binomtest(narrow, 2 * runs, accuracy.LEVEL).pvalue < LEVEL  # control: an 87% interval is caught
    assert scaling["scales"]["a"]["mean_noise"]["family"] == "discrete Gaussian on the clipped sum"


def test_the_lead_probability_keeps_its_precision_at_long_leads():
    """Third privacy review, finding 7: (1 − (1 − p)^M)/(M p) was computed as 1 − 1 = 0 once p fell below
    the float's epsilon (the preview said 0.000 at a lead of 448). Its series is 1 − (M − 1)p/2 + O(p²)."""
    from fractions import Fraction

    for lead in (224, 448, 896, 2000):
        p = Fraction(math.exp(-float(noise.rate(0.5, 7)) * lead))  # the float p, exactly
        exact = float((1 - (1 - p) ** 50) / (50 * p))  # in rationals: no cancellation
        found = accuracy.lead_probability(0.5, 7, lead, 50)
        assert 0.99 < found <= 1.0 and found == pytest.approx(exact, rel=1e-13)
    weakened = (1 - (1 - 1e-17) ** 50) / (50 * 1e-17)  # the former expression, at such a p
    assert weakened == 0.0
    assert accuracy.lead_probability(0.0, 7, 0, 4) == pytest.approx(1 / 4)  # no lead, no preference: 1/M
