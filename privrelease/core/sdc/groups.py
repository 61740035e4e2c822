"""MDAV-style groups of at least k records, around the farthest pair (MEDS's bins; microaggregation's groups)."""

from __future__ import annotations

import numpy as np
import scipy  # submodules load on first use


def _diameter_pair(points: np.ndarray, rows: np.ndarray) -> tuple[int, int]:
    """The exact farthest pair among ``rows`` (Euclidean): over hull vertices when that is cheaper."""
    candidates = rows
    dims = points.shape[1]
    if len(rows) > 2000 and 2 <= dims <= 4:  # qhull grows exponentially with the dimension
        try:
            candidates = rows[scipy.spatial.ConvexHull(points[rows]).vertices]
        except scipy.spatial.QhullError:  # degenerate (flat) sets: fall back to all points
            candidates = rows
    elif dims == 1:
        col = points[rows, 0]
        return int(rows[col.argmin()]), int(rows[col.argmax()])
    best, pair = -1.0, (int(candidates[0]), int(candidates[0]))
    pts = points[candidates]
    for start in range(0, len(candidates), 512):
        block = ((pts[start : start + 512, None, :] - pts[None, :, :]) ** 2).sum(axis=2)
        i, j = np.unravel_index(block.argmax(), block.shape)
        if block[i, j] > best:
            best, pair = float(block[i, j]), (int(candidates[start + i]), int(candidates[j]))
    return pair


def meds_bins(values: np.ndarray, k: int) -> tuple[np.ndarray, tuple[int, int] | None]:
    """MDAV-style bins on standardized S: k nearest around each end of the farthest pair.

    Returns the bin of each row and the first farthest pair (for checking against brute force).
    Cost O(n^2) per iteration on the hull vertices, O(n/k) iterations.
    """
    n = len(values)
    sd = values.std(axis=0)
    z = (values - values.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    bins = np.full(n, -1, dtype=np.int64)
    remaining = np.arange(n)
    label, first_pair = 0, None
    while len(remaining) >= 2 * k:
        r, s = _diameter_pair(z, remaining)
        first_pair = first_pair or (r, s)
        for centre in (r, s):
            dist = ((z[remaining] - z[centre]) ** 2).sum(axis=1)
            dist[remaining == centre] = -1.0  # the centre itself is always in its bin
            take = remaining[np.argpartition(dist, k - 1)[:k]]
            bins[take] = label
            label += 1
            remaining = remaining[bins[remaining] < 0]
    if len(remaining) >= k or label == 0:
        bins[remaining] = label
    elif len(remaining):
        # fewer than k left: each joins the bin of its nearest already-binned tuple
        placed = np.flatnonzero(bins >= 0)
        for row in remaining:
            bins[row] = bins[placed[((z[placed] - z[row]) ** 2).sum(axis=1).argmin()]]
    return bins, first_pair
