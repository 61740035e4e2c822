"""What each DP mechanism draws is what its charged plan declares: the contract test of the noise.

A run is handed the plan that was charged and draws through ``privrelease.core.privacy.draws`` with its leaves. For
every DP table mechanism (those whose example plans a DP cost) and each of its requests
(``tests/mechanisms/test_contract.py``'s example and further requests), bound as the registry binds them (the public
row count and the columns filled from the table, ``Declared``), the run is made under test mode with a
fixed seed, handed its plan, while every call to ``draws`` is recorded, and:

* every leaf drawn with is a leaf of the plan's event (equal: the same sigma, sensitivity, scale,
  epsilon, and for a smooth-sensitivity count the same declared bounds and grid of its data-dependent std),
  so the noise charged is the noise drawn;
* each leaf is drawn as often as the plan composes it (a global or smooth count once per count, a selection
  once per pick, each DPNE level once per level run);
* what ``draws`` gives for each leaf follows the leaf's law: 3000 draws against N(0, sigma^2) (a smooth
  count's at the least and at a larger std of its bounds), or the Laplace of its scale (Kolmogorov-Smirnov),
  a selection against permute-and-flip's exact probabilities (chi-square); each at a false-alarm rate of
  10^-3, with fixed seeds.

Each check fails on a weakened variant (a run that plans again with another epsilon and draws that plan's
sigma, one drawing once more than declared, a sampler wider than its leaf, a smooth std outside its bounds).
The spam users' shares are checked the same way in ``tests/spam/test_draws_spam.py``.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from privrelease.core import noise
from privrelease.core.mechanisms import MECHANISMS, REGISTRY, declared, dpne
from privrelease.core.mechanisms import outliers as o
from privrelease.core.mechanisms.outliers import sensitivity as sens
from privrelease.core.privacy import draws
from privrelease.core.privacy import events as ev
from privrelease.core.privacy.cost import DPCost
from tests.mechanisms.test_contract import DP_REQUESTS, EXAMPLES
from tests.mechanisms.test_outliers import _permute_and_flip, planted

N = 3000
QUALITY, SENSITIVITY = np.array([0, 2, 4, 5, 8]), 2
EM_CANDIDATES = (np.array([40, 1, 0, 3, 1, 90]), np.array([0, 0, 2, 2, 6, 7]), np.array([0, 2, 2, 6, 7, 7]), Fraction(9, 2))
RECORDED = ("values", "tail", "select", "exponential", "smooth")
LARGEST_TABLE = 2000  # a request for more rows runs on a table of this many (its row count bound to it)


def dp_table_mechanisms() -> list[str]:
    """Every registered table mechanism whose example plans a DP cost."""
    return sorted(n for n, m in REGISTRY.items() if isinstance(m.plan(m.Params.model_validate(EXAMPLES[n][1])).cost, DPCost))


def frame_for(name: str, raw: dict) -> pd.DataFrame:
    """The example's table; for outlier statistics a planted one of the request's rows (at most
    ``LARGEST_TABLE``) with as many columns as its subspaces need, or those its standardization scales."""
    if name != "outliers":
        return EXAMPLES[name][0]()
    frame = planted(min(raw.get("rows") or 120, LARGEST_TABLE))
    scaled = raw["standardize"].get("bounds", raw["standardize"]) if isinstance(raw["standardize"], dict) else None
    if scaled:
        return frame[list(scaled)]
    for i in range(len(frame.columns), raw.get("c", 1) + 1):  # c + 1 columns: more than one subspace of dimension c
        frame[f"x{i}"] = np.random.default_rng(i).normal(0, 1, len(frame))
    return frame


def bound(name: str, raw: dict, frame: pd.DataFrame):
    """The request's parameters as the registry binds them to ``frame``: its row count and, where left empty,
    its columns (``privrelease.core.release.spec.bind`` fills them from the registration)."""
    m, said = MECHANISMS[name], declared(MECHANISMS[name])
    raw = dict(raw)
    if said.ROWS_PARAM:
        raw[said.ROWS_PARAM] = len(frame)
    if said.COLUMNS_PARAM and raw.get(said.COLUMNS_PARAM) is None:
        raw[said.COLUMNS_PARAM] = list(frame.columns)
    return m.Params.model_validate(raw)


def cases() -> list[tuple[str, dict]]:
    """Every DP table mechanism's requests: its example and its further requests, none left out."""
    return [(name, raw) for name in dp_table_mechanisms() for raw in [EXAMPLES[name][1], *DP_REQUESTS.get(name, [])]]


