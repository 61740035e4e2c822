"""Utility measures of an SDC release (the steward's internal report), as sdcMicro computes them; the disclosure
risk is ``privrelease.core.sdc.risk``.

IL1s, means and correlations run in DuckDB over the registered frames, so it does not copy them; the
nearest-neighbour linkage (exact: direct distances to the distinct originals, or scipy's KD-tree when
they are many) and pMSE (a logistic regression over level codes, ``privrelease.core.sdc.logistic``) run in numpy.

- Record linkage in rank space: each column is mapped to mid-ranks among the original values;
  a perturbed record is linked when its nearest original record (Euclidean, in rank space) is
  its own (ties shared: 1/ties).
- IL1s (sdcMicro ``dUtility``; Mateo-Sanz, Sebé & Domingo-Ferrer 2004):
  (1/(p·n)) Σ_j Σ_i |x_ij − x'_ij| / (√2·S_j), S_j the original column's standard deviation.
- pMSE (Woo et al. 2009; Snoke et al. 2018): a logistic regression of "is released" on the
  columns (numeric ones with their squares and pairwise products) over the stacked tables (``privrelease.core.sdc.logistic``);
  pMSE = mean (p̂_i − c)², c the released share. Snoke et al.'s null, a release drawn from the
  original's own distribution (as RA's and a swap's are made from the original), has expectation
  (k − 1)(1 − c)²c/N for k parameters and N stacked records; two independent samples of one
  distribution have (k − 1)c(1 − c)/N, 1/(1 − c) times more (tests/sdc/test_sdc_measures.py simulates both).
"""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pandas as pd
import scipy  # submodules load on first use: scipy.spatial only for a large linkage

from privrelease.core.sdc import coding, logistic

