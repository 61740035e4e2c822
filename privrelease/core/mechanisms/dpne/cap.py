"""The per-user cap's keyed choice (``dpne_counts.contributions``): a user holding more than ``cap`` distinct
grams at a level keeps the ``cap`` smallest by (DuckDB's ``hash(h, x, key)``, x), h the user's hash, x the gram
(its id, or at level 1 its name, so that every partition ranks alike) and key the release's secret 64-bit key.
A choice that depends only on the user's own grams keeps each user's l2 bound; the key makes it unpredictable.

DuckDB's hash is computed here in numpy (its 64-bit integer hash, the murmur64 finalizer, and its CombineHash),
a name's hash is asked of DuckDB once per distinct name, and the choice is one sort of 64-bit keys (the user's
number in the high bits, the hash's high bits below): the same choice as DuckDB's ``min_by`` top-n over the
(hash, x) pairs at a quarter of its cost (``bench/RESULTS.md``); ``tests/mechanisms/test_dpne.py`` checks the hash against
DuckDB's own and the choice against a Python oracle, including ties of the hash's high bits.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

MIX = np.uint64(0xD6E8FEB86659FD93)  # DuckDB's murmur64 multiplier
HALF = np.uint64(32)


def murmur(values: np.ndarray) -> np.ndarray:
    """DuckDB's ``hash`` of 64-bit integers (BIGINT and UBIGINT alike: the same 64 bits), as uint64."""
    x = values.astype(np.uint64)  # a copy; a negative id's two's complement, as DuckDB hashes it
    x ^= x >> HALF
    x *= MIX
    x ^= x >> HALF
    x *= MIX
    x ^= x >> HALF
    return x


def combine(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """DuckDB's hash of two values from their hashes (its CombineHash): the left one mixed, then xor the right."""
    out = left ^ (left >> HALF)
    out *= MIX
    out ^= right
    return out


def keyed(user_hash: np.ndarray, item_hash: np.ndarray, key: int) -> np.ndarray:
    """DuckDB's ``hash(h, x, key::UBIGINT)`` per row, from h (``user_hash``, UBIGINT) and x's own hash."""
    return combine(combine(murmur(user_hash), item_hash), murmur(np.array([key], np.uint64)))


def text_hash(con: duckdb.DuckDBPyConnection, names: pa.Array) -> np.ndarray:
    """DuckDB's ``hash`` of each string of ``names``, in their order (asked of DuckDB: its string hash)."""
    con.register("names", pa.table({"i": np.arange(len(names)), "x": names}))
    try:
        found = con.execute("SELECT i, hash(x) AS h FROM names").fetchnumpy()
    finally:
        con.unregister("names")
    out = np.empty(len(names), np.uint64)
    out[found["i"]] = found["h"]
    return out


def smallest(users: np.ndarray, ranks: np.ndarray, ties: np.ndarray | pa.Array, cap: int) -> np.ndarray:
    """Which rows are kept: for each user (``users`` sorted, each user holding more than ``cap`` rows) the ``cap``
    rows smallest by (``ranks``, ``ties``). One sort of keys holding the user's number in the high bits and the
    rank's high bits below; a user's rows below its cap-th key are kept, and among the rows equal to that key the
    smallest by their full (rank, tie) (one row, unless the high bits of two ranks tie: then ranked in Python)."""
    first = np.empty(len(users), bool)
    first[:1] = True
    np.not_equal(users[1:], users[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    group = np.cumsum(first) - 1
    bits = (len(starts) - 1).bit_length()
    keys = ranks >> np.uint64(bits)
    if bits:
        keys |= group.astype(np.uint64) << np.uint64(64 - bits)
    cut = np.sort(keys)[starts + cap - 1][group]  # each row's user's cap-th smallest key
    keep = keys < cut
    at = keys == cut
    need = cap - np.bincount(group[keep], minlength=len(starts))
    simple = np.bincount(group[at], minlength=len(starts)) == need
    keep |= at & simple[group]
    for g in np.flatnonzero(~simple):  # the high bits of two ranks tie at a user's cap-th key
        rows = np.flatnonzero(at & (group == g))
        tie = ties.take(pa.array(rows)).to_pylist() if isinstance(ties, pa.Array) else ties[rows].tolist()
        ranked = sorted(zip(ranks[rows].tolist(), tie, rows.tolist()))
        keep[[r for _, _, r in ranked[: need[g]]]] = True
    return keep
