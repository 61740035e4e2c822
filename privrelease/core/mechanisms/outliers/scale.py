"""Outlier statistics' scaling of the columns: a public mean and standard deviation per column, or
estimates from the data with one Gaussian mechanism (its share of the release's budget)."""

from __future__ import annotations

import math
from typing import Annotated

import numpy as np
from pydantic import Field, model_validator

from privrelease.core import noise
from privrelease.core.params import StrictParams
from privrelease.core.privacy import draws, events
from privrelease.core.privacy.accuracy import sampler_std


class PublicScale(StrictParams):
    mean: float = Field(allow_inf_nan=False, description="public mean of the column")
    std: float = Field(gt=0, allow_inf_nan=False, description="public standard deviation of the column")


class PrivateScale(StrictParams):
    """Estimate means and standard deviations from the data with the Gaussian mechanism (charged)."""

    bounds: dict[str, tuple[Annotated[float, Field(allow_inf_nan=False)], Annotated[float, Field(allow_inf_nan=False)]]] = Field(
        min_length=1, description="public clipping range [low, high] per column for the estimate"
    )
    share: float = Field(0.1, gt=0, lt=1, description="fraction of epsilon and delta spent on the estimate")

    @model_validator(mode="after")
    def _ordered(self) -> PrivateScale:
        for column, (lo, hi) in self.bounds.items():
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise ValueError(f"standardize.bounds[{column!r}] must be finite with low < high")
        return self


def private_scale(
    x: np.ndarray, bounds: np.ndarray, leaf: events.DiscreteGaussian, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, float]:
    """Means and stds from clipped sums with one Gaussian mechanism (replace-one sensitivity).

    Each column is mapped onto [−1, 1] by its public bounds and each value put on the noise grid
    (y to the nearest grid point, y^2 rounded down: still in [−1, 1] and [0, 1]); replacing a record
    moves a column's sum by at most 2 and its sum of squares by at most 1, so the l2 sensitivity is
    sqrt(5d). Sums are exact integers in grid units; the noise is ``privrelease.core.noise``'s discrete Gaussian.
    """
    n, d = x.shape
    centre, half = bounds.mean(axis=1), (bounds[:, 1] - bounds[:, 0]) / 2
    y = (np.clip(x, bounds[:, 0], bounds[:, 1]) - centre) / half
    sigma = leaf.sigma  # sqrt(5d) * the continuous proof's std (``private_leaf``)
    noise.check_shift(leaf.sensitivity, sigma)
    unit = min(1.0, noise.grid(sigma))
    yu = np.rint(y / unit).astype(np.int64)
    sq = (yu * yu) // round(1 / unit)  # floor(y^2 / unit) in grid units (unit is a power of two <= 1)
    noisy = draws.values(rng, leaf, np.concatenate([yu.sum(axis=0), sq.sum(axis=0)]), unit)
    m1 = np.clip(noisy[:d] / n, -1, 1)
    var = np.clip(noisy[d:] / n - m1**2, (1 / n) ** 2, 1)  # a floor keeps the scale positive
    return centre + half * m1, half * np.sqrt(var), sampler_std(sigma, unit)  # the last: the sums' noise std
