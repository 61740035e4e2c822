"""Reading a steward's file into a typed table at registration: its header, its schema (given or
inferred), the disclosure policy's and the privacy unit's demands on it, each refused with a message
the steward can act on."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
from pydantic import ValidationError

from core.db import quote_ident
from core.errors import IngestError, SpecError
from core.sdc.policy import Policy
from core.tables.readers import CAST, DUCK, check_schema, check_weight, csv_header, read_into, steward_file
from core.tables.schema import TYPES, Column, Schema


def read_table(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    fmt: str,
    delimiter: str,
    schema: Schema | None,
    policy: Policy | None,
    unit_column: str | None,
    dataset_id: str,
) -> tuple[pd.DataFrame, Schema, bool, int]:
    """The file as a frame cast to its schema, the schema, whether it was inferred, and the row count."""
    if fmt == "csv":
        header = csv_header(path, delimiter)
        dupes = sorted({h for h in header if header.count(h) > 1})
        if dupes:
            raise IngestError(f"the CSV header repeats column names {dupes}; give every column a unique name.")
    read_into(con, "incoming", path, fmt, delimiter)
    found = con.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'incoming' ORDER BY ordinal_position"
    ).fetchall()
    total = con.execute("SELECT count(*) FROM incoming").fetchall()[0][0]
    if total == 0:
        raise IngestError(f"{path.name!r} has a header but no rows; nothing to register.")
    inferred = schema is None
    if schema is None:
        schema = Schema(
            columns={
                name: Column(
                    type=DUCK.get(dtype, "string"),
                    nullable=bool(
                        con.execute(f"SELECT count(*) FROM incoming WHERE {quote_ident(name)} IS NULL").fetchall()[0][0]
                    ),
                )
                for name, dtype in found
            }
        )
    check_schema(con, schema, [n for n, _ in found], path.name)
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
