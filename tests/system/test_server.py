"""A real `prefect server`, a process work pool, deployments from prefect.yaml and a worker:
a release triggered through the REST API exactly as the UI's Run button does it."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil

from privrelease.core import limits
from privrelease.core.datasets.demo import write_demo
from privrelease.core.ledger.ledger import PUBLISHED, Ledger
from privrelease.core.privacy.budget import Budget
from privrelease.core.release.catalogue import FORM_FIELD
from privrelease.gate.access import RELEASE_FORMS
from tests.conftest import REPO

BIN = Path(sys.executable).parent
TERMINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


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


def _healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float, verify: ssl.SSLContext | bool = True) -> None:
    """Wait until the server started as ``proc`` answers its health check at ``url``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{url}/api/health", timeout=2, verify=verify).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.3)


@contextmanager
def running_server(root: Path, extra: dict | None = None, host: str = "127.0.0.1"):
    """A `prefect server` on a free port of ``host`` with its own PREFECT_HOME (and ``extra`` settings,
    e.g. its database); yields the environment for clients."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    credential = f"operator:{secrets.token_urlsafe(18)}"  # Prefect's own: the operator's alone, as under make serve
    env |= {
        "PREFECT_HOME": str(root / "prefect"),
        "PREFECT_API_URL": f"http://{host}:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PRIVRELEASE_HOME": str(root / "home"),
        "PRIVRELEASE_REPO": str(REPO),
        "PREFECT_SERVER_API_AUTH_STRING": credential,
        "PREFECT_API_AUTH_STRING": credential,
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",  # the worker's job command runs the venv's python
        "PREFECT_UI_API_URL": "/api",  # the UI calls its API where it was loaded from: the gate
        "PREFECT_SERVER_UI_V2_ENABLED": "false",  # one UI, the one the policy is written for
    }
    env |= extra or {}
    log = open(root / "server.log", "w")
    proc = subprocess.Popen(
        [str(BIN / "prefect"), "server", "start", "--host", host, "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _healthy(f"http://{host}:{port}", proc, root / "server.log", 180)
        yield env
    finally:
        _stop(proc)
        log.close()


@contextmanager
def gate(env: dict, log_path: Path, module: str = "privrelease.gate", checkout: Path = REPO):
    """privrelease's gate in front of the server (``python -m privrelease.gate``, as `make serve` starts it, on 127.0.0.1;
    ``module``: another way to start it; ``checkout``: the code of another checkout); yields its URL. The server's
    UI was told to call its API where it was loaded from."""
    port = _free_port()
    genv = env | {"PRIVRELEASE_GATE_PORT": str(port), "PRIVRELEASE_PREFECT_URL": env["PREFECT_API_URL"].removesuffix("/api")}
    with _service([str(BIN / "python"), "-m", module], genv, log_path, f"http://127.0.0.1:{port}", cwd=checkout) as url:
        yield url


@contextmanager
def proxy(env: dict, gate_url: str, log_path: Path, tls: tuple[Path, Path] | None = None, checkout: Path = REPO):
    """privrelease's proxy (nginx, ``python -m privrelease.gate.proxy`` as `make serve` starts it; ``checkout``: another
    checkout's) in front of the gate at ``gate_url``, with TLS when ``tls`` names a certificate and its key; yields
    its URL, where people reach the UI and the API. Its state is in the environment's home."""
    port = _free_port()
    penv = env | {"PRIVRELEASE_PORT": str(port), "PRIVRELEASE_GATE_PORT": gate_url.rsplit(":", 1)[1]}
    if tls:
        penv |= {"PRIVRELEASE_TLS_CERT": str(tls[0]), "PRIVRELEASE_TLS_KEY": str(tls[1])}
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    verify = ssl.create_default_context(cafile=tls[0]) if tls else True
    with _service([str(BIN / "python"), "-m", "privrelease.gate.proxy"], penv, log_path, url, verify, checkout) as url:
        yield url


@contextmanager
def _service(command: list[str], env: dict, log_path: Path, url: str, verify: ssl.SSLContext | bool = True, cwd: Path = REPO):
    log = open(log_path, "w")
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _healthy(url, proc, log_path, 60, verify)
        yield url
    finally:
        _stop(proc)
        log.close()


