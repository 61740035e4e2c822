"""People and roles: accounts as the operator manages them (``privrelease user ...``, typed as a user
types it), their Argon2id hashes, who asked on every ledger entry, and the steward's approval threshold."""

from __future__ import annotations

import getpass
import hashlib
import hmac
import json
import os
import pwd
import subprocess
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from privrelease.core.errors import LedgerCorrupt
from privrelease.core.ledger import anchors
from privrelease.core.ledger.approval import Approval
from privrelease.core.ledger.chain import canonical, check_chain
from privrelease.core.ledger.ledger import ChargeRequest, Ledger
from privrelease.core.people import requester
from privrelease.core.privacy.budget import Budget
from privrelease.gate.accounts import AccountError, Accounts
from tests.cli.test_cli import EXE, REPO, run
from tests.support.helpers import dp, register, write_request

PASSWORD = "a long enough password"


def typed(home: Path, line: str, *args: str) -> subprocess.CompletedProcess:
    """``printf '%s\\n' LINE | privrelease user ...``: the password on standard input."""
    return subprocess.run(
        [EXE, *args],
        cwd=REPO,
        env={"PRIVRELEASE_HOME": str(home), "PATH": "/usr/bin:/bin"},
        input=line + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_passwords_are_slow_salted_hashes(tmp_path: Path):
    accounts = Accounts(tmp_path / "privrelease.duckdb")
    first, second = accounts.add("alice", "analyst", PASSWORD), accounts.add("bob", "auditor", PASSWORD)
    assert first.hash.startswith("$argon2id$") and first.hash != second.hash  # salted
    assert PASSWORD not in first.hash
    assert accounts.verify("alice", PASSWORD) == first
    assert accounts.verify("alice", PASSWORD + "x") is None
    assert accounts.verify("nobody", PASSWORD) is None
    accounts.remove("bob")
    assert [a.name for a in accounts.all()] == ["alice"] and accounts.verify("bob", PASSWORD) is None
    for call, message in (
        (lambda: accounts.add("alice", "steward", PASSWORD), "exists already"),
        (lambda: accounts.add("Alice!", "analyst", PASSWORD), "is not allowed"),
        (lambda: accounts.add("carol", "operator", PASSWORD), "not one of analyst, auditor, steward"),
        (lambda: accounts.add("carol", "analyst", "short"), "at least 12 characters"),
        (lambda: accounts.remove("carol"), "there is no account 'carol'"),
    ):
        with pytest.raises(AccountError, match=message):
            call()


def test_accounts_live_in_postgresql_with_the_ledger(pg_url, monkeypatch, tmp_path: Path):
    monkeypatch.setenv("PRIVRELEASE_LEDGER_URL", pg_url)
    Accounts(tmp_path / "a.duckdb").add("alice", "analyst", PASSWORD)
    elsewhere = Accounts(tmp_path / "other-home.duckdb")  # another host's home, the same database
    assert [a.name for a in elsewhere.all()] == ["alice"] and elsewhere.verify("alice", PASSWORD)
    assert not (tmp_path / "a.duckdb").exists()


def test_user_commands_as_typed(tmp_path: Path):
    home = tmp_path / "home"
    r = typed(home, PASSWORD, "user", "add", "alice", "--role", "analyst", "--password-stdin")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "account alice added with role analyst; it signs in to the UI as alice:PASSWORD\n"
    r = run(home, "user", "add", "sam", "--role", "steward")  # no --password-stdin: a random one, shown once
    assert r.returncode == 0 and r.stdout.splitlines()[1].startswith("password (shown once, keep it): ")
    made = r.stdout.splitlines()[1].rsplit(" ", 1)[1]
    assert Accounts(home / "privrelease.duckdb").verify("sam", made) is not None
    listed = run(home, "user", "list")
    assert [line.split()[:2] for line in listed.stdout.splitlines()] == [["alice", "analyst"], ["sam", "steward"]]
    as_json = run(home, "user", "list", "--json").stdout
    assert [a["name"] for a in json.loads(as_json)] == ["alice", "sam"] and "argon2" not in as_json and made not in as_json
    for args, line, message in (
        (("user", "add", "alice", "--role", "auditor", "--password-stdin"), PASSWORD, "error: account 'alice' exists already"),
        (("user", "add", "bob", "--role", "analyst", "--password-stdin"), "short", "error: the password is too short"),
        (("user", "add", "Bob", "--role", "analyst", "--password-stdin"), PASSWORD, "error: account name 'Bob' is not allowed"),
        (("user", "remove", "bob"), "", "error: there is no account 'bob'"),
    ):
        r = typed(home, line, *args)
        assert r.returncode == 2 and r.stderr.startswith(message) and "Traceback" not in r.stderr, (args, r.stderr)
    r = typed(home, PASSWORD, "user", "add", "bob", "--role", "operator", "--password-stdin")
    assert r.returncode == 2 and "invalid choice: 'operator'" in r.stderr
    assert run(home, "user", "remove", "sam").stdout == "account sam removed; the gate refuses it from now on\n"
    assert [a["name"] for a in json.loads(run(home, "user", "list", "--json").stdout)] == ["alice"]


def test_every_entry_names_who_asked_under_the_hash_chain(tmp_path: Path):
    ledger = Ledger(tmp_path / "privrelease.duckdb")
    cap = ledger.set_budget("d", Budget(2.0, 1e-6), requested_by="sam")
    charge = ledger.reserve(ChargeRequest("d", "r1", "dp", dp(1.0, 0.0), "m", {}, requested_by="alice")).entry
    assert (cap.requested_by, charge.requested_by) == ("sam", "alice")
    key = anchors.key(tmp_path, create=False)
    assert charge.computed_hash(key) != replace(charge, requested_by="vera").computed_hash(key)
    with pytest.raises(LedgerCorrupt, match="entry 2 was changed"):
        check_chain([cap, replace(charge, requested_by="vera")], tmp_path, [])
    # a row written before requesters were recorded hashes as it did then (no key for requested_by)
    old = replace(charge, requested_by=None)
    before = {k: v for k, v in asdict(old).items() if k not in ("hash", "requested_by")}
    assert old.computed_hash(key) == hmac.new(key, canonical(before).encode(), hashlib.sha256).hexdigest()
    assert requester(["requested-by:alice", "other"]) == "alice"
    assert requester([]) == requester(["requested-by:a", "requested-by:b"]) == pwd.getpwuid(os.getuid()).pw_name


def _held(found) -> tuple[float, float] | None:
    """(share, threshold) of a charge the steward's rule holds back, None when it need not wait."""
    return None if found is None else (found.share, found.rule.share)


def test_the_approval_threshold_is_a_share_of_what_remains(tmp_path: Path):
    """A share of what remains: the larger of the charge's epsilon over the cap's epsilon less the charges'
    epsilons, and its share of what the admission filter leaves in the region it would be admitted in
    (here releases known only by their (epsilon, delta): basic composition)."""
    ledger = Ledger(tmp_path / "privrelease.duckdb")
    ledger.set_budget("d", Budget(4.0, 1e-5), approve_above=0.25)
    assert _held(ledger.approval("d", dp(1.0, 1e-6))) is None  # exactly 25% of epsilon: passes
    assert _held(ledger.approval("d", dp(1.5, 1e-6))) == (0.375, 0.25)
    # the delta share binds: of the 9/10 of delta the admission filter leaves to the releases (docs/ACCOUNTING.md)
    assert _held(ledger.approval("d", dp(0.5, 5e-6))) == (pytest.approx(5 / 9), 0.25)
    approved = Approval.given(ledger.approval("d", dp(2.0, 0.0)), "sam", datetime.now(UTC))  # 50%: a steward's yes
    ledger.reserve(ChargeRequest("d", "r1", "dp", dp(2.0, 0.0), "m", {}, approval=approved))
    assert _held(ledger.approval("d", dp(1.0, 1e-6))) == (0.5, 0.25)  # a share of what remains, not of the cap
    ledger.set_budget("d", Budget(4.0, 1e-5))  # a new cap without a threshold: none applies
    assert _held(ledger.approval("d", dp(2.0, 1e-6))) is None
    with pytest.raises(ValueError, match="from 0 to 1"):
        ledger.set_budget("d", Budget(4.0, 1e-5), approve_above=1.5)


def test_approval_commands_and_a_command_line_release_that_needs_a_steward(tmp_path: Path):
    """The steward sets the threshold; a release over it from the command line (where nobody can
    approve) is refused before its charge, naming the share and what to do; history shows who asked."""
    home = tmp_path / "home"
    from privrelease.core.datasets.demo import census

    register(home, census(500), "census", purpose="dp")
    r = run(home, "ledger", "set-budget", "census", "--epsilon", "4", "--delta", "1e-5", "--approve-above", "0.05")
    assert r.returncode == 0 and "a release taking over 5% of what remains waits for a steward" in r.stdout, r.stderr
    r = run(home, "ledger", "set-budget", "census", "--epsilon", "4", "--delta", "1e-5", "--approve-above", "2")
    assert r.returncode == 2 and r.stderr == "error: --approve-above is a share of the remaining budget, from 0 to 1; got 2.\n"
    request = write_request(
        tmp_path / "req",
        dataset="census",
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
    r = run(home, "release", str(request))
    assert r.returncode == 2, r.stderr
    # the global count is one Gaussian: 9.0% of what the filter leaves (its Rényi cost 0.201 of K = 2.229), but
    # epsilon 1 of the 4 left is 25.0%: both are over the steward's 5%
    assert r.stderr.startswith(
        "error: this release charges epsilon=1 of the cap's epsilon=4 (4 left by the charges' "
        "epsilons: 25.0%) and takes 9.0% of what the admission filter leaves; its data steward lets "
        "a release of dataset 'census' take at most 5.0% without approval. Start it from its form"
    )
    assert [e.status for e in Ledger(home / "privrelease.duckdb").entries()] == ["registered", "cap"]  # nothing charged
    history = run(home, "ledger", "history").stdout.splitlines()
    assert "requested by" in history[0] and getpass.getuser() in history[2]
