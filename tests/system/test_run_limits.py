"""Issue #39's sixth attack, M2: a run costs no budget when it is a preview or an SDC release, yet its costliest
settings held a worker's slot for minutes (MEDS with k=2: 128 s). A run the worker runs is stopped once it has taken
the operator's limit (``privrelease.flows.steps.time_limited``), and fails with the one line naming it; on the weakened
variant, the same worker with no limit in reach (the defaults' hour), the same run goes on past it."""

from __future__ import annotations

import signal
import time

import duckdb
import pytest

from privrelease.core import interrupts, settings
from privrelease.core.errors import TimeLimit
from tests.system.test_server import _settle, _wait, deployment, operator, run_processes, worker

COSTLY = {"k": 2}  # MEDS's bins of two: the sixth attack's costliest free settings, form-valid
SAYS = (
    "the run was stopped after 1 s, the longest a run may take on this worker ($PRIVRELEASE_RUN_SECONDS, the "
    "operator's setting): ask for less work (fewer rows or columns, a larger k for MEDS or EDS, fewer candidates "
    "for MEWS, a smaller T or delta0 for DPNE), or ask the operator to raise it"
)


def _busy(seconds: float) -> None:
    """Work that takes ``seconds`` in Python code (where a signal is handled)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass


def test_a_run_past_its_limit_is_stopped_with_the_limits_words():
    with pytest.raises(TimeLimit) as stopped, interrupts.limited(1, "past the limit"):
        _busy(60)
    assert str(stopped.value) == "past the limit"
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL  # the process's alarm is as it was
    with interrupts.limited(30, "not reached"):
        _busy(0.1)  # a run within its limit is untouched


def test_what_a_stopped_run_raises_after_its_limit_reads_as_the_limit():
    """What the run raises after the alarm (a DuckDB query it stopped, a cleanup failing in its turn) is the limit."""
    connection = duckdb.connect()
    with pytest.raises(TimeLimit, match="^past the limit$"), interrupts.limited(1, "past the limit"):
        try:
            _busy(60)
        except TimeLimit:
            connection.execute("select nonsense")  # a cleanup that fails in its turn


def test_a_costly_free_run_is_stopped_at_the_workers_limit(served, people):
    """MEDS with k=2, started by an analyst through the proxy and the gate (an SDC release: no budget): on a
    worker whose limit is 1 s it fails with the one line naming the limit, which the analyst reads, and its
    process is gone; on the weakened variant (the default limit, an hour) the same run completes, having run
    past the 1 s."""
    env, root = served
    api, alice = operator(env), people["alice"]
    form = f"/deployments/{deployment(api, 'meds')['id']}/create_flow_run"
    limited = alice.post(form, json={"parameters": COSTLY})
    assert limited.status_code == 201, limited.text
    run_id = limited.json()["id"]
    log = root / "worker-run-limit.log"
    with worker(env | {settings.RUN_SECONDS: "1"}, log) as proc:
        assert _wait(api, run_id, log) == "FAILED"
        _settle(env, proc)
        assert run_processes(proc, run_id) == []  # its process ended: its memory is the host's again
    state = alice.get(f"/flow_runs/{run_id}").json()["state"]
    assert state["message"] == SAYS, state
    # the weakened variant: no limit in reach, and the same run runs past the 1 s
    weak = alice.post(form, json={"parameters": COSTLY}).json()["id"]
    log = root / "worker-run-no-limit.log"
    with worker(env, log):
        assert _wait(api, weak, log) == "COMPLETED"
    assert api.get(f"/flow_runs/{weak}").json()["total_run_time"] > 1
