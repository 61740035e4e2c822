"""A real PostgreSQL 15 for the test suite: a throw-away cluster started as the ``postgres`` user.

No skip: if the server cannot start, every test that needs it fails with the server's log.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator

BIN = "/usr/lib/postgresql/15/bin"


def _as_postgres(*args: str) -> None:
    """Run a server command as the ``postgres`` user (the server refuses root); from / (pytest's folders are 0700)."""
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    done = subprocess.run([*prefix, *args], cwd="/", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' '.join(args[:2])} failed:\n{done.stdout}\n{done.stderr}"


@contextlib.contextmanager
def cluster(host: str = "127.0.0.1", clients: str | None = None, port: int | None = None) -> Iterator[str]:
    """Start a fresh cluster on ``port`` (default: a free one), listening on 127.0.0.1 and ``host``; yields its
    URL at ``host`` (trust authentication, user postgres, from this host and the ``clients`` network)."""
    folder = tempfile.mkdtemp(prefix="privrelease-pg-")
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    if port is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    data = f"{folder}/data"
    _as_postgres(f"{BIN}/initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
    if clients:
        with open(f"{data}/pg_hba.conf", "a") as hba:
            hba.write(f"host all all {clients} trust\n")
    listen = ",".join(dict.fromkeys(["127.0.0.1", host]))
    try:
        _as_postgres(
            f"{BIN}/pg_ctl",
            "-D",
            data,
            "-o",
            f"-c listen_addresses={listen} -p {port} -k {folder} -c fsync=off",
            "-l",
            f"{folder}/log",
            "-w",
            "start",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{open(f'{folder}/log').read()[-2000:]}") from None
    try:
        yield f"postgresql://postgres@{host}:{port}/postgres"
    finally:
        _as_postgres(f"{BIN}/pg_ctl", "-D", data, "-m", "fast", "-w", "stop")
        shutil.rmtree(folder, ignore_errors=True)


def raw_sql(ledger, *statements: str, args: list | None = None) -> None:
    """Run SQL on the ledger's store directly, as an operator who can write the database would."""
    if ledger.store.kind == "duckdb":
        import duckdb

        con = duckdb.connect(str(ledger.db_path))
        for statement in statements:
            con.execute(statement, args)
        con.close()
        return
    import psycopg

    with psycopg.connect(ledger.store.url, options="-c search_path=privrelease", autocommit=True) as con:
        for statement in statements:
            con.execute(statement.replace("?", "%s") if args else statement, args)
