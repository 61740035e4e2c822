"""The DPSU baselines of the DPNE paper's Tables 3-4 (benchmarks only, not a release mechanism):
DPSU-all, DPSU-even and DPSU-single, built from DPNE's own partition, histogram and threshold steps."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from privrelease.core import noise
from privrelease.core.mechanisms.dpne import Params, dpsu_threshold
from privrelease.core.mechanisms.dpne.corpus import open_partition
from privrelease.core.mechanisms.dpne.counts import NONE, Partition, histogram
from privrelease.core.privacy.budget import gaussian_sigma


def all_grams(partition: Partition, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(user, id) for every k-gram position, without pruning, before the partition's level 2. The id
    writes the gram's token ids + 1 as digits in base V + 1 (V tokens), so grams of every length have
    ids of their own and ``lengths`` recovers k."""
    tokens, base = partition.tokens, len(partition.vocabulary) + 1
    if base**k >= 2**63:
        raise ValueError(f"{base - 1} distinct tokens: {k}-gram ids would overflow")
    n = max(len(tokens) - k + 1, 0)
    ok, ids = np.ones(n, bool), np.zeros(n, np.int64)
    for j in range(k):
        ok &= tokens[j : j + n] != NONE
        ids = ids * base + tokens[j : j + n] + 1
    at = np.flatnonzero(ok)
    return partition.users[at], ids[at]


def lengths(partition: Partition, ids: np.ndarray) -> np.ndarray:
    """The length of each gram of ``all_grams``: how many base V + 1 digits its id has."""
    base, ids, out = len(partition.vocabulary) + 1, np.asarray(ids, np.int64).copy(), np.zeros(len(ids), np.int64)
    while ids.any():
        out += ids > 0
        ids //= base
    return out


def names(partition: Partition, ids: np.ndarray) -> list[str]:
    """The n-gram of each id of ``all_grams``."""
    base, vocabulary, out = len(partition.vocabulary) + 1, partition.vocabulary.to_pylist(), []
    for gram in np.asarray(ids, np.int64).tolist():
        tokens = []
        while gram:
            gram, digit = divmod(gram, base)
            tokens.append(vocabulary[digit - 1])
        out.append(" ".join(reversed(tokens)))
    return out


def baseline(frame: pd.DataFrame, params: Params, rng: np.random.Generator, variant: str) -> dict[int, int]:
    """Counts by length for DPSU-all, DPSU-even or DPSU-single (one independent run per length).

    all: one DPSU over n-grams of every length, cap T*Delta_0, sigma*. even: one DPSU per length
    with sigma = sqrt(T)*sigma* and delta/(2T) each. single: the whole budget on each length.
    """
    if variant not in ("all", "even", "single"):
        raise ValueError(f"unknown baseline {variant!r}")
    sigma_star = gaussian_sigma(params.epsilon, params.delta / 2)
    cap, T, key = params.caps[0], params.T, int(noise.words(rng, 1)[0] >> np.uint64(1))
    partition = open_partition((frame, params, 1, 0))
    try:

        def union(grams: list[tuple[np.ndarray, np.ndarray]], cap_: int, sigma: float, delta_part: float) -> np.ndarray:
            unit = noise.grid(sigma)
            users, ids = (np.concatenate(parts) for parts in zip(*grams))
            hist = histogram(partition.con, users, ids, partition.user_hash, cap_, key, unit)
            keep = noise.gaussian(rng, sigma, hist["units"].to_numpy(), unit) > dpsu_threshold(sigma, cap_, delta_part) + unit
            return lengths(partition, hist["gram"].to_numpy()[keep])

        if variant == "all":
            released = union([all_grams(partition, k) for k in range(1, T + 1)], T * cap, sigma_star, params.delta / 2)
            return {k: int((released == k).sum()) for k in range(1, T + 1)}
        sigma, part = (math.sqrt(T) * sigma_star, params.delta / (2 * T)) if variant == "even" else (sigma_star, params.delta / 2)
        return {k: len(union([all_grams(partition, k)], cap, sigma, part)) for k in range(1, T + 1)}
    finally:
        partition.close()
