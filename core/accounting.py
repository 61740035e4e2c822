"""Privacy budgets as immutable values, and their composition."""

from __future__ import annotations

import math
from dataclasses import dataclass

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
        return (
            self.epsilon <= cap.epsilon * (1 + REL_TOL)
            and self.delta <= cap.delta * (1 + REL_TOL)
        )

    @property
    def is_zero(self) -> bool:
        return self.epsilon == 0 and self.delta == 0


ZERO = Budget(0.0, 0.0)
