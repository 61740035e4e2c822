"""Moving one home's ledger and registrations from its DuckDB file into PostgreSQL.

The entries are copied as they are (same sequence numbers, same HMACs), in one transaction that
checks the chain as PostgreSQL returns it, with the home's key and anchors, before it commits: a
copy that does not verify is never left behind. The target must be empty, so two ledgers are never
merged into one chain. Afterwards the home's DuckDB file is marked as moved (``store.moved``), so
a command run without the URL is refused instead of spending the budgets a second time.
"""

from __future__ import annotations

from pathlib import Path

from privrelease.core import paths
from privrelease.core.datasets import snapshots
from privrelease.core.datasets.registry import COLUMNS
from privrelease.core.errors import LedgerCorrupt, UserError
from privrelease.core.ledger import rollback
from privrelease.core.ledger.anchors import Anchors
from privrelease.core.ledger.chain import check_chain, insert, rows
from privrelease.core.ledger.ledger import Ledger
from privrelease.core.store import DuckStore, PgStore, checked, moved


def migrate(home: Path, url: str) -> tuple[int, int]:
    """Copy the home's ledger and registrations into the PostgreSQL database at ``url``; returns
    (entries, registrations) copied. Snapshot paths become relative to the snapshot store."""
    source = DuckStore(paths.database(home))
    if not source.exists():
        raise UserError(
            f"this home ({home}) has no ledger to migrate; pass --home (or set $PRIVRELEASE_HOME) to the home whose ledger moves."
        )
    found = Ledger(paths.database(home), source).anchors
    with source.read() as con:
        rollback.check(con, found, source.describe())  # a rolled-back ledger is not moved
        entries = rows(con, "ORDER BY seq", [])
        registrations = con.execute(f"SELECT {', '.join(COLUMNS)} FROM datasets ORDER BY id, version").fetchall()
    marks = found.read()
    if not entries and not registrations:
        raise UserError(f"this home ({home}) has no ledger entries and no registrations; nothing to migrate.")
    store = snapshots.root(home)
    at = COLUMNS.index("snapshot")
    registrations = [row[:at] + (_relative(row[at], store),) + row[at + 1 :] for row in registrations]
    target = PgStore(checked(url, "--to"))
    with target.write() as con:
        target.lock_head(con)
        held = con.execute("SELECT (SELECT count(*) FROM ledger), (SELECT count(*) FROM datasets)").fetchall()[0]
        if any(held):
            raise UserError(
                f"the target database {target.describe()} already holds {held[0]} ledger entries and {held[1]} "
                "registrations; migrate into an empty database (e.g. one made with createdb), never on top of "
                "another ledger."
            )
        check_chain(entries, home, marks, paths.releases(home))  # a broken ledger is not moved
        insert(con, entries)
        con.executemany(
            f"INSERT INTO datasets ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
            [list(row) for row in registrations],
        )
        arrived = rows(con, "ORDER BY seq", [])
        if arrived != entries:
            raise LedgerCorrupt(
                "the entries read back from PostgreSQL differ from the ones copied; nothing was committed",
                next((e.seq for e, a in zip(entries, arrived) if e != a), None),
            )
        check_chain(arrived, home, marks, paths.releases(home))
    Anchors.of(target.location()).append([rollback.mark(e, "migrated") for e in entries])  # its anchors, as of now
    moved(source.path).write_text(target.describe() + "\n")
    return len(entries), len(registrations)


def _relative(snapshot: str | None, root: Path) -> str | None:
    """A snapshot path recorded absolute in the snapshot store, made relative to it."""
    if snapshot is None or not Path(snapshot).is_absolute() or not Path(snapshot).is_relative_to(root):
        return snapshot
    return str(Path(snapshot).relative_to(root))
