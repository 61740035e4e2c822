"""Secondary suppression: which more cells to suppress so that no sensitive cell's feasible interval, as an intruder
computes it from the published cells and the table's relations, is narrower than its protection interval.

Both methods reason with deviations (Fischetti and Salazar, *Models and algorithms for optimizing cell suppression
in tabular data with linear constraints*, JASA 2000): a sensitive cell p is protected upwards exactly when some
vector y with ``A y = 0`` (the relations), ``y_i = 0`` on every published cell, ``a_i + y_i ≥ 0`` on every cell and
``y_p ≥ U_p`` exists (the table a + y agrees with everything published, and the feasible set is convex and holds
a), and downwards likewise with ``y_p ≤ -L_p``.

- ``exact``: one MIP (``scipy.optimize.milp``, HiGHS) over the suppression pattern x (binary) and one deviation
  vector per sensitive cell and direction, ``-a_i x_i ≤ y_i ≤ M x_i``: its optimum is the least cost pattern that
  protects every sensitive cell (``M``, a bound on a deviation, only restricts the patterns found: never unsafe).
- ``heuristic``: the sensitive cells one at a time, each direction one LP (``scipy.optimize.linprog``, HiGHS) for
  a cheapest deviation, a cell already suppressed almost free; the cells it moves are suppressed. Each deviation
  stays a witness as more cells are suppressed, so every sensitive cell ends protected, by construction (the
  network-flow heuristic of Kelly, Golden and Assad, on the table's own relations rather than a network).

Empty cells are published (zero, known) and never suppressed; sensitive cells always are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

from core.errors import ParameterError

EXACT_LIMIT = 400_000  # deviation variables (2 x sensitive cells x cells) the exact method takes
SMALL = 1e-4  # the heuristic's price of moving a cell already suppressed, against a published one's


@dataclass(frozen=True)
class Pattern:
    suppressed: np.ndarray  # bool, by cell (the sensitive ones included)
    method: str
    optimal: bool  # the exact method proved its optimum


def weights(values: np.ndarray, cost: str) -> np.ndarray:
    """Each cell's cost if suppressed: 1 (the count of cells) or its value (plus 1, so a zero is not free)."""
    return np.ones(len(values)) if cost == "count" else np.abs(values) + 1.0


def _cap(values: np.ndarray, upper: np.ndarray) -> float:
    """A bound on any cell's upward deviation: large enough for every protection the table asks for."""
    return float(2 * (np.abs(values).max(initial=0) + upper.max(initial=0)) + 1)


