"""The peers' side of bench/bench_aggregate.py: the same queries at the same budget through OpenDP 0.16
(its Polars context) and Tumult Analytics 0.21, on the same Parquet files.

Runs in its own venv (bench/requirements-peers.txt: tmlt.analytics pins pandas 1.5 / numpy 1.26, which
the product's lock does not allow): ``.peers-venv/bin/python bench/aggregate_peers.py CASE FILE REPS OUT [LIBS]``.
It writes JSON: per library, each repetition's estimates per key and cell, and the wall time of one
whole query (from reading the file to the collected result).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

CASES = {
    "adult": {"by": ["education", "sex"], "budget": {"epsilon": 1.0, "delta": 1e-6}, "unit": None,
              "measures": [("count", None, None), ("mean", "hours_per_week", (0.0, 100.0))]},
    "payroll": {"by": ["region", "grade"], "budget": {"rho": 0.5}, "unit": ("person", 1, 5),
                "measures": [("sum", "salary", (0.0, 200_000.0)), ("mean", "salary", (0.0, 200_000.0)),
                             ("median", "salary", (0.0, 200_000.0))]},
}  # fmt: skip


def opendp_run(case: dict, path: str) -> dict:
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    by, measures = case["by"], case["measures"]
    if case["unit"]:
        person, groups, rows = case["unit"]
        unit = dp.unit_of(
            contributions=[dp.polars.Bound(per_group=rows), dp.polars.Bound(by=by, num_groups=groups)], identifier=person
        )
    else:
        unit = dp.unit_of(contributions=1)
    loss = dp.loss_of(**case["budget"])
    lazy = pl.scan_parquet(path)
    groups = lazy.select(by).unique().collect().height  # the public keys' number (every key is in the data)
    margins = [dp.polars.Margin(by=by, invariant="keys", max_length=10_000_000, max_groups=groups)]
    context = dp.Context.compositor(data=lazy, privacy_unit=unit, privacy_loss=loss, split_evenly_over=1, margins=margins)
    exprs = []
    for op, col, bounds in measures:
        if op == "count":
            exprs.append(dp.len().alias("count"))
            continue
        x = pl.col(col).cast(pl.Float64).fill_null(0.0).fill_nan(0.0)
        if op == "sum":
            exprs.append(x.dp.sum(bounds).alias(f"{col}_sum"))
        elif op == "mean":
            exprs.append(x.dp.mean(bounds).alias(f"{col}_mean"))
        else:
            cands = [bounds[0] + (bounds[1] - bounds[0]) * (i + 0.5) / 128 for i in range(128)]
            exprs.append(x.dp.median(cands).alias(f"{col}_median"))
    query = context.query()
    if case["unit"]:  # a person's contribution bounded as privrelease bounds it: 1 key, 5 rows in it
        # (truncate_num_groups(1) keeps no row in OpenDP 0.16: it keeps dense ranks < k, which start at 1)
        query = query.truncate_per_group(case["unit"][1] * case["unit"][2])
    query = query.group_by(by).agg(*exprs)
    if case["unit"]:  # truncation drops the margin's public keys: join the released table to them
        query = query.join(lazy.select(by).unique().collect().lazy(), on=by, how="right")
    out = query.release().collect()
    names = [e.meta.output_name() for e in exprs]
    return {tuple(map(str, r[: len(by)])): list(r[len(by) :]) for r in out.select(*by, *names).iter_rows()}


_SPARK = None


def tumult_run(case: dict, path: str) -> dict:
    global _SPARK
    from pyspark.sql import SparkSession
    from tmlt.analytics import (
        AddOneRow,
        AddRowsWithID,
        ApproxDPBudget,
        KeySet,
        MaxRowsPerID,
        QueryBuilder,
        RhoZCDPBudget,
        Session,
    )

    if _SPARK is None:
        os.environ["PYSPARK_PYTHON"] = sys.executable  # Spark's workers run this venv's interpreter
        _SPARK = (SparkSession.builder.master("local[2]").config("spark.driver.memory", "8g")
                  .config("spark.ui.showConsoleProgress", "false").config("spark.sql.warehouse.dir", tempfile.mkdtemp())
                  .config("spark.sql.shuffle.partitions", "8").config("spark.ui.enabled", "false").getOrCreate())  # fmt: skip
        _SPARK.sparkContext.setLogLevel("ERROR")
    by, measures = case["by"], case["measures"]
    b = case["budget"]
    budget = RhoZCDPBudget(b["rho"]) if "rho" in b else ApproxDPBudget(b["epsilon"], b["delta"])
    frame = _SPARK.read.parquet(path)
    change = AddRowsWithID(id_column=case["unit"][0]) if case["unit"] else AddOneRow()
    session = Session.from_dataframe(privacy_budget=budget, source_id="t", dataframe=frame, protected_change=change)
    keyset = KeySet.from_dataframe(frame.select(*by).distinct())  # the public keys (every one is in the data)
    share = (RhoZCDPBudget(b["rho"] / len(measures)) if "rho" in b
             else ApproxDPBudget(b["epsilon"] / len(measures), b["delta"] / len(measures)))  # fmt: skip
    results = {}
    for op, col, bounds in measures:
        q = QueryBuilder("t")
        if case["unit"]:
            q = q.enforce(MaxRowsPerID(case["unit"][1] * case["unit"][2]))  # a person's rows (all in one key)
        g = q.groupby(keyset)
        name = "count" if op == "count" else f"{col}_{op}"
        if op == "count":
            g = g.count(name)
        elif op == "sum":
            g = g.sum(col, bounds[0], bounds[1], name)
        elif op == "mean":
            g = g.average(col, bounds[0], bounds[1], name)
        else:
            g = g.median(col, bounds[0], bounds[1], name)
        for r in session.evaluate(g, share).collect():
            results.setdefault(tuple(str(r[c]) for c in by), []).append(float(r[name]))
    return results


def main() -> None:
    name, path, reps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    libs = sys.argv[5].split(",") if len(sys.argv) > 5 else ["opendp", "tumult"]
    case = CASES[name]
    found = {}
    for lib, fn in ((lib, {"opendp": opendp_run, "tumult": tumult_run}[lib]) for lib in libs):
        runs, times = [], []
        for _ in range(reps):
            start = time.perf_counter()
            result = fn(case, path)
            times.append(time.perf_counter() - start)
            runs.append({"|".join(k): v for k, v in result.items()})
        found[lib] = {"runs": runs, "seconds": times}
    with open(out, "w") as f:
        json.dump(found, f)


if __name__ == "__main__":
    main()
