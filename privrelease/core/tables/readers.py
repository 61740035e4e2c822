"""Reading a source file into DuckDB at registration, with errors a steward can act on.

CSV is read with a fixed dialect in strict mode, so a bad row is refused instead of guessed
around, and with every cell read as text: types are inferred afterwards from every row (not a
sample), by one rule for every format (``privrelease.core.datasets.infer``), so a late value of another type
widens its column instead of failing the read. DuckDB's strict mode also refuses a file whose rows
end in a mix of CRLF and LF (a file written on one system and appended to on another). When the
strict read fails, one streaming pass with Python's ``csv`` module, in the same dialect, finds the
first offending line: its number and what is wrong on it (field count, an unbalanced quote). A file
that pass finds well-formed is written out again by that pass, with LF line endings, into a
private temporary folder, and that copy is read strictly: the snapshot is the table Python's
reader saw, the same whatever the line endings. (DuckDB's relaxed mode is never used: it keeps
the row count but can change cells around a stray CR.)

Messages name line numbers and counts, never a cell's content.
"""

from __future__ import annotations

import csv
import os
import re
import tempfile
from pathlib import Path

import yaml

from privrelease.core import paths, settings
from privrelease.core.db import quote_ident
from privrelease.core.errors import IngestError, SpecError, yaml_where
from privrelease.core.tables.schema import Schema

_CSV = (
    "read_csv(?, header = true, skip = 0, delim = ?, quote = '\"', escape = '\"', strict_mode = true, "
    "all_varchar = true, max_line_size = 134217728)"
)


# DuckDB type → registered type; anything else is stored as text.
DUCK = {
    "TINYINT": "integer", "SMALLINT": "integer", "INTEGER": "integer", "BIGINT": "integer", "HUGEINT": "integer",
    "UTINYINT": "integer", "USMALLINT": "integer", "UINTEGER": "integer", "UBIGINT": "integer",
    "FLOAT": "float", "DOUBLE": "float", "BOOLEAN": "boolean", "DATE": "date", "TIMESTAMP": "timestamp",
    "VARCHAR": "string",
}  # fmt: skip
CAST = {"integer": "BIGINT", "float": "DOUBLE", "string": "VARCHAR", "boolean": "BOOLEAN", "date": "DATE",
         "timestamp": "TIMESTAMP"}  # fmt: skip
CONTROL = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"  # control characters other than tab, LF and CR


def read_into(con, table: str, path, fmt: str, delimiter: str) -> None:
    """Create temp table ``table`` from ``path``, or raise ``IngestError`` saying what to fix."""
    if fmt != "csv":
        reader = "read_parquet(?)" if fmt == "parquet" else "read_json(?, format = 'newline_delimited')"
        try:
            con.execute(f"CREATE TEMP TABLE {table} AS SELECT * FROM {reader}", [str(path)])
        except Exception as exc:  # noqa: BLE001 - DuckDB raises several types; none is echoed
            raise IngestError(f"could not read {path.name!r}: {_other_error(exc, fmt)}.") from None
        return
    other = _looks_like(path)
    if other is not None:
        raise IngestError(f"could not read {path.name!r} as CSV: it looks like {other}; check --format.")
    try:
        con.execute(f"CREATE TEMP TABLE {table} AS SELECT * FROM {_CSV}", [str(path), delimiter])
        return
    except Exception as exc:  # noqa: BLE001
        if _unicode(exc):
            raise IngestError(
                f"could not read {path.name!r}: it is not UTF-8 encoded{_near(exc)}; convert it to UTF-8 first."
            ) from None
    with tempfile.TemporaryDirectory(prefix="privrelease-csv-") as scratch:  # mode 700: the rows are private
        copy = Path(scratch) / "normalized.csv"
        normalize(path, delimiter, copy)  # raises naming the first bad line
        try:
            con.execute(f"CREATE TEMP TABLE {table} AS SELECT * FROM {_CSV}", [str(copy), delimiter])
        except Exception:  # noqa: BLE001 - DuckDB raises several types; none is echoed
            raise IngestError(
                f"could not read {path.name!r}: it is not a well-formed CSV file with a header row "
                f"and delimiter {delimiter!r}; fix the file or pass --delimiter."
            ) from None


