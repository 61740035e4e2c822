"""The bins of local data swapping and the swap inside them, for MEWS, MEDS and EDS (``swapping``).

Equi-width cells and their partitions (MEWS, with the feasible widths of a range), MDAV-style bins
of k around the farthest pair (MEDS), bins of k consecutive ranks (EDS); then the swap itself,
vectorized over all bins at once. Nothing here draws a value: values only move inside a bin.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy  # submodules load on first use: a flow that never swaps never imports scipy.spatial

from privrelease.core.errors import ParameterError
from privrelease.core.sdc.groups import meds_bins  # noqa: F401  (MEDS bins: MDAV-style groups, shared with microaggregation)

# -- swapping inside bins (vectorized over all bins at once) -------------------------------------------


def _grouped_order(bins: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows sorted by bin, in random order inside each bin; and each position's bin start and size."""
    order = np.argsort(bins + rng.random(len(bins)))  # bins are integers: the fraction only shuffles inside
    sorted_bins = bins[order]
    starts_mask = np.r_[True, sorted_bins[1:] != sorted_bins[:-1]]
    start_idx = np.flatnonzero(starts_mask)
    sizes = np.diff(np.r_[start_idx, len(bins)])
    group = np.cumsum(starts_mask) - 1
    return order, start_idx[group], sizes[group]


def partner_positions(bins: np.ndarray, mode: str, rng: np.random.Generator) -> np.ndarray:
    """``src`` with row i receiving the value of row src[i]; src stays inside i's bin."""
    n = len(bins)
    order, start, size = _grouped_order(bins, rng)
    pos = np.arange(n)
    r = pos - start  # rank inside the bin (random order)
    if mode == "pairs":
        odd = size % 2 == 1
        in_triple = odd & (r >= size - 3) & (size >= 3)
        nxt = np.where(r % 2 == 0, pos + 1, pos - 1)
        # the last three of an odd bin form a 3-cycle
        nxt = np.where(in_triple, np.where(r == size - 1, pos - 2, pos + 1), nxt)
        nxt = np.where(size == 1, pos, nxt)
    else:  # a single random cycle through the bin
        nxt = np.where(r == size - 1, start, pos + 1)
    src = np.empty(n, dtype=np.int64)
    src[order] = order[nxt]
    return src


def swap(columns: list[str], bins: np.ndarray, mode: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Per column, the row each row takes its value from (one shared cycle in block mode)."""
    shared = partner_positions(bins, "cyclic", rng) if mode == "block" else None
    return {c: shared if shared is not None else partner_positions(bins, mode, rng) for c in columns}


def apply(frame: pd.DataFrame, partners: dict[str, np.ndarray]) -> pd.DataFrame:
    """The frame with each swapped column's values taken from the partner rows."""
    out = frame.copy()
    for column, src in partners.items():
        out[column] = frame[column].to_numpy()[src]
    return out


# -- MEWS grid ------------------------------------------------------------------------------------------


def cell_keys(values: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """One int64 key per row for its grid cell (origin = column minimum, half-open cells)."""
    lo = values.min(axis=0)
    idx = np.floor((values - lo) / widths).astype(np.int64)
    radix = idx.max(axis=0) + 1
    key = np.zeros(len(values), dtype=np.int64)
    for j in range(values.shape[1]):
        if key.max(initial=0) > np.iinfo(np.int64).max // max(int(radix[j]), 1):
            raise ParameterError("the widths are so small that the grid has more than 2^63 cells; widen them")
        key = key * radix[j] + idx[:, j]
    return key


@dataclass(frozen=True)
class Partition:
    labels: np.ndarray  # 0..d-1 per row, numbered by first occurrence
    sizes: np.ndarray

    @property
    def degree(self) -> int:
        return len(self.sizes)

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.labels.tobytes()).hexdigest()


def partition(keys: np.ndarray) -> Partition:
    """Canonical labels of a grouping: equal groupings of rows give equal labels."""
    _, first, inverse, counts = np.unique(keys, return_index=True, return_inverse=True, return_counts=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    return Partition(rank[inverse], counts[np.argsort(rank)])


def matrix(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    values = frame[columns].to_numpy(dtype=float)
    if not np.isfinite(values).all():
        raise ParameterError(f"the swap set {columns} holds NaN or infinite values; clean them first")
    return values


def column_scales(values: np.ndarray, units: str) -> np.ndarray:
    if units == "absolute":
        return np.ones(values.shape[1])
    sd = values.std(axis=0, ddof=1) if len(values) > 1 else np.zeros(values.shape[1])
    return np.where(sd > 0, sd, 1.0)  # a constant column has one cell whatever its width


def candidate_partitions(
    values: np.ndarray, scales: np.ndarray, t_range: tuple[float, float], count: int
) -> list[tuple[float, Partition]]:
    """The pruning scheme: feasible (every cell ≥ 2 tuples), pairwise-different partitions on the grid."""
    seen: set[str] = set()
    kept = []
    for tau in np.linspace(t_range[0], t_range[1], count):
        part = partition(cell_keys(values, tau * scales))
        if part.sizes.min() < 2 or part.fingerprint in seen:
            continue
        seen.add(part.fingerprint)
        kept.append((float(tau), part))
    return kept


def merge_singletons(values: np.ndarray, widths: np.ndarray, part: Partition) -> tuple[np.ndarray, int, np.ndarray]:
    """Join each lone tuple to the nearest cell that has ≥ 2 tuples (Chebyshev distance in cells).

    Returns the labels, the number merged, and per attribute the widest bin in cells: lone tuples
    from opposite sides of one cell make a bin up to 2·reach + 1 cells wide, and that span, not
    the reach, bounds how far a value can move.
    """
    labels = part.labels.copy()
    lone = np.flatnonzero(part.sizes[labels] == 1)
    big = np.flatnonzero(part.sizes >= 2)
    if len(lone) == 0:
        return labels, 0, np.ones(values.shape[1], dtype=np.int64)
    if len(big) == 0:
        raise ParameterError("every tuple is alone in its cell; widen the widths")
    idx = np.floor((values - values.min(axis=0)) / widths).astype(np.int64)
    _, first_row = np.unique(labels, return_index=True)  # labels are 0..d-1: first row of each cell
    _, nearest = scipy.spatial.cKDTree(idx[first_row[big]]).query(idx[lone], p=np.inf)
    labels[lone] = big[nearest]
    order = np.argsort(labels, kind="stable")
    starts = np.flatnonzero(np.r_[True, labels[order][1:] != labels[order][:-1]])
    span = np.maximum.reduceat(idx[order], starts) - np.minimum.reduceat(idx[order], starts) + 1
    return labels, len(lone), span.max(axis=0)


def within_range(bounds: dict[str, float], released: pd.DataFrame) -> dict[str, float]:
    """Each bound clipped to its column's range: no value moves further than max − min.

    The range is that of the released column, which holds the same values as the original.
    """
    if len(released) == 0:
        return {c: 0.0 for c in bounds}
    return {c: min(b, float(released[c].max() - released[c].min())) for c, b in bounds.items()}


# -- EDS and MEDS bins ----------------------------------------------------------------------------------


def rank_bins(values: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """EDS bins: consecutive ranks (ties in random order), k per bin; a short last bin joins the previous."""
    n = len(values)
    order = np.lexsort((rng.random(n), values))
    bins = np.empty(n, dtype=np.int64)
    b = np.arange(n) // k
    last = (n - 1) // k
    if n % k and n > k:
        b = np.minimum(b, last - 1)  # the short tail joins the bin before it
    bins[order] = b
    return bins
