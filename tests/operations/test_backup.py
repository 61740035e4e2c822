"""``privrelease backup`` and ``restore`` (#51), as the operator types them: a copy taken while releases run holds no
charge half-way, is its owner's only and never holds the key; it restores at another path and on another host
(another hostname, no anchors but the ones brought along) with every chain, registration and release file
verified; a backup older than the anchors is refused, or restored with the rollback recorded and the lost
charges kept spent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from privrelease.core.datasets.demo import posts
from privrelease.core.ledger.ledger import Ledger
from privrelease.core.privacy.budget import Budget
from tests.cli.test_cli import EXE
from tests.cli.test_cli_interrupt import DPNE
from tests.ledger.test_ledger_operations import dp_home, release, spent
from tests.support.helpers import register
from tests.support.helpers import typed as run


def backup(home: Path, folder: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return run(home, "backup", str(folder), env=env)


def files_of(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def test_a_backup_is_private_complete_and_keyless(tmp_path: Path):
    home, request = dp_home(tmp_path)
    assert release(home, request).returncode == 0
    r = backup(home, tmp_path / "b")
    assert r.returncode == 0, r.stderr
    assert "the ledger at entry #4" in r.stdout and "not in it: the ledger key" in r.stdout
    manifest = json.loads((tmp_path / "b" / "backup.json").read_text())
    key = (home / "keys" / "ledger.key").read_text().strip()
    for path in [tmp_path / "b", *(tmp_path / "b").rglob("*")]:
        assert path.stat().st_mode & 0o777 == (0o700 if path.is_dir() else 0o600), path
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
    assert {"privrelease.duckdb", "ledger.jsonl"} <= set(manifest["files"])
    assert any(name.startswith("home/releases/census/") for name in manifest["files"])
    assert not any(name.startswith(("home/keys", "home/anchors", "home/staging")) for name in manifest["files"])
    assert manifest["ledger_head"][0] == 4 and len(manifest["key_sha256"]) == 64
    assert backup(home, tmp_path / "b").returncode == 2  # not into a folder that holds files
    inside = backup(home, home / "backups")
    assert inside.returncode == 2 and "inside the home" in inside.stderr


def test_a_home_moved_aside_restores_as_the_guide_says(tmp_path: Path):
    """The operator's guide: the damaged home moved aside, then ``restore`` into its place. Without the key (it moved
    aside with the home) and with a --key that names no file, a clear refusal that restores nothing; with the key,
    the restored home has the ledger it had."""
    home, request = dp_home(tmp_path)
    assert release(home, request).returncode == 0
    assert backup(home, tmp_path / "b").returncode == 0
    aside = home.with_name("home.damaged")
    home.rename(aside)
    r = run(home, "restore", str(tmp_path / "b"))
    assert r.returncode == 2 and "Give it with --key FILE" in r.stderr and "Nothing was restored" in r.stderr
    r = run(home, "restore", str(tmp_path / "b"), "--key", str(tmp_path / "no-such.key"))
    assert r.returncode == 2 and "no such file" in r.stderr and "this is a bug" not in r.stderr
    assert not (home / "privrelease.duckdb").exists()
    r = run(home, "restore", str(tmp_path / "b"), "--key", str(aside / "keys" / "ledger.key"))
    assert r.returncode == 0, r.stderr
    assert run(home, "ledger", "verify", "--files").returncode == 0


def test_a_backup_taken_while_releases_run_restores_elsewhere_whole(tmp_path: Path):
    """Backups taken while DPNE releases run back to back: none holds a charge without its outcome, each file checks
    out, and each restores into a new home at another path (a drill, with the rollback it is, relative to the
    still-running ledger, recorded) with the chain, the registrations and every release's files verified."""
    home, _ = dp_home(tmp_path)
    register(home, posts(300), "posts", unit="user:user", purpose="dp")
    Ledger(home / "privrelease.duckdb").set_budget("posts", Budget(100.0, 1e-4))
    request = tmp_path / "posts.yaml"
    request.write_text(yaml.safe_dump({"dataset": "posts", "mechanism": {"name": "dpne", "params": DPNE}}))
    stop = threading.Event()

    def releases() -> None:  # a worker's releases: processes of their own, as they would be
        while not stop.is_set():
            subprocess.run(
                [EXE, "release", str(request), "--quiet"], env=os.environ | {"PRIVRELEASE_HOME": str(home)}, capture_output=True
            )

    worker = threading.Thread(target=releases)
    worker.start()
    try:
        taken = []
        for i in range(3):
            deadline = time.monotonic() + 600
            while posts_charges(home) < i + 1 and time.monotonic() < deadline:  # each backup while releases go on
                time.sleep(0.2)
            r = backup(home, tmp_path / f"b{i}")
            assert r.returncode == 0, r.stderr
            taken.append(tmp_path / f"b{i}")
    finally:
        stop.set()
        worker.join()
    for i, folder in enumerate(taken):
        entries = [json.loads(line) for line in (folder / "ledger.jsonl").read_text().splitlines()]
        charged = {e["release_id"] for e in entries if e["status"] == "reserved"}
        settled = {e["release_id"] for e in entries if e["status"] in ("published", "failed")}
        assert charged == settled  # no charge half-way
        target = tmp_path / f"restored{i}"
        target.mkdir()
        r = run(target, "restore", str(folder), "--key", str(home / "keys" / "ledger.key"), "--accept-rollback", "--drill")
        assert r.returncode == 0, r.stderr
        assert "verified:" in r.stdout and "a drill" in r.stdout
        charges = [e for e in entries if e["status"] == "reserved" and e["dataset"] == "posts"]
        assert len(charges) >= i + 1
        assert posts_spent(target) >= sum(e["epsilon"] for e in charges) - 1e-9
        drilled = release(target, request)
        assert drilled.returncode == 3 and "a restore drill" in drilled.stderr  # a drill's copy never spends
    assert release(home, request).returncode == 0  # the ledger stays where it was


