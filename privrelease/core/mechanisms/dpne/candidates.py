"""DPNE's valid candidates V_k (Kim et al.): the k-grams whose (k-1)-gram prefix and suffix were released
at level k-1, as a structure that is counted exactly and sampled uniformly without listing it."""

from __future__ import annotations

import numpy as np

from privrelease.core import noise
from privrelease.core.errors import InternalError
from privrelease.core.mechanisms.dpne.counts import SEP


class Candidates:
    """V_k as a structure: counted exactly and sampled uniformly without listing it."""

    def __init__(self, previous: list[str], words: list[str], pruning: str):
        self.pruning = pruning
        self.previous = np.array(previous, dtype=object)
        self.words = np.array(words, dtype=object)
        if pruning == "both":
            # Group (k-1)-grams x.y by y (for L) and y.z by y (for R); V_k = sum over y of L(y) R(y).
            left: dict[str, list[str]] = {}
            right: dict[str, list[str]] = {}
            for gram in previous:
                head, _, tail = gram.partition(SEP)
                left.setdefault(tail, []).append(head)
                stem, _, last = gram.rpartition(SEP)
                right.setdefault(stem, []).append(last)
            self.ys = [y for y in left if y in right]
            self.left = [np.array(left[y], dtype=object) for y in self.ys]
            self.right = [np.array(right[y], dtype=object) for y in self.ys]
            self.weights = np.array([len(a) * len(b) for a, b in zip(self.left, self.right)], dtype=np.int64)
            self.size = int(self.weights.sum())
        else:
            self.size = len(previous) * len(words)

    def sample(self, rng: np.random.Generator, count: int) -> list[str]:
        """``count`` exactly uniform draws (with replacement) from V_k: an index in [0, |V_k|) from
        ``noise.below``, decoded through the integer group sizes (no float probabilities)."""
        if self.pruning == "single":
            w = self.previous[noise.below(rng, np.full(count, len(self.previous)))]
            z = self.words[noise.below(rng, np.full(count, len(self.words)))]
            return [f"{a}{SEP}{b}" for a, b in zip(w, z)]
        index = noise.below(rng, np.full(count, self.size))
        ends = np.cumsum(self.weights)
        groups = np.searchsorted(ends, index, side="right")
        within = index - (ends[groups] - self.weights[groups])
        out = []
        for g, r in zip(groups, within):
            right = self.right[g]
            x, z, y = self.left[g][r // len(right)], right[r % len(right)], self.ys[g]
            out.append(f"{x}{SEP}{y}{SEP}{z}" if y else f"{x}{SEP}{z}")
        return out

    def sample_outside(self, rng: np.random.Generator, count: int, taken: set[str]) -> list[str]:
        """``count`` distinct uniform draws from V_k minus ``taken`` (rejection sampling)."""
        if count > self.size - len(taken):
            raise InternalError("asked for more zero-weight candidates than V_k holds")
        chosen: dict[str, None] = {}
        while len(chosen) < count:
            for gram in self.sample(rng, max(64, 2 * (count - len(chosen)))):
                if gram not in taken and gram not in chosen:
                    chosen[gram] = None
                    if len(chosen) == count:
                        break
        return list(chosen)
