"""Test setup. Prefect reads its settings at import, so its home is set before anything imports it."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="privrelease-prefect-home-")
# the ledgers' anchors live in the user's state folder, outside every home (privrelease.core.ledger.anchors): the session's own
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="privrelease-state-")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW"] = "ignore"
os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "120"
os.environ.pop("PREFECT_API_URL", None)

import logging

import pytest

for _made in (os.environ["PREFECT_HOME"], os.environ["XDG_STATE_HOME"]):  # not left behind, a pair per test session
    atexit.register(shutil.rmtree, _made, True)

# Prefect's console handler keeps the stream it first saw; under pytest's capture that stream is
# closed by later tests. Drop such write errors instead of printing them into the next test's stderr.
logging.raiseExceptions = False

# absl (dp-accounting's logging) makes its handler at import, on the sys.stderr of that moment: under
# pytest, the capture's file. Prefect's logging setup closes every existing handler, and absl's close()
# closes its stream unless it is the process's own stderr, which would close pytest's capture file under
# every later test. Give absl the process's stderr, which it never closes.
import absl.logging  # noqa: E402

absl.logging.get_absl_handler().python_handler.stream = sys.__stderr__

REPO = Path(__file__).resolve().parent.parent

# The audit tier's files, collected by `make audit` (PRIVRELEASE_AUDIT=1) only: whole stacks started as the
# docs print them, minutes each (tests/project/test_serve_network.py)
collect_ignore = [] if os.environ.get("PRIVRELEASE_AUDIT") == "1" else ["project/test_serve_network.py"]


# Two tiers. `make test` (CI) runs every test but the system tier, on two pytest-xdist workers; `make test-system`
# runs the system tier: whole stacks (the served Prefect with its gate, proxy and worker, the browser, `make serve`,
# two hosts on PostgreSQL, a fresh home's first start), tens of seconds to minutes each. A file of the tier is named here;
# a single test of another file is marked `@pytest.mark.system`.
SYSTEM = Path(__file__).resolve().parent / "system"  # the system tier: every test under tests/system/


def pytest_collection_modifyitems(config, items):
    """The system tier's files marked. `make test`'s two workers take the tests one by one (`--dist load`): a file's
    module fixtures and the session's served Prefect are built on each worker that runs one of its tests.
    (pytest-xdist's `loadgroup` cannot group them under pytest 9, which ignores the test ids xdist rewrites.)"""
    for item in items:
        if item.path.is_relative_to(SYSTEM):
            item.add_marker(pytest.mark.system)


@pytest.fixture(scope="session")
def prefect_server():
    """One Prefect test server for the whole session (it costs ~10 s to start)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh $PRIVRELEASE_HOME."""
    root = tmp_path / "home"
    root.mkdir()
    monkeypatch.setenv("PRIVRELEASE_HOME", str(root))
    return root


@pytest.fixture
def test_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Allow fixed seeds (PRIVRELEASE_TEST_MODE=1)."""
    monkeypatch.setenv("PRIVRELEASE_TEST_MODE", "1")


def real_data(relative: str) -> Path:
    """A file of the real data sets under $PRIVRELEASE_DATA; skips the test when that is unset."""
    root = os.environ.get("PRIVRELEASE_DATA")
    if not root:
        pytest.skip(f"needs the public data set {relative}: set PRIVRELEASE_DATA to the folder that holds it")
    return Path(root) / relative


def adult_clean():
    """UCI Adult without rows that have a missing value ('?'): 30,162 rows."""
    import pandas as pd

    frame = pd.read_csv(real_data("uci/adult.data.gz"), skipinitialspace=True, na_values="?")
    frame.columns = [c.strip() for c in frame.columns]
    return frame.dropna().reset_index(drop=True)


ADULT_QI = ["education", "race", "sex", "workclass", "marital-status", "age", "relationship",
            "native-country", "Salary"]  # fmt: skip


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    """`make serve` without its worker: a real `prefect server` asking for the operator's credential,
    privrelease's gate in front of it and the proxy (nginx) in front of the gate, where people reach them
    ($PRIVRELEASE_GATE_URL in the environment yielded; the bare gate's, behind it, is $PRIVRELEASE_GATE_PORT),
    the demo datasets, the pool and every deployment; shared by the server, gate, proxy and browser tests
    (each starts its own worker)."""
    from tests.system.test_server import deploy, gate, proxy, running_server

    root = tmp_path_factory.mktemp("server")
    # the per-account limits (tested on gates of their own in tests/system/test_quotas.py) set out of reach: the
    # session's accounts start runs in many tests, in whatever order and pace the workers take them
    roomy = {
        "PRIVRELEASE_ACCOUNT_RUNS": "1000",
        "PRIVRELEASE_ACCOUNT_SCHEDULED": "1000",
        "PRIVRELEASE_ACCOUNT_PER_MINUTE": "1000",
        "PRIVRELEASE_ACCOUNT_RELEASES": "1000",
        "PRIVRELEASE_POOL_RESERVED": "0",  # the tests' runs that no worker takes fill the pool's queue
        "PRIVRELEASE_PREVIEW_SECONDS": "1800",  # a loaded machine's preview (tested in tests/system/test_run_limits.py)
    }
    with (
        running_server(root, roomy) as env,
        gate(env, root / "gate.log") as gate_url,
        proxy(env, gate_url, root / "proxy.log") as url,
    ):
        deploy(env)
        yield env | {"PRIVRELEASE_GATE_URL": url, "PRIVRELEASE_GATE_PORT": gate_url.rsplit(":", 1)[1]}, root


@pytest.fixture(scope="session")
def pg_server():
    """One real PostgreSQL 15 server for the session (about a second to start); no skip if it cannot."""
    from tests.support.pg import cluster

    with cluster() as url:
        yield url


@pytest.fixture
def pg_url(pg_server: str):
    """A fresh, empty database on the session's server; dropped afterwards."""
    import uuid

    import psycopg

    from privrelease.core import store

    name = f"t{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_server, autocommit=True) as con:
        con.execute(f"CREATE DATABASE {name}")
    url = f"{pg_server.rsplit('/', 1)[0]}/{name}"
    yield url
    store.close(url)
    with psycopg.connect(pg_server, autocommit=True) as con:
        con.execute(f"DROP DATABASE {name} WITH (FORCE)")


PASSWORD = "correct horse battery"  # the test accounts' (tests/system/test_gate.py, tests/system/test_ui.py)


@pytest.fixture(scope="session")
def people(served):
    """One account per role (and a second analyst), added as the operator does; clients through the gate."""
    env, _ = served
    from privrelease.gate.accounts import Accounts

    accounts = Accounts(Path(env["PRIVRELEASE_HOME"]) / "privrelease.duckdb")
    known = {a.name for a in accounts.all()}
    for name, role in (("alice", "analyst"), ("vera", "analyst"), ("ada", "auditor"), ("sam", "steward")):
        if name not in known:
            accounts.add(name, role, PASSWORD)
    from tests.system.test_server import person

    return {name: person(env["PRIVRELEASE_GATE_URL"], name, PASSWORD) for name in ("alice", "vera", "ada", "sam")}
