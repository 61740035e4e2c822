"""The DPSU baselines of the DPNE paper's Tables 3-4 (benchmarks only, not a release mechanism):
DPSU-all, DPSU-even and DPSU-single, built from DPNE's own corpus, histogram and threshold steps."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from core import noise
from core.accounting import gaussian_sigma
from core.db import scratch
from core.mechanisms.dpne import Params, dpsu_threshold
from core.mechanisms.dpne_counts import SEP, corpus, histogram


def all_grams_sql(k: int) -> str:
    """(uid, gram) for every k-gram position, without pruning."""
    if k == 1:
        return "SELECT uid, token AS gram FROM tokens"
    leads = ", ".join(f"lead(token, {j}) OVER w" for j in range(1, k))
    return (
        f"SELECT uid, gram FROM (SELECT uid, concat_ws('{SEP}', token, {leads}) AS gram, "
        f"lead(token, {k - 1}) OVER w AS last FROM tokens WINDOW w AS (PARTITION BY post ORDER BY pos)) "
        "WHERE last IS NOT NULL"
    )


def baseline(frame: pd.DataFrame, params: Params, rng: np.random.Generator, variant: str) -> dict[int, int]:
    """Counts by length for DPSU-all, DPSU-even or DPSU-single (one independent run per length).

    all: one DPSU over n-grams of every length, cap T*Delta_0, sigma*. even: one DPSU per length
    with sigma = sqrt(T)*sigma* and delta/(2T) each. single: the whole budget on each length.
    """
    sigma_star = gaussian_sigma(params.epsilon, params.delta / 2)
    cap, T, key = params.caps[0], params.T, int(noise.words(rng, 1)[0] >> np.uint64(1))
    con = scratch()
    try:
        corpus(con, frame, params)

        def union(sql: str, cap_: int, sigma: float, delta_part: float) -> pd.Series:
            unit = noise.grid(sigma)
            hist = histogram(con, sql, cap_, key, unit)
            keep = noise.gaussian(rng, sigma, hist["units"].to_numpy(), unit) > dpsu_threshold(sigma, cap_, delta_part) + unit
            return hist["gram"][keep].str.count(SEP) + 1

        if variant == "all":
            lengths = union(" UNION ALL ".join(all_grams_sql(k) for k in range(1, T + 1)), T * cap, sigma_star, params.delta / 2)
            return {k: int((lengths == k).sum()) for k in range(1, T + 1)}
        if variant == "even":
            sigma, part = math.sqrt(T) * sigma_star, params.delta / (2 * T)
        elif variant == "single":
            sigma, part = sigma_star, params.delta / 2
        else:
            raise ValueError(f"unknown baseline {variant!r}")
        return {k: len(union(all_grams_sql(k), cap, sigma, part)) for k in range(1, T + 1)}
    finally:
        con.close()
