"""privrelease.core.normal: the normal CDF and its inverse without scipy return scipy.special.ndtr's and ndtri's values bit for
bit, so DPNE's thresholds and pass probabilities, which a release publishes (its accuracy figures) and its ledger
entry records, did not move when scipy left. Weakened variants (accurate to 1e-15 but rounded otherwise) fail."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from scipy import special

from privrelease.core import noise, normal
from privrelease.core.mechanisms import dpne


def _probabilities() -> np.ndarray:
    """Every branch of Cephes' ndtri and its edges: the far tail (z >= 8), the near tail, the centre, the
    upper tail by reflection, subnormals, and the boundaries exp(-2), exp(-32), 1 - exp(-2)."""
    rng = np.random.default_rng(5)
    edges = [5e-324, 1e-310, 1e-300, math.exp(-32), np.nextafter(math.exp(-32), 1), math.exp(-2),
             np.nextafter(math.exp(-2), 0), np.nextafter(math.exp(-2), 1), 1 - math.exp(-2), 0.5, 0.375, 0.625,
             np.nextafter(1.0, 0)]  # fmt: skip
    return np.concatenate(
        [10 ** rng.uniform(-320, 0, 100_000), rng.uniform(0, 1, 100_000), 1 - 10 ** rng.uniform(-16, 0, 20_000), edges]
    )


def test_ndtri_is_scipys_bit_for_bit_from_the_far_tail_to_the_centre_and_back():
    p = _probabilities()
    assert np.array_equal(normal.ndtri(p), special.ndtri(p))
    assert normal.ndtri(p).dtype == np.float64


def test_a_merely_accurate_inverse_would_fail_the_bit_for_bit_check():
    """The weakened variants: the standard library's inverse (AS241, accurate to 1e-16 but another rounding) and
    Cephes' formulas with numpy's vectorized log differ from scipy in some last bits, which the check above sees."""
    p = _probabilities()[:20_000]
    stdlib = np.array([NormalDist().inv_cdf(x) for x in p])
    assert not np.array_equal(stdlib, special.ndtri(p))
    np.testing.assert_allclose(stdlib, special.ndtri(p), rtol=1e-15)  # close: only the last bits tell them apart


def test_ndtri_is_the_inverse_of_the_cdf_and_keeps_its_edges():
    p = np.concatenate([np.logspace(-300, -1, 500), np.linspace(0.01, 0.99, 99)])
    back = np.array([normal.ndtr(x) for x in normal.ndtri(p)])
    np.testing.assert_allclose(back, p, rtol=1e-11)  # Phi at x = -37 turns x's 1e-16 into x^2 1e-16 = 1.4e-13
    assert normal.ndtri(0.0) == -np.inf and normal.ndtri(1.0) == np.inf and normal.ndtri(0.5) == 0.0
    assert np.isnan(normal.ndtri([-0.1, 1.5, np.nan])).all()
    assert normal.ndtri(np.full((2, 3), 0.025)).shape == (2, 3)
    assert normal.ndtri(0.025) == pytest.approx(-1.959963984540054, rel=1e-15)


def _scipy_dpsu_threshold(sigma: float, cap: int, delta_part: float) -> float:
    t = np.arange(1, cap + 1, dtype=float)
    tail = -np.expm1(np.log1p(-delta_part) / t)
    return float(np.max(1 / np.sqrt(t) + sigma * -special.ndtri(tail)))


@pytest.mark.parametrize("cap", [1, 10, 100, 5000])
def test_dpne_thresholds_are_those_computed_with_scipy(cap):
    """rho_1 and rho_k, which a release publishes and its ledger records, to the last bit."""
    for sigma, delta in [(1.327904, 5e-8), (3.7, 1e-10), (0.05, 0.25)]:
        assert dpne.dpsu_threshold(sigma, cap, delta) == _scipy_dpsu_threshold(sigma, cap, delta)
    for eta, ratio in [(0.01, 0.3), (0.5, 1.0), (0.5, 2.0), (1e-200, 1e-200), (0.2, 1e-9)]:
        share = max(eta * min(1.0, ratio), 1e-300)
        assert dpne.level_threshold(2.5, eta, ratio, 1.0) == max(0.0, 2.5 * float(-special.ndtri(share)))


def _arguments() -> np.ndarray:
    """Every branch of Cephes' ndtr: erf's (|x| < sqrt 2), erfc's two (|x| / sqrt 2 below and above 8), the
    underflow (x < -37.7), both signs, and the edges."""
    rng = np.random.default_rng(6)
    edges = [0.0, -0.0, math.sqrt(2), -math.sqrt(2), np.nextafter(math.sqrt(2), 0), 8 * math.sqrt(2), -8 * math.sqrt(2),
             -37.5, -37.7, -38.5, -1e6, 1e6, np.inf, -np.inf]  # fmt: skip
    return np.concatenate([rng.normal(0, 3, 50_000), rng.uniform(-40, 40, 50_000), -(10 ** rng.uniform(-10, 2.6, 20_000)),
                           10 ** rng.uniform(-10, 2.6, 20_000), edges])  # fmt: skip


def test_ndtr_is_scipys_bit_for_bit_and_the_erfc_one_is_not():
    x = _arguments()
    assert np.array_equal([normal.ndtr(v) for v in x], special.ndtr(x))
    erfc_way = [0.5 * math.erfc(-v / math.sqrt(2)) for v in x]  # the weakened variant: glibc's erfc
    assert not np.array_equal(erfc_way, special.ndtr(x))


def test_the_zero_weight_candidates_pass_probability_is_scipys():
    for sigma, rho in [(1.0, 0.0), (3.3, 4.2), (10.0, 60.0), (0.7, 25.0), (2.0, 1e-3)]:
        unit = noise.grid(sigma)
        s2 = noise.gaussian_variance_units(sigma, unit)
        n0 = math.floor(rho / unit) + 1
        assert noise.tail_probability(sigma, unit, rho) == float(special.ndtr(-(n0 - 0.5) / math.sqrt(s2)))
