"""The ledger: caps, idempotency, settlement, tamper evidence, and concurrent charges, on both stores
(the home's DuckDB file and a real PostgreSQL)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from privrelease.core.errors import BudgetError, LedgerCorrupt, ReleaseConflict
from privrelease.core.ledger.ledger import FAILED, PUBLISHED, RESERVED, ChargeRequest, Ledger
from privrelease.core.mechanisms import dpne
from privrelease.core.privacy.adjacency import AddRemoveUser, Adjacency, ReplaceRecord
from privrelease.core.privacy.budget import Budget, compose_sigmas, gaussian_epsilon
from tests.conftest import REPO
from tests.support.helpers import dp
from tests.support.pg import raw_sql


@pytest.fixture(params=["duckdb", "postgresql"])
def ledger(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    if request.param == "postgresql":
        monkeypatch.setenv("PRIVRELEASE_LEDGER_URL", request.getfixturevalue("pg_url"))
    ledger = Ledger(tmp_path / "privrelease.duckdb")
    assert ledger.store.kind == request.param
    return ledger


ADJ = ReplaceRecord()


def charge(ledger: Ledger, release: str, eps: float, delta: float = 0.0, dataset: str = "d", adjacency: Adjacency = ADJ, **kw):
    return ledger.reserve(
        ChargeRequest(dataset, release, "dp", dp(eps, delta, adjacency=adjacency), "m", {"x": 1} | kw, {"sigma": 2.0})
    )


def test_dp_release_without_cap_is_refused(ledger):
    with pytest.raises(BudgetError, match="ledger set-budget d"):
        charge(ledger, "r1", 0.5)
    with pytest.raises(BudgetError, match="ledger set-budget d"):
        charge(ledger, "r1", 0.0)  # a dp charge fails closed even at zero cost
    assert ledger.entries() == []


def test_sdc_release_needs_no_cap_and_shows_no_dp_total(ledger):
    c = ledger.reserve(ChargeRequest("s", "r1", "sdc", None, "ra", {}, {}))
    assert c.previous_status is None and c.entry.status == RESERVED and c.entry.kind == "sdc"
    ledger.settle("r1", PUBLISHED, {"pa": 30.0})
    (t,) = ledger.totals()
    assert (t.kind, t.cap, t.spent, t.remaining, t.published) == ("sdc", None, None, None, 1)
    assert t.as_dict()["spent"] is None and t.as_dict()["gdp"] is None
    with pytest.raises(ValueError, match="exactly when it is dp"):
        ledger.reserve(ChargeRequest("s", "r2", "sdc", dp(1.0), "ra", {}, {}))  # an sdc run cannot carry an epsilon
    ledger.set_budget("s", Budget(1.0))
    with pytest.raises(BudgetError, match="one kind of release"):
        charge(ledger, "r3", 0.1, dataset="s")


def test_dp_charges_under_another_adjacency_are_refused(ledger):
    ledger.set_budget("d", Budget(2.0, 0.0))
    charge(ledger, "r1", 0.5)
    with pytest.raises(BudgetError, match="another adjacency"):
        charge(ledger, "r2", 0.5, adjacency=AddRemoveUser("user"))
    assert [e.release_id for e in ledger.entries()] == [None, "r1"]


def test_cap_is_enforced_and_refusal_appends_nothing(ledger):
    ledger.set_budget("d", Budget(1.0, 1e-6))  # a tenth of delta is the filter's conversion share
    charge(ledger, "r1", 0.6, 5e-7)
    with pytest.raises(BudgetError, match=r"has only epsilon=0.4, delta=4e-07 left"):
        charge(ledger, "r2", 0.5, 1e-7)
    with pytest.raises(BudgetError, match="delta"):
        charge(ledger, "r3", 0.1, 5e-7)
    charge(ledger, "r4", 0.4, 4e-7)  # exactly the rest fits
    assert [e.release_id for e in ledger.entries()] == [None, "r1", "r4"]
    (t,) = ledger.totals()
    assert t.spent == Budget(1.0, 9e-7) and t.remaining == Budget(0.0, 0.0)


def test_equal_splits_add_up_to_the_cap_exactly(ledger):
    ledger.set_budget("d", Budget(1.0, 0.0))
    for i in range(10):
        charge(ledger, f"r{i}", 0.1)  # 10 x 0.1 != 1.0 in floating point; exactly 1 as decimals
    with pytest.raises(BudgetError, match=r"has only epsilon=0, delta=0 left"):
        charge(ledger, "r10", 1e-12)  # a float tolerance (1e-9 of the cap) would have let this through
    (t,) = ledger.totals()
    assert t.spent == Budget(1.0, 0.0) and t.remaining == Budget(0.0, 0.0)


def test_no_float_residue_in_what_is_left(ledger):
    ledger.set_budget("d", Budget(1.0, 1e-6))  # 9e-7 of it for charges' deltas
    for i, delta in enumerate((5e-8, 6e-7, 2.5e-7)):  # in floats 9e-7 - (5e-8 + 6e-7 + 2.5e-7) = 1.06e-22
        charge(ledger, f"r{i}", 0.25, delta)
    assert 9e-7 - (5e-8 + 6e-7 + 2.5e-7) > 0  # control: the residue is real in floating point
    with pytest.raises(BudgetError) as info:
        charge(ledger, "r3", 0.5, 1e-9)
    assert "left of its cap (epsilon=1, delta=1e-06)" in str(info.value)
    assert "has only epsilon=0.25, delta=0 left" in str(info.value)
    assert ledger.totals()[0].remaining == Budget(0.25, 0.0)
    charge(ledger, "r4", 0.25, 0.0)  # exactly the rest of epsilon still fits


def test_one_datasets_totals_are_its_row_of_all_totals(tmp_path: Path):
    """``totals(dataset=...)`` (what a release's "left of the cap" line reads) is that dataset's row of
    the totals of all datasets, and reads no other dataset's history."""
    ledger = Ledger(tmp_path / "privrelease.duckdb")
    for name, eps in (("a", 0.5), ("b", 0.25)):
        ledger.set_budget(name, Budget(2.0, 1e-6))
        charge(ledger, f"r-{name}", eps, 1e-8, dataset=name)
    every = {t.dataset: t for t in ledger.totals(tight=False)}
    for name in ("a", "b"):
        assert ledger.totals(tight=False, dataset=name) == [every[name]]
    assert every["a"] != every["b"] and ledger.totals(dataset="c") == []


def test_retry_is_charged_once_and_other_params_conflict(ledger):
    ledger.set_budget("d", Budget(1.0, 0.0))
    first = charge(ledger, "r1", 0.7)
    again = charge(ledger, "r1", 0.7)
    assert again.entry == first.entry and again.previous_status == RESERVED
    assert len(ledger.entries()) == 2
    with pytest.raises(ReleaseConflict, match="r1"):
        charge(ledger, "r1", 0.7, x=2)
    with pytest.raises(ReleaseConflict):
        charge(ledger, "r1", 0.7, dataset="other")


def test_settlement(ledger):
    ledger.set_budget("d", Budget(1.0, 0.0))
    charge(ledger, "ok", 0.2)
    charge(ledger, "bad", 0.3)
    ledger.settle("ok", PUBLISHED)
    ledger.settle("bad", FAILED, {"reason": "boom"})
    assert ledger.status("ok") == PUBLISHED and ledger.status("bad") == FAILED
    assert ledger.settle("ok", FAILED).status == PUBLISHED  # published stays published
    (t,) = ledger.totals()
    assert t.spent.epsilon == pytest.approx(0.5)  # the failed release keeps its charge
    assert (t.releases, t.published, t.failed, t.pending) == (2, 1, 1, 0)
    assert charge(ledger, "bad", 0.3).previous_status == FAILED  # retry after failure: no new charge
    assert ledger.totals()[0].spent.epsilon == pytest.approx(0.5)
    with pytest.raises(ValueError, match="never charged"):
        ledger.settle("nope", PUBLISHED)


def test_history_round_trips_through_json(ledger):
    ledger.set_budget("d", Budget(2.0, 1e-5))
    charge(ledger, "r1", 0.25, 1e-7)
    entry = ledger.entries()[-1].as_dict()
    assert entry["params"] == {"x": 1}
    assert entry["detail"] == {"sigma": 2.0, "admission": {"rule": "filter-1", "region": "basic", "mode": "charge"}}
    assert json.loads(json.dumps(entry)) == entry


@pytest.fixture
def filled(ledger: Ledger) -> Ledger:
    ledger.set_budget("d", Budget(5.0, 1e-5))
    for i in range(4):
        charge(ledger, f"r{i}", 0.5)
        ledger.settle(f"r{i}", PUBLISHED)
    assert ledger.verify() == 9
    return ledger


# Entries 3 and 6 swap places (in two steps: PostgreSQL checks the key after each row).
REORDER = ("UPDATE ledger SET seq = -seq WHERE seq IN (3, 6)", "UPDATE ledger SET seq = seq + 9 WHERE seq < 0")


@pytest.mark.parametrize(
    "sql,bad_seq",
    [
        ("UPDATE ledger SET epsilon = 0.05 WHERE seq = 4", 4),
        ("UPDATE ledger SET status = 'failed' WHERE seq = 7", 7),
        ("UPDATE ledger SET epsilon = 50 WHERE seq = 1", 1),
        ("DELETE FROM ledger WHERE seq = 5", 5),
        (REORDER, 3),
    ],
    ids=["changed-epsilon", "changed-status", "changed-cap", "deleted", "reordered"],
)
def test_tampering_is_detected(filled, sql, bad_seq):
    raw_sql(filled, *(sql if isinstance(sql, tuple) else (sql,)))
    with pytest.raises(LedgerCorrupt) as info:
        filled.verify()
    assert info.value.seq == bad_seq


def test_truncation_is_detected_through_manifests(filled, tmp_path):
    last = filled.entries()[-2]  # the charge of the last release, cited by its manifest
    folder = tmp_path / "releases" / "d" / "r3"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"ledger": {"seq": last.seq, "hash": last.hash}}))
    assert filled.verify(tmp_path / "releases") == 9
    raw_sql(filled, f"DELETE FROM ledger WHERE seq >= {last.seq}")
    with pytest.raises(LedgerCorrupt, match="entry 8, anchored at"):
        filled.verify()  # the anchors see a cut tail ...
    filled.anchors.written.write_text("")  # weakened: anchors that hold nothing ...
    filled.verify()  # ... the chain alone cannot ...
    with pytest.raises(LedgerCorrupt, match="cites ledger entry 8"):
        filled.verify(tmp_path / "releases")  # ... the manifests can


