"""The SDC methods practitioners use to meet a disclosure threshold, as sdcMicro and ARX offer them.

Each is a step of an SDC release (``privrelease.core.mechanisms.sdc_chain``): a typed parameter object and an
``apply(frame, params, policy, rng)`` that returns the changed table and what the step did (public
figures of the released table or of the parameters only: counts of suppressed cells, never a value
of the input). A step names the columns it protects (``protects``); local suppression protects the
whole key.

- ``recode``: global recoding with the policy's generalisation hierarchies (sdcMicro's
  ``globalRecode``/``groupAndRename``; ARX's generalisation): a numeric key cut at the policy's
  breaks into intervals, a categorical key mapped up ``level`` levels.
- ``topcode``: top and bottom coding (sdcMicro's ``topBotCoding``): values above ``top`` become
  ``top``, below ``bottom`` become ``bottom``.
- ``suppress``: local suppression to k-anonymity on the policy's key (sdcMicro's ``kAnon``, counted as ARX
  and an intruder count): key values of records in cells smaller than k are set to missing until every
  record's released cell, a suppressed value a value of its own, holds k; fewest suppressed values per
  record first (``privrelease.core.sdc.suppression``).
- ``microaggregate``: MDAV on numeric keys (sdcMicro's ``microaggregation(method = "mdav")``):
  groups of at least k records around the farthest pair, each value replaced by its group's mean.
- ``pram``: invariant PRAM (sdcMicro's ``pram``; Gouweleeuw et al. 1998): each value is kept with
  probability ``keep`` (at most ``PRAM_CEILING``), else replaced by a draw from the column's marginal, so the
  transition matrix P = keep·I + (1 − keep)·1π' leaves the marginal π invariant in expectation.
- ``noise``: additive noise (sdcMicro's ``addNoise(method = "additive")``): normal noise of
  standard deviation ``level`` (at least ``NOISE_FLOOR``) times the column's.

A step that protects must protect: PRAM's ``keep`` and the noise ``level`` are bounded away from no change; top
coding, whose bounds may lie outside the (private) values, is ``nominal``: it protects its column only under a
policy with a threshold measured on the key (``privrelease.core.sdc.enforce``).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field, field_validator, model_validator

from privrelease.core.errors import ParameterError
from privrelease.core.params import StrictParams
from privrelease.core.sdc import coding, suppression
from privrelease.core.sdc.groups import meds_bins
from privrelease.core.sdc.policy import Breaks, Policy


class Recode(StrictParams):
    method: Literal["recode"]
    columns: list[str] = Field(min_length=1, description="key variables to recode with the policy's hierarchies")
    level: int = Field(1, ge=1, le=10, description="categorical keys: how many hierarchy levels up")


class TopCode(StrictParams):
    method: Literal["topcode"]
    column: str = Field(min_length=1, description="a numeric column")
    top: float | None = Field(None, allow_inf_nan=False, description="values above it become it")
    bottom: float | None = Field(None, allow_inf_nan=False, description="values below it become it")

    @model_validator(mode="after")
    def _one(self) -> TopCode:
        if self.top is None and self.bottom is None:
            raise ValueError("topcode needs top, bottom or both")
        if self.top is not None and self.bottom is not None and self.bottom >= self.top:
            raise ValueError("topcode: bottom must be below top")
        return self


class Suppress(StrictParams):
    method: Literal["suppress"]
    k: int | None = Field(None, ge=2, le=1000, description="k-anonymity to reach on the key (default: the policy's k, else 3)")


class Microaggregate(StrictParams):
    method: Literal["microaggregate"]
    columns: list[str] = Field(min_length=1, description="numeric columns aggregated together (MDAV)")
    k: int = Field(3, ge=2, le=1000, description="least records per group")


PRAM_CEILING = 0.9  # PRAM protects a column only if it redraws values: at least one in ten
NOISE_FLOOR = 0.1  # additive noise protects a column only if it moves values: at least a tenth of its sd


class Pram(StrictParams):
    method: Literal["pram"]
    columns: list[str] = Field(min_length=1, description="categorical columns, each randomized on its own")
    keep: float = Field(0.8, gt=0, le=PRAM_CEILING, description="probability a value is kept (else drawn from the marginal)")

    @field_validator("keep", mode="before")
    @classmethod
    def _redraws(cls, keep: object) -> object:
        if isinstance(keep, (int, float)) and not isinstance(keep, bool) and keep > PRAM_CEILING:
            raise ValueError(
                f"pram: keep {keep!r} redraws fewer than one value in ten, so it does not count as protecting its "
                f"columns (at keep near 1 it releases them as they are): keep at most {PRAM_CEILING:g}"
            )
        return keep


class Noise(StrictParams):
    method: Literal["noise"]
    columns: list[str] = Field(min_length=1, description="numeric columns")
    level: float = Field(0.1, ge=NOISE_FLOOR, le=10, description="noise standard deviation, in the column's standard deviations")

    @field_validator("level", mode="before")
    @classmethod
    def _moves(cls, level: object) -> object:
        if isinstance(level, (int, float)) and not isinstance(level, bool) and level < NOISE_FLOOR:
            raise ValueError(
                f"noise: level {level!r} adds less than {NOISE_FLOOR:g} of the column's standard deviation, so it does "
                f"not count as protecting its columns (at a tiny level it releases them as they are): level at least "
                f"{NOISE_FLOOR:g}"
            )
        return level


def columns(step: StrictParams) -> list[str]:
    """The columns a step's parameters name (local suppression names none: it works on the policy's key)."""
    if isinstance(step, Suppress):
        return []
    return [step.column] if isinstance(step, TopCode) else list(step.columns)


def protects(step: StrictParams, policy: Policy) -> list[str]:
    """The columns a step changes so as to protect them."""
    return policy.key_vars.all if isinstance(step, Suppress) else columns(step)


def nominal(step: StrictParams) -> bool:
    """Whether a step's protection is nominal: top coding changes nothing where its bounds lie outside the column's
    values, which are not public, so only a threshold measured on the final table can tell it protected."""
    return isinstance(step, TopCode)


def numeric(step: StrictParams) -> list[str]:
    """The columns a step needs numeric (before it runs)."""
    if isinstance(step, TopCode):
        return [step.column]
    if isinstance(step, (Microaggregate, Noise)):
        return list(step.columns)
    return []


def check(step: StrictParams, policy: Policy) -> None:
    """What a step needs of the policy (public; before any charge or read)."""
    if isinstance(step, Recode):
        named = {c for cs in policy.roles().values() for c in cs}
        unknown = [c for c in step.columns if c not in named]
        if unknown:  # a typo, not a missing hierarchy
            raise ParameterError(
                f"recode: the disclosure policy names no column {unknown[0]!r} (a typo?); recode takes its key "
                f"variables with a hierarchy: {sorted(policy.hierarchies)}"
            )
        missing = [c for c in step.columns if c not in policy.hierarchies]
        if missing:
            raise ParameterError(
                f"recode: the disclosure policy has no hierarchy for {missing}; the data steward "
                f"declares them (hierarchies: in the policy); it has {sorted(policy.hierarchies)}"
            )
        for c in step.columns:
            h = policy.hierarchies[c]
            if isinstance(h, list) and step.level > len(h):
                raise ParameterError(f"recode: {c!r} has {len(h)} hierarchy levels, not {step.level}")


def _intervals(values: pd.Series, breaks: list[float]) -> pd.Series:
    """Each value's interval label: [b_i, b_i+1); below the first break '< b_0', from the last '≥ b_n'."""
    b = np.asarray(breaks, dtype=float)
    v = values.to_numpy(dtype=float, na_value=np.nan)
    idx = np.searchsorted(b, v, side="right")  # 0: below b_0; len(b): at or above the last
    labels = np.array([f"< {b[0]:g}"] + [f"[{lo:g}, {hi:g})" for lo, hi in zip(b, b[1:])] + [f"≥ {b[-1]:g}"], dtype=object)
    out = labels[idx]
    out[np.isnan(v)] = None
    return pd.Series(out, index=values.index, dtype="string")


