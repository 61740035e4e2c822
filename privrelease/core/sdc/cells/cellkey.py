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

Magnitudes (``perturb_sums``, ``cellKey``'s top-contribution variant with simple multipliers): a sum moves by one
step per largest contribution, the j-th step ``share · weights[j] · x_(j) · v_j``, v_j picked from the table's
symmetric row (-D..D, mean 0, variance V) by the cell's key turned j + 1 times (never the key itself, which picks
the count of the same cell), a cell a rule finds sensitive moved ``mu_c`` further on its first step; the policy
keeps ``share · (D + mu_c)`` under 1, so no sum reaches zero. So the published sum is within
``share · (D + mu_c) · Σ weights[j] · x_(j)`` of the truth and the same cell gets the same sum in every table. ``guess`` is the audit's measure: the chance that an intruder who knows all but
a sensitive cell's largest contribution guesses it within the policy's precision.
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


TURN = 8  # the bits a cell's key is rotated by for each magnitude step: 8, 16, 24, never near the key itself


def turned(keys: np.ndarray, times: int) -> np.ndarray:
    """The cell keys (in [0, 1)) with their 2^``KEY_BITS`` integers rotated by ``TURN · times`` bits: a bijection
    of the keys, so each turned key is as uniform as the keys are."""
    k = np.rint(np.asarray(keys) * (1 << KEY_BITS)).astype(np.uint64)
    r = np.uint64((TURN * times) % KEY_BITS)
    mask = np.uint64((1 << KEY_BITS) - 1)
    return (((k << r) | (k >> (np.uint64(KEY_BITS) - r))) & mask).astype(np.float64) / (1 << KEY_BITS)


def reach(top: np.ndarray, rule: CellKey) -> np.ndarray:
    """How far a cell's sum may move: ``share · (D + mu_c) · Σ weights[j] · x_(j)`` (``top``: cells by rows)."""
    w = np.asarray(rule.weights)
    return rule.share * (rule.D + rule.mu_c) * (top[:, : w.size] @ w)


def perturb_sums(values: np.ndarray, top: np.ndarray, keys: np.ndarray, rule: CellKey, sensitive: np.ndarray) -> np.ndarray:
    """Each sum moved by its cell's steps (see the module's text): ``top`` holds each cell's largest contributions,
    decreasing, zeros past its last (cells by rows, a column per weight at least); ``sensitive`` the cells a rule
    finds sensitive, moved ``mu_c`` further from the truth on the first step (a step of 0 goes up or down as a bit
    of the key says). The policy keeps ``share · (D + mu_c)`` under 1, so no sum reaches zero."""
    d, p = row(rule.D + rule.js + 1, rule)  # room on both sides: the symmetric row
    cumulative = np.cumsum(p)
    moved = np.zeros(len(values))
    for j, weight in enumerate(rule.weights):
        picked = np.minimum(np.searchsorted(cumulative, turned(keys, j + 1), side="right"), d.size - 1)
        v = d[picked].astype(np.float64)
        if j == 0:
            bit = (np.rint(np.asarray(keys) * (1 << KEY_BITS)).astype(np.int64) >> 16) & 1
            away = np.where(v != 0, np.sign(v), np.where(bit == 1, 1.0, -1.0))
            v = np.where(sensitive, away * (np.abs(v) + rule.mu_c), v)
        moved += rule.share * weight * top[:, j] * v
    return np.maximum(np.asarray(values, dtype=np.float64) + moved, 0.0)


def steps(rule: CellKey) -> tuple[np.ndarray, np.ndarray]:
    """Every combination of a sensitive cell's steps (rows: the first step's signed multiple ±(mu_c + |v|), then
    each further v) and its probability, from the table's symmetric row."""
    d, p = row(rule.D + rule.js + 1, rule)
    zero = p[d == 0].sum()
    first = np.r_[np.sign(d[d != 0]) * (rule.mu_c + np.abs(d[d != 0])), rule.mu_c, -rule.mu_c]
    chance = np.r_[p[d != 0], zero / 2, zero / 2]
    grids = np.meshgrid(first, *([d.astype(float)] * (len(rule.weights) - 1)), indexing="ij")
    odds = np.meshgrid(chance, *([p] * (len(rule.weights) - 1)), indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=1), np.prod(np.stack([o.ravel() for o in odds], axis=1), axis=1)


def guess(total: float, top: np.ndarray, rule: CellKey, precision: float) -> float:
    """The chance, over the cell's keys, that an intruder who knows the method, its parameters and every contribution
    to a sensitive cell but its largest (x1) guesses x1 within ``precision`` (a share) from the published sum.

    For each way the steps can fall, the published sum P gives the intruder every x1 consistent with it (one per way
    the steps could have fallen, no smaller than the second contribution), each as likely as its steps; the intruder
    takes the interval of values a guess hits (x1 within [g/(1+precision), g/(1-precision)]) holding the most of
    them. The chance is that of the ways whose true x1 lies in the intruder's interval."""
    w = np.asarray(rule.weights)
    x = np.zeros(w.size)
    x[: min(w.size, top.size)] = top[: w.size]
    x1, second = x[0], x[1] if w.size > 1 else (top[1] if top.size > 1 else 0.0)
    if x1 <= 0:
        return 0.0
    ways, chance = steps(rule)
    first = 1.0 + rule.share * ways[:, 0]  # the largest contribution's factor
    others = rule.share * (ways[:, 1:] @ (w[1:] * x[1:]))  # the other steps' sum, known to the intruder but for v
    shown = x1 * first + others  # P − (the rest of the cell), each way
    candidates = (shown[:, None] - others[None, :]) / first[None, :]  # way r published, way c supposed
    weight = np.where(candidates >= max(second, 1e-300) * (1 - 1e-12), chance[None, :], 0.0)
    order = np.argsort(candidates, axis=1)
    ranked = np.take_along_axis(candidates, order, axis=1)
    mass = np.cumsum(np.take_along_axis(weight, order, axis=1), axis=1)
    ratio = (1 + precision) / (1 - precision)
    hit = 0.0
    for r in range(len(ways)):
        ends = np.searchsorted(ranked[r], ranked[r] * ratio * (1 + 1e-12), side="right")
        held = mass[r, ends - 1] - np.r_[0.0, mass[r, :-1]]
        start = int(np.argmax(held))
        low = ranked[r, start]
        hit += chance[r] * (low * (1 - 1e-12) <= x1 <= low * ratio * (1 + 1e-12))
    return float(hit)
