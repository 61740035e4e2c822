"""The ``privrelease`` command as a user runs it: a real process, real stdout/stderr, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import duckdb
import pytest

from tests.conftest import REPO
from tests.test_release_flow import write_case

EXE = str(Path(os.sys.executable).parent / "privrelease")


def run(home: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    environ.update({"PRIVRELEASE_HOME": str(home)}, **(env or {}))
    return subprocess.run([EXE, *args], cwd=REPO, env=environ, capture_output=True, text=True, timeout=300)


def test_ledger_commands(tmp_path: Path):
    home = tmp_path / "home"
    r = run(home, "ledger", "set-budget", "census", "--epsilon", "2", "--delta", "1e-6")
    assert r.returncode == 0 and "epsilon=2 delta=1e-06" in r.stdout
    r = run(home, "ledger", "set-budget", "census", "--epsilon", "-1", "--delta", "0")
    assert r.returncode == 2 and r.stderr.startswith("error: invalid budget: epsilon must be finite and >= 0")
    assert "Traceback" not in r.stderr
    history = json.loads(run(home, "ledger", "history", "--json").stdout)
    assert [(e["seq"], e["status"], e["epsilon"]) for e in history] == [(1, "cap", 2.0)]
    totals = json.loads(run(home, "ledger", "totals", "--json").stdout)
    assert totals == [{"dataset": "census", "cap": {"epsilon": 2.0, "delta": 1e-6}, "spent": {"epsilon": 0.0, "delta": 0.0},
                       "remaining": {"epsilon": 2.0, "delta": 1e-6}, "releases": 0, "published": 0, "failed": 0, "pending": 0,
                       "gdp": None}]  # fmt: skip
    assert "census" in run(home, "ledger", "totals").stdout
    assert "cap" in run(home, "ledger", "history", "--dataset", "census").stdout
    ok = run(home, "ledger", "verify")
    assert ok.returncode == 0 and "1 entries" in ok.stdout
    con = duckdb.connect(str(home / "privrelease.duckdb"))
    con.execute("UPDATE ledger SET epsilon = 200 WHERE seq = 1")
    con.close()
    bad = run(home, "ledger", "verify")
    assert bad.returncode == 3 and "FAILED at entry 1" in bad.stderr


def test_bad_spec_exits_2_with_one_paragraph_and_no_traceback(tmp_path: Path):
    spec = write_case(tmp_path / "case", mechanism__params__p=[0.5] * 9)
    r = run(tmp_path / "home", "release", str(spec))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: the release spec is invalid: mechanism.params: p must sum to 1")
    r = run(tmp_path / "home", "release", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "is not a file" in r.stderr


def test_release_in_a_real_process(prefect_server, tmp_path: Path):
    """Against the session's Prefect server; a validation failure shows no traceback on the console."""
    import prefect.settings

    env = {"PREFECT_API_URL": prefect.settings.PREFECT_API_URL.value()}
    good = write_case(tmp_path / "good")
    r = run(tmp_path / "home", "release", str(good), env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("release census-") and lines[1].startswith("folder ")
    assert (Path(lines[1].split(" ", 1)[1]) / "manifest.json").is_file()
    bad = write_case(tmp_path / "bad", mechanism__params__qi=["age", "no-such-column"])
    r = run(tmp_path / "home", "release", str(bad), env=env)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("error: the dataset failed")
    assert "Traceback" not in r.stderr


def test_internal_error_exits_1_without_details(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "privrelease.duckdb").write_text("this is not a database")
    r = run(home, "ledger", "history")
    assert r.returncode == 1 and r.stderr.startswith("internal error (") and "Traceback" not in r.stderr


def test_demo_in_a_fresh_home(tmp_path: Path):
    """The README's first command, as a newcomer runs it: a fresh home, its own temporary Prefect server."""
    home = tmp_path / "home"
    r = run(home, "demo", "--rows", "2000", env={"PREFECT_HOME": str(tmp_path / "prefect")})
    assert r.returncode == 0, r.stderr[-2000:]
    folder = Path(next(line for line in r.stdout.splitlines() if line.startswith("release folder:")).split(":", 1)[1].strip())
    assert (folder / "manifest.json").is_file() and (folder / "report.md").is_file()
