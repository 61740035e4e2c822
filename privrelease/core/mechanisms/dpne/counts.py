"""DPNE's exact counting, per user partition: the corpus as arrays of token positions, the valid
k-grams at each position as integer ids, and each user's capped, weighted contribution vector summed
into integer grid units. Everything here is exact and noise-free; what leaves a partition is only its
per-level share of the histogram (gram, units), which ``dpne.extract`` merges, noises and thresholds
in its own process.

The distinct (user, gram) pairs are one sort of int64 keys, the cap's keyed choice is ``dpne_cap``'s
(DuckDB's hash, in numpy), the per-gram sums run in DuckDB; the positions are numpy arrays, so building
a level's candidates is a shift of one array against another instead of a join, and a k-gram is one
integer (``Encoding``) whatever its length. The positions come from ``dpne_corpus`` (read and tokenized,
or mapped from its cache: read-only arrays, which nothing here writes into).
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from privrelease.core import parallel
from privrelease.core.mechanisms.dpne import cap as dpne_cap

SEP = " "  # tokens never contain whitespace, so joining with a space is unambiguous
NONE = -1  # in a position array: no token, or no released gram, here


def unit_weights(cap: int, unit: float) -> np.ndarray:
    """w(m) = floor(1 / (sqrt(m) unit)), exactly, for m = 0..cap (index 0 unused): a user's weight in
    grid units, rounded down so that m w(m)^2 unit^2 <= 1."""
    u2 = Fraction(unit) ** 2
    return np.array([0] + [math.isqrt(int(1 / (u2 * m))) for m in range(1, cap + 1)], dtype=np.int64)


WHITESPACE = "\t\n\f\r "  # what the tokenizer splits on: RE2's \\s, exactly (tests/mechanisms/test_dpne.py)


def tokens_sql(tokenizer: str, text: str) -> str:
    """A post's tokens: lower-cased runs of letters and digits ("words"), or the runs of anything but
    ``WHITESPACE`` ("whitespace": split on spaces, after turning the other whitespace characters into
    spaces in the posts that hold any, which is the regular expression split on \\s+ at less cost:
    ``bench/bench_dpne_counting.py``; ``translate`` costs more than the split, so posts without
    tabs, newlines, form feeds or returns skip it). ``text`` is a deterministic SQL expression (a column,
    or a cast of one): it is written out several times."""
    if tokenizer == "words":
        return f"regexp_extract_all(lower({text}), '[\\p{{L}}\\p{{N}}]+')"
    others = [f"chr({ord(c)})" for c in WHITESPACE[:-1]]
    held = " OR ".join(f"contains({text}, {c})" for c in others)
    spaced = f"CASE WHEN {held} THEN translate({text}, {' || '.join(others)}, '{' ' * len(others)}') ELSE {text} END"
    return f"list_filter(string_split({spaced}, ' '), lambda x: x <> '')"


# -- the k-gram ids -------------------------------------------------------------------------------------


class Encoding:
    """The integer id of a valid k-gram (k >= 2), from the public released sets: its first k-1 tokens'
    index in S_(k-1) times ``base``, plus the index of its last k-1 tokens in S_(k-1) (both-side
    pruning; ``base`` = |S_(k-1)|) or of its last token in S_1 (single-side; ``base`` = |S_1|). Each
    set is indexed in released (sorted) order, so every partition computes the same id for a gram
    and the shares add up; the flow turns ids back into n-grams."""

    def __init__(self, pruning: str, words: list[str], previous: list[str]):
        if max(len(words), len(previous)) >= 2**31:
            raise ValueError("more than 2^31 released n-grams of one length: their ids would overflow")
        self.pruning, self.previous = pruning, np.asarray(previous, dtype=object)
        ends = previous if pruning == "both" else words
        self.base = len(ends)
        self._index = {g: i for i, g in enumerate(previous)}
        self._ends = {g: i for i, g in enumerate(ends)}
        self._last = np.asarray([g.rpartition(SEP)[2] for g in ends], dtype=object)

    def ids(self, grams: list[str]) -> np.ndarray:
        """The ids of valid k-grams (n-grams one token longer than ``previous``)."""
        out = np.empty(len(grams), dtype=np.int64)
        for n, gram in enumerate(grams):
            head = gram.rpartition(SEP)[0]
            end = gram.partition(SEP)[2] if self.pruning == "both" else gram.rpartition(SEP)[2]
            out[n] = self._index[head] * self.base + self._ends[end]
        return out

    def grams(self, ids: np.ndarray) -> np.ndarray:
        """The k-grams of ``ids`` (the inverse of ``ids``)."""
        ids = np.asarray(ids, dtype=np.int64)
        return self.previous[ids // self.base] + SEP + self._last[ids % self.base]

    def named(self, hist: pd.DataFrame) -> pd.DataFrame:
        """A histogram (gram, units) of ids as one of n-grams, in n-gram order (as level 1's)."""
        named = pd.DataFrame({"gram": self.grams(hist["gram"].to_numpy()), "units": hist["units"].to_numpy()})
        return named.sort_values("gram", kind="stable", ignore_index=True)


# -- a user's capped contribution, and the histogram ---------------------------------------------------------


def contributions(
    con: duckdb.DuckDBPyConnection,
    users: np.ndarray,
    grams: np.ndarray,
    user_hash: np.ndarray,
    cap: int,
    key: int,
    names: pa.Array | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each user's contribution vector as (user, gram, m) arrays, from the occurrences ``users[i]``
    holds ``grams[i]``: the user's distinct grams, at most ``cap`` of them, m = how many were kept (so
    each is weighted w(m)). A user over the cap keeps the ``cap`` grams ranked first by a hash keyed
    with ``key`` of (the user, the gram), ties broken by the gram: a choice that depends only on the
    user's own grams. ``user_hash[u]`` is user u's hash; a gram is ranked by its id, or by its name
    ``names[id]`` where ids are this partition's own (level 1's tokens), so that every partition
    ranks alike (``dpne_cap``)."""
    u, g = distinct_pairs(users, grams)
    offset = u - u.min() if len(u) else u  # a group's users are a range of indices: count over that range only
    m = np.bincount(offset)[offset]
    over = m > cap
    if not over.any():
        return u, g, m
    ranked_u, ranked_g = u[over], g[over]
    if names is None:
        item, ties = dpne_cap.murmur(ranked_g), ranked_g
    else:  # level 1: ranked by the name, each distinct one hashed once
        ids, at = np.unique(ranked_g, return_inverse=True)
        named = names.take(pa.array(ids))
        item, ties = dpne_cap.text_hash(con, named)[at], named.take(pa.array(at))
    kept = dpne_cap.smallest(ranked_u, dpne_cap.keyed(user_hash[ranked_u], item, key), ties, cap)
    return (
        np.concatenate([u[~over], ranked_u[kept]]),
        np.concatenate([g[~over], ranked_g[kept]]),
        np.concatenate([m[~over], np.full(int(kept.sum()), cap)]),
    )


def distinct_pairs(users: np.ndarray, grams: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (user, gram) pairs of the occurrences, sorted by user then gram: one int64 per pair
    (the user's offset from the first user in the high bits, the gram's offset in the ``bits`` low ones;
    where that would pass 63 bits, the grams' codes stand for them), sorted and its repeats dropped, split
    by shifts and masks (not divisions). The sort is a stable one (timsort) since occurrences mostly come
    user after user, so the keys come in ascending runs: a sixth of the CPU of DuckDB's SELECT DISTINCT
    there (``bench/RESULTS.md``). Arrays are built in place: this runs on every level's occurrences."""
    if not len(users):
        return users.astype(np.int64), grams.astype(np.int64)
    u_lo, g_lo = int(users.min()), int(grams.min())
    g = grams.astype(np.int64)
    g -= g_lo
    bits, names = (int(grams.max()) - g_lo).bit_length(), None
    # ids of long grams would pass 63 bits: number the distinct ones (no more than the occurrences)
    if (int(users.max()) - u_lo + 1) << bits >= 2**63:
        g, names = pd.factorize(g, sort=True)
        bits = (len(names) - 1).bit_length()
    key = users.astype(np.int64)
    key -= u_lo
    key <<= bits
    key |= g
    key.sort(kind="stable")
    first = np.empty(len(key), bool)
    first[0] = True
    np.not_equal(key[1:], key[:-1], out=first[1:])
    key = key[first]
    g = key & ((1 << bits) - 1)
    key >>= bits
    key += u_lo
    return key, (g if names is None else np.asarray(names)[g]) + g_lo


