"""The canonical digest of a parsed table (one content, one id, one budget), and its identifier-like columns.

A registration is refused when its parsed content is already registered under another id. Bytes
are not content: a blank line appended, the rows reordered, the columns reordered or another file
format give other bytes for the same table. The digest is taken after parsing and casting to the
registered types: over the column names and types (sorted by name) and the *multiset* of rows
(each row hashed, the row hashes sorted), so it depends neither on row nor on column order. It is
kept privately in the store, like the snapshot's digest, and never published.

It does not catch near-duplicates: one row added, removed or edited, a column renamed or dropped, a
value rounded or recoded, a type declared differently. Those are different tables to this check,
and their releases spend two budgets on nearly one dataset; the steward must keep one id per
underlying data set (docs/guides/steward.md).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

import numpy as np

from privrelease.core.db import quote_ident

if TYPE_CHECKING:  # pandas where a frame is read, not at import: the gate imports this and reads none
    import pandas as pd


def digest(frame: pd.DataFrame, types: dict[str, str]) -> str:
    """SHA-256 over sorted (name, type) and the sorted 64-bit hashes of the rows (columns by name)."""
    import pandas as pd  # here: the gate imports this module and never reads a frame

    names = sorted(frame.columns)
    rows = pd.util.hash_pandas_object(frame[names], index=False).to_numpy(dtype=np.uint64)
    h = hashlib.sha256(json.dumps([[n, types[n]] for n in names]).encode())
    h.update(np.sort(rows).astype("<u8").tobytes())
    return "content:" + h.hexdigest()


def identifier_like(con, table: str, columns: list[str]) -> list[str]:
    """Columns of ``table`` whose every present value is distinct, present in at least half the rows (a few
    missing values do not hide an identifier)."""
    counts = con.execute(
        "SELECT count(*), "
        + ", ".join(f"count(DISTINCT {quote_ident(c)}), count({quote_ident(c)})" for c in columns)
        + f" FROM {table}"
    ).fetchall()[0]
    return [
        c
        for c, n, present in zip(columns, counts[1::2], counts[2::2])
        if present > 1 and n == present and 2 * present >= counts[0]
    ]
