"""``privrelease restore DIR``: a backup brought back, at its home or at another path or host, never silently older
than the ledger was.

Before anything is written: every file of the backup is checked against its SHA-256, the ledger key against
the fingerprint the backup recorded, and the backup's ledger against every anchor that can be found (this
ledger's anchors at the home restored into, those of the ledger the backup was taken from, and any the operator
brings with ``anchors``). A backup that lacks an anchored entry is older than the ledger was: it is refused,
unless the rollback is accepted, and then recorded on the ledger with every lost entry carried forward, so their
charges stay spent (``privrelease.core.ledger.rollback``). With no anchor anywhere it is refused too, unless the operator
records that none were kept. Then the files are put in place (the home must be empty), the ledger anchored
where it now lives, the restore recorded as a ledger entry, and the chain, every registration's snapshot and
every release's files verified.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from privrelease.core import paths
from privrelease.core.datasets.snapshots import sha256
from privrelease.core.errors import LedgerCorrupt, UserError
from privrelease.core.ledger import anchors, rollback
from privrelease.core.ledger.anchors import Anchors
from privrelease.core.ledger.chain import Entry, check_links
from privrelease.core.ledger.ledger import Ledger
from privrelease.core.operations import files
from privrelease.core.operations.backup import DATABASE, LEDGER, MANIFEST, PG_DUMP, copy_file, pg_env
from privrelease.core.store import SCHEMA, PgStore, open_store, refuse_newer

RESTORE = "restore"


@dataclass(frozen=True)
class Restored:
    head: int
    lost: int
    entries: int
    problems: list[str]


def read_manifest(src: Path) -> dict:
    try:
        manifest = json.loads((src / MANIFEST).read_text())
    except FileNotFoundError:
        raise UserError(f"{src} holds no {MANIFEST}: it is not a folder `privrelease backup` wrote.") from None
    except ValueError:
        raise UserError(f"{src / MANIFEST} cannot be read (not the JSON a backup writes).") from None
    refuse_newer(int(manifest.get("schema", 1)), f"in the backup {src}")
    return manifest


def check_files(src: Path, manifest: dict) -> None:
    """Every file the backup lists, present and unchanged."""
    for name, digest in manifest["files"].items():
        path = src / name
        if not path.is_file():
            raise UserError(f"the backup {src} lacks {name}, which its {MANIFEST} lists; it cannot be restored whole.")
        if sha256(path) != digest:
            raise UserError(
                f"{name} in the backup {src} was changed after the backup was taken (its SHA-256 differs); not restored."
            )


def _entries(src: Path) -> list[Entry]:
    """The backup's ledger entries, from its listing of them (checked with every other file)."""
    return [Entry(**json.loads(line)) for line in (src / LEDGER).read_text().splitlines() if line]


def restore(
    src: Path,
    home: Path,
    key_file: Path | None,
    more_anchors: list[Path],
    accept_rollback: bool,
    without_anchors: bool,
    requested_by: str,
    drill: bool = False,
) -> Restored:
    src = src.resolve()
    manifest = read_manifest(src)
    check_files(src, manifest)
    if any(p for p in home.iterdir() if p.name not in ("keys", "prefect")):
        raise UserError(
            f"the home {home} is not empty; restore into an empty home (move this one aside first: a restore never "
            "overwrites one)."
        )
    key = _key(home, key_file, manifest)
    store = open_store(paths.database(home))
    if isinstance(store, PgStore) != (PG_DUMP in manifest["files"]):
        raise UserError(
            f"the backup holds a {'PostgreSQL' if PG_DUMP in manifest['files'] else 'DuckDB'} ledger, and this home's ledger is "
            f"configured as {store.kind} ($PRIVRELEASE_LEDGER_URL); restore it into the same kind of store."
        )
    if isinstance(store, PgStore):
        with store.read() as con:
            held = con.execute("SELECT count(*) FROM ledger").fetchone()[0]
        if held:
            raise UserError(
                f"the ledger database {store.describe()} already holds {held} entries; restore into an empty database "
                "(createdb, then $PRIVRELEASE_LEDGER_URL at it). Nothing was restored."
            )
    found = [Anchors.of(store.location()), Anchors.of(manifest["location"]), Anchors(tuple(more_anchors))]
    marks = [m for a in found for m in a.read()]
    backed = _entries(src)
    if backed:
        check_links(backed, key)
    lost = rollback.lost(backed, marks, key, set()) if backed and marks else []
    if not marks and not without_anchors and manifest.get("ledger_head"):
        raise UserError(
            f"no anchors of this ledger were found ({', '.join(a.where() for a in found if a.files)}), so the backup "
            "cannot be told from an older one. Give the old host's anchors file with --anchors FILE, or, if none was "
            "kept, restore with --without-anchors (recorded on the ledger). Nothing was restored."
        )
    if lost and not accept_rollback:
        raise UserError(
            f"the backup is older than the ledger was: it ends at entry #{manifest['ledger_head'][0]}, and the anchors "
            f"record {len(lost)} later entries (up to #{lost[-1].seq}). Restore a newer backup, or restore this one with "
            "--accept-rollback: the rollback is then recorded on the ledger and every lost entry carried forward, so "
            "their charges stay spent. Nothing was restored."
        )
    _put(src, home, manifest, store, key_file)
    ledger = Ledger(paths.database(home), store)
    if ledger.entries_unchecked() != backed:
        raise LedgerCorrupt("the restored ledger differs from the backup's listing of its entries", None)
    here = ledger.anchors
    here.append([rollback.mark(e, "restored") for e in backed])  # the ledger anchored where it now lives
    if lost:
        ledger.accept_rollback(requested_by, more=tuple(marks))
    ledger.record(
        rollback.LEDGER_WIDE,
        RESTORE,
        {
            "taken": manifest["taken"],
            "from": manifest["location"],
            "backup_head": manifest["ledger_head"],
            "anchors": "none kept (--without-anchors)" if not marks else "checked",
        },
        requested_by,
    )
    problems = verify(home, ledger)
    head = ledger.entries_unchecked()[-1]
    if drill:  # a copy to check, never to spend from: its own anchors retire it
        rollback.retire(ledger.anchors, (head.seq, head.hash), "nowhere: a restore drill (privrelease restore --drill)")
    elif manifest["location"] != store.location() and backed:  # the ledger moved: where it was is retired
        for source in found[1:]:
            if source.files and source.written.exists() and source.written not in ledger.anchors.files:
                rollback.retire(source, (backed[-1].seq, backed[-1].hash), f"{store.location()}")
    return Restored(backed[-1].seq if backed else 0, len(lost), len(ledger.entries()), problems)