CHUNK = 1 << 21  # occurrences counted per DuckDB pass at most: its hash tables stay small (faster), and memory bounded
SHARE = 1 << 18  # a level of fewer occurrences is one group: splitting it would cost more than it saves


def histogram(
    con: duckdb.DuckDBPyConnection,
    users: np.ndarray,
    grams: np.ndarray,
    user_hash: np.ndarray,
    cap: int,
    key: int,
    unit: float,
    names: pa.Array | None = None,
) -> pd.DataFrame:
    """The weighted-Gaussian-policy histogram (gram, units) of the occurrences: each gram's users'
    weights w(m) (``contributions``) summed in grid units, sorted by gram (its name, with ``names``).
    Users are counted in groups of whole users (``_user_groups``), on one thread per core (numpy's
    sorts and DuckDB release the GIL; each thread its own cursor of ``con``), each group's sums added
    like a partition's. On a partition, its share: exact integers, so ``merge`` adds the shares to the
    histogram of all users, however many partitions and groups there were."""
    weights = unit_weights(cap, unit)

    def share(held: slice | np.ndarray) -> pd.DataFrame:
        cursor = con.cursor()
        try:
            _, g, m = contributions(cursor, users[held], grams[held], user_hash, cap, key, names)
            cursor.register("entries", pd.DataFrame({"g": g, "w": weights[m]}, copy=False))
            return cursor.execute("SELECT g AS gram, CAST(sum(w) AS BIGINT) AS units FROM entries GROUP BY g ORDER BY g").df()
        finally:
            cursor.close()

    ways = threads()
    groups = _user_groups(users, ways)
    if len(groups) == 1:
        shares = [share(groups[0])]
    else:
        with ThreadPoolExecutor(min(ways, len(groups)), thread_name_prefix="privrelease-dpne") as pool:
            shares = list(pool.map(share, groups))
    hist = merge(shares)
    if names is not None:
        hist["gram"] = names.take(pa.array(hist["gram"].to_numpy())).to_pandas()
        hist = hist.sort_values("gram", ignore_index=True)
    return hist