def csv_header(path, delimiter: str) -> list[str]:
    with open(path, newline="", encoding="utf-8", errors="replace") as handle:
        return next(csv.reader(handle, delimiter=delimiter), [])


def normalize(path, delimiter: str, copy: Path) -> None:
    """A well-formed CSV (CRLF, LF or a mix) written to ``copy`` with LF line endings, else
    ``IngestError`` naming the first bad line. Blank lines are skipped, as DuckDB skips them."""
    name = getattr(path, "name", str(path))
    start = 1
    try:
        with open(path, newline="", encoding="utf-8") as handle, open(copy, "w", newline="", encoding="utf-8") as out:
            reader = csv.reader(handle, delimiter=delimiter, quotechar='"', doublequote=True, strict=True)
            writer = csv.writer(out, delimiter=delimiter, quotechar='"', doublequote=True, lineterminator="\n")
            header = next(reader, None)
            if header is None:
                raise IngestError(f"could not read {name!r}: it is empty; a CSV needs a header row.")
            writer.writerow(header)
            expected, start = len(header), reader.line_num + 1
            for row in reader:
                if row and len(row) != expected:
                    raise IngestError(
                        f"could not read {name!r}: line {start} has {len(row)} fields, the header has "
                        f"{expected}; every row needs the header's number of fields (or pass "
                        "--delimiter if the file uses another one)."
                    )
                if row:
                    writer.writerow(row)
                start = reader.line_num + 1
    except csv.Error as exc:
        what = (
            "a quoted field opened there is never closed"
            if "end of data" in str(exc) or "EOF" in str(exc)
            else 'a quote is misplaced (a quote inside a field must be doubled, as "")'
        )
        raise IngestError(f"could not read {name!r}: line {start}: {what}.") from None
    except UnicodeDecodeError:
        raise IngestError(f"could not read {name!r}: it is not UTF-8 encoded; convert it to UTF-8 first.") from None


MAGIC = {b"PAR1": "a Parquet file (--format parquet)", b"\x1f\x8b": "a gzip-compressed file (decompress it first)",
         b"PK\x03\x04": "a ZIP archive (a spreadsheet? export it as CSV)"}  # fmt: skip


def _looks_like(path) -> str | None:
    """What a file given as CSV is by its first bytes, when they name another format."""
    with open(path, "rb") as handle:
        head = handle.read(4)
    return next((what for magic, what in MAGIC.items() if head.startswith(magic)), None)


def _unicode(exc: Exception) -> bool:
    text = str(exc).lower()
    return "invalid unicode" in text or "not utf-8 encoded" in text


def _near(exc: Exception) -> str:
    line = re.search(r"[Ll]ine:? (\d+)", str(exc))
    return f" near line {line.group(1)}" if line else ""


def _other_error(exc: Exception, fmt: str) -> str:
    if _unicode(exc):
        return f"it is not UTF-8 encoded{_near(exc)}; convert it to UTF-8 first"
    if fmt == "parquet":
        return "it is not a readable Parquet file; check --format"
    return f"it is not valid JSON lines (one object per line){_near(exc)}; check --format"


def steward_file(path: str, option: str) -> object:
    """A steward's YAML or JSON file (a schema, a disclosure policy), parsed; refused as ``option`` names it."""
    file = Path(path)
    if not file.is_file():
        raise SpecError(f"{option} {path!r} is not a file.")
    try:
        return yaml.safe_load(file.read_text())
    except yaml.YAMLError as exc:
        raise SpecError(f"{option} {file.name!r} is not valid YAML or JSON{yaml_where(exc)}.") from None


