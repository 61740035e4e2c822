"""Releases under kill -9: at every step boundary of the release pipeline, then the next command and a retry.

Each case kills a real ``privrelease release`` process (SIGKILL, via the test-mode fault hook) after
one step, then checks what an operator would: the charge has an outcome once the next command has
run, staging is empty, ``releases/`` holds only complete releases, and a retry with the same release
id never draws a second time under the first charge.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from privrelease.core.faults import STEPS
from privrelease.core.ledger.ledger import FAILED, PUBLISHED, RESERVED, ChargeRequest, Ledger
from privrelease.core.privacy.budget import Budget
from privrelease.core.release import charged
from privrelease.core.release.home import Home
from tests.conftest import REPO
from tests.flows.test_release_flow import cli
from tests.mechanisms.test_outliers import planted
from tests.support.helpers import dp, register

PARAMS = {"query": "count", "columns": ["a", "b"], "k": 3, "r": 0.1, "epsilon": 1.0, "delta": 1e-4,
          "standardize": {c: {"mean": 0.0, "std": 1.0} for c in "abcde"}}  # fmt: skip


def release_process(home: Path, request: Path, fault: str) -> subprocess.CompletedProcess:
    """``privrelease release`` in its own process, run directly (no Prefect server configured)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "PRIVRELEASE_FAULT"))}
    env.update(PRIVRELEASE_HOME=str(home), PRIVRELEASE_TEST_MODE="1", PRIVRELEASE_FAULT=fault, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "privrelease.cli.main", "release", str(request)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def dp_home(home: Path, test_mode, tmp_path: Path) -> tuple[Path, Path]:
    """A home with a small DP dataset under a cap, and a seeded request with a fixed release id."""
    register(home, planted(), "sessions", "record", "dp")
    Ledger(home / "privrelease.duckdb").set_budget("sessions", Budget(3.0, 1e-3))
    request = tmp_path / "request.yaml"
    doc = {"dataset": "sessions", "release_id": "r1", "seed": 7, "mechanism": {"name": "outliers", "params": PARAMS}}
    request.write_text(yaml.safe_dump(doc))
    return home, request


def complete_releases(home: Path) -> list[str]:
    """The release folders, each checked complete: a manifest whose every file is present with its digest."""
    names = []
    for folder in sorted((home / "releases").glob("*/*")):
        manifest = json.loads((folder / "manifest.json").read_text())
        for name, digest in manifest["files"].items():
            assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest
        assert sorted(p.name for p in folder.iterdir()) == sorted([*manifest["files"], "manifest.json"])
        names.append(folder.name)
    assert not [p for p in (home / "releases").rglob(".*")], "nothing hidden under releases/"
    return names


def staged(home: Path) -> list[Path]:
    return [p for p in (home / "staging").glob("*/*")] if (home / "staging").exists() else []


def statuses(home: Path) -> list[str]:
    return [e.status for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id == "r1"]


# After which step the process dies, and what the ledger says of the release once the next command ran.
# Killed once its release was staged (drawn, written, sealed, not yet renamed), the recovery publishes that draw.
OUTCOME = {"prepare": [], "load": [], "charge": [RESERVED, FAILED], "privatize": [RESERVED, FAILED],
           "staged": [RESERVED, FAILED, PUBLISHED], "publish": [RESERVED, PUBLISHED], "settle": [RESERVED, PUBLISHED]}  # fmt: skip


@pytest.mark.parametrize("step", STEPS)
def test_kill_at_each_step_boundary(dp_home, step, capsys):
    home, request = dp_home
    killed = release_process(home, request, step)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    if step == "staged":
        assert len(staged(home)) == 1  # the drawn result was staged, outside releases/, when the process died
    code, out, err = cli(capsys, "ledger", "verify")  # the next command that touches the ledger
    assert code == 0, err
    assert statuses(home) == OUTCOME[step]
    if FAILED in OUTCOME[step]:
        (failed,) = [e for e in Ledger(home / "privrelease.duckdb").entries() if e.status == FAILED]
        assert json.loads(failed.detail) == {"reason": "interrupted"}
        assert "settled as failed" in err
    assert "pending" not in out and staged(home) == []
    published = OUTCOME[step][-1:] == [PUBLISHED]
    assert complete_releases(home) == (["r1"] if published else [])
    before = (home / "releases" / "sessions" / "r1" / "manifest.json").read_text() if published else None

    code, out, err = cli(capsys, "release", str(request))  # the retry, through the same command line
    if OUTCOME[step] == []:  # died before the charge: the retry is the first charge
        assert code == 0, err
        assert statuses(home) == [RESERVED, PUBLISHED]
    elif published:  # the drawn result was published: the retry returns it, nothing drawn or charged
        assert code == 0 and "already published" in out
        assert (home / "releases" / "sessions" / "r1" / "manifest.json").read_text() == before
        assert statuses(home) == OUTCOME[step]
    else:  # charged, not published: refused, never a second draw under the same charge
        assert code == 2
        assert "was charged before and did not publish (its ledger status is failed)" in err
        assert statuses(home) == OUTCOME[step]
    assert complete_releases(home) == ([] if code == 2 else ["r1"])
    assert staged(home) == []
    assert [e.status for e in Ledger(home / "privrelease.duckdb").entries()].count(RESERVED) == 1  # one charge


def test_a_running_release_stays_pending_and_verify_reports_it(dp_home, capsys):
    """A charge whose process still runs is not settled by another command; verify lists it with its age."""
    home, _ = dp_home
    ledger = Ledger(home / "privrelease.duckdb")
    ledger.reserve(ChargeRequest("sessions", "live", "dp", dp(0.5), "outliers", {}, {}))  # this process
    code, out, _ = cli(capsys, "ledger", "verify")
    assert code == 0 and re.search(
        r"pending: release live of sessions \(entry #3\) charged \d+ s ago, its process still "
        "running",
        out,
    ), out
    assert [e.status for e in ledger.entries()] == ["registered", "cap", RESERVED]
    code, out, _ = cli(capsys, "ledger", "recover")
    assert code == 0 and "no interrupted release to settle" in out


def test_recovery_keeps_the_staging_of_a_release_that_charged_while_it_ran(dp_home, monkeypatch):
    """Another command's recovery reads the live charges, then a release charges and stages, then the
    recovery looks at the staging folder: the new folder must survive (it was deleted mid-write, which an
    eight-release run showed as a DuckDB IOException)."""
    home, _ = dp_home
    store = Home(home)
    pending = Ledger.pending

    def racing(self):
        live = pending(self)  # the recovery's view of the live charges ...
        Ledger(store.db).reserve(ChargeRequest("sessions", "late", "dp", dp(0.5), "outliers", {}, {}))
        (store.staging / "sessions" / "late.0a1b2c3d").mkdir(parents=True)  # ... then a release charges and stages
        return live

    monkeypatch.setattr(Ledger, "pending", racing)
    store.staging.mkdir()
    charged.recover(store)
    assert [p.name for p in staged(home)] == ["late.0a1b2c3d"]


def test_fault_hook_is_refused_outside_test_mode(dp_home, monkeypatch, capsys):
    home, request = dp_home
    doc = yaml.safe_load(request.read_text())
    doc.pop("seed")
    request.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("PRIVRELEASE_TEST_MODE", "0")
    monkeypatch.setenv("PRIVRELEASE_FAULT", "charge")
    code, _, err = cli(capsys, "release", str(request))
    assert code == 2 and err.strip() == "error: PRIVRELEASE_FAULT is a test hook, accepted only in test mode; unset it."
    monkeypatch.setenv("PRIVRELEASE_TEST_MODE", "1")
    monkeypatch.setenv("PRIVRELEASE_FAULT", "nowhere")
    code, _, err = cli(capsys, "release", str(request))
    assert code == 2 and "names a step boundary, one of prepare, load, charge" in err
    assert statuses(home) == []


def test_holder_liveness_by_pid_start_time_and_lease():
    """Alive while its process runs; dead once killed (even unreaped), for a reused pid, or past its lease."""
    from datetime import UTC, datetime, timedelta

    from privrelease.core.ledger import lease

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        doc = {"host": lease.socket.gethostname(), "pid": child.pid, "start": lease._start_time(child.pid), "lease_s": 60}
        now = datetime.now(UTC)
        holder = json.dumps(doc)
        assert lease.alive(holder, now.isoformat())
        assert not lease.alive(json.dumps({**doc, "start": doc["start"] + "0"}), now.isoformat())  # pid reused
        os.kill(child.pid, signal.SIGKILL)
        for _ in range(500):  # until the kernel has made it a zombie; it is not reaped yet
            if Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break
            time.sleep(0.01)
        else:
            pytest.fail("the killed child never became a zombie")
        assert not lease.alive(holder, now.isoformat())
    finally:
        child.kill()
        child.wait()
    assert not lease.alive(holder, now.isoformat())  # reaped: no such process
    elsewhere = json.dumps({**doc, "host": "another-host"})
    assert lease.alive(elsewhere, (now - timedelta(seconds=59)).isoformat())  # another host: its lease decides
    assert not lease.alive(elsewhere, (now - timedelta(seconds=61)).isoformat())


def test_eight_concurrent_releases_settle_only_their_own(dp_home, tmp_path, capsys):
    """Eight ``privrelease release`` processes at once against a cap for five: each runs recovery while the
    others hold live charges, and none is settled as interrupted; five publish, three are refused."""
    home, request = dp_home
    doc = yaml.safe_load(request.read_text())
    procs = []
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "PRIVRELEASE_FAULT"))}
    env.update(PRIVRELEASE_HOME=str(home), PRIVRELEASE_TEST_MODE="1", PYTHONPATH=str(REPO))
    for i in range(8):
        path = tmp_path / f"c{i}.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    **doc,
                    "release_id": f"c{i}",
                    "mechanism": {"name": "outliers", "params": {**PARAMS, "epsilon": 0.6, "noise": "smooth"}},
                }
            )
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "privrelease.cli.main", "release", str(path)],
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    codes = []
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        codes.append(proc.returncode)
        assert proc.returncode == 0 or (
            proc.returncode == 2
            and "spent 100% of the cap" in err
            and "No epsilon of this request fits: the cap has no epsilon left." in err
            and "the delta it needs" not in err  # refused at admission, it says no epsilon is left, not that delta binds
        ), err
    # the cap (3.0) holds five charges of 0.6, exactly: smooth counts are (eps, delta) parts, summed exactly
    assert sorted(codes) == [0] * 5 + [2] * 3
    entries = Ledger(home / "privrelease.duckdb").entries()
    assert [e.status for e in entries].count(RESERVED) == 5 and [e.status for e in entries].count(PUBLISHED) == 5
    assert FAILED not in [e.status for e in entries]
    assert len(complete_releases(home)) == 5 and staged(home) == []
    code, out, _ = cli(capsys, "ledger", "verify")
    assert code == 0 and "pending" not in out


