"""Logistic regression for pMSE's propensity model, by Newton's method in numpy, on a structured design.

The model scikit-learn's ``LogisticRegression(C=1e6, solver="newton-cholesky")`` fits (an L2 penalty of
1/(2C) on the coefficients, none on the intercept: unpenalized in effect, yet finite when the two tables
are separable), without importing scikit-learn and scipy (0.6 s of a small release's command).
``tests/sdc/test_sdc_measures.py`` checks the fitted propensities against scikit-learn's on the one-hot matrix.

The design is kept as it is built (``Design``): each categorical column's level codes, whose one-hot
columns (the first level dropped) are never formed, and a small dense block of numeric terms. Xβ is a
lookup of each column's coefficients by code, Xᵀr and the Hessian XᵀWX are bincounts (categorical ×
categorical over the pair's combined codes, categorical × dense weighted by the dense column) and a
matrix product of the dense block alone: Adult's 60,000 stacked records × 97 parameters hold 11
non-zeros a row, and no n × k matrix is made.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privrelease.core.sdc import coding

PENALTY = 1e-6  # 1/C, C = 1e6 as pMSE fitted it with scikit-learn
TOLERANCE = 1e-8  # on the largest component of the mean loss's gradient, as scikit-learn's tol
MAX_STEPS = 100


@dataclass(frozen=True)
class Design:
    """The model's matrix X (n × ``width``; an intercept is added): per categorical column, its records'
    level codes 0..levels−1 (one-hot, level 0 the reference without a column), then the dense block's
    columns. Every categorical column has two levels or more."""

    codes: list[np.ndarray]  # one int64 array of n codes per categorical column
    levels: list[int]
    dense: np.ndarray  # n × d

    @property
    def width(self) -> int:
        return sum(self.levels) - len(self.levels) + self.dense.shape[1]


class _Operator:
    """X's products in "slot" space: every level of every categorical column (its reference too, whose
    coefficient stays 0), the dense columns, the intercept; ``keep`` picks the parameters' slots.

    Rows are grouped by their cell (their levels in every categorical column; Adult: 14,000 of 60,000):
    the categorical products run over the cells' sums, one bincount of the rows per dense column."""

    def __init__(self, design: Design):
        self.levels = design.levels
        self.columns = np.vstack([design.dense.T, np.ones(len(design.dense))])  # by column; the intercept last
        codes = np.column_stack(design.codes) if design.codes else np.zeros((len(design.dense), 0), np.int64)
        self.cell, first = coding.groups(coding.combined(codes, list(range(codes.shape[1]))))
        self.size = len(first)
        self.cells = [c[first] for c in design.codes]  # each cell's level in each column
        self.starts = np.r_[0, np.cumsum(self.levels)].astype(int)
        keep = np.ones(self.starts[-1] + len(self.columns), dtype=bool)
        keep[self.starts[:-1]] = False
        self.keep = keep

    def _by_cell(self, r: np.ndarray) -> np.ndarray:
        return np.bincount(self.cell, weights=r, minlength=self.size)

    def one_sided(self, y: np.ndarray) -> np.ndarray:
        """Per parameter: for a level whose records are all labelled 1, their number; all 0, minus it; else 0."""
        records, ones = self._by_cell(np.ones(len(y))), self._by_cell(y)
        parts = []
        for c, size in zip(self.cells, self.levels):
            count, positive = np.bincount(c, weights=records, minlength=size), np.bincount(c, weights=ones, minlength=size)
            parts.append(np.where(positive == count, count, 0.0) - np.where(positive == 0, count, 0.0))
        return np.concatenate([*parts, np.zeros(len(self.columns))])[self.keep]

    def linear(self, beta: np.ndarray) -> np.ndarray:
        """Xβ, for β the parameters."""
        slots = np.zeros(len(self.keep))
        slots[self.keep] = beta
        by_cell = np.zeros(self.size)
        for c, a, b in zip(self.cells, self.starts[:-1], self.starts[1:]):
            by_cell += slots[a:b][c]
        return slots[self.starts[-1] :] @ self.columns + by_cell[self.cell]

    def transposed(self, r: np.ndarray) -> np.ndarray:
        """Xᵀr."""
        by_cell = self._by_cell(r)
        parts = [np.bincount(c, weights=by_cell, minlength=size) for c, size in zip(self.cells, self.levels)]
        return np.concatenate([*parts, self.columns @ r])[self.keep]

    def hessian(self, w: np.ndarray) -> np.ndarray:
        """Xᵀ·diag(w)·X."""
        h = np.zeros((len(self.keep), len(self.keep)))
        weighted = self.columns * w
        dense = slice(self.starts[-1], None)
        h[dense, dense] = self.columns @ weighted.T
        by_cell = [self._by_cell(row) for row in weighted]  # the last: w
        for i, (ci, li, ai) in enumerate(zip(self.cells, self.levels, self.starts)):
            block = np.column_stack([np.bincount(ci, weights=col, minlength=li) for col in by_cell])
            h[ai : ai + li, dense] = block
            h[dense, ai : ai + li] = block.T
            h[ai : ai + li, ai : ai + li] = np.diag(block[:, -1])  # the intercept's column: w by level
            for cj, lj, aj in zip(self.cells[i + 1 :], self.levels[i + 1 :], self.starts[i + 1 :]):
                pair = np.bincount(ci * lj + cj, weights=by_cell[-1], minlength=li * lj).reshape(li, lj)
                h[ai : ai + li, aj : aj + lj] = pair
                h[aj : aj + lj, ai : ai + li] = pair.T
        return h[np.ix_(self.keep, self.keep)]


