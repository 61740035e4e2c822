"""A ledger written before typed privacy events keeps verifying, replaying and charging.

``tests/fixtures/ledger-898388b.json`` was written by the code at commit 898388b
(``tests/fixtures/make_ledger_898388b.py``): its rows (flat ``detail.events`` parts with a
``family``, the plans' ``accountant`` keys, adjacencies as English sentences, a charge from before
events), the chain key and anchors it was written under, and the totals that code reported. Each
test restores it, row for row, into a fresh store of either kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from privrelease.core.errors import BudgetError
from privrelease.core.ledger import anchors
from privrelease.core.ledger.account import recorded, spend
from privrelease.core.ledger.chain import Entry, insert
from privrelease.core.ledger.ledger import RESERVED, ChargeRequest, Ledger
from privrelease.core.mechanisms import dpne, outliers
from privrelease.core.privacy import adjacency as adj
from privrelease.core.privacy import events as ev
from privrelease.core.privacy.budget import Budget, gaussian_epsilon
from tests.conftest import REPO
from tests.support.helpers import dp

FIXTURE = json.loads((REPO / "tests" / "fixtures" / "ledger-898388b.json").read_text())
OLD_TOTALS = {t["dataset"]: t for t in FIXTURE["totals"]}


@pytest.fixture(params=["duckdb", "postgresql"])
def old(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    """The fixture's ledger, restored as written: its rows into the store, its key and anchors beside it."""
    if request.param == "postgresql":
        monkeypatch.setenv("PRIVRELEASE_LEDGER_URL", request.getfixturevalue("pg_url"))
    ledger = Ledger(tmp_path / "privrelease.duckdb")
    key = anchors.key_path(ledger.home)
    key.parent.mkdir(parents=True)
    key.write_text(FIXTURE["key"] + "\n")
    ledger.anchors.append([{"seq": m["seq"], "hash": m["hash"], "why": m["why"]} for m in FIXTURE["anchors"]])
    with ledger.store.write(None) as con:
        insert(con, [Entry(**e) for e in FIXTURE["entries"]])
    return ledger


def test_the_old_ledger_verifies_and_replays(old: Ledger):
    assert old.verify() == len(FIXTURE["entries"]) == 16
    assert old.replay() == []


def test_old_entries_read_into_the_typed_values(old: Ledger):
    charges = {e.release_id: e for e in old.entries() if e.status == RESERVED and e.kind == "dp"}
    assert charges["dpne-0"].adjacency == "add or remove one user (all records sharing a 'user' value)"  # as written
    assert adj.read(charges["dpne-0"].adjacency) == adj.AddRemoveUser("user")
    assert adj.read(charges["outliers-top"].adjacency) == adj.ReplaceRecord()
    assert adj.read(charges["spam-r"].adjacency) == adj.ReplaceMessage()
    # each old flat part is the leaf it described; the charge is the entry's (epsilon, delta)
    event = recorded(json.loads(charges["outliers-top"].detail)["events"], charges["outliers-top"].budget)
    assert ev.epsilon_delta(event) == Budget(1.0, 1e-5)
    assert ev.find(event, "top-h selection") == ev.PermuteAndFlip(0.25, part="top-h selection")
    assert [type(leaf).__name__ for leaf, _ in ev.leaves(event)] == ["PermuteAndFlip", "Gaussian", "EpsilonDelta"]
    smooth = recorded(json.loads(charges["outliers-smooth"].detail)["events"], charges["outliers-smooth"].budget)
    assert [(type(leaf).__name__, n) for leaf, n in ev.leaves(smooth)] == [("EpsilonDelta", 1), ("DiscreteLaplace", 1)]
    (first, _), *_ = spend(charges["dpne-1"]).recorded
    assert type(first) is ev.Gaussian and spend(charges["dpne-1"]).mode == "events"
    assert spend(charges["old-1"]).event is None  # recorded before events: counted by its charge


def test_the_old_figures_are_reported_as_before(old: Ledger, tmp_path: Path):
    for t in old.totals():
        shown, before = t.as_dict(), OLD_TOTALS[t.dataset]
        for key in ("kind", "adjacency", "cap", "spent", "remaining", "remaining_by", "filter", "next", "releases"):
            assert shown[key] == before[key], (t.dataset, key)
        # the PLD figure is dp-accounting's FFT composition in floating point: its last digits move with the machine's
        # numpy (it was read as 0.9678202453393967 and as ...3729 on one commit), so it is the same to 12 digits
        assert shown["pld"] == (
            before["pld"] and {**before["pld"], "epsilon": pytest.approx(before["pld"]["epsilon"], rel=1e-12)}
        )
        if t.dataset == "spam-mail":  # a Gaussian-DP release the old figure was kept from (only DPNE's was read)
            (charge,) = [e for e in old.entries() if e.dataset == "spam-mail" and e.status == RESERVED]
            ((g, _),) = spend(charge).recorded
            assert before["gdp"] is None and shown["gdp"]["epsilon"] == gaussian_epsilon(g.sigma / g.sensitivity / 10**0.5, 1e-6)
        elif before["gdp"] is None:
            assert shown["gdp"] is None, t.dataset
        else:
            assert (
                shown["gdp"]["epsilon"] == pytest.approx(before["gdp"]["epsilon"], rel=1e-12)
                and shown["gdp"]["delta"] == before["gdp"]["delta"]
            )


def test_new_charges_join_the_old_history_under_the_same_adjacency(old: Ledger):
    plan = dpne.plan(dpne.Params(user_column="user", text_column="text", epsilon=0.5, delta=1e-6, T=3))
    entry = old.reserve(ChargeRequest("posts", "dpne-new", "dp", plan.cost, "dpne", {"i": 2}, plan.detail)).entry
    first = next(e for e in old.entries() if e.release_id == "dpne-0")
    assert entry.adjacency == "add-remove-user:user" != first.adjacency  # a code now, a sentence then: one relation
    assert json.loads(entry.detail)["events"] == ev.stored(plan.cost.event) and "accountant" not in json.loads(entry.detail)
    with pytest.raises(BudgetError, match=r"another adjacency \(add or remove one user \(all records sharing a 'user' value\)\)"):
        old.admit("posts", dp(0.1, 1e-7))  # replace one record is another relation
    with pytest.raises(BudgetError, match="another adjacency"):
        old.admit("posts", dp(0.1, 1e-7, adj.AddRemoveUser("author")))  # so is another user column
    count = outliers.plan(
        outliers.Params.model_validate(json.loads(next(e.params for e in old.entries() if e.release_id == "outliers-smooth")))
    )
    old.reserve(ChargeRequest("sessions", "outliers-new", "dp", count.cost, "outliers", {}, count.detail))
    assert old.verify() == 18 and old.replay() == []