def recode(frame: pd.DataFrame, step: Recode, policy: Policy) -> tuple[pd.DataFrame, dict]:
    out = frame.copy()
    for c in step.columns:
        h = policy.hierarchies[c]
        if isinstance(h, Breaks):
            out[c] = _intervals(frame[c], h.breaks)
        else:
            column = frame[c].astype("string")
            for level in h[: step.level]:
                column = column.map(lambda v, m=level: m.get(v, v) if v is not pd.NA else v).astype("string")
            out[c] = column
    return out, {"method": "recode", "columns": list(step.columns), "level": step.level}


def topcode(frame: pd.DataFrame, step: TopCode) -> tuple[pd.DataFrame, dict]:
    out = frame.copy()
    out[step.column] = frame[step.column].clip(lower=step.bottom, upper=step.top)
    return out, {"method": "topcode", "column": step.column, "top": step.top, "bottom": step.bottom}


def suppress(frame: pd.DataFrame, step: Suppress, policy: Policy) -> tuple[pd.DataFrame, dict]:
    """Local suppression to k-anonymity on the policy's key, a suppressed value a value of its own
    (``privrelease.core.sdc.suppression``). What it publishes is read off the released table: the suppressed cells."""
    k = step.k or policy.thresholds.k or 3
    keys = policy.key_vars.all
    out = frame.copy()
    for c in keys:  # a suppressed cell is missing: integer columns take pandas' nullable type
        if pd.api.types.is_integer_dtype(out[c]):
            out[c] = out[c].astype("Int64")
    codes = np.column_stack([coding.codes(frame[c]) for c in keys])
    chosen = suppression.masks(codes, k, [int(frame[c].nunique()) for c in keys])
    hidden = ((chosen[:, None] >> np.arange(len(keys))) & 1).astype(bool)
    for j, c in enumerate(keys):
        out.loc[hidden[:, j], c] = pd.NA
    return out, {
        "method": "suppress",
        "k": k,
        "suppressed_cells": int(hidden.sum()),
        "suppressed_by_column": dict(zip(keys, hidden.sum(axis=0).tolist())),
    }


