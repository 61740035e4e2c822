"""The intruder's attack on a published SDC table, written apart from the product (``privrelease.core.sdc.cells``).

The intruder's unknowns are the table's innermost cells (one per combination of the data's values), each at
least zero; every published cell, margin or sub-total, says that the innermost cells it covers add up to its
value (the hierarchies are public: the policy's). A suppressed cell's feasible interval is the least and the most
its covered cells can add up to (two LPs, dense, ``scipy.optimize.linprog``). The product instead writes each
parent as the sum of its children and solves over the suppressed cells only: the same polytope, reached another way.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from scipy.optimize import linprog


def chain(value: str, levels: list[dict[str, str]]) -> list[str]:
    """A value and the groups above it, as the policy's levels map it (an unmapped name stays)."""
    out = [value]
    for level in levels:
        out.append(level.get(out[-1], out[-1]))
    return out


def cover(label: str, level: int, leaves: list[str], levels: list[dict[str, str]]) -> list[str]:
    """The data values a node of a dimension adds up."""
    if level == 0:
        return list(leaves)
    if label in leaves and not any(label in chain(v, levels)[1:] and v != label for v in leaves):
        return [label]
    return [v for v in leaves if label in chain(v, levels)]


def truth(frame: pd.DataFrame, published: pd.DataFrame, group_by: list[str], hierarchies: dict, measure=None) -> np.ndarray:
    """Each published row's true value, counted from the records (``measure``: the column a sum adds)."""
    leaves = {d: sorted(frame[d].astype(str).unique()) for d in group_by}
    out = np.empty(len(published))
    for i, row in enumerate(published.itertuples(index=False)):
        mask = np.ones(len(frame), dtype=bool)
        for d in group_by:
            c = cover(getattr(row, d), getattr(row, f"{d}_level"), leaves[d], hierarchies.get(d, []))
            mask &= frame[d].astype(str).isin(c).to_numpy()
        out[i] = mask.sum() if measure is None else frame.loc[mask, measure].sum()
    return out


def attack(published: pd.DataFrame, frame: pd.DataFrame, group_by: list[str], hierarchies: dict, value: str):
    """Each suppressed row's feasible interval (low, high; inf: unbounded), by its position in ``published``."""
    return attack_linked([(published, group_by, hierarchies, value)], frame)[0]


def attack_linked(tables: list[tuple], frame: pd.DataFrame) -> list[dict]:
    """Linked tables of one data set, each (published, group_by, hierarchies, value column[, slack]): every table's
    suppressed rows' intervals given what all of them publish. The unknowns are the innermost cells over every
    dimension any table has; a row of a table without a dimension covers all of its values. A table with a slack
    (the cell key method's D) says each of its rows is within the slack of its value (and at least zero)."""
    dims = sorted({d for table in tables for d in table[1]})
    leaves = {d: sorted(frame[d].astype(str).unique()) for d in dims}
    inner = list(itertools.product(*(leaves[d] for d in dims)))
    index = {c: j for j, c in enumerate(inner)}
    matrices, shown, known, slacks = [], [], [], []
    for published, group_by, hierarchies, value, *slack in tables:
        slacks.append(slack[0] if slack else 0.0)
        rows = []
        for row in published.to_dict("records"):
            covered = [
                cover(row[d], row[f"{d}_level"], leaves[d], hierarchies.get(d, [])) if d in group_by else leaves[d] for d in dims
            ]
            v = np.zeros(len(inner))
            for c in itertools.product(*covered):
                v[index[c]] = 1.0
            rows.append(v)
        matrices.append(np.array(rows))
        status = published["status"].to_numpy()
        shown.append(np.isin(status, ["published", "empty"]))
        values = published[value].astype("Float64").fillna(0).to_numpy(dtype=float)
        known.append(np.where(status == "empty", 0.0, values))
    exact = [(m[s], k[s]) for m, s, k, d in zip(matrices, shown, known, slacks) if d == 0]
    near = [(m[s], k[s], d) for m, s, k, d in zip(matrices, shown, known, slacks) if d > 0]
    given = {}
    if exact:
        given |= {"A_eq": np.vstack([m for m, _ in exact]), "b_eq": np.concatenate([k for _, k in exact])}
    if near:
        given |= {
            "A_ub": np.vstack([np.vstack([m, -m]) for m, _, _ in near]),
            "b_ub": np.concatenate([np.concatenate([k + d, -np.maximum(k - d, 0)]) for _, k, d in near]),
        }
    out = []
    for m, s in zip(matrices, shown):
        found = {}
        for i in np.flatnonzero(~s):
            lo = linprog(m[i], **given, bounds=(0, None), method="highs")
            hi = linprog(-m[i], **given, bounds=(0, None), method="highs")
            assert lo.status == 0, lo.message
            found[int(i)] = (lo.fun, np.inf if hi.status == 3 else -hi.fun)
        out.append(found)
    return out
