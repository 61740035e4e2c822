"""The peers' side of bench/bench_tutorials.py: OpenDP 0.16's and Tumult Analytics 0.21's own tutorial queries,
as each tutorial writes them (privacy unit, budget, bounds, candidates, keys), on tutorial-shaped Parquet files.

Runs in the peers' venv (bench/requirements-peers.txt; ``make peers-venv``):
``.peers-venv/bin/python bench/tutorial_peers.py LIB FILE REPS OUT [QUERY,...]``, LIB ``opendp`` (FILE: the
LFS-shaped table) or ``tumult`` (FILE: the library-members-shaped table). It writes JSON: per query, each
repetition's estimates per key ("*" for a query without keys), the wall time of each query (building it to the
collected result, the Spark session already up for Tumult), and the noise the library states for it (OpenDP's
``summarize()``, Tumult's ``Session._noise_info``).

Where each query is from (the tutorials' own text; the code here is ours):

- OpenDP, ``docs/source/getting-started/tabular-data/essential-statistics.rst`` (opendp/opendp at bc6e18b):
  a context with ``unit_of(contributions=36)``, ``loss_of(epsilon=1.0)``, ``split_evenly_over=5`` (and, from
  "Sum" on, the margin ``max_length=150_000 * 36``); ``count`` is its ``select(dp.len())``; ``hours_sum`` the
  sum of HWUSUAL cast to int over rows with HWUSUAL != 99, nulls filled with 35, bounds (0, 80); ``hours_mean``
  its "Mean" under add/remove: that sum (without the fill) and ``dp.len()`` in one query, the mean their ratio;
  ``hours_median`` its "Median": ``dp.median`` over the candidates ``range(20, 60)``.
- OpenDP, ``grouping.ipynb`` (same commit): ``quarterly_count``, "Invariant Group Keys": counts by YEAR x QUARTER
  with the margin ``invariant="keys"``, ``loss_of(epsilon=1.0 / 4)``, one query; ``age_ilostat_count``,
  "Stable Keys": counts by AGE x ILOSTAT with the keys selected, ``loss_of(epsilon=1.0 / 4, delta=1e-7)``.
- Tumult, ``doc/tutorials/`` (opendp/tumult-analytics at 1d620b0), each on a Session of ``AddOneRow()``:
  ``count``, first-steps.rst (``QueryBuilder("members").count()`` at ``PureDPBudget(1)``); ``age_mean`` and
  ``books_sum``, clamping-bounds.rst (``average("age", low=0, high=120)``, ``sum("books_borrowed", low=0,
  high=200)``, each at epsilon 1); ``age_mean_by_edu`` and ``young_age_count``, groupby-queries.rst (the average
  age per the five education levels' KeySet at epsilon 1; counts per age 5..17 at epsilon 0.1).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

EDU = ["up-to-high-school", "high-school-diploma", "bachelors-associate", "masters-degree", "doctorate-professional"]
OPENDP = ["count", "hours_sum", "hours_mean", "hours_median", "quarterly_count", "age_ilostat_count"]
TUMULT = ["count", "age_mean", "books_sum", "age_mean_by_edu", "young_age_count"]


def opendp_query(name: str, path: str):
    """One of the LFS tutorials' queries, on a context of its own as the tutorial builds it: (query, keys, read),
    ``read`` mapping the released frame to {key: value}."""
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    data = pl.scan_parquet(path)
    unit = dp.unit_of(contributions=36)
    one = lambda frame, col: {"*": frame[col][0]}  # noqa: E731
    if name in ("count", "hours_sum", "hours_mean", "hours_median"):  # essential-statistics: epsilon 1 over 5 queries
        margins = [] if name == "count" else [dp.polars.Margin(max_length=150_000 * 36)]
        context = dp.Context.compositor(data=data, privacy_unit=unit, privacy_loss=dp.loss_of(epsilon=1.0),
                                        split_evenly_over=5, margins=margins)  # fmt: skip
        if name == "count":
            return context.query().select(dp.len()), lambda f: one(f, "len")
        hours = context.query().filter(pl.col("HWUSUAL") != 99.0)
        if name == "hours_sum":
            return hours.select(pl.col("HWUSUAL").cast(int).fill_null(35).dp.sum(bounds=(0, 80))), lambda f: one(f, "HWUSUAL")
        if name == "hours_mean":  # "we recommended estimating means by separately releasing sum and count estimates"
            query = hours.select(pl.col("HWUSUAL").cast(int).dp.sum(bounds=(0, 80)), dp.len())
            return query, lambda f: {"*": f["HWUSUAL"][0] / f["len"][0]}
        return hours.select(pl.col("HWUSUAL").cast(int).dp.median(list(range(20, 60)))), lambda f: one(f, "HWUSUAL")
    if name == "quarterly_count":  # grouping: invariant keys
        context = dp.Context.compositor(data=data, privacy_unit=unit, privacy_loss=dp.loss_of(epsilon=1.0 / 4),
                                        split_evenly_over=1,
                                        margins=[dp.polars.Margin(by=["YEAR", "QUARTER"], invariant="keys")])  # fmt: skip
        by = ["YEAR", "QUARTER"]
    else:  # grouping: stable keys (selected by a threshold)
        context = dp.Context.compositor(data=data, privacy_unit=unit, privacy_loss=dp.loss_of(epsilon=1.0 / 4, delta=1e-7),
                                        split_evenly_over=1)  # fmt: skip
        by = ["AGE", "ILOSTAT"]
    query = context.query().group_by(*by).agg(dp.len())
    return query, lambda f: {"|".join(str(r[c]) for c in by): r["len"] for r in f.iter_rows(named=True)}


def opendp_run(name: str, path: str) -> tuple[dict, list, float]:
    start = time.perf_counter()
    query, read = opendp_query(name, path)
    frame = query.release().collect()
    seconds = time.perf_counter() - start
    summary = query.summarize(alpha=0.05)
    scales = [{k: (None if v is None else str(v)) for k, v in row.items()} for row in summary.iter_rows(named=True)]
    return {k: (None if v is None else float(v)) for k, v in read(frame).items()}, scales, seconds


_SPARK = None
_SESSION: dict = {}


def tumult_run(name: str, path: str) -> tuple[dict, list, float]:
    """One of the library tutorials' queries on a Session of the members table (``AddOneRow()``, an unbounded
    budget as in the tutorials after the first: each evaluation is charged its own epsilon)."""
    global _SPARK
    from pyspark.sql import SparkSession
    from tmlt.analytics import AddOneRow, KeySet, PureDPBudget, QueryBuilder, Session

    if _SPARK is None:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        _SPARK = (SparkSession.builder.master("local[2]").config("spark.driver.memory", "4g")
                  .config("spark.ui.showConsoleProgress", "false").config("spark.sql.warehouse.dir", tempfile.mkdtemp())
                  .config("spark.sql.shuffle.partitions", "8").config("spark.ui.enabled", "false").getOrCreate())  # fmt: skip
        _SPARK.sparkContext.setLogLevel("ERROR")
    if "session" not in _SESSION:
        frame = _SPARK.read.parquet(path).drop("library")  # the column privrelease groups a total by
        _SESSION["session"] = Session.from_dataframe(privacy_budget=PureDPBudget(float("inf")), source_id="members",
                                                     dataframe=frame, protected_change=AddOneRow())  # fmt: skip
    session = _SESSION["session"]
    q = QueryBuilder("members")
    if name == "count":
        query, eps, col, by = q.count(), 1.0, "count", []
    elif name == "age_mean":
        query, eps, col, by = q.average("age", low=0, high=120), 1.0, "age_average", []
    elif name == "books_sum":
        query, eps, col, by = q.sum("books_borrowed", low=0, high=200), 1.0, "books_borrowed_sum", []
    elif name == "age_mean_by_edu":
        keys = KeySet.from_dict({"education_level": EDU})
        query, eps, col, by = q.groupby(keys).average("age", low=0, high=120), 1.0, "age_average", ["education_level"]
    else:
        keys = KeySet.from_dict({"age": list(range(5, 18))})
        query, eps, col, by = q.groupby(keys).count(), 0.1, "count", ["age"]
    budget = PureDPBudget(eps)
    try:  # the noise Tumult will add (a private helper of its Session), asked before the evaluation as it says
        scales = [{k: str(v) for k, v in info.items()} for info in session._noise_info(query, budget)]
    except Exception as error:  # noqa: BLE001
        scales = [{"unavailable": repr(error)[:200]}]
    start = time.perf_counter()
    rows = session.evaluate(query, budget).collect()
    seconds = time.perf_counter() - start
    out = {("|".join(str(r[c]) for c in by) if by else "*"): float(r[col]) for r in rows}
    return out, scales, seconds


def main() -> None:
    lib, path, reps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    names = sys.argv[5].split(",") if len(sys.argv) > 5 else (OPENDP if lib == "opendp" else TUMULT)
    run = opendp_run if lib == "opendp" else tumult_run
    found = {}
    for name in names:
        runs, times, scales = [], [], []
        for _ in range(reps):
            result, scales, seconds = run(name, path)
            runs.append(result)
            times.append(seconds)
        found[name] = {"runs": runs, "seconds": times, "scales": scales}
    with open(out, "w") as f:
        json.dump(found, f)


if __name__ == "__main__":
    main()
