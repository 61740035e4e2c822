"""An aggregate release's exact, noise-free statistics per key, in DuckDB: the contribution bounding
of the user unit, the clipping to public bounds, and each vector's true values in its grid's units.

Contribution bounding (user unit): each user keeps at most ``max_groups`` of their keys and at most
``max_rows`` of their rows in each, both chosen by a hash keyed with a secret 64-bit key of the
user's own values (the key and row contents, never a row's position), ties broken by those values:
a choice that depends only on the user's own rows, so another user's presence changes nothing of
it, and the key makes it uniform and unpredictable (as DPNE caps a user's n-grams).

Values on a grid: a sum's value is clipped to [L, U] and put on its vector's grid (rounded to the
nearest multiple inside [L, U], so the sensitivity is unchanged); a mean's is centred on (L + U)/2
first; a quantile's is its bin among B equal bins of [L, U] (clipped: below L in the first, above U
in the last).

One pass: the rows are read in DuckDB (from the checked snapshot's Parquet file, or a frame a caller
hands in), bounded, and every vector's true values per key, with every quantile's histogram, come out
of one ``GROUP BY GROUPING SETS`` over them. Under the user unit the bounding first finds, in one hash
aggregate by user, the users whose rows hold more than one key or more than ``max_rows`` rows; every
other user keeps all their rows (what ranking keeps of them: their one key ranks first, all its rows
within the cap), unranked. None found: the rows are aggregated as they are; a few: only theirs are
ranked, the others' kept through an anti join; many (past ``RANK_ALL_ABOVE``): every user's rows are
ranked. Ranking (``ranked_sql``) groups the rows by (user, key), ranks each user's keys in that small
table, and ranks rows only in a (user, key) holding more than ``max_rows`` rows. The kept rows are the
same each way (tests/mechanisms/test_aggregate.py checks them against ``ranked_sql`` over all rows).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from privrelease.core.db import quote_ident, scratch
from privrelease.core.mechanisms.aggregate.budget import Accounting
from privrelease.core.mechanisms.aggregate.params import Params
from privrelease.core.mechanisms.base import Snapshot

RANK_ALL_ABOVE = 100_000  # found users past which every user's rows are ranked: two joins of every row against
# that many users cost more than ranking them all (all 2 M of payroll's users under max_rows 1: +40% CPU)


def bound_sql(con, params: Params, args: dict, rows: str = "") -> str:
    """A SELECT of the rows a run aggregates, from ``input_rows`` (the rows inside the declared domains; ``rows``,
    the WITH clause defining it, when ``con`` has no such table): all of them (record unit), or each user's bounded
    contribution (parameters ``$key``, the run's secret hash key, and ``$d<j>``, the declared domains, in ``args``).
    A user who holds one key and at most ``max_rows`` rows keeps them all, which is what ranking keeps of them
    (their one key ranks first, all its rows within the cap). The others are found first (table ``crowded``, on
    ``con``, at most ``RANK_ALL_ABOVE`` + 1 of them kept): none, every row is kept; more than ``RANK_ALL_ABOVE``,
    every user's rows are ranked (``ranked_sql``); else only theirs are, the rest kept. A user's kept rows depend on that user's rows alone either way."""
    if not params.user_column:
        return "SELECT * FROM input_rows"
    u = quote_ident(params.user_column)
    found = f"SELECT {u} FROM input_rows GROUP BY {u} HAVING count(*) > {params.max_rows} OR {_several_keys(params)}"
    execute(con, f"CREATE OR REPLACE TEMP TABLE crowded AS {rows} {found} LIMIT {RANK_ALL_ABOVE + 1}", args)
    n = con.execute("SELECT count(*) FROM crowded").fetchone()[0]
    if n == 0:
        return "SELECT * FROM input_rows"
    if n > RANK_ALL_ABOVE:
        return ranked_sql(params)
    same = f"r.{u} IS NOT DISTINCT FROM c.{u}"
    return f"""
        WITH crowded_rows AS NOT MATERIALIZED (SELECT r.* FROM input_rows r SEMI JOIN crowded c ON {same})
        SELECT {", ".join("r." + quote_ident(c) for c in params.columns)} FROM input_rows r ANTI JOIN crowded c ON {same}
        UNION ALL ({ranked_sql(params, "crowded_rows")})
    """


def execute(con, sql: str, args: dict):
    """``sql`` run on ``con`` with those of ``args`` it names (DuckDB refuses a parameter a query does not use)."""
    named = {k: v for k, v in args.items() if f"${k}" in sql}
    return con.execute(sql, named or None)


def _several_keys(params: Params) -> str:
    """Whether a group of one user's rows holds more than one key, exactly: the declared columns through their
    values' positions in their domains, as one integer (cheaper to compare than strings; never NULL on rows
    inside the domains, which is all ``input_rows`` holds), another column through its own values, NULL a
    value of its own (the grouping's and the ranking's IS NOT DISTINCT FROM)."""
    declared = [(j, c) for j, c in enumerate(params.group_by) if params.domains and c in params.domains]
    tests, parts, stride = [], [], 1
    for j, c in declared:
        parts.append(f"(list_position($d{j}, {quote_ident(c)}) - 1) * {stride}")
        stride *= len(params.domains[c])
    if parts:
        code = f"CAST({' + '.join(parts)} AS BIGINT)"
        tests.append(f"min({code}) <> max({code})")
    for c in (quote_ident(c) for c in params.group_by if not (params.domains and c in params.domains)):
        tests.append(f"min({c}) IS DISTINCT FROM max({c}) OR count({c}) NOT IN (0, count(*))")
    return " OR ".join(tests)


def ranked_sql(params: Params, rows: str = "input_rows") -> str:
    """Each user's bounded contribution from the relation ``rows`` (parameter ``$key``): the user's (user, key) groups
    ranked by the keyed hash, the first ``max_groups`` kept; a kept group of at most ``max_rows`` rows kept whole,
    a larger one's rows ranked by the keyed hash of their values, the first ``max_rows`` kept."""
    u = quote_ident(params.user_column)
    keys = ", ".join(quote_ident(c) for c in params.group_by)
    on = " AND ".join(f"r.{c} IS NOT DISTINCT FROM k.{c}" for c in map(quote_ident, [params.user_column, *params.group_by]))
    r_cols = ", ".join("r." + quote_ident(c) for c in params.columns)
    r_keys = ", ".join("r." + quote_ident(c) for c in [params.user_column, *params.group_by])
    return f"""
        WITH kept AS (
            SELECT {u}, {keys}, count(*) AS __rows FROM {rows} GROUP BY {u}, {keys}
            QUALIFY row_number() OVER (PARTITION BY {u} ORDER BY hash({u}, {keys}, $key::UBIGINT), {keys}) <= {params.max_groups}
        )
        SELECT {r_cols} FROM {rows} r JOIN kept k ON {on} WHERE k.__rows <= {params.max_rows}
        UNION ALL
        SELECT {r_cols} FROM {rows} r JOIN kept k ON {on} WHERE k.__rows > {params.max_rows}
        QUALIFY row_number() OVER (PARTITION BY {r_keys} ORDER BY hash({r_cols}, $key::UBIGINT), {r_cols}) <= {params.max_rows}
    """


def _on_grid(column: str, low: float, high: float, unit: float, centre: float = 0.0) -> str:
    x = f"(CAST({quote_ident(column)} AS DOUBLE) - {centre!r})"
    lo, hi = math.ceil((low - centre) / unit), math.floor((high - centre) / unit)
    return f"CAST(greatest(least(round({x} / {unit!r}), {hi}), {lo}) AS BIGINT)"


def _step(params: Params, i: int) -> str:
    """Quantile measure i's answer-grid step of a value: floor((x - L) / h), h = (U - L) / steps, clipped to [0, steps);
    NULL for NULL or NaN (no value: left out of the quantile; greatest and least would read it as the upper bound)."""
    m = params.measures[i]
    low, high = m.bounds
    x = f"CAST({quote_ident(m.column)} AS DOUBLE)"
    step = f"CAST(greatest(least(floor(({x} - {low!r}) / {(high - low) / m.grid!r}), {m.grid - 1}), 0) AS BIGINT)"
    return f"CASE WHEN {x} IS NULL OR isnan({x}) THEN NULL ELSE {step} END"


def domain_args(params: Params) -> dict:
    """The query's parameters ``$d<j>``: group_by column j's declared domain (the rows whose key lies outside
    one belong to no released key; ``bound_sql`` compares a user's keys through them)."""
    return {f"d{j}": list(params.domains[c]) for j, c in enumerate(params.group_by) if params.domains and c in params.domains}


def _input(con, rows: pd.DataFrame | Snapshot, params: Params) -> None:
    """``source``: the rows read (the request's columns only)."""
    if isinstance(rows, Snapshot):
        con.read_parquet(rows.path).project(", ".join(map(quote_ident, params.columns))).create_view("source")
    else:
        con.register("source", rows[params.columns])


class Exact:
    """A run's exact statistics on one scratch DuckDB connection, closed on leaving the ``with`` block:
    ``stats`` (one pass over the bounded rows) and, for a quantile, ``steps`` (each key's occupied answer-grid
    steps inside a range). Both run the one bounding query (``bounded``, with each quantile's answer-grid step
    ``__f<i>``), whose rows are fixed by the run's hash key and the ``crowded`` table made once here, so both read the
    same rows."""

    def __init__(self, rows: pd.DataFrame | Snapshot, params: Params, acc: Accounting, key: int):
        self.params, self.acc = params, acc
        self.quantiles = [n.vector.measure for n in acc.noised if n.vector.kind == "histogram"]
        self.con = scratch()
        _input(self.con, rows, params)
        args = domain_args(params)
        where = " AND ".join(f"list_contains($d{j}, {quote_ident(c)})" for j, c in enumerate(params.group_by) if f"d{j}" in args)
        args |= {"key": key} if params.user_column else {}
        rows_in = f"WITH input_rows AS NOT MATERIALIZED (SELECT * FROM source {'WHERE ' + where if where else ''})"
        steps = [f"{_step(params, i)} AS __f{i}" for i in self.quantiles]
        self.bounded = f"{rows_in} SELECT {', '.join(['*', *steps])} FROM ({bound_sql(self.con, params, args, rows_in)})"
        self.args = args

    def __enter__(self) -> Exact:
        return self

    def __exit__(self, *exc) -> None:
        self.con.close()

    def stats(self) -> tuple[pd.DataFrame, dict[int, np.ndarray]]:
        """Per present key: the key columns, ``__n`` (rows), and per vector its true values in grid units
        (``__v<i>`` for measure i's vector); and per quantile measure the (keys x B) histogram. Rows whose key
        lies outside a declared domain are left out (they belong to no released key)."""
        params = self.params
        keys = ", ".join(quote_ident(c) for c in params.group_by)
        select = [keys, "count(*) AS __n"]
        for n in self.acc.noised:
            v, i = n.vector, n.vector.measure
            if v.kind in ("counts", "histogram"):
                continue
            m = params.measures[i]
            if v.kind == "distinct":
                select.append(f"count(DISTINCT {quote_ident(m.column)}) AS __v{i}")
            else:
                low, high = m.bounds
                centre = (low + high) / 2 if v.kind == "centred" else 0.0
                select.append(f"CAST(sum({_on_grid(m.column, low, high, n.unit, centre)}) AS BIGINT) AS __v{i}")
        q = self.quantiles
        bins = [f"__f{i} // {params.measures[i].grid // params.measures[i].bins} AS __b{i}" for i in q]
        sets = ", ".join(f"({keys}{''.join(f', __b{i}' for i in s)})" for s in [[], *([i] for i in q)])
        flags = [f"grouping(__b{i}) AS __g{i}" for i in q]
        out = execute(
            self.con,
            f"""WITH bounded AS ({self.bounded})
                SELECT {", ".join([*select, *(f"__b{i}" for i in q), *flags])}
                FROM (SELECT {", ".join(["*", *bins])} FROM bounded)
                GROUP BY GROUPING SETS ({sets}) ORDER BY {keys}""",
            self.args,
        ).df()
        whole = np.ones(len(out), dtype=bool)
        for i in q:
            whole &= out[f"__g{i}"].to_numpy() == 1
        stats = out[whole].drop(columns=[c for c in out.columns if c.startswith(("__b", "__g"))]).reset_index(drop=True)
        return stats, {i: _histogram(out[out[f"__g{i}"] == 0], params, i, stats) for i in q}

    def steps(self, i: int, keys: pd.DataFrame, low: np.ndarray, high: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per row of ``keys``: quantile measure i's occupied answer-grid steps in [low, high) (sorted) and their rows
        (the rows outside every key's range are dropped before the join: a third less CPU on payroll's 10 M rows)."""
        if not len(keys):
            return []
        cols = [quote_ident(c) for c in self.params.group_by]
        ranges = keys.reset_index(drop=True).assign(__key=np.arange(len(keys)), __lo=low, __hi=high)
        self.con.register("__ranges", ranges)
        on = " AND ".join(f"b.{c} IS NOT DISTINCT FROM r.{c}" for c in cols)
        found = execute(
            self.con,
            f"""WITH bounded AS ({self.bounded})
                SELECT r.__key, b.__f{i} AS f, count(*) AS c FROM bounded b JOIN __ranges r ON {on}
                WHERE b.__f{i} >= r.__lo AND b.__f{i} < r.__hi AND b.__f{i} BETWEEN {int(low.min())} AND {int(high.max())}
                GROUP BY ALL ORDER BY 1, 2""",
            self.args,
        ).fetchnumpy()
        self.con.unregister("__ranges")
        at = np.searchsorted(found["__key"], np.arange(len(keys) + 1))
        f, c = found["f"].astype(np.int64), found["c"].astype(np.int64)
        return [(f[at[k] : at[k + 1]], c[at[k] : at[k + 1]]) for k in range(len(keys))]


def _histogram(counts: pd.DataFrame, params: Params, i: int, stats: pd.DataFrame) -> np.ndarray:
    """The (keys x B) histogram of quantile measure i from its grouping set's rows (the key's rows per bin)."""
    counts = counts[counts[f"__b{i}"].notna()]  # the rows of no value (NULL, NaN) are in no bin
    index = pd.MultiIndex.from_frame(stats[params.group_by])
    rows = index.get_indexer(pd.MultiIndex.from_frame(counts[params.group_by]))
    out = np.zeros((len(stats), params.measures[i].bins), dtype=np.int64)
    np.add.at(out, (rows, counts[f"__b{i}"].to_numpy(np.int64)), counts["__n"].to_numpy(np.int64))
    return out
