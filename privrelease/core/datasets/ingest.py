"""Reading a steward's file into a typed table at registration: its header, its schema (given or
inferred), the disclosure policy's and the privacy unit's demands on it, each refused with a message
the steward can act on."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
from pydantic import ValidationError

from privrelease.core.datasets import infer
from privrelease.core.datasets.infer import Reading
from privrelease.core.db import quote_ident
from privrelease.core.errors import IngestError, SpecError
from privrelease.core.sdc.policy import Policy
from privrelease.core.tables.readers import CAST, check_schema, check_weight, csv_header, read_into, steward_file
from privrelease.core.tables.schema import TYPES, Schema

if TYPE_CHECKING:  # pandas where a frame is read, not at import: the gate imports this and reads none
    import pandas as pd


def read_table(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    fmt: str,
    delimiter: str,
    schema: Schema | None,
    policy: Policy | None,
    unit_column: str | None,
    dataset_id: str,
    reading: Reading = Reading(),
    warn: Callable[[str], None] | None = None,
    may_drop: bool = False,
) -> tuple[pd.DataFrame, Schema, bool, int]:
    """The file as a frame cast to its schema, the schema, whether it was inferred, and the row count. Types are
    inferred, and missing values and decimal commas read, as ``privrelease.core.datasets.infer`` says; ``warn`` hears of
    columns left as text by a few values. With ``may_drop`` (a refresh keeping its schema), columns of ``schema``
    the file no longer has leave it."""
    if fmt == "csv":
        header = csv_header(path, delimiter)
        dupes = sorted({h for h in header if header.count(h) > 1})
        if dupes:
            raise IngestError(f"the CSV header repeats column names {dupes}; give every column a unique name.")
    read_into(con, "raw", path, fmt, delimiter)
    found = infer.clean(con, "raw", "cleaned", reading)
    names = [n for n, _ in found]
    total = con.execute("SELECT count(*) FROM raw").fetchall()[0][0]
    if total == 0:
        raise IngestError(f"{path.name!r} has a header but no rows; nothing to register.")
    inferred = schema is None
    if schema is None:
        schema, warnings = infer.infer(con, "cleaned", found, reading)
        for line in warnings:
            (warn or _ignore)(line)
    elif may_drop and len(names) < len(schema.columns) and [c for c in schema.columns if c in names] == names:
        gone = [c for c in schema.columns if c not in names]
        schema = Schema(columns={n: c for n, c in schema.columns.items() if n in names})
        (warn or _ignore)(f"columns {gone} are no longer in the source: they leave the registered schema (public).")
    dtypes = dict(found)
    con.execute(
        "CREATE TEMP TABLE incoming AS SELECT "
        + ", ".join(
            f"{infer.value(n, schema.columns[n], dtypes[n], reading)} AS {quote_ident(n)}"
            if n in schema.columns
            else quote_ident(n)
            for n in names
        )
        + " FROM cleaned"
    )
    check_schema(con, schema, names, path.name)
    if policy is not None:
        policy.check(schema, dataset_id)
        check_weight(con, "incoming", policy.weight, path.name)
    if unit_column is not None and (unit_column not in schema.columns or schema.columns[unit_column].nullable):
        raise IngestError(
            f"--unit names column {unit_column!r}, which the file lacks or leaves empty in some "
            "rows; every record needs its user."
        )
    frame = con.execute(
        "SELECT "
        + ", ".join(f"CAST({quote_ident(n)} AS {CAST[c.type]}) AS {quote_ident(n)}" for n, c in schema.columns.items())
        + " FROM incoming"
    ).df()
    return frame, schema, inferred, total


def _ignore(line: str) -> None:
    """No one to tell (the warnings are the steward's, on the command line)."""


def read_schema(path: str) -> Schema:
    """A steward's schema file (YAML or JSON: ``columns: {name: {type, nullable}}``)."""
    file = Path(path)
    doc = steward_file(path, "--schema")
    try:
        return Schema.model_validate(doc)
    except ValidationError as exc:
        where = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise SpecError(
            f"--schema {file.name!r} is invalid ({where}); each column needs a type among "
            f"{', '.join(TYPES)} and optionally nullable: true."
        ) from None
