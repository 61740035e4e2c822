"""Ingest a source file into the DuckDB database, content-addressed by its fingerprint.

The table for a dataset is named ``<dataset>@<fingerprint prefix>`` in schema ``ingested``:
the same bytes are ingested once, a changed file gets a new table, and a release always reads
exactly the table it validated.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from core.db import connect, quote_ident
from core.errors import IngestError

FORMATS = ("csv", "parquet", "jsonl")
SCHEMA = "ingested"


@dataclass(frozen=True)
class Ingested:
    """What the pipeline knows about an ingested table (no data)."""

    dataset: str
    table: str
    fingerprint: str
    rows: int
    columns: dict[str, str]
    source_name: str

    @property
    def qualified(self) -> str:
        return f"{SCHEMA}.{quote_ident(self.table)}"


def fingerprint(path: Path) -> str:
    """SHA-256 of the file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _reader(fmt: str, delimiter: str) -> tuple[str, list]:
    if fmt == "csv":
        # Fixed dialect and strict mode: the sniffer must not guess its way around bad rows.
        # Long fields (a whole mailbox or a 10 MB post in one cell) are allowed up to 128 MiB.
        return (
            "read_csv(?, header = true, skip = 0, delim = ?, quote = '\"', strict_mode = true, "
            "max_line_size = 134217728)",
            [delimiter],
        )
    if fmt == "parquet":
        return "read_parquet(?)", []
    return "read_json(?, format = 'newline_delimited')", []


def _safe_reason(exc: duckdb.Error, fmt: str, delimiter: str) -> str:
    """Describe a reader error without repeating any of the file's content."""
    line = re.search(r"[Ll]ine:? (\d+)", str(exc))
    where = f" near line {line.group(1)}" if line else ""
    if "invalid unicode" in str(exc).lower() or "not utf-8 encoded" in str(exc).lower():
        return f"it is not UTF-8 encoded{where}; convert it to UTF-8 first"
    if fmt == "csv":
        return (
            f"it is not a well-formed CSV file with a header row and delimiter {delimiter!r}{where} "
            "(every row needs the header's number of fields, quotes must be balanced); "
            "fix the file, or set dataset.delimiter"
        )
    if fmt == "parquet":
        return "it is not a readable Parquet file; check dataset.format"
    return f"it is not valid JSON lines (one object per line){where}; check dataset.format"


def ingest(db_path: Path, dataset: str, source: Path, fmt: str, delimiter: str = ",") -> Ingested:
    """Load ``source`` into DuckDB (once per distinct content) and describe the table."""
    if fmt not in FORMATS:
        raise IngestError(f"dataset.format must be one of {', '.join(FORMATS)}, got {fmt!r}.")
    if not source.is_file():
        raise IngestError(f"dataset.source {str(source)!r} is not a file; check the path in the spec.")
    if source.stat().st_size == 0:
        raise IngestError(f"dataset.source {source.name!r} is empty (0 bytes); nothing to release.")
    fp = fingerprint(source)
    table = f"{dataset}@{fp[:16]}"
    qualified = f"{SCHEMA}.{quote_ident(table)}"
    reader, extra = _reader(fmt, delimiter)
    with connect(db_path) as con:
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        exists = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
            [SCHEMA, table],
        ).fetchall()[0][0]
        if not exists:
            try:
                con.execute(f"CREATE TABLE {qualified} AS SELECT * FROM {reader}", [str(source), *extra])
            except duckdb.Error as exc:
                raise IngestError(f"could not read {source.name!r}: {_safe_reason(exc, fmt, delimiter)}.") from None
        rows = con.execute(f"SELECT count(*) FROM {qualified}").fetchall()[0][0]
        columns = {
            name: dtype
            for name, dtype in con.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position",
                [SCHEMA, table],
            ).fetchall()
        }
    return Ingested(dataset, table, fp, rows, columns, source.name)


def load(db_path: Path, ingested: Ingested) -> pd.DataFrame:
    """Read an ingested table into memory, in file order."""
    with connect(db_path) as con:
        return con.execute(f"SELECT * FROM {ingested.qualified}").df()
