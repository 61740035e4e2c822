"""Linked tables: the intruder's linear programs over every table published of one snapshot at once (the problem
τ-ARGUS's linked-tables mode solves).

Tables of one snapshot are sums of the same records: each cell is the sum of the finest cells it covers, the
finest cells being every combination of the leaf values of every dimension any of the tables has (a table without
a dimension covers all its values). The intruder knows each table's published cells (an empty cell is a known
zero), that no finest cell is below zero, and nothing else. For a suppressed sensitive cell of any table, the
interval [min, max] of its cover's sum over the finest tables that agree with all of that is two linear programs
(HiGHS, through ``highspy``: one model, each cell's two solves started from the last basis). A table by the cell key method publishes every cell, each within D of its
count: for the intruder, each of its cells lies within D of what it shows (and is at least zero). Each table's own
audit (``audit``) cannot see what a second table adds: two tables sharing a margin, each safe alone, can together
pin a cell down. A table that would leave a sensitive cell's
interval narrower than its protection, with the tables published before it, is not published.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

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
    rows, low_side, high_side = [], [], []
    for c, t in zip(covers, tables):  # what each table publishes: exactly, or within its slack (and at least zero)
        shown = t.table.values[~t.suppressed]
        rows.append(c[~t.suppressed])
        low_side.append(np.maximum(shown - t.slack, 0.0) if t.slack else shown)
        high_side.append(shown + t.slack)
    cap = CAP * max(1.0, max(float(np.abs(t.table.values).max(initial=0)) for t in tables))
    solver = _Intervals(sparse.vstack(rows, format="csc"), np.concatenate(low_side), np.concatenate(high_side), cap)
    exposed = []
    for c, t in zip(covers, tables):
        bad = []
        for cell in np.flatnonzero(t.suppressed & t.sensitive):
            x, tol = float(t.table.values[cell]), TOLERANCE * max(1.0, abs(float(t.table.values[cell])))
            low, high = solver.interval(c[cell].indices)
            if not (low <= x - t.lower[cell] + tol and high >= x + t.upper[cell] - tol):  # NaN: failed, exposed
                bad.append(cell)
        exposed.append(np.array(bad, dtype=np.int64))
    return exposed


class _Intervals:
    """The intruder's LP over the finest cells, built once (HiGHS through ``highspy``); each cell's interval is two
    solves with its cover as the objective, each started from the last optimal basis by the primal simplex (only the
    costs change, so the basis stays feasible and the simplex goes on from where it was: a linked audit of a 625-cell
    table with a 10,000-cell one 10 s instead of 113 s of fresh LPs, ``bench/RESULTS.md``). A solve that ends other
    than optimal gives NaN."""

    def __init__(self, a: sparse.csc_matrix, lower: np.ndarray, upper: np.ndarray, cap: float):
        import highspy

        self._highspy = highspy
        self.h = highspy.Highs()
        self.h.setOptionValue("output_flag", False)
        self.h.setOptionValue("presolve", "off")  # each solve goes on from the last basis: presolve would discard it
        self.h.setOptionValue("simplex_strategy", 4)  # primal: a cost change keeps the basis primal feasible
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = a.shape[1], a.shape[0]
        lp.col_cost_ = np.zeros(a.shape[1])
        lp.col_lower_, lp.col_upper_ = np.zeros(a.shape[1]), np.full(a.shape[1], cap)
        lp.row_lower_, lp.row_upper_ = lower, upper
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = a.indptr, a.indices, a.data
        self.h.passModel(lp)
        self.costed = np.zeros(0, dtype=np.int32)

    def interval(self, columns: np.ndarray) -> tuple[float, float]:
        h, hs = self.h, self._highspy
        h.changeColsCost(len(self.costed), self.costed, np.zeros(len(self.costed)))
        self.costed = np.asarray(columns, dtype=np.int32)
        h.changeColsCost(len(self.costed), self.costed, np.ones(len(self.costed)))
        out = []
        for sense in (hs.ObjSense.kMinimize, hs.ObjSense.kMaximize):
            h.changeObjectiveSense(sense)
            h.run()
            ok = h.getModelStatus() == hs.HighsModelStatus.kOptimal
            out.append(h.getInfo().objective_function_value if ok else np.nan)
        return out[0], out[1]
