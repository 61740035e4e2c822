"""No charge for a fault (#51 case 3), each fault made for real (a small tmpfs, a read-only bind mount, another
filesystem) under ``privrelease release`` as typed: what publishing needs is checked before the charge; a fault
after the draw keeps the draw sealed, so ``release --resume`` (or ``ledger recover``) publishes that very draw and
nothing is charged twice; every such error names the path and the cause, exits 2, and never calls itself a bug."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from privrelease.core.environment import Unwritable
from privrelease.core.ledger.ledger import FAILED, PUBLISHED, Ledger
from privrelease.core.release import charged, pipeline
from privrelease.core.release import publish as _publish
from privrelease.core.release.home import Home
from privrelease.core.release.spec import load
from tests.cli.test_cli import EXE, run
from tests.conftest import REPO
from tests.ledger.test_ledger_operations import dp_home, rows, spent


@contextlib.contextmanager
def mounted(*args: str, target: Path):
    """``mount ARGS TARGET`` for the test's length (root only, as tests run)."""
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", *args, str(target)], check=True)
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


@contextlib.contextmanager
def read_only(folder: Path):
    """``folder`` made read-only in place: a read-only bind mount of itself."""
    with mounted("--bind", str(folder), target=folder):
        subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)
        yield folder


def refused_before_the_charge(home: Path, r: subprocess.CompletedProcess, before: int, *words: str) -> None:
    assert r.returncode == 2, r.stderr
    assert all(w in r.stderr for w in words), r.stderr
    assert "Nothing was charged" in r.stderr and "this is a bug" not in r.stderr
    assert rows(home) == before


def test_a_full_disk_refuses_before_the_charge(tmp_path: Path):
    home, request = dp_home(tmp_path)
    with mounted("-t", "tmpfs", "-o", "size=16m", "tmpfs", target=tmp_path / "disk") as disk:
        for name in ("releases", "staging"):
            (disk / name).mkdir()
            (home / name).symlink_to(disk / name)
        before = rows(home)
        r = run(home, "release", str(request))
        refused_before_the_charge(home, r, before, "less free space than a release like this may need", "MB kept free")
        assert "MB free" not in r.stderr  # how much is free moves with other datasets' sizes: never said


def test_a_read_only_releases_folder_refuses_before_the_charge(tmp_path: Path):
    home, request = dp_home(tmp_path)
    (home / "releases").mkdir()
    with read_only(home / "releases"):
        before = rows(home)
        refused_before_the_charge(home, run(home, "release", str(request)), before, "the filesystem is read-only", "releases")


def test_releases_on_another_filesystem_refuse_before_the_charge(tmp_path: Path):
    home, request = dp_home(tmp_path)
    with mounted("-t", "tmpfs", "-o", "size=256m", "tmpfs", target=home / "releases"):
        before = rows(home)
        refused_before_the_charge(home, run(home, "release", str(request)), before, "different filesystems")


