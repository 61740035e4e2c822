"""Disclosure-risk and utility measures of an SDC release (RA, swapping), as sdcMicro computes them.

IL1s, means and correlations run in DuckDB over the registered frames, so it does not copy them;
frequencies of the key combination and l-diversity (``matches``: rows hashed by their key codes), the
nearest-neighbour linkage (exact: direct distances to the distinct originals, or scipy's KD-tree when
they are many) and pMSE (a logistic regression over level codes, ``core.sdc.logistic``) run in numpy.

- k-anonymity: f_k, the number of records sharing record k's combination of key columns; the
  records in cells with f_k < 2 (sample uniques) and f_k < 3 violate 2- and 3-anonymity.
- Individual risk (sdcMicro ``measure_risk``/``indivRisk``, Benedetti & Franconi 1998; Franconi &
  Polettini 2004; Templ, Kowarik & Meindl 2015, JSS 67(4)): with F_k the weighted population
  frequency and p_k = f_k/F_k, the posterior of F_k − f_k is negative binomial (f_k, p_k) and
  r_k = E[1/F_k | f_k] = Σ_{y≥0} C(f_k+y−1, y) p_k^{f_k} q_k^y / (f_k+y)
      = ∫_0^1 p_k^{f_k} t^{f_k−1} (1 − q_k t)^{−f_k} dt = (p_k / f_k) · ₂F₁(1, 1; f_k+1; q_k),
  q_k = 1 − p_k (the last step is Euler's transformation of p^f/f · ₂F₁(f, f; f+1; q)). Without
  weights F_k = f_k and r_k = 1/f_k, as sdcMicro. This is ``indivRisk(method = "exact")``, whose
  published test figures it reproduces; ``measure_risk`` calls the default "approx", which for
  f_k > 2 with weights uses p_k/(f_k − q_k) instead (the same 1/f_k without weights). The global risk is the expected number of
  re-identifications Σ_k r_k (sdcMicro's ``global_risk_ER``).
- Distinct l-diversity: the number of distinct sensitive values in a record's cell (missing
  counts as one value).
- Record linkage in rank space: each column is mapped to mid-ranks among the original values;
  a perturbed record is linked when its nearest original record (Euclidean, in rank space) is
  its own (ties shared: 1/ties).
- IL1s (sdcMicro ``dUtility``; Mateo-Sanz, Sebé & Domingo-Ferrer 2004):
  (1/(p·n)) Σ_j Σ_i |x_ij − x'_ij| / (√2·S_j), S_j the original column's standard deviation.
- pMSE (Woo et al. 2009; Snoke et al. 2018): a logistic regression of "is released" on the
  columns (numeric ones with their squares and pairwise products) over the stacked tables (``core.sdc.logistic``);
  pMSE = mean (p̂_i − c)², c the released share. Snoke et al.'s null, a release drawn from the
  original's own distribution (as RA's and a swap's are made from the original), has expectation
  (k − 1)(1 − c)²c/N for k parameters and N stacked records; two independent samples of one
  distribution have (k − 1)c(1 − c)/N, 1/(1 − c) times more (tests/test_sdc_measures.py simulates both).
"""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pandas as pd
import scipy  # submodules load on first use: scipy.special only for weighted risk, scipy.spatial for a large linkage

from core.sdc import coding, logistic

FREQUENCY_BANDS = ((1, 1), (2, 2), (3, 4), (5, 9), (10, None))  # cell-size bands of the risk charts
MAX_LEVELS = 50  # a categorical column with more levels is left out of pMSE's model (and named)
MAX_SQUARED = 8  # pMSE's second-order terms: among the first numeric columns of its list
MAX_PMSE_ROWS = 100_000  # pMSE is fitted on every s-th record of each table, s the smallest stride within this


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def nb_risk(f: np.ndarray, F: np.ndarray) -> np.ndarray:
    """sdcMicro's individual risk r_k = E[1/F_k | f_k] = (p/f)·₂F₁(1, 1; f+1; q), and 1/f where F = f."""
    f, F = np.asarray(f, dtype=float), np.asarray(F, dtype=float)
    p = np.minimum(f / F, 1.0)
    out = 1.0 / f
    weighted = p < 1.0
    if weighted.any():  # without weights (F = f) no ₂F₁, and no 0.3 s import of scipy.special
        out[weighted] = p[weighted] / f[weighted] * scipy.special.hyp2f1(1.0, 1.0, f[weighted] + 1.0, 1.0 - p[weighted])
    return out


