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

from privrelease.core.errors import ParameterError

EXACT_LIMIT = 400_000  # deviation variables (2 x sensitive cells x cells) the exact method takes
SMALL = 1e-4  # the heuristic's price of moving a cell already suppressed, against a published one's
SIBLINGS = 4  # the heuristic's first try: the largest siblings per dimension it may move
BATCH = 16  # deviation problems the heuristic solves in one LP


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


def _stages(p: int, dims, shape, suppressed: np.ndarray, values: np.ndarray) -> list[np.ndarray]:
    """The cells a deviation for ``p`` may move, in growing sets (the last: every cell). Each set is closed under
    nothing: a relation that leaves it holds its outside cells at zero, so a deviation inside it is one of the whole
    table. First p's nodes, their ancestors and a few siblings per dimension (those already suppressed on p's line,
    and the largest); then each dimension's parent's subtree; then everything."""
    if dims is None:
        return [np.arange(len(values))]
    node = np.unravel_index(p, shape)
    grid = values.reshape(shape)
    hidden = suppressed.reshape(shape)
    first, second = [], []
    for axis, d in enumerate(dims):
        line = [slice(None) if i == axis else int(node[i]) for i in range(len(dims))]
        up = d.ancestors(int(node[axis]))
        parent = up[1] if len(up) > 1 else up[0]
        siblings = d.children.get(parent, [])
        free = [c for c in siblings if hidden[tuple(line)][c]]
        large = sorted(siblings, key=lambda c: -grid[tuple(line)][c])[:SIBLINGS]
        first.append(sorted(set(up) | set(free) | set(large)))
        below, todo = [], [parent]
        while todo:
            n = todo.pop()
            below.append(n)
            todo += d.children.get(n, [])
        second.append(sorted(set(up) | set(below)))
    out = []
    for nodes in (first, second):
        mesh = np.ix_(*[np.array(n) for n in nodes])
        out.append(np.ravel_multi_index(tuple(np.broadcast_arrays(*mesh)), shape).ravel())
    return [*out, np.arange(len(values))]


def heuristic(a: sparse.csr_matrix, values, sensitive, lower, upper, empty, cost: str, dims=None) -> Pattern:
    """A protecting pattern: a cheapest deviation per sensitive cell and direction (largest cells first), each over
    the smallest of ``_stages`` where one exists, ``BATCH`` of them solved as one LP (they share no variable)."""
    suppressed = sensitive.copy()
    price = weights(values, cost)
    big = _cap(values, upper)
    a = a.tocsc()
    shape = tuple(len(d.labels) for d in dims) if dims is not None else None
    todo = [(int(p), s, need, 0) for p in sorted(np.flatnonzero(sensitive), key=lambda i: -values[i])
            for s, need in ((+1, upper[p]), (-1, lower[p])) if need > 0]  # fmt: skip
    while todo:
        batch, todo = todo[:BATCH], todo[BATCH:]
        problems = []
        for p, s, need, stage in batch:
            stages = _stages(p, dims, shape, suppressed, values)
            problems.append((p, s, need, min(stage, len(stages) - 1), stages[min(stage, len(stages) - 1)], len(stages)))
        moved, short = _deviations(a, problems, values, suppressed, price, empty, big)
        suppressed[moved] = True
        todo = [
            (p, s, need, stage + 1) for (p, s, need, stage, _, n), bad in zip(problems, short) if bad and stage + 1 < n
        ] + todo
    return Pattern(suppressed, "heuristic", False)


def _deviations(a, problems, values, suppressed, price, empty, big) -> tuple[np.ndarray, list[bool]]:
    """Cheapest deviations for several problems (p, direction, need, stage, cells) in one LP: the cells they move,
    and which fell short (a shortfall is allowed at a price no cell reaches, so one problem without a deviation
    leaves the others solved)."""
    blocks, costs, lows, highs, rows_ub, offsets = [], [], [], [], [], []
    at = 0
    penalty = 1e3 * float(price.max(initial=1.0)) * max(len(values), 1)
    for p, s, need, _, cells, _ in problems:
        sub = a[:, cells].tocsr()
        sub = sub[np.flatnonzero(np.diff(sub.indptr) > 0)]
        m = len(cells)
        cost_now = np.where(suppressed[cells], SMALL, price[cells])
        up_ub = np.where(empty[cells], 0.0, big)
        down_ub = np.where(empty[cells], 0.0, values[cells])
        (k,) = np.flatnonzero(cells == p)
        (down_ub if s > 0 else up_ub)[k] = 0.0
        blocks.append(sparse.hstack([sub, -sub, sparse.csr_matrix((sub.shape[0], 1))]))
        costs.append(np.concatenate([cost_now, cost_now, [penalty / max(need, 1e-9)]]))
        lows.append(np.zeros(2 * m + 1))
        highs.append(np.concatenate([up_ub, down_ub, [need]]))
        row = np.zeros(2 * m + 1)
        row[k if s > 0 else m + k], row[2 * m] = -1.0, -1.0  # own deviation + shortfall >= need
        rows_ub.append((at, row, -need))
        offsets.append((at, m))
        at += 2 * m + 1
    a_eq = sparse.block_diag(blocks, format="csr")
    a_ub = sparse.lil_matrix((len(problems), at))
    for i, (start, row, _) in enumerate(rows_ub):
        a_ub[i, start : start + len(row)] = row
    res = linprog(np.concatenate(costs), A_ub=a_ub.tocsr(), b_ub=np.array([r[2] for r in rows_ub]), A_eq=a_eq,
                  b_eq=np.zeros(a_eq.shape[0]), bounds=np.stack([np.concatenate(lows), np.concatenate(highs)], axis=1),
                  method="highs")  # fmt: skip
    if res.status != 0:
        return np.zeros(0, dtype=np.int64), [True] * len(problems)
    moved, short = [], []
    for (start, m), (_p, _s, need, _, cells, _) in zip(offsets, problems):
        x = res.x[start : start + 2 * m + 1]
        tol = 1e-9 * max(1.0, need)
        short.append(bool(x[2 * m] > tol))
        if not short[-1]:
            moved.append(cells[((x[:m] + x[m : 2 * m]) > tol) & ~empty[cells]])
    return (np.concatenate(moved) if moved else np.zeros(0, dtype=np.int64)), short


def choose(method: str, a, values, sensitive, lower, upper, empty, cost: str, dims=None) -> Pattern:
    """The request's method; ``auto``: exact where it fits ``EXACT_LIMIT``, else the heuristic."""
    targets = int((sensitive & (upper > 0)).sum() + (sensitive & (lower > 0)).sum())
    if method == "exact" or (method == "auto" and 2 * targets * len(values) <= EXACT_LIMIT):
        return exact(a, values, sensitive, lower, upper, empty, cost)
    return heuristic(a, values, sensitive, lower, upper, empty, cost, dims)