def posts_charges(home: Path) -> int:
    return sum(
        1 for e in Ledger(home / "privrelease.duckdb").entries_unchecked() if e.dataset == "posts" and e.status == "reserved"
    )


def posts_spent(home: Path) -> float:
    totals = json.loads(run(home, "ledger", "totals", "--json").stdout)
    return next((t["spent"]["epsilon"] for t in totals if t["dataset"] == "posts"), 0.0)


def test_a_restore_on_another_host_needs_the_anchors_brought_along(tmp_path: Path):
    """On another host (another hostname, another state folder: no anchors of this ledger there), a restore without
    anchors is refused; with the old host's anchors file it is checked, and with them a newer ledger's lost entries
    are carried; a dataset refresh then reads its source from the new home, not the old one's path."""
    home, request = dp_home(tmp_path)
    assert release(home, request).returncode == 0
    assert backup(home, tmp_path / "b").returncode == 0
    anchors = Ledger(home / "privrelease.duckdb").anchors.written
    key = tmp_path / "ledger.key"
    shutil.copy(home / "keys" / "ledger.key", key)
    elsewhere = {"XDG_STATE_HOME": str(tmp_path / "other-state")}
    target = tmp_path / "other-host-home"
    target.mkdir()

    def restore(*extra: str) -> subprocess.CompletedProcess:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")} | elsewhere
        environ["PRIVRELEASE_HOME"] = str(target)
        command = [EXE, "restore", str(tmp_path / "b"), "--key", str(key), *extra]
        return subprocess.run(
            ["unshare", "--uts", "sh", "-c", 'hostname other-host && exec "$@"', "-", *command],
            env=environ,
            capture_output=True,
            text=True,
            timeout=300,
        )

    r = restore()
    assert r.returncode == 2 and "no anchors of this ledger were found" in r.stderr and "--anchors FILE" in r.stderr
    assert not (target / "privrelease.duckdb").exists()
    r = restore("--anchors", str(anchors))
    assert r.returncode == 0, r.stderr
    shutil.rmtree(home)  # the old host is gone
    refreshed = run(target, "dataset", "refresh", "census", env=elsewhere)
    assert refreshed.returncode == 0, refreshed.stderr
    assert release(target, request, env=elsewhere).returncode == 0 and spent(target, env=elsewhere) == 2.0
    history = json.loads(run(target, "ledger", "history", "--json", env=elsewhere).stdout)
    assert any(e["status"] == "restore" for e in history)


def test_a_ledger_restored_elsewhere_is_retired_where_it_was(tmp_path: Path):
    """A restore at another path moves the ledger: the home it was backed up from refuses every charge from then on
    (reads still work), so the remaining budget is never spent in two places; the restored home charges."""
    home, request = dp_home(tmp_path)
    assert release(home, request).returncode == 0
    assert backup(home, tmp_path / "b").returncode == 0
    target = tmp_path / "moved"
    target.mkdir()
    r = run(target, "restore", str(tmp_path / "b"), "--key", str(home / "keys" / "ledger.key"))
    assert r.returncode == 0 and "the ledger now lives here" in r.stdout
    old = release(home, request)
    assert old.returncode == 3 and "is retired" in old.stderr and str(target) in old.stderr
    assert spent(home) == 1.0 and run(home, "ledger", "verify").returncode == 0
    assert release(target, request).returncode == 0 and spent(target) == 2.0