def _patterns(codes: np.ndarray) -> np.ndarray:
    """Each row's set of missing keys, as a bit mask."""
    return (codes < 0).astype(np.int64) @ (1 << np.arange(codes.shape[1], dtype=np.int64))


def matches(
    codes: np.ndarray, queries: np.ndarray, weights: np.ndarray | None = None, values: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """For each query row of key codes: how many records match it, their summed weights and (given
    ``values``, one code per record) how many distinct values they hold. A record matches a query
    where, key by key, the two are equal or either is missing (−1), as sdcMicro's ``freqCalc``.

    Rows are grouped by which keys they miss: a query pattern P and a record pattern Q are compared on
    the keys outside P ∪ Q only, with one hash of those keys, so the cost is (query patterns + record
    patterns) × rows, never rows × rows."""
    w = np.ones(len(codes)) if weights is None else weights
    n, wsum = np.zeros(len(queries), dtype=np.int64), np.zeros(len(queries))
    span = int(values.max(initial=0)) + 1 if values is not None else 0
    found: list[np.ndarray] = []
    rbits, qbits = _patterns(codes), _patterns(queries)
    for q_pattern in np.sort(pd.unique(qbits)):
        qi = np.flatnonzero(qbits == q_pattern)
        for r_pattern in np.sort(pd.unique(rbits)):
            ri = np.flatnonzero(rbits == r_pattern)
            shared = [j for j in range(codes.shape[1]) if not ((q_pattern | r_pattern) >> j) & 1]
            alike = queries is codes and q_pattern == r_pattern  # the records are the queries
            rows = codes[ri] if alike else np.vstack([codes[ri], queries[qi]])
            group, distinct_keys = pd.factorize(coding.combined(rows, shared))
            rg, qg, size = group[: len(ri)], group if alike else group[len(ri) :], len(distinct_keys)
            n[qi] += np.bincount(rg, minlength=size)[qg]  # a query's group may hold no record: 0
            wsum[qi] += np.bincount(rg, weights=w[ri], minlength=size)[qg]
            if values is not None:  # the distinct (group, value) pairs by group, then each query's group's values
                pairs = np.sort(pd.unique(rg * span + values[ri]))
                per_group = np.bincount(pairs // span, minlength=size)
                start, take = np.cumsum(per_group) - per_group, per_group[qg]
                at = np.repeat(start[qg] - np.cumsum(take) + take, take) + np.arange(take.sum())
                found.append(np.repeat(qi, take) * span + pairs[at] % span)
    distinct = None
    if values is not None:  # a query's values over every record pattern it matched, each once
        seen = pd.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)
        distinct = np.bincount(seen // span, minlength=len(queries))
    return n, wsum, distinct


def record_cells(
    frame: pd.DataFrame,
    keys: list[str],
    sensitive: list[str] | str | None = None,
    weight: str | None = None,
    cluster: str | None = None,
) -> pd.DataFrame:
    """Per record, in the table's order: ``fk`` (records sharing its key combination), ``pop_fk`` (their
    summed weights, or fk), ``l`` (the fewest distinct values of a sensitive variable among them), ``cell``
    (its key combination as a number, a missing value one value of its own) and, given, its ``cluster``.

    A missing key value matches every value, as sdcMicro's ``freqCalc`` counts it: a suppressed cell
    could be anything, so a record with one is counted with every record it could be. A missing
    sensitive value counts as one value."""
    sens = [sensitive] if isinstance(sensitive, str) else list(sensitive or [])
    keyed = np.column_stack([coding.codes(frame[k]) for k in keys]) if len(frame) else np.zeros((0, len(keys)), np.int64)
    w = frame[weight].to_numpy(dtype=float) if weight else None
    values = [coding.codes(frame[s]) + 1 for s in sens]  # a missing value: its own value 0
    fk, pop, ell = matches(keyed, keyed, w, values[0] if values else None)
    out = {"fk": fk, "pop_fk": pop if weight else fk.astype(float), "cell": coding.combined(keyed, list(range(len(keys))))}
    if values:
        out["l"] = np.min([ell, *(matches(keyed, keyed, None, v)[2] for v in values[1:])], axis=0)
    else:
        out["l"] = np.full(len(frame), np.nan)
    if cluster:
        out["cluster"] = frame[cluster].to_numpy()
    return pd.DataFrame(out)


def cells(
    frame: pd.DataFrame, keys: list[str], sensitive: list[str] | str | None = None, weight: str | None = None
) -> pd.DataFrame:
    """One row per distinct (f_k, F_k, l) of the records (``fk``, ``pop_fk``, ``l``) and how many records have it."""
    per = record_cells(frame, keys, sensitive, weight)
    return (
        per.groupby(["fk", "pop_fk", "l"], dropna=False)
        .size()
        .rename("records")
        .reset_index()
        .sort_values(["fk", "pop_fk", "l"])
        .reset_index(drop=True)
    )


def household_risk(risk: np.ndarray, cluster: pd.Series) -> np.ndarray:
    """sdcMicro's household (hierarchical) risk, per record: the chance that at least one member of its
    household is re-identified, 1 − Π_{i∈h}(1 − r_i), members taken as independent."""
    codes = pd.factorize(cluster, use_na_sentinel=True)[0]
    codes = np.where(codes >= 0, codes, codes.max(initial=-1) + 1 + np.arange(len(codes)))  # no household: alone
    with np.errstate(divide="ignore"):  # a member at risk 1: log 0 = −inf, and the household's risk is 1
        log_safe = pd.Series(np.log1p(-np.minimum(risk, 1.0)))
    return -np.expm1(log_safe.groupby(codes).transform("sum").to_numpy())


def disclosure(
    frame: pd.DataFrame,
    keys: list[str],
    sensitive: list[str] | str | None = None,
    weight: str | None = None,
    cluster: str | None = None,
    above: float | None = None,
) -> dict:
    """k-anonymity, sdcMicro's individual and global risk (and, with ``cluster``, household risk), and
    distinct l-diversity of one table, from its records' key cells (``record_cells``). With ``above``,
    also the records whose individual risk exceeds it."""
    per = record_cells(frame, keys, sensitive, weight, cluster)
    f = per["fk"].to_numpy(float)
    risk = nb_risk(f, per["pop_fk"].to_numpy(float))
    er = float(risk.sum())
    n = len(per)
    combos = len(pd.unique(per["cell"].to_numpy()))
    out = {
        "records": n,
        "cells": int(combos),
        "k": int(f.min()) if n else 0,
        "records_f_below_2": int((f < 2).sum()),
        "records_f_below_3": int((f < 3).sum()),
        "expected_reidentifications": er,
        "global_risk": er / n if n else 0.0,
        "max_individual_risk": float(risk.max(initial=0.0)),
        "records_by_cell_size": {_band(lo, hi): int(((f >= lo) & (f <= (hi or math.inf))).sum()) for lo, hi in FREQUENCY_BANDS},
    }
    if above is not None:
        out["records_risk_above"] = {"above": above, "records": int((risk > above).sum())}
    if sensitive:
        ell = per["l"].to_numpy(float)
        out |= {"l_min": int(ell.min()) if n else 0, "records_l_below_2": int((ell < 2).sum())}
    if cluster:
        hh = household_risk(risk, per["cluster"])
        out |= {"household_risk_max": float(hh.max(initial=0.0)), "household_expected_reidentifications": float(hh.sum())}
    return out


def record_risks(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per record, in the table's order: f_k and r_k = 1/f_k (no weights; a missing key matches every value)."""
    f = record_cells(frame, keys)["fk"].to_numpy(np.int64)
    return pd.DataFrame({"fk": f, "risk": 1.0 / f})


def _band(lo: int, hi: int | None) -> str:
    return f"{lo}+" if hi is None else (f"{lo}" if lo == hi else f"{lo}-{hi}")


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
