"""The accountant: events, the admission filter and the PLD report, against closed forms and dp-accounting."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import ComposedDpEvent, GaussianDpEvent, LaplaceDpEvent, SelfComposedDpEvent
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon as rdp_epsilon
from scipy import special

from privrelease.core import normal
from privrelease.core.mechanisms import dpne, outliers
from privrelease.core.privacy import accountant as acc
from privrelease.core.privacy import events as ev
from privrelease.core.privacy import pld
from privrelease.core.privacy.budget import Budget, gaussian_epsilon, gaussian_sigma

SIGMA_1 = gaussian_sigma(1.0, 1e-6)  # one Gaussian release at (1, 1e-6), sensitivity 1
D = pld.DISCRETIZATION


def dp_accounting_epsilon(event, delta: float) -> float:
    a = PLDAccountant(value_discretization_interval=D)
    a.compose(event)
    return a.get_epsilon(delta)


# -- the table: basic versus tight (PLD at the basic delta) -----------------------------------


@pytest.mark.parametrize("n,expected", [(10, 3.14), (50, 7.40)])
def test_gaussian_releases_compose_to_the_closed_form(n, expected):
    events = [(ev.Gaussian(SIGMA_1), 1)] * n
    delta = n * 1e-6
    tight = pld.epsilon(events, delta)
    exact = gaussian_epsilon(SIGMA_1 / math.sqrt(n), delta)  # GDP: mu^2 adds up, then the exact conversion
    assert exact <= tight <= exact + 1e-3  # pessimistic, within the discretization
    assert tight == pytest.approx(expected, abs=0.005)
    assert tight == pytest.approx(dp_accounting_epsilon(SelfComposedDpEvent(GaussianDpEvent(SIGMA_1), n), delta), abs=D)
    assert acc.gdp_mu(events) == pytest.approx(math.sqrt(n) / SIGMA_1, rel=1e-12)


def test_laplace_and_gaussian_mixed():
    sigma = gaussian_sigma(0.1, 1e-7)
    events = [(ev.Laplace(10.0, 1.0), 25), (ev.Gaussian(sigma), 25)]
    tight = pld.epsilon(events, 25 * 1e-7)
    assert tight == pytest.approx(2.05, abs=0.005) and tight < 5.0
    reference = ComposedDpEvent([SelfComposedDpEvent(LaplaceDpEvent(10.0), 25), SelfComposedDpEvent(GaussianDpEvent(sigma), 25)])
    assert tight == pytest.approx(dp_accounting_epsilon(reference, 25 * 1e-7), abs=2 * D)
    assert acc.gdp_mu(events) is None  # not all Gaussian


def test_releases_known_only_by_epsilon_delta_gain_nothing():
    tight = pld.epsilon([(ev.EpsilonDelta(1.0, 1e-6), 50)], 50 * 1e-6)
    assert 49.98 <= tight <= 50.0


def test_pld_cache_returns_what_it_computed(tmp_path):
    events = [(ev.Gaussian(SIGMA_1), 10)]
    first = pld.cached_epsilon(events, 1e-5, tmp_path)
    assert (tmp_path / pld.CACHE_NAME).is_file()
    (tmp_path / pld.CACHE_NAME).write_text((tmp_path / pld.CACHE_NAME).read_text().replace(repr(first), "1.5"))
    assert pld.cached_epsilon(events, 1e-5, tmp_path) == 1.5  # read back, not recomputed
    assert first == pld.epsilon(events, 1e-5)
    # the Gaussians are composed exactly as one (GDP), so their grouping does not matter
    assert pld.epsilon([(ev.Gaussian(SIGMA_1), 1)] * 10, 1e-5) == pytest.approx(first, abs=1e-9)


# -- conversions to zCDP --------------------------------------------------------------------------------


def test_rho_of_each_kind_of_leaf():
    assert ev.Gaussian(2.0, sensitivity=3.0).rho(4) == pytest.approx(4 * 9 / 8)
    assert ev.DistributedDiscreteGaussian(1, 4, 3.0).rho(4) == pytest.approx(4 * 9 / 8)  # the Gaussian of its sum
    assert ev.Laplace(5.0, 1.0).rho(2) == pytest.approx(2 * 0.2**2 / 2)
    assert ev.PermuteAndFlip(0.3).rho(3) == pytest.approx(3 * 0.09 / 2)
    assert ev.Exponential(0.4).rho() == pytest.approx(0.16 / 8)  # bounded range
    assert ev.EpsilonDelta(1.0, 1e-6).rho() is None and ev.SmoothGaussian(1.0, 1e-6, 1.0, 2.0, 1e-12).rho() is None
    with pytest.raises(ValueError):
        ev.Gaussian(0.0)


def test_renyi_budget_is_dp_accountings_conversion():
    """At the largest admissible rho, dp-accounting's RDP-to-DP conversion at the filter's order
    and delta lands exactly on the cap's epsilon (Canonne-Kamath-Steinke, Prop. 12)."""
    f = acc.Filter.of(Budget(5.0, 1e-5))
    assert float(f.delta_conv) == pytest.approx(1e-6) and float(f.delta_room) == pytest.approx(9e-6)
    rho = f.k / f.alpha
    eps, order = rdp_epsilon([f.alpha], [f.alpha * rho], float(f.delta_conv))
    assert eps == pytest.approx(5.0, rel=1e-8) and eps <= 5.0
    # the order is the best on its grid for a pure-Gaussian history: no other admits more rho
    for a in (2.0, 4.0, 8.0, 16.0):
        assert acc.renyi_budget(5.0, 1e-6, a) / a <= rho * (1 + 1e-6)


