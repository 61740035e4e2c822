"""Prefect's server on PostgreSQL (as ``make serve-pg`` runs it), sharing the database with the ledger,
and two process workers with different homes: their runs and their charges are rows in that one
database, and one cap holds for both."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg
import pytest

from core.accounting import Budget
from core.errors import LedgerCorrupt
from core.ledger import Ledger
from tests.conftest import REPO
from tests.helpers import register
from tests.test_outliers import planted
from tests.test_pg import OUTLIERS
from tests.test_server import BIN, _create_run, _run, _stop, _wait, deployment, operator, running_server

# The outliers request of tests/test_pg.py as the outlier-count form takes it.
PARAMS = OUTLIERS["mechanism"]["params"]
FORM = {"dataset": OUTLIERS["dataset"], "columns": PARAMS["columns"], "k": PARAMS["k"], "r": PARAMS["r"],
        "epsilon": PARAMS["epsilon"], "delta": PARAMS["delta"],
        "standardize": [{"column": c, **s} for c, s in PARAMS["standardize"].items()]}


def test_two_workers_with_different_homes_eight_runs_against_a_cap_of_five(tmp_path: Path, pg_url: str,
                                                                           monkeypatch: pytest.MonkeyPatch):  # fmt: skip
    """Prefect's server on PostgreSQL, two process workers with different homes sharing the ledger
    there: eight runs of the outlier-count deployment at once against a cap for five."""
    shared = {"PRIVRELEASE_LEDGER_URL": pg_url, "PRIVRELEASE_LEDGER_KEY_FILE": str(tmp_path / "secrets" / "ledger.key"),
              "PRIVRELEASE_SNAPSHOT_STORE": str(tmp_path / "snapshots")}  # fmt: skip
    for name, value in shared.items():
        monkeypatch.setenv(name, value)
    homes = [tmp_path / "worker-a", tmp_path / "worker-b"]
    register(homes[0], planted(), "sessions", "record", "dp")  # the steward, once, into the shared store
    Ledger(homes[0] / "privrelease.duckdb").set_budget("sessions", Budget(5.0, 1e-3))
    database = {"PREFECT_API_DATABASE_CONNECTION_URL": pg_url.replace("postgresql://", "postgresql+asyncpg://", 1)}
    with running_server(tmp_path, database | shared) as env:
        api = operator(env)
        _run(env, "work-pool", "create", "privrelease", "--type", "process", "--base-job-template", "deploy/process-pool.json")
        _run(env, "--no-prompt", "deploy", "--name", "outlier-count")
        found = deployment(api, "outlier-count")
        logs = [open(tmp_path / f"worker-{i}.log", "w") for i in range(2)]
        workers = [subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", "privrelease", "--install-policy",
                                     "never", "--limit", "4"], env=env | {"PRIVRELEASE_HOME": str(home)}, cwd=REPO,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
                   for home, log in zip(homes, logs)]
        try:
            runs = [_create_run(api, found["id"], FORM).json()["id"] for _ in range(8)]
            states = [_wait(api, run_id, tmp_path / "worker-0.log", 300) for run_id in runs]
            messages = [api.get(f"/flow_runs/{run_id}", timeout=10).json()["state"]["message"]
                        for run_id, state in zip(runs, states) if state == "FAILED"]  # fmt: skip
        finally:
            for worker, log in zip(workers, logs):
                _stop(worker)
                log.close()
    assert sorted(states) == ["COMPLETED"] * 5 + ["FAILED"] * 3, [(tmp_path / f"worker-{i}.log").read_text()[-2000:] for i in range(2)]
    for message in messages:
        assert "left of its cap (epsilon=5, delta=0.001)" in message  # refused with the budget error
    for home in homes:  # the chain, this worker's anchors and its release folders
        assert Ledger(home / "privrelease.duckdb").verify(home / "releases") == 11
        assert list((home / "releases").glob("sessions/*/manifest.json")), f"{home.name} published nothing"
    (t,) = Ledger(homes[1] / "privrelease.duckdb").totals()
    assert (t.spent.epsilon, t.published, t.failed, t.pending) == (5.0, 5, 0, 0)
    charged = {e.flow_run_id for e in Ledger(homes[1] / "privrelease.duckdb").entries() if e.status == "reserved"}
    with psycopg.connect(pg_url) as con:
        completed = {str(i) for (i,) in con.execute("SELECT id FROM public.flow_run WHERE state_type = 'COMPLETED'")}
        trgm = con.execute("SELECT count(*) FROM pg_extension WHERE extname = 'pg_trgm'").fetchone()[0]
        con.execute("DELETE FROM privrelease.ledger WHERE seq = 11")  # the database's writer cuts the last entry
    assert charged == completed and len(completed) == 5 and trgm == 1  # each charge names its run; Prefect migrated
    monkeypatch.setenv("PRIVRELEASE_LEDGER_ANCHORS", ":".join(str(h / "anchors" / "ledger.anchors") for h in homes))
    with pytest.raises(LedgerCorrupt, match="entry 11, anchored at"):  # an auditor holding every worker's anchors
        Ledger(homes[0] / "privrelease.duckdb").verify()