MAX_LEVELS = 50  # a categorical column with more levels is left out of pMSE's model (and named)
MAX_SQUARED = 8  # pMSE's second-order terms: among the first numeric columns of its list
MAX_PMSE_ROWS = 100_000  # pMSE is fitted on every s-th record of each table, s the smallest stride within this


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def mid_ranks(original: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each value's mid-rank among the original values, scaled to [0, 1]: (#below + #below or equal)/(2n),
    looked up among the distinct original values (Adult's age: 72 of 30,000)."""
    levels, counts = np.unique(original, return_counts=True)
    i = np.searchsorted(levels, values)
    equal = counts[np.minimum(i, len(levels) - 1)] * (levels[np.minimum(i, len(levels) - 1)] == values)
    return (2 * np.r_[0, np.cumsum(counts)][i] + equal) / (2.0 * len(original))


def linkage(original: pd.DataFrame, released: pd.DataFrame, columns: list[str]) -> dict:
    """Share of perturbed records whose nearest original record in rank space is their own."""
    x, y = original[columns].to_numpy(float), released[columns].to_numpy(float)
    complete = ~(np.isnan(x).any(axis=1) | np.isnan(y).any(axis=1))
    x, y = x[complete], y[complete]
    both = np.column_stack([mid_ranks(x[:, j], np.r_[x[:, j], y[:, j]]) for j in range(x.shape[1])])
    o, r = both[: len(x)], both[len(x) :]
    moved = (x != y).any(axis=1)
    if not moved.any():
        return {"perturbed_records": 0, "linkage_rate": None}
    o_m, r_m = o[moved], r[moved]
    own = np.linalg.norm(r_m - o_m, axis=1)
    ties = _ties(o, r_m, own)
    rate = float((1.0 / ties[ties > 0]).sum() / moved.sum())
    return {"perturbed_records": int(moved.sum()), "linkage_rate": rate}


LINK_TOLERANCE = 1e-12  # a record's own original counts as nearest within this (rank-space) distance
BRUTE_PAIRS = 20_000_000  # (queries × distinct original points) compared directly, in blocks, up to this
BLOCK = 1 << 20  # distances computed per block of queries


def _ties(points: np.ndarray, queries: np.ndarray, own: np.ndarray) -> np.ndarray:
    """For each query whose own point lies at distance ``own``: 0 if another point is nearer by more than
    ``LINK_TOLERANCE`` (not linked), else the number of points within ``own`` + ``LINK_TOLERANCE``
    (Euclidean, boundary included), its own among them.

    Exact either way: over the distinct points (rank space repeats values; Adult's age has 72) with
    their multiplicities, by direct distances while queries × distinct points stay under
    ``BRUTE_PAIRS``, without scipy.spatial (0.1-0.3 s to import); a k-d tree beyond that."""
    distinct, counts = _distinct(points)
    ties = np.zeros(len(queries))
    if len(queries) * len(distinct) > BRUTE_PAIRS:
        tree = scipy.spatial.cKDTree(points)
        nearest, _ = tree.query(queries, k=1)
        linked = own <= nearest + LINK_TOLERANCE
        ties[linked] = tree.query_ball_point(queries[linked], own[linked] + LINK_TOLERANCE, return_length=True)
        return ties
    step = max(1, BLOCK // len(distinct))
    for a in range(0, len(queries), step):
        q, mine = queries[a : a + step], own[a : a + step]
        d = np.sqrt(((q[:, None, :] - distinct[None, :, :]) ** 2).sum(axis=2))
        linked = mine <= d.min(axis=1) + LINK_TOLERANCE
        ties[a : a + step] = np.where(linked, (d <= (mine + LINK_TOLERANCE)[:, None]) @ counts, 0)
    return ties


def _distinct(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of ``points`` (in the order they first appear) and how many times each occurs, by
    hashing (``np.unique(axis=0)`` sorts rows as bytes: 28 ms for one column of Adult's 30,000)."""
    per_column = np.column_stack([pd.factorize(points[:, j])[0] for j in range(points.shape[1])])
    group, first = coding.groups(coding.combined(per_column, list(range(points.shape[1]))))
    return points[first], np.bincount(group)


def il1s(con: duckdb.DuckDBPyConnection, original: str, released: str, columns: list[str]) -> float | None:
    """IL1s over the columns whose original standard deviation is positive (rows paired by position)."""
    if not columns:
        return None
    terms = ", ".join(f"avg(abs(o.{ident(c)} - r.{ident(c)})), stddev_samp(o.{ident(c)})" for c in columns)
    row = con.execute(f"SELECT {terms} FROM {original} AS o POSITIONAL JOIN {released} AS r").fetchone()
    parts = [mad / (math.sqrt(2) * sd) for mad, sd in zip(row[::2], row[1::2]) if sd and mad is not None]
    return float(np.mean(parts)) if parts else None


def moments(con: duckdb.DuckDBPyConnection, table: str, columns: list[str]) -> tuple[dict, dict]:
    """Means of the numeric columns and their pairwise Pearson correlations."""
    pairs = [(a, b) for i, a in enumerate(columns) for b in columns[i + 1 :]]
    terms = [f"avg({ident(c)})" for c in columns] + [f"corr({ident(a)}, {ident(b)})" for a, b in pairs]
    if not terms:
        return {}, {}
    row = con.execute(f"SELECT {', '.join(terms)} FROM {table}").fetchone()
    return dict(zip(columns, row[: len(columns)])), dict(zip(pairs, row[len(columns) :]))


def changes(con: duckdb.DuckDBPyConnection, original: str, released: str, columns: list[str]) -> dict:
    """Mean changes per column (absolute and relative) and the largest change of a correlation."""
    m0, c0 = moments(con, original, columns)
    m1, c1 = moments(con, released, columns)

    def change(a, b):  # a column with no values (in either table) has no mean to compare
        return None if a is None or b is None else b - a

    means = {
        c: {
            "original": m0[c],
            "released": m1[c],
            "change": change(m0[c], m1[c]),
            "relative": change(m0[c], m1[c]) / abs(m0[c]) if m0[c] and m1[c] is not None else None,
        }
        for c in columns
    }
    deltas = {f"{a} ~ {b}": c1[(a, b)] - c0[(a, b)] for a, b in c0 if c0[(a, b)] is not None and c1[(a, b)] is not None}
    worst = max(deltas, key=lambda k: abs(deltas[k]), default=None)
    return {
        "means": means,
        "correlation_changes": deltas,
        "max_abs_correlation_change": abs(deltas[worst]) if worst else None,
        "max_pair": worst,
    }


def design(frame: pd.DataFrame, columns: list[str], numeric: set[str]) -> tuple[logistic.Design, list[str]]:
    """pMSE's model: numeric columns standardized (a missing value as the mean plus an indicator),
    with their squares and pairwise products among the first ``MAX_SQUARED`` of them (swapping keeps
    every marginal, so only second-order terms can see what it changed), the dense columns constant
    in-sample dropped; other columns one-hot with the first level (as text, sorted) dropped, kept as level
    codes. Returns the design and the columns left out (more than ``MAX_LEVELS`` levels)."""
    codes, levels, dense, left_out, z = [], [], [], [], []
    for c in columns:
        if c in numeric:
            v = frame[c].to_numpy(float)
            missing = np.isnan(v)
            mu, sd = (np.nanmean(v), np.nanstd(v)) if (~missing).any() else (0.0, 0.0)
            z.append((np.where(missing, mu, v) - mu) / (sd or 1.0))
            if missing.any() and not missing.all():
                dense.append(missing.astype(float))
            continue
        level, names = pd.factorize(frame[c].astype("string").fillna("<NA>"), sort=True)
        if len(names) > MAX_LEVELS:
            left_out.append(c)
        elif len(names) > 1:  # one level: no column
            codes.append(level.astype(np.int64))
            levels.append(len(names))
    second = z[:MAX_SQUARED]
    dense += z + [a * b for i, a in enumerate(second) for b in second[i:]]
    block = np.column_stack(dense) if dense else np.zeros((len(frame), 0))
    return logistic.Design(codes, levels, block[:, block.std(axis=0) > 0]), left_out


def pmse(original: pd.DataFrame, released: pd.DataFrame, columns: list[str], numeric: set[str]) -> dict:
    """Propensity-score MSE of a main-effects logistic regression, its null expectation and their ratio."""
    if not len(original) or not len(released):  # nothing to tell apart (a release that kept no row)
        return {"pmse": None, "null_expectation": None, "ratio": None, "parameters": 0, "left_out": [], "every": 1}
    step = max(1, math.ceil(max(len(original), len(released)) / MAX_PMSE_ROWS))
    original, released = original.iloc[::step], released.iloc[::step]
    stacked = pd.concat([original[columns], released[columns]], ignore_index=True)
    label = np.r_[np.zeros(len(original)), np.ones(len(released))]
    x, left_out = design(stacked, columns, numeric)
    big_n, c = len(label), len(released) / len(label)
    k = x.width + 1  # parameters, with the intercept
    score = logistic.propensities(x, label) if x.width else np.full(big_n, c)  # unpenalized in effect
    value = float(np.mean((score - c) ** 2))
    null = null_pmse(k, c, big_n)
    return {
        "pmse": value,
        "null_expectation": null,
        "ratio": value / null if null else None,
        "parameters": k,
        "left_out": left_out,
        "every": step,
    }


def null_pmse(k: int, c: float, big_n: int) -> float:
    """E[pMSE] under the null (Snoke et al. 2018): (k − 1)(1 − c)²c/N."""
    return (k - 1) * (1 - c) ** 2 * c / big_n