def recorded_run(name: str, raw: dict, monkeypatch) -> tuple[list[tuple[str, object]], object, object]:
    """The run's draws as (function, leaf) in order, the plan it was handed (its charge's), and its result."""
    calls: list[tuple[str, object]] = []
    for fn in RECORDED:
        real = getattr(draws, fn)
        monkeypatch.setattr(draws, fn, lambda *a, _fn=fn, _real=real: calls.append((_fn, a[1])) or _real(*a))
    m = MECHANISMS[name]
    frame = frame_for(name, raw)
    params = bound(name, raw, frame)
    planned = m.plan(params)
    result = m.run(frame, params, planned, noise.generator(7))
    return calls, planned, result


def drawn_violations(name: str, raw: dict, monkeypatch) -> list[str]:
    """Where the run's draws differ from its plan's event (empty: every draw is of a declared leaf, as often)."""
    calls, planned, result = recorded_run(name, raw, monkeypatch)
    declared_ = Counter()
    for leaf, n in ev.leaves(planned.cost.event):
        declared_[leaf] += n
    found = [f"drew with {leaf!r}, which the plan does not declare" for _, leaf in calls if leaf not in declared_]
    made = Counter(leaf for fn, leaf in calls if fn != "tail")  # a level's tail is the same draw's zero-weight part
    if name == "dpne":  # each level run draws once with its level's leaf
        ran = sum(r is not None for r in result.privacy["rho"])
        expected = Counter(ev.each(planned.cost.event, dpne.LEVEL)[:ran])
    else:  # an aggregate quantile's Exponential leaf: one call draws every key, the plan composes the keys a neighbour touches
        expected = Counter({leaf: 1 if isinstance(leaf, ev.Exponential) else n for leaf, n in declared_.items()
                            if not isinstance(leaf, ev.EpsilonDelta)})  # fmt: skip
    if made != expected and not found:
        found.append(f"drew {dict(made)} where the plan composes {dict(expected)}")
    return found


def law_violations(leaf, sampler=None) -> list[str]:
    """Whether ``draws`` gives the leaf's law (``sampler`` stands in for ``draws.values`` in the weakened test)."""
    rng = noise.generator(11)
    values = sampler or draws.values
    if isinstance(leaf, ev.DiscreteGaussian):
        z = values(rng, leaf, np.zeros(N, np.int64), noise.grid(leaf.sigma)) / leaf.sigma
        p = stats.kstest(z, "norm").pvalue
        return [] if p > 1e-3 else [f"{leaf!r}: its draws are not N(0, sigma^2) (KS p = {p:.2g})"]
    if isinstance(leaf, ev.DiscreteLaplace):
        z = values(rng, leaf, np.zeros(N, np.int64), 1.0)
        p = stats.kstest(z, "laplace", args=(0, leaf.scale)).pvalue
        return [] if p > 1e-3 else [f"{leaf!r}: its draws are not Laplace(scale) (KS p = {p:.2g})"]
    if isinstance(leaf, ev.PermuteAndFlip):
        picks = np.bincount([draws.select(rng, leaf, QUALITY, SENSITIVITY) for _ in range(N)], minlength=len(QUALITY))
        exact = _permute_and_flip(QUALITY, float(noise.rate(leaf.epsilon, SENSITIVITY)))
        p = stats.chisquare(picks, exact * N).pvalue
        return [] if p > 1e-3 else [f"{leaf!r}: its picks are not permute-and-flip's (chi-square p = {p:.2g})"]
    if isinstance(leaf, ev.Exponential):  # over fixed candidates: the exponential mechanism's exact probabilities
        w, a, b, t = EM_CANDIDATES
        picks = np.bincount([k for k, _ in draws.exponential(rng, leaf, [EM_CANDIDATES] * N, SENSITIVITY)], minlength=len(w))
        r = float(noise.rate(leaf.epsilon, SENSITIVITY))
        score = -np.maximum(0, np.maximum(a - float(t), float(t) - b))
        exact = w * np.exp(r * (score - score.max()))
        p = stats.chisquare(picks[w > 0], (exact / exact.sum() * N)[w > 0]).pvalue
        return [] if p > 1e-3 else [f"{leaf!r}: its picks are not the exponential mechanism's (chi-square p = {p:.2g})"]
    if isinstance(leaf, ev.SmoothGaussian):  # its std is data: at the least its bounds allow, and at a larger one
        smooth = sampler or draws.smooth
        found = []
        for std in (leaf.low, min(leaf.high, 3 * leaf.low)):
            z = np.array([smooth(rng, leaf, std, 0) for _ in range(N)]) / std
            p = stats.kstest(z, "norm").pvalue
            found += [] if p > 1e-3 else [f"{leaf!r}: its draws at std {std:.4g} are not N(0, std^2) (KS p = {p:.2g})"]
        return found
    return [f"{leaf!r}: no law to check"]


