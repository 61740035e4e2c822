"""Logistic regression for pMSE's propensity model, by Newton's method in numpy.

The model scikit-learn's ``LogisticRegression(C=1e6, solver="newton-cholesky")`` fits (an L2 penalty of
1/(2C) on the coefficients, none on the intercept: unpenalized in effect, yet finite when the two tables
are separable), without importing scikit-learn and scipy's optimizers: 0.6 s of a small release's
command. ``tests/test_sdc_measures.py`` checks the fitted propensities against scikit-learn's.
"""

from __future__ import annotations

import numpy as np
import scipy  # scipy.sparse loads on first use (the linkage's KD-tree has loaded it already)

PENALTY = 1e-6  # 1/C, C = 1e6 as pMSE fitted it with scikit-learn
TOLERANCE = 1e-8  # on the largest component of the mean loss's gradient, as scikit-learn's tol
MAX_STEPS = 100


def _loss(xb: np.ndarray, y: np.ndarray, beta: np.ndarray, ridge: np.ndarray) -> float:
    z = xb @ beta
    return float(np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * np.sum(ridge * beta * beta))


def propensities(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(y = 1 | x) under the fitted model, for each row of ``x`` (n × k, an intercept is added); y in {0, 1}."""
    n = len(y)
    # sparse: the design is mostly 0/1 dummies (Adult: 12 non-zeros in 97 columns), and the Hessian's
    # Xᵀ·diag(w)·X then costs a seventh of the dense product
    xb = scipy.sparse.csr_matrix(np.hstack([x, np.ones((n, 1))]))
    ridge = np.full(xb.shape[1], PENALTY)
    ridge[-1] = 0.0
    beta = np.zeros(xb.shape[1])
    loss = _loss(xb, y, beta, ridge)
    for _ in range(MAX_STEPS):
        p = 0.5 * (1.0 + np.tanh(0.5 * (xb @ beta)))  # the sigmoid, without overflow
        gradient = xb.T @ (p - y) + ridge * beta
        hessian = (xb.T @ scipy.sparse.diags(p * (1.0 - p)) @ xb).toarray()
        hessian[np.diag_indices_from(hessian)] += ridge + 1e-12 * n  # a column constant in-sample stays solvable
        step = np.linalg.solve(hessian, gradient)
        if np.max(np.abs(gradient)) / n <= TOLERANCE and float(gradient @ step) / n <= TOLERANCE**2:
            break  # the gradient is flat and Newton's decrement too (a level in one table only still moves)
        t = 1.0
        while t > 1e-10:  # backtracking: Newton's full step can overshoot far from the optimum
            trial = beta - t * step
            trial_loss = _loss(xb, y, trial, ridge)
            if trial_loss <= loss - 1e-4 * t * float(gradient @ step):
                break
            t *= 0.5
        if trial_loss >= loss:  # no decrease is left to find: converged to rounding
            break
        beta, loss = trial, trial_loss
    return 0.5 * (1.0 + np.tanh(0.5 * (xb @ beta)))
