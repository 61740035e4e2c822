"""The ledger's book: its rows in their store, chained and anchored, and checked at every use.

``Book`` is what every kind of entry shares: where the rows live (``privrelease.core.store``), the anchors outside the home
(``privrelease.core.ledger.anchors``), a write that appends chained entries under the store's lock and anchors them once
committed, and reads refused on a ledger that lost entries (``privrelease.core.ledger.rollback``); ``Ledger``
(``privrelease.core.ledger.ledger``) adds what the rows mean: caps, charges, outcomes.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from privrelease.core.errors import UserError
from privrelease.core.ledger import anchors, rollback
from privrelease.core.ledger.anchors import Anchors, configured
from privrelease.core.ledger.chain import Entry, check_chain, check_links, insert, link, rows
from privrelease.core.store import Con, Store, open_store


class Book:
    """The ledger table, in the home's DuckDB file or the configured PostgreSQL database."""

    def __init__(self, db_path: Path, store: Store | None = None):
        self.db_path = db_path
        self.home = db_path.parent  # where the key lives, unless configured elsewhere
        self.store = store or open_store(db_path)

    @functools.cached_property
    def anchors(self) -> Anchors:
        """This ledger's anchors: the configured files, else the default one outside the home; a home of schema 1
        not yet upgraded keeps reading the file inside it (``privrelease upgrade`` moves it out)."""
        outside, inside = Anchors.of(self.store.location()), anchors.legacy_file(self.home)
        if configured() or outside.exist() or not inside.exists():
            return outside
        return Anchors((inside,))

    @contextlib.contextmanager
    def _write(self, dataset: str | None = None, checked: bool = True, upgrading: bool = False) -> Iterator[tuple]:
        """A write transaction, refused on a rolled-back ledger (``rollback.check``, under the lock, unless ``checked``
        is False: accepting a rollback); each entry it appended is anchored once it is committed."""
        written: list[Entry] = []
        with self.store.write(dataset, upgrading) as con:
            if checked:
                rollback.check(con, self.anchors, self.store.describe(), writing=True)
            yield con, written
        self.anchors.append([rollback.mark(e) for e in written])

    @contextlib.contextmanager
    def _read(self) -> Iterator[Con]:
        """A read of the ledger, refused on a rolled-back one (``rollback.check``): what it would report is not the
        ledger's whole history."""
        with self.store.read() as con:
            rollback.check(con, self.anchors, self.store.describe())
            yield con

    def _append(self, con, written: list, *, ts: datetime | None = None, **fields) -> Entry:
        """Append one entry (``chain.link``'s fields) at the chain's head, under the head's lock."""
        self.store.lock_head(con)
        last = rows(con, "ORDER BY seq DESC LIMIT 1", [])
        head = last[0] if last else None
        if head is None:  # the first entry: its anchors file is made before it, so a ledger without one lost it
            self.anchors.start()
        entry = link(
            head, anchors.key(self.home, create=head is None), anchors.key_path(self.home), ts or datetime.now(UTC), **fields
        )
        insert(con, [entry])
        written.append(entry)
        return entry

    def anchor(self) -> Entry | None:
        """Anchor the current head once more (the audit does, after a clean ``verify``)."""
        with self._read() as con:
            head = rows(con, "ORDER BY seq DESC LIMIT 1", [])
        if head:
            self.anchors.append([rollback.mark(head[0], "audit")])
        return head[0] if head else None

    def accept_rollback(self, requested_by: str, without_anchors: bool = False, more: tuple[dict, ...] = ()) -> rollback.Accepted:
        """Record that this ledger lost entries its anchors (and ``more`` marks) hold, and carry each forward
        (``privrelease.core.ledger.rollback``); ``without_anchors``: record that its anchors are lost, and anchor it anew from its
        head. Refused when nothing was lost."""
        with self._write(checked=False) as (con, written):
            entries = rows(con, "ORDER BY seq", [])
            key = anchors.key(self.home, create=False)
            check_links(entries, key)
            marks = [*self.anchors.read(), *more]
            lost = rollback.lost(entries, marks, key, rollback.carried(con))
            if not lost and not (without_anchors and not self.anchors.exist()):
                raise UserError(
                    "nothing to accept: the ledger holds every entry its anchors record"
                    + ("" if self.anchors.exist() else f", and they are not lost ({self.anchors.where()})")
                    + "; nothing was written."
                )
            head = entries[-1] if entries else None
            top = max(marks, key=lambda m: m["seq"]) if marks else None
            record = self._append(
                con,
                written,
                dataset=rollback.LEDGER_WIDE,
                status=rollback.ROLLBACK,
                detail={
                    "ledger_head": None if head is None else [head.seq, head.hash],
                    "anchored_head": None if top is None else [top["seq"], top["hash"]],
                    "lost": [[e.seq, e.hash] for e in lost],
                    "anchors": self.anchors.where() if self.anchors.exist() else "lost",
                },
                requested_by=requested_by,
            )
            return rollback.Accepted(record, [self._append(con, written, **rollback.carried_fields(e)) for e in lost])

    def entries_unchecked(self) -> list[Entry]:
        """All entries, read without the rollback check (a restore reads them before it anchors them)."""
        with self.store.read() as con:
            return rows(con, "ORDER BY seq", [])

    def record(self, dataset: str, status: str, detail: dict, requested_by: str | None = None) -> Entry:
        """Record an event of the home on the chain (a restore, an upgrade): no charge, no cap."""
        with self._write() as (con, written):
            return self._append(con, written, dataset=dataset, status=status, detail=detail, requested_by=requested_by)

    def entries(self, dataset: str | None = None) -> list[Entry]:
        """All entries in chain order, optionally of one dataset."""
        with self._read() as con:
            if dataset is None:
                return rows(con, "ORDER BY seq", [])
            return rows(con, "WHERE dataset = ? ORDER BY seq", [dataset])

    def status(self, release_id: str) -> str | None:
        with self._read() as con:
            latest = rows(con, "WHERE release_id = ? ORDER BY seq DESC LIMIT 1", [release_id])
        return latest[0].status if latest else None

    def verify(self, releases_root: Path | None = None, more: tuple[dict, ...] = ()) -> int:
        """Check the HMAC chain, that every anchor (and each of ``more``: an auditor's lines) and every published
        manifest's entry is in it.

        Returns the number of entries; raises ``LedgerCorrupt`` naming the first bad one.
        """
        with self.store.read() as con:  # the whole check, not the head's alone (``_read``): it names what is wrong
            entries = rows(con, "ORDER BY seq", [])
        if entries and not self.anchors.exist():
            with self.store.read() as con:
                rollback.check(con, self.anchors, self.store.describe())  # the anchors lost: said as the head check does
        return check_chain(entries, self.home, [*self.anchors.read(), *more], releases_root)