class _RetryBusy(httpx.HTTPTransport):
    """A SQLite-backed Prefect server answers 503 ("retry") while its database is busy; Prefect's own client
    retries those, and so do the tests' clients (the gate passes the 503 on as it is)."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        for _ in range(40):
            response = super().handle_request(request)
            if response.status_code != 503:
                return response
            response.read()
            response.close()
            time.sleep(0.5)
        return response


def person(gate_url: str, name: str, password: str) -> httpx.Client:
    """Prefect's API as a person reaches it: through the gate, with their account."""
    return httpx.Client(base_url=f"{gate_url}/api", auth=(name, password), timeout=10, transport=_RetryBusy())


def operator(env: dict) -> httpx.Client:
    """Prefect's API as the operator reaches it: directly, with Prefect's own credential."""
    return httpx.Client(
        base_url=env["PREFECT_API_URL"],
        auth=tuple(env["PREFECT_API_AUTH_STRING"].split(":", 1)),
        timeout=10,
        transport=_RetryBusy(),
    )


def deploy(env: dict) -> None:
    """What `make serve` does before its worker: the demo datasets, the pool, every deployment."""
    write_demo(Path(env["PRIVRELEASE_HOME"]), rows=2000)
    _run(env, "work-pool", "create", "privrelease", "--type", "process", "--base-job-template", "deploy/process-pool.json")
    _run(env, "work-pool", "set-concurrency-limit", "privrelease", str(limits.configured().pool))
    _run(env, "--no-prompt", "deploy", "--all")


