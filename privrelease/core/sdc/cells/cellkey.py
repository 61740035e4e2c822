"""The cell key method (ABS TableBuilder; the R packages ``cellKey`` and ``ptable``): a count perturbed by noise that
the cell's own records select, so the same cell gets the same perturbation in every table.

Each record holds a key drawn once, uniform on [0, 1) (never published); a cell's key is the sum of its records' keys
mod 1, so a cell (a set of records) has one key whatever table it is a cell of. The perturbation table is the
steward's (``CellKey``: the largest perturbation D, the variance V, js): for each count n, a distribution over d in
[-D, D] with n + d ≥ 0 and n + d not in 1..js, of mean 0 and variance V where it can be, the maximum-entropy one
(p(d) ∝ exp(a·d + b·d²), as ``ptable`` builds it); counts from D + js on share one row. The cell's key picks d from
that row's cumulative distribution. A zero stays zero. Margins are perturbed as cells of their own: additivity is
not restored, as the ABS does not.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares

from privrelease.core.sdc.cells.rules import CellKey


def row(n: int, rule: CellKey) -> tuple[np.ndarray, np.ndarray]:
    """The perturbations allowed for a count n and their probabilities."""
    if n == 0:
        return np.array([0]), np.array([1.0])
    d = np.arange(-rule.D, rule.D + 1)
    after = n + d
    d = d[(after >= 0) & ~((after >= 1) & (after <= rule.js))]
    if d.size == 1:
        return d, np.array([1.0])

    def probabilities(theta: np.ndarray) -> np.ndarray:
        z = theta[0] * d + theta[1] * d.astype(float) ** 2
        w = np.exp(z - z.max())
        return w / w.sum()

    def moments(theta: np.ndarray) -> np.ndarray:
        p = probabilities(theta)
        return np.array([p @ d, p @ d.astype(float) ** 2 - rule.V])

    fit = least_squares(moments, x0=np.array([0.0, -1.0 / (2 * rule.V)]), bounds=([-20, -20], [20, 20]))
    return d, probabilities(fit.x)


def table(rule: CellKey, largest: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """The perturbation table: counts 0 .. D + js each a row, a larger count the last row's."""
    return {n: row(n, rule) for n in range(0, min(largest, rule.D + rule.js + 1) + 1)}


def cell_keys(record_keys: np.ndarray, cells: np.ndarray, size: int) -> np.ndarray:
    """Each cell's key: its records' keys summed mod 1 (``cells`` each record's cell, one cell per entry)."""
    return np.mod(np.bincount(cells, weights=record_keys, minlength=size), 1.0)


def perturb(counts: np.ndarray, keys: np.ndarray, rule: CellKey) -> np.ndarray:
    """Each count plus the perturbation its cell key picks from its row of the table."""
    counts = np.rint(counts).astype(np.int64)
    rows = table(rule, int(counts.max(initial=0)))
    last = max(rows)
    out = counts.copy()
    for i, (n, k) in enumerate(zip(counts, keys)):
        d, p = rows[min(int(n), last)]
        out[i] = n + d[min(int(np.searchsorted(np.cumsum(p), k, side="right")), d.size - 1)]
    return out
