"""Ctrl-C on a real ``privrelease release`` process (#42): one line saying what became of the charge, exit 130.

Before the charge nothing is written; after it the charge stands (noise may have been drawn, so giving it
back could leak) and is recorded as failed. Interrupted in the middle of DPNE, DuckDB raises its own
``RuntimeError('Query interrupted')``, which used to read ``internal error (RuntimeError); this is a bug``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import yaml

from core.datasets.demo import census, posts
from core.ledger.ledger import Ledger
from core.privacy.budget import Budget
from tests.conftest import REPO
from tests.helpers import register, write_request
from tests.test_cli import EXE, run

DPNE = {"text_column": "text", "epsilon": 1.0, "delta": 1e-7, "T": 4, "delta0": 10, "tokenizer": "words"}


def _home(tmp_path: Path, users: int) -> tuple[Path, Path]:
    home = tmp_path / "home"
    register(home, posts(users), "posts", unit="user:user", purpose="dp")
    Ledger(home / "privrelease.duckdb").set_budget("posts", Budget(10.0, 1e-5))
    request = tmp_path / "posts.yaml"
    request.write_text(yaml.safe_dump({"dataset": "posts", "mechanism": {"name": "dpne", "params": DPNE}}))
    return home, request


def _interrupt(home: Path, request: Path, when: str, env: dict | None = None) -> tuple[int, str]:
    """Run the release as typed and send SIGINT as soon as its stderr shows ``when``; its exit code and stderr."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    environ.update({"PRIVRELEASE_HOME": str(home)}, **(env or {}))
    p = subprocess.Popen([EXE, "release", str(request)], cwd=REPO, env=environ, stderr=subprocess.PIPE, text=True)
    said = []
    for line in p.stderr:
        said.append(line)
        if when in line:
            p.send_signal(signal.SIGINT)
            break
    said.append(p.communicate(timeout=300)[1])
    return p.returncode, "".join(said)


def _history(home: Path) -> list[dict]:
    return json.loads(run(home, "ledger", "history", "--dataset", "posts", "--json").stdout)


def test_ctrl_c_before_the_charge_charges_nothing(tmp_path: Path):
    home, request = _home(tmp_path, 300)
    code, said = _interrupt(home, request, "paused at load", {"PRIVRELEASE_TEST_MODE": "1", "PRIVRELEASE_FAULT": "pause:load"})
    assert code == 130 and "Traceback" not in said and "bug" not in said, said
    assert said.splitlines()[-1] == "stopped (Ctrl-C) before its charge: nothing was charged and nothing published."
    assert [e["status"] for e in _history(home)] == ["cap"]
    assert not (home / "releases" / "posts").exists()


def test_ctrl_c_during_the_mechanism_keeps_the_charge_and_says_why(tmp_path: Path):
    """Large enough that DPNE runs for seconds after its charge (DuckDB's queries among them): the signal lands there."""
    home, request = _home(tmp_path, 50_000)
    code, said = _interrupt(home, request, "ledger entry #2")
    assert code == 130 and "Traceback" not in said and "bug" not in said and "internal error" not in said, said
    assert said.splitlines()[-1] == (
        "stopped (Ctrl-C) after its charge: ledger entry #2 charged posts epsilon=1 delta=1e-07, and that charge "
        "stands (recorded as failed): the mechanism had started and may already have drawn noise from the data, so "
        "the budget cannot be given back. Nothing was published."
    )
    history = _history(home)
    assert [(e["seq"], e["status"]) for e in history] == [(1, "cap"), (2, "reserved"), (3, "failed")]
    assert history[1]["epsilon"] == 1.0 and "interrupted by the user" in json.dumps(history[2])
    totals = json.loads(run(home, "ledger", "totals", "--json").stdout)
    assert totals[0]["spent"]["epsilon"] == 1.0 and totals[0]["failed"] == 1 and totals[0]["pending"] == 0
    assert not any((home / "releases" / "posts").glob("*/manifest.json"))


def test_ctrl_c_after_an_sdc_record_says_no_budget_was_spent(tmp_path: Path):
    """After the ledger entry, before the mechanism (paused at the charge); an SDC entry spends no budget."""
    home = tmp_path / "home"
    register(home, census(300))
    request = write_request(tmp_path / "ra")
    code, said = _interrupt(
        home, request, "paused at charge", {"PRIVRELEASE_TEST_MODE": "1", "PRIVRELEASE_FAULT": "pause:charge"}
    )
    assert code == 130 and "Traceback" not in said, said
    assert said.splitlines()[-1] == (
        "stopped (Ctrl-C) after its ledger entry #2 (sdc: no budget spent), now recorded as failed. Nothing was published."
    )
    assert [e["status"] for e in json.loads(run(home, "ledger", "history", "--json").stdout)] == ["policy", "reserved", "failed"]
