"""The steward's rules for tables (the ``tables`` section of a disclosure policy), and the protection they imply.

Primary suppression follows the policy alone, never the request:

- ``min_frequency`` n: a non-empty cell with fewer than n contributors is sensitive;
- ``dominance`` (n, k): a magnitude cell whose n largest contributions exceed k% of its total;
- ``p_percent`` p: a magnitude cell whose total less its two largest contributions is below p% of the
  largest (the second largest contributor would estimate the largest within p%).

Contributions are summed by the policy's ``cluster`` (a household or enterprise id) where it names one, else
each record is its own contributor. A sensitive cell's protection interval [X - L, X + U] is what the
intruder's feasible interval for it must reach (Hundepool et al., *Statistical Disclosure Control*, 4.3):

- dominance: U = (100/k)·S_n - X, the margin that would make the cell meet the rule;
- p%: U = (p/100)·x1 - (X - x1 - x2);
- frequency: U = max(r% of X, 1 for a count), r the policy's ``frequency_range``;

each rule's L equal to its U, at most X (no cell is below zero); a cell sensitive by several rules takes the
largest. Zero cells (no contributor) are empty: never sensitive, published, and known to be zero.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from privrelease.core.sdc.cells import factors


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Dominance(_Strict):
    n: int = Field(ge=1, le=10, description="the number of largest contributions")
    k: float = Field(gt=0, le=100, description="their largest allowed share of the cell's total, in percent")


class PPercent(_Strict):
    p: float = Field(gt=0, le=100, description="the precision, in percent, within which no contribution may be estimated")


class CellKey(_Strict):
    """The cell key method's perturbation (``ptable``'s D and V), the steward's."""

    D: int = Field(ge=1, le=10, description="the largest perturbation of a count")
    V: float = Field(gt=0, le=10, description="the perturbation's variance")
    js: int = Field(0, ge=0, le=10, description="counts up to js are never published (perturbed away from them)")

    @model_validator(mode="after")
    def _reach(self) -> CellKey:
        if self.js > 2 * self.D:
            raise ValueError(
                f"cell_key: js {self.js} with D {self.D}: a count of {self.D + 1} could reach neither 0 nor {self.js + 1} "
                f"within D; js is at most 2 × D ({2 * self.D})"
            )
        return self


class CellKeySums(_Strict):
    """Sums by the cell key method (``privrelease.core.sdc.cells.factors``): each contributor's value multiplied by
    1 + c or divided by it, c between ``low`` and ``high`` as its key selects; the steward's."""

    low: float = Field(ge=0, le=1, description="the smallest change c of a contribution (0.1: by at least 10%)")
    high: float = Field(gt=0, le=9, description="the largest change c of a contribution (1: doubled or halved at most)")
    max_guess: float = Field(
        0.25,
        gt=0,
        le=1,
        description="the largest chance that an intruder who knows every other contribution guesses one within the "
        "p%-rule's precision",
    )

    @model_validator(mode="after")
    def _range(self) -> CellKeySums:
        if self.high <= self.low:
            raise ValueError(f"cell_key_sums: high {self.high:g} must be above low {self.low:g}")
        return self


class TableRules(_Strict):
    """What a table of this dataset must meet (None: the rule is not applied)."""

    min_frequency: int | None = Field(None, ge=1, le=1000, description="a non-empty cell needs at least this many contributors")
    dominance: Dominance | None = Field(None, description="the (n, k)-dominance rule on magnitudes")
    p_percent: PPercent | None = Field(None, description="the p%-rule on magnitudes")
    frequency_range: float = Field(30.0, gt=0, le=100, description="a frequency-sensitive cell's protection, in percent")
    cost: Literal["count", "value"] = Field("value", description="what secondary suppression minimises")
    cell_key: CellKey | None = Field(None, description="the cell key method's perturbation table")
    cell_key_sums: CellKeySums | None = Field(None, description="the cell key method's factors for sums")

    @model_validator(mode="after")
    def _sums_protected(self) -> TableRules:
        """Sums by the cell key method are measured by the p%-rule's precision, and must meet max_guess."""
        sums = self.cell_key_sums
        if sums is None:
            return self
        if self.p_percent is None:
            raise ValueError(
                "cell_key_sums: sums by the cell key method are protected to the p%-rule's precision (an intruder "
                "may not guess a contribution within p%), and this policy has no p_percent; set tables.p_percent"
            )
        chance = factors.guess_chance(sums.low, sums.high, self.p_percent.p)
        if chance > sums.max_guess:
            raise ValueError(
                f"cell_key_sums: with changes from {sums.low:g} to {sums.high:g}, an intruder who knows every other "
                f"contribution guesses one within {self.p_percent.p:g}% with chance {chance:.3f}, above max_guess "
                f"{sums.max_guess:g}; raise high (the chance falls about as 1 / log(1 + high)) or max_guess"
            )
        return self

    def words(self) -> dict[str, str]:
        """Each rule set, in words (public)."""
        out = {}
        if self.min_frequency is not None:
            out["min_frequency"] = f"every published cell has at least {self.min_frequency} contributors"
        if self.dominance is not None:
            out["dominance"] = f"no published cell's {self.dominance.n} largest contributions exceed {self.dominance.k:g}% of it"
        if self.p_percent is not None:
            out["p_percent"] = f"no contribution to a published cell can be estimated within {self.p_percent.p:g}%"
        return out

    def magnitude(self) -> list[str]:
        return [r for r in ("dominance", "p_percent") if getattr(self, r) is not None]


ROUNDING = 1e-9  # relative to a cell's total: a rule's margin within it is the sums' rounding (k 100: S_n is the total)


def primary(rules: TableRules, measure: str, contributors: np.ndarray, values: np.ndarray, top: np.ndarray):
    """Each cell's sensitivity and protection: (sensitive mask, lower, upper, the rules each cell fails).

    ``contributors`` is each cell's number of contributors, ``values`` its total, ``top`` its largest
    contributions in decreasing order (cells by rows, at least max(2, n) columns, zeros past the last)."""
    n_cells = len(values)
    lower, upper = np.zeros(n_cells), np.zeros(n_cells)
    failed = np.zeros(n_cells, dtype=np.int64)  # bit 0 frequency, 1 dominance, 2 p%
    present = contributors > 0
    if rules.min_frequency is not None:
        hit = present & (contributors < rules.min_frequency)
        need = rules.frequency_range / 100 * values
        if measure == "count":
            need = np.maximum(need, 1.0)
        upper = np.where(hit, np.maximum(upper, need), upper)
        failed |= hit.astype(np.int64)
    if measure == "sum" and rules.dominance is not None:
        n, k = rules.dominance.n, rules.dominance.k
        s_n = top[:, :n].sum(axis=1)
        hit = present & (s_n - k / 100 * values > ROUNDING * values)
        need = 100 / k * s_n - values
        upper = np.where(hit, np.maximum(upper, need), upper)
        failed |= hit.astype(np.int64) << 1
    if measure == "sum" and rules.p_percent is not None:
        p = rules.p_percent.p
        x1, x2 = top[:, 0], top[:, 1]
        need = p / 100 * x1 - (values - x1 - x2)
        hit = present & (need > ROUNDING * values)
        upper = np.where(hit, np.maximum(upper, need), upper)
        failed |= hit.astype(np.int64) << 2
    sensitive = failed > 0
    lower = np.where(sensitive, np.minimum(upper, values), 0.0)
    return sensitive, lower, np.where(sensitive, upper, 0.0), failed


RULE_BITS = {"min_frequency": 1, "dominance": 2, "p_percent": 4}