@pytest.mark.parametrize(("name", "raw"), cases(), ids=lambda x: x if isinstance(x, str) else None)
def test_each_dp_mechanism_draws_what_its_plan_declares(name, raw, monkeypatch, test_mode):
    assert drawn_violations(name, raw, monkeypatch) == []
    calls, _, _ = recorded_run(name, raw, monkeypatch)
    assert calls  # it drew through draws, so the check above did not pass vacuously
    for leaf in {leaf for _, leaf in calls}:
        assert law_violations(leaf) == []


def test_the_cases_cover_every_dp_mechanism_and_every_kind_of_leaf_drawn():
    assert dp_table_mechanisms() == ["aggregate", "dpne", "outliers"]  # a new DP mechanism is in cases() by its example
    kinds = set()
    for name, raw in cases():
        frame = frame_for(name, raw)
        kinds |= {type(leaf) for leaf, _ in ev.leaves(MECHANISMS[name].plan(bound(name, raw, frame)).cost.event)}
    assert {ev.DiscreteGaussian, ev.DiscreteLaplace, ev.PermuteAndFlip, ev.Exponential, ev.SmoothGaussian} <= kinds
    # the smooth counts are among them: a count with noise: smooth, and auto ones that turn smooth on their N
    smooth = [raw for name, raw in cases() if name == "outliers" and any(isinstance(leaf, ev.SmoothGaussian) for leaf, _ in
              ev.leaves(o.plan(bound(name, raw, frame_for(name, raw))).cost.event))]  # fmt: skip
    assert any(raw.get("noise") == "smooth" for raw in smooth) and any(raw.get("noise", "auto") == "auto" for raw in smooth)


@pytest.mark.parametrize("name", ["aggregate", "dpne", "outliers"])
def test_a_run_that_plans_again_with_another_sigma_is_caught(name, monkeypatch, test_mode):
    """The weakened variant: a run that ignores the plan it is handed and plans its own, at another epsilon."""
    m = MECHANISMS[name]
    raw = {**EXAMPLES[name][1], "noise": "global"} if name == "outliers" else EXAMPLES[name][1]
    assert drawn_violations(name, raw, monkeypatch) == []
    real = m.run

    def replanned(frame, params, plan, rng):
        return real(frame, params, m.plan(params.model_copy(update={"epsilon": params.epsilon * 1.01})), rng)

    monkeypatch.setattr(m, "run", replanned)
    found = drawn_violations(name, raw, monkeypatch)
    assert found and all(f.endswith("which the plan does not declare") for f in found)


