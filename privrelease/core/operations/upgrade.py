"""``privrelease upgrade``: a home moved to this privrelease's schema, once, after a backup, on the record.

Schema 1 (every home from before the schema was recorded) kept the anchors inside the home, where every copy
of the home carried them; schema 2 records its version in the store, keeps the anchors outside the home (each
line the whole entry, so a rollback can carry the lost charges forward) and keeps the home's private files its
owner's only, and records sources in the data root relative to it. The upgrade takes a backup first, then in one
transaction adds what the schema needs (sources made relative to the data root), moves the
anchors out (the old file renamed, never read again) with every entry anchored whole, records the upgrade as a
ledger entry, and tightens the modes of the home's private files. A home at a newer schema than this
privrelease's is refused by every command (``privrelease.core.store.refuse_newer``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from privrelease import __version__
from privrelease.core import paths
from privrelease.core.errors import UserError
from privrelease.core.ledger import anchors, rollback
from privrelease.core.ledger.anchors import Anchors, configured
from privrelease.core.ledger.chain import rows
from privrelease.core.ledger.ledger import Ledger
from privrelease.core.operations.backup import Taken, backup
from privrelease.core.store import _META, _PG_TABLES, _UPGRADE, SCHEMA_VERSION, PgStore, open_store
from privrelease.core.tables.readers import data_root

UPGRADE = "upgrade"
PRIVATE = ("data", "datasets", "sdc-reports", "spam", "keys")  # the home's folders that are its owner's only


@dataclass(frozen=True)
class Upgraded:
    old: int
    backup: Taken | None
    moved: Path | None  # the anchors file moved out of the home, if one was


def upgrade(home: Path, backup_to: Path, requested_by: str) -> Upgraded:
    store = open_store(paths.database(home))
    if not store.exists():
        raise UserError(f"the home {home} has no ledger yet: a new home is made at the current schema; nothing to upgrade.")
    with store.read() as con:
        old = store.schema(con)
    if old >= SCHEMA_VERSION:
        return Upgraded(old, None, None)
    taken = backup(home, backup_to)
    with store.write(upgrading=True) as con:
        con.execute(_UPGRADE + _META + (_PG_TABLES if isinstance(store, PgStore) else ""))
        con.execute("DELETE FROM meta WHERE key = 'schema'")
        con.execute("INSERT INTO meta VALUES ('schema', ?)", [str(SCHEMA_VERSION)])
        root = data_root(home)
        for dataset, version, source in con.execute("SELECT id, version, source FROM datasets").fetchall():
            if Path(source).is_absolute() and Path(source).is_relative_to(root):  # read from the home's own data root
                relative = str(Path(source).relative_to(root))
                con.execute("UPDATE datasets SET source = ? WHERE id = ? AND version = ?", [relative, dataset, version])
        entries = rows(con, "ORDER BY seq", [])
    moved = _move_anchors(home, store.location(), entries)
    Ledger(paths.database(home), store).record(
        rollback.LEDGER_WIDE,
        UPGRADE,
        {"from": old, "to": SCHEMA_VERSION, "version": __version__, "backup": str(taken.folder)},
        requested_by,
    )
    tighten(home)
    return Upgraded(old, taken, moved)


def _move_anchors(home: Path, location: str, entries: list) -> Path | None:
    """The anchors out of the home: the old file's lines, then every entry anchored whole, in the new file; the old
    file renamed. Configured anchors files stay where they are (every entry is anchored whole in the first)."""
    legacy = anchors.legacy_file(home)
    target = Anchors(tuple(configured())) if configured() else Anchors.of(location)
    if legacy.exists() and not configured():
        target.start()
        with open(target.written, "a") as out:
            out.write(legacy.read_text())
    target.append([rollback.mark(e, UPGRADE) for e in entries])
    if legacy.exists() and not configured():
        moved = legacy.with_name(legacy.name + ".moved")
        legacy.rename(moved)
        return target.written
    return None


def tighten(home: Path) -> list[Path]:
    """The home's private folders and files made their owner's only (0700 folders, 0600 files); returns what changed."""
    changed = []
    for name in PRIVATE:
        top = home / name
        if not top.exists():
            continue
        for path in [top, *top.rglob("*")]:
            if path.is_symlink():
                continue
            want = 0o700 if path.is_dir() else 0o600
            if path.stat().st_mode & 0o777 & ~want:
                os.chmod(path, want)
                changed.append(path)
    return changed
