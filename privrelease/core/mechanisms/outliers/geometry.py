"""Geometry of distance-based outliers: degrees, and the largest number of points one ball of
radius r can hold (the max ball cover Algorithm 2 of Okada et al. needs), with the smallest
enclosing balls the exact search decides on.

Everything here is exact on the points it is given and data-independent in how much work it may
do (``outliers_sensitivity.cover_plan`` picks the method from public values); nothing here draws noise.
"""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import scipy  # submodules load on first use: a flow that never runs outliers never imports them

from privrelease.core.errors import InternalError

RADIUS_SLACK = 1e-9  # relative: points at exactly distance r stay inside despite float rounding
SEB_SLACK = 1e-7  # relative: miniball's tolerance, resolved towards inclusion (covers only grow)
MAX_BALLS = 2_000_000  # enclosing balls one count may compute; cover_plan keeps the worst case under it
MAX_BLOCK_ENTRIES = 10_000_000  # worst-case size of the blocks bound's incidence matrix
# Coordinates are clipped to ±COORD_LIMIT (a public, per-record map, so DP is unaffected): squared
# distances then never overflow, so no table can make the search fail where its neighbour does not.
COORD_LIMIT = 1e15


def subspace_points(z: np.ndarray) -> np.ndarray:
    """Coordinates scaled by 1/sqrt(|S|), so Euclidean distance is the paper's RMS distance."""
    return np.ascontiguousarray(z, dtype=float) / math.sqrt(z.shape[1])


def degrees(points: np.ndarray, r: float) -> np.ndarray:
    """Number of *other* records within distance r of each record (closed ball), by KD-tree.

    Coordinates must lie within ±COORD_LIMIT (``standardized`` clips them): beyond it squared
    distances can overflow, and scipy's threaded query then returns uninitialised memory."""
    if not np.isfinite(points).all() or np.abs(points).max(initial=0.0) > COORD_LIMIT:
        raise InternalError("outliers: coordinates beyond the clipping limit reached the distance search")
    tree = scipy.spatial.cKDTree(points)
    return tree.query_ball_point(points, r * (1 + RADIUS_SLACK), return_length=True, workers=-1) - 1


