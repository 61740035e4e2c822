"""Where the ledger and the dataset registrations live: the home's DuckDB file, or PostgreSQL.

``$PRIVRELEASE_LEDGER_URL`` (``postgresql://…``) chooses PostgreSQL; unset, the embedded DuckDB
file under the home is used, as on one machine. Both give the same tables and the same SQL (``?``
placeholders); they differ in how writers are serialized:

- DuckDB: an OS file lock around each write transaction (one host only);
- PostgreSQL: row locks inside the transaction, so writers on any host are serialized by the
  database: ``SELECT … FOR UPDATE`` on the dataset's row for a charge's read-check-append, and on
  the chain head's row for the append itself (the chain is one sequence over all datasets).

A URL's password is never printed: messages show ``redact(url)``.
"""

from __future__ import annotations

import atexit
import contextlib
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from privrelease.core import settings
from privrelease.core.db import connect, exclusive, read_only
from privrelease.core.errors import UserError

SCHEMA = "privrelease"  # PostgreSQL schema of our tables, apart from Prefect's when they share a database
REGISTRY_LOCK = "registry"  # ``Store.lock``'s name every registration change takes (a disclosure policy recorded under it)

_TABLES = """
CREATE TABLE IF NOT EXISTS ledger (
    seq BIGINT PRIMARY KEY, ts VARCHAR NOT NULL, dataset VARCHAR NOT NULL, release_id VARCHAR, flow_run_id VARCHAR,
    kind VARCHAR, adjacency VARCHAR, mechanism VARCHAR, params VARCHAR NOT NULL, epsilon DOUBLE NOT NULL,
    delta DOUBLE NOT NULL, detail VARCHAR NOT NULL, status VARCHAR NOT NULL, prev_hash VARCHAR NOT NULL,
    hash VARCHAR NOT NULL, holder VARCHAR, requested_by VARCHAR
);
CREATE TABLE IF NOT EXISTS datasets (
    id VARCHAR NOT NULL, version INTEGER NOT NULL, unit VARCHAR NOT NULL, purpose VARCHAR NOT NULL,
    format VARCHAR NOT NULL, delimiter VARCHAR NOT NULL, source VARCHAR NOT NULL, schema VARCHAR NOT NULL,
    suite VARCHAR, rows BIGINT, registered VARCHAR NOT NULL, snapshot VARCHAR, digest VARCHAR,
    source_digest VARCHAR NOT NULL, host VARCHAR, reading VARCHAR, PRIMARY KEY (id, version)
);
CREATE TABLE IF NOT EXISTS accounts (
    name VARCHAR PRIMARY KEY, role VARCHAR NOT NULL, created VARCHAR NOT NULL, hash VARCHAR NOT NULL
);
"""
# The home's schema: 1 is every store from before it was recorded (the columns below added as they came, at
# every open); 2 records it in ``meta``, keeps the anchors outside the home and the sources relative to the
# data root. A store at an older schema is read, never written, until ``privrelease upgrade``; a newer one
# is refused whole (``SchemaMismatch``).
SCHEMA_VERSION = 2
_META = "CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL);"
_UPGRADE = (  # schema 1's columns, for a store older than them (``upgrade`` adds any missing)
    "ALTER TABLE ledger ADD COLUMN IF NOT EXISTS holder VARCHAR;"
    "ALTER TABLE ledger ADD COLUMN IF NOT EXISTS requested_by VARCHAR;"
    "ALTER TABLE datasets ADD COLUMN IF NOT EXISTS host VARCHAR;"
    "ALTER TABLE datasets ADD COLUMN IF NOT EXISTS reading VARCHAR;"  # missing-value tokens, decimal separator
)
# PostgreSQL only: the rows writers lock, and indexes for the per-charge lookups.
_PG_TABLES = """
CREATE TABLE IF NOT EXISTS ledger_datasets (dataset VARCHAR PRIMARY KEY);
CREATE TABLE IF NOT EXISTS ledger_head (id INTEGER PRIMARY KEY CHECK (id = 1));
INSERT INTO ledger_head VALUES (1) ON CONFLICT DO NOTHING;
CREATE INDEX IF NOT EXISTS ledger_by_release ON ledger (release_id);
CREATE INDEX IF NOT EXISTS ledger_by_dataset ON ledger (dataset, status);
"""


class Con(Protocol):
    def execute(self, sql: str, args: list | None = None): ...


class Store(Protocol):
    kind: str

    def describe(self) -> str: ...
    def location(self) -> str: ...
    def exists(self) -> bool: ...
    def read(self) -> contextlib.AbstractContextManager[Con]: ...
    def write(self, dataset: str | None = None, upgrading: bool = False) -> contextlib.AbstractContextManager[Con]: ...
    def lock_head(self, con: Con) -> None: ...
    def lock(self, name: str) -> contextlib.AbstractContextManager[None]: ...
    def schema(self, con: Con) -> int: ...


class StoreUnavailable(UserError):
    """The PostgreSQL store could not be reached, or the connection was lost mid-transaction."""