def _key(home: Path, key_file: Path | None, manifest: dict) -> bytes:
    """The ledger key, from ``key_file`` or where this home's key is configured; it must be the one the backup's
    ledger was written under (``_put`` copies ``key_file`` into place, once everything checked out)."""
    target = anchors.key_path(home)
    source = key_file if key_file is not None else target
    if key_file is not None and not key_file.is_file():
        raise UserError(f"--key {key_file}: no such file. Give the ledger key's file (the copy kept apart from the backups).")
    if key_file is not None and target.exists() and target.read_bytes() != key_file.read_bytes():
        raise UserError(f"--key {key_file} differs from the key already at {target}; remove one of them.")
    if not source.exists():
        if not manifest.get("ledger_head"):
            return b""
        raise UserError(
            f"the ledger key is not at {target}: a backup never holds it. Give it with --key FILE (the copy kept apart "
            "from the backups), or point $PRIVRELEASE_LEDGER_KEY_FILE at it. Nothing was restored."
        )
    key = bytes.fromhex(source.read_text().strip())
    if manifest.get("key_sha256") and not hmac.compare_digest(hashlib.sha256(key).hexdigest(), manifest["key_sha256"]):
        raise UserError(f"the ledger key {source} is not the one the backup's ledger was written under; nothing was restored.")
    return key


def _put(src: Path, home: Path, manifest: dict, store, key_file: Path | None) -> None:
    """The backup's files into the home (0600 in 0700 folders), sources rebased where the home now lives."""
    if key_file is not None and not anchors.key_path(home).exists():
        copy_file(key_file, anchors.key_path(home))
    for name in manifest["files"]:
        if name.startswith("home/"):
            copy_file(src / name, home / name.removeprefix("home/"))
    if DATABASE in manifest["files"]:
        copy_file(src / DATABASE, paths.database(home))
    else:
        _pg_restore(src / PG_DUMP, store)
    _rebase_sources(home, Path(manifest["home"]))


def _pg_restore(dump: Path, store: PgStore) -> None:
    if shutil.which("pg_restore") is None:
        raise UserError("pg_restore is not on PATH: install PostgreSQL's client (Debian: postgresql-client).")
    dbname, env = pg_env(store.url)
    from privrelease.core.store import close

    close(store.url)
    done = subprocess.run(
        ["pg_restore", "--clean", "--if-exists", "--no-owner", f"--schema={SCHEMA}", f"--dbname={dbname}", str(dump)],
        capture_output=True,
        text=True,
        timeout=3600,
        env=env,
    )
    if done.returncode != 0:
        raise UserError(f"pg_restore into {store.describe()} failed: {done.stderr.strip()[:300]}")


def _rebase_sources(home: Path, old_home: Path) -> None:
    """Registrations that recorded an absolute source under the old home's data folder now read the same file here."""
    store = open_store(paths.database(home))
    with store.write(upgrading=True) as con:
        for dataset, version, source in con.execute("SELECT id, version, source FROM datasets").fetchall():
            path = Path(source)
            if path.is_absolute() and path.is_relative_to(old_home):
                moved = str(home / path.relative_to(old_home))
                con.execute("UPDATE datasets SET source = ? WHERE id = ? AND version = ?", [moved, dataset, version])


def verify(home: Path, ledger: Ledger) -> list[str]:
    """After a restore: the chain and its anchors, every registration's snapshot, every release's files."""
    from privrelease.core.datasets.registry import Registry

    problems = []
    try:
        ledger.verify(paths.releases(home))
    except LedgerCorrupt as exc:
        problems.append(f"ledger: {exc}")
    registry = Registry(home)
    for dataset in registry.list():
        try:
            registry.checked(dataset)
        except UserError as exc:
            problems.append(f"dataset {dataset.id}: {exc}")
    problems += files.check_releases(paths.releases(home))
    return problems


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