# -- the filter -----------------------------------------------------------------------------------------


def dpne_spend(eps: float = 1.0, delta: float = 1e-6, i: int = 0) -> acc.Spend:
    plan = dpne.plan(dpne.Params(user_column="u", text_column="t", epsilon=eps, delta=delta))
    return acc.Spend.of(f"r{i}", plan.cost.event)


def admitted(f: acc.Filter, spend: acc.Spend) -> int:
    history = []
    while (decision := f.admit(history, spend))[0].admitted:
        history.append(decision[1])
    return len(history)


def test_dpne_at_1_and_1e6_fits_more_than_twice_as_often():
    f = acc.Filter.of(Budget(5.0, 1e-5))
    s = dpne_spend()
    assert [type(leaf) for leaf, _ in s.parts] == [ev.DiscreteGaussian, ev.EpsilonDelta, ev.EpsilonDelta]
    n = admitted(f, s)
    assert n >= 10 and n == acc.fits_more(f, [], s)
    # closed form: the Rényi budget over one release's cost, and the delta room over its new-item delta
    (level, levels), _, (slack, _) = s.parts
    sigma_star = level.sigma / math.sqrt(levels)
    cost = f.alpha / (2 * sigma_star**2) + slack.epsilon
    assert n == min(math.floor(f.k / (cost * (1 + acc.SLACK))), math.floor(9e-6 / 5e-7 + 1e-9))
    basic = 5  # 5 x epsilon 1
    assert n >= 2 * basic
    # what the filter certifies for the n releases is within the cap, and never below the tight PLD figure
    history = [s] * n
    certified = f.spent_epsilon(history)
    tight = pld.epsilon([p for x in history for p in x.parts], 1e-5)
    assert tight <= certified <= 5.0


def test_filter_refuses_exactly_at_the_cap():
    """Gaussian releases of rho = K / (10 alpha): exactly 10 fit, the 11th is refused, though
    basic composition of their (1, 1e-7) charges would have admitted 5."""
    f = acc.Filter.of(Budget(5.0, 1e-5))
    rho = f.k / (10 * f.alpha) * (1 - 1e-6)
    s = acc.Spend("g", Budget(1.0, 1e-7), ev.Gaussian(1 / math.sqrt(2 * rho)))
    assert admitted(f, s) == 10
    d = f.check([s] * 11)
    assert not d.admitted and d.renyi_used > f.k
    assert f.check([s] * 10).region == "renyi"
    assert admitted(f, acc.Spend("b", Budget(1.0, 1e-7), None)) == 5  # the same charges without events


def test_basic_region_keeps_exact_arithmetic_for_pure_caps():
    f = acc.Filter.of(Budget(1.0, 0.0))
    assert f.alpha is None
    assert admitted(f, acc.Spend("p", Budget(0.1, 0.0), None)) == 10  # 10 x 0.1 is exactly 1 as decimals
    assert admitted(f, dpne_spend()) == 0  # a Gaussian needs delta


