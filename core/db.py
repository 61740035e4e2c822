"""Short-lived DuckDB connections to the one database file, and identifier quoting.

DuckDB lets one process at a time open a file for writing, so every use opens, works and
closes; a connection refused by another process's lock is retried until ``timeout``
(``$PRIVRELEASE_DB_WAIT`` seconds), then refused with ``DatabaseBusy`` naming the process that holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb

from core import settings
from core.errors import DatabaseBusy

LOCK_TIMEOUT_S = settings.number(settings.DB_WAIT, 120.0)
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


def _busy(path: Path, exc: duckdb.Error, timeout: float) -> DatabaseBusy:
    """The refusal after ``timeout`` s of another process's lock; DuckDB names the process ("held in PROGRAM (PID N)")."""
    held = re.search(r"held in (\S+) \(PID (\d+)\)", str(exc))
    who = f"another process ({Path(held[1]).name}, PID {held[2]})" if held else "another process"
    return DatabaseBusy(
        f"the database {path} is busy: {who} holds it (a command, the gate or a release using it), and it was not "
        f"let go within {timeout:g} s; try again when that process is done"
    )


@contextlib.contextmanager
def connect(path: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open ``path``, retrying while another process holds its lock, and always close it. The file and its
    write-ahead log are its owner's only (mode 600: the database holds the accounts' password hashes)."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    with private_files():
        while True:
            try:
                with _OPENING:
                    con = duckdb.connect(str(path))
                break
            except duckdb.IOException as exc:
                if not _is_lock_error(exc):
                    raise
                if time.monotonic() > deadline:
                    raise _busy(path, exc, timeout) from exc
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 1.5, 0.5)
        if path.stat().st_mode & 0o077:  # a database made before files were private
            os.chmod(path, 0o600)
        handle = _Handle(con)
        try:
            yield handle  # type: ignore[misc] - a stand-in that forwards to the connection
        finally:
            handle.release()


_UMASK = threading.Lock()
_held: list[int] = []  # the umask to restore, while a connection is open


@contextlib.contextmanager
def private_files() -> Iterator[None]:
    """Files created meanwhile are their owner's only (umask 077). DuckDB creates its database file on
    open and its write-ahead log on a connection's first write (an empty file made beforehand is refused
    or replaced), both with the umask, so the umask is held while any connection is open: it is the
    process's, set by the first to open and restored by the last to close."""
    with _UMASK:
        if not _held:
            saved = os.umask(0o077)
            os.umask(saved | 0o077)
            _held.append(saved)
        else:
            _held.append(_held[0])
    try:
        yield
    finally:
        with _UMASK:
            saved = _held.pop()
            if not _held:
                os.umask(saved)


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
    """An in-memory database for a mechanism's intermediate tables, spilling to the temp folder; no progress
    bar (DuckDB draws one on stdout for a query past 2 s, into a command's output)."""
    con = duckdb.connect(
        config={
            "temp_directory": tempfile.gettempdir(),
            "memory_limit": SCRATCH_MEMORY,
            "preserve_insertion_order": False,
        }
    )
    con.execute("SET enable_progress_bar = false")
    return con
