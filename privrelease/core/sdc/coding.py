"""Integer codes of a column's values, and one code per row for its values in several columns."""

from __future__ import annotations

import numpy as np
import pandas as pd


def codes(column: pd.Series) -> np.ndarray:
    """A column's values as integer codes, a missing value as −1."""
    return pd.factorize(column, use_na_sentinel=True)[0].astype(np.int64)


def combined(codes: np.ndarray, columns: list[int]) -> np.ndarray:
    """One integer per row for its codes (≥ −1) in ``columns``, equal where the rows' codes are, kept
    dense (renumbered before it could overflow)."""
    key = np.zeros(len(codes), dtype=np.int64)
    for j in columns:
        radix = int(codes[:, j].max(initial=-1)) + 2
        if key.max(initial=0) >= (2**62) // radix:
            key = np.unique(key, return_inverse=True)[1].astype(np.int64)
        key = key * radix + codes[:, j] + 1
    return key


def groups(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's group of equal ``key`` (numbered as they first appear, by hashing: no sort) and each
    group's first row."""
    group = pd.factorize(key)[0]
    return group, np.flatnonzero(np.diff(np.maximum.accumulate(group), prepend=-1) > 0)