WORKER = """
import json, sys, time
from pathlib import Path
from privrelease.core.ledger import anchors
from privrelease.core.privacy.budget import Budget, compose_sigmas, gaussian_epsilon
from privrelease.core.mechanisms import dpne
from privrelease.core.errors import BudgetError
from privrelease.core.ledger.ledger import ChargeRequest, Ledger
from tests.support.helpers import dp
db, worker, start = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
while not start.exists():
    time.sleep(0.005)
ledger, ok = Ledger(db), []
for i in range(4):
    try:
        ledger.reserve(ChargeRequest("shared", f"w{worker}-{i}", "dp", dp(0.05, 1e-8), "m", {}, {}))
        ok.append(f"w{worker}-{i}")
    except BudgetError:
        pass
print(json.dumps(ok))
"""


def test_eight_processes_never_exceed_the_cap(ledger, tmp_path):
    ledger.set_budget("shared", Budget(1.0, 2e-7))  # room for exactly 18 of the 32 (delta 1.8e-7 after the conversion share)
    start = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(ledger.db_path), str(w), str(start)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(8)
    ]
    time.sleep(1.5)  # let every worker import and wait at the barrier
    start.touch()
    accepted = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        accepted += json.loads(out)
    charged = [e.release_id for e in ledger.entries() if e.status == RESERVED]
    assert sorted(charged) == sorted(accepted)  # no entry lost, none invented
    assert len(accepted) == 18
    (t,) = ledger.totals()
    assert t.spent.fits_within(t.cap)
    assert ledger.verify() == 19