def _paused(home: Path, request: Path, step: str, env: dict | None = None) -> subprocess.Popen:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    environ |= {"PRIVRELEASE_HOME": str(home), "PRIVRELEASE_TEST_MODE": "1", "PRIVRELEASE_FAULT": f"pause:{step}"} | (env or {})
    p = subprocess.Popen([EXE, "release", str(request)], cwd=REPO, env=environ, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if f"paused at {step}" in line:
            return p
    raise AssertionError(f"the release never paused at {step}: {p.communicate(timeout=60)}")


@pytest.mark.parametrize("finish", ["release --resume", "ledger recover"])
def test_a_publish_the_machine_stops_is_finished_from_its_sealed_draw(tmp_path: Path, finish: str):
    """Staged, then the releases folder goes read-only before the rename: the charge stands, the draw is kept sealed
    (its owner's only), the same request again is refused before a second charge, and once the folder is writable
    the sealed draw is published without a new charge or a new draw."""
    home, request = dp_home(tmp_path)
    doc = yaml.safe_load(request.read_text()) | {"release_id": "r1"}
    request.write_text(yaml.safe_dump(doc))
    (home / "releases").mkdir()
    p = _paused(home, request, "staged")
    with read_only(home / "releases"):
        p.send_signal(signal.SIGUSR1)
        err = p.communicate(timeout=300)[1]
        assert p.returncode == 2, err
        assert "read-only" in err and "stands" in err and "kept sealed" in err and "--resume r1" in err
        assert "this is a bug" not in err
        ledger = Ledger(home / "privrelease.duckdb")
        assert ledger.status("r1") == FAILED and json.loads(ledger.entries()[-1].detail)["sealed"] is True
        kept = _publish.sealed(home / "staging", "census", "r1")
        assert kept is not None and (home / "staging").stat().st_mode & 0o777 == 0o700
        request.write_text(yaml.safe_dump({k: v for k, v in doc.items() if k != "release_id"}))  # the same, retried
        before = rows(home)
        retry = run(home, "release", str(request))
        assert retry.returncode == 2 and "--resume r1" in retry.stderr and rows(home) == before
        again = run(home, "release", "--resume", "r1")
        assert again.returncode == 2 and "read-only" in again.stderr and "still sealed" in again.stderr
    done = run(home, *finish.split(), *(["r1"] if finish == "release --resume" else []))
    assert done.returncode == 0, done.stderr
    assert Ledger(home / "privrelease.duckdb").status("r1") == PUBLISHED and spent(home) == 1.0
    manifest = json.loads((home / "releases" / "census" / "r1" / "manifest.json").read_text())
    assert manifest["ledger"]["seq"] == 3  # the draw charged by entry #3 (#1 the registration, #2 the cap), published as drawn
    assert _publish.sealed(home / "staging", "census", "r1") is None
    checked = run(home, "ledger", "verify", "--files")
    assert checked.returncode == 0 and "release files ok" in checked.stdout


def test_a_disk_filled_after_the_charge_cannot_lose_the_draw(tmp_path: Path):
    """The room a release may need is held from before its charge: a disk filled to the last byte after the charge
    still takes the release."""
    home, request = dp_home(tmp_path)
    with mounted("-t", "tmpfs", "-o", "size=24m", "tmpfs", target=tmp_path / "disk") as disk:
        for name in ("releases", "staging"):
            (disk / name).mkdir()
            (home / name).symlink_to(disk / name)
        p = _paused(home, request, "charge", {"PRIVRELEASE_MIN_FREE_MB": "1"})
        subprocess.run(["dd", "if=/dev/zero", f"of={disk / 'filler'}", "bs=1M"], capture_output=True)
        assert shutil.disk_usage(disk).free < 2**20
        p.send_signal(signal.SIGUSR1)
        err = p.communicate(timeout=300)[1]
        assert p.returncode == 0, err
    assert spent(home) == 1.0


def test_a_write_failing_while_staging_says_so_and_what_the_charge_became(tmp_path: Path, monkeypatch):
    """Past the room held (an estimate exceeded), the disk fills while the release is written: the charge stands and
    says so, nothing is published, and the error is the machine's (exit 2), not a bug."""
    home, request = dp_home(tmp_path)
    monkeypatch.setenv("PRIVRELEASE_HOME", str(home))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(home / "staging" / "census"))

    monkeypatch.setattr(_publish, "stage", full)
    with pytest.raises(Unwritable) as said:
        pipeline.release(Home(home), load(request))
    words = str(said.value)
    assert "the disk is full" in words and "stands" in words and "nothing was published" in words
    ledger = Ledger(home / "privrelease.duckdb")
    outcome = ledger.entries()[-1]
    assert outcome.status == FAILED and json.loads(outcome.detail)["sealed"] is False


def test_a_read_only_copy_of_the_home_can_be_verified_and_read(tmp_path: Path):
    """An auditor's copy on a read-only filesystem: verify and history work; a release is refused as the machine's
    fault (exit 2), not a bug."""
    home, request = dp_home(tmp_path)
    assert run(home, "release", str(request), "--quiet").returncode == 0
    with read_only(home):
        verified = run(home, "ledger", "verify")
        assert verified.returncode == 0, verified.stderr
        assert run(home, "ledger", "history").returncode == 0
        r = run(home, "release", str(request))
        assert r.returncode == 2 and "read-only" in r.stderr and "this is a bug" not in r.stderr


def test_the_look_for_a_sealed_twin_reads_the_ledger_once_however_long_the_history(tmp_path: Path, monkeypatch):
    """Before its charge a release looks for an identical request whose draw waits sealed (the retry refused above):
    one read of the dataset's entries, however many identical releases were published before. It read each one's
    status on its own, a ledger read apiece (2.2 s of a release after 200 of them, bench/RESULTS.md)."""
    home, request = dp_home(tmp_path, "home")
    for _ in range(4):
        pipeline.release(Home(home), load(request))
    claim = pipeline.ReleaseJob(load(request)).check(Home(home))
    reads = []
    real = Ledger._read

    def counted(self):
        reads.append(1)
        return real(self)

    monkeypatch.setattr(Ledger, "_read", counted)
    charged.refuse_a_second_draw(Home(home), claim)
    assert len(reads) == 1
