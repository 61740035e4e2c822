"""What a ``dp:`` spam training's users draw is what its plan declares: the contract test of their shares.

The plan's event is ``rounds`` compositions of one ``DistributedDiscreteGaussian`` (each honest user's
N_Z(0, s^2) per coordinate, summed), accounted as the Gaussian of its sum: the same filter parts, the same
dp-accounting event and the same ledger record as the plain Gaussian it declared before. The users get
that leaf in what ``dp.Noise.share`` hands them (as ``privrelease.core.spam.training`` hands it to each user's
process) and draw with it through ``privrelease.core.privacy.draws.shares``. Driving ``protocol.User`` in this
process (``parties.Local``) for a few rounds while every call is recorded:

* every leaf a user draws with is the plan's declared leaf (equal: share variance, parties, sensitivity);
* each user draws once per round, as many values as the model's dimension, for no more rounds than the
  plan composes;
* what ``draws.shares`` gives follows N_Z(0, s^2): on a small leaf, chi-square against the exact discrete
  Gaussian pmf; on the plan's leaf (s^2 >= 2^40, where N_Z's CDF is within 1/s of the normal's),
  Kolmogorov-Smirnov of the draws / s against N(0, 1); each at a false-alarm rate of 10^-3, fixed seeds.

Each check fails on a weakened variant kept here: a user handed the leaf with share variance + 1, a user
drawing twice a round, a sampler of share variance + 1 (small leaf) or 1.25 s^2 (the plan's leaf).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from dp_accounting.dp_event import GaussianDpEvent
from scipy import stats

from privrelease.core import noise
from privrelease.core.ledger.account import recorded
from privrelease.core.mechanisms import spam_training
from privrelease.core.privacy import accountant as acc
from privrelease.core.privacy import draws
from privrelease.core.privacy import events as ev
from privrelease.core.privacy.budget import Budget
from privrelease.core.spam import dp
from privrelease.core.spam import parties as Q
from privrelease.core.spam import protocol as P
from privrelease.core.spam import wire as W
from tests.attacks.test_spam_server import D, block_of
from tests.mechanisms.test_contract import DP_REQUESTS

ROUNDS, MESSAGES, N = 2, 3, 3000
SMALL = ev.DistributedDiscreteGaussian(3, 3, 1.0)  # shares small enough to test against the exact pmf


class Twice(P.User):
    """Weakened: adds two shares a round (twice the noise it declares)."""

    def noise_share(self, layout) -> list[int]:
        return [a + b for a, b in zip(super().noise_share(layout), super().noise_share(layout))]


def recorded_rounds(raw: dict, monkeypatch, user_class=P.User, leaf=None) -> tuple[list[list[tuple]], object]:
    """The ``draws.shares`` calls of a ``dp:`` training's users over ``ROUNDS`` in-process rounds, per round as
    (user, leaf, size), and the plan. ``leaf``: a weakened user-1 handed this leaf instead of the plan's."""
    spec = spam_training.Params.model_validate(raw)
    planned = spam_training.plan(spec)
    calibrated = dp.calibrate(spec.dp, len(spec.users), spec.rounds, spec.quorum)  # as core.spam.training does
    share = calibrated.share(spec.features.seed)  # what each user's process is built with
    calls: list[tuple] = []
    real = draws.shares
    monkeypatch.setattr(draws, "shares", lambda rng, lf, size: calls.append((drawing[-1], lf, size)) or real(rng, lf, size))
    drawing: list[str] = []
    users = []
    for k in range(len(spec.users)):
        x, y = block_of(k, MESSAGES)
        given = {**share, "leaf": leaf} if leaf is not None and k == 0 else share
        user = (user_class if k == 0 else P.User)(f"user-{k + 1}", x, y, noise=given, threshold=spec.quorum)
        own = user.noise_share
        user.noise_share = lambda layout, _own=own, _name=user.name: drawing.append(_name) or _own(layout)
        users.append(Q.Local(user))
    server = Q.Local(P.Server(512, np.zeros(D), 0.01, radius=spec.dp.radius, share_variance=calibrated.share_variance))
    channel = W.Channel()
    Q.setup(server, users, channel)
    rounds = []
    for r in range(ROUNDS):
        before = len(calls)
        Q.train_round(server, users, channel, r)
        rounds.append(calls[before:])
    return rounds, planned


def share_violations(raw: dict, monkeypatch, **weakened) -> list[str]:
    """Where the users' draws differ from the plan's event (empty: each user drew the declared leaf, once a
    round, one value per coordinate)."""
    rounds, planned = recorded_rounds(raw, monkeypatch, **weakened)
    declared = dict(ev.leaves(planned.cost.event))
    users = [f"user-{k + 1}" for k in range(len(raw["users"]))]
    found = [
        f"{u} drew with {lf!r}, which the plan does not declare" for calls in rounds for u, lf, _ in calls if lf not in declared
    ]
    for r, calls in enumerate(rounds):
        if sorted(u for u, _, _ in calls) != users:
            found.append(f"round {r}: drew {dict(Counter(u for u, _, _ in calls))} where each user draws once")
        found += [f"round {r}: {u} drew {size} values for a model of {D}" for u, _, size in calls if size != D]
    if found or any(len(rounds) > n for n in declared.values()):
        return found or [f"{len(rounds)} rounds drawn, the plan composes {declared}"]
    return []