class Cover:
    """max over balls B(x, r), x anywhere, of |B ∩ P| for subsets P of one point set.

    Exact: 1-D, a sliding window of width 2r; 2-D, candidate centres (each point, and the two
    centres of radius-r circles through each pair); higher, branch and bound over cliques of the
    2r-graph, with the smallest enclosing ball deciding whether a set fits, per connected
    component, on distinct points weighted by multiplicity. ``blocks`` is a polynomial upper bound
    in any dimension: the most points in one block of 2^d grid cells of side 2r (every ball fits in
    one). ``cover_plan`` picks the method from public values; ``method`` overrides the dimension's
    exact default, for tests.
    """

    METHODS = ("window", "centres", "search")

    def __init__(self, points: np.ndarray, r: float, method: str | None = None):
        self.rho = r * (1 + RADIUS_SLACK)
        self.work = 0  # enclosing balls computed, against MAX_BALLS
        dim = points.shape[1]
        self.method = method or self.METHODS[min(dim, 3) - 1]
        if {"window": dim == 1, "centres": dim == 2, "search": True, "blocks": True}.get(self.method) is not True:
            raise ValueError(f"cover method {self.method!r} does not apply in {dim} dimensions")
        if self.method == "window":
            x = points[:, 0]
            self.order = np.argsort(x, kind="stable")
            xs = x[self.order]
            self.window_end = np.searchsorted(xs, xs + 2 * self.rho, side="right")
            return
        self.unique, self.inverse = np.unique(points, axis=0, return_inverse=True)
        self.inverse = self.inverse.ravel()
        if self.method == "blocks":
            self.incidence = _block_incidence(self.unique, self.rho)
            return
        tree = scipy.spatial.cKDTree(self.unique)
        if self.method == "centres":
            centres = np.vstack(
                [self.unique, *_circle_centres(self.unique, tree.query_pairs(2 * self.rho, output_type="ndarray"), self.rho)]
            )
            self.incidence = _incidence(scipy.spatial.cKDTree(centres), tree, self.rho, len(centres), len(self.unique))
            return
        pairs = tree.query_pairs(2 * self.rho, output_type="ndarray")
        m = len(self.unique)
        ones = np.ones(len(pairs), dtype=np.int8)
        self.graph = scipy.sparse.csr_matrix((ones, (pairs[:, 0], pairs[:, 1])), shape=(m, m))
        self.graph = (self.graph + self.graph.T).tocsr()
        self.incidence = _incidence(tree, tree, self.rho, m, m)  # balls centred on the points: a lower bound

    def max_cover(self, mask: np.ndarray) -> int:
        """The largest number of masked records one closed ball of radius r can hold."""
        if not mask.any():
            return 0
        if self.method == "window":
            inside = mask[self.order].astype(np.int64)
            cum = np.concatenate([[0], np.cumsum(inside)])
            starts = np.flatnonzero(inside)
            return int((cum[self.window_end[starts]] - cum[starts]).max())
        weight = np.bincount(self.inverse, weights=mask, minlength=len(self.unique)).astype(np.int64)
        if self.method in ("centres", "blocks"):
            return int((self.incidence @ weight).max())
        return self._branch_and_bound(weight)

    def _branch_and_bound(self, weight: np.ndarray) -> int:
        live = np.flatnonzero(weight)
        best = int((self.incidence[:, live] @ weight[live]).max())
        sub = self.graph[live][:, live]
        n_comp, label = scipy.sparse.csgraph.connected_components(sub, directed=False)
        totals = np.bincount(label, weights=weight[live], minlength=n_comp)
        limit = self.rho**2 * (1 + SEB_SLACK)
        for comp in np.argsort(-totals, kind="stable"):
            if totals[comp] <= best:
                break
            members = live[label == comp]
            neighbours = {v: set(self.graph.indices[self.graph.indptr[v] : self.graph.indptr[v + 1]]) for v in members}

            def expand(chosen: list[int], ball: tuple[np.ndarray, float], have: int, cands: list[int]) -> None:
                nonlocal best
                room = sum(int(weight[v]) for v in cands)
                for i, v in enumerate(cands):
                    if have + room <= best:
                        return
                    room -= int(weight[v])
                    grown = ball
                    if not _inside(self.unique[v], ball):
                        self.work += 1
                        if self.work > MAX_BALLS:  # cover_plan rules this out for every table
                            raise InternalError(f"outliers: the max-ball search passed {MAX_BALLS:,} enclosing balls")
                        grown = _ball_through(self.unique[chosen], self.unique[v])
                    if grown[1] <= limit:
                        best = max(best, have + int(weight[v]))
                        rest = np.array([u for u in cands[i + 1 :] if u in neighbours[v]], dtype=np.int64)  # noqa: B023 - used at once
                        if rest.size:  # a radius-r ball holding the chosen set is centred within
                            reach = self.rho + math.sqrt(max(limit - grown[1], 0.0))  # sqrt(r² − seb²) of its centre
                            rest = rest[((self.unique[rest] - grown[0]) ** 2).sum(axis=1) <= reach**2 * (1 + SEB_SLACK)]
                        expand([*chosen, v], grown, have + int(weight[v]), rest.tolist())

            expand([], (np.zeros(self.unique.shape[1]), -1.0), 0, sorted(members, key=lambda v: -weight[v]))
        return best


# -- smallest enclosing balls --------------------------------------------------------------------------
#
# Welzl's algorithm in Gärtner's move-to-front form, with the circumsphere of the boundary set
# solved by least squares in its affine hull. Boundary sets on real data are often affinely
# dependent (grid-valued columns, ties); miniball 1.2 solves them exactly and raises
# LinAlgError, so it serves only as a test oracle on points in general position.


def _inside(p: np.ndarray, ball: tuple[np.ndarray, float]) -> bool:
    centre, r2 = ball
    return r2 >= 0 and float(((p - centre) ** 2).sum()) <= r2 * (1 + 1e-12) + 1e-300


