"""The typed privacy event: its tree, the (epsilon, delta) derived from it, dp-accounting's events, its
ledger form (old entries' flat parts included), the typed adjacency, and every DP plan declaring one."""

from __future__ import annotations

import math

import pytest
from dp_accounting.dp_event import (
    ComposedDpEvent,
    DiscreteLaplaceDpEvent,
    GaussianDpEvent,
    LaplaceDpEvent,
    SelfComposedDpEvent,
)
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

from privrelease.core.ledger import account, legacy
from privrelease.core.mechanisms import MECHANISMS
from privrelease.core.privacy import accountant as acc
from privrelease.core.privacy import adjacency as adj
from privrelease.core.privacy import events as ev
from privrelease.core.privacy import pld
from privrelease.core.privacy.budget import Budget
from privrelease.core.privacy.cost import DPCost
from tests.mechanisms.test_contract import DP_REQUESTS, EXAMPLES

TREE = ev.charge(
    [
        ev.times(ev.DiscreteGaussian(3.0, 1.0, part="levels"), 3),
        ev.EpsilonDelta(0.0, 5e-7, part="new"),
        ev.sampler_slack(20),
        ev.times(ev.PermuteAndFlip(0.25, part="top"), 2),
        ev.times(ev.DiscreteLaplace(40, 3, part="std"), 2),
    ],
    2.0,
    1e-6,
)


def test_leaves_check_their_figures_and_combinators_their_counts():
    for bad in (
        lambda: ev.Gaussian(0.0),
        lambda: ev.Laplace(-1.0),
        lambda: ev.EpsilonDelta(math.inf, 0.0),
        lambda: ev.PermuteAndFlip(math.nan),
        lambda: ev.SelfComposed(ev.Gaussian(1.0), 0),
    ):
        with pytest.raises(ValueError):
            bad()
    assert ev.times(ev.Gaussian(1.0), 1) == ev.Gaussian(1.0) and ev.times(ev.Gaussian(1.0), 2).count == 2


def test_the_charge_is_derived_from_the_event():
    assert ev.epsilon_delta(TREE) == Budget(2.0, 1e-6)  # a calibration states the pair its proof gives
    assert ev.epsilon_delta(ev.times(ev.EpsilonDelta(0.1, 1e-7), 10)) == Budget(1.0, 1e-6)  # exact decimals
    assert ev.epsilon_delta(ev.Composed((ev.times(ev.Laplace(10.0, 2.0), 3), ev.PermuteAndFlip(0.4)))) == Budget(1.0, 0.0)
    with pytest.raises(ValueError, match="no single"):  # a Gaussian outside a calibration has none
        ev.epsilon_delta(ev.Composed((ev.Gaussian(3.0), ev.EpsilonDelta(0.1, 0.0))))
    cost = DPCost(TREE, adj.ReplaceRecord())
    assert cost.budget == Budget(2.0, 1e-6) and cost.unit == "record" and cost.model == "(epsilon, delta)-differential privacy"
    assert DPCost(TREE, adj.AddRemoveUser("u")).model.startswith("user-level")
    with pytest.raises(ValueError, match="no single"):
        DPCost(ev.Gaussian(3.0), adj.ReplaceRecord())
    with pytest.raises(TypeError, match="needs a privacy event"):
        DPCost(None, adj.ReplaceRecord())  # type: ignore[arg-type]