def threads() -> int:
    """The threads a partition counts on: a Dask worker's own (``--nthreads``), else this process's cores."""
    return parallel.worker_threads() or len(os.sched_getaffinity(0))


def _user_groups(users: np.ndarray, ways: int = 1) -> list[slice | np.ndarray]:
    """The occurrences in groups of whole users, of about ``len(users) / ways`` occurrences each (``ways`` threads
    count them), never more than ``CHUNK`` and never fewer than ``SHARE`` (users taken in index order, so each
    group's users are a range of indices): slices where users come in order, else one stable radix sort of the
    group numbers, never a pass over all occurrences per group. One group of all when they fit."""
    size = min(CHUNK, max(SHARE, -(-len(users) // max(ways, 1))))
    if len(users) <= size:
        return [slice(None)]
    if (users[1:] >= users[:-1]).all():  # users in the order of their posts (one post each, say): slices
        cuts = np.searchsorted(users, users[size::size], side="left")  # back to the first occurrence of the user there
        bounds = np.unique(np.concatenate([[0], cuts, [len(users)]]))
        return [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    counts = np.bincount(users)
    group = ((np.cumsum(counts) - counts) // size)[users]  # a user's group: where its first occurrence falls
    bounds = np.concatenate([[0], np.cumsum(np.bincount(group))])
    order = np.argsort(group.astype(np.int16 if group.max() < 2**15 else np.int32), kind="stable")  # radix for 16 bits
    return [order[a:b] for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def merge(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The histogram (gram, units), sorted by gram, from partitions' ``histogram``: a gram held in several
    partitions gets the sum of its shares (exact: int64 sums); one partition's share is already the histogram."""
    if len(parts) == 1:
        return parts[0]
    grams = np.concatenate([p["gram"].to_numpy() for p in parts])
    units = np.concatenate([p["units"].to_numpy(np.int64) for p in parts])
    if np.abs(units).sum(dtype=np.float64) >= 2.0**62:  # int64 sums would wrap (DuckDB's own sums raise)
        raise OverflowError("a histogram's weights in grid units overflow 64-bit integers")
    order = np.argsort(grams, kind="stable")
    grams, units = grams[order], units[order]
    starts = np.flatnonzero(np.concatenate([[True], grams[1:] != grams[:-1]])) if len(grams) else np.empty(0, np.int64)
    return pd.DataFrame({"gram": grams[starts], "units": np.add.reduceat(units, starts) if len(starts) else units})


def index_of(ids: np.ndarray, grams: np.ndarray) -> np.ndarray:
    """Each of ``grams``' place in ``ids`` (distinct, non-negative), NONE where it is not there: a lookup table over
    the ids' range where that range is no larger than the number of grams (or 65,536), else a hash lookup."""
    if not len(ids) or not len(grams):
        return np.full(len(grams), NONE, np.int32)
    top = int(max(ids.max(), grams.max())) + 1
    if top > max(len(grams), 1 << 16):
        return pd.Index(ids).get_indexer(grams).astype(np.int32)
    table = np.full(top, NONE, np.int32)
    table[ids] = np.arange(len(ids), dtype=np.int32)
    return table[grams]


# -- one user partition --------------------------------------------------------------------------------------


class Partition:
    """One user partition's corpus, held where it was opened (a Dask worker, or the flow's process)
    across the levels. Positions: every token of every post, the posts one after another with one
    empty position after each, so no k-gram crosses a post. Per position: ``users`` (the user's index
    in this partition, NONE between posts; ``user_ids[u]`` is user u's id and ``user_hash[u]`` its hash),
    and after level k's marking ``hits`` (the index in S_k of the released k-gram that starts there, or
    NONE)."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        user_ids: np.ndarray,
        user_hash: np.ndarray,
        users: np.ndarray,
        tokens: np.ndarray,
        vocabulary: pa.Array,
    ):
        self.con, self.user_ids, self.user_hash, self.users, self.k = con, user_ids, user_hash, users, 1
        self.tokens, self.vocabulary = tokens, vocabulary  # level 1 only: each position's token id, and the tokens
        self.hits = self.words = np.empty(0, np.int32)
        self.pos, self.grams = np.empty(0, np.int64), np.empty(0, np.int64)  # the last level's candidates

    def level(
        self, k: int, released: list[str] | np.ndarray, base: int, pruning: str, cap: int, key: int, unit: float
    ) -> pd.DataFrame:
        """Level k: mark where the released (k-1)-grams start (``released``: S_1's words at level 2,
        S_(k-1)'s ids after, each set in released order), find the valid k-grams with ids of ``base``
        (``Encoding``), and return this partition's share of their ``histogram``."""
        if k > 1:
            self.advance(k, released, base, pruning)
        users, grams, names = self.occurrences()
        return histogram(self.con, users, grams, self.user_hash, cap, key, unit, names)

    def advance(self, k: int, released: list[str] | np.ndarray, base: int, pruning: str) -> None:
        """From level k-1 to level k: mark the released (k-1)-grams, then find the valid k-grams."""
        self._mark(k - 1, released)
        self.k = k
        if pruning == "both":
            self.words = np.empty(0, np.int32)  # only single-side pruning reads S_1's positions after level 2
        shift, ends = (1, self.hits) if pruning == "both" else (k - 1, self.words)
        valid = self.hits[:-shift] != NONE
        valid &= ends[shift:] != NONE
        self.pos = np.flatnonzero(valid)
        self.grams = self.hits[self.pos].astype(np.int64)
        self.grams *= base
        self.grams += ends[shift:][self.pos]

    def occurrences(self) -> tuple[np.ndarray, np.ndarray, pa.Array | None]:
        """(user, gram) at every position where the current level has a candidate, and the grams' names
        where their ids are this partition's own (level 1: token ids, named by ``vocabulary``)."""
        if self.k == 1:
            held = self.tokens != NONE
            return self.users[held], self.tokens[held], self.vocabulary
        return self.users[self.pos], self.grams, None

    def _mark(self, k: int, released: list[str] | np.ndarray) -> None:
        if k == 1:
            index = pc.index_in(self.vocabulary, value_set=pa.array(released, pa.string())).fill_null(NONE)
            lookup = np.append(index.to_numpy().astype(np.int32), np.int32(NONE))  # a NONE token maps to NONE
            self.hits = self.words = lookup[self.tokens]
            self.tokens, self.vocabulary = np.empty(0, np.int32), pa.array([], pa.string())  # level 1 is done
            return
        self.hits = np.full(len(self.users), NONE, np.int32)
        self.hits[self.pos] = index_of(np.asarray(released, dtype=np.int64), self.grams)

    def close(self) -> None:
        self.con.close()
