"""Every environment variable privrelease reads, in one table, and the one place that reads them.

A variable set to the empty string counts as unset. Values are read when asked for, never cached:
the command line sets the home for the flows it starts, and tests set variables per test.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Variable:
    name: str
    default: str  # what applies when it is unset, in words
    meaning: str


HOME = "PRIVRELEASE_HOME"
DATA_ROOT = "PRIVRELEASE_DATA_ROOT"
SNAPSHOT_STORE = "PRIVRELEASE_SNAPSHOT_STORE"
SNAPSHOT_DIR = "PRIVRELEASE_SNAPSHOT_DIR"  # SNAPSHOT_STORE's earlier name: refused with the new one's
LEDGER_URL = "PRIVRELEASE_LEDGER_URL"
LEDGER_KEY_FILE = "PRIVRELEASE_LEDGER_KEY_FILE"
LEDGER_ANCHORS = "PRIVRELEASE_LEDGER_ANCHORS"
LEASE_SECONDS = "PRIVRELEASE_LEASE_SECONDS"
TEST_MODE = "PRIVRELEASE_TEST_MODE"
FAULT = "PRIVRELEASE_FAULT"
DEBUG = "PRIVRELEASE_DEBUG"
RUNNER = "PRIVRELEASE_RUNNER"
DASK_ADDRESS = "PRIVRELEASE_DASK_ADDRESS"
DASK_WORKERS = "PRIVRELEASE_DASK_WORKERS"
DUCKDB_MEMORY = "PRIVRELEASE_DUCKDB_MEMORY"
APPROVAL_TIMEOUT = "PRIVRELEASE_APPROVAL_TIMEOUT"
REPO = "PRIVRELEASE_REPO"
HOST = "PRIVRELEASE_HOST"
PORT = "PRIVRELEASE_PORT"
GATE_PORT = "PRIVRELEASE_GATE_PORT"
TLS_CERT = "PRIVRELEASE_TLS_CERT"
TLS_KEY = "PRIVRELEASE_TLS_KEY"
PREFECT_URL = "PRIVRELEASE_PREFECT_URL"
PREFECT_AUTH = "PREFECT_API_AUTH_STRING"  # Prefect's own: the operator's credential for its server
PREFECT_API = "PREFECT_API_URL"  # Prefect's own: the server a command's flow runs report to
PREFECT_HOME = "PREFECT_HOME"  # Prefect's own: its settings and profiles (the command line sets it under our home)
PREFECT_PROFILES = "PREFECT_PROFILES_PATH"  # Prefect's own: its profiles file, if not in PREFECT_HOME
FLOW_RUN_ID = "PREFECT__FLOW_RUN_ID"  # Prefect's own: the run a worker starts a process for
POOL_LIMIT = "PRIVRELEASE_POOL_LIMIT"
WORKER_LIMIT = "PRIVRELEASE_WORKER_LIMIT"
ACCOUNT_RUNS = "PRIVRELEASE_ACCOUNT_RUNS"
ACCOUNT_SCHEDULED = "PRIVRELEASE_ACCOUNT_SCHEDULED"
ACCOUNT_PER_MINUTE = "PRIVRELEASE_ACCOUNT_PER_MINUTE"
PARAMETERS_KB = "PRIVRELEASE_PARAMETERS_KB"
SCHEDULE_AHEAD_DAYS = "PRIVRELEASE_SCHEDULE_AHEAD_DAYS"
DB_WAIT = "PRIVRELEASE_DB_WAIT"
POOL_RESERVED = "PRIVRELEASE_POOL_RESERVED"
GATE_CALLS = "PRIVRELEASE_GATE_CALLS"
ACCOUNT_CALLS = "PRIVRELEASE_ACCOUNT_CALLS"
ACCOUNT_RELEASES = "PRIVRELEASE_ACCOUNT_RELEASES"
RUN_SECONDS = "PRIVRELEASE_RUN_SECONDS"
PREVIEW_SECONDS = "PRIVRELEASE_PREVIEW_SECONDS"
LOG_MB = "PRIVRELEASE_LOG_MB"
MIN_FREE_MB = "PRIVRELEASE_MIN_FREE_MB"

VARIABLES = (
    Variable(HOME, "the user data folder (platformdirs)", "the state folder: database, snapshots, releases, keys"),
    Variable(DATA_ROOT, "<home>/data", "the only folder sources and spam mail are read from"),
    Variable(SNAPSHOT_STORE, "<home>/datasets", "where registered snapshots are kept (shared by every worker)"),
    Variable(LEDGER_URL, "the home's DuckDB file", "postgresql://... to keep the ledger and registry in PostgreSQL"),
    Variable(LEDGER_KEY_FILE, "<home>/keys/ledger.key", "the ledger's HMAC key"),
    Variable(
        LEDGER_ANCHORS,
        "one file per ledger in the user's state folder (outside the home)",
        "the anchor files, separated by the path separator (the first written); keep them where a backup of the home is not",
    ),
    Variable(LEASE_SECONDS, "21600", "how long a charge's holder may be silent before its charge is recovered"),
    Variable(DB_WAIT, "120", "seconds a command or a run waits for the home's database while another process holds it"),
    Variable(TEST_MODE, "unset", "1: fixed seeds and test hooks are accepted (releases are marked as tests)"),
    Variable(FAULT, "unset", "test mode only: the step boundary at which a release kills itself"),
    Variable(DEBUG, "unset", "1: user errors with their tracebacks"),
    Variable(RUNNER, "local", "where heavy pieces run: local or dask"),
    Variable(DASK_ADDRESS, "unset", "a running Dask scheduler's address (else a local cluster)"),
    Variable(DASK_WORKERS, "2", "workers of a local Dask cluster"),
    Variable(DUCKDB_MEMORY, "2GB", "the memory limit of a mechanism's scratch DuckDB"),
    Variable(APPROVAL_TIMEOUT, "86400", "seconds a run waits for a steward's approval"),
    Variable(REPO, "this checkout", "the checkout whose prefect.yaml the worker's guard holds runs to"),
    Variable(HOST, "127.0.0.1", "the address the proxy listens on, where people reach the UI and the API"),
    Variable(PORT, "4200", "the proxy's port, where people reach the UI and the API"),
    Variable(GATE_PORT, "4202", "the gate's port on 127.0.0.1, behind the proxy"),
    Variable(TLS_CERT, "unset (plain HTTP)", "the proxy's TLS certificate chain (PEM); with TLS_KEY it serves HTTPS only"),
    Variable(TLS_KEY, "unset", "the private key (PEM) of TLS_CERT"),
    Variable(PREFECT_URL, "required by the gate", "Prefect's server behind the gate"),
    Variable(
        PREFECT_AUTH,
        "required by the gate and the proxy",
        "the operator's credential for Prefect's server (the proxy derives the key of the gate's sign-in proofs from it)",
    ),
    Variable(
        PREFECT_API, "unset (or a Prefect profile's)", "the Prefect server commands run flows on; none: releases run directly"
    ),
    Variable(PREFECT_HOME, "<home>/prefect", "Prefect's own folder (profiles, its temporary server's database)"),
    Variable(PREFECT_PROFILES, "$PREFECT_HOME/profiles.toml", "Prefect's profiles file"),
    Variable(FLOW_RUN_ID, "set by Prefect's worker", "the flow run the worker's guard checks"),
    Variable(POOL_LIMIT, "4", "flow runs running at once in the pool, over all its workers (make serve sets it)"),
    Variable(WORKER_LIMIT, "4", "flow runs one worker runs at once (make serve's worker --limit)"),
    Variable(ACCOUNT_RUNS, "2", "the gate: an account's runs not finished (scheduled, running, waiting for a steward)"),
    Variable(ACCOUNT_SCHEDULED, "1", "the gate: of those, an account's runs scheduled for later"),
    Variable(ACCOUNT_PER_MINUTE, "6", "the gate: runs an account starts in a minute"),
    Variable(PARAMETERS_KB, "16", "the gate: the largest parameters of a run, in KB of JSON"),
    Variable(SCHEDULE_AHEAD_DAYS, "30", "the gate: how many days ahead a run may be scheduled"),
    Variable(POOL_RESERVED, "1", "the gate: the pool's slots kept for accounts with no run going (0: none)"),
    Variable(GATE_CALLS, "32", "the gate: signed-in calls in progress at once, of all accounts, shared fairly between them"),
    Variable(ACCOUNT_CALLS, "16", "the gate: of those, one account's (past its share, or these, 429)"),
    Variable(ACCOUNT_RELEASES, "24", "the gate: runs an account starts in a day that publish (every run but a preview)"),
    Variable(RUN_SECONDS, "3600", "the worker: seconds a run may take; past them it is stopped and fails"),
    Variable(PREVIEW_SECONDS, "120", "the worker: seconds a form's preview may take; past them it is stopped and fails"),
    Variable(
        MIN_FREE_MB, "64", "MB kept free on the releases' disk beyond a release's estimate; less refuses it before its charge"
    ),
    Variable(LOG_MB, "64", "make serve: each log's size in MB past which it is rotated (2 older files kept)"),
)


def get(name: str, default: str | None = None) -> str | None:
    """The variable's value; ``default`` when it is unset or empty."""
    return os.environ.get(name) or default


def flag(name: str) -> bool:
    """Whether the variable is set to 1."""
    return os.environ.get(name, "") == "1"


def number(name: str, default: float) -> float:
    """The variable as a number; ``default`` when it is unset or empty."""
    value = get(name)
    return default if value is None else float(value)