def _loss(z: np.ndarray, y: np.ndarray, beta: np.ndarray, ridge: np.ndarray) -> float:
    return float(np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * np.sum(ridge * beta * beta))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # without overflow


def _start(one_sided: np.ndarray) -> np.ndarray:
    """Where Newton's method starts: 0, but for a level in one table only (its m records all labelled alike,
    separable) near its coefficient's optimum with the others at 0, the root of m·e^(−β) = PENALTY·β,
    β = W(m/PENALTY) (Lambert's W, by fixed-point steps β ← ln(m/PENALTY) − ln β). From 0 Newton's steps
    gain about 1 each there (the loss is nearly exponential in β): 12 to 18 steps on Adult, not 3."""
    m = np.abs(one_sided)
    log_ratio = np.log(np.maximum(m, 1.0) / PENALTY)
    beta = log_ratio.copy()
    for _ in range(8):
        beta = log_ratio - np.log(beta)
    return np.where(m > 0, np.sign(one_sided) * beta, 0.0)


def propensities(design: Design, y: np.ndarray) -> np.ndarray:
    """P(y = 1 | x) under the fitted model, for each row of the design (an intercept is added); y in {0, 1}."""
    n = len(y)
    x = _Operator(design)
    ridge = np.full(design.width + 1, PENALTY)
    ridge[-1] = 0.0
    beta = _start(x.one_sided(y))
    z = x.linear(beta)
    loss = _loss(z, y, beta, ridge)
    for _ in range(MAX_STEPS):
        p = _sigmoid(z)
        gradient = x.transposed(p - y) + ridge * beta
        hessian = x.hessian(p * (1.0 - p))
        hessian[np.diag_indices_from(hessian)] += ridge + 1e-12 * n  # a column constant in-sample stays solvable
        step = np.linalg.solve(hessian, gradient)
        if np.max(np.abs(gradient)) / n <= TOLERANCE and float(gradient @ step) / n <= TOLERANCE**2:
            break  # the gradient is flat and Newton's decrement too (a level in one table only still moves)
        t = 1.0
        while t > 1e-10:  # backtracking: Newton's full step can overshoot far from the optimum
            trial = beta - t * step
            trial_z = x.linear(trial)
            trial_loss = _loss(trial_z, y, trial, ridge)
            if trial_loss <= loss - 1e-4 * t * float(gradient @ step):
                break
            t *= 0.5
        if trial_loss >= loss:  # no decrease is left to find: converged to rounding
            break
        beta, z, loss = trial, trial_z, trial_loss
    return _sigmoid(z)