def exact(a: sparse.csr_matrix, values, sensitive, lower, upper, empty, cost: str, time_limit: float = 120.0) -> Pattern:
    """The least-cost pattern (exact MIP); refused above ``EXACT_LIMIT``."""
    n = len(values)
    targets = [(int(p), +1) for p in np.flatnonzero(sensitive) if upper[p] > 0]
    targets += [(int(p), -1) for p in np.flatnonzero(sensitive) if lower[p] > 0]
    if 2 * len(targets) * n > EXACT_LIMIT:
        raise ParameterError(
            f"secondary: exact takes tables whose sensitive cells times cells are at most {EXACT_LIMIT // 4:,}; "
            "this one has more: use secondary: heuristic (or auto)"
        )
    if not targets:
        return Pattern(sensitive.copy(), "exact", True)
    big = _cap(values, upper)
    t = len(targets)
    eye = sparse.identity(n, format="csr")
    blocks_eq, rows_ub = [], []
    # variable order: x (n), then per target y+ (n), y- (n)
    x_cols = []
    for k, (p, s) in enumerate(targets):
        eq = sparse.hstack([sparse.csr_matrix((a.shape[0], n))] + [sparse.csr_matrix((a.shape[0], 2 * n))] * k
                           + [a, -a] + [sparse.csr_matrix((a.shape[0], 2 * n))] * (t - k - 1))  # fmt: skip
        blocks_eq.append(eq)
        pad_l = [sparse.csr_matrix((n, 2 * n))] * k
        pad_r = [sparse.csr_matrix((n, 2 * n))] * (t - k - 1)
        # y+ - M x <= 0 ; y- - a x <= 0
        rows_ub.append(sparse.hstack([-big * eye, *pad_l, eye, sparse.csr_matrix((n, n)), *pad_r]))
        rows_ub.append(sparse.hstack([-sparse.diags(values), *pad_l, sparse.csr_matrix((n, n)), eye, *pad_r]))
        x_cols.append((k, p, s))
    m_eq = sparse.vstack(blocks_eq).tocsr()
    m_ub = sparse.vstack(rows_ub).tocsr()
    total = n + 2 * n * t
    lb, ub = np.zeros(total), np.full(total, np.inf)
    lb[:n] = sensitive.astype(float)
    ub[:n] = np.where(empty, 0.0, 1.0)
    for k, p, s in x_cols:  # the target's own deviation: at least its protection, and the other direction none
        base = n + 2 * n * k
        if s > 0:
            lb[base + p] = upper[p]
            ub[base + n + p] = 0.0
        else:
            lb[base + n + p] = lower[p]
            ub[base + p] = 0.0
    c = np.concatenate([weights(values, cost), np.zeros(2 * n * t)])
    integrality = np.concatenate([np.ones(n), np.zeros(2 * n * t)])
    constraints = [LinearConstraint(m_eq, 0, 0), LinearConstraint(m_ub, -np.inf, 0)]
    res = milp(c, constraints=constraints, integrality=integrality, bounds=Bounds(lb, ub),
               options={"time_limit": time_limit, "mip_rel_gap": 1e-6})  # fmt: skip
    if res.x is None:
        return heuristic(a, values, sensitive, lower, upper, empty, cost)
    return Pattern(res.x[:n] > 0.5, "exact", res.status == 0)


def heuristic(a: sparse.csr_matrix, values, sensitive, lower, upper, empty, cost: str) -> Pattern:
    """A protecting pattern, one deviation LP per sensitive cell and direction (largest cells first)."""
    n = len(values)
    suppressed = sensitive.copy()
    price = weights(values, cost)
    big = _cap(values, upper)
    a_dev = sparse.hstack([a, -a]).tocsr()
    zeros = np.zeros(a.shape[0])
    for p in sorted(np.flatnonzero(sensitive), key=lambda i: -values[i]):
        for s, need in ((+1, upper[p]), (-1, lower[p])):
            if need <= 0:
                continue
            cost_now = np.where(suppressed, SMALL, price)
            c = np.concatenate([cost_now, cost_now])
            up_ub = np.where(empty, 0.0, big)
            down_ub = np.where(empty, 0.0, values)
            lb = np.zeros(2 * n)
            if s > 0:
                lb[p], down_ub = need, down_ub.copy()
                down_ub[p] = 0.0
            else:
                lb[n + p], up_ub = need, up_ub.copy()
                up_ub[p] = 0.0
            bounds = np.stack([lb, np.concatenate([up_ub, down_ub])], axis=1)
            res = linprog(c, A_eq=a_dev, b_eq=zeros, bounds=bounds, method="highs")
            if res.status != 0:
                continue  # no deviation at all (the audit names the cell; the release is refused)
            moved = (res.x[:n] + res.x[n:]) > 1e-9 * max(1.0, need)
            suppressed |= moved & ~empty
    return Pattern(suppressed, "heuristic", False)


def choose(method: str, a, values, sensitive, lower, upper, empty, cost: str) -> Pattern:
    """The request's method; ``auto``: exact where it fits ``EXACT_LIMIT``, else the heuristic."""
    targets = int((sensitive & (upper > 0)).sum() + (sensitive & (lower > 0)).sum())
    if method == "exact" or (method == "auto" and 2 * targets * len(values) <= EXACT_LIMIT):
        return exact(a, values, sensitive, lower, upper, empty, cost)
    return heuristic(a, values, sensitive, lower, upper, empty, cost)
