"""Disclosure risk of an SDC release on the policy's key: k-anonymity, individual, global and household risk,
and distinct l-diversity, each over a record's anonymity set, counted one of three ways (``COUNTS``).

- **released** (what is published, and what local suppression reaches): a record's released key cell, the
  released records with the same key combination, a suppressed (missing) value a value of its own
  (Samarati's and Sweeney's k-anonymity with the suppression mark as a value; ARX counts a suppressed record
  as removed from every class, never as matching one). A function of the released table alone. Every record
  of a person's released cell is compatible with the person's true key, so each figure bounds the intruder's
  (f_k and l from below, the risks from above).
- **intruder** (the steward's internal report; the thresholds are checked on it too): the anonymity set of
  an intruder who knows a person's true key, the released records compatible with it (every non-missing key
  value equal to the person's). The person's key is their record's key as the release codes it before local
  suppression (``persons``): through a recoding, the recoded value, which the public hierarchies give anyone
  who knows the true value. After a perturbative step (RA, PRAM, noise, a swap) it is the perturbed record's,
  so the count is of records compatible with a released combination, not of persons; the method's own risk
  statement (RA's Pa, a swap's p_known and p_hidden) stays its guarantee.
- **freqcalc** (beside the published figures, for comparison, never the guarantee): sdcMicro's ``freqCalc``,
  a missing value matching every value on either side. It overstates f_k: a person whose only difference
  from others is a value suppressed in their own record is counted with them, though an intruder who knows
  the true value excludes them.

The measures (sdcMicro ``measure_risk``/``indivRisk``, Benedetti & Franconi 1998; Franconi & Polettini 2004;
Templ, Kowarik & Meindl 2015, JSS 67(4)), each over a record's set of f_k records:

- k-anonymity: the smallest f_k; the records with f_k < 2 (sample uniques) and f_k < 3.
- Individual risk: with F_k the set's summed weights and p_k = f_k/F_k, the posterior of F_k − f_k is
  negative binomial (f_k, p_k) and r_k = E[1/F_k | f_k] = Σ_{y≥0} C(f_k+y−1, y) p_k^{f_k} q_k^y / (f_k+y)
  = ∫_0^1 p_k^{f_k} t^{f_k−1} (1 − q_k t)^{−f_k} dt = (p_k / f_k) · ₂F₁(1, 1; f_k+1; q_k), q_k = 1 − p_k (the
  last step is Euler's transformation of p^f/f · ₂F₁(f, f; f+1; q)). Without weights F_k = f_k and
  r_k = 1/f_k, as sdcMicro. This is ``indivRisk(method = "exact")``, whose published test figures it
  reproduces; ``measure_risk`` calls the default "approx", which for f_k > 2 with weights uses
  p_k/(f_k − q_k) instead (the same 1/f_k without weights). The global risk is the expected number of
  re-identifications Σ_k r_k (sdcMicro's ``global_risk_ER``) over the records.
- Household risk (sdcMicro's hierarchical risk): 1 − Π_{i∈h}(1 − r_i) over a household's members.
- Distinct l-diversity: the number of distinct sensitive values in the set (a missing one counts as one value).

Sets are found by hashing key codes (``privrelease.core.sdc.coding``): the released count groups rows; the two others
compare rows by which keys they miss (``matches``), so the cost is (patterns) × rows, never rows × rows.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import pandas as pd
import scipy  # submodules load on first use: scipy.special only for weighted risk

from privrelease.core.sdc import coding

Count = Literal["released", "intruder", "freqcalc"]
COUNTS: dict[str, str] = {
    "released": "the released records with the same key combination, a suppressed (missing) value a value of its "
    "own; every one of them is compatible with the person's true key, so this f_k is at most the intruder's",
    "intruder": "the released records compatible with the person's true key as the release codes it (every "
    "non-missing key value equal to the person's)",
    "freqcalc": "sdcMicro's freqCalc: a missing key value matches every value, on either side",
}
FREQUENCY_BANDS = ((1, 1), (2, 2), (3, 4), (5, 9), (10, None))  # cell-size bands of the risk charts


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


def _distinct(group: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Per group, how many distinct ``values`` (codes ≥ 0) its rows hold."""
    span = int(values.max(initial=0)) + 1
    pairs = pd.unique(group.astype(np.int64) * span + values)
    return np.bincount(pairs // span, minlength=size)


def released(
    codes: np.ndarray, weights: np.ndarray | None = None, values: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """For each record: how many records share its released key codes exactly (−1, a suppressed value, one value
    of its own), their summed weights and (given ``values``) how many distinct values they hold."""
    group, first = coding.groups(coding.combined(codes, list(range(codes.shape[1]))))
    size = len(first)
    w = np.ones(len(codes)) if weights is None else weights
    n = np.bincount(group, minlength=size)[group]
    wsum = np.bincount(group, weights=w, minlength=size)[group]
    distinct = None if values is None else _distinct(group, values, size)[group]
    return n, wsum, distinct


def matches(
    codes: np.ndarray, queries: np.ndarray, weights: np.ndarray | None = None, values: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """For each query row of key codes: how many records match it, their summed weights and (given ``values``,
    one code per record) how many distinct values they hold. A record matches a query where, key by key, the
    two are equal or either is missing (−1): sdcMicro's ``freqCalc`` when the queries are the records, the
    intruder's compatibility when the queries are complete true keys.

    Rows are grouped by which keys they miss: a query pattern P and a record pattern Q are compared on the keys
    outside P ∪ Q only, with one hash of those keys, so the cost is (query patterns + record patterns) × rows."""
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


def key_codes(frame: pd.DataFrame, keys: list[str], persons: pd.DataFrame | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The key's codes of the released records (a missing value −1) and of the persons, coded alike (default: the
    records themselves); a person's missing value is a code of its own, which only a released missing value matches."""
    if not len(frame):
        return np.zeros((0, len(keys)), np.int64), np.zeros((0 if persons is None else len(persons), len(keys)), np.int64)
    rec, per = [], []
    for k in keys:
        if persons is None:
            r = p = coding.codes(frame[k])
        else:  # one coding of both (as objects: a suppressed integer column is nullable, the person's is not)
            both = coding.codes(pd.concat([frame[k].astype(object), persons[k].astype(object)], ignore_index=True))
            r, p = both[: len(frame)], both[len(frame) :]
        rec.append(r)
        per.append(np.where(p >= 0, p, max(int(r.max(initial=-1)), int(p.max(initial=-1))) + 1))
    return np.column_stack(rec), np.column_stack(per)


def record_cells(
    frame: pd.DataFrame,
    keys: list[str],
    sensitive: list[str] | str | None = None,
    weight: str | None = None,
    cluster: str | None = None,
    count: Count = "released",
    persons: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per record of ``frame`` (the released table), in its order: ``fk`` (the size of its anonymity set, counted
    as ``count`` says: ``COUNTS``), ``pop_fk`` (the set's summed weights, or fk), ``l`` (the fewest distinct values
    of a sensitive variable in it), ``cell`` (its released key combination as a number, a missing value one value
    of its own) and, given, its ``cluster``. For ``intruder``, row i of ``persons`` is the person behind record i
    (their key as the release codes it before local suppression; default the released key)."""
    sens = [sensitive] if isinstance(sensitive, str) else list(sensitive or [])
    keyed, people = key_codes(frame, keys, persons)
    w = frame[weight].to_numpy(dtype=float) if weight else None
    values = [coding.codes(frame[s]) + 1 for s in sens]  # a missing value: its own value 0

    def sets(v: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        if count == "released":
            return released(keyed, w, v)
        return matches(keyed, keyed if count == "freqcalc" else people, w, v)

    fk, pop, ell = sets(values[0] if values else None)
    out = {"fk": fk, "pop_fk": pop if weight else fk.astype(float), "cell": coding.combined(keyed, list(range(len(keys))))}
    out["l"] = np.min([ell, *(sets(v)[2] for v in values[1:])], axis=0) if values else np.full(len(frame), np.nan)
    if cluster:
        out["cluster"] = frame[cluster].to_numpy()
    return pd.DataFrame(out)


def cells(
    frame: pd.DataFrame, keys: list[str], sensitive: list[str] | str | None = None, weight: str | None = None
) -> pd.DataFrame:
    """One row per distinct (f_k, F_k, l) of the records' released cells and how many records have it."""
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
    count: Count = "released",
    persons: pd.DataFrame | None = None,
) -> dict:
    """k-anonymity, sdcMicro's individual and global risk (and, with ``cluster``, household risk), and distinct
    l-diversity of one table, over its records' anonymity sets counted as ``count`` says (``record_cells``).
    With ``above``, also the records whose individual risk exceeds it."""
    per = record_cells(frame, keys, sensitive, weight, cluster, count, persons)
    f = per["fk"].to_numpy(float)
    risk = nb_risk(f, per["pop_fk"].to_numpy(float))  # f ≥ 1: a person's own record is compatible with them
    er = float(risk.sum())
    n = len(per)
    out = {
        "records": n,
        "cells": int(len(pd.unique(per["cell"].to_numpy()))),
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


def record_risks(
    frame: pd.DataFrame, keys: list[str], count: Count = "released", persons: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per record, in the table's order: f_k and r_k = 1/f_k (no weights), counted as ``count`` says."""
    f = record_cells(frame, keys, count=count, persons=persons)["fk"].to_numpy(np.int64)
    return pd.DataFrame({"fk": f, "risk": 1.0 / f})


def _band(lo: int, hi: int | None) -> str:
    return f"{lo}+" if hi is None else (f"{lo}" if lo == hi else f"{lo}-{hi}")
