"""``privrelease backup DIR``: a consistent copy of a home, taken while its worker runs.

The database is copied under the ledger writers' lock, once no charge is half-way (a charge made before the
backup started is waited for, up to ``wait`` seconds, so a copy never holds a charge without its outcome): through
DuckDB itself (``COPY FROM DATABASE``, a transaction-consistent copy of a file another process may be using), or on
PostgreSQL by ``pg_dump`` of privrelease's schema; the home's other files are named under the lock and copied
after it (releases and snapshots never change once written), so charges wait only for the database's copy. What
it leaves out, by design: the ledger key (its fingerprint is recorded: whoever holds a copy and the key could
forge entries, so the key is kept apart), the anchors (outside the home: a restore is checked against them),
staging but sealed draws, lock files, and Prefect's own folder.

The copy is its owner's only (a 0700 folder, 0600 files) and lists every file it holds with its SHA-256 in
``backup.json``, with the ledger's head, the schema and where the ledger lived, so ``restore`` can check it whole
and tell whether it is older than the anchors.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from privrelease import __version__
from privrelease.core import paths
from privrelease.core.datasets import snapshots
from privrelease.core.datasets.snapshots import sha256
from privrelease.core.db import connect, exclusive, quote_ident, quote_literal
from privrelease.core.errors import UserError
from privrelease.core.ledger import anchors, lease
from privrelease.core.ledger.chain import rows
from privrelease.core.ledger.ledger import Ledger
from privrelease.core.operations import files
from privrelease.core.store import SCHEMA, SCHEMA_VERSION, PgStore, Store

MANIFEST = "backup.json"
DATABASE = "privrelease.duckdb"
PG_DUMP = "ledger.pgdump"
LEDGER = "ledger.jsonl"  # every ledger entry, one JSON line each: what restore checks against the anchors
LEFT_OUT = {"keys", "anchors", "staging", "prefect"}  # top-level folders of the home never copied


@dataclass(frozen=True)
class Taken:
    folder: Path
    manifest: dict
    seconds: float
    size: int


def private_dir(path: Path) -> None:
    """``path`` and every folder made on the way to it, 0700."""
    missing = [p for p in [path, *path.parents] if not p.exists()]
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)
    os.chmod(path, 0o700)


def copy_file(src: Path, dst: Path) -> str:
    """Copy ``src`` to ``dst`` (0600, its folders 0700) and return its SHA-256."""
    private_dir(dst.parent)
    with open(src, "rb") as r, open(os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as w:
        shutil.copyfileobj(r, w, 1 << 20)
        w.flush()
        os.fsync(w.fileno())
    os.chmod(dst, 0o600)
    return sha256(dst)


def copy_duckdb(src: Path, dst: Path) -> None:
    """A transaction-consistent copy of a DuckDB file (another process may be using it: DuckDB's lock is waited for)."""
    private_dir(dst.parent)
    with connect(src) as con:
        con.execute(f"ATTACH {quote_literal(str(dst))} AS backup_copy")
        try:
            con.execute(
                f"COPY FROM DATABASE {quote_ident(con.execute('SELECT current_database()').fetchone()[0])} TO backup_copy"
            )
        finally:
            con.execute("DETACH backup_copy")
    os.chmod(dst, 0o600)


def _live(ledger: Ledger, con) -> list:
    """Charges half-way: reserved, their process still running (a dead holder's is settled by recovery, not waited for)."""
    return [e for e in ledger._open(con) if lease.alive(e.holder, e.ts)]


def _home_files(home: Path, dest_db: set[str]) -> list[Path]:
    """Every file of the home a backup copies (relative paths), in a stable order."""
    out = []
    for path in sorted(home.rglob("*")):
        rel = path.relative_to(home)
        if rel.parts[0] in LEFT_OUT or not path.is_file() or path.is_symlink():
            continue
        if path.name.endswith((".lock", ".wal", ".tmp")) or str(rel) in dest_db:
            continue
        out.append(rel)
    return out


def backup(home: Path, dest: Path, wait: float = 300.0) -> Taken:
    """Copy ``home`` into the new folder ``dest`` (see the module docstring); refused into a folder that holds files,
    or inside the home."""
    started = time.monotonic()
    dest = dest.resolve()
    if dest.is_relative_to(home.resolve()):
        raise UserError(
            f"the backup folder {dest} lies inside the home {home}: the next backup would copy it, and it would sit "
            "beside what it protects; choose a folder outside the home (another disk or host is better)."
        )
    if dest.exists() and any(dest.iterdir()):
        raise UserError(f"the backup folder {dest} is not empty; give a new folder (each backup is one folder).")
    ledger = Ledger(paths.database(home))
    store = ledger.store
    if not store.exists():
        raise UserError(f"the home {home} has no ledger yet; there is nothing to back up.")
    private_dir(dest)
    deadline = time.monotonic() + wait
    while True:
        with quiet(store) as con:
            live = _live(ledger, con)
            if not live:
                frozen = _freeze(home, dest, store, con)
        if not live:
            return _finish(home, dest, store, frozen, started)
        if time.monotonic() > deadline:
            raise UserError(
                f"{len(live)} release(s) stayed charged and unsettled for {wait:g} s (the first: {live[0].release_id}); "
                "nothing was copied. Take the backup when they are done, or give --wait more seconds."
            )
        time.sleep(0.5)


def quiet(store: Store):
    """The store with every writer held off: the DuckDB file's writers' lock (and a connection), or on PostgreSQL a
    transaction holding the chain head's row."""
    import contextlib

    @contextlib.contextmanager
    def held():
        if isinstance(store, PgStore):
            with store.read() as con:
                store.lock_head(con)
                yield con
        else:
            with exclusive(store.path.with_name(store.path.name + ".ledger.lock")), store.read() as con:
                yield con

    return held()


@dataclass(frozen=True)
class _Frozen:
    """What the backup took under the writers' lock: the database, the ledger's listing, and which files to copy."""

    head: list | None
    version: int
    listed: dict[str, str]
    files: list[Path]


def _freeze(home: Path, dest: Path, store: Store, con) -> _Frozen:
    """Under the writers' lock: the database copied (DuckDB's transaction-consistent copy, or pg_dump), every entry
    listed, and the files of the home named. The files themselves are copied after the lock is let go: releases and
    snapshots never change once written, and a release published meanwhile has no entry in this copy, nor a name in
    this list."""
    head = con.execute("SELECT seq, hash FROM ledger ORDER BY seq DESC LIMIT 1").fetchall()
    listed: dict[str, str] = {}
    if isinstance(store, PgStore):
        _pg_dump(store, dest / PG_DUMP)
        listed[PG_DUMP] = sha256(dest / PG_DUMP)
        databases = set()
    else:
        con.execute(f"ATTACH {quote_literal(str(dest / DATABASE))} AS backup_copy")
        try:
            con.execute(
                f"COPY FROM DATABASE {quote_ident(con.execute('SELECT current_database()').fetchone()[0])} TO backup_copy"
            )
        finally:
            con.execute("DETACH backup_copy")
        os.chmod(dest / DATABASE, 0o600)
        listed[DATABASE] = sha256(dest / DATABASE)
        databases = {DATABASE}
    with open(os.open(dest / LEDGER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        for entry in rows(con, "ORDER BY seq", []):
            out.write(json.dumps(asdict(entry), sort_keys=True) + "\n")
    listed[LEDGER] = sha256(dest / LEDGER)
    named = _home_files(home, databases)
    for folder in files.sealed(paths.staging(home)):  # drawn and charged, waiting to be published: kept
        named += [p.relative_to(home) for p in sorted(folder.rglob("*")) if p.is_file()]
    return _Frozen(list(head[0]) if head else None, store.schema(con), listed, named)


def _finish(home: Path, dest: Path, store: Store, frozen: _Frozen, started: float) -> Taken:
    """The named files copied (0600), and the backup's manifest written."""
    listed = dict(frozen.listed)
    for rel in frozen.files:
        target = dest / "home" / rel
        try:
            if rel.suffix == ".duckdb":  # another database of the home (the spam mail index): copied by DuckDB
                copy_duckdb(home / rel, target)
                listed[f"home/{rel}"] = sha256(target)
            else:
                listed[f"home/{rel}"] = copy_file(home / rel, target)
        except FileNotFoundError:
            raise UserError(
                f"{home / rel} was removed while the backup was taken (a dataset dropped, say); the folder {dest} is "
                "incomplete: remove it and take the backup again."
            ) from None
    manifest = {
        "format": 1,
        "privrelease": __version__,
        "schema": frozen.version or SCHEMA_VERSION,
        "taken": datetime.now(UTC).isoformat(timespec="seconds"),
        "home": str(home.resolve()),
        "store": store.kind,
        "location": store.location(),
        "ledger_head": frozen.head,
        "key_sha256": hashlib.sha256(anchors.key(home, create=False)).hexdigest() if frozen.head else None,
        "snapshot_store": "in the backup"
        if _inside(snapshots.root(home), home)
        else f"not in the backup: {snapshots.root(home)}",
        "data_root": "in the backup" if _inside(_data_root(home), home) else f"not in the backup: {_data_root(home)}",
        "files": listed,
    }
    path = dest / MANIFEST
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    os.chmod(path, 0o600)
    size = sum((dest / name).stat().st_size for name in listed)
    return Taken(dest, manifest, time.monotonic() - started, size)


def _inside(path: Path, home: Path) -> bool:
    return path.resolve().is_relative_to(home.resolve())


def _data_root(home: Path) -> Path:
    from privrelease.core.tables.readers import data_root

    return data_root(home)


def pg_env(url: str) -> tuple[str, dict]:
    """The URL without its password, and an environment giving it to PostgreSQL's tools (never on a command line,
    where every user of the host could read it)."""
    import psycopg

    parts = psycopg.conninfo.conninfo_to_dict(url)
    password = parts.pop("password", None)
    env = dict(os.environ) | ({"PGPASSWORD": password} if password else {})
    return psycopg.conninfo.make_conninfo(**parts), env


def _pg_dump(store: PgStore, target: Path) -> None:
    """privrelease's schema of the PostgreSQL store, in pg_dump's custom format (0600)."""
    if shutil.which("pg_dump") is None:
        raise UserError(
            "pg_dump is not on PATH: install PostgreSQL's client (Debian: postgresql-client) to back up a PostgreSQL ledger."
        )
    os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    dbname, env = pg_env(store.url)
    done = subprocess.run(
        ["pg_dump", "--format=custom", f"--schema={SCHEMA}", "--no-owner", f"--file={target}", f"--dbname={dbname}"],
        capture_output=True,
        text=True,
        timeout=3600,
        env=env,
    )
    if done.returncode != 0:
        raise UserError(
            f"pg_dump of the ledger database {store.describe()} failed: {done.stderr.strip()[:300]}; nothing was kept."
        )
