"""Short-lived DuckDB connections to the one database file, and identifier quoting.

DuckDB lets one process at a time open a file for writing, so every use opens, works and
closes; a connection refused by another process's lock is retried until ``timeout``.
"""

from __future__ import annotations

import contextlib
import fcntl
import random
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb

from core import settings

LOCK_TIMEOUT_S = 120.0
# Threads of one process opening one file at the same instant race in DuckDB's database cache ("Unique
# file handle conflict"; seen in the gate under load): opening and closing are serialized per process
# (a close lets the file go from that cache), using is not.
_OPENING = threading.Lock()
# Working memory of a scratch database; past it DuckDB spills to disk (arrays held outside DuckDB, such
# as DPNE's token positions, are not counted in it).
SCRATCH_MEMORY = settings.get(settings.DUCKDB_MEMORY, "2GB")


def quote_ident(name: str) -> str:
    """Quote an identifier for SQL; DuckDB cannot bind identifiers."""
    return '"' + name.replace('"', '""') + '"'


def _is_lock_error(exc: duckdb.Error) -> bool:
    return "lock" in str(exc).lower()


@contextlib.contextmanager
def connect(path: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open ``path``, retrying while another process holds its lock, and always close it."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        try:
            with _OPENING:
                con = duckdb.connect(str(path))
            break
        except duckdb.IOException as exc:
            if not _is_lock_error(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 1.5, 0.5)
    handle = _Handle(con)
    try:
        yield handle  # type: ignore[misc] - a stand-in that forwards to the connection
    finally:
        handle.release()


class _Handle:
    """Forwards to a DuckDB connection until released, then lets it go.

    A traceback that outlives the ``with`` block (Prefect keeps failed runs' exceptions) holds
    the caller's frame, and with it this handle, but not the closed connection itself.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self._con: duckdb.DuckDBPyConnection | None = con

    def __getattr__(self, name: str):
        if self._con is None:
            raise duckdb.ConnectionException("the connection is closed")
        return getattr(self._con, name)

    def release(self) -> None:
        if self._con is not None:
            with _OPENING:
                self._con.close()
            self._con = None


@contextlib.contextmanager
def exclusive(lock_path: Path) -> Iterator[None]:
    """Serialize a critical section across threads and processes with an OS file lock."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def scratch() -> duckdb.DuckDBPyConnection:
    """An in-memory database for a mechanism's intermediate tables, spilling to the temp folder."""
    return duckdb.connect(
        config={
            "temp_directory": tempfile.gettempdir(),
            "memory_limit": SCRATCH_MEMORY,
            "preserve_insertion_order": False,
        }
    )
