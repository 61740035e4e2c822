"""The ledger through the operator's year (#51), each case as the operator types it: a restored older copy of the
home or of the database, a truncated dump, the anchors lost, an auditor's signed line. Each case fails on a ledger
whose anchors travel with the home (the weakened variant: the anchors configured inside it), as they did before.

The faults between charge and publish are in ``test_ledger_faults.py``, backups, restores and upgrades in
``test_backup.py``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from privrelease.core.datasets.demo import census
from privrelease.core.ledger.ledger import Ledger
from privrelease.core.privacy.budget import Budget
from tests.support.helpers import register
from tests.support.helpers import typed as run

AGGREGATE = {"group_by": ["sex"], "measures": [{"op": "count"}], "epsilon": 1.0, "delta": 1e-6}


def dp_home(tmp_path: Path, name: str = "home") -> tuple[Path, Path]:
    """A home with one DP dataset (cap epsilon 10) and a request that charges epsilon 1."""
    home = tmp_path / name
    register(home, census(300), "census", unit="record", purpose="dp")
    Ledger(home / "privrelease.duckdb").set_budget("census", Budget(10.0, 1e-5))
    request = tmp_path / "count.yaml"
    request.write_text(yaml.safe_dump({"dataset": "census", "mechanism": {"name": "aggregate", "params": AGGREGATE}}))
    return home, request


def spent(home: Path, env: dict | None = None) -> float:
    r = run(home, "ledger", "totals", "--json", env=env)
    assert r.returncode == 0, r.stderr
    return next(t for t in json.loads(r.stdout) if t["dataset"] == "census")["spent"]["epsilon"]


def release(home: Path, request: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return run(home, "release", str(request), "--quiet", env=env)


def rows(home: Path) -> int:
    return len(Ledger(home / "privrelease.duckdb").entries_unchecked())


def tar_home(home: Path, to: Path) -> None:
    """The backup the operator's guide used to give: a tar of the whole home."""
    with tarfile.open(to, "w:gz") as t:
        t.add(home, arcname=home.name)


def untar_home(archive: Path, home: Path) -> None:
    shutil.rmtree(home)
    with tarfile.open(archive) as t:
        t.extractall(home.parent, filter="tar")


@pytest.mark.parametrize("anchors_inside", [False, True], ids=["anchors-outside", "weakened-anchors-in-the-home"])
def test_a_restored_copy_of_the_home_is_refused_until_the_rollback_is_recorded(tmp_path, monkeypatch, anchors_inside):
    """Case 1: the home tarred, a release, the older tar restored over it. Every command that charges or reports
    budgets refuses (exit 3) and charges nothing; ``ledger accept-rollback`` records it and carries the lost charge
    forward, so the true spend over both timelines stands. With the anchors inside the home, the tar carries them
    back and the restore re-grants the budget (the weakened variant: the test can fail)."""
    if anchors_inside:
        monkeypatch.setenv("PRIVRELEASE_LEDGER_ANCHORS", str(tmp_path / "home" / "anchors" / "ledger.anchors"))
    home, request = dp_home(tmp_path)
    assert release(home, request).returncode == 0
    tar_home(home, tmp_path / "backup.tgz")
    assert release(home, request).returncode == 0 and spent(home) == 2.0
    untar_home(tmp_path / "backup.tgz", home)
    if anchors_inside:  # the attack succeeds: the budget spent after the backup is granted again
        assert spent(home) == 1.0 and run(home, "ledger", "verify").returncode == 0
        return
    before = rows(home)
    for args in (["ledger", "totals"], ["ledger", "history"], ["release", str(request)], ["dataset", "list"]):
        r = run(home, *args)
        assert r.returncode == 3, (args, r.stderr)
        assert "was rolled back" in r.stderr and "ledger ends at entry #4" in r.stderr and "accept-rollback" in r.stderr
        assert "this is a bug" not in r.stderr
    assert rows(home) == before  # nothing was charged
    verify = run(home, "ledger", "verify")
    assert verify.returncode == 3 and "entry 5, anchored at" in verify.stderr
    accepted = run(home, "ledger", "accept-rollback")
    assert accepted.returncode == 0, accepted.stderr
    assert "2 lost entries carried forward" in accepted.stdout and "its budget stays spent" in accepted.stdout
    assert spent(home) == 2.0  # the true spend over both timelines
    assert release(home, request).returncode == 0 and spent(home) == 3.0
    assert run(home, "ledger", "verify").returncode == 0
    history = json.loads(run(home, "ledger", "history", "--json").stdout)
    rollback = next(e for e in history if e["status"] == "rollback")
    assert rollback["dataset"] == "*" and [seq for seq, _ in rollback["detail"]["lost"]] == [5, 6]
    assert run(home, "ledger", "accept-rollback").returncode == 2  # nothing more to accept


def _pg_dump(url: str, to: Path) -> None:
    subprocess.run(["pg_dump", "--format=custom", "--schema=privrelease", f"--file={to}", f"--dbname={url}"], check=True)


def _pg_restore(url: str, dump: Path) -> None:
    subprocess.run(["pg_restore", "--clean", "--if-exists", f"--dbname={url}", str(dump)], check=True, capture_output=True)


