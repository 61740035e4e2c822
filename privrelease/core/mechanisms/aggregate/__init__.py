"""Aggregate: DP tables of counts, distinct counts, sums, means and quantiles by group.

A request names ``group_by`` columns and measures with public bounds (``aggregate_params``); the
release is one row per key with one column per measure and its 95% interval.

- Keys: public (every key of the declared domains' product, empty ones with noise) when every
  group_by column's domain was declared at registration; otherwise the keys present, selected by
  their noisy count reaching a threshold (DP partition selection, its delta in the charge).
- Units: record (replace one record) or user (add or remove one user), the user's contribution
  bounded in DuckDB to ``max_groups`` keys and ``max_rows`` rows per key by a keyed hash of the
  user's own rows (``aggregate_query``).
- Noise: each vector (counts, a distinct count, a sum, a centred sum, a quantile's histogram) gets
  one draw per key from ``privrelease.core.noise``'s exact discrete Gaussian or discrete Laplace on a public
  grid, with the leaf of the plan's event that declares it (``privrelease.core.privacy.draws``): the sensitivities,
  the split and the argument are in ``aggregate_budget``.
- Means are a noisy centred sum over the noisy count. A quantile's interval is read from a noisy
  histogram over equal bins, and its estimate drawn by the exponential mechanism over the answer grid's
  steps inside that interval (``aggregate_quantile``), one ``Exponential`` leaf per level composed over
  the keys a neighbour touches. Intervals: ``aggregate_report``.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pandas as pd

from privrelease.core import noise
from privrelease.core.errors import InternalError, ParameterError
from privrelease.core.mechanisms.aggregate import budget as budget
from privrelease.core.mechanisms.aggregate import quantile as quantile
from privrelease.core.mechanisms.aggregate import query as query
from privrelease.core.mechanisms.aggregate import report as show
from privrelease.core.mechanisms.aggregate.params import Measure, Params
from privrelease.core.mechanisms.base import Plan, Result, Snapshot
from privrelease.core.privacy import draws, events
from privrelease.core.privacy.adjacency import AddRemoveUser, ReplaceRecord
from privrelease.core.privacy.cost import DPCost
from privrelease.core.tables.schema import Needs

__all__ = ["NAME", "Measure", "Params", "needs", "plan", "run", "check"]

NAME = "aggregate"
READS_SNAPSHOT = True  # a release hands ``run`` the checked snapshot's file: DuckDB reads it, no pandas copy of the rows
UNIT_PARAM = "user_column"  # the registered user column; None under the record unit (UNIT_OPTIONAL)
UNIT_OPTIONAL = True
DOMAINS_PARAM = "domains"  # the key domains the steward declared at registration


def accuracy(params: Params, plan_: Plan, columns: tuple[str, ...]) -> dict:
    """Each vector's noise std per cell and 95% half-width, what the figures count, and each mean's expected error by
    the number of rows in a key, before anything is read."""
    acc = accounting(params)
    return {"cells": plan_.detail["cells"], "keys": plan_.detail["keys"], "picks": plan_.detail["picks"],
            "counted": show.counted(params), "means": show.mean_errors(params, acc)}  # fmt: skip


def accuracy_lines(figures: dict) -> list[str]:
    rows = [
        f"| {c['vector']} | {c['noise_std']:.6g} | {c['half_width_95']:.6g} |"
        + (f" rank ±{c['rank_half_width_95_at_median']:.4g} at the median |" if "rank_half_width_95_at_median" in c else " |")
        for c in figures["cells"]
    ]
    head = [f"Keys: {figures['keys']}.", "", f"What the figures count: {figures['counted']}.", "",
            "| vector | noise std per cell | 95% half-width | |", "|---|---|---|---|"]  # fmt: skip
    return [*head, *rows, *show.pick_lines(figures.get("picks", [])), *show.mean_error_lines(figures.get("means", []))]


def warnings(params: Params, plan_: Plan, columns: tuple[str, ...]) -> list[str]:
    """Under the user unit, neither per-user bound asked for: each person then counts at most one row, said before the
    charge (``show.counted`` says it in the preview's figures and the report)."""
    if params.user_column is None or {"max_groups", "max_rows"} & params.model_fields_set:
        return []
    return [
        f"each `{params.user_column}` counts at most {params.max_rows} row in {params.max_groups} key (max_rows and "
        "max_groups were not given: their defaults are 1): a person with more rows is counted once, in a key a keyed "
        "hash picks, so the table counts persons' picked rows, not rows. Set max_groups and max_rows to what one person "
        "contributes (the noise grows with them: preview the request first)."
    ]


def needs(params: Params, schema: tuple[str, ...]) -> Needs:
    numeric = [m.column for m in params.measures if m.op in ("sum", "mean", "quantile")]
    return Needs(columns=tuple(params.columns), numeric=tuple(dict.fromkeys(numeric)))


def _adjacency(params: Params) -> AddRemoveUser | ReplaceRecord:
    return AddRemoveUser(params.user_column) if params.user_column else ReplaceRecord()


def guarantee(params: Params, acc: budget.Accounting) -> str:
    level = "user-level" if params.user_column else "record-level"
    budget_words = f"rho = {params.rho:g} zCDP, charged as " if params.rho is not None else ""
    return f"{level} {budget_words}(epsilon={acc.epsilon:.6g}, delta={acc.delta:.6g})-differential privacy (aggregate)"


def accounting(params: Params) -> budget.Accounting:
    try:
        return budget.accounting(params)
    except ValueError as exc:
        raise ParameterError(f"aggregate: {exc}") from None


def plan(params: Params) -> Plan:
    acc = accounting(params)
    return Plan(
        cost=DPCost(budget.event(params, acc), _adjacency(params)),
        guarantee=guarantee(params, acc),
        detail={
            "cells": show.cells(params, acc),
            "picks": show.picks(params, acc),
            "keys": f"selected, threshold {acc.threshold * acc.counts.unit:g}" if params.selects else "public (declared domains)",
            "noise": f"exact discrete {params.noise} on a public grid per vector (privrelease.core.noise)",
        },
    )


def _public_keys(params: Params) -> pd.DataFrame:
    return pd.DataFrame(list(itertools.product(*(params.domains[c] for c in params.group_by))), columns=params.group_by)


def _units(n: budget.Noised, values: np.ndarray) -> np.ndarray:
    """True values in the vector's grid units: counts times 1/unit (an integer), sums already in units."""
    return np.asarray(values, dtype=np.int64) * (int(1 / n.unit) if n.vector.integral else 1)


def run(frame: pd.DataFrame | Snapshot, params: Params, plan: Plan, rng: np.random.Generator) -> Result:
    acc = accounting(params)  # the vectors, grids and thresholds; every leaf drawn with is the charged plan's
    event = plan.cost.event
    leaf = {n.vector.part: events.find(event, n.vector.part) for n in acc.noised}
    picks = [replace(p, leaf=events.find(event, p.leaf.part)) for p in acc.picks]
    key = int(noise.words(rng, 1)[0] >> np.uint64(1))
    with query.Exact(frame, params, acc, key) as exact:
        stats, hists = exact.stats()
        noisy: dict = {}
        counts = acc.counts
        if params.selects:
            y = draws.values(rng, leaf[counts.vector.part], _units(counts, stats["__n"]), counts.unit)
            keep = y >= acc.threshold * counts.unit
            stats, hists = stats[keep].reset_index(drop=True), {i: h[keep] for i, h in hists.items()}
            noisy[("counts", None)] = y[keep]
            keys = stats[params.group_by]
        else:
            keys = _public_keys(params)
            at = pd.MultiIndex.from_frame(stats[params.group_by]).get_indexer(pd.MultiIndex.from_frame(keys))
            stats = _reindexed(stats.drop(columns=params.group_by), at)
            hists = {i: _reindexed(h, at) for i, h in hists.items()}
        for n in acc.noised:
            v = n.vector
            if (v.kind, v.measure) in noisy:
                continue
            true = stats["__n"] if v.kind == "counts" else hists[v.measure] if v.kind == "histogram" else stats[f"__v{v.measure}"]
            noisy[(v.kind, v.measure)] = draws.values(rng, leaf[v.part], _units(n, true), n.unit)
        for p in picks:
            noisy[("interval", p.measure, p.q)] = show.interval(
                p.q, noisy[("histogram", p.measure)], acc.of("histogram", p.measure)
            )
            noisy[("pick", p.measure, p.q)] = _pick(
                rng, exact, p, params, keys, hists[p.measure], noisy[("interval", p.measure, p.q)]
            )
    table = show.estimates(params, acc, keys, noisy)
    privacy = {"keys": len(table), "cells": show.cells(params, acc), "picks": show.picks(params, acc), "selected": params.selects}
    return Result(
        table,
        privacy,
        show.report(params, acc, guarantee(params, acc), table),
        show.charts(params, table),
        {"keys": len(table)},
        name="aggregate",
        manifest={"keys": len(table)},
    )


def _pick(rng, exact: query.Exact, p: budget.Pick, params: Params, keys, hist: np.ndarray, bins: tuple) -> np.ndarray:
    """Level p.q's drawn answer-grid step per key, inside its interval's ``bins`` (first, last); n, the key's values
    the ranks are of, is its histogram's total (rows of no value are in no bin)."""
    per = params.measures[p.measure].grid // params.measures[p.measure].bins
    lo, hi = bins
    below = np.cumsum(hist, axis=1)[np.arange(len(hist)), lo - 1] * (lo > 0)  # the key's rows under bin lo
    found = exact.steps(p.measure, keys, lo * per, (hi + 1) * per)
    return quantile.steps(rng, p, found, lo * per, (hi + 1) * per, below, hist.sum(axis=1))


def _reindexed(values: pd.DataFrame | np.ndarray, at: np.ndarray):
    """Rows of ``values`` at positions ``at`` (-1: a key no row holds, all zeros)."""
    arr = values.to_numpy(np.int64) if isinstance(values, pd.DataFrame) else values
    out = np.zeros((len(at), arr.shape[1]), dtype=np.int64)
    out[at >= 0] = arr[at[at >= 0]]
    return pd.DataFrame(out, columns=values.columns) if isinstance(values, pd.DataFrame) else out


def check(original: pd.DataFrame | Snapshot, result: Result, params: Params) -> None:
    """Invariants: one row per key, no duplicate key, every estimate inside its interval, means and
    quantiles inside their bounds, public keys exactly the domains' product."""
    table = result.data
    if table[params.group_by].duplicated().any():
        raise InternalError("aggregate released a key twice")
    if not params.selects and len(table) != len(_public_keys(params)):
        raise InternalError("aggregate left out a public key")
    for m in params.measures:
        for name in m.names:
            v, lo, hi = (table[c].to_numpy() for c in (name, f"{name}_lo", f"{name}_hi"))
            if not ((lo <= v + 1e-9 * np.abs(v)) & (v <= hi + 1e-9 * np.abs(v))).all():
                raise InternalError(f"aggregate released an estimate of {name} outside its interval")
            if m.op in ("mean", "quantile") and len(v) and not ((m.bounds[0] <= lo) & (hi <= m.bounds[1])).all():
                raise InternalError(f"aggregate released an interval of {name} outside its bounds")