class SchemaMismatch(UserError):
    """The store was written at another schema than this privrelease's: older (read only, until ``privrelease
    upgrade``) or newer (refused whole)."""


def _schema_of(tables: set[str], recorded: str | None) -> int:
    """0: no tables yet; 1: tables from before the schema was recorded; else the recorded version."""
    if "ledger" not in tables:
        return 0
    return 1 if recorded is None else int(recorded)


def refuse_newer(version: int, where: str) -> None:
    from privrelease import __version__

    if version > SCHEMA_VERSION:
        raise SchemaMismatch(
            f"the ledger {where} was written by a newer privrelease (schema {version}); this is privrelease {__version__} "
            f"(schema {SCHEMA_VERSION}), which cannot read it: run the newer privrelease, or restore the backup taken "
            "before the upgrade."
        )


def refuse_older(version: int, where: str) -> None:
    if 0 < version < SCHEMA_VERSION:
        raise SchemaMismatch(
            f"the ledger {where} is at schema {version}, from an earlier privrelease; this one writes schema "
            f"{SCHEMA_VERSION}. Run `privrelease upgrade` once (it takes a backup first and records the upgrade on the "
            "ledger); until then the ledger can be read and verified, and nothing is written to it."
        )


def redact(url: str) -> str:
    """The URL with its password, if any, replaced by ``***``."""
    return re.sub(r"^([a-z+]+://[^:/@]*):[^@]*@", r"\1:***@", url)


def checked(value: str, where: str) -> str:
    """A PostgreSQL URL, or a user error naming where it came from (shown without its password)."""
    if not value.startswith(("postgresql://", "postgres://")):
        raise UserError(f"{where} must be a postgresql://USER@HOST:PORT/DATABASE URL; got {redact(value)!r}.")
    return value


def url() -> str | None:
    """The configured PostgreSQL URL, or None (unset) for the home's DuckDB file."""
    value = settings.get(settings.LEDGER_URL) or None
    return None if value is None else checked(value, f"${settings.LEDGER_URL} (unset it for the home's DuckDB file)")


def close(url: str) -> None:
    """Close this process's connections to ``url`` (before its database is dropped, say)."""
    pool = _POOLS.pop(url, None)
    if pool is not None:
        pool.close()


def moved(db_path: Path) -> Path:
    """The mark ``ledger migrate`` leaves beside a DuckDB file whose contents now live in PostgreSQL."""
    return db_path.with_name(db_path.name + ".migrated")


def open_store(db_path: Path) -> Store:
    """The store this process is configured for: PostgreSQL if ``$PRIVRELEASE_LEDGER_URL`` is set."""
    configured = url()
    if configured:
        return PgStore(configured)
    if moved(db_path).exists():
        raise UserError(
            f"this home's ledger and registrations were moved to {moved(db_path).read_text().strip()} "
            f"(privrelease ledger migrate); set ${settings.LEDGER_URL} to that database's URL. The old file is kept "
            "for the record only: releasing from it would spend the budgets a second time."
        )
    return DuckStore(db_path)