@pytest.mark.parametrize("store", ["duckdb", "postgresql"])
def test_a_restored_older_database_charges_nothing(tmp_path, monkeypatch, request, store):
    """Case 2: the database alone restored from an older copy (DuckDB's file, or PostgreSQL's ``pg_restore --clean`` of
    an older dump), the anchors kept: a release is refused before its charge, and so are totals and history."""
    if store == "postgresql":
        url = request.getfixturevalue("pg_url")
        monkeypatch.setenv("PRIVRELEASE_LEDGER_URL", url)
    home, req = dp_home(tmp_path)
    assert release(home, req).returncode == 0
    if store == "postgresql":
        _pg_dump(url, tmp_path / "old.dump")
    else:
        shutil.copy(home / "privrelease.duckdb", tmp_path / "old.duckdb")
    assert release(home, req).returncode == 0
    if store == "postgresql":
        from privrelease.core import store as stores

        stores.close(url)
        _pg_restore(url, tmp_path / "old.dump")
    else:
        shutil.copy(tmp_path / "old.duckdb", home / "privrelease.duckdb")
    before = rows(home)
    r = release(home, req)
    assert r.returncode == 3 and "was rolled back" in r.stderr and "Nothing was charged" in r.stderr
    assert rows(home) == before
    for args in (["ledger", "totals"], ["ledger", "history"]):
        assert run(home, *args).returncode == 3


def test_a_truncated_ledger_is_never_offered_a_fresh_cap(tmp_path):
    """Case 2's truncated dump: every ledger row gone. The hint to set a budget (a fresh cap on a dataset the ledger
    once held) is never given; ``set-budget`` itself is refused."""
    home, req = dp_home(tmp_path)
    assert release(home, req).returncode == 0
    from privrelease.core.store import open_store

    with open_store(home / "privrelease.duckdb").write() as con:
        con.execute("DELETE FROM ledger")
    r = release(home, req)
    assert r.returncode == 3 and "has no entries" in r.stderr and "set-budget" not in r.stderr
    r = run(home, "ledger", "set-budget", "census", "--epsilon", "10", "--delta", "1e-5")
    assert r.returncode == 3 and "rolled back" in r.stderr


def test_lost_anchors_are_said_and_recorded_never_accepted_silently(tmp_path):
    """The anchors file deleted: refused with its own message (exit 3); ``accept-rollback --without-anchors`` records
    it on the ledger and anchors the ledger anew."""
    home, req = dp_home(tmp_path)
    assert release(home, req).returncode == 0
    found = Ledger(home / "privrelease.duckdb").anchors.written
    assert not found.is_relative_to(home)  # outside the home by default
    found.unlink()
    r = release(home, req)
    assert r.returncode == 3 and "anchors file" in r.stderr and "is missing" in r.stderr
    assert run(home, "ledger", "accept-rollback").returncode == 2
    r = run(home, "ledger", "accept-rollback", "--without-anchors")
    assert r.returncode == 0 and "anchored anew" in r.stdout
    assert release(home, req).returncode == 0 and spent(home) == 2.0
    history = json.loads(run(home, "ledger", "history", "--json").stdout)
    assert any(e["status"] == "rollback" and e["detail"]["anchors"] == "lost" for e in history)


def test_an_auditors_signed_line_catches_a_rollback_when_the_anchors_cannot(tmp_path):
    """``ledger anchor --print`` gives the head as a signed line; the auditor's ``verify --anchor LINE`` catches a
    rollback that the anchors file, emptied, no longer does (the weakened variant passes without the line), and a
    line changed after printing is refused."""
    home, req = dp_home(tmp_path)
    assert release(home, req).returncode == 0
    shutil.copy(home / "privrelease.duckdb", tmp_path / "old.duckdb")
    assert release(home, req).returncode == 0
    line = run(home, "ledger", "anchor", "--print").stdout.strip()
    assert line.startswith("privrelease-anchor seq=6 ")
    public = run(home, "ledger", "anchor", "--public-key").stdout.strip()
    assert f"key={public} " in line
    shutil.copy(tmp_path / "old.duckdb", home / "privrelease.duckdb")
    shutil.rmtree(max((home / "releases" / "census").iterdir(), key=lambda p: p.stat().st_mtime))  # its release gone too
    Ledger(home / "privrelease.duckdb").anchors.written.write_text("")  # and the anchors emptied
    assert run(home, "ledger", "verify").returncode == 0  # weakened: nothing left to catch it
    r = run(home, "ledger", "verify", "--anchor", line)
    assert r.returncode == 3 and "entry 6" in r.stderr
    forged = line.replace("seq=6", "seq=5")
    r = run(home, "ledger", "verify", "--anchor", forged)
    assert r.returncode == 2 and "signature does not check out" in r.stderr


def test_anchors_are_private_and_hold_each_entry_whole(tmp_path):
    home, req = dp_home(tmp_path)
    assert release(home, req).returncode == 0
    ledger = Ledger(home / "privrelease.duckdb")
    path = ledger.anchors.written
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    marks = ledger.anchors.read()
    assert [m["seq"] for m in marks] == [e.seq for e in ledger.entries()]
    assert all(m["entry"]["hash"] == m["hash"] for m in marks)
    assert not os.path.exists(home / "anchors")


def test_info_says_where_the_anchors_are_and_warns_of_what_a_copy_would_carry(tmp_path, monkeypatch):
    home, req = dp_home(tmp_path)
    (home / "data").chmod(0o700)  # the steward's copy of the source, made private as the guide says
    (home / "data" / "census.csv").chmod(0o600)
    shown = run(home, "info")
    assert shown.returncode == 0 and "ledger_anchors" in shown.stdout and "warning" not in shown.stderr
    (home / "data").chmod(0o755)
    (home / "data" / "census.csv").chmod(0o644)
    monkeypatch.setenv("PRIVRELEASE_LEDGER_ANCHORS", str(home / "anchors" / "ledger.anchors"))
    said = run(home, "info").stderr
    assert "anchors" in said and "lie inside the home" in said
    assert f"{home / 'data'} is mode 755" in said and f"{home / 'data' / 'census.csv'} is mode 644" in said