def _circumball(boundary: list[np.ndarray]) -> tuple[np.ndarray, float]:
    """The smallest ball with every boundary point on its sphere (centre in their affine hull)."""
    p0 = boundary[0]
    if len(boundary) == 1:
        return p0.copy(), 0.0
    u = np.array(boundary[1:]) - p0
    gram = u @ u.T
    lam = np.linalg.lstsq(gram, np.diag(gram) / 2, rcond=None)[0]
    centre = p0 + lam @ u
    return centre, float(((centre - p0) ** 2).sum())


def _move_to_front(points: list[np.ndarray], end: int, boundary: list[np.ndarray], dim: int) -> tuple[np.ndarray, float]:
    ball = _circumball(boundary) if boundary else (np.zeros(dim), -1.0)
    if len(boundary) == dim + 1:
        return ball
    for i in range(end):
        if not _inside(points[i], ball):
            ball = _move_to_front(points, i, [*boundary, points[i]], dim)
            points.insert(0, points.pop(i))
    return ball


def enclosing_ball(points: np.ndarray) -> tuple[np.ndarray, float]:
    """The smallest ball holding every row of ``points``: (centre, squared radius)."""
    points = np.asarray(points, dtype=float)
    return _move_to_front(list(points), len(points), [], points.shape[1])


def _ball_through(inside: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, float]:
    """The smallest ball holding ``inside`` and p, for p outside the smallest ball of ``inside``
    (p is then on its boundary)."""
    return _move_to_front(list(np.asarray(inside, dtype=float)), len(inside), [p], len(p))


def _circle_centres(points: np.ndarray, pairs: np.ndarray, rho: float) -> list[np.ndarray]:
    """Centres of the two radius-rho circles through each pair of distinct points."""
    if len(pairs) == 0:
        return []
    a, b = points[pairs[:, 0]], points[pairs[:, 1]]
    mid, diff = (a + b) / 2, b - a
    half = np.linalg.norm(diff, axis=1) / 2
    keep = half > 0
    mid, diff, half = mid[keep], diff[keep], half[keep]
    normal = np.stack([-diff[:, 1], diff[:, 0]], axis=1) / (2 * half)[:, None]
    offset = np.sqrt(np.maximum(rho**2 - half**2, 0.0))[:, None] * normal
    return [mid + offset, mid - offset]


def _block_incidence(points: np.ndarray, rho: float) -> scipy.sparse.csr_matrix:
    """Sparse 0/1 matrix: block b (2^d cells of side 2rho, by its lowest cell) holds point j.

    A closed ball of radius rho (with the enclosing-ball tolerance) spans at most two consecutive
    cells per axis, so it lies in one block. A point near a cell edge may round into either cell;
    it counts in every block either cell belongs to, so the bound holds whatever the rounding.
    Each point counts once per block: the bound grows by at most one per added point.
    """
    side = 2 * rho * (1 + SEB_SLACK)
    slack = np.abs(points) * 1e-12 + 1e-300
    lowest = np.floor((points - slack) / side).astype(np.int64) - 1  # lowest block corner per axis
    highest = np.floor((points + slack) / side).astype(np.int64)
    corners, members = [], []
    for offset in product(range(3), repeat=points.shape[1]):
        corner = lowest + np.array(offset)
        fits = (corner <= highest).all(axis=1)
        corners.append(corner[fits])
        members.append(np.flatnonzero(fits))
    _, block = np.unique(np.vstack(corners), axis=0, return_inverse=True)
    member = np.concatenate(members)
    shape = (int(block.max()) + 1, len(points))
    return scipy.sparse.csr_matrix((np.ones(len(member), dtype=np.int64), (block.ravel(), member)), shape=shape)


def _incidence(
    centres: scipy.spatial.cKDTree, points: scipy.spatial.cKDTree, rho: float, n_centres: int, n_points: int
) -> scipy.sparse.csr_matrix:
    """Sparse 0/1 matrix: centre i's closed ball of radius rho holds point j."""
    pairs = centres.sparse_distance_matrix(points, rho * (1 + SEB_SLACK), output_type="ndarray")
    ones = np.ones(len(pairs), dtype=np.int64)
    return scipy.sparse.csr_matrix((ones, (pairs["i"], pairs["j"])), shape=(n_centres, n_points))