class DuckStore:
    """The home's DuckDB file, one writer at a time under an OS file lock."""

    kind = "duckdb"

    def __init__(self, path: Path):
        self.path = path

    def describe(self) -> str:
        return str(self.path)

    def location(self) -> str:
        """Where this ledger lives, as its anchors are named after it (``privrelease.core.ledger.anchors.default_file``)."""
        return str(self.path.resolve())

    def exists(self) -> bool:
        return self.path.exists()

    @contextlib.contextmanager
    def read(self) -> Iterator[Con]:
        """A connection; a new file gets the tables at this schema, an existing one is only read (a newer schema's
        refused), so a copy on a read-only filesystem can be read and verified."""
        with connect(self.path) as con:
            version = self.schema(con)
            if version == 0 and not read_only(con):
                con.execute(_TABLES + _META)
                con.execute("INSERT INTO meta VALUES ('schema', ?) ON CONFLICT DO NOTHING", [str(SCHEMA_VERSION)])
            refuse_newer(version, self.describe())
            yield con

    def schema(self, con: Con) -> int:
        tables = {
            n
            for (n,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()").fetchall()
        }
        recorded = con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() if "meta" in tables else None
        return _schema_of(tables, recorded[0] if recorded else None)

    @contextlib.contextmanager
    def write(self, dataset: str | None = None, upgrading: bool = False) -> Iterator[Con]:
        """One transaction under the file lock (which serializes every writer, whatever the dataset); refused on a
        store of an older schema unless ``upgrading``."""
        with exclusive(self.path.with_name(self.path.name + ".ledger.lock")), self.read() as con:
            if not upgrading:
                refuse_older(self.schema(con), self.describe())
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    def lock_head(self, con: Con) -> None:
        """The file lock already serializes every writer."""

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[None]:
        with exclusive(self.path.with_name(f"{self.path.name}.{name}.lock")):
            yield


_POOLS: dict[str, object] = {}
_POOLS_LOCK = threading.Lock()  # a flow's tasks run in threads: one pool per URL and process


class PgStore:
    """A PostgreSQL database shared by every worker; a small connection pool per process."""

    kind = "postgresql"

    def __init__(self, url: str):
        self.url = url

    def describe(self) -> str:
        return redact(self.url)

    def exists(self) -> bool:
        return True

    def _pool(self):
        with _POOLS_LOCK:
            return _POOLS.get(self.url) or self._open_pool()

    def _open_pool(self):
        """Create the tables if needed, then this process's pool (checked connections: a dropped
        one is replaced, not handed out)."""
        from psycopg_pool import ConnectionPool

        with self._guard("could not connect to"):
            self._create_schema()
            pool = ConnectionPool(
                self.url,
                min_size=1,
                max_size=4,
                open=False,
                name="privrelease",
                kwargs={"options": f"-c search_path={SCHEMA}"},
                check=ConnectionPool.check_connection,
            )
            pool.open(wait=True, timeout=30)
        atexit.register(pool.close)
        _POOLS[self.url] = pool
        return pool

    def _create_schema(self) -> None:
        """Create the tables, at this schema, in a database that has none; under a lock, so workers starting together
        do not race on it. A database with tables is left as it is (``write`` checks its schema)."""
        import psycopg

        with psycopg.connect(self.url, connect_timeout=10) as con:
            if self._tables(con):
                return
            con.execute("SELECT pg_advisory_xact_lock(hashtext('privrelease schema'))")
            if self._tables(con):
                return
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
            con.execute(f"SET LOCAL search_path = {SCHEMA}")
            con.execute(_TABLES.replace(" DOUBLE ", " DOUBLE PRECISION ") + _META + _PG_TABLES)
            con.execute("INSERT INTO meta VALUES ('schema', %s) ON CONFLICT DO NOTHING", [str(SCHEMA_VERSION)])

    @staticmethod
    def _tables(con) -> set[str]:
        found = con.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", [SCHEMA]).fetchall()
        return {n for (n,) in found}

    def location(self) -> str:
        """Where this ledger lives, as its anchors are named after it: the database without user or password."""
        return re.sub(r"^([a-z+]+://)[^@/]*@", r"\1", self.url.split("?", 1)[0]) + f"#{SCHEMA}"

    def schema(self, con: Con) -> int:
        tables = self._tables(con.raw)
        recorded = con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() if "meta" in tables else None
        return _schema_of(tables, recorded[0] if recorded else None)

    @contextlib.contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """Turn a lost or refused connection into a clear error that never shows the password."""
        import psycopg
        from psycopg_pool import PoolTimeout

        try:
            yield
        except (psycopg.OperationalError, PoolTimeout) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            password = re.match(r"^[a-z+]+://[^:/@]*:([^@]*)@", self.url)
            if password and password.group(1):
                reason = reason.replace(password.group(1), "***")
            raise StoreUnavailable(
                f"{what} the ledger database {self.describe()} (${settings.LEDGER_URL}): {reason}. An unfinished transaction "
                "is rolled back by the database, so nothing was half-written; check the server and the URL, then "
                "run the command again (a retried release is charged at most once)."
            ) from None

    @contextlib.contextmanager
    def read(self) -> Iterator[Con]:
        pool = self._pool()
        with self._guard("lost the connection to"), pool.connection() as raw:
            yield _PgCon(raw)

    @contextlib.contextmanager
    def write(self, dataset: str | None = None, upgrading: bool = False) -> Iterator[Con]:
        """One transaction; with a dataset, its row is locked first, so its charges are checked one at a time. Refused
        on a database of another schema (an older one unless ``upgrading``)."""
        with self.read() as con:
            version = self.schema(con)
            refuse_newer(version, self.describe())
            if not upgrading:
                refuse_older(version, self.describe())
            if dataset is not None:
                con.execute("INSERT INTO ledger_datasets VALUES (?) ON CONFLICT DO NOTHING", [dataset])
                con.execute("SELECT dataset FROM ledger_datasets WHERE dataset = ? FOR UPDATE", [dataset])
            yield con

    def lock_head(self, con: Con) -> None:
        """Lock the chain's head until commit: appends, from any dataset or host, take turns."""
        con.execute("SELECT id FROM ledger_head WHERE id = 1 FOR UPDATE")

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """A lock across hosts, held by a transaction (released if its process dies)."""
        with self.read() as con:
            con.execute("SELECT pg_advisory_xact_lock(hashtext(?))", [f"privrelease {name}"])
            yield


class _PgCon:
    """A psycopg connection taking DuckDB-style ``?`` placeholders, so both stores run the same SQL."""

    def __init__(self, raw):
        self.raw = raw

    @staticmethod
    def _sql(sql: str, args) -> str:
        return sql if args is None else sql.replace("%", "%%").replace("?", "%s")

    def execute(self, sql: str, args: list | None = None):
        return self.raw.execute(self._sql(sql, args), args)

    def executemany(self, sql: str, rows: list) -> None:
        with self.raw.cursor() as cur:
            cur.executemany(self._sql(sql, rows), rows)
