"""The mechanism-aware ledger end to end: real plans charged through the pipeline, totals, refusals,
replay, and the commands a steward and an auditor type."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from privrelease.core.datasets.demo import posts
from privrelease.core.errors import BudgetError
from privrelease.core.ledger import account
from privrelease.core.ledger.ledger import RESERVED, ChargeRequest, Ledger
from privrelease.core.privacy import accountant as acc
from privrelease.core.privacy import events as ev
from privrelease.core.privacy import pld
from privrelease.core.privacy.budget import Budget
from privrelease.core.release import charged, headroom, pipeline
from privrelease.core.release.home import Home
from privrelease.core.release.spec import parse
from tests.cli.test_cli import run
from tests.support.helpers import dp, register

DPNE = {"text_column": "text", "epsilon": 1.0, "delta": 1e-6, "tokenizer": "words"}


def request(**params):
    return parse({"dataset": "posts", "mechanism": {"name": "dpne", "params": {**DPNE, **params}}})


def charge(opened: Home, req) -> None:
    release, plan = pipeline.prepare(opened, req)
    charged.reserve(opened, pipeline.claim(release, plan), charged.Caller(), None)


@pytest.fixture
def opened(home: Path) -> Home:
    register(home, posts(200), "posts", "user:user", "dp")
    s = Home.open()
    s.ledger.set_budget("posts", Budget(5.0, 1e-5))
    return s


def test_dpne_releases_admitted_by_the_filter_and_refused_with_reasons(opened):
    n = 0
    with pytest.raises(BudgetError) as refused:
        while n < 100:
            charge(opened, request())
            n += 1
    assert n >= 10  # basic composition admits 5 of these against (5, 1e-5)
    charges = [e for e in opened.ledger.entries() if e.status == RESERVED]
    assert len(charges) == n and all(json.loads(e.detail)["admission"]["region"] == "renyi" for e in charges)
    message = str(refused.value)
    assert "this release needs epsilon=1, delta=1e-06" in message
    # DPNE adds Gaussian noise: only the filter can admit it, and there both ran out (0.159 > 0.103 left;
    # the new-item delta 5e-7 plus the sampler's 5e-84 > 5e-7 left)
    assert "What binds: under the admission filter, epsilon and delta; basic composition does not take Gaussian noise." in message
    assert "Admission filter (Rényi order" in message and "of which 0" not in message.split("budget,")[0]
    assert f"Largest spenders so far: {charges[0].release_id} (epsilon=1, delta=1e-06, filter cost" in message
    # here the new-item deltas bind: 17 x (5e-7 + the sampler's 5e-84) leave less than 5e-7 of the 9e-6 (shown rounded)
    assert n == 17 and message.split(" Accounting detail.")[0].endswith(
        "No epsilon of this request fits, however small: the delta it needs is more than the delta=5e-07 left of the "
        "cap. Lower the release's epsilon (or delta), or ask the data steward to raise the cap (privrelease ledger set-budget)."
    )
    (t,) = opened.ledger.totals()
    assert t.account.fits == 0 and not t.over_cap


def test_a_refusal_names_the_largest_epsilon_that_fits(opened):
    opened.ledger.set_budget("posts", Budget(2.0, 1e-5))  # the Rényi budget binds before the deltas
    n = 0
    with pytest.raises(BudgetError) as refused:
        while n < 100:
            charge(opened, request())
            n += 1
    assert 2 < n < 17
    message = str(refused.value)
    assert "What binds: under the admission filter, epsilon (delta has room);" in message
    largest = float(message.split("The next release like this can take epsilon ≤ ")[1].split(" ")[0])
    assert 0 < largest < 1
    with pytest.raises(BudgetError):
        charge(opened, request(epsilon=largest * 1.02))  # a little more does not fit
    charge(opened, request(epsilon=largest))  # it does fit


def test_totals_show_basic_filter_and_pld_cross_checked(opened):
    for _ in range(4):
        charge(opened, request())
    (t,) = opened.ledger.totals()
    a = t.account
    assert t.spent == Budget(4.0, 4e-6)
    events = [e for x in opened.ledger.entries() if x.status == RESERVED for e in account.spend(x).recorded]
    assert a.pld_epsilon == pytest.approx(pld.epsilon(events, 1e-5), abs=1e-12)
    assert a.pld_epsilon <= a.filter_epsilon <= 5.0 and a.filter_epsilon < t.spent.epsilon
    # dp-accounting's own accountant on the Gaussians alone, at the cap's delta less the new-item deltas
    # (a (0, d) part adds d to delta(eps)); the sampler's slack moves epsilon by 4 x 2.5e-7
    from dp_accounting import GaussianDpEvent, SelfComposedDpEvent
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

    gauss = [(leaf, n) for leaf, n in events if isinstance(leaf, ev.Gaussian)]
    reference = PLDAccountant(value_discretization_interval=1e-4)
    reference.compose(SelfComposedDpEvent(GaussianDpEvent(gauss[0][0].sigma), sum(n for _, n in gauss)))
    assert a.pld_epsilon == pytest.approx(reference.get_epsilon(1e-5 - 4 * 5e-7), abs=2e-3)
    one = acc.Spend("x", Budget(1, 1e-6), ev.Composed(tuple(ev.times(leaf, n) for leaf, n in events[:3])))
    assert a.like == "dpne" and a.fits == acc.fits_more(a.filter, [one] * 4, one)
    shown = t.as_dict()
    assert shown["pld"] == {"epsilon": a.pld_epsilon, "delta": 1e-5, "discretization": 1e-4}
    assert shown["filter"]["epsilon"] == a.filter_epsilon and shown["next"] == {"like": "dpne", "fits": a.fits}


def test_history_of_sdc_and_mpc_shows_no_epsilon(home):
    ledger = Ledger(home / "privrelease.duckdb")
    ledger.reserve(ChargeRequest("survey", "s1", "sdc", None, "ra", {}, {}))
    ledger.reserve(ChargeRequest("mail", "m1", "mpc", None, "spam-filter-training", {}, {}))
    r = run(home, "ledger", "history", "--json")
    shown = json.loads(r.stdout)
    assert [(e["kind"], e["epsilon"], e["delta"]) for e in shown] == [("sdc", None, None), ("mpc", None, None)]
    assert '"epsilon": 0' not in r.stdout


def forge(ledger: Ledger, dataset: str, release: str, cost: Budget, detail: dict) -> None:
    """An entry written past the admission check (a writer holding the key): the chain is intact."""
    with ledger._write(dataset) as (con, written):
        ledger._append(
            con,
            written,
            dataset=dataset,
            release_id=release,
            kind="dp",
            adjacency="x",
            mechanism="m",
            params={},
            epsilon=cost.epsilon,
            delta=cost.delta,
            detail=detail,
            status=RESERVED,
        )


def test_verify_replays_every_admission(opened, home):
    for _ in range(2):
        charge(opened, request())
    assert opened.ledger.replay() == []
    r = run(home, "ledger", "verify")
    assert r.returncode == 0 and "admission replay ok: 2 dp charges recomputed" in r.stdout
    forge(opened.ledger, "posts", "legacy", Budget(0.5, 0.0), {})  # an entry from before events: basic, within the cap
    assert opened.ledger.replay() == []
    forge(opened.ledger, "posts", "big", Budget(4.0, 0.0), {"admission": {"rule": "filter-1", "region": "basic"}})
    opened.ledger.verify()  # the chain itself is intact
    (problem,) = opened.ledger.replay()
    seq = opened.ledger.entries()[-1].seq
    assert problem.startswith(
        f"entry {seq} (posts): recorded as admitted (basic, by its None) but the filter of the cap then in force gives refused"
    )
    r = run(home, "ledger", "verify")
    assert r.returncode == 3 and f"admission replay FAILED: entry {seq} (posts)" in r.stderr


def test_totals_command_as_the_steward_types_it(opened, home):
    for _ in range(3):
        charge(opened, request())
    r = run(home, "ledger", "totals")
    assert r.returncode == 0, r.stderr
    header, row = r.stdout.splitlines()[:2]
    assert "filter eps" in header and "PLD eps" in header and "next release like the last" in header
    (t,) = opened.ledger.totals()
    room = headroom.after_last(opened.ledger.entries(), "posts")
    share, by = t.account.spent
    assert row.startswith("posts            dp") and f" {100 * share:.3g}% filter dpne: eps ≤ {room.epsilon:.3g} " in row
    assert f"{t.account.pld_epsilon:.4g}" in row and f"{t.account.filter_epsilon:.4g}" in row and by == "filter"
    assert 0 < share < 1 and room.epsilon > 0
    history = run(home, "ledger", "history", "--verbose").stdout
    assert "events=3 parts" in history and "'mode': 'events', 'region': 'renyi'" in history  # in full with --json
    shown = json.loads(run(home, "ledger", "totals", "--json").stdout)[0]
    assert shown["spent"] == {"epsilon": 3.0, "delta": 3e-6}
    assert shown["pld"]["epsilon"] == pytest.approx(t.account.pld_epsilon) and shown["next"]["fits"] == t.account.fits
    assert shown["room"]["epsilon"] == room.epsilon and shown["spent_share"] == {"share": share, "by": "filter"}


def test_a_refusal_by_basic_composition_names_what_binds_with_both_figures(tmp_path: Path):
    ledger = Ledger(tmp_path / "privrelease.duckdb")
    ledger.set_budget("d", Budget(1, 1e-6))
    ledger.reserve(ChargeRequest("d", "r1", "dp", dp(0.5, 1e-7), "m", {}))
    with pytest.raises(BudgetError) as eps:
        ledger.reserve(ChargeRequest("d", "r2", "dp", dp(0.6, 1e-7), "m", {}))
    with pytest.raises(BudgetError) as delta:
        ledger.reserve(ChargeRequest("d", "r3", "dp", dp(0.1, 1e-6), "m", {}))
    assert "by basic composition, epsilon (delta has room)." in str(eps.value)
    assert "by basic composition, delta (epsilon has room)." in str(delta.value)
    assert "this release needs epsilon=0.1, delta=1e-06" in str(delta.value)
    assert "it has only epsilon=0.5, delta=" in str(delta.value)


def test_totals_print_every_digit_spent(tmp_path: Path):
    """A delta of 1e-6 spent from a cap of 1e-3 shows in the charges (the cap less them, printed as 0.0009 once, is no
    longer shown: it is not what a release can take), and the share spent is the larger of epsilon's and delta's."""
    home = tmp_path / "home"
    ledger = Ledger(home / "privrelease.duckdb")
    ledger.set_budget("d", Budget(10, 1e-3))
    ledger.reserve(ChargeRequest("d", "r1", "dp", dp(1, 1e-6), "m", {}))
    row = run(home, "ledger", "totals").stdout.splitlines()[1].split()
    assert row[2:11] == ["10", "/", "0.001", "10%", "basic", "-", "1", "/", "1e-06"], row