def microaggregate(frame: pd.DataFrame, step: Microaggregate) -> tuple[pd.DataFrame, dict]:
    values = frame[step.columns].to_numpy(dtype=float, na_value=np.nan)
    if np.isnan(values).any():
        raise ParameterError("microaggregate: the columns have missing values; MDAV needs complete columns")
    if len(frame) < step.k:
        raise ParameterError(f"microaggregate: fewer records than k = {step.k}")
    bins, _ = meds_bins(values, step.k)
    means = pd.DataFrame(values).groupby(bins).transform("mean").to_numpy()
    out = frame.copy()
    for j, c in enumerate(step.columns):
        out[c] = means[:, j]
    return out, {"method": "microaggregate", "columns": list(step.columns), "k": step.k, "groups": int(len(np.unique(bins)))}


def pram(frame: pd.DataFrame, step: Pram, rng: np.random.Generator) -> tuple[pd.DataFrame, dict]:
    out = frame.copy()
    n = len(frame)
    for c in step.columns:
        redraw = np.flatnonzero(rng.random(n) >= step.keep)
        source = np.arange(n)
        source[redraw] = rng.integers(0, n, size=redraw.size)  # a draw from the column's marginal
        out[c] = frame[c].array.take(source)
    return out, {"method": "pram", "columns": list(step.columns), "keep": step.keep}


def noise(frame: pd.DataFrame, step: Noise, rng: np.random.Generator) -> tuple[pd.DataFrame, dict]:
    out = frame.copy()
    for c in step.columns:
        v = frame[c].to_numpy(dtype=float, na_value=np.nan)
        sd = float(np.nanstd(v, ddof=1)) if np.isfinite(v).sum() > 1 else 0.0
        out[c] = v + rng.normal(0.0, step.level * sd, len(v)) if sd > 0 else v
    return out, {"method": "noise", "columns": list(step.columns), "level": step.level}


def apply(frame: pd.DataFrame, step: StrictParams, policy: Policy, rng: np.random.Generator) -> tuple[pd.DataFrame, dict]:
    """Run one method step."""
    if isinstance(step, Recode):
        return recode(frame, step, policy)
    if isinstance(step, TopCode):
        return topcode(frame, step)
    if isinstance(step, Suppress):
        return suppress(frame, step, policy)
    if isinstance(step, Microaggregate):
        return microaggregate(frame, step)
    if isinstance(step, Pram):
        return pram(frame, step, rng)
    return noise(frame, step, rng)


METHODS = (Recode, TopCode, Suppress, Microaggregate, Pram, Noise)