def test_pure_parts_take_the_cheaper_of_linear_and_renyi():
    f = acc.Filter.of(Budget(5.0, 1e-5))
    small, large = ev.PermuteAndFlip(0.01), ev.PermuteAndFlip(2.0)
    assert acc.part_cost(small, 1, f.alpha) == pytest.approx(f.alpha * 0.01**2 / 2)
    assert acc.part_cost(large, 1, f.alpha) == pytest.approx(2.0)


def test_outlier_plans_state_their_parts():
    p = outliers.Params(
        query="top_subspaces",
        k=5,
        r=1.0,
        epsilon=1.0,
        delta=1e-6,
        h=2,
        c=1,
        columns=["a", "b"],
        standardize={"bounds": {"a": [0, 1], "b": [0, 1]}, "share": 0.1},
    )
    events = acc.parts(outliers.plan(p).cost.event)
    kinds = [type(leaf) for leaf, _ in events]
    # N undeclared: global or smooth noise is open (no run draws it), so each count is one (eps, delta) part
    assert kinds == [ev.DiscreteGaussian, ev.EpsilonDelta, ev.PermuteAndFlip, ev.EpsilonDelta]
    bound = acc.parts(outliers.plan(p.model_copy(update={"rows": 10_000})).cost.event)  # N declared: global noise
    assert [type(leaf) for leaf, _ in bound] == [
        ev.DiscreteGaussian,
        ev.EpsilonDelta,
        ev.PermuteAndFlip,
        ev.DiscreteGaussian,
        ev.EpsilonDelta,
    ]
    assert (bound[3][1], bound[3][0].sensitivity, bound[4]) == (2, outliers.gs_upper(10_000, 5, 1), (ev.sampler_slack(2), 1))
    pure = sum(n * leaf.pure_epsilon() for leaf, n in events if leaf.pure_epsilon() is not None)
    eps = sum(n * leaf.epsilon for leaf, n in events if isinstance(leaf, ev.EpsilonDelta))
    assert pure + eps <= 1.0 * 0.9 + 1e-6  # the standardization's Gaussian has the other tenth
    gauss, _ = events[0]
    assert gaussian_epsilon(gauss.sigma / gauss.sensitivity, 1e-7 - 4 * 2 * 2.8e-87) <= 0.1  # within its share


def test_a_release_gaining_little_from_its_curve_is_counted_by_its_charge():
    """A count with a private standardization: its Gaussian is a tenth of it; by its events it would
    take a third of the Rényi budget, by its charge a fifth of the cap, so it is counted by its
    charge and the exact basic region stays open: as many fit as basic composition admits."""
    f = acc.Filter.of(Budget(5.0, 1e-5))
    p = outliers.Params(columns=["a"], k=5, r=1.0, epsilon=1.0, delta=1e-6, standardize={"bounds": {"a": [0, 1]}})
    s = acc.Spend.of("c", outliers.plan(p).cost.event)
    assert s.gaussian and f.mode(s) == acc.CHARGE and f.mode(dpne_spend()) == acc.EVENTS
    assert admitted(f, s) == 5
    decision, counted = f.admit([], s)
    assert decision.region == "basic" and counted.parts == ((ev.EpsilonDelta(1.0, 1e-6, part="charge"), 1),)
    assert counted.curve == s.recorded  # the reported PLD still uses the mechanism's own curve


def test_a_coarser_grid_for_long_histories_stays_pessimistic():
    assert pld.discretization(10.0) == D and pld.discretization(500.0) == pytest.approx(10 * D)
    events = [(ev.Gaussian(SIGMA_1), 100)]
    exact = gaussian_epsilon(SIGMA_1 / math.sqrt(100), 1e-4)
    coarse = pld.epsilon(events, 1e-4, pld.discretization(100.0))
    assert exact <= pld.epsilon(events, 1e-4) <= coarse <= exact + 100 * pld.discretization(100.0)


def _workloads() -> dict[str, acc.Spend]:
    count = outliers.Params(k=5, r=1.0, epsilon=0.5, delta=1e-6, standardize=False)
    top = outliers.Params(query="top_subspaces", k=5, r=1.0, epsilon=1.0, delta=1e-6, h=3, c=1, standardize=False)
    private = outliers.Params(columns=["a"], k=5, r=1.0, epsilon=1.0, delta=1e-6, standardize={"bounds": {"a": [0, 1]}})
    return {
        "dpne": dpne_spend(),
        "dpne-small": dpne_spend(0.3, 1e-7),
        "count": acc.Spend.of("c", outliers.plan(count).cost.event),
        "top": acc.Spend.of("t", outliers.plan(top).cost.event),
        "private": acc.Spend.of("p", outliers.plan(private).cost.event),
        "legacy": acc.Spend("l", Budget(0.7, 2e-7), None),
    }