def test_the_filter_counts_each_leaf_with_its_compositions():
    parts = acc.parts(TREE)
    kinds = [ev.DiscreteGaussian, ev.EpsilonDelta, ev.EpsilonDelta, ev.PermuteAndFlip, ev.DiscreteLaplace]
    assert [(type(leaf), n) for leaf, n in parts] == list(zip(kinds, [3, 1, 1, 2, 2]))
    assert parts[0] == (ev.DiscreteGaussian(3.0, 1.0, part="levels"), 3) and parts[2] == (ev.sampler_slack(20), 1)
    # each leaf answers for itself (one base): its rho over its compositions, its pure epsilon
    assert [leaf.rho(n) for leaf, n in parts] == [3 / 18, None, None, 2 * 0.25**2 / 2, 2 * (3 / 40) ** 2 / 2]
    assert [leaf.pure_epsilon() for leaf, _ in parts] == [None, None, None, 0.25, 3 / 40]
    assert ev.Exponential(0.4).rho(2) == 2 * 0.4**2 / 8  # bounded range
    assert acc.part_cost(*parts[0], 3.0) == 3.0 * 3 / 18 and acc.part_cost(*parts[1], 3.0) == 0.0
    assert acc.part_cost(ev.PermuteAndFlip(2.0), 1, 3.0) == 2.0  # a pure part: the smaller of eps and alpha rho
    spent = acc.Spend.of("r", TREE)
    assert spent == acc.Spend("r", Budget(2.0, 1e-6), ev.accounted(TREE)) and spent.recorded == parts == spent.parts
    assert acc.Spend.of("r", ev.EpsilonDelta(0.5, 1e-7)).event is None  # known only by its pair: its charge
    # a distributed discrete Gaussian and a smooth-sensitivity Gaussian are counted as what they are accounted as
    ddg, smooth = ev.DistributedDiscreteGaussian(4, 9, 2.0), ev.SmoothGaussian(0.5, 1e-6, 1.0, 2.0, 2**-40, part="count")
    assert acc.parts(ev.Composed((ddg, smooth))) == ((ev.Gaussian(6.0, 2.0), 1), (ev.EpsilonDelta(0.5, 1e-6, part="count"), 1))
    assert ev.find(TREE, "top") == ev.PermuteAndFlip(0.25, part="top")
    with pytest.raises(ev.Undeclared, match="the plan declares no draw named 'absent'"):  # a run builds no leaf of its own
        ev.find(TREE, "absent")
    assert ev.each(TREE, "levels") == [ev.DiscreteGaussian(3.0, 1.0, part="levels")] * 3


def test_to_dp_event_maps_to_dp_accountings_classes():
    assert ev.Gaussian(6.0, 2.0).to_dp_event() == GaussianDpEvent(noise_multiplier=3.0)
    assert ev.DiscreteGaussian(6.0, 2.0).to_dp_event() == GaussianDpEvent(noise_multiplier=3.0)  # with its slack part
    assert ev.Laplace(10.0, 2.0).to_dp_event() == LaplaceDpEvent(noise_multiplier=5.0)
    assert ev.DiscreteLaplace(40, 3).to_dp_event() == DiscreteLaplaceDpEvent(noise_parameter=1 / 40, sensitivity=3)
    composed = ev.Composed((ev.times(ev.Gaussian(2.0), 4), ev.Laplace(10.0)))
    assert composed.to_dp_event() == ComposedDpEvent([SelfComposedDpEvent(GaussianDpEvent(2.0), 4), LaplaceDpEvent(10.0)])
    assert ev.Calibrated(composed, 9.0, 1e-6).to_dp_event() == composed.to_dp_event()
    smooth = ev.SmoothGaussian(0.1, 1e-6, 1.0, 2.0, 2**-40)
    for leaf in (ev.PermuteAndFlip(0.1), ev.Exponential(0.1), ev.EpsilonDelta(0.1, 0.0), ev.DiscreteLaplace(4, 1.5), smooth):
        with pytest.raises(ev.NoDpEvent):
            leaf.to_dp_event()
    # the reported PLD figure, built from these events, is dp-accounting's own accountant's on them
    accountant = PLDAccountant(value_discretization_interval=pld.DISCRETIZATION)
    accountant.compose(composed.to_dp_event())
    assert pld.epsilon(list(acc.parts(composed)), 1e-6) == pytest.approx(accountant.get_epsilon(1e-6), abs=2e-3)


