"""Reading a source file into DuckDB at registration, with errors a steward can act on.

CSV is read with a fixed dialect in strict mode, so a bad row is refused instead of guessed
around, and with types inferred from every row (not a sample), so a late value of another type
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
import re
import tempfile
from pathlib import Path

import yaml

from core.errors import IngestError, SpecError

_CSV = ("read_csv(?, header = true, skip = 0, delim = ?, quote = '\"', escape = '\"', strict_mode = true, "
        "sample_size = -1, max_line_size = 134217728)")  # fmt: skip


def read_into(con, table: str, path, fmt: str, delimiter: str) -> None:
    """Create temp table ``table`` from ``path``, or raise ``IngestError`` saying what to fix."""
    if fmt != "csv":
        reader = "read_parquet(?)" if fmt == "parquet" else "read_json(?, format = 'newline_delimited')"
        try:
            con.execute(f"CREATE TEMP TABLE {table} AS SELECT * FROM {reader}", [str(path)])
        except Exception as exc:  # noqa: BLE001 - DuckDB raises several types; none is echoed
            raise IngestError(f"could not read {path.name!r}: {_other_error(exc, fmt)}.") from None
        return
    try:
        con.execute(f"CREATE TEMP TABLE {table} AS SELECT * FROM {_CSV}", [str(path), delimiter])
        return
    except Exception as exc:  # noqa: BLE001
        if _unicode(exc):
            raise IngestError(f"could not read {path.name!r}: it is not UTF-8 encoded{_near(exc)}; convert it to "
                              "UTF-8 first.") from None  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="privrelease-csv-") as scratch:  # mode 700: the rows are private
        copy = Path(scratch) / "normalized.csv"
        normalize(path, delimiter, copy)  # raises naming the first bad line
        try:
            con.execute(f"CREATE TEMP TABLE {table} AS SELECT * FROM {_CSV}", [str(copy), delimiter])
        except Exception:  # noqa: BLE001 - DuckDB raises several types; none is echoed
            raise IngestError(f"could not read {path.name!r}: it is not a well-formed CSV file with a header row "
                              f"and delimiter {delimiter!r}; fix the file or pass --delimiter.") from None  # fmt: skip


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
                    raise IngestError(f"could not read {name!r}: line {start} has {len(row)} fields, the header has "
                                      f"{expected}; every row needs the header's number of fields (or pass "
                                      "--delimiter if the file uses another one).")  # fmt: skip
                if row:
                    writer.writerow(row)
                start = reader.line_num + 1
    except csv.Error as exc:
        what = ("a quoted field opened there is never closed" if "end of data" in str(exc) or "EOF" in str(exc)
                else "a quote is misplaced (a quote inside a field must be doubled, as \"\")")  # fmt: skip
        raise IngestError(f"could not read {name!r}: line {start}: {what}.") from None
    except UnicodeDecodeError:
        raise IngestError(f"could not read {name!r}: it is not UTF-8 encoded; convert it to UTF-8 first.") from None


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
    except yaml.YAMLError:
        raise SpecError(f"{option} {file.name!r} is not valid YAML or JSON.") from None
