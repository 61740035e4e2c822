"""The per-user cap's keyed choice (``privrelease.core.mechanisms.dpne.cap``): DuckDB's ``hash(h, x, key)`` computed in numpy is
DuckDB's own, bit for bit, for integer grams and for names; the choice of each user's ``cap`` smallest by (hash,
gram) is a Python oracle's, also where the high bits of the hashes tie (``tests/mechanisms/test_dpne.py`` checks
``contributions`` end to end against DuckDB's hash)."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from privrelease.core.mechanisms.dpne import cap as dpne_cap

EDGES = [0, 1, -1, 2**31, -(2**31), 2**62 + 12345, 2**63 - 1, -(2**63)]


def test_the_hash_of_integer_grams_is_duckdbs():
    rng = np.random.default_rng(3)
    grams = np.concatenate([np.array(EDGES, np.int64), rng.integers(-(2**63), 2**63 - 1, 50_000, dtype=np.int64)])
    user_hash = np.concatenate([np.array([0, 2**64 - 1] * 4, np.uint64), rng.integers(0, 2**64 - 1, 50_000, np.uint64)])
    for key in (0, 1, 2**63 - 1, int(rng.integers(0, 2**63))):
        con = duckdb.connect()
        con.register("t", pa.table({"h": user_hash, "x": grams}))
        duck = con.execute("SELECT hash(h, x, $key::UBIGINT) AS r FROM t", {"key": key}).fetchnumpy()["r"]
        assert (dpne_cap.keyed(user_hash, dpne_cap.murmur(grams), key) == duck).all()
    assert (dpne_cap.murmur(grams) != grams.astype(np.uint64)).sum() > 50_000  # a hash, not the ids themselves


def test_the_hash_of_names_is_duckdbs():
    names = pa.array(["", "a", "the", "é", "日本語", "a b", "x" * 300, "z\u3000"] * 3 + [f"w{i}" for i in range(5000)])
    user_hash = np.random.default_rng(4).integers(0, 2**64 - 1, len(names), np.uint64)
    con = duckdb.connect()
    con.register("t", pa.table({"h": user_hash, "x": names}))
    duck = con.execute("SELECT hash(h, x, 987654321::UBIGINT) AS r FROM t").fetchnumpy()["r"]
    con.execute("SET threads = 2")
    assert (dpne_cap.keyed(user_hash, dpne_cap.text_hash(con, names), 987654321) == duck).all()


def _oracle(users: np.ndarray, ranks: np.ndarray, ties: list, cap: int) -> set[int]:
    held: dict[int, list] = {}
    for row, (user, rank, tie) in enumerate(zip(users.tolist(), ranks.tolist(), ties)):
        held.setdefault(user, []).append((rank, tie, row))
    return {row for rows in held.values() for _, _, row in sorted(rows)[:cap]}


@pytest.mark.parametrize("named", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_each_user_keeps_the_cap_smallest_by_hash_then_gram(named, seed):
    """Random hashes, and hashes built to tie: several users (so the key's top bits number them and the hashes'
    low bits are cut off) whose hashes differ only in those low bits, or not at all (then the gram decides)."""
    rng = np.random.default_rng(seed)
    cap, counts = int(rng.integers(1, 6)), rng.integers(7, 15, 9)
    users = np.repeat(np.arange(len(counts)) * 3 + 100, counts)
    ranks = rng.integers(0, 2**64 - 1, len(users), np.uint64)
    if seed % 2:  # ties: a few high parts, low bits 0-15 (a key keeps 64 - 4 bits of the hash for 9 users)
        ranks = (rng.integers(0, 3, len(users)).astype(np.uint64) << np.uint64(40)) | rng.integers(0, 16, len(users)).astype(
            np.uint64
        )
    grams = rng.permutation(len(users)) * 7 - 50
    ties = pa.array([f"g{g:+05d}é" for g in grams]) if named else grams
    kept = np.flatnonzero(dpne_cap.smallest(users, ranks, ties, cap))
    expected = _oracle(users, ranks, ties.to_pylist() if named else grams.tolist(), cap)
    assert set(kept.tolist()) == expected and len(expected) == cap * len(counts)
    if seed % 2:  # the case is one a choice by the hash's high bits alone (in row order) gets wrong
        bits = (len(counts) - 1).bit_length()
        coarse = _oracle(users, ranks >> np.uint64(bits), list(range(len(users))), cap)
        assert coarse != expected
