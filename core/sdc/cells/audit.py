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

TOLERANCE = 1e-6  # relative, of a cell's value (at least 1): the LPs' own precision


@dataclass(frozen=True)
class Audit:
    cells: np.ndarray  # the cells audited
    low: np.ndarray  # their feasible intervals (inf: unbounded above)
    high: np.ndarray
    exposed: np.ndarray  # the audited sensitive cells whose interval is narrower than their protection

    @property
    def passed(self) -> bool:
        return self.exposed.size == 0


def intervals(
    a: sparse.csr_matrix, values: np.ndarray, suppressed: np.ndarray, cells: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The feasible interval of each of ``cells`` (suppressed ones) given the published cells and the relations."""
    hidden = np.flatnonzero(suppressed)
    where = {int(c): i for i, c in enumerate(hidden)}
    if hidden.size == 0:
        return np.zeros(0), np.zeros(0)
    a = a.tocsc()
    a_hidden = a[:, hidden]
    touched = np.flatnonzero(np.asarray(abs(a_hidden).sum(axis=1)).ravel() > 0)
    a_eq = a_hidden[touched]
    known = np.where(suppressed, 0.0, values)
    b_eq = -(a[touched] @ known)
    low, high = np.empty(len(cells)), np.empty(len(cells))
    for j, cell in enumerate(cells):
        c = np.zeros(hidden.size)
        c[where[int(cell)]] = 1.0
        lo = linprog(c, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")
        hi = linprog(-c, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")
        low[j] = lo.fun if lo.status == 0 else np.nan
        high[j] = np.inf if hi.status == 3 else (-hi.fun if hi.status == 0 else np.nan)
    return low, high


def audit(a, values, suppressed, sensitive, lower, upper, everything: bool = False) -> Audit:
    """The sensitive cells' intervals (``everything``: every suppressed cell's) and the ones exposed."""
    cells = np.flatnonzero(suppressed if everything else sensitive)
    low, high = intervals(a, values, suppressed, cells)
    tol = TOLERANCE * np.maximum(1.0, np.abs(values[cells]))
    s = sensitive[cells]
    bad = s & ~(
        (low <= values[cells] - lower[cells] + tol) & (high >= values[cells] + upper[cells] - tol)
    )  # a NaN (the LP failed) is exposed: fail closed
    return Audit(cells, low, high, cells[bad])
