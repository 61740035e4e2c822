"""Two hosts on separate network stacks (Linux network namespaces A and B, joined by a veth pair):
PostgreSQL and Prefect's server on A (as ``make serve-pg`` runs it, sharing the database with the
ledger), a process worker with its own home on each host, one snapshot store both mount. Runs
submitted through Prefect from both hosts, their charges rows in that one database, one cap for both."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import psycopg
import pytest

from privrelease.core import store
from privrelease.core.errors import LedgerCorrupt
from privrelease.core.ledger.ledger import Ledger
from privrelease.core.privacy.budget import Budget
from tests.conftest import REPO
from tests.ledger.test_pg import OUTLIERS
from tests.mechanisms.test_outliers import planted
from tests.support.helpers import register
from tests.support.netns import A_ADDR, exec_in, inside, two_hosts
from tests.support.pages import commands, sh_block
from tests.support.pg import cluster
from tests.system.test_server import BIN, _run, _stop, _wait, deployment, operator, running_server

# The outliers request of tests/ledger/test_pg.py as the outlier-count form takes it.
PARAMS = OUTLIERS["mechanism"]["params"]
FORM = {
    "dataset": OUTLIERS["dataset"],
    "columns": PARAMS["columns"],
    "k": PARAMS["k"],
    "r": PARAMS["r"],
    "epsilon": PARAMS["epsilon"],
    "delta": PARAMS["delta"],
    "standardize": [{"column": c, **s} for c, s in PARAMS["standardize"].items()],
    "noise": "smooth",
}  # (eps, delta) counts, summed exactly: the cap of 5 holds five (global ones are cheaper)


# How docs/guides/hosts.md starts each host's worker, as printed (the venv's prefect); each here takes its own
# host's queue, so that both hosts run some of the runs
WORKER = [str(BIN / "prefect"), *shlex.split(commands(sh_block("guides/hosts.md", "prefect worker start"))[0])[1:]]
VERIFY = [str(BIN / "privrelease"), *shlex.split(commands(sh_block("guides/hosts.md", "privrelease ledger verify"))[0])[1:]]

# What an operator on either host runs to submit releases: n runs of a deployment into a work queue.
SUBMIT = """
import json, os, sys, httpx
api = httpx.Client(base_url=os.environ["PREFECT_API_URL"], timeout=30,
                   auth=tuple(os.environ["PREFECT_API_AUTH_STRING"].split(":", 1)))
deployment, queue, form, n = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
print(json.dumps([api.post(f"/deployments/{deployment}/create_flow_run", json={"parameters": form,
      "work_queue_name": queue}).raise_for_status().json()["id"] for _ in range(n)]))
"""


def test_two_hosts_eight_runs_submitted_from_both_against_a_cap_of_five(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Host A: PostgreSQL (ledger and Prefect), Prefect's server, a worker; host B: a worker. Each host
    submits four runs of the outlier-count deployment to its own worker's queue, all at once, against
    a cap for five; then `privrelease ledger verify` on each host."""
    with two_hosts() as (a, b), inside(a), cluster(A_ADDR, f"{A_ADDR}/24") as pg_url:
        try:
            _eight_runs(tmp_path, monkeypatch, pg_url, b)
        finally:
            store.close(pg_url)  # its pool's threads live in A's namespace


