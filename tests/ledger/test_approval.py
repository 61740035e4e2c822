"""The steward's approval inside the one charged-run path (third privacy review, finding 3).

(b) the share is taken again under the charge's lock, so releases started together cannot race past
it; (c) the decision is recorded in the charge's entry and ``ledger verify`` replays it; (d) it is
said in the steward's terms, and an account's spend over a window can be bounded too. Each attack
succeeds on a weakened ledger that looks before the charge only (the code before the review).
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from privrelease.core.errors import ApprovalError
from privrelease.core.ledger import approval
from privrelease.core.ledger.ledger import RESERVED, ChargeRequest, Ledger
from privrelease.core.privacy.accountant import Filter, Spend
from privrelease.core.privacy.adjacency import ReplaceRecord
from privrelease.core.privacy.budget import Budget, gaussian_sigma
from privrelease.core.privacy.events import Gaussian
from tests.cli.test_cli import EXE, REPO, run
from tests.support.helpers import dp, register, write_request

ADJ = ReplaceRecord()


class LookedBeforeOnly(Ledger):
    """Weakened: the approval as before the review, looked at before the charge and never under its lock."""

    def reserve(self, *args, **kwargs):
        self._in_reserve = True
        try:
            return super().reserve(*args, **kwargs)
        finally:
            self._in_reserve = False

    def _look(self, *args, **kwargs):
        return None if getattr(self, "_in_reserve", False) else super()._look(*args, **kwargs)


def _charge(ledger: Ledger, run_id: str, eps: float, who: str = "alice", given: approval.Approval | None = None):
    return ledger.reserve(ChargeRequest("d", run_id, "dp", dp(eps, 1e-7), "m", {"r": run_id}, {}, None, who, given))


@pytest.mark.parametrize("weakened", [False, True])
def test_finding_3b_releases_started_together_cannot_race_past_the_approval(tmp_path: Path, weakened: bool):
    """Cap (2, 1e-5), --approve-above 0.6, two releases of epsilon 1: one after the other the second is
    held (it takes all that is left); started together, both looked (50% each) before either charged.
    Under the lock the second is refused, nothing written; the weakened ledger charges both."""
    ledger = (LookedBeforeOnly if weakened else Ledger)(tmp_path / "privrelease.duckdb")
    ledger.set_budget("d", Budget(2.0, 1e-5), approve_above=0.6)
    looks = [ledger.approval("d", dp(1.0, 1e-7), who) for who in ("alice", "bob")]
    assert looks == [None, None]  # each, alone, is under the threshold
    _charge(ledger, "r1", 1.0, "alice")
    if weakened:
        _charge(ledger, "r2", 1.0, "bob")
        assert [e.release_id for e in ledger.entries() if e.status == RESERVED] == ["r1", "r2"]
        assert ledger.replay() and "records no approval that covers it" in ledger.replay()[0]  # (c): verify sees it
        return
    with pytest.raises(
        ApprovalError, match=r"charges epsilon=1 of the cap's epsilon=2 \(1 left .*: 100.0%\).*Nothing was charged"
    ):
        _charge(ledger, "r2", 1.0, "bob")
    assert [e.release_id for e in ledger.entries() if e.status == RESERVED] == ["r1"] and ledger.replay() == []


def test_finding_3b_two_command_line_releases_at_once_charge_once(tmp_path: Path):
    """The attack as the reviewer ran it: two `privrelease release` processes started together."""
    from privrelease.core.datasets.demo import census

    home = tmp_path / "home"
    register(home, census(400), "census", purpose="dp")
    assert (
        run(home, "ledger", "set-budget", "census", "--epsilon", "2", "--delta", "1e-5", "--approve-above", "0.6").returncode == 0
    )
    requests = [
        write_request(
            tmp_path / f"req{i}",
            dataset="census",
            release_id=f"race-{i}",
            mechanism={
                "name": "outliers",
                "params": {
                    "query": "count",
                    "columns": ["age"],
                    "r": 1.0,
                    "k": 3,
                    "epsilon": 1.0,
                    "delta": 1e-6,
                    "noise": "global",
                    "standardize": {"age": {"mean": 40, "std": 12}},
                },
            },
        )
        for i in range(2)
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")} | {"PRIVRELEASE_HOME": str(home)}
    procs = [
        subprocess.Popen([EXE, "release", str(r)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in requests
    ]
    outcomes = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert sorted(code for code, _ in outcomes) == [0, 2], outcomes
    refused = next(err for code, err in outcomes if code == 2)
    assert "of the cap's epsilon=2 (1 left by the charges' epsilons: 100.0%)" in refused, refused
    ledger = Ledger(home / "privrelease.duckdb")
    assert len([e for e in ledger.entries() if e.status == RESERVED]) == 1 and ledger.replay() == []


def test_finding_3c_the_approval_is_recorded_and_replayed(tmp_path: Path):
    """Who approved, when and at what share, in the charge's entry under the chain; verify replays it, and
    an approval that no longer covers the charge (the history moved while it waited) is refused."""
    ledger = Ledger(tmp_path / "privrelease.duckdb")
    ledger.set_budget("d", Budget(4.0, 1e-5), approve_above=0.25)
    held = ledger.approval("d", dp(2.0, 1e-7), "alice")
    assert held is not None and held.needed and held.share == pytest.approx(0.5)
    given = approval.Approval.given(held, "sam", datetime.now(UTC))
    _charge(ledger, "other", 1.0, "bob")  # 25% of what was left: no approval needed
    with pytest.raises(ApprovalError, match="no longer covers it"):  # 2 of the 3 left now: 66.7% > the 50% approved
        _charge(ledger, "r1", 2.0, "alice", given)
    fresh = approval.Approval.given(ledger.approval("d", dp(2.0, 1e-7), "alice"), "sam", datetime.now(UTC))
    entry = _charge(ledger, "r1", 2.0, "alice", fresh).entry
    record = json.loads(entry.detail)["approval"]
    assert record["approved_by"] == "sam" and record["needed"] and record["share"] == pytest.approx(2 / 3)
    assert record["rule"] == {"approve_above": 0.25} and json.loads(entry.detail)["admission"]["rule"] == "filter-2"
    assert ledger.replay() == []
    r = run(tmp_path, "ledger", "verify")
    assert r.returncode == 0 and "admission replay ok: 2 dp charges" in r.stdout, r.stderr


def test_finding_3d_the_share_in_the_stewards_terms_and_an_accounts_window():
    """Cap 8, --approve-above 0.2: a Gaussian release of epsilon 3.5 when 4 of the cap's epsilon is left
    took 24.9% of what the filter leaves and ran unapproved; the epsilon share (87.5%) now holds it and
    both are said. An account's limit over a window holds back the third of a series of small releases."""
    f = Filter.of(Budget(8.0, 1e-5))
    first = Spend("a", Budget(4.0, 1e-6), Gaussian(gaussian_sigma(4.0, 1e-6)))
    candidate = Spend("b", Budget(3.5, 1e-6), Gaussian(gaussian_sigma(3.5, 1e-6)))
    now = datetime(2026, 11, 26, 12, tzinfo=UTC)
    seen = approval.look(approval.ApprovalRule(share=0.2), f, [first], candidate, [], now)
    assert seen.filter_share < 0.5 < seen.epsilon_share == pytest.approx(0.875) and seen.needed
    words = seen.words("census")
    assert "charges epsilon=3.5 of the cap's epsilon=8 (4 left by the charges' epsilons: 87.5%)" in words
    assert f"takes {seen.filter_share:.1%} of what the admission filter leaves" in words
    rule = approval.ApprovalRule(account_epsilon=2.0, window_hours=24)
    small = Spend("c", Budget(0.8, 0.0), None)
    mine = [((now - timedelta(hours=h)).isoformat(), 0.8) for h in (30, 5)]  # one charge outside the window, one in
    assert not approval.look(rule, f, [], small, mine[:1], now).needed  # 0.8 in the window
    held = approval.look(rule, f, [], small, mine + [((now - timedelta(hours=1)).isoformat(), 0.8)], now)
    assert held.needed and held.account_epsilon == pytest.approx(2.4)
    assert "brings its requester's epsilon on dataset 'census' in the last 24 hours to 2.4" in held.words("census")


