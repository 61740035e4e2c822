"""The dataset registry: what the data steward registered, and the one stored snapshot of it.

Registration is the only step that reads a source file. The steward may see the data, so its
errors give counts and line numbers. What it records splits in two:

- public facts (``Dataset``): id, privacy unit, purpose, the schema (column names, types,
  nullability), the row count when the unit makes it public, and a registration version;
- private facts: the source path and the snapshot's digest, used only to check that the stored
  snapshot is the one registered. Releases read the snapshot, never the source.

A dataset id is bound to its unit and purpose for good: the ledger keys budgets by id, so the
same id must always mean the same adjacency.

Registrations live in the ledger's store (``privrelease.core.store``: the home's DuckDB file, or PostgreSQL);
snapshots live in the snapshot store (``privrelease.core.datasets.snapshots``: ``$PRIVRELEASE_SNAPSHOT_STORE``, else
``<home>/datasets``), recorded relative to it with the registering host, so workers with different
homes that share one PostgreSQL store read them from one shared folder, each checked against the
registered digest before use.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from privrelease.core import paths
from privrelease.core.datasets import advice, content, ingest, snapshots
from privrelease.core.datasets.facts import Dataset, Unit, arguments
from privrelease.core.datasets.infer import Reading
from privrelease.core.db import memory
from privrelease.core.errors import NotRegistered, SpecError
from privrelease.core.ids import check_id
from privrelease.core.ledger.ledger import REFRESHED, REGISTERED, Ledger
from privrelease.core.sdc.policy import Policy, PolicyMismatch
from privrelease.core.store import REGISTRY_LOCK, open_store
from privrelease.core.tables.readers import bound, check_weight, data_root, resolve_source
from privrelease.core.tables.schema import Schema

if TYPE_CHECKING:  # pandas where a frame is read, not at import: the gate imports this and reads none
    import pandas as pd

COLUMNS = ("id", "version", "unit", "purpose", "format", "delimiter", "source", "schema", "suite", "rows", "registered",
           "snapshot", "digest", "source_digest", "host", "reading")  # fmt: skip
Warn = Callable[[str], None]


@dataclass(frozen=True)
class _Private:
    source: str
    format: str
    delimiter: str
    suite: str | None
    snapshot: str | None
    digest: str | None
    host: str | None
    reading: str | None


@dataclass(frozen=True)
class _Source:
    """Where a registration reads its rows, and how."""

    path: Path
    format: str
    delimiter: str
    reading: Reading
    suite: str | None


class Registry:
    """The ``datasets`` table of the store, and the snapshots in the snapshot store."""

    def __init__(self, home: Path):
        self.home = home
        self.store = open_store(paths.database(home))
        self._seen: dict[str, list[str]] = {}  # identifier-like columns of the rows this registry just read

    # -- steward ---------------------------------------------------------------------------------

    def add(
        self,
        dataset_id: str,
        source: str,
        fmt: str,
        unit: Unit,
        purpose: str,
        schema: Schema | None = None,
        suite: str | None = None,
        delimiter: str = ",",
        root: Path | None = None,
        policy: Policy | None = None,
        requested_by: str | None = None,
        reading: Reading = Reading(),
        warn: Warn | None = None,
        dry_run: bool = False,
    ) -> tuple[Dataset, bool]:
        """Register a dataset; returns it and whether its schema was inferred (and so must be shown). An sdc
        dataset's disclosure ``policy`` is checked against the schema before anything is written, and recorded
        on the ledger. ``source`` lies in ``root`` (default ``readers.bound``: the data root, relative to it,
        or anywhere for a command a user typed, which makes it absolute); ``warn`` hears of columns read as
        text because of a few values. With ``dry_run`` everything is read and checked as for a registration
        and nothing is written (no lock, no snapshot, no row): the dataset returned is not registered."""
        with contextlib.nullcontext() if dry_run else self.store.lock(REGISTRY_LOCK):
            path, version = self._admit(dataset_id, source, fmt, unit, purpose, policy, root)
            source_ = _Source(path, fmt, delimiter, reading, suite)
            dataset = self._ingest(dataset_id, version, source_, unit, purpose, schema, policy, warn, dry_run=dry_run)
            if dry_run:
                return dataclasses.replace(dataset, policy=policy), schema is None
            self.ledger.registered(dataset_id, REGISTERED, dataset.facts(), requested_by)
            if policy is not None:
                self.ledger.set_policy(dataset_id, policy.public(), requested_by)
            return self.get(dataset_id), schema is None

    def _admit(
        self, dataset_id: str, source: str, fmt: str, unit: Unit, purpose: str, policy: Policy | None, root: Path | None
    ) -> tuple[Path, int]:
        """The arguments of a new registration checked, before any row is read: its source's path and version."""
        arguments(dataset_id, fmt, unit, purpose, policy)
        earlier = self._versions(dataset_id)
        if earlier and earlier[-1][1] is not None:
            raise SpecError(
                f"dataset {dataset_id!r} is already registered; use 'privrelease dataset refresh "
                f"{dataset_id}' to re-ingest it, or choose another id."
            )
        if earlier and (earlier[0][0].unit, earlier[0][0].purpose) != (unit, purpose):
            raise SpecError(
                f"dataset id {dataset_id!r} was registered before with unit {earlier[0][0].unit} and purpose "
                f"{earlier[0][0].purpose}; its ledger entries are bound to them. Register under another id."
            )
        path = resolve_source(source, root or bound(self.home))
        self._refuse_duplicate(dataset_id, path)
        return path, len(earlier) + 1

    @property
    def ledger(self) -> Ledger:
        return Ledger(paths.database(self.home), self.store)

    def set_policy(self, dataset_id: str, policy: Policy, requested_by: str | None = None) -> Dataset:
        """The steward's new disclosure policy of an sdc dataset, checked against its schema, on the ledger."""
        with self.store.lock(REGISTRY_LOCK):
            self.check_policy(dataset_id, policy, advise=False)
            self.ledger.set_policy(dataset_id, policy.public(), requested_by)
            return self.get(dataset_id)

    def check_policy(self, dataset_id: str, policy: Policy, advise: bool = True) -> list[str]:
        """``set_policy``'s checks against the registered snapshot, recording nothing (``dataset policy --check``), and
        with ``advise`` what the steward should know of the policy on those rows (``advice.on_policy``)."""
        current, private = self._current(dataset_id)
        _sdc(current)
        policy.check(current.schema, dataset_id)
        with memory() as con:
            con.execute("CREATE TEMP TABLE snapshot AS SELECT * FROM read_parquet(?)", [str(self._snapshot(private))])
            if policy.weight is not None:
                check_weight(con, "snapshot", policy.weight, f"dataset {dataset_id!r}")
            return advice.on_policy(con, "snapshot", current.schema, policy) if advise else []

    def refresh(
        self,
        dataset_id: str,
        root: Path | None = None,
        schema: Schema | None = None,
        warn: Warn | None = None,
        policy: Policy | None = None,
        requested_by: str | None = None,
        delimiter: str | None = None,
    ) -> Dataset:
        """Re-ingest and re-check a dataset from its registered source, suite and reading options (a CSV's ``delimiter``
        if given: kept for the next refresh), under
        ``schema`` if given (a new one: columns dropped, types changed), else the registered one less the columns
        the source no longer has (a column dropped from the source leaves the schema). An sdc dataset's ``policy``,
        if given, replaces its disclosure policy with the new rows, checked as at registration (nothing changes if
        it does not fit them) and recorded on the ledger."""
        with self.store.lock(REGISTRY_LOCK):
            current, private = self._current(dataset_id)
            if policy is not None:
                _sdc(current)
            path = resolve_source(self._source_path(private.source), root or bound(self.home))
            reading = Reading.load(private.reading)
            if delimiter is not None:
                Reading.parse(",".join(reading.na), reading.decimal, delimiter, private.format)  # checks it against the decimal
                if private.format != "csv":
                    raise SpecError(f"--delimiter is a CSV's; dataset {dataset_id!r} is read from {private.format}.")
            source = _Source(path, private.format, delimiter or private.delimiter, reading, private.suite)
            args = (dataset_id, current.version + 1, source, current.unit, current.purpose, schema or current.schema)
            try:
                self._ingest(*args, policy or current.policy, warn, may_drop=schema is None)
            except PolicyMismatch as exc:  # nothing was written: the registration and its policy stand
                fix = "fix the --policy file" if policy else "pass a policy that fits the source as it is now with --policy FILE"
                raise PolicyMismatch(f"{exc} Nothing was changed; {fix}.") from None
            self.ledger.registered(dataset_id, REFRESHED, self.get(dataset_id).facts(), requested_by)
            if policy is not None:
                self.ledger.set_policy(dataset_id, policy.public(), requested_by)
            return self.get(dataset_id)

    def drop(self, dataset_id: str) -> None:
        """Delete the stored rows (and what was computed from them); the registration history and the ledger keep
        their entries."""
        with self.store.lock(REGISTRY_LOCK):
            current, private = self._current(dataset_id)
            if private.snapshot:
                snapshots.remove(self._snapshot(private))
            with self.store.write() as con:
                con.execute("UPDATE datasets SET snapshot = NULL, digest = NULL WHERE id = ?", [dataset_id])

    # -- everyone --------------------------------------------------------------------------------

    def list(self) -> list[Dataset]:
        rows = self._query("SELECT id FROM datasets WHERE snapshot IS NOT NULL GROUP BY id ORDER BY id", [])
        return [self.get(i) for (i,) in rows]

    def get(self, dataset_id: str, dropped: bool = False) -> Dataset:
        """A registered dataset's public facts; an unknown id is a user error naming the fix. With
        ``dropped``, also those of a dataset whose rows were dropped (a preview needs no rows)."""
        return self._current(dataset_id, dropped)[0]

    def load(self, dataset: Dataset) -> pd.DataFrame:
        """The stored snapshot, after checking it is the one registered (its digest stays private)."""
        path, _ = self.checked(dataset)
        with memory() as con:  # in memory, default settings (row order kept)
            frame = con.execute("SELECT * FROM read_parquet(?)", [str(path)]).df()
        frame.attrs["snapshot"] = str(path)  # immutable once written: Dask workers may read their partition from it
        return frame

    def checked(self, dataset: Dataset) -> tuple[Path, str]:
        """The stored snapshot's file and its digest, after checking it is the one registered: the registration
        unchanged since the request was checked, and the file's SHA-256 its registered digest (hashed in full at
        every call; the digest stays private: a key for caches of what is computed from the file)."""
        current, private = self._current(dataset.id)
        if current.version != dataset.version:  # registered again since the request was checked
            raise snapshots.SnapshotChanged(
                f"dataset {dataset.id!r} changed since registration; ask the data steward to check it."
            )
        if current.policy_entry != dataset.policy_entry:
            raise snapshots.SnapshotChanged(
                f"the disclosure policy of dataset {dataset.id!r} changed since the request was checked; release again."
            )
        return snapshots.checked(self.home, dataset.id, private.snapshot, private.digest, private.host), private.digest

    def identifiers(self, dataset: Dataset) -> list[str]:
        """Columns holding a different value in every row: identifier-like, for the steward to drop
        before an sdc release publishes them as they are (a steward's check; it reads the rows, or
        remembers them from the registration or dry run this registry just made)."""
        if dataset.id in self._seen:
            return self._seen[dataset.id]
        _, private = self._current(dataset.id)
        with memory() as con:
            con.execute("CREATE TEMP TABLE stored AS SELECT * FROM read_parquet(?)", [str(self._snapshot(private))])
            return content.identifier_like(con, "stored", list(dataset.schema.columns))

    # -- internals -------------------------------------------------------------------------------

    def _stored_source(self, path: Path) -> str:
        """A source as recorded: relative to the data root when it lies in it (so a home restored elsewhere reads its
        own copy), else absolute."""
        root = data_root(self.home)
        return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)

    def _source_path(self, stored: str) -> str:
        """A recorded source as a path to read: a relative one lies in this home's data root."""
        return stored if Path(stored).is_absolute() else str(data_root(self.home) / stored)

    def _snapshot(self, private: _Private) -> Path:
        """The snapshot's file: its recorded path in the store (an absolute one, from before snapshots
        were recorded relative to it, stays as it is)."""
        return snapshots.root(self.home) / (private.snapshot or "missing")

    def _query(self, sql: str, args: list) -> list[tuple]:
        """Rows of the registry table; none before anything was registered in this home."""
        if not self.store.exists():
            return []
        with self.store.read() as con:
            return con.execute(sql, args).fetchall()

    def _versions(self, dataset_id: str) -> list[tuple[Dataset, str | None]]:
        rows = self._query(
            "SELECT id, version, unit, purpose, schema, rows, registered, snapshot FROM datasets WHERE id = ? ORDER BY version",
            [dataset_id],
        )
        return [(_dataset(r[:7]), r[7]) for r in rows]

    def _current(self, dataset_id: str, dropped: bool = False) -> tuple[Dataset, _Private]:
        check_id(dataset_id, "dataset id")
        rows, entry = [], None
        if self.store.exists():
            with self.store.read() as con:  # the registration and its policy entry in one open
                rows = con.execute(
                    "SELECT id, version, unit, purpose, schema, rows, registered, source, format, delimiter, suite, "
                    "snapshot, digest, host, reading FROM datasets WHERE id = ? ORDER BY version DESC LIMIT 1",
                    [dataset_id],
                ).fetchall()
                entry = self.ledger.policy_entry(dataset_id, con) if rows and rows[0][3] == "sdc" else None
        if not rows or (rows[0][11] is None and not dropped):
            raise NotRegistered(
                f"dataset {dataset_id!r} is not registered; the data steward registers it with "
                "'privrelease dataset add' (see 'privrelease dataset list')."
            )
        dataset = _dataset(rows[0][:7])
        if entry is not None:
            dataset = dataclasses.replace(dataset, policy=Policy.model_validate_json(entry.detail), policy_entry=entry.seq)
        return dataset, _Private(*rows[0][7:])

    def _refuse_duplicate(self, dataset_id: str, path: Path, parsed: str | None = None) -> None:
        """One content, one id (and so one budget): the same path, the same bytes, or (once parsed) the
        same table in any row or column order (``privrelease.core.datasets.content``) under another id, also one that was
        dropped, is refused. ``source_digest`` holds the content digest (bytes for older rows)."""
        other = self._query(
            "SELECT DISTINCT id FROM datasets WHERE (source IN (?, ?) OR source_digest IN (?, ?)) AND id <> ?",
            [str(path), self._stored_source(path), snapshots.sha256(path), parsed or "", dataset_id],
        )
        if other:
            raise SpecError(
                f"this source is already registered as dataset {other[0][0]!r}; one source has one "
                "budget, so release it under that id."
            )

    def _read(
        self,
        con: duckdb.DuckDBPyConnection,
        dataset_id: str,
        source: _Source,
        unit: Unit,
        schema: Schema | None,
        policy: Policy | None,
        warn: Warn | None,
        may_drop: bool = False,
    ) -> tuple[pd.DataFrame, Schema, int, str]:
        """The source read, cast and checked (schema, policy, one content one id, the suite): the frame, its
        schema, row count and content digest."""
        frame, schema, _, total = ingest.read_table(
            con,
            source.path,
            source.format,
            source.delimiter,
            schema,
            policy,
            unit.column,
            dataset_id,
            source.reading,
            warn,
            may_drop,
        )
        parsed = content.digest(frame, {n: c.type for n, c in schema.columns.items()})
        self._refuse_duplicate(dataset_id, source.path, parsed)
        if source.suite is not None:
            from privrelease.core.datasets.validate import load_suite, validate

            name, expectations = load_suite(source.suite)
            validate(frame, name, expectations)
        return frame, schema, total, parsed

    def _ingest(
        self,
        dataset_id: str,
        version: int,
        source: _Source,
        unit: Unit,
        purpose: str,
        schema: Schema | None,
        policy: Policy | None,
        warn: Warn | None,
        may_drop: bool = False,
        dry_run: bool = False,
    ) -> Dataset:
        """Read and check the source, then write its snapshot and registration: nothing before the checks passed
        (a failed registration leaves no folder behind), nothing at all in a dry run."""
        with memory() as con:
            frame, schema, total, parsed = self._read(con, dataset_id, source, unit, schema, policy, warn, may_drop)
            con.register("snapshot_frame", frame)
            self._seen[dataset_id] = content.identifier_like(con, "snapshot_frame", list(schema.columns))
            for line in advice.warnings(con, "snapshot_frame", schema, unit.column, purpose, policy) if warn else []:
                warn(line)
            rows = total if unit.kind == "record" else None
            if dry_run:
                return Dataset(dataset_id, version, unit, purpose, schema, rows, "not registered (a dry run)")
            snapshot = snapshots.folder(self.home, dataset_id) / f"v{version}.parquet"
            digest = snapshots.write(con, "snapshot_frame", snapshot)
            con.unregister("snapshot_frame")
        registered = datetime.now(UTC).isoformat(timespec="seconds")
        with self.store.write() as con:
            con.execute(
                f"INSERT INTO datasets ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                [
                    dataset_id,
                    version,
                    str(unit),
                    purpose,
                    source.format,
                    source.delimiter,
                    self._stored_source(source.path),
                    schema.model_dump_json(),
                    source.suite,
                    rows,
                    registered,
                    f"{dataset_id}/{snapshot.name}",
                    digest,
                    parsed,
                    snapshots.host(),
                    source.reading.dump(),
                ],
            )
            con.execute("UPDATE datasets SET snapshot = NULL, digest = NULL WHERE id = ? AND version < ?", [dataset_id, version])
        snapshots.prune(snapshot)
        return Dataset(dataset_id, version, unit, purpose, schema, rows, registered)


def _sdc(dataset: Dataset) -> None:
    """Refuse a disclosure policy for a dp dataset."""
    if dataset.purpose != "sdc":
        raise SpecError(f"dataset {dataset.id!r} is registered for dp releases; a disclosure policy is for an sdc dataset.")


def _dataset(row: tuple) -> Dataset:
    dataset_id, version, unit, purpose, schema, rows, registered = row
    return Dataset(dataset_id, version, Unit.parse(unit), purpose, Schema.model_validate_json(schema), rows, registered)
