"""The cell key method (ABS TableBuilder; the R packages ``cellKey`` and ``ptable``): a count perturbed by noise that
the cell's own records select, so the same cell gets the same perturbation in every table.

Each record holds a key drawn once (``privrelease.core.noise.keys``: uniform on the integers below 2^32, never
published); a cell's key is the sum of its records' keys mod 2^32, over 2^32, so a cell (a set of records) has one key
whatever table it is a cell of. The perturbation table is the
steward's (``CellKey``: the largest perturbation D, the variance V, js): for each count n, a distribution over d in
[-D, D] with n + d ≥ 0 and n + d not in 1..js, of mean 0 and variance V where it can be, the maximum-entropy one
(p(d) ∝ exp(a·d + b·d²), as ``ptable`` builds it); counts from D + js on share one row. The cell's key picks d from
that row's cumulative distribution. A zero stays zero. Margins are perturbed as cells of their own: additivity is
not restored, as the ABS does not.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from privrelease.core.noise.keys import KEY_BITS
from privrelease.core.sdc.cells.rules import CellKey
from privrelease.core.sdc.cells.table import Table


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

    steepest = max(20.0, 4.0 / rule.V)  # a small variance needs a steep quadratic: room for it
    start = -min(1.0 / (2 * rule.V), 8.0)  # a Gaussian's, but not so steep that the moments stop moving
    fit = least_squares(moments, x0=np.array([0.0, start]), bounds=([-20, -steepest], [20, 20]))
    return d, probabilities(fit.x)


def table(rule: CellKey, largest: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """The perturbation table: counts 0 .. D + js each a row, a larger count the last row's."""
    return {n: row(n, rule) for n in range(0, min(largest, rule.D + rule.js + 1) + 1)}


def cell_keys(t: Table, frame: pd.DataFrame, record_keys: np.ndarray) -> np.ndarray:
    """Each cell's key in [0, 1): the keys of the records under it (integers below 2^``KEY_BITS``, one per row of
    ``frame``, whose dimensions hold the table's labels) summed modulo 2^``KEY_BITS`` in integers, over 2^``KEY_BITS``:
    exact, so the same set of records has the same key whatever table the cell is in, a margin included. Each record
    counts in its leaf's cell and in every cell above it."""
    modulus = 1 << KEY_BITS
    leaves = {f"d{i}": frame[d.name].map(d.leaf).to_numpy(dtype=np.int64) for i, d in enumerate(t.dims)}
    base = pd.DataFrame(leaves | {"k": np.asarray(record_keys, dtype=np.int64)})
    base = base.groupby(list(leaves), sort=False, as_index=False)["k"].sum()  # below 2^63 for fewer than 2^31 records
    base["k"] %= modulus
    for i, d in enumerate(t.dims):
        up = pd.DataFrame([(n, a) for n in d.leaf.values() for a in d.ancestors(n)], columns=[f"d{i}", f"a{i}"])
        base = base.merge(up, on=f"d{i}").drop(columns=f"d{i}").rename(columns={f"a{i}": f"d{i}"})
    cell = np.ravel_multi_index(tuple(base[f"d{i}"].to_numpy() for i in range(len(t.dims))), t.shape)
    sums = pd.Series(base["k"].to_numpy()).groupby(cell).sum() % modulus
    keys = np.zeros(t.size)
    keys[sums.index.to_numpy()] = sums.to_numpy(dtype=np.float64) / modulus
    return keys


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
