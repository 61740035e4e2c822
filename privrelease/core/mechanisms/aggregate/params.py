"""The public parameters of an ``aggregate`` release: the grouping, the measures and the budget.

A request names the ``group_by`` columns and one or more measures, each with the public bounds
its sensitivity is computed from; the registry fills in the privacy unit's column (``user_column``,
None under the record unit) and the steward's declared key domains (``domains``). Everything a
plan needs is here and public: no row is read to check a request.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, model_validator

from privrelease.core.params import StrictParams

MAX_KEYS = 1_000_000  # public key combinations (every one is released, empty ones with noise)
MAX_BINS = 1024
MAX_STEPS = 2**40


class Measure(StrictParams):
    """One statistic per key: ``count``; ``count_distinct`` of a column; ``sum``, ``mean`` or ``quantile``
    of a numeric column clipped to public ``bounds``."""

    op: Literal["count", "count_distinct", "sum", "mean", "quantile"] = Field(description="the statistic")
    column: str | None = Field(None, min_length=1, description="the column it is of (all but count)")
    bounds: list[float] | None = Field(
        None, min_length=2, max_length=2, description="sum, mean, quantile: public [low, high]; values are clipped to them"
    )
    q: list[float] | None = Field(None, min_length=1, max_length=20, description="quantile: the levels, each in (0, 1)")
    bins: int = Field(
        64, ge=2, le=MAX_BINS, description="quantile: equal bins over the bounds of the histogram its interval is read from"
    )
    steps: int | None = Field(
        None, ge=2, le=MAX_STEPS, description="quantile: the answer's grid, equal steps over the bounds (default bins x 2^14)"
    )
    interval_share: float = Field(0.05, gt=0, lt=1, description="quantile: the part of its budget its interval's histogram takes")
    share: float = Field(1.0, gt=0, le=1000, description="this measure's weight in the budget split (default: equal)")

    @model_validator(mode="after")
    def _consistent(self) -> Measure:
        needs_column = self.op != "count"
        if needs_column != (self.column is not None):
            raise ValueError(f"{self.op} {'needs a column' if needs_column else 'takes no column'}")
        bounded = self.op in ("sum", "mean", "quantile")
        if bounded != (self.bounds is not None):
            raise ValueError(f"{self.op} {'needs public bounds [low, high]' if bounded else 'takes no bounds'}")
        if self.bounds is not None:
            low, high = self.bounds
            if not (math.isfinite(low) and math.isfinite(high) and low < high):
                raise ValueError(f"bounds must be finite with low < high, got {self.bounds}")
            if max(abs(low), abs(high)) > 1e15:
                raise ValueError("bounds must lie within ±1e15")
        if (self.op == "quantile") != (self.q is not None):
            raise ValueError("quantile needs q (a list of levels in (0, 1)), and only quantile takes q")
        if self.q is not None:
            if any(not 0 < x < 1 for x in self.q) or len(set(self.q)) != len(self.q):
                raise ValueError(f"q must hold distinct levels strictly between 0 and 1, got {self.q}")
        if self.steps is not None and self.steps % self.bins:
            raise ValueError(f"steps ({self.steps}) must be a multiple of bins ({self.bins}): each bin holds whole steps")
        return self

    @property
    def grid(self) -> int:
        """A quantile's answer grid: the number of equal steps over its bounds."""
        return self.steps if self.steps is not None else self.bins * 2**14

    @property
    def names(self) -> list[str]:
        """The output columns of its estimates (each with ``_lo`` and ``_hi`` beside it)."""
        if self.op == "count":
            return ["count"]
        if self.op == "quantile":
            return [f"{self.column}_q{format(100 * x, 'g').replace('.', '_')}" for x in self.q]
        return [f"{self.column}_{'distinct' if self.op == 'count_distinct' else self.op}"]