def test_charts_render_in_turn_from_concurrent_releases(tmp_path: Path):
    """Releases in threads of one process (the several-homes trial does this) render their charts at
    once. matplotlib is not thread-safe: without ``privrelease.core.charts.RENDERING``, 5-7 of these 8 threads failed
    in mathtext's parser (a log axis's tick labels) in each of three trials. Each chart comes out whole,
    byte for byte the chart drawn alone."""
    import threading

    from privrelease.core.charts import Chart, render_chart

    chart = Chart(
        "c.png",
        "detection",
        [],
        {},
        kind="curve",
        axes=("users", "probability"),
        points={"weight 1": ([1, 10, 100, 1000], [0.0, 0.2, 0.9, 1.0])},
    )
    render_chart(chart, tmp_path / "alone.png")
    errors: list[str] = []

    def draw(i: int) -> None:
        for k in range(2):
            try:
                render_chart(chart, tmp_path / f"{i}-{k}.png")
            except Exception as exc:  # noqa: BLE001 - collected and shown by the assertion
                errors.append(repr(exc)[:200])

    threads = [threading.Thread(target=draw, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    alone = (tmp_path / "alone.png").read_bytes()
    assert all((tmp_path / f"{i}-{k}.png").read_bytes() == alone for i in range(8) for k in range(2))
