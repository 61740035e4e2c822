"""Linked tables: the intruder's linear programs over every table published of one snapshot at once (the problem
τ-ARGUS's linked-tables mode solves).

Tables of one snapshot are sums of the same records: each cell is the sum of the finest cells it covers, the
finest cells being every combination of the leaf values of every dimension any of the tables has (a table without
a dimension covers all its values). The intruder knows each table's published cells (an empty cell is a known
zero), that no finest cell is below zero, and nothing else. For a suppressed sensitive cell of any table, the
interval [min, max] of its cover's sum over the finest tables that agree with all of that is two linear programs
(``scipy.optimize.linprog``, HiGHS). A table by the cell key method publishes every cell, each within D of its
count: for the intruder, each of its cells lies within D of what it shows (and is at least zero). Each table's own
audit (``audit``) cannot see what a second table adds: two tables sharing a margin, each safe alone, can together
pin a cell down. A table that would leave a sensitive cell's
interval narrower than its protection, with the tables published before it, is not published.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from privrelease.core.sdc.cells.audit import CAP, TOLERANCE
from privrelease.core.sdc.cells.table import Dim, Table

LIMIT = 200_000  # finest cells the linked audit takes; tables that together span more are refused (fail closed)


class TooLarge(ValueError):
    """The tables' finest cells are more than ``LIMIT``."""


@dataclass(frozen=True)
class Linked:
    """One table as the linked audit reads it: its cells, which were not published, which are sensitive, and
    their protection (below and above their value)."""

    name: str  # the release it is (or this request)
    table: Table
    suppressed: np.ndarray
    sensitive: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    slack: float = 0.0  # its published values are the truth to within this (a cell key table's D), else exact


def leaves_under(d: Dim) -> list[list[str]]:
    """Each node's leaf values (the total: all of them)."""
    label_of = {i: v for v, i in d.leaf.items()}
    out: list[list[str]] = [[] for _ in d.labels]

    def walk(node: int) -> list[str]:
        below = [v for c in d.children.get(node, []) for v in walk(c)] if node in d.children else [label_of[node]]
        out[node] = below
        return below

    walk(0)
    return out


def cover(t: Table, names: list[str], leaves: dict[str, list[str]]) -> sparse.csr_matrix:
    """Cells x finest cells (``names`` in order, each over ``leaves[name]``): 1 where the finest cell is under the cell."""
    mine = {d.name: d for d in t.dims}
    parts = []
    for name in names:
        at = {v: j for j, v in enumerate(leaves[name])}
        if name not in mine:  # the table sums over this dimension: every value
            parts.append(sparse.csr_matrix(np.ones((1, len(at)))))
            continue
        under = leaves_under(mine[name])
        rows = np.concatenate([np.full(len(vs), i) for i, vs in enumerate(under)])
        cols = np.array([at[v] for vs in under for v in vs], dtype=np.int64)
        parts.append(sparse.csr_matrix((np.ones(len(cols)), (rows, cols)), shape=(len(under), len(at))))
    product = parts[0]
    for p in parts[1:]:
        product = sparse.kron(product, p, format="csr")
    # the product's rows are the table's cells in ``names``' order of its dimensions: put them in the table's own
    shape = tuple(len(mine[n].labels) if n in mine else 1 for n in names)
    nodes = t.nodes()
    by_name = {d.name: nodes[:, i] for i, d in enumerate(t.dims)}
    row = np.ravel_multi_index(tuple(by_name[n] if n in mine else np.zeros(t.size, np.int64) for n in names), shape)
    return product[row]


def audit(tables: list[Linked]) -> list[np.ndarray]:
    """Each table's sensitive suppressed cells whose interval, given every table's published cells, is narrower
    than their protection (an LP that fails counts as narrower: fail closed). Raises ``TooLarge``."""
    names = sorted({d.name for t in tables for d in t.table.dims})
    leaves = {n: sorted({v for t in tables for d in t.table.dims if d.name == n for v in d.leaf}) for n in names}
    size = int(np.prod([len(leaves[n]) for n in names], dtype=np.float64))
    if size > LIMIT:
        raise TooLarge(f"the tables together have {size:,} finest cells, more than the {LIMIT:,} the linked audit takes")
    covers = [cover(t.table, names, leaves) for t in tables]
    exact = [(c[~t.suppressed], t.table.values[~t.suppressed]) for c, t in zip(covers, tables) if t.slack == 0]
    a_eq = sparse.vstack([a for a, _ in exact] or [sparse.csr_matrix((0, size))], format="csr")
    b_eq = np.concatenate([b for _, b in exact] or [np.zeros(0)])
    near = [(c[~t.suppressed], t.table.values[~t.suppressed], t.slack) for c, t in zip(covers, tables) if t.slack > 0]
    a_ub = sparse.vstack([m for a, _, _ in near for m in (a, -a)] or [sparse.csr_matrix((0, size))], format="csr")
    b_ub = np.concatenate([x for _, v, d in near for x in (v + d, -np.maximum(v - d, 0.0))] or [np.zeros(0)])
    cap = CAP * max(1.0, max(float(np.abs(t.table.values).max(initial=0)) for t in tables))
    given = {"A_eq": a_eq, "b_eq": b_eq} if a_eq.shape[0] else {}
    given |= {"A_ub": a_ub, "b_ub": b_ub} if a_ub.shape[0] else {}
    exposed = []
    for c, t in zip(covers, tables):
        bad = []
        for cell in np.flatnonzero(t.suppressed & t.sensitive):
            x, tol = float(t.table.values[cell]), TOLERANCE * max(1.0, abs(float(t.table.values[cell])))
            objective = c[cell].toarray().ravel()
            low = linprog(objective, **given, bounds=(0, cap), method="highs")
            high = linprog(-objective, **given, bounds=(0, cap), method="highs")
            if low.status != 0 or high.status != 0:
                bad.append(cell)
                continue
            if not (low.fun <= x - t.lower[cell] + tol and -high.fun >= x + t.upper[cell] - tol):
                bad.append(cell)
        exposed.append(np.array(bad, dtype=np.int64))
    return exposed