@contextmanager
def worker(env: dict, log_path: Path, pool: str = "privrelease", limit: int | None = None):
    """A `prefect worker` on the pool, as `make serve` starts it (with its limit of runs at once, by default
    the configured one)."""
    log = open(log_path, "w")
    limit = limits.configured().worker if limit is None else limit
    proc = subprocess.Popen(
        [str(BIN / "prefect"), "worker", "start", "--pool", pool, "--install-policy", "never", "--limit", str(limit)],
        env=env,
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield proc
        _settle(env, proc)
    finally:
        _stop(proc)
        log.close()


def _settle(env: dict, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Wait until the processes of the runs that have ended have exited. A run's process sends its last log
    lines after its final state, and stopping the worker's process group stops it too: those lines would be
    lost (a loaded machine's process takes seconds). Runs still going are left to be stopped with the worker."""
    api, deadline = operator(env), time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = {run_id: api.get(f"/flow_runs/{run_id}").json().get("state") or {} for _, run_id in _runs_under(proc)}
        if not any(state.get("type") in TERMINAL for state in states.values()):
            return
        time.sleep(0.5)


def _runs_under(proc: subprocess.Popen) -> list[tuple[psutil.Process, str]]:
    """The processes under the worker ``proc`` that run a flow run, with its id (the worker starts each run's
    process with the run's id in its environment)."""
    found = []
    for p in psutil.Process(proc.pid).children(recursive=True):
        try:
            if run_id := p.environ().get("PREFECT__FLOW_RUN_ID"):
                found.append((p, run_id))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass  # ended while we looked
    return found


def run_processes(proc: subprocess.Popen, run_id: str) -> list[psutil.Process]:
    """The processes under the worker ``proc`` that run the flow run ``run_id``."""
    return [p for p, run in _runs_under(proc) if run == run_id]


def deployment(api: httpx.Client, name: str) -> dict:
    """A deployment by its name (one name per deployment in prefect.yaml)."""
    (found,) = api.post("/deployments/filter", json={"deployments": {"name": {"any_": [name]}}}, timeout=10).json()
    return found


def _create_run(api: httpx.Client, deployment_id: str, parameters: dict) -> httpx.Response:
    """POST /deployments/{id}/create_flow_run, as the UI does; SQLite-backed servers answer 503
    while busy (right after a deploy), so retry those for a while."""
    for _ in range(30):
        response = api.post(f"/deployments/{deployment_id}/create_flow_run", json={"parameters": parameters}, timeout=10)
        if response.status_code != 503:
            return response
        time.sleep(1)
    return response


def _wait(api: httpx.Client, run_id: str, log: Path, timeout: float = 240) -> str:
    """Poll a flow run until it ends; returns its final state type."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            state = api.get(f"/flow_runs/{run_id}", timeout=10).json()["state"]["type"]
        except (
            httpx.TimeoutException
        ):  # the SQLite-backed server, busy with concurrent runs, may miss one poll: the deadline decides
            state = None
        if state in TERMINAL:
            return state
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(1)


def _logs(api: httpx.Client, run_id: str, timeout: float = 30) -> list[dict]:
    """A run's log lines, once its last one (the flow's own "Finished in state ...", not a task's, nor that of a run
    that was suspended for a steward and went on in a new process) has reached the server."""
    deadline = time.monotonic() + timeout
    while True:
        logs = api.post("/logs/filter", timeout=10, json={"logs": {"flow_run_id": {"any_": [run_id]}}}).json()
        last = [
            x
            for x in logs
            if x["message"].startswith("Finished in state")
            and not x["message"].startswith(("Finished in state Suspended", "Finished in state Paused"))
            and not x.get("task_run_id")
        ]
        if last or time.monotonic() > deadline:
            return logs
        time.sleep(0.5)


def _run(env: dict, *args: str) -> str:
    out = subprocess.run([str(BIN / "prefect"), *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout


def test_release_triggered_like_the_ui(served):
    env, root = served
    api = operator(env)
    with worker(env, root / "worker.log"):
        spam = deployment(api, "spam-filter-training")
        root_of_data = Path(env.get("PRIVRELEASE_DATA_ROOT") or Path(env["PRIVRELEASE_HOME"]) / "data")
        assert (root_of_data / spam["parameters"]["spec_path"]).is_file()  # the spec resolves under the data root
        for name in RELEASE_FORMS:
            form = deployment(api, name)["parameter_openapi_schema"]["properties"]
            # no home, source, path or cluster to fill in: the dataset's id and the mechanism's parameters
            assert "dataset" in form and not set(form) & {
                "home",
                "source",
                "spec_path",
                "request",
                "runner",
                "dask_address",
                "dask_workers",
                "seed",
            }, name
        assert deployment(api, "ledger-audit")["parameters"] == {}
        ra = deployment(api, "ra")
        home = Path(env["PRIVRELEASE_HOME"])
        releases = home / "releases" / "census-demo"
        before = len(list(releases.iterdir())) if releases.is_dir() else 0  # other tests share this server
        # what the UI's Quick run sends: POST /deployments/{id}/create_flow_run with the form's defaults
        run = _create_run(api, ra["id"], {})
        assert run.status_code == 201, run.text
        run_id = run.json()["id"]
        assert _wait(api, run_id, root / "worker.log") == "COMPLETED"
        entries = Ledger(home / "privrelease.duckdb").entries()
        assert len(list(releases.iterdir())) == before + 1
        manifest = json.loads((releases / entries[-1].release_id / "manifest.json").read_text())
        assert [e.status for e in entries][-1] == PUBLISHED
        assert manifest["ledger"]["hash"] == entries[-2].hash and entries[-1].flow_run_id == run_id
        # an invalid parameter is rejected by the server before any run starts
        bad = _create_run(api, ra["id"], {"dataset": {"id": "x", "source": "/etc/passwd", "format": "csv"}})
        assert bad.status_code == 409 and "dataset" in bad.text
        # the SDC forms offer the registered columns by name: one the policy does not publish is refused there
        # the SDC forms' column fields are marked for the gate, which offers the chosen dataset's columns when the UI
        # opens the form (tests/system/test_gate.py); stored as text, a column the dataset lacks is refused by the
        # release's own check (tests/flows/test_forms.py), never trusted to the schema Prefect holds
        assert ra["parameter_openapi_schema"]["properties"]["qi"]["items"][FORM_FIELD] == "column"
        # a run cannot set the worker's environment (test mode, another home) or its command
        hostile = api.post(
            f"/deployments/{ra['id']}/create_flow_run",
            timeout=10,
            json={"parameters": {}, "job_variables": {"env": {"PRIVRELEASE_TEST_MODE": "1"}}},
        )
        assert hostile.status_code == 422 and "'env' was unexpected" in hostile.text
        dotted = api.post(
            f"/deployments/{ra['id']}/create_flow_run",
            timeout=10,
            json={"parameters": {}, "job_variables": {"env.PRIVRELEASE_TEST_MODE": "1"}},
        )
        assert dotted.status_code == 422
        assert len(list(releases.iterdir())) == before + 1
        assert [e.status for e in Ledger(home / "privrelease.duckdb").entries()][-1] == PUBLISHED  # nothing charged
        # the typed form: a release filled in field by field (Enhanced RA: RA's form with k set)
        typed = _create_run(api, ra["id"], {"qi": ["age", "sex", "race"], "sensitive": "occupation", "k": 2})
        assert typed.status_code == 201, typed.text
        assert _wait(api, typed.json()["id"], root / "worker.log") == "COMPLETED"
        assert len(list(releases.iterdir())) == before + 2
        # a bound the schema states is checked by the server, naming the field
        rejected = _create_run(api, deployment(api, "dpne")["id"], {"epsilon": -1})
        assert rejected.status_code == 409 and "epsilon" in rejected.text
        # one the schema cannot state (k against the number of QI columns) fails the run at once, in one line
        wrong = _create_run(api, ra["id"], {"qi": ["age", "sex"], "k": 10}).json()["id"]
        assert _wait(api, wrong, root / "worker.log") == "FAILED"
        message = api.get(f"/flow_runs/{wrong}", timeout=10).json()["state"]["message"]
        assert message == "the release request is invalid: k must be between 1 and the number of QI columns (2), got 10."
        logs = _logs(api, wrong)
        assert [x["message"] for x in logs if x["level"] >= 40] == [message]  # once, without a traceback
        # one found only in the data (no MEWS width in the range fits these rows): once too, not per task
        infeasible = _create_run(api, deployment(api, "mews")["id"], {"t_lb": 0.5, "t_ub": 1.0}).json()["id"]
        assert _wait(api, infeasible, root / "worker.log") == "FAILED"
        message = api.get(f"/flow_runs/{infeasible}", timeout=10).json()["state"]["message"]
        assert message.startswith("no width in t_range [0.5, 1.0] puts at least 2 tuples in every cell")
        assert [x["message"] for x in _logs(api, infeasible) if x["level"] >= 40] == [message]
        assert len(list(releases.iterdir())) == before + 2


def test_spam_training_deployment_runs_on_the_worker(served):
    """The demo's spam training (2048-bit keys, 2 users, 1,200 messages) as a deployment run: its
    parties in their own processes under the worker, each round a task, an mpc entry in the ledger."""
    env, root = served
    api = operator(env)
    home = Path(env["PRIVRELEASE_HOME"])
    spam = deployment(api, "spam-filter-training")
    with worker(env, root / "worker3.log"):
        run = _create_run(api, spam["id"], {})
        assert run.status_code == 201, run.text
        assert _wait(api, run.json()["id"], root / "worker3.log", 300) == "COMPLETED", (root / "worker3.log").read_text()[-3000:]
        tasks = api.post("/task_runs/filter", timeout=10, json={"flow_runs": {"id": {"any_": [run.json()["id"]]}}}).json()
    assert {"round-1", "round-2", "round-3"} <= {t["name"] for t in tasks}
    entries = [e for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id == "spam-demo"]
    assert [(e.kind, e.status) for e in entries] == [("mpc", "reserved"), ("mpc", "published")]
    assert oct((home / "spam" / "spam-demo" / "model.npy").stat().st_mode & 0o777) == "0o600"


def test_concurrent_runs_through_the_worker_never_exceed_the_cap(served):
    """Four n-gram releases of epsilon 1 at once against a cap the admission filter fills with two of them
    (epsilon 1.6: basic composition would admit one): two publish, two are refused."""
    env, root = served
    api = operator(env)
    home = Path(env["PRIVRELEASE_HOME"])
    ledger = Ledger(home / "privrelease.duckdb")
    assert not [e for e in ledger.entries("posts-demo") if e.status == "reserved"]  # other tests leave it unspent
    ledger.set_budget("posts-demo", Budget(1.6, 1e-6))
    dpne = deployment(api, "dpne")
    with worker(env, root / "worker2.log"):
        ids = [_create_run(api, dpne["id"], {}).json()["id"] for _ in range(4)]
        states = {run_id: _wait(api, run_id, root / "worker2.log", 300) for run_id in ids}
    assert sorted(states.values()) == ["COMPLETED", "COMPLETED", "FAILED", "FAILED"], (root / "worker2.log").read_text()[-3000:]
    ledger = Ledger(home / "privrelease.duckdb")
    charges = [e for e in ledger.entries("posts-demo") if e.status == "reserved"]
    assert len(charges) == 2 and sum(e.epsilon for e in charges) == 2.0
    assert len(list((home / "releases" / "posts-demo").iterdir())) == 2
    assert ledger.verify() >= 3