def test_an_accounts_window_is_set_by_the_steward_and_enforced_per_account(tmp_path: Path):
    from privrelease.core.datasets.demo import census

    home = tmp_path / "home"
    register(home, census(300), "census", purpose="dp")
    r = run(home, "ledger", "set-budget", "census", "--epsilon", "10", "--delta", "1e-5", "--approve-account-above", "1.5")
    assert r.returncode == 2 and r.stderr.startswith("error: --approve-account-above EPSILON and --window HOURS go together")
    r = run(
        home,
        "ledger",
        "set-budget",
        "census",
        "--epsilon",
        "10",
        "--delta",
        "1e-5",
        "--approve-account-above",
        "1.5",
        "--window",
        "0",
    )
    assert r.returncode == 2 and r.stderr.startswith(
        "error: invalid approval rule: an account's limit is an epsilon >= 0 over a window of 0 to 8784 hours"
    )
    r = run(
        home,
        "ledger",
        "set-budget",
        "census",
        "--epsilon",
        "10",
        "--delta",
        "1e-5",
        "--approve-account-above",
        "1.5",
        "--window",
        "24",
    )
    assert r.returncode == 0 and "one bringing its requester past epsilon=1.5 in 24 hours waits for a steward" in r.stdout
    ledger = Ledger(home / "privrelease.duckdb")
    ledger.reserve(ChargeRequest("census", "a1", "dp", dp(1.0, 0.0), "m", {}, {}, None, "alice"))
    ledger.reserve(ChargeRequest("census", "b1", "dp", dp(1.0, 0.0), "m", {}, {}, None, "bob"))  # another account's own window
    with pytest.raises(ApprovalError, match="in the last 24 hours to 2"):
        ledger.reserve(ChargeRequest("census", "a2", "dp", dp(1.0, 0.0), "m", {}, {}, None, "alice"))
    assert ledger.replay() == []
    # a new cap replaces the old whole: what it drops is said, and a share alone is said not to bound an account
    r = run(home, "ledger", "set-budget", "census", "--epsilon", "10", "--delta", "1e-5", "--approve-above", "0.5")
    assert "note: the earlier cap's approve-account no longer apply" in r.stdout
    assert "bound an account's spend too with --approve-account-above EPSILON --window HOURS" in r.stdout


def test_on_the_command_line_the_requester_is_the_real_user_not_what_user_says(tmp_path: Path):
    """An account's window held only if the requester cannot be chosen: $USER and $LOGNAME are the caller's
    to set (one person as 12 names spent a cap past its account limit), the real uid is not."""
    import getpass
    import pwd

    spoof = {"USER": "mallory", "LOGNAME": "mallory"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in spoof.items():
            mp.setenv(k, v)
        assert getpass.getuser() == "mallory"  # control: what the requester was read from before
    from privrelease.core.datasets.demo import census

    home = tmp_path / "home"
    register(home, census(200), "census", purpose="dp")
    assert run(home, "ledger", "set-budget", "census", "--epsilon", "1", "--delta", "1e-6", env=spoof).returncode == 0
    (cap,) = [e for e in Ledger(home / "privrelease.duckdb").entries() if e.status == "cap"]  # after the registration's
    assert cap.requested_by == pwd.getpwuid(os.getuid()).pw_name != "mallory"