def _eight_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str, b: str) -> None:
    shared = {
        "PRIVRELEASE_LEDGER_URL": pg_url,
        "PRIVRELEASE_LEDGER_KEY_FILE": str(tmp_path / "secrets" / "ledger.key"),
        "PRIVRELEASE_SNAPSHOT_STORE": str(tmp_path / "shared" / "snapshots"),
    }
    for name, value in shared.items():
        monkeypatch.setenv(name, value)
    homes = [tmp_path / "host-a", tmp_path / "host-b"]
    register(homes[0], planted(), "sessions", "record", "dp")  # the steward, on host A, into the shared store
    Ledger(homes[0] / "privrelease.duckdb").set_budget("sessions", Budget(5.0, 1e-3))
    database = {"PREFECT_API_DATABASE_CONNECTION_URL": pg_url.replace("postgresql://", "postgresql+asyncpg://", 1)}
    on = ([], exec_in(b))  # how a command runs on host A (this thread is there) and on host B
    with running_server(tmp_path, database | shared, host=A_ADDR) as env:
        api = operator(env)
        _run(env, "work-pool", "create", "privrelease", "--type", "process", "--base-job-template", "deploy/process-pool.json")
        _run(env, "--no-prompt", "deploy", "--name", "outlier-count")
        found = deployment(api, "outlier-count")
        submits = [
            subprocess.Popen(
                [*prefix, str(BIN / "python"), "-c", SUBMIT, found["id"], f"host-{h}", json.dumps(FORM), "4"],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            for prefix, h in zip(on, "ab")
        ]
        runs = [json.loads(p.communicate(timeout=120)[0]) for p in submits]
        logs = [open(tmp_path / f"worker-{h}.log", "w") for h in "ab"]
        workers = [
            subprocess.Popen(
                [*prefix, *WORKER, "--work-queue", f"host-{h}", "--install-policy", "never", "--limit", "4"],
                env=env | {"PRIVRELEASE_HOME": str(home)},
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            for prefix, h, home, log in zip(on, "ab", homes, logs)
        ]
        try:
            states = [[_wait(api, run_id, tmp_path / f"worker-{h}.log", 300) for run_id in ids] for h, ids in zip("ab", runs)]
            messages = [
                api.get(f"/flow_runs/{run_id}", timeout=10).json()["state"]["message"]
                for ids, st in zip(runs, states)
                for run_id, state in zip(ids, st)
                if state == "FAILED"
            ]
        finally:
            for worker, log in zip(workers, logs):
                _stop(worker)
                log.close()
    worker_logs = [(tmp_path / f"worker-{h}.log").read_text()[-2000:] for h in "ab"]
    assert sorted(states[0] + states[1]) == ["COMPLETED"] * 5 + ["FAILED"] * 3, worker_logs
    assert "COMPLETED" in states[0] and "COMPLETED" in states[1], worker_logs  # both hosts published
    for message in messages:
        assert "left of its cap (epsilon=5, delta=0.001)" in message  # refused with the budget error
    verify = [
        subprocess.Popen(
            [*prefix, *VERIFY],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env | {"PRIVRELEASE_HOME": str(home)},
        )
        for prefix, home in zip(on, homes)
    ]  # the chain, each host's anchors and its release folders
    for done in verify:
        out = done.communicate(timeout=120)[0]
        assert done.returncode == 0 and "ledger ok: 12 entries" in out, out  # the registration, the cap, 5 charges and outcomes
    for home, host_states in zip(homes, states):  # each host published its own completed runs
        assert len(list((home / "releases").glob("sessions/*/manifest.json"))) == host_states.count("COMPLETED")
    (t,) = Ledger(homes[1] / "privrelease.duckdb").totals()
    assert (t.spent.epsilon, t.published, t.failed, t.pending) == (5.0, 5, 0, 0)
    charged = {e.flow_run_id for e in Ledger(homes[1] / "privrelease.duckdb").entries() if e.status == "reserved"}
    with psycopg.connect(pg_url) as con:
        completed = {str(i) for (i,) in con.execute("SELECT id FROM public.flow_run WHERE state_type = 'COMPLETED'")}
        trgm = con.execute("SELECT count(*) FROM pg_extension WHERE extname = 'pg_trgm'").fetchone()[0]
        con.execute("DELETE FROM privrelease.ledger WHERE seq = 12")  # the database's writer cuts the last entry
    assert charged == completed and len(completed) == 5 and trgm == 1  # each charge names its run; Prefect migrated
    # both hosts anchor the shared ledger in the default file outside their homes (one user here: one file), as an
    # auditor holding the hosts' anchors does
    with pytest.raises(LedgerCorrupt, match="entry 12, anchored at"):
        Ledger(homes[0] / "privrelease.duckdb").verify()
