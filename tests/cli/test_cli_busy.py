"""The ``privrelease`` command while another process holds the home's database (issue #39's fifth attack,
L1: it said "internal error (IOException); this is a bug")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from privrelease.core import settings
from tests.cli.test_cli import run

HOLD = "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(600)"


def test_a_database_held_by_another_process_is_named_busy_not_a_bug(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    database = home / "privrelease.duckdb"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(database)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        r = run(home, "dataset", "list", env={settings.DB_WAIT: "1"})
    finally:
        holder.kill()
        holder.wait()
    assert r.returncode == 2 and r.stderr == (
        f"error: the database {database} is busy: another process ({Path(sys.executable).resolve().name}, PID {holder.pid}) "
        "holds it (a command, the gate or a release using it), and it was not let go within 1 s; try again when that "
        "process is done\n"
    ), r.stderr
    assert run(home, "dataset", "list").returncode == 0  # let go: the same command works
