"""``privrelease.core.db.connect`` attaches the file to the process's one in-memory database for each use and detaches it after:
while a use lasts, another process cannot open the file (DuckDB's lock, as with an open); after it, it can, and the
process holds nothing of it. A variant that leaves the file attached keeps the other process out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from privrelease.core import db

OPEN = "import duckdb, sys\ntry:\n    duckdb.connect(sys.argv[1]).close(); print('opened')\nexcept duckdb.IOException as e:\n    print('locked' if 'lock' in str(e) else e)"


def _other_process(path: Path) -> str:
    return subprocess.run([sys.executable, "-c", OPEN, str(path)], capture_output=True, text=True, check=True).stdout.strip()


def _attached() -> list[str]:
    with db.memory() as con:
        return [name for (name,) in con.execute("SELECT database_name FROM duckdb_databases() WHERE NOT internal").fetchall()]


@pytest.mark.parametrize("weakened", [False, True])
def test_a_use_holds_the_file_and_lets_it_go(tmp_path: Path, weakened, monkeypatch):
    if weakened:  # the connection closed, the file left attached
        monkeypatch.setattr(db, "_detach", lambda con, path: (con.close(), db._ATTACHED[path].__setitem__(1, 0)))
    path = tmp_path / "home.duckdb"
    with db.connect(path) as con:
        con.execute("CREATE TABLE t AS SELECT 42 AS x").fetchall()
        with db.connect(path) as inner:  # a second use in this process shares the attachment
            assert inner.execute("SELECT x FROM t").fetchall() == [(42,)]
        assert _other_process(path) == "locked"
        assert con.execute("SELECT x FROM t").fetchall() == [(42,)]
    if weakened:
        assert _other_process(path) == "locked" and len(_attached()) > 1
        name, _ = db._ATTACHED.pop(str(path))  # let it go for the tests after this one
        with db.memory() as con:
            con.execute(f"DETACH {db.quote_ident(name)}").fetchall()
        return
    assert _other_process(path) == "opened" and _attached() == ["memory"]
    with db.connect(path) as con:  # attached again: what was written is there
        assert con.execute("SELECT x FROM t").fetchall() == [(42,)]


def test_memory_connections_are_each_their_own():
    with db.memory() as a, db.memory() as b:
        a.execute("CREATE TEMP TABLE mine AS SELECT 1 AS x").fetchall()
        assert a.execute("SELECT x FROM mine").fetchall() == [(1,)]
        with pytest.raises(Exception, match="mine"):
            b.execute("SELECT x FROM mine").fetchall()
