"""A real `prefect server`, a process work pool, deployments from prefect.yaml and a worker:
a release triggered through the REST API exactly as the UI's Run button does it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from core.accounting import Budget
from core.demo import write_demo
from core.ledger import PUBLISHED, Ledger
from tests.conftest import REPO

BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """Stop a process group this test started: SIGTERM, then SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)


@contextmanager
def running_server(root: Path):
    """A `prefect server` on a free port with its own PREFECT_HOME; yields the environment for clients."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {
        "PREFECT_HOME": str(root / "prefect"), "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PRIVRELEASE_HOME": str(root / "home"), "PRIVRELEASE_REPO": str(REPO),
    }  # fmt: skip
    log = open(root / "server.log", "w")
    proc = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (root / "server.log").read_text()[-2000:]
            time.sleep(0.5)
        yield env
    finally:
        _stop(proc)
        log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("server")
    with running_server(root) as env:
        yield env, root


def _create_run(api: str, deployment_id: str, parameters: dict) -> httpx.Response:
    """POST /deployments/{id}/create_flow_run, as the UI does; SQLite-backed servers answer 503
    while busy (right after a deploy), so retry those for a while."""
    for _ in range(30):
        response = httpx.post(f"{api}/deployments/{deployment_id}/create_flow_run", json={"parameters": parameters},
                              timeout=10)  # fmt: skip
        if response.status_code != 503:
            return response
        time.sleep(1)
    return response


def _wait(api: str, run_id: str, log: Path, timeout: float = 240) -> str:
    """Poll a flow run until it ends; returns its final state type."""
    deadline = time.monotonic() + timeout
    while True:
        state = httpx.get(f"{api}/flow_runs/{run_id}", timeout=10).json()["state"]["type"]
        if state in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            return state
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(1)


def _run(env: dict, *args: str) -> str:
    out = subprocess.run([str(BIN / "prefect"), *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout


def test_release_triggered_like_the_ui(server):
    env, root = server
    api = env["PREFECT_API_URL"]
    write_demo(Path(env["PRIVRELEASE_HOME"]), rows=2000)
    _run(env, "work-pool", "create", "privrelease", "--type", "process", "--base-job-template", "deploy/process-pool.json")
    _run(env, "--no-prompt", "deploy", "--all")
    log = open(root / "worker.log", "w")
    worker = subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", "privrelease", "--install-policy", "never"],
                              env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        spam = httpx.get(f"{api}/deployments/name/spam-filter-training/spam-filter-training", timeout=10).json()
        assert Path(spam["parameters"]["spec_path"]).exists()
        for name in ("tabular-release", "ngram-release", "outlier-stats"):
            other = httpx.get(f"{api}/deployments/name/release/{name}", timeout=10).json()
            assert set(other["parameters"]) == {"request"}  # no home, source or path in a release form
        audit = httpx.get(f"{api}/deployments/name/ledger-audit/ledger-audit", timeout=10).json()
        assert audit["parameters"] == {}
        deployment = httpx.get(f"{api}/deployments/name/release/tabular-release", timeout=10).json()
        # what the UI's Run button sends: POST /deployments/{id}/create_flow_run
        run = _create_run(api, deployment["id"], {})
        assert run.status_code == 201, run.text
        run_id = run.json()["id"]
        assert _wait(api, run_id, root / "worker.log") == "COMPLETED"
        home = Path(env["PRIVRELEASE_HOME"])
        (folder,) = list((home / "releases" / "census-demo").iterdir())
        manifest = json.loads((folder / "manifest.json").read_text())
        entries = Ledger(home / "privrelease.duckdb").entries()
        assert [e.status for e in entries][-1] == PUBLISHED
        assert manifest["ledger"]["hash"] == entries[-2].hash and entries[-1].flow_run_id == run_id
        # an invalid parameter is rejected by the server before any run starts
        source = {**deployment["parameters"]["request"], "dataset": {"id": "x", "source": "/etc/passwd", "format": "csv"}}
        bad = _create_run(api, deployment["id"], {"request": source})
        assert bad.status_code == 409 and "request.dataset" in bad.text
        # a run cannot set the worker's environment (test mode, another home) or its command
        seeded = {**deployment["parameters"]["request"], "seed": 7}
        hostile = httpx.post(f"{api}/deployments/{deployment['id']}/create_flow_run", timeout=10, json={
            "parameters": {"request": seeded}, "job_variables": {"env": {"PRIVRELEASE_TEST_MODE": "1"}}})  # fmt: skip
        assert hostile.status_code == 422 and "'env' was unexpected" in hostile.text
        dotted = httpx.post(f"{api}/deployments/{deployment['id']}/create_flow_run", timeout=10, json={
            "parameters": {"request": seeded}, "job_variables": {"env.PRIVRELEASE_TEST_MODE": "1"}})  # fmt: skip
        assert dotted.status_code == 422
        assert len(list((home / "releases" / "census-demo").iterdir())) == 1
        assert [e.status for e in Ledger(home / "privrelease.duckdb").entries()][-1] == PUBLISHED  # nothing charged
        form = deployment["parameter_openapi_schema"]["properties"]
        assert set(form) == {"request"}  # no home, source, path or cluster to fill in
        # the typed form: a release filled in field by field, as in the UI's form
        request = {"dataset": "census-demo",
                   "mechanism": {"name": "ra", "params": {"qi": ["age", "sex", "race"], "sensitive": "occupation", "k": 2}}}
        typed = _create_run(api, deployment["id"], {"request": request})
        assert typed.status_code == 201, typed.text
        assert _wait(api, typed.json()["id"], root / "worker.log") == "COMPLETED"
        assert len(list((home / "releases" / "census-demo").iterdir())) == 2
        bad_form = {**request, "mechanism": {"name": "dpne", "params": {"text_column": "t", "epsilon": -1, "delta": 1e-7}}}
        rejected = _create_run(api, deployment["id"], {"request": bad_form})
        assert rejected.status_code == 409 and "epsilon" in rejected.text
    finally:
        _stop(worker)
        log.close()


def test_spam_training_deployment_runs_on_the_worker(server):
    """The demo's spam training (2048-bit keys, 2 users, 1,200 messages) as a deployment run: its
    parties in their own processes under the worker, each round a task, an mpc entry in the ledger."""
    env, root = server
    api = env["PREFECT_API_URL"]
    home = Path(env["PRIVRELEASE_HOME"])
    deployment = httpx.get(f"{api}/deployments/name/spam-filter-training/spam-filter-training", timeout=10).json()
    log = open(root / "worker3.log", "w")
    worker = subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", "privrelease", "--install-policy", "never"],
                              env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        run = _create_run(api, deployment["id"], {})
        assert run.status_code == 201, run.text
        assert _wait(api, run.json()["id"], root / "worker3.log", 300) == "COMPLETED", (root / "worker3.log").read_text()[-3000:]
        tasks = httpx.post(f"{api}/task_runs/filter", timeout=10, json={
            "flow_runs": {"id": {"any_": [run.json()["id"]]}}}).json()  # fmt: skip
    finally:
        _stop(worker)
        log.close()
    assert {"round-1", "round-2", "round-3"} <= {t["name"] for t in tasks}
    entries = [e for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id == "spam-demo"]
    assert [(e.kind, e.status) for e in entries] == [("mpc", "reserved"), ("mpc", "published")]
    assert oct((home / "spam" / "spam-demo" / "model.npy").stat().st_mode & 0o777) == "0o600"


def test_concurrent_runs_through_the_worker_never_exceed_the_cap(server):
    """Four n-gram releases of epsilon 1 at once against a cap of 2: two publish, two are refused."""
    env, root = server
    api = env["PREFECT_API_URL"]
    home = Path(env["PRIVRELEASE_HOME"])
    Ledger(home / "privrelease.duckdb").set_budget("posts-demo", Budget(2.0, 1e-6))
    deployment = httpx.get(f"{api}/deployments/name/release/ngram-release", timeout=10).json()
    log = open(root / "worker2.log", "w")
    worker = subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", "privrelease", "--install-policy", "never"],
                              env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        ids = [_create_run(api, deployment["id"], {}).json()["id"] for _ in range(4)]
        states = {run_id: _wait(api, run_id, root / "worker2.log", 300) for run_id in ids}
    finally:
        _stop(worker)
        log.close()
    assert sorted(states.values()) == ["COMPLETED", "COMPLETED", "FAILED", "FAILED"], (root / "worker2.log").read_text()[-3000:]
    ledger = Ledger(home / "privrelease.duckdb")
    charges = [e for e in ledger.entries("posts-demo") if e.status == "reserved"]
    assert len(charges) == 2 and sum(e.epsilon for e in charges) == 2.0
    assert len(list((home / "releases" / "posts-demo").iterdir())) == 2
    assert ledger.verify() >= 3