def exact_pmf(share_variance: int, k: np.ndarray) -> np.ndarray:
    """N_Z(0, s^2) on ``k``: exp(-k^2 / 2s^2) normalized over +-40 s (the mass beyond is below 10^-340)."""
    reach = 40 * (math.isqrt(share_variance) + 1)
    support = np.arange(-reach, reach + 1)
    return np.exp(-(k**2) / (2 * share_variance)) / np.exp(-(support**2) / (2 * share_variance)).sum()


def law_violations(leaf: ev.DistributedDiscreteGaussian, sampler=None) -> list[str]:
    """Whether ``draws.shares`` (or ``sampler``, the weakened test's) gives N_Z(0, leaf.share_variance)."""
    z = np.array((sampler or draws.shares)(noise.generator(11), leaf, N), dtype=float)
    if leaf.share_variance >= dp.MIN_SHARE_VARIANCE:
        p = stats.kstest(z / math.sqrt(leaf.share_variance), "norm").pvalue
        return [] if p > 1e-3 else [f"{leaf!r}: its draws are not N_Z(0, s^2) (KS p = {p:.2g})"]
    lo, hi = -4, 4  # tails pooled: every cell expects at least 5 draws
    observed = [np.sum(z < lo)] + [np.sum(z == v) for v in range(lo, hi + 1)] + [np.sum(z > hi)]
    inner = exact_pmf(leaf.share_variance, np.arange(lo, hi + 1))
    tail = (1 - inner.sum()) / 2
    expected = np.array([tail, *inner, tail]) * N
    assert expected.min() >= 5
    p = stats.chisquare(observed, expected).pvalue
    return [] if p > 1e-3 else [f"{leaf!r}: its draws are not N_Z(0, s^2) (chi-square p = {p:.2g})"]


@pytest.mark.parametrize("raw", DP_REQUESTS["spam-filter-training"], ids=["colluder", "no-colluder"])
def test_each_user_draws_the_plans_leaf_once_a_round_per_coordinate(raw, monkeypatch, test_mode):
    assert share_violations(raw, monkeypatch) == []
    rounds, planned = recorded_rounds(raw, monkeypatch)
    (leaf, composed), *_ = ev.leaves(planned.cost.event)
    assert isinstance(leaf, ev.DistributedDiscreteGaussian) and composed == spam_training.Params.model_validate(raw).rounds
    assert {lf for calls in rounds for _, lf, _ in calls} == {leaf}  # drew, so the check above was not vacuous
    assert law_violations(leaf) == [] and law_violations(SMALL) == []


def test_a_share_that_leaves_its_plan_is_caught(monkeypatch, test_mode):
    """The weakened variants: a user handed the leaf with share variance + 1, a user drawing twice a round,
    and samplers wider than their leaf."""
    raw = DP_REQUESTS["spam-filter-training"][0]
    planned = spam_training.plan(spam_training.Params.model_validate(raw))
    (leaf, _), *_ = ev.leaves(planned.cost.event)
    off = replace(leaf, share_variance=leaf.share_variance + 1)
    with monkeypatch.context() as patch:
        found = share_violations(raw, patch, leaf=off)
    assert found == [f"user-1 drew with {off!r}, which the plan does not declare"] * ROUNDS
    with monkeypatch.context() as patch:
        assert share_violations(raw, patch, user_class=Twice) == [
            f"round {r}: drew {{'user-1': 2, 'user-2': 1}} where each user draws once" for r in range(ROUNDS)
        ]
    plus_one = lambda rng, lf, size: draws.shares(rng, replace(lf, share_variance=lf.share_variance + 1), size)  # noqa: E731
    assert "chi-square" in law_violations(SMALL, plus_one)[0]
    wide = lambda rng, lf, size: draws.shares(rng, replace(lf, share_variance=lf.share_variance * 5 // 4), size)  # noqa: E731
    assert "KS" in law_violations(leaf, wide)[0]


def test_the_leaf_is_accounted_as_the_gaussian_it_replaced():
    """Same filter parts, dp-accounting event, (epsilon, delta) and ledger record as the plain Gaussian of
    sigma = sqrt(parties * s^2) the plan declared before; its own JSON form round-trips."""
    n = dp.calibrate(dp.DPParams(epsilon=1.0, delta=1e-6), 3, 10)
    leaf, part = n.leaf, "round sums, distributed discrete Gaussian (at least 2 of 3 users add noise)"
    before = ev.times(ev.Gaussian(math.sqrt(2 * n.share_variance), n.l2, part=part), 10)
    assert (leaf.parties, leaf.sigma, leaf.part) == (2, n.sigma, part) and n.event() == ev.times(leaf, 10)
    assert acc.parts(n.event()) == acc.parts(before)
    assert leaf.to_dp_event() == GaussianDpEvent(noise_multiplier=n.sigma / n.l2)
    charged, old = ev.charge([n.event()], 1.0, 1e-6), ev.charge([before], 1.0, 1e-6)
    assert ev.stored(charged) == ev.stored(old) and ev.epsilon_delta(charged) == Budget(1.0, 1e-6)
    assert recorded(ev.stored(charged), Budget(1.0, 1e-6)) == old  # the ledger replays it as before
    assert ev.load(json.loads(json.dumps(ev.dump(charged)))) == charged  # s^2 past 2^64, exact
    assert n.share(7) == {"leaf": leaf, "max_features": 400, "seed": 7}
    with pytest.raises(ValueError, match="no single"):
        ev.epsilon_delta(leaf)
    for bad in ({"share_variance": 0}, {"parties": 1.5}, {"share_variance": True}, {"sensitivity": -1.0}):
        with pytest.raises(ValueError, match="DistributedDiscreteGaussian event needs"):
            replace(leaf, **bad)