@pytest.mark.parametrize("name", sorted(_workloads()))
def test_what_fits_is_what_is_admitted_and_never_below_the_tight_figure(name):
    """``fits_more`` (what totals report) counts exactly the releases admitted one by one; the filter
    never admits fewer than basic composition within its delta room; what it certifies is at most the
    cap and never below the PLD figure of the same history."""
    f = acc.Filter.of(Budget(5.0, 1e-5))
    s = _workloads()[name]
    history = []
    for _ in range(2):
        history.append(f.admit(history, s)[1])
    expected = acc.fits_more(f, history, history[-1])
    assert admitted_after(f, history, s) == expected
    full = history + [f.admit(history, s)[1]] * expected
    by_basic = min(math.floor(5.0 / s.budget.epsilon + 1e-9), math.floor(9e-6 / s.budget.delta + 1e-9))
    assert len(full) >= by_basic
    certified = f.spent_epsilon(full)
    tight = pld.epsilon([e for x in full for e in x.curve], 1e-5)
    assert tight <= certified + 1e-9 and certified <= 5.0 + 1e-9


@pytest.mark.parametrize("cap", [Budget(5.0, 1e-5), Budget(3.0, 0.0)])
def test_a_histories_sums_decide_as_the_history_itself(cap):
    """``Filter.sums`` (a history read once, as the budget line's bisection reads it for its 41 candidates): a
    candidate admitted onto the sums gets the very decision, to the bit, as onto the history, at every length of a
    mixed history (what the filter admitted, Gaussian and not) until the cap refuses."""
    f = acc.Filter.of(cap)
    kinds = list(_workloads().values()) + [acc.Spend("p", Budget(0.4, 0.0), ev.PermuteAndFlip(0.4))]
    history: list[acc.Spend] = []
    decisions = []
    for i in range(40):
        candidate = kinds[(3 * i + i // 7) % len(kinds)]
        whole, counted = f.admit(history, candidate)
        assert f.admit(f.sums(history), candidate) == (whole, counted), i
        assert f.check(history + [counted]) == whole and f.decide(f.sums(history + [counted])) == whole
        decisions.append(whole.admitted)
        if whole.admitted:
            history.append(counted)
    assert True in decisions and False in decisions  # the cap was reached on the way


def admitted_after(f: acc.Filter, history: list[acc.Spend], spend: acc.Spend) -> int:
    n, history = 0, list(history)
    while (decision := f.admit(history, spend))[0].admitted:
        history.append(decision[1])
        n += 1
    return n


def test_the_normal_cdf_without_scipy_matches_scipys_far_into_the_tail():
    """privrelease.core.normal's ndtr / log_ndtr (Cephes, then the asymptotic series below -37) against scipy.special, down to
    x = -1000; Gaussian sigmas and epsilons through them against the same conversion through scipy's (a log Phi
    taken as the log of erfc's value fails below -37, where that underflows)."""
    xs = np.concatenate([np.linspace(-36.9, 0, 3001), -np.logspace(-4, 3, 400), [-37.0, -37.0001, -40.0, -100.0]])
    for x in xs:
        assert normal.ndtr(x) == pytest.approx(float(special.ndtr(x)), rel=1e-12, abs=1e-300)
        assert normal.log_ndtr(x) == pytest.approx(float(special.log_ndtr(x)), rel=1e-13)

    def scipy_delta(eps: float, sigma: float) -> float:
        a = 1 / (2 * sigma)
        return float(special.ndtr(-eps * sigma + a) - math.exp(eps + special.log_ndtr(-eps * sigma - a)))

    for eps, delta in [(0.1, 1e-7), (1.0, 1e-6), (5.0, 1e-10), (40.0, 1e-12)]:
        sigma = gaussian_sigma(eps, delta)
        assert scipy_delta(eps, sigma) == pytest.approx(delta, rel=1e-9)
        assert gaussian_epsilon(sigma, delta) == pytest.approx(eps, rel=1e-9)
