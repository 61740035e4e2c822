"""Short-lived DuckDB connections to the one database file, and identifier quoting.

DuckDB lets one process at a time open a file for writing, so every use opens, works and
closes; a connection refused by another process's lock is retried until ``timeout``
(``$PRIVRELEASE_DB_WAIT`` seconds), then refused with ``DatabaseBusy`` naming the process that holds it.
A use attaches the file to this process's one in-memory database and detaches it after (DuckDB takes and
lets go of the file's lock as an open and a close do): about a millisecond, where creating a database for
each use cost 10-20 ms (DuckDB registers its built-in functions in every new database; bench/RESULTS.md).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import itertools
import os
import random
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb

from privrelease.core import settings
from privrelease.core.errors import DatabaseBusy

LOCK_TIMEOUT_S = settings.number(settings.DB_WAIT, 120.0)
# Threads of one process opening one file at the same instant race in DuckDB's database cache ("Unique
# file handle conflict"; seen in the gate under load), as they would attaching it and counting its users:
# opening and closing (attaching, detaching and the count) are serialized per process, using is not.
_OPENING = threading.Lock()
_BASE: list[_Base] = []  # this process's in-memory database, made at its first use
_BASE_LOCK = threading.Lock()  # its one connection object is used by one thread at a time (cursors, DETACH)
_ATTACHED: dict[str, list] = {}  # a file's path -> [its name in _BASE, the connections using it]
_NAMES = itertools.count()
# Working memory of a scratch database; past it DuckDB spills to disk (arrays held outside DuckDB, such
# as DPNE's token positions, are not counted in it).
SCRATCH_MEMORY = settings.get(settings.DUCKDB_MEMORY, "2GB")


@dataclass(frozen=True)
class _Base:
    con: duckdb.DuckDBPyConnection
    pid: int


def quote_ident(name: str) -> str:
    """Quote an identifier for SQL; DuckDB cannot bind identifiers."""
    return '"' + name.replace('"', '""') + '"'


def _is_lock_error(exc: duckdb.Error) -> bool:
    return "lock" in str(exc).lower()


def _is_unwritable(exc: duckdb.Error) -> bool:
    text = str(exc).lower()
    return "read-only file system" in text or "permission denied" in text


def read_only(con) -> bool:
    """Whether ``con`` (of ``connect``) reads a file attached read-only."""
    return bool(con.execute("SELECT readonly FROM duckdb_databases() WHERE database_name = current_database()").fetchone()[0])


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
                    con = _attach(path)
                break
            except duckdb.IOException as exc:
                if not _is_lock_error(exc):
                    raise
                if time.monotonic() > deadline:
                    raise _busy(path, exc, timeout) from exc
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 1.5, 0.5)
        if path.stat().st_mode & 0o077 and os.access(path, os.W_OK):  # a database made before files were private
            with contextlib.suppress(OSError):  # a read-only filesystem: read as it is
                os.chmod(path, 0o600)
        handle = _Handle(con, str(path))
        try:
            yield handle  # type: ignore[misc] - a stand-in that forwards to the connection
        finally:
            handle.release()


def _attach(path: Path) -> duckdb.DuckDBPyConnection:
    """A connection of this process's in-memory database using the file ``path`` (attached now unless another
    of its connections uses it: threads of one process share it, as they shared DuckDB's cached database).
    Under ``_OPENING``."""
    con = _cursor()
    try:
        if str(path) not in _ATTACHED:
            name = f"file{next(_NAMES)}"
            try:
                con.execute(f"ATTACH {quote_literal(str(path))} AS {quote_ident(name)}").fetchall()
            except duckdb.IOException as exc:
                if not path.exists() or not _is_unwritable(exc):
                    raise
                # a copy on a read-only filesystem, or one this user may only read: read it as it is (a write
                # is then refused by DuckDB, and said as such: ``privrelease.core.faults.environment``)
                con.execute(f"ATTACH {quote_literal(str(path))} AS {quote_ident(name)} (READ_ONLY)").fetchall()
            _ATTACHED[str(path)] = [name, 0]
        _ATTACHED[str(path)][1] += 1
    except BaseException:
        con.close()
        raise
    try:
        con.execute(f"USE {quote_ident(_ATTACHED[str(path)][0])}").fetchall()
    except BaseException:
        _detach(con, str(path))
        raise
    return con


def _cursor() -> duckdb.DuckDBPyConnection:
    """A new connection of this process's in-memory database (made at the first; a forked child makes its own)."""
    with _BASE_LOCK:
        if not _BASE or _BASE[0].pid != os.getpid():
            _BASE[:] = [_Base(duckdb.connect(), os.getpid())]
            _ATTACHED.clear()
        return _BASE[0].con.cursor()


@atexit.register
def _close_base() -> None:
    """At exit, this process's in-memory database is closed (not a forked child's copy of its parent's)."""
    if _BASE and _BASE[0].pid == os.getpid():
        _BASE.pop().con.close()


@contextlib.contextmanager
def memory() -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection of this process's in-memory database (DuckDB's defaults: row order kept), closed after: for
    short work on rows in memory, without making a database for it."""
    con = _cursor()
    try:
        yield con
    finally:
        con.close()


def _detach(con: duckdb.DuckDBPyConnection, path: str) -> None:
    """Close a connection of ``_attach``; the last one using its file detaches it. Under ``_OPENING``."""
    con.close()
    entry = _ATTACHED[path]
    entry[1] -= 1
    if not entry[1]:
        del _ATTACHED[path]
        with _BASE_LOCK:
            _BASE[0].con.execute(f"DETACH {quote_ident(entry[0])}").fetchall()


def quote_literal(text: str) -> str:
    """A SQL string literal (ATTACH takes no parameters)."""
    return "'" + text.replace("'", "''") + "'"


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

    def __init__(self, con: duckdb.DuckDBPyConnection, path: str):
        self._con: duckdb.DuckDBPyConnection | None = con
        self._path = path

    def __getattr__(self, name: str):
        if self._con is None:
            raise duckdb.ConnectionException("the connection is closed")
        return getattr(self._con, name)

    def release(self) -> None:
        if self._con is not None:
            with _OPENING:
                _detach(self._con, self._path)
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
