"""Privacy budgets as immutable values, and their composition."""

from __future__ import annotations

import math
from dataclasses import dataclass

from privrelease.core.normal import log_ndtr, ndtr

# Relative slack so that n equal splits of a cap add back up to the cap despite float rounding.
REL_TOL = 1e-9


@dataclass(frozen=True, order=False)
class Budget:
    """An (epsilon, delta) pair, checked on construction."""

    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        for name, value in (("epsilon", self.epsilon), ("delta", self.delta)):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ValueError(f"{name} must be a number, got {type(value).__name__}")
            if math.isnan(value) or math.isinf(value) or value < 0:
                raise ValueError(f"{name} must be finite and >= 0, got {value}")
        if self.delta >= 1:
            raise ValueError(f"delta must be < 1, got {self.delta}")
        object.__setattr__(self, "epsilon", float(self.epsilon))
        object.__setattr__(self, "delta", float(self.delta))

    def __add__(self, other: Budget) -> Budget:
        """Basic (sequential) composition."""
        return Budget(self.epsilon + other.epsilon, self.delta + other.delta)

    def fits_within(self, cap: Budget) -> bool:
        """Whether this total stays within ``cap`` (with the split-rounding tolerance)."""
        return self.epsilon <= cap.epsilon * (1 + REL_TOL) and self.delta <= cap.delta * (1 + REL_TOL)

    def show(self) -> str:
        """ "epsilon / delta" with enough digits that spent and remaining visibly add up to the cap."""
        return f"{self.epsilon:.6g} / {self.delta:.6g}"

    @property
    def is_zero(self) -> bool:
        return self.epsilon == 0 and self.delta == 0


ZERO = Budget(0.0, 0.0)
NOT_DP = "recorded on the ledger, not DP, no budget spent"


def charge_phrase(kind: str, epsilon: float = 0.0, delta: float = 0.0) -> str:
    """How every output line says what a release cost: one phrasing for DP charges, one for the rest."""
    return f"charged epsilon={epsilon:g} delta={delta:g}" if kind == "dp" else f"{kind}: {NOT_DP}"


# -- Gaussian mechanisms: GDP composition and the analytic Gaussian conversion ----------------------
#
# A Gaussian mechanism of l2-sensitivity 1 and noise sigma is (1/sigma)-GDP; T of them compose to
# one with 1/sigma*^2 = sum 1/sigma_k^2 (Dong, Roth & Su). Its exact (eps, delta) curve is
# delta(eps) = Phi(-eps*sigma + 1/(2 sigma)) - e^eps * Phi(-eps*sigma - 1/(2 sigma)) (Balle & Wang).


def gaussian_delta(epsilon: float, sigma: float) -> float:
    """The smallest delta for which noise ``sigma`` (sensitivity 1) is (epsilon, delta)-DP."""
    a = 1 / (2 * sigma)
    return ndtr(-epsilon * sigma + a) - math.exp(epsilon + log_ndtr(-epsilon * sigma - a))


def boundary(holds, lo: float, hi: float, rtol: float = 1e-15) -> float:
    """The least x in (lo, hi] at which the monotone condition ``holds`` is true, to relative ``rtol``,
    from the safe side: ``holds(result)`` is True (``holds(hi)`` must be). Bisection, so it stays exact
    about which side it returns; it saves the 0.3 s import of scipy.optimize on every release."""
    while hi - lo > rtol * abs(hi):
        mid = lo + (hi - lo) / 2
        if mid <= lo or mid >= hi:
            break
        lo, hi = (lo, mid) if holds(mid) else (mid, hi)
    return hi


def gaussian_sigma(epsilon: float, delta: float) -> float:
    """The smallest sigma for which a sensitivity-1 Gaussian mechanism is (epsilon, delta)-DP (never
    less: the result satisfies gaussian_delta(epsilon, sigma) <= delta)."""
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError(f"need epsilon > 0 and 0 < delta < 1, got ({epsilon}, {delta})")
    hi = 1.0
    while gaussian_delta(epsilon, hi) > delta:
        hi *= 2
    return boundary(lambda s: gaussian_delta(epsilon, s) <= delta, 1e-6, hi)


def gaussian_epsilon(sigma: float, delta: float) -> float:
    """The smallest epsilon for which noise ``sigma`` is (epsilon, delta)-DP (inverse of the above; never
    less)."""
    if gaussian_delta(0.0, sigma) <= delta:
        return 0.0
    hi = 1.0
    while gaussian_delta(hi, sigma) > delta:
        hi *= 2
    return boundary(lambda e: gaussian_delta(e, sigma) <= delta, 0.0, hi)


def compose_sigmas(sigmas: list[float]) -> float:
    """The single sigma equivalent to composing Gaussian mechanisms (GDP: mu^2 adds up)."""
    return 1 / math.sqrt(sum(1 / s**2 for s in sigmas))
