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
from pathlib import Path

import httpx
import pytest

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


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("server")
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
        yield env, root
    finally:
        _stop(proc)
        log.close()


def _run(env: dict, *args: str) -> str:
    out = subprocess.run([str(BIN / "prefect"), *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout


def test_release_triggered_like_the_ui(server):
    env, root = server
    api = env["PREFECT_API_URL"]
    write_demo(Path(env["PRIVRELEASE_HOME"]) / "demo", rows=2000)
    _run(env, "work-pool", "create", "privrelease", "--type", "process")
    _run(env, "--no-prompt", "deploy", "--all")
    log = open(root / "worker.log", "w")
    worker = subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", "privrelease", "--install-policy", "never"],
                              env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        deployment = httpx.get(f"{api}/deployments/name/release/tabular-release", timeout=10).json()
        assert deployment["parameters"]["home"] == env["PRIVRELEASE_HOME"]
        # what the UI's Run button sends: POST /deployments/{id}/create_flow_run
        run = httpx.post(f"{api}/deployments/{deployment['id']}/create_flow_run", json={"parameters": {}}, timeout=10)
        assert run.status_code == 201, run.text
        run_id = run.json()["id"]
        deadline = time.monotonic() + 240
        while True:
            state = httpx.get(f"{api}/flow_runs/{run_id}", timeout=10).json()["state"]["type"]
            if state in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
                break
            assert time.monotonic() < deadline, (root / "worker.log").read_text()[-3000:]
            time.sleep(1)
        assert state == "COMPLETED", (root / "worker.log").read_text()[-3000:]
        home = Path(env["PRIVRELEASE_HOME"])
        (folder,) = list((home / "releases" / "census-demo").iterdir())
        manifest = json.loads((folder / "manifest.json").read_text())
        entries = Ledger(home / "privrelease.duckdb").entries()
        assert [e.status for e in entries][-1] == PUBLISHED
        assert manifest["ledger"]["hash"] == entries[-2].hash and entries[-1].flow_run_id == run_id
        # an invalid parameter is rejected by the server before any run starts
        bad = httpx.post(f"{api}/deployments/{deployment['id']}/create_flow_run",
                         json={"parameters": {"spec_path": 42}}, timeout=10)  # fmt: skip
        assert bad.status_code == 409 and "spec_path" in bad.text
    finally:
        _stop(worker)
        log.close()
