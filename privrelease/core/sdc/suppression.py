"""Local suppression to k-anonymity as an intruder counts it: each record's released key cell (the released
records with the same key, a suppressed value a value of its own) holds at least k records.

A person whose true key an intruder knows can be any released record compatible with it (every non-missing
key value equal to theirs); the records of the person's own released cell are all compatible, so a released
cell of k or more leaves every person compatible with at least k records, whatever the intruder knows of the
method (which records it touched, in which order). sdcMicro's ``kAnon`` counts a suppressed value as matching
every value (``freqCalc``), which an intruder who knows the true key does not: a record whose only
difference from a person's key is suppressed in the person's own record is excluded by the intruder, and a
suppressed record is never in a complete cell of k or more (it was suppressed because it was not). ARX counts a
suppressed record as removed from every class, and Samarati's and Sweeney's k-anonymity takes the suppression
mark as a value of the released table: this count is theirs.

The choice (greedy, in the spirit of sdcMicro's: fewest suppressed values per record first):

- records in complete cells of k or more keep their key;
- for s = 1, 2, ... keys, among the patterns (sets of s keys) the one that lets the most unsafe records reach k
  (their values outside the pattern shared by k records suppressed alike, or joining such a cell) is applied
  to those records, ties to the pattern whose keys have more categories; a pattern's count only falls as
  records are placed, so it is recomputed lazily (the largest stale count first);
- the records left have every key suppressed; if fewer than k (but some) do, records from cells that hold
  more than k join them (the cells keep k), those with the most values suppressed already first, else whole
  smallest cells.
"""

from __future__ import annotations

import heapq
import itertools

import numpy as np
import pandas as pd

from privrelease.core.sdc import coding


def _cells(codes: np.ndarray, columns: list[int]) -> np.ndarray:
    """Each row's group of equal codes in ``columns`` (one group when there are none)."""
    if not columns:
        return np.zeros(len(codes), dtype=np.int64)
    return pd.factorize(coding.combined(codes, columns))[0]


def released_cells(codes: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Each record's released cell: records with the same suppressed keys and the same values elsewhere."""
    m = codes.shape[1]
    shown = np.where(((masks[:, None] >> np.arange(m)) & 1) == 1, -1, codes)
    return _cells(np.column_stack([shown, masks]), list(range(m + 1)))


def masks(codes: np.ndarray, k: int, levels: list[int]) -> np.ndarray:
    """Per record, the keys to suppress (bit j: key j): the fewest so that every released cell holds k (see the
    module's docstring). ``codes``: the key's integer codes per record; ``levels``: each key's categories."""
    n, m = codes.shape
    chosen = np.zeros(n, dtype=np.int64)
    if n < k:  # no suppression reaches k: every key value goes (the threshold check then refuses the table)
        return np.full(n, (1 << m) - 1, dtype=np.int64)
    cell = _cells(codes, list(range(m)))
    todo = np.bincount(cell)[cell] < k

    def reached(mask: int) -> np.ndarray:
        """The unsafe records that reach k when ``mask`` is suppressed (with those it was applied to already)."""
        rows = np.flatnonzero(todo | (chosen == mask))
        group = _cells(codes[rows], [j for j in range(m) if not (mask >> j) & 1])
        return rows[(np.bincount(group)[group] >= k) & todo[rows]]

    for size in range(1, m + 1):
        heap = []
        for keys in itertools.combinations(range(m), size):
            mask = sum(1 << j for j in keys)
            heap.append((-(n + 1), -sum(levels[j] for j in keys), mask))  # (−count bound, ties, pattern)
        heapq.heapify(heap)
        while heap and todo.any():
            _, ties, mask = heapq.heappop(heap)
            rows = reached(mask)
            if not len(rows):
                continue
            if heap and (-heap[0][0], -heap[0][1]) > (len(rows), -ties):  # another may reach more: look again later
                heapq.heappush(heap, (-len(rows), ties, mask))
                continue
            chosen[rows] = mask
            todo[rows] = False
    full = (1 << m) - 1
    chosen[todo] = full
    _fill(codes, chosen, k, full)
    return chosen


def _fill(codes: np.ndarray, chosen: np.ndarray, k: int, full: int) -> None:
    """Make the cell of records with every key suppressed hold k, if it holds any: first records of cells
    larger than k (each cell keeps k), then whole smallest cells."""
    short = k - int((chosen == full).sum())
    if short <= 0 or short == k:
        return
    cell = released_cells(codes, chosen)
    size = np.bincount(cell)[cell]
    others = np.flatnonzero(chosen != full)
    suppressed = np.bitwise_count(chosen[others].astype(np.uint64)).astype(np.int64)
    order = others[np.lexsort((-size[others], -suppressed))]  # most suppressed first, then the largest cells
    rank = pd.Series(order).groupby(cell[order]).cumcount().to_numpy()  # a record's place within its cell
    spare = order[rank < size[order] - k][:short]
    chosen[spare] = full
    short -= len(spare)
    if short > 0:  # whole cells of exactly k, smallest first (no cell of more than k has a spare record left)
        for c in pd.unique(cell[others][np.argsort(size[others], kind="stable")]):
            members = np.flatnonzero((cell == c) & (chosen != full))
            chosen[members] = full
            short -= len(members)
            if short <= 0:
                break
