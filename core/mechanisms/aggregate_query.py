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
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from core.db import quote_ident, scratch
from core.mechanisms.aggregate_budget import Accounting
from core.mechanisms.aggregate_params import Params

BOUNDED = "bounded_rows"


def bound_sql(params: Params) -> str:
    """The rows a run aggregates: all of them (record unit), or each user's bounded contribution."""
    if not params.user_column:
        return f"CREATE TEMP VIEW {BOUNDED} AS SELECT * FROM input_rows"
    u = quote_ident(params.user_column)
    keys = ", ".join(quote_ident(c) for c in params.group_by)
    cols = ", ".join(quote_ident(c) for c in params.columns)
    on = " AND ".join(f"r.{c} IS NOT DISTINCT FROM k.{c}" for c in map(quote_ident, [params.user_column, *params.group_by]))
    return f"""
        CREATE TEMP TABLE {BOUNDED} AS
        WITH held AS (SELECT DISTINCT {u}, {keys} FROM input_rows),
        kept AS (
            SELECT * FROM held
            QUALIFY row_number() OVER (PARTITION BY {u} ORDER BY hash({u}, {keys}, $key::UBIGINT), {keys}) <= {params.max_groups}
        )
        SELECT r.* FROM (SELECT {cols} FROM input_rows) r JOIN kept k ON {on}
        QUALIFY row_number() OVER (PARTITION BY r.{u}, {", ".join("r." + quote_ident(c) for c in params.group_by)}
                                   ORDER BY hash({", ".join("r." + quote_ident(c) for c in params.columns)}, $key::UBIGINT),
                                   {", ".join("r." + quote_ident(c) for c in params.columns)}) <= {params.max_rows}
    """


def _on_grid(column: str, low: float, high: float, unit: float, centre: float = 0.0) -> str:
    x = f"(CAST({quote_ident(column)} AS DOUBLE) - {centre!r})"
    lo, hi = math.ceil((low - centre) / unit), math.floor((high - centre) / unit)
    return f"CAST(greatest(least(round({x} / {unit!r}), {hi}), {lo}) AS BIGINT)"


def exact(frame: pd.DataFrame, params: Params, acc: Accounting, key: int) -> tuple[pd.DataFrame, dict[int, np.ndarray]]:
    """Per present key: the key columns, ``__n`` (rows), and per vector its true values in grid units
    (``__v<i>`` for measure i's vector); and per quantile measure the (keys x B) histogram. Rows whose key
    lies outside a declared domain are left out (they belong to no released key)."""
    if params.domains:
        held = np.ones(len(frame), dtype=bool)
        for c in params.group_by:
            if c in params.domains:
                held &= frame[c].isin(params.domains[c]).to_numpy()
        if not held.all():
            frame = frame[held]
    keys = ", ".join(quote_ident(c) for c in params.group_by)
    select = [keys, "count(*) AS __n"]
    for n in acc.noised:
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
    con = scratch()
    try:
        con.register("input_rows", frame[params.columns])
        con.execute(bound_sql(params), {"key": key} if params.user_column else None)
        stats = con.execute(f"SELECT {', '.join(select)} FROM {BOUNDED} GROUP BY ALL ORDER BY {keys}").df()
        hists = {}
        for n in acc.noised:
            if n.vector.kind == "histogram":
                hists[n.vector.measure] = _histogram(con, params, n.vector.measure, stats)
    finally:
        con.close()
    return stats, hists


def _histogram(con, params: Params, i: int, stats: pd.DataFrame) -> np.ndarray:
    m = params.measures[i]
    low, high = m.bounds
    x = f"CAST({quote_ident(m.column)} AS DOUBLE)"
    b = f"CAST(greatest(least(floor(({x} - {low!r}) / {(high - low) / m.bins!r}), {m.bins - 1}), 0) AS BIGINT)"
    keys = ", ".join(quote_ident(c) for c in params.group_by)
    counts = con.execute(f"SELECT {keys}, {b} AS __bin, count(*) AS __h FROM {BOUNDED} GROUP BY ALL").df()
    index = pd.MultiIndex.from_frame(stats[params.group_by])
    rows = index.get_indexer(pd.MultiIndex.from_frame(counts[params.group_by]))
    out = np.zeros((len(stats), m.bins), dtype=np.int64)
    np.add.at(out, (rows, counts["__bin"].to_numpy()), counts["__h"].to_numpy(np.int64))
    return out