def test_the_ledger_form_round_trips_and_reads_old_flat_parts():
    assert ev.load(ev.dump(TREE)) == TREE
    assert account.recorded(ev.stored(TREE), Budget(2.0, 1e-6)) == TREE
    assert ev.stored(ev.EpsilonDelta(1.0, 0.0)) is None
    assert ev.dump(ev.times(ev.Gaussian(2.0, part="x"), 3)) == {
        "type": "self_composed",
        "count": 3,
        "event": {"type": "gaussian", "sigma": 2.0, "sensitivity": 1.0, "part": "x"},
    }
    old = [
        {"count": 3, "family": "gaussian", "part": "n-gram level noise", "sensitivity": 1.0, "sigma": 7.5},
        {"count": 1, "delta": 5e-07, "epsilon": 0.0, "family": "approx", "part": "new items"},
        {"count": 2, "epsilon": 0.25, "family": "permute_and_flip", "part": "top-h selection"},
        {"count": 1, "family": "discrete_laplace", "scale": 40, "sensitivity": 3},
        {"count": 1, "epsilon": 0.4, "family": "exponential"},
    ]
    read = account.recorded(old, Budget(1.0, 1e-6))  # flat parts, read by core.ledger.legacy
    assert read.event.events == (
        ev.times(ev.Gaussian(7.5, part="n-gram level noise"), 3),
        ev.EpsilonDelta(0.0, 5e-7, part="new items"),
        ev.times(ev.PermuteAndFlip(0.25, part="top-h selection"), 2),
        ev.DiscreteLaplace(40, 3),
        ev.Exponential(0.4),
    )
    assert [legacy.flat(leaf, n) for leaf, n in ev.leaves(read)] == old  # the same figures, as a manifest shows them
    with pytest.raises(ValueError, match="not a privacy event"):
        account.recorded([{"family": "cauchy", "count": 1}], Budget(1.0, 0.0))
    with pytest.raises(ValueError, match="not a privacy event"):  # the tree's reader knows no family
        ev.load(old[0])


def test_adjacency_is_a_typed_value_stored_as_a_code_and_read_from_old_sentences():
    record, user, message = adj.ReplaceRecord(), adj.AddRemoveUser("user"), adj.ReplaceMessage()
    assert [a.code for a in (record, user, message)] == ["replace-record", "add-remove-user:user", "replace-message"]
    assert [a.unit for a in (record, user, message)] == ["record", "user", "message"]
    # the sentences shown everywhere are the words used before codes, word for word
    assert record.sentence == "replace one record (the number of records N is public)"
    assert user.sentence == "add or remove one user (all records sharing a 'user' value)"
    assert message.sentence == "replace one message (each user's number of messages is public)"
    for a in (record, user, message, adj.AddRemoveUser('it\'s "odd"'), adj.AddRemoveUser("a:b")):
        assert adj.read(a.code) == a and adj.read(a.sentence) == a
    assert adj.read("replace one record") == adj.Described("replace one record")  # words known to no value
    assert adj.read("replace one record") != record and adj.Described("x").sentence == "x"
    with pytest.raises(ValueError):
        adj.AddRemoveUser("")


def plans():
    for name, m in MECHANISMS.items():
        for raw in [EXAMPLES[name][1], *DP_REQUESTS.get(name, [])]:
            yield name, raw, m.plan(m.Params.model_validate(raw))


def test_every_dp_plan_declares_a_typed_event_and_adjacency_and_its_detail_only_display():
    seen = set()
    for name, raw, planned in plans():
        if not isinstance(planned.cost, DPCost):
            continue
        seen.add(name)
        assert isinstance(planned.cost.event, ev.Calibrated), name
        # the charge is the calibration's, the one the request asked for (as charged before the tree)
        want = raw["dp"] if name == "spam-filter-training" else raw
        if want.get("rho") is None:  # an aggregate rho is charged at the epsilon its curve gives
            assert planned.cost.budget.epsilon == want["epsilon"], name
        assert not {"events", "accountant"} & set(planned.detail), name  # display figures only
        expected = (
            adj.AddRemoveUser(raw["user_column"])
            if name == "dpne" or raw.get("user_column")
            else adj.ReplaceMessage()
            if name == "spam-filter-training"
            else adj.ReplaceRecord()
        )
        assert planned.cost.adjacency == expected, name
    assert seen == {"dpne", "outliers", "aggregate", "spam-filter-training"}
