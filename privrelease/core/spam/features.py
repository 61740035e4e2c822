"""Byte 4-gram features of mail, and the reductions the parties apply with a shared seed.

A message becomes the set of indices of the 4-grams of its first 35,000 bytes (binary presence),
each 4-gram read as a big-endian uint32 modulo M. Reductions map indices into ``dimension``
features: ``hash`` (a smaller modulus), ``uniform`` (a seeded random subset of indices), ``lsh``
(signs of seeded random ±1 projections; outputs are bits) are data-independent; ``df`` and
``multinomial`` need document frequencies, so they are computed on the pooled training mail and
flagged as data-dependent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from privrelease.core.params import StrictParams

MAX_BYTES = 35_000
DATA_DEPENDENT = ("df", "multinomial")


class FeatureParams(StrictParams):
    modulus: int = Field(1_000_000, ge=16, le=2**32, description="4-gram value modulo this (the paper: 10^6)")
    reduction: Literal["hash", "uniform", "lsh", "df", "multinomial", "none"] = Field(
        "hash", description="how to reach `dimension` features"
    )
    dimension: int = Field(10_000, ge=2, le=1_000_000, description="features after the reduction")
    seed: int = Field(0, ge=0, description="seed shared by the parties for uniform and lsh (public; not privacy noise)")

    @model_validator(mode="after")
    def _fits(self) -> FeatureParams:
        if self.reduction != "none" and self.dimension > self.modulus:
            raise ValueError(f"dimension {self.dimension} is larger than the modulus {self.modulus}")
        return self

    @property
    def size(self) -> int:
        return self.modulus if self.reduction == "none" else self.dimension


def grams(text: str | bytes, modulus: int) -> np.ndarray:
    """Sorted distinct 4-gram indices of the first 35,000 bytes."""
    raw = (text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text)[:MAX_BYTES]
    b = np.frombuffer(raw, dtype=np.uint8).astype(np.uint64)
    if b.size < 4:
        return np.empty(0, dtype=np.int64)
    value = (b[:-3] << 24) | (b[1:-2] << 16) | (b[2:-1] << 8) | b[3:]
    return np.unique((value % modulus).astype(np.int64))


@dataclass(frozen=True)
class Reducer:
    """A fitted reduction: index map (or LSH planes) shared by every party."""

    params: FeatureParams
    keep: np.ndarray | None = None  # original index -> reduced index, -1 dropped (uniform, df, multinomial)

    def apply(self, idx: np.ndarray) -> np.ndarray:
        p = self.params
        if p.reduction == "none":
            return idx
        if p.reduction == "hash":
            return np.unique(idx % p.dimension)
        if p.reduction == "lsh":
            return lsh_bits(idx, p.dimension, p.seed)
        assert self.keep is not None
        mapped = self.keep[idx]
        return np.unique(mapped[mapped >= 0])


def _splitmix(x: np.ndarray) -> np.ndarray:
    """A fixed 64-bit mixing function (SplitMix64's finalizer): a public pseudo-random hash."""
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)).astype(np.uint64)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def lsh_bits(idx: np.ndarray, planes: int, seed: int) -> np.ndarray:
    """Charikar's random-hyperplane hash with ±1 planes generated from (seed, plane, feature):
    bit k is set when the sum of plane k's signs over the message's features is >= 0."""
    if idx.size == 0:
        return np.arange(planes)  # every sum is 0
    k = np.arange(planes, dtype=np.uint64)[:, None]
    key = (np.uint64(seed) << np.uint64(40)) ^ (k << np.uint64(20)) ^ idx.astype(np.uint64)[None, :]
    signs = (_splitmix(key) & np.uint64(1)).astype(np.int64) * 2 - 1
    return np.flatnonzero(signs.sum(axis=1) >= 0)


def fit(params: FeatureParams, training: list[np.ndarray] | None = None) -> Reducer:
    """The reduction; ``df`` and ``multinomial`` read document frequencies of ``training``."""
    if params.reduction in ("none", "hash", "lsh"):
        return Reducer(params)
    keep = np.full(params.modulus, -1, dtype=np.int64)
    if params.reduction == "uniform":
        chosen = np.random.default_rng(params.seed).choice(params.modulus, params.dimension, replace=False)
    else:
        if not training:
            raise ValueError(f"reduction {params.reduction!r} needs the training documents' frequencies")
        df = np.bincount(np.concatenate(training), minlength=params.modulus).astype(float)
        if params.reduction == "df":
            chosen = np.argsort(-df, kind="stable")[: params.dimension]
        else:
            live = np.flatnonzero(df)
            size = min(params.dimension, live.size)
            chosen = np.random.default_rng(params.seed).choice(live, size, replace=False, p=df[live] / df[live].sum())
    keep[np.sort(chosen)] = np.arange(len(chosen))
    return Reducer(params, keep)
