"""The paper's comparison points for DP outlier counts (Okada et al.), for benchmarks only: neither
is a valid noise scale for a release (releases use ``outliers_sensitivity``'s bounds)."""

from __future__ import annotations

import math


def gs_lower(n: int, k: int, c: int) -> int:
    """The paper's 'Global' baseline: the GS *lower* bound min(N, 2ck+1). Not a valid DP scale."""
    return min(n, 2 * c * k + 1)


def paper_global_std(gs: float, epsilon: float, delta: float) -> float:
    """Theorem 1's noise std for global sensitivity ``gs`` (the paper's constant 2 ln(2/δ), valid
    for epsilon < 1); for reproducing its comparison. Releases use the analytic Gaussian."""
    return gs * math.sqrt(2 * math.log(2 / delta)) / epsilon
