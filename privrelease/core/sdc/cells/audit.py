"""The intruder's audit: each suppressed cell's feasible interval given everything published, and the verdict.

The intruder knows every published cell, the table's relations (each parent the sum of its children) and that
no cell is below zero (counts, and sums of non-negative contributions). For a suppressed cell p the interval
[min z_p, max z_p] over the tables z that agree with all that is two linear programs (``scipy.optimize.linprog``,
HiGHS) over the suppressed cells alone, the published ones moved to the right-hand side. A sensitive cell is
protected when its interval reaches its protection interval: ``min ≤ X - L`` and ``max ≥ X + U``. A table with
a sensitive cell not protected is not published.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import linprog
from scipy.sparse.csgraph import connected_components

TOLERANCE = 1e-6  # relative, of a cell's value (at least 1): the LPs' own precision
CAP = 1e3  # a bound on every cell, in multiples of the largest value (see ``intervals``)
BATCH = 1500  # variables in one LP of copies


@dataclass(frozen=True)
class Audit:
    cells: np.ndarray  # the cells audited
    low: np.ndarray  # their feasible intervals (inf: unbounded above)
    high: np.ndarray
    exposed: np.ndarray  # the audited sensitive cells whose interval is narrower than their protection

    @property
    def passed(self) -> bool:
        return self.exposed.size == 0


def _copies(a_eq, b_eq, picks: list[int], sign: float, cap: float) -> np.ndarray:
    """Optimum of ``sign * z_pick`` for each pick, in one LP: one copy of the block per pick (the copies share no
    constraint, so each copy's part of the optimum is its own LP's optimum; HiGHS is called once)."""
    m, k = a_eq.shape[1], len(picks)
    c = np.zeros(m * k)
    c[np.arange(k) * m + np.asarray(picks)] = sign
    big = sparse.block_diag([a_eq] * k, format="csr")
    res = linprog(c, A_eq=big, b_eq=np.tile(b_eq, k), bounds=(0, cap), method="highs")
    if res.status != 0:
        return np.full(k, np.nan)  # the audit fails closed
    return res.x[np.arange(k) * m + np.asarray(picks)]


def intervals(
    a: sparse.csr_matrix, values: np.ndarray, suppressed: np.ndarray, cells: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The feasible interval of each of ``cells`` (suppressed ones) given the published cells and the relations:
    each over its own block of suppressed cells (those linked through relations), which no other block constrains.
    Every cell is bounded by ``CAP`` times the largest value (a bound the intruder does not have: it can only
    narrow an interval, so the verdict errs towards refusing); an upper end at that bound is reported unbounded."""
    hidden = np.flatnonzero(suppressed)
    low, high = np.full(len(cells), np.nan), np.full(len(cells), np.nan)
    if hidden.size == 0 or len(cells) == 0:
        return low, high
    cap = CAP * max(1.0, float(np.abs(values).max()))
    a = a.tocsc()
    a_hidden = a[:, hidden].tocsr()
    rhs = -(a @ np.where(suppressed, 0.0, values))
    _, block = connected_components((abs(a_hidden).T @ abs(a_hidden)).tocsr(), directed=False)
    where = {int(c): i for i, c in enumerate(hidden)}
    mine = np.array([block[where[int(c)]] for c in cells])
    for b in np.unique(mine):
        members = np.flatnonzero(block == b)
        sub = a_hidden[:, members].tocsr()
        rows = np.flatnonzero(np.diff(sub.indptr) > 0)
        local = {int(hidden[m]): k for k, m in enumerate(members)}
        asked = np.flatnonzero(mine == b)
        for chunk in np.array_split(asked, max(1, int(np.ceil(len(asked) * members.size / BATCH)))):
            picks = [local[int(cells[j])] for j in chunk]
            low[chunk] = _copies(sub[rows], rhs[rows], picks, 1.0, cap)
            top = _copies(sub[rows], rhs[rows], picks, -1.0, cap)
            high[chunk] = np.where(top >= cap * (1 - 1e-9), np.inf, top)
    return low, high


def audit(a, values, suppressed, sensitive, lower, upper, everything: bool = False) -> Audit:
    """The sensitive cells' intervals (``everything``: every suppressed cell's) and the ones exposed."""
    published = np.flatnonzero(sensitive & ~suppressed)  # a sensitive cell published: exposed outright
    cells = np.flatnonzero((suppressed if everything else sensitive) & suppressed)
    low, high = intervals(a, values, suppressed, cells)
    tol = TOLERANCE * np.maximum(1.0, np.abs(values[cells]))
    s = sensitive[cells]
    bad = s & ~(
        (low <= values[cells] - lower[cells] + tol) & (high >= values[cells] + upper[cells] - tol)
    )  # a NaN (the LP failed) is exposed: fail closed
    return Audit(cells, low, high, np.concatenate([published, cells[bad]]))