def test_an_older_backup_is_refused_or_restored_with_the_lost_charges_kept(tmp_path: Path):
    home, request = dp_home(tmp_path)
    assert backup(home, tmp_path / "b").returncode == 0
    assert release(home, request).returncode == 0 and release(home, request).returncode == 0
    key = tmp_path / "ledger.key"
    shutil.copy(home / "keys" / "ledger.key", key)
    shutil.rmtree(home)
    home.mkdir()
    r = run(home, "restore", str(tmp_path / "b"), "--key", str(key))
    assert r.returncode == 2 and "older than the ledger was" in r.stderr and "Nothing was restored" in r.stderr
    assert not (home / "privrelease.duckdb").exists() and not (home / "keys").exists()
    r = run(home, "restore", str(tmp_path / "b"), "--key", str(key), "--accept-rollback")
    assert r.returncode == 0 and "rollback accepted: 4 entries" in r.stdout
    assert spent(home) == 2.0  # both lost charges stay spent


@pytest.mark.parametrize(
    "damage,words",
    [("change", "was changed after the backup was taken"), ("remove", "lacks")],
)
def test_a_damaged_backup_is_refused_whole(tmp_path: Path, damage: str, words: str):
    home, _ = dp_home(tmp_path)
    assert backup(home, tmp_path / "b").returncode == 0
    victim = next(p for p in (tmp_path / "b" / "home").rglob("*.parquet"))
    victim.write_bytes(b"x") if damage == "change" else victim.unlink()
    target = tmp_path / "t"
    target.mkdir()
    r = run(target, "restore", str(tmp_path / "b"), "--key", str(home / "keys" / "ledger.key"))
    assert r.returncode == 2 and words in r.stderr and not (target / "privrelease.duckdb").exists()


def test_verify_files_names_a_changed_or_missing_release_file_and_get_says_so(tmp_path: Path):
    home, request = dp_home(tmp_path)
    assert release(home, request).returncode == 0
    folder = next((home / "releases" / "census").iterdir())
    table = next(folder.glob("*.csv"))
    table.write_text(table.read_text()[:10])
    r = run(home, "ledger", "verify", "--files")
    assert r.returncode == 3 and f"{folder.name}: {table.name} was changed" in r.stderr
    table.unlink()
    r = run(home, "ledger", "verify", "--files")
    assert r.returncode == 3 and f"{table.name} is missing" in r.stderr
    got = run(home, "release", "get", folder.name, "--out", str(tmp_path / "out"))
    assert got.returncode == 2 and "no longer in its folder" in got.stderr and "this is a bug" not in got.stderr


def test_a_postgresql_ledger_backs_up_with_pg_dump_and_restores_into_an_empty_database(tmp_path, monkeypatch, pg_url):
    """On PostgreSQL the backup holds pg_dump's copy of privrelease's schema (the password never on a command line);
    the restore refuses a database that holds entries and restores into an empty one, checked as on DuckDB."""
    import uuid

    import psycopg

    monkeypatch.setenv("PRIVRELEASE_LEDGER_URL", pg_url)
    home, request = dp_home(tmp_path)
    assert release(home, request).returncode == 0
    r = backup(home, tmp_path / "b")
    assert r.returncode == 0, r.stderr
    assert "ledger.pgdump" in json.loads((tmp_path / "b" / "backup.json").read_text())["files"]
    target = tmp_path / "target"
    target.mkdir()
    held = run(target, "restore", str(tmp_path / "b"), "--key", str(home / "keys" / "ledger.key"), "--drill")
    assert held.returncode == 2 and "already holds" in held.stderr
    name = f"t{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as con:
        con.execute(f"CREATE DATABASE {name}")
    empty = f"{pg_url.rsplit('/', 1)[0]}/{name}"
    monkeypatch.setenv("PRIVRELEASE_LEDGER_URL", empty)
    r = run(target, "restore", str(tmp_path / "b"), "--key", str(home / "keys" / "ledger.key"), "--drill")
    assert r.returncode == 0, r.stderr
    assert spent(target) == 1.0 and run(target, "ledger", "verify", "--files").returncode == 0
