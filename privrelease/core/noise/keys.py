"""Record keys for the cell key method: each record's key, uniform on the integers [0, 2^32), the same for the same
record at every release and in every registration of it.

A dataset holds one secret of 32 bytes from the operating system's entropy (``secret``). A record's key is keyed
BLAKE2b (a pseudorandom function under that secret) of what the record holds, its values in every registered column
written out as text, and of how many identical records came before it in the table (``record_keys``). So
the keys are as good as uniform and independent to whoever lacks the secret, and the same records get the same keys
whatever order they are registered in: a cell is perturbed alike in every table of every registration of the same
records, and averaging tables does not wear its noise down. (Keys by the record's place, as they were, changed
whenever a refresh reordered the rows, and two tables of the same cells then gave two draws of its noise; keys of
the policy's releasable columns only changed every key when the steward made a column releasable.) A record whose
values change, in any column, gets a new key: its cells a second draw. A test
run's secret comes from its seed (test mode only, as every fixed seed).

Sums by the cell key method take a second key per contributor and column (``factor_keys``), uniform on [0, 1),
from the same secret under another BLAKE2b personalisation, so it is independent of the record keys that perturb
counts: of the summed column's name and the contributor's id (the policy's cluster: a person, household or
enterprise id), so a contributor keeps its key whatever its records hold, and a table after a refresh shows its
contribution moved by the same factor. (Keys of a record's value and place among that value's records, as they
were, moved whenever records of the same value changed or came and went.)
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pandas as pd

from privrelease.core.noise import check_seed

BYTES = 32
KEY_BITS = 32  # a key is an integer below 2^KEY_BITS; a cell's key is its records' keys summed modulo 2^KEY_BITS
FIELD, PLACE = "\x1f", "\x1e"  # between a record's values, and before its place among identical records
FACTOR = b"privrelease-sum"  # BLAKE2b's personalisation of factor keys: independent of the record keys
FACTOR_BITS = 53  # a factor key is an integer below 2^53 over 2^53: every float in [0, 1) it can be is exact


def secret(test_seed: int | None = None) -> bytes:
    """A dataset's secret: 32 bytes of OS entropy, or, in test mode with a seed only, from the seed."""
    if test_seed is None:
        return os.urandom(BYTES)
    check_seed(test_seed)
    return np.random.Generator(np.random.PCG64(test_seed)).bytes(BYTES)


def record_keys(key: bytes, rows: pd.DataFrame) -> np.ndarray:
    """Each row's key under the dataset's secret ``key``, as int64 in [0, 2^32): BLAKE2b keyed by the secret, of
    the row's values as text (a missing value as NUL) and of its place among identical rows, in the
    columns of ``rows`` sorted by name (a release gives every registered column)."""
    if len(key) != BYTES:
        raise ValueError(f"a record-key secret is {BYTES} bytes")
    text = pd.Series("", index=rows.index, dtype="string")
    for i, c in enumerate(sorted(rows.columns)):
        values = rows[c].astype("string").fillna("\x00")
        text = values if i == 0 else text.str.cat(values, sep=FIELD)
    written = text.str.cat(text.groupby(text, sort=False).cumcount().astype("string"), sep=PLACE)
    digests = (hashlib.blake2b(s.encode(), key=key, digest_size=4).digest() for s in written)
    return np.fromiter((int.from_bytes(d, "little") for d in digests), dtype=np.int64, count=len(written))


def factor_keys(key: bytes, ids: pd.Series, column: str) -> np.ndarray:
    """Each row's factor key for sums of ``column``, in [0, 1), under the dataset's secret ``key``: keyed BLAKE2b
    (personalised apart from the record keys) of the column's name and the row's contributor id (its cluster's), so
    every record of a contributor has one key, another column's sums another. An integer is written as one, whatever
    its size, and an integral float up to 2^53 as that integer, so a refresh that reads the ids as floats changes no
    key (a float above 2^53 is written as a float: ids that large are registered as integers or text). Every row has an id (the policy requires
    its cluster column not nullable)."""
    if len(key) != BYTES:
        raise ValueError(f"a record-key secret is {BYTES} bytes")
    if ids.isna().any():
        raise ValueError("a factor key needs every row's contributor id")
    if pd.api.types.is_float_dtype(ids):  # integral floats as integers, exactly: only where a float holds one exactly
        exact = ids.notna() & (ids % 1 == 0) & (ids.abs() <= 2**53)
        text = ids.astype("string").astype(object)
        text[exact.to_numpy()] = [str(int(v)) for v in ids[exact]]
        ids = pd.Series(text, index=ids.index, dtype="string")
    written = (column + FIELD + ids.astype("string")).to_numpy(dtype=object)
    digests = (hashlib.blake2b(s.encode(), key=key, digest_size=8, person=FACTOR).digest() for s in written)
    ints = np.fromiter((int.from_bytes(d, "little") >> (64 - FACTOR_BITS) for d in digests), dtype=np.int64, count=len(written))
    return ints / float(1 << FACTOR_BITS)
