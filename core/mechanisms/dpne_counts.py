"""DPNE's exact counting, in DuckDB, per user partition: the corpus as token positions, the valid
k-grams at each position, and each user's capped, weighted contribution vector summed into integer
grid units. Everything here is exact and noise-free; what leaves a partition is only its per-level
share of the histogram (gram, units), which ``dpne.extract`` merges, noises and thresholds in its
own process."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pandas as pd

from core import parallel
from core.db import quote_ident, scratch

if TYPE_CHECKING:
    from core.mechanisms.dpne import Params

SEP = " "  # tokens never contain whitespace, so joining with a space is unambiguous


def unit_weights(cap: int, unit: float) -> np.ndarray:
    """w(m) = floor(1 / (sqrt(m) unit)), exactly, for m = 0..cap (index 0 unused): a user's weight in
    grid units, rounded down so that m w(m)^2 unit^2 <= 1."""
    u2 = Fraction(unit) ** 2
    return np.array([0] + [math.isqrt(int(1 / (u2 * m))) for m in range(1, cap + 1)], dtype=np.int64)


def tokens_sql(tokenizer: str, text: str) -> str:
    if tokenizer == "words":
        return f"regexp_extract_all(lower({text}), '[\\p{{L}}\\p{{N}}]+')"
    return f"list_filter(string_split_regex({text}, '\\s+'), lambda x: x <> '')"


def corpus(con: duckdb.DuckDBPyConnection, source: pd.DataFrame | str, params: Params, where: str = "TRUE") -> None:
    """Table ``tokens(uid, post, pos, token)``: one row per token position of every post (of the rows
    ``where`` selects), from a frame or a Parquet file read in place.

    Positions, not per-post lists, keep memory proportional to the text even for a 10 MB post.
    """
    if isinstance(source, str):
        rows = "read_parquet('" + source.replace("'", "''") + "')"
    else:
        con.register("corpus_input", source)
        rows = "corpus_input"
    user, text = quote_ident(params.user_column), quote_ident(params.text_column)
    con.execute(
        f"""
        CREATE OR REPLACE TABLE tokens AS
        WITH posts AS (
            SELECT {user} AS uid, row_number() OVER () AS post,
                   {tokens_sql(params.tokenizer, f"CAST({text} AS VARCHAR)")} AS toks
            FROM {rows} WHERE {where}
        )
        SELECT uid, post, unnest(generate_series(1, len(toks))) AS pos, unnest(toks) AS token FROM posts
        """
    )
    if not isinstance(source, str):
        con.unregister("corpus_input")


def positions(con: duckdb.DuckDBPyConnection, k: int, pruning: str) -> None:
    """Table ``cand_k(uid, at, gram, last)``: the valid k-grams at every position, and their last
    token (so the next level extends a gram without joining the whole token table again).

    ``at = post * stride + pos`` with a stride longer than any post: one integer key per position,
    and at + 1 never lands in the next post. Level 1: every token. Both-side: the (k-1)-grams at
    ``at`` and ``at + 1`` were released (``hits``). Single-side: the (k-1)-gram at ``at`` and the
    word at ``at + k - 1`` were released.
    """
    if k == 1:  # a view: level 1 is the tokens themselves, no copy of the corpus
        stride = con.execute("SELECT coalesce(max(pos), 0) + 1 FROM tokens").fetchall()[0][0]
        con.execute(f"CREATE OR REPLACE VIEW cand_1 AS SELECT uid, post * {stride} + pos AS at, token AS gram, "
                    "token AS last FROM tokens")  # fmt: skip
        return
    if pruning == "both":
        sql = (
            f"SELECT a.uid, a.at, a.gram || '{SEP}' || b.last AS gram, b.last FROM hits_{k - 1} a "
            f"JOIN hits_{k - 1} b ON b.at = a.at + 1"
        )
    else:
        sql = (
            f"SELECT a.uid, a.at, a.gram || '{SEP}' || b.gram AS gram, b.gram AS last FROM hits_{k - 1} a "
            f"JOIN hits_1 b ON b.at = a.at + {k - 1}"
        )
    con.execute(f"CREATE OR REPLACE TABLE cand_{k} AS {sql}")


def mark(con: duckdb.DuckDBPyConnection, k: int) -> None:
    """Table ``hits_k``: the positions of ``cand_k`` whose k-gram was released."""
    con.execute(
        f"CREATE OR REPLACE TABLE hits_{k} AS SELECT * FROM cand_{k} WHERE gram IN (SELECT gram FROM released WHERE n = {k})"
    )


def entries_sql(grams_sql: str) -> str:
    """Each user's contribution vector as rows (uid, gram, m): the user's distinct grams, at most
    ``$cap`` of them (chosen by a hash keyed with ``$key``), m of them kept, each weighted w(m).
    Only users over the cap are ranked: the others keep every gram, so most rows skip the sort."""
    return f"""
        WITH g AS (SELECT DISTINCT uid, gram FROM ({grams_sql})),
        sized AS (SELECT uid, gram, count(*) OVER (PARTITION BY uid) AS total FROM g),
        ranked AS (
            SELECT uid, gram,
                   row_number() OVER (PARTITION BY uid ORDER BY hash(uid, gram, $key::UBIGINT), gram) AS rk
            FROM sized WHERE total > $cap
        )
        SELECT uid, gram, total AS m FROM sized WHERE total <= $cap
        UNION ALL
        SELECT uid, gram, $cap AS m FROM ranked WHERE rk <= $cap
    """


def histogram(con: duckdb.DuckDBPyConnection, grams_sql: str, cap: int, key: int, unit: float) -> pd.DataFrame:
    """The weighted-Gaussian-policy histogram (gram, units) of the users' grams that ``grams_sql``
    selects: each gram's users' weights w(m) summed in grid units, sorted by gram. On a partition, its
    share: exact integers, so ``merge`` adds the shares to the histogram of all users, however many
    partitions there were."""
    return con.execute(
        f"SELECT gram, CAST(sum(($w::BIGINT[])[m + 1]) AS BIGINT) AS units FROM ({entries_sql(grams_sql)}) "
        "GROUP BY gram ORDER BY gram",
        {"key": key, "cap": cap, "w": unit_weights(cap, unit).tolist()},
    ).df()


def merge(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The histogram (gram, units), sorted by gram, from partitions' ``histogram``: a gram held in several
    partitions gets the sum of its shares; one partition's share is already the histogram."""
    if len(parts) == 1:
        return parts[0]
    merged = duckdb.connect()
    try:
        merged.register("parts", pd.concat(parts, ignore_index=True))
        return merged.execute("SELECT gram, CAST(sum(units) AS BIGINT) AS units FROM parts GROUP BY gram ORDER BY gram").df()
    finally:
        merged.close()