def check_schema(con, schema: Schema, found: list[str], name: str) -> None:
    """The file against the declared schema, with counts and line numbers (the steward's view)."""
    declared = list(schema.columns)
    if declared != found:
        missing = [c for c in declared if c not in found]
        extra = [c for c in found if c not in declared]
        joined = [sep for sep in ";\t|:, " if len(found) == 1 and found[0].split(sep) == declared]
        raise IngestError(
            f"{name!r} does not match the declared schema: missing columns {missing}, undeclared columns {extra}"
            + ("" if missing or extra else ", columns in another order")
            + (
                f"; its header holds the declared columns separated by {joined[0]!r}: pass --delimiter {joined[0]!r}."
                if joined
                else "; fix the file or the schema."
            )
        )
    problems = []
    for column, spec in schema.columns.items():
        q = quote_ident(column)
        checks = [(f"TRY_CAST({q} AS {CAST[spec.type]}) IS NULL AND {q} IS NOT NULL", f"not of type {spec.type}", None)]
        if not spec.nullable:
            checks.append((f"{q} IS NULL", "empty (the schema says nullable: false)", None))
        if spec.type == "float":
            checks.append((f"isinf(TRY_CAST({q} AS DOUBLE)) OR isnan(TRY_CAST({q} AS DOUBLE))", "infinite or NaN", None))
        if spec.type == "string":
            checks.append((f"regexp_matches(CAST({q} AS VARCHAR), '{CONTROL}')", "holding NUL or control characters", None))
        if spec.domain is not None:  # the steward's public list of its values, which must not depend on the data
            kind = CAST[spec.type]
            checks.append(
                (f"NOT list_contains(?::{kind}[], TRY_CAST({q} AS {kind}))", "outside its declared domain", [list(spec.domain)])
            )
        for predicate, what, parameters in checks:  # the domain as a parameter: its values are the steward's text
            bad = con.execute(
                f"SELECT count(*), list(line ORDER BY line)[1:5] FROM (SELECT row_number() OVER () + 1 AS line, * "
                f"FROM incoming) WHERE {predicate}",
                parameters,
            ).fetchall()[0]
            if bad[0]:
                problems.append(f"column {column!r}: {bad[0]} values {what} (first at lines {bad[1]})")
    if problems:
        domain = any("outside its declared domain" in p for p in problems)
        raise IngestError(
            f"{name!r} does not fit the declared schema: " + "; ".join(problems) + "." + (DOMAIN_ADVICE if domain else "")
        )


DOMAIN_ADVICE = (
    " A declared domain is published as it is and must not depend on the data: fix a typo in the file, or take the "
    "domain from outside the data (a code list, a standard), or declare none (its keys are then selected privately); "
    "never add a value because a record holds it."
)


def check_weight(con, table: str, weight: str | None, name: str) -> None:
    """A sampling weight is a positive number of people each record stands for (the steward's view: counts)."""
    if weight is None:
        return
    bad = con.execute(f"SELECT count(*) FROM {table} WHERE NOT (CAST({quote_ident(weight)} AS DOUBLE) > 0)").fetchone()[0]
    if bad:
        raise IngestError(
            f"{name}: the weight column {weight!r} holds {bad} values that are not positive; a "
            "sampling weight is the number of people a record stands for, above 0."
        )


def data_root(home: Path) -> Path:
    """The operator's data folder: ``$PRIVRELEASE_DATA_ROOT``, else ``<home>/data``. Runs started through
    Prefect's worker or the gate read only files inside it (``bound``)."""
    return Path(settings.get(settings.DATA_ROOT) or home / "data").resolve()


ANYWHERE = paths.ANYWHERE


def bound(home: Path) -> Path:
    """The folder every file a run reads must lie in: anywhere for a typed command, else the data root."""
    return ANYWHERE if paths.typed() else data_root(home)


def resolve_source(source: str, root: Path, what: str = "--source") -> Path:
    """The source path inside ``root`` (the data root, or ``ANYWHERE``); anything outside it, also through symlinks, is refused
    with one message whatever is there (so the refusal tells nothing about files outside the root).
    The path is read as written first (``..`` taken lexically, never after a symbolic link), so
    ``link/../x`` or ``/proc/self/fd/3/..`` cannot tell where a link outside the root points."""
    written = Path(os.path.normpath(root / source))
    path = written.resolve()
    if not written.is_relative_to(root) or not path.is_relative_to(root):
        raise SpecError(
            f"{what} must lie inside the data root {str(root)!r} (set {settings.DATA_ROOT} to change it); "
            "paths outside it, also through symbolic links, are refused."
        )
    if not path.is_file():
        where = "" if root == ANYWHERE else f" under the data root {str(root)!r}"
        raise IngestError(f"{what} {source!r} is not a file{where}.")
    if path.stat().st_size == 0:
        raise IngestError(f"{what} {source!r} is empty (0 bytes).")
    return path