def test_a_run_of_a_plan_that_leaves_a_draw_open_draws_nothing(test_mode):
    """Unbound parameters (no public N, no columns) leave the counts' noise open: their run draws nothing."""
    frame = planted(120)
    for update in ({"rows": None}, {"columns": None}):
        params = o.Params.model_validate({**EXAMPLES["outliers"][1], **update})
        assert not any(
            isinstance(leaf, ev.DiscreteGaussian | ev.SmoothGaussian) for leaf, _ in ev.leaves(o.plan(params).cost.event)
        )
        with pytest.raises(ev.Undeclared, match="the plan declares no draw named 'outlier count"):
            o.run(frame, params, o.plan(params), noise.generator(7))


def test_a_draw_that_leaves_its_plan_is_caught(monkeypatch, test_mode):
    """The weakened variants: a run drawing with a leaf of another std, one selecting once more than its
    plan composes, a sampler wider than its leaf, and a smooth std outside its declared bounds."""
    raw = {**EXAMPLES["outliers"][1], "noise": "global"}
    leaf = sens.global_leaf(120, 3, 2, o.allocate(o.Params.model_validate(raw)))
    real_count = o.noisy_count
    with monkeypatch.context() as patch:
        wider = ev.Composed((ev.DiscreteGaussian(leaf.sigma * 1.01, leaf.sensitivity, part=sens.GLOBAL),))
        patch.setattr(o, "noisy_count", lambda z, s, params, a, event, rng, m: real_count(z, s, params, a, wider, rng, m))
        (found,) = drawn_violations("outliers", raw, patch)
        assert found.startswith("drew with DiscreteGaussian(sigma=") and found.endswith("which the plan does not declare")
    top = next(r for _, r in cases() if r.get("query") == "top_subspaces" and r.get("h") == 2)
    real = o.select_top
    with monkeypatch.context() as patch:
        patch.setattr(o, "select_top", lambda q, s, leaves, rng: real(q, s, leaves + leaves[:1], rng))
        assert drawn_violations("outliers", top, patch)[0].startswith("drew {")
    wide = lambda rng, leaf, units, unit: draws.values(rng, ev.DiscreteGaussian(leaf.sigma * 1.1, leaf.sensitivity), units, unit)  # noqa: E731
    assert law_violations(leaf, wide)[0].endswith(")") and "not N(0, sigma^2)" in law_violations(leaf, wide)[0]
    laplace = ev.DiscreteLaplace(1000, 3)
    assert (
        "not Laplace"
        in law_violations(laplace, lambda rng, lf, units, unit: draws.values(rng, ev.DiscreteLaplace(1200, 3), units, unit))[0]
    )
    # a smooth count drawn wider than the std it was given is not the leaf's law; a std beyond its bounds is refused
    smooth = sens.smooth_leaf(120, o.allocate(o.Params.model_validate({**raw, "noise": "smooth"})), 0.9, 1e-4)
    assert law_violations(smooth) == []
    wider_smooth = lambda rng, lf, std, units: draws.smooth(rng, lf, std * 1.5, units)  # noqa: E731
    assert "are not N(0, std^2)" in law_violations(smooth, wider_smooth)[0]
    with pytest.raises(ValueError, match="outside the"):
        draws.smooth(noise.generator(1), smooth, smooth.low / 2, 0)
    # a selection drawn at another epsilon than its leaf's is not the leaf's law
    real_select = draws.select
    monkeypatch.setattr(draws, "select", lambda rng, lf, q, s: real_select(rng, ev.PermuteAndFlip(lf.epsilon * 3), q, s))
    assert "not permute-and-flip" in law_violations(ev.PermuteAndFlip(1.0))[0]
    # an exponential-mechanism draw at another epsilon than its leaf's is not the leaf's law
    real_em = draws.exponential
    monkeypatch.setattr(draws, "exponential", lambda rng, lf, c, s: real_em(rng, ev.Exponential(lf.epsilon * 3), c, s))
    assert "not the exponential mechanism's" in law_violations(ev.Exponential(1.0))[0]
