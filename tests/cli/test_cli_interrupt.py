"""Ctrl-C on a real ``privrelease release`` process (#42): one line saying what became of the charge, exit 130.

Before the charge nothing is written; after it the charge stands (noise may have been drawn, so giving it
back could leak) and is recorded as failed. Interrupted in the middle of DPNE, DuckDB raises its own
``RuntimeError('Query interrupted')``, which used to read ``internal error (RuntimeError); this is a bug``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from privrelease.core import interrupts
from privrelease.core.datasets.demo import census, posts
from privrelease.core.ledger.ledger import FAILED, PUBLISHED, ChargeRequest, Ledger
from privrelease.core.privacy.budget import Budget
from privrelease.core.release import charged
from privrelease.core.release.home import Home
from tests.cli.test_cli import EXE, run
from tests.conftest import REPO
from tests.support.helpers import dp, register, write_request

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
    assert code == 130 and "Traceback" not in said and "this is a bug" not in said, said
    assert said.splitlines()[-1] == "stopped (Ctrl-C) before its charge: nothing was charged and nothing published."
    assert [e["status"] for e in _history(home)] == ["registered", "cap"]
    assert not (home / "releases" / "posts").exists()


def test_ctrl_c_during_the_mechanism_keeps_the_charge_and_says_why(tmp_path: Path):
    """Large enough that DPNE runs for seconds after its charge (DuckDB's queries among them): the signal lands there."""
    home, request = _home(tmp_path, 50_000)
    code, said = _interrupt(home, request, "ledger entry #3")
    assert code == 130 and "Traceback" not in said and "this is a bug" not in said and "internal error" not in said, said
    assert said.splitlines()[-1] == (
        "stopped (Ctrl-C) after its charge: ledger entry #3 charged posts epsilon=1 delta=1e-07, and that charge "
        "stands (recorded as failed): the mechanism had started and may already have drawn noise from the data, so "
        "the budget cannot be given back. Nothing was published."
    )
    history = _history(home)
    assert [(e["seq"], e["status"]) for e in history] == [(1, "registered"), (2, "cap"), (3, "reserved"), (4, "failed")]
    assert history[2]["epsilon"] == 1.0 and "interrupted by the user" in json.dumps(history[3])
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
        "stopped (Ctrl-C) after its ledger entry #3 (sdc: no budget spent), now recorded as failed. Nothing was published."
    )
    assert [e["status"] for e in json.loads(run(home, "ledger", "history", "--json").stdout)] == [
        "registered",
        "policy",
        "reserved",
        "failed",
    ]


def test_ctrl_c_after_the_outcome_is_recorded_says_published(tmp_path: Path):
    """Stopped after the run settled (its own handling over): the ledger says what became of the charge."""
    home, request = _home(tmp_path, 300)
    code, said = _interrupt(
        home, request, "paused at settle", {"PRIVRELEASE_TEST_MODE": "1", "PRIVRELEASE_FAULT": "pause:settle"}
    )
    assert code == 130 and "Traceback" not in said, said
    history = _history(home)
    assert [e["status"] for e in history] == ["registered", "cap", "reserved", "published"]
    assert said.splitlines()[-1] == (
        f"stopped (Ctrl-C) after publishing: release {history[2]['release_id']} is in place, ledger entry #3 "
        "(charged epsilon=1 delta=1e-07) records it as published."
    )


def test_outside_a_charged_run_the_ledger_says_what_became_of_this_process_charge(tmp_path: Path):
    """An interrupt no charged run explained (a flow's artifact, the summary being printed): ``charged.said``."""
    home = Home(tmp_path)
    assert charged.said(home) == interrupts.BEFORE  # no ledger yet
    home.ledger.set_budget("d", Budget(2.0, 1e-6))
    assert charged.said(home) == interrupts.BEFORE  # a cap is no charge
    home.ledger.reserve(ChargeRequest("d", "r1", "dp", dp(1.0, 1e-7), "m", {}))
    assert charged.said(home) == (
        "stopped (Ctrl-C) after its charge: ledger entry #2 (charged epsilon=1 delta=1e-07) stands; the next "
        "privrelease command records its outcome (see privrelease ledger history)."
    )
    home.ledger.settle("r1", PUBLISHED, {})
    assert charged.said(home) == (
        "stopped (Ctrl-C) after publishing: release r1 is in place, ledger entry #2 (charged epsilon=1 delta=1e-07) "
        "records it as published."
    )
    home.ledger.reserve(ChargeRequest("d", "r2", "dp", dp(0.5, 0.0), "m", {}))
    home.ledger.settle("r2", FAILED, {})
    assert charged.said(home) == (
        "stopped (Ctrl-C) after its charge: ledger entry #4 (charged epsilon=0.5 delta=0) stands, recorded as failed. "
        "Nothing was published."
    )


# Through a Prefect server (PREFECT_API_URL set): the release is a flow run, its steps tasks. The same one line,
# and the flow run ends Cancelled with that line as its message, not Crashed or Failed with a traceback on
# the console, and not left Running.

AFTER = (
    "stopped (Ctrl-C) after its charge: ledger entry #3 charged posts epsilon=1 delta=1e-07, and that charge "
    "stands (recorded as failed): the mechanism had started and may already have drawn noise from the data, so "
    "the budget cannot be given back. Nothing was published."
)
PAUSED = {"PRIVRELEASE_TEST_MODE": "1"}


