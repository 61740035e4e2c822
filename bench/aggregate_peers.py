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
    "payroll": {"by": ["region", "grade"], "budget": {"rho": 0.25}, "unit": ("person", 1, 5),
                "measures": [("count", None, None), ("sum", "salary", (0.0, 200_000.0)), ("mean", "salary", (0.0, 200_000.0)),
                             ("median", "salary", (0.0, 200_000.0))]},
}  # fmt: skip


def opendp_run(case: dict, path: str, form: str = "one") -> tuple[dict, dict]:
    """OpenDP's answer per key, and the noise scale of each measure it released (``summarize``'s ``scale``).

    The unit as OpenDP's docs give one for a table with several rows per person: the person is the identifier
    and changes as one (``unit_of(contributions=1, identifier=...)``), their rows bounded in the query by
    ``truncate_per_group`` (5 rows in a key, as privrelease bounds them); every key public (the margin's
    ``invariant="keys"``). ``form``: ``one``, every measure in one query (one ``release()``); ``each``, one query
    per measure, the budget split evenly over them by the compositor."""
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    by, measures = case["by"], case["measures"]
    unit = dp.unit_of(contributions=1, identifier=pl.col(case["unit"][0])) if case["unit"] else dp.unit_of(contributions=1)
    loss = dp.loss_of(**case["budget"])
    lazy = pl.scan_parquet(path)
    keys = lazy.select(by).unique().collect()  # the public keys (every key is in the data)
    margins = [dp.polars.Margin(by=by, invariant="keys", max_length=10_000_000, max_groups=keys.height)]
    queries = 1 if form == "one" else len(measures)
    context = dp.Context.compositor(data=lazy, privacy_unit=unit, privacy_loss=loss, split_evenly_over=queries, margins=margins)
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
            many = int(os.environ.get("PEERS_MEDIAN_CANDIDATES", "20001"))  # a grid finer than the noise's error
            cands = [bounds[0] + (bounds[1] - bounds[0]) * i / (many - 1) for i in range(many)]
            exprs.append(x.dp.median(cands).alias(f"{col}_median"))
    names = [e.meta.output_name() for e in exprs]
    answers: dict[tuple, dict] = {}
    scales: dict[str, list] = {}
    for chosen in [exprs] if form == "one" else [[e] for e in exprs]:
        query = context.query()
        if case["unit"]:  # a person's rows in one key bounded as privrelease bounds them
            query = query.truncate_per_group(case["unit"][2])
        query = query.group_by(by).agg(*chosen)
        if case["unit"]:  # truncation drops the margin's public keys: join the released table to them
            query = query.join(keys.lazy(), on=by, how="right")
        for row in query.summarize(alpha=0.05).iter_rows(named=True):
            scales.setdefault(row["column"], []).append(
                {"aggregate": row["aggregate"], "distribution": row["distribution"], "scale": row["scale"]}
            )
        out = query.release().collect()
        for r in out.select(*by, *[e.meta.output_name() for e in chosen]).iter_rows():
            answers.setdefault(tuple(map(str, r[: len(by)])), {}).update(
                zip([e.meta.output_name() for e in chosen], r[len(by) :])
            )
    return {k: [v.get(n) for n in names] for k, v in answers.items()}, scales


_SPARK = None


def tumult_run(case: dict, path: str, form: str = "each") -> tuple[dict, dict]:
    """Tumult's answer per key, one query per measure as its docs write them (a KeySet of the public keys, the
    person's rows bounded by ``MaxRowsPerID``), and each query's noise as ``Session._noise_info`` states it."""
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
    results, scales = {}, {}
    for op, col, bounds in measures:
        q = QueryBuilder("t")
        if case["unit"]:
            q = q.enforce(MaxRowsPerID(case["unit"][2]))  # a person's rows (all in one key)
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
        try:  # the noise Tumult will add (a private helper of its Session; stated where this version has it)
            scales[name] = [{k: str(v) for k, v in info.items()} for info in session._noise_info(g, share)]
        except Exception as error:  # noqa: BLE001 (a version without it: the figures stand without a scale)
            scales[name] = [{"unavailable": repr(error)[:200]}]
        for r in session.evaluate(g, share).collect():
            results.setdefault(tuple(str(r[c]) for c in by), []).append(float(r[name]))
    return results, scales


def main() -> None:
    name, path, reps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    libs = sys.argv[5].split(",") if len(sys.argv) > 5 else ["opendp", "opendp-each", "tumult"]
    case = CASES[name]
    found = {}
    for lib in libs:
        fn = {"opendp": opendp_run, "opendp-each": opendp_run, "tumult": tumult_run}[lib]
        form = {"opendp": "one", "opendp-each": "each", "tumult": "each"}[lib]
        runs, times, scales = [], [], {}
        for _ in range(reps):
            start = time.perf_counter()
            result, scales = fn(case, path, form)
            times.append(time.perf_counter() - start)
            runs.append({"|".join(k): v for k, v in result.items()})
        found[lib] = {"runs": runs, "seconds": times, "scales": scales}
    with open(out, "w") as f:
        json.dump(found, f)


if __name__ == "__main__":
    main()