def test_gdp_total_for_gaussian_histories(ledger):
    ledger.set_budget("d", Budget(10.0, 1e-5))
    plans = [
        dpne.plan(dpne.Params(user_column="u", text_column="t", epsilon=eps, delta=1e-7, T=T))
        for eps, T in ((1.0, 6), (2.0, 9), (1.0, 3))
    ]
    for i, plan in enumerate(plans):
        ledger.reserve(ChargeRequest("d", f"r{i}", "dp", replace(plan.cost, adjacency=ADJ), "dpne", {"i": i}, plan.detail))
    (t,) = ledger.totals()
    sigmas = [s for p in plans for s in p.detail["sigmas"]]
    expected = gaussian_epsilon(compose_sigmas(sigmas), 3 * 0.5e-7)
    assert t.gdp_epsilon == pytest.approx(expected, rel=1e-9)
    assert t.gdp_epsilon < t.spent.epsilon == pytest.approx(4.0)  # tighter than basic composition
    assert t.as_dict()["gdp"] == {"epsilon": t.gdp_epsilon, "delta": t.spent.delta}
    charge(ledger, "other", 0.5)  # a charge of another kind: no GDP total
    assert ledger.totals()[0].gdp_epsilon is None


@pytest.mark.parametrize("bad", ["../x", "", "a/b", "a b"])
def test_set_budget_checks_the_id_as_requests_do(home, capsys, bad):
    from tests.flows.test_release_flow import cli

    code, _, err = cli(capsys, "ledger", "set-budget", bad, "--epsilon", "1", "--delta", "0")
    assert code == 2 and err.strip() == (
        "error: dataset id must be 1-80 characters of letters, digits, '_', '.' or '-', starting with a letter or digit."
    )
    assert not (home / "privrelease.duckdb").exists()