def _served(home: Path, request: Path, when: str, env: dict | None = None) -> tuple[int, str, list[str], object]:
    """Interrupt the release run against the session's Prefect server: exit code, stderr, its lines, its flow run."""
    import prefect.settings
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterFlowRunId

    code, said = _interrupt(home, request, when, {"PREFECT_API_URL": prefect.settings.PREFECT_API_URL.value(), **(env or {})})
    assert code == 130, said
    for word in (
        "Traceback",
        "this is a bug",
        "internal error",
        "Crash",
        "nanobind",
        "ERROR",
    ):  # (a flow run's random name may hold "bug")
        assert word not in said, said
    flow_run_id = re.search(r"runs/flow-run/([0-9a-f-]{36})", said).group(1)
    with get_client(sync_client=True) as client:
        run_ = client.read_flow_run(flow_run_id)
        tasks = client.read_task_runs(task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(any_=[run_.id])))
    assert tasks and all(t.state.is_final() for t in tasks), [(t.name, t.state.type) for t in tasks]
    return code, said, said.splitlines(), run_


def _cancelled_with(run_, line: str) -> None:
    """The flow run's state: Cancelled, its message the line the user read (public values: no row of the data)."""
    assert run_.state.type.value == "CANCELLED" and run_.state.message == line, run_.state


def _nothing_published(home: Path) -> None:
    assert not any((home / "releases").glob("posts/*")) and not any((home / "staging").glob("*/*"))


def test_served_ctrl_c_before_the_charge_charges_nothing(prefect_server, tmp_path: Path):
    home, request = _home(tmp_path, 300)
    _, _, lines, run_ = _served(home, request, "paused at load", PAUSED | {"PRIVRELEASE_FAULT": "pause:load"})
    assert lines[-1] == "stopped (Ctrl-C) before its charge: nothing was charged and nothing published."
    _cancelled_with(run_, lines[-1])
    assert [e["status"] for e in _history(home)] == ["registered", "cap"]
    _nothing_published(home)


def test_served_ctrl_c_during_the_mechanism_keeps_the_charge(prefect_server, tmp_path: Path):
    """DPNE on 50,000 users runs for seconds after its charge, inside its Prefect task: the signal lands there."""
    home, request = _home(tmp_path, 50_000)
    _, _, lines, run_ = _served(home, request, "ledger entry #3")
    assert lines[-1] == AFTER
    _cancelled_with(run_, AFTER)
    history = _history(home)
    assert [(e["seq"], e["status"]) for e in history] == [(1, "registered"), (2, "cap"), (3, "reserved"), (4, "failed")]
    assert history[2]["flow_run_id"] == str(run_.id) and "interrupted by the user" in json.dumps(history[3])
    totals = json.loads(run(home, "ledger", "totals", "--json").stdout)
    assert totals[0]["spent"]["epsilon"] == 1.0 and totals[0]["failed"] == 1 and totals[0]["pending"] == 0
    _nothing_published(home)


def test_served_ctrl_c_during_publication_keeps_the_charge_and_publishes_nothing(prefect_server, tmp_path: Path):
    """Paused with the release written to staging, before it is renamed into place (inside the publish task)."""
    home, request = _home(tmp_path, 300)
    _, _, lines, run_ = _served(home, request, "paused at staged", PAUSED | {"PRIVRELEASE_FAULT": "pause:staged"})
    assert lines[-1] == AFTER
    _cancelled_with(run_, AFTER)
    assert [e["status"] for e in _history(home)] == ["registered", "cap", "reserved", "failed"]
    _nothing_published(home)


@pytest.mark.parametrize("step", ["publish", "settle"])
def test_served_ctrl_c_after_publishing_records_the_release(prefect_server, tmp_path: Path, step: str):
    """Paused with the release in place: before its outcome is recorded (publish), or after (settle)."""
    home, request = _home(tmp_path, 300)
    _, _, lines, run_ = _served(home, request, f"paused at {step}", PAUSED | {"PRIVRELEASE_FAULT": f"pause:{step}"})
    release_id = next(e["release_id"] for e in _history(home) if e["status"] == "reserved")
    assert lines[-1] == (
        f"stopped (Ctrl-C) after publishing: release {release_id} is in place, ledger entry #3 "
        "(charged epsilon=1 delta=1e-07) records it as published."
    )
    _cancelled_with(run_, lines[-1])
    assert [e["status"] for e in _history(home)] == ["registered", "cap", "reserved", "published"]
    assert (home / "releases" / "posts" / release_id / "manifest.json").is_file()


def test_the_engines_crash_line_after_ctrl_c_is_left_to_the_cancelled_state(monkeypatch):
    """A Ctrl-C landing in Prefect's own frames between two steps makes its engine log "Crash detected!" at ERROR
    (a race the served tests above meet under load): after the user's Ctrl-C that line is dropped, the run's
    Cancelled state says what happened; without a Ctrl-C the same line is kept (the weakened case)."""
    import logging

    from privrelease.flows.release import OneLine

    line = "Crash detected! Execution was aborted by an interrupt signal."
    record = logging.LogRecord("prefect.engine", logging.ERROR, __file__, 1, line, None, None)
    assert any(isinstance(f, OneLine) for f in logging.getLogger("prefect.engine").filters)
    assert OneLine().filter(record)  # no Ctrl-C seen: an engine error is shown
    monkeypatch.setattr(interrupts, "seen", lambda: True)
    assert not OneLine().filter(record)