def open_partition(spec: tuple[pd.DataFrame | str, Params, int, int]) -> duckdb.DuckDBPyConnection:
    """One user partition's ``tokens`` in a scratch database of its own: the users with
    hash(user) % parts = part (all of a user's posts, so the per-user cap applies within it), read
    from the frame or, on a Dask worker, from the stored snapshot itself."""
    source, params, parts, part = spec
    con = scratch()
    threads = parallel.worker_threads()
    if threads:  # a worker started with --nthreads 1 keeps DuckDB to one core too
        con.execute(f"SET threads = {threads}")
    user = quote_ident(params.user_column)
    corpus(con, source, params, f"hash({user}) % {parts} = {part}" if parts > 1 else "TRUE")
    con.execute("CREATE TABLE released (gram VARCHAR, n INTEGER)")
    return con


def partition_level(con: duckdb.DuckDBPyConnection, k: int, previous: list[str], pruning: str, cap: int,
                    key: int, unit: float) -> pd.DataFrame:  # fmt: skip
    """Level k on one partition: mark where the released (k-1)-grams ``previous`` occur, build
    ``cand_k``, and return its ``histogram`` (the only thing that leaves the partition)."""
    if k > 1:
        con.append("released", pd.DataFrame({"gram": previous, "n": k - 1}))
        mark(con, k - 1)
        con.execute(f"DROP {'VIEW' if k == 2 else 'TABLE'} cand_{k - 1}")
        if k == 2:
            con.execute("DROP TABLE tokens")  # hits_1 holds what later levels read; the working set shrinks
        if k > 3:
            con.execute(f"DROP TABLE hits_{k - 2}")  # hits_1 stays: single-side pruning reads it
    positions(con, k, pruning)
    return histogram(con, f"SELECT uid, gram FROM cand_{k}", cap, key, unit)