def test_lowering_the_cap_below_the_spend_is_noted(home, capsys):
    from tests.flows.test_release_flow import cli
    from tests.mechanisms.test_outliers import planted
    from tests.support.helpers import register

    register(home, planted(50), "d", "record", "dp")
    assert cli(capsys, "ledger", "set-budget", "d", "--epsilon", "1", "--delta", "0")[0] == 0
    charge(Ledger(home / "privrelease.duckdb"), "r1", 0.3)
    code, out, _ = cli(capsys, "ledger", "set-budget", "d", "--epsilon", "0.3", "--delta", "0")
    assert code == 0 and "note" not in out  # exactly the spend: not over
    code, out, _ = cli(capsys, "ledger", "set-budget", "d", "--epsilon", "0.2", "--delta", "0")
    assert code == 0 and "note: d has already spent epsilon=0.3 delta=0; no further DP release fits" in out


@pytest.mark.parametrize("weakened", [False, True])
def test_threads_opening_the_database_at_once_never_conflict(tmp_path, weakened, monkeypatch):
    """The gate answers requests on worker threads that read accounts from the database file; threads
    opening one file at the same instant raced in DuckDB's database cache ("Unique file handle
    conflict", a 500 from the gate in CI), and now would race attaching it to the process's in-memory
    database and counting its users (``privrelease.core.db._attach``). 16 threads open and close it together 500 times:
    serialized, they never conflict. Without the lock (weakened) the race showed after 5 to 230 rounds (mean
    65, ten runs, when each use opened a database), so 500 clean rounds would happen by chance with odds near
    e^-7.7 if the lock did nothing; the weakened run stops at its first error, or fails after 3,000 rounds."""
    import threading

    import duckdb

    from privrelease.core import db

    if weakened:
        monkeypatch.setattr(db, "_OPENING", contextlib.nullcontext())
    path = tmp_path / "x.duckdb"
    duckdb.connect(str(path)).close()
    start, errors = threading.Barrier(16), []

    def open_together() -> None:
        for _ in range(3000 if weakened else 500):
            start.wait()
            try:
                with db.connect(path, timeout=0) as con:
                    con.execute("SELECT 1").fetchall()
            except Exception as exc:  # noqa: BLE001 - DuckDB's conflict, or the weakened count's own race
                errors.append(f"{type(exc).__name__}: {exc}")
            start.wait()
            if errors:  # read when every thread's round is over, before any starts the next: they stop together
                return

    threads = [threading.Thread(target=open_together) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if weakened:
        assert errors
    else:
        assert errors == []


def test_remaining_after_a_gaussian_charge_is_what_the_filter_leaves(ledger):
    """Third privacy review, finding 7: once a charge has Gaussian noise the basic region is closed to the
    history, so "remaining" is the filter's: a charge of what it shows fits, and the cap less the charges'
    epsilons (3, what totals showed before) does not."""
    ledger.set_budget("d", Budget(4.0, 1e-5))
    plan = dpne.plan(dpne.Params(user_column="u", text_column="t", epsilon=1.0, delta=1e-7, T=6))
    ledger.reserve(ChargeRequest("d", "g", "dp", replace(plan.cost, adjacency=ADJ), "dpne", {}, plan.detail))
    (t,) = ledger.totals()
    assert t.as_dict()["remaining_by"] == "filter" and t.spent.epsilon == 1.0
    assert t.remaining.epsilon == pytest.approx(4.0 - t.account.filter_epsilon) and t.remaining.epsilon < 2.5
    ledger.admit("d", dp(t.remaining.epsilon * 0.999, 1e-6))  # what it shows is left fits
    with pytest.raises(BudgetError):
        ledger.admit("d", dp(2.9, 1e-6))  # what the closed basic region would have promised does not
    ledger.set_budget("e", Budget(4.0, 1e-5))
    charge(ledger, "p", 1.0, 1e-7, dataset="e")  # no Gaussian part: basic composition, exactly
    assert {x.dataset: x.as_dict()["remaining_by"] for x in ledger.totals()}["e"] == "basic"
    assert {x.dataset: x.remaining for x in ledger.totals()}["e"] == Budget(3.0, 9e-6 - 1e-7)
