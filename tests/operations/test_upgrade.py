"""Upgrades (#51 case 6), as the operator types them, from a home the previous main wrote with its own code: the new
privrelease reads and verifies it but writes nothing until ``privrelease upgrade``, which takes a backup, records the
upgrade on the ledger and moves the anchors out of the home; the previous main still runs on the upgraded home, and a
home of a newer schema is refused whole in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

from privrelease.core.datasets.demo import census
from privrelease.core.store import open_store
from tests.conftest import REPO
from tests.ledger.test_ledger_operations import AGGREGATE, spent
from tests.support.helpers import typed as run

PREVIOUS_MAIN = "26d77c5"  # the last main whose homes are at schema 1 (no recorded schema, anchors inside the home)


def previous_main(tmp_path: Path) -> Path:
    """The previous main's code, from this repository's history (not a skip: a clone without it is a broken CI)."""
    code = tmp_path / "previous"
    code.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", PREVIOUS_MAIN], capture_output=True, check=True).stdout
    (tmp_path / "previous.tar").write_bytes(archive)
    with tarfile.open(tmp_path / "previous.tar") as t:
        t.extractall(code, filter="tar")
    return code


def old(code: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    environ |= {"PRIVRELEASE_HOME": str(home), "PYTHONPATH": str(code)}
    command = [sys.executable, "-c", "from cli.main import command; command()", *args]  # its layout: top-level cli
    return subprocess.run(command, env=environ, capture_output=True, text=True, timeout=300, cwd=code)


def test_an_upgrade_from_the_previous_main_and_back(tmp_path: Path):
    code = previous_main(tmp_path)
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    census(300).to_csv(home / "data" / "census.csv", index=False)
    request = tmp_path / "count.yaml"
    request.write_text(yaml.safe_dump({"dataset": "census", "mechanism": {"name": "aggregate", "params": AGGREGATE}}))
    source = str(home / "data" / "census.csv")
    for args in (
        ["dataset", "add", "census", "--source", source, *"--format csv --unit record --purpose dp".split()],
        ["ledger", "set-budget", "census", "--epsilon", "10", "--delta", "1e-5"],
        ["release", str(request), "--quiet"],
    ):
        r = old(code, home, *args)
        assert r.returncode == 0, r.stderr
    assert (home / "anchors" / "ledger.anchors").exists()  # schema 1: the anchors inside the home

    refused = run(home, "release", str(request))
    assert refused.returncode == 2 and "schema 1" in refused.stderr and "privrelease upgrade" in refused.stderr
    assert run(home, "ledger", "verify").returncode == 0 and spent(home) == 1.0  # read, not written

    r = run(home, "upgrade", "--backup", str(tmp_path / "before-upgrade"))
    assert r.returncode == 0, r.stderr
    assert "from schema 1 to 2" in r.stdout and "the anchors moved out of the home" in r.stdout
    assert (tmp_path / "before-upgrade" / "backup.json").exists()
    assert not (home / "anchors" / "ledger.anchors").exists() and (home / "anchors" / "ledger.anchors.moved").exists()
    assert (home / "data" / "census.csv").stat().st_mode & 0o777 == 0o600
    history = json.loads(run(home, "ledger", "history", "--json").stdout)
    assert history[-1]["status"] == "upgrade" and history[-1]["detail"]["from"] == 1
    assert run(home, "release", str(request), "--quiet").returncode == 0 and spent(home) == 2.0
    assert "nothing to upgrade" in run(home, "upgrade").stdout

    back = old(code, home, "release", str(request), "--quiet")  # the previous main on the upgraded home
    assert back.returncode == 0, back.stderr
    assert run(home, "ledger", "verify").returncode == 0 and spent(home) == 3.0

    with open_store(home / "privrelease.duckdb").write() as con:  # a home a newer privrelease wrote
        con.execute("UPDATE meta SET value = '3' WHERE key = 'schema'")
    for args in (["ledger", "totals"], ["release", str(request)]):
        r = run(home, *args)
        assert r.returncode == 2 and "newer privrelease (schema 3)" in r.stderr and len(r.stderr.strip().splitlines()) == 1
