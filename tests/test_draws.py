"""What each DP mechanism draws is what its plan declares: the contract test of the noise.

Every draw goes through ``core.privacy.draws`` with a leaf. For each DP table mechanism's example and
its further requests (``tests/test_contract.py``; those whose plan states the numbers its noise turns
on), the run is made under test mode with a fixed seed while every call is recorded, and:

* every leaf drawn with is a leaf of the plan's event (equal: the same sigma, sensitivity, scale,
  epsilon), so the noise charged is the noise drawn;
* each leaf is drawn as often as the plan composes it (a global count once per count, a selection
  once per pick, each DPNE level once per level run);
* what ``draws`` gives for each leaf follows the leaf's law: 3000 draws against N(0, sigma^2) or the
  Laplace of its scale (Kolmogorov-Smirnov), a selection against permute-and-flip's exact
  probabilities (chi-square); each at a false-alarm rate of 10^-3, with fixed seeds.

Each check fails on a weakened variant (a run drawing with a leaf its plan does not declare, one
drawing once more than declared, a sampler wider than its leaf).
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from core import noise
from core.mechanisms import MECHANISMS, dpne
from core.mechanisms import outliers as o
from core.mechanisms import outliers_sensitivity as sens
from core.privacy import draws
from core.privacy import events as ev
from tests.test_contract import DP_REQUESTS, EXAMPLES
from tests.test_outliers import _permute_and_flip, planted

N = 3000
QUALITY, SENSITIVITY = np.array([0, 2, 4, 5, 8]), 2
EM_CANDIDATES = (np.array([40, 1, 0, 3, 1, 90]), np.array([0, 0, 2, 2, 6, 7]), np.array([0, 2, 2, 6, 7, 7]), Fraction(9, 2))


def cases() -> list[tuple[str, dict]]:
    """The DP table mechanisms' requests whose plan states what their noise turns on (N, the columns of a
    private standardization), on tables small enough to run here."""
    out = []
    for name in ("dpne", "outliers", "aggregate"):
        for raw in [EXAMPLES[name][1], *DP_REQUESTS.get(name, [])]:
            private = isinstance(raw.get("standardize"), dict) and "bounds" in raw["standardize"]
            if name == "outliers" and (
                raw.get("rows") is None
                or raw["rows"] > 10_000
                or (private and not raw.get("columns"))
                or (raw.get("query") == "count" and not raw.get("columns"))
            ):
                continue
            out.append((name, raw))
    return out


def frame_for(name: str, raw: dict):
    return planted(raw["rows"]) if name == "outliers" else EXAMPLES[name][0]()


def recorded_run(name: str, raw: dict, monkeypatch) -> tuple[list[tuple[str, object]], object, object]:
    """The run's draws as (function, leaf) in order, its plan, and its result."""
    calls: list[tuple[str, object]] = []
    for fn in ("values", "tail", "select", "exponential"):
        real = getattr(draws, fn)
        monkeypatch.setattr(draws, fn, lambda *a, _fn=fn, _real=real: calls.append((_fn, a[1])) or _real(*a))
    m = MECHANISMS[name]
    params = m.Params.model_validate(raw)
    result = m.run(frame_for(name, raw), params, noise.generator(7))
    return calls, m.plan(params), result


def drawn_violations(name: str, raw: dict, monkeypatch) -> list[str]:
    """Where the run's draws differ from its plan's event (empty: every draw is of a declared leaf, as often)."""
    calls, planned, result = recorded_run(name, raw, monkeypatch)
    declared = Counter()
    for leaf, n in ev.leaves(planned.cost.event):
        declared[leaf] += n
    found = [f"drew with {leaf!r}, which the plan does not declare" for _, leaf in calls if leaf not in declared]
    made = Counter(leaf for fn, leaf in calls if fn != "tail")  # a level's tail is the same draw's zero-weight part
    if name == "dpne":  # each level run draws once with its level's leaf
        ran = sum(r is not None for r in result.privacy["rho"])
        expected = Counter(ev.each(planned.cost.event, dpne.LEVEL)[:ran])
    else:  # an aggregate quantile's Exponential leaf: one call draws every key, the plan composes the keys a neighbour touches
        expected = Counter({leaf: 1 if isinstance(leaf, ev.Exponential) else n for leaf, n in declared.items()
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
    return [f"{leaf!r}: no law to check"]


@pytest.mark.parametrize(("name", "raw"), cases(), ids=lambda x: x if isinstance(x, str) else None)
def test_each_dp_mechanism_draws_what_its_plan_declares(name, raw, monkeypatch, test_mode):
    assert drawn_violations(name, raw, monkeypatch) == []
    calls, _, _ = recorded_run(name, raw, monkeypatch)
    assert calls  # it drew through draws, so the check above did not pass vacuously
    for leaf in {leaf for _, leaf in calls}:
        assert law_violations(leaf) == []


def test_the_cases_cover_every_kind_of_leaf_drawn():
    kinds = set()
    for name, raw in cases():
        m = MECHANISMS[name]
        kinds |= {type(leaf) for leaf, _ in ev.leaves(m.plan(m.Params.model_validate(raw)).cost.event)}
    assert {ev.DiscreteGaussian, ev.DiscreteLaplace, ev.PermuteAndFlip, ev.Exponential} <= kinds
    assert {name for name, _ in cases()} == {"dpne", "outliers", "aggregate"}  # every DP table mechanism


def test_a_draw_that_leaves_its_plan_is_caught(monkeypatch, test_mode):
    """The weakened variants: a run drawing with a leaf of another std, one selecting once more than its
    plan composes, and a sampler wider than its leaf."""
    raw = {**EXAMPLES["outliers"][1], "noise": "global"}
    params = o.Params.model_validate(raw)
    leaf = sens.global_leaf(120, 3, 2, o.allocate(params))
    with monkeypatch.context() as patch:
        patch.setattr(
            o, "declared", lambda p: ev.Composed((ev.DiscreteGaussian(leaf.sigma * 1.01, leaf.sensitivity, part=sens.GLOBAL),))
        )
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
    # a selection drawn at another epsilon than its leaf's is not the leaf's law
    real_select = draws.select
    monkeypatch.setattr(draws, "select", lambda rng, lf, q, s: real_select(rng, ev.PermuteAndFlip(lf.epsilon * 3), q, s))
    assert "not permute-and-flip" in law_violations(ev.PermuteAndFlip(1.0))[0]
    # an exponential-mechanism draw at another epsilon than its leaf's is not the leaf's law
    real_em = draws.exponential
    monkeypatch.setattr(draws, "exponential", lambda rng, lf, c, s: real_em(rng, ev.Exponential(lf.epsilon * 3), c, s))
    assert "not the exponential mechanism's" in law_violations(ev.Exponential(1.0))[0]