class Params(StrictParams):
    """An aggregate release: one row per key of ``group_by``, one column per measure and its 95% interval."""

    group_by: list[str] = Field(min_length=1, max_length=8, description="the columns whose values make a key")
    measures: list[Measure] = Field(min_length=1, max_length=20, description="the statistics released per key")
    epsilon: float | None = Field(None, gt=0, le=50, description="total epsilon (give epsilon or rho)")
    rho: float | None = Field(None, gt=0, le=100, description="total zCDP rho (give epsilon or rho)")
    delta: float = Field(0.0, ge=0, lt=1, description="total delta (Gaussian noise and key selection need it)")
    noise: Literal["gaussian", "laplace"] = Field("gaussian", description="exact discrete Gaussian or discrete Laplace")
    max_groups: int = Field(1, ge=1, le=10_000, description="user unit: most keys a user contributes to (public)")
    max_rows: int = Field(1, ge=1, le=10_000, description="user unit: most rows a user contributes per key (public)")
    selection_share: float = Field(0.5, gt=0, lt=1, description="Gaussian noise with key selection: delta's share for it")
    user_column: str | None = Field(None, description="the registered user column (filled in; none under the record unit)")
    domains: dict[str, list[Any]] | None = Field(None, description="the registered key domains (filled in)")

    @model_validator(mode="after")
    def _consistent(self) -> Params:
        if (self.epsilon is None) == (self.rho is None):
            raise ValueError("give the budget as epsilon (with delta) or as rho (zCDP, with delta to state it), not both")
        if len(set(self.group_by)) != len(self.group_by):
            raise ValueError("group_by lists a column twice")
        names = [n for m in self.measures for n in m.names]
        if len(set(names)) != len(names):
            raise ValueError(f"two measures give the same output column {_twice(names)!r}; ask for each once")
        if self.user_column is None and (self.max_groups, self.max_rows) != (1, 1):
            raise ValueError(
                "max_groups and max_rows bound a user's rows; under the record unit each record is in one key: drop them"
            )
        if self.user_column is not None and self.user_column in self.group_by:
            raise ValueError(f"the user column {self.user_column!r} cannot be a group_by column: it would publish users")
        if self.noise == "gaussian" and self.delta == 0:
            raise ValueError("Gaussian noise needs delta > 0; give delta, or noise: laplace")
        if self.rho is not None and self.delta == 0:
            raise ValueError("a rho budget is charged as (epsilon, delta): give the delta to state it at")
        if self.selects and self.delta == 0:
            raise ValueError(
                f"keys of {', '.join(self.unknown_domains)} are not declared at registration, so they are selected "
                "privately (a noisy count above a threshold), which needs delta > 0"
            )
        for i, m in enumerate(self.measures):
            if self.mean_of(i) is not None and m.share != 1.0:  # (a round trip through model_dump sets every field)
                raise ValueError(
                    f"the sum of {m.column!r} is read from the mean of {m.column!r} (same column and bounds: the noisy centred "
                    "sum and the noisy count), so it has no budget share of its own: drop its share, or set the mean's"
                )
        if not self.selects and math.prod(len(self.domains[c]) for c in self.group_by) > MAX_KEYS:
            raise ValueError(f"the declared domains make more than {MAX_KEYS:,} keys; group by fewer columns")
        return self

    def mean_of(self, i: int) -> int | None:
        """For a sum (measure i), the mean of the same column with the same bounds, if the request has one: the sum is
        then read from that mean's noisy centred sum and the noisy count (S = C + m N, m the bounds' midpoint), with no
        vector of its own."""
        m = self.measures[i]
        if m.op != "sum":
            return None
        return next(
            (j for j, o in enumerate(self.measures) if o.op == "mean" and (o.column, o.bounds) == (m.column, m.bounds)), None
        )

    @property
    def unknown_domains(self) -> list[str]:
        return [c for c in self.group_by if not (self.domains and c in self.domains)]

    @property
    def selects(self) -> bool:
        """Whether the keys are selected privately (some group_by column has no declared domain)."""
        return bool(self.unknown_domains)

    @property
    def groups(self) -> int:
        """The most keys one neighbour's change touches: max_groups under the user unit, 2 under replace-one-record."""
        return self.max_groups if self.user_column else 2

    @property
    def columns(self) -> list[str]:
        """Every column a run reads."""
        used = [m.column for m in self.measures if m.column is not None]
        return list(dict.fromkeys([*self.group_by, *used, *([self.user_column] if self.user_column else [])]))


def _twice(names: list[str]) -> str:
    return next(n for n in names if names.count(n) > 1)
