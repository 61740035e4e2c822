"""Local data swapping: MEWS (multivariate equi-width), MEDS (multivariate equi-depth), EDS (rank).

Swapping is value-invariant: every column's released values are a permutation of its original
values. Tuples are first localized into bins, then values move only inside a bin.

- MEWS: bins are the non-empty cells of an equi-width grid on the swapping set S, cells
  ``[min + c*t, min + (c+1)*t)`` per attribute; every value stays in its cell, so it changes by
  less than t. A lone tuple merged into the nearest cell (explicit widths) widens that bin: the
  published bound is t times the widest bin in cells, capped at the column's range. The width is
  given, or drawn uniformly (and kept secret) from the feasible, pairwise-different partitions of
  a range [t_lb, t_ub]: the hidden width is the privacy argument.
- MEDS: bins of k tuples built around the farthest pair (MDAV-style), on standardized S.
- EDS: univariate rank swapping, bins of k consecutive ranks.

Inside a bin each attribute is permuted independently (``cyclic``: a random cycle, so every
tuple takes another's value; ``pairs``: random pairs, one 3-cycle in an odd bin) or the whole
S vector moves together (``block``). None of these is differential privacy; the ledger records
the release with epsilon = delta = 0 and its disclosure risk.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field, field_validator, model_validator

from privrelease.core.charts import Chart
from privrelease.core.errors import InternalError, ParameterError
from privrelease.core.mechanisms.base import Plan, Result
from privrelease.core.mechanisms.swapping.bins import (
    Partition,
    apply,
    candidate_partitions,
    cell_keys,
    column_scales,
    matrix,
    meds_bins,
    merge_singletons,
    partition,
    rank_bins,
    swap,
    within_range,
)
from privrelease.core.params import StrictParams
from privrelease.core.privacy.cost import NoDP
from privrelease.core.tables.schema import Needs

SwapMode = Literal["cyclic", "pairs", "block"]


class _Common(StrictParams):
    swap_set: list[str] = Field(min_length=1, description="attributes swapped together (S)")
    swap_mode: SwapMode = Field(
        "cyclic", description="cyclic | pairs: each attribute permuted on its own; block: x[S] moves whole"
    )
    others: Literal["eds", "keep"] = Field("keep", description="numeric attributes outside S: rank-swapped (EDS) or left alone")
    k: int | None = Field(None, ge=2, description="bin depth for MEDS and EDS (tuples per bin)")

    @model_validator(mode="after")
    def _unique(self) -> _Common:
        if len(set(self.swap_set)) != len(self.swap_set):
            raise ValueError("swap_set lists a column twice")
        return self


class MEWSParams(_Common):
    """MEWS: explicit ``widths``, or a ``t_range`` from which the width is drawn and kept secret."""

    widths: float | dict[str, float] | None = Field(None, description="cell width: one for all of S, or per attribute")
    t_range: tuple[float, float] | None = Field(None, description="[t_lb, t_ub]: candidate widths (scalar, in width_units)")
    width_units: Literal["sd", "absolute"] = Field("sd", description="widths in standard deviations or in the data's units")
    candidates: int = Field(100, ge=2, le=10_000, description="grid points tried on t_range")
    singletons: Literal["merge", "suppress"] = Field("merge", description="cells holding one tuple (explicit widths)")

    @field_validator("singletons", mode="before")
    @classmethod
    def _no_refusal_on_data(cls, value: object) -> object:
        if value == "error":  # it refused after the rows were read, with how many tuples sat alone
            raise ValueError(
                "singletons: error is not offered: a refusal after the rows are read would tell the "
                "analyst about the table (whether, and how many, tuples sit alone in their cell), "
                "which no release shows; use merge or suppress"
            )
        return value

    @model_validator(mode="after")
    def _width_choice(self) -> MEWSParams:
        if (self.widths is None) == (self.t_range is None):
            raise ValueError("give exactly one of widths and t_range")
        values = [self.widths] if isinstance(self.widths, (int, float)) else list((self.widths or {}).values())
        if isinstance(self.widths, dict) and set(self.widths) != set(self.swap_set):
            raise ValueError("widths must name exactly the swap_set columns")
        if self.t_range is not None:
            values = list(self.t_range)
            if not self.t_range[0] < self.t_range[1]:
                raise ValueError("t_range must be [t_lb, t_ub] with t_lb < t_ub")
        if any(not math.isfinite(v) or v <= 0 for v in values):
            raise ValueError("widths must be finite and positive")
        if self.others == "eds" and self.k is None:
            raise ValueError("others: eds needs k (the rank-swapping depth)")
        return self


class DepthParams(_Common):
    """MEDS and EDS: bins of ``k`` tuples."""

    @model_validator(mode="after")
    def _depth(self) -> DepthParams:
        if self.k is None:
            raise ValueError("k (tuples per bin) is required")
        return self


class EDSParams(DepthParams):
    """EDS: rank swapping of one attribute."""

    @model_validator(mode="after")
    def _one(self) -> EDSParams:
        if len(self.swap_set) != 1:
            raise ValueError("EDS swaps one attribute at a time: give a single swap_set column, or use MEDS")
        return self


# -- the three mechanisms -----------------------------------------------------------------------------


def needs_numeric(params: _Common) -> Needs:
    return Needs(columns=tuple(params.swap_set), numeric=tuple(params.swap_set))


def plan_swapping(name: str) -> Plan:
    return Plan(
        cost=NoDP("local data swapping (not differential privacy)"),
        guarantee=f"{name}: value-invariant local swapping with disclosure risk P; not differential privacy",
    )


def _others(frame: pd.DataFrame, params: _Common, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """EDS on the numeric columns outside S, when asked."""
    if params.others == "keep":
        return {}
    out = {}
    for column in frame.columns:
        if column in params.swap_set or not pd.api.types.is_numeric_dtype(frame[column]):
            continue
        values = frame[column].to_numpy()
        if pd.isna(values).any():
            raise ParameterError(
                "a numeric column outside the swap set has missing values (the registered schema "
                "says which may); EDS needs complete columns: use others: keep"
            )
        out |= swap([column], rank_bins(values, params.k, rng), params.swap_mode, rng)
    return out


def _risk(partners: dict[str, np.ndarray], candidates: list[Partition]) -> float:
    """Hidden-width risk: max over tuples and attributes of (1/q)·Σ_j 1[partner in B_j]/(|B_j| − 1)."""
    worst = 0.0
    for src in partners.values():
        total = np.zeros(len(src))
        for part in candidates:
            same = part.labels == part.labels[src]
            size = part.sizes[part.labels]
            total += np.where(same & (size > 1), 1.0 / np.maximum(size - 1, 1), 0.0)
        worst = max(worst, float(total.max(initial=0.0)) / len(candidates))
    return worst


def _finish(
    name: str,
    frame: pd.DataFrame,
    params: _Common,
    bins: np.ndarray,
    risk: dict,
    rng: np.random.Generator,
    keep_rows: np.ndarray | None = None,
    candidates: list[Partition] | None = None,
) -> Result:
    """Swap inside ``bins``, apply EDS outside S if asked, and state the risk figures."""
    partners_s = swap(params.swap_set, bins, params.swap_mode, rng)
    partners = partners_s | _others(frame, params, rng)
    released = apply(frame, partners)
    kept_bins = bins if keep_rows is None else bins[keep_rows]
    if keep_rows is not None:
        released = released[keep_rows].reset_index(drop=True)
    if "max_change_bound" in risk and risk.get("bound_units") != "sd":
        risk = risk | {"max_change_bound": within_range(risk["max_change_bound"], released)}
    sizes = np.bincount(kept_bins)
    sizes = sizes[sizes > 0]
    degree, smallest = int(len(sizes)), int(sizes.min()) if len(sizes) else 0
    risk = {
        "partition_degree": degree,
        "minimal_bin_size": smallest,
        "p_known": 1.0 / (smallest - 1) if smallest > 1 else 1.0,
        **risk,
    }
    if candidates is not None:
        # The paper's model: the attacker knows only the range, so any of the q_ew partitions may
        # be the one used. But d and the minimal bin size are published too, and only candidates
        # that match them remain plausible: the risk given what is published is reported beside it.
        consistent = [p for p in candidates if p.degree == degree and int(p.sizes.min()) == smallest]
        risk |= {
            "p_hidden": _risk(partners_s, candidates),
            "q_consistent": len(consistent),
            "p_hidden_given_published": _risk(partners_s, consistent),
        }
    else:
        risk |= {"p_hidden": risk["p_known"], "p_hidden_given_published": risk["p_known"]}
    privacy = {
        "swap_set": list(params.swap_set),
        "swap_mode": params.swap_mode,
        "others_swapped_with_eds": sorted(set(partners) - set(params.swap_set)),
        **risk,
    }
    # The report and charts draw on the released table and the risk figures only: the original
    # records (and any statistic of them beyond the stated figures) never leave the run.
    pairs = [(x, y) for i, x in enumerate(params.swap_set) for y in params.swap_set[i + 1 :]][:3]
    charts = [_scatter(released, x, y, i) for i, (x, y) in enumerate(pairs)]
    report = _report(name, privacy)
    headline = {k: privacy[k] for k in ("partition_degree", "p_known", "p_hidden")}
    return Result(
        released,
        privacy,
        report,
        charts,
        headline,
        manifest={
            "risk": {k: privacy[k] for k in ("p_known", "p_hidden", "p_hidden_given_published")},
            "partition_degree": degree,
        },
    )


def _report(name: str, privacy: dict) -> str:
    lines = "\n".join(f"- {k.replace('_', ' ')}: {v}" for k, v in privacy.items())
    bound = (
        "The max change bound, per column of S, is a true bound: no released value differs from the value "
        "its row held by more than it. It is the cell width (t_ub for a hidden width) times the widest bin in "
        "cells (a lone tuple merged into a nearby cell widens that bin), capped at the column's range "
        "(max − min).\n"
        if "max_change_bound" in privacy
        else ""
    )
    if privacy.get("bound_units") == "sd":
        bound += (
            "Widths and bounds are in standard deviations of the registered column, as the request gave them: "
            "tuples were suppressed, and that column's scale in the data's units would tell their values.\n"
        )
    return (
        f"## {name.upper()}\n\nValues were swapped between tuples of the same bin: every column holds exactly its "
        "original values, in another order. Not differential privacy; the ledger records epsilon = delta = 0.\n\n"
        f"{lines}\n\n{bound}"
    )


def _scatter(released: pd.DataFrame, x: str, y: str, i: int) -> Chart:
    step = max(1, len(released) // 5000)  # plot at most about 5,000 points
    points = {"released": (released[x].to_numpy(float)[::step], released[y].to_numpy(float)[::step])}
    return Chart(f"swap_scatter_{i + 1}.png", f"{x} vs {y}: released", [], {}, kind="scatter", points=points, axes=(x, y))


class _MEWS:
    NAME = "mews"
    Params = MEWSParams

    @staticmethod
    def needs(params: MEWSParams, schema: tuple[str, ...]) -> Needs:
        return needs_numeric(params)

    @staticmethod
    def protects(params: MEWSParams) -> list[str]:
        return list(params.swap_set)

    @staticmethod
    def plan(params: MEWSParams) -> Plan:
        return plan_swapping("MEWS")

    @staticmethod
    def run(frame: pd.DataFrame, params: MEWSParams, plan: Plan, rng: np.random.Generator) -> Result:
        values = matrix(frame, params.swap_set)
        if len(frame) < 2:
            raise ParameterError("swapping needs at least 2 rows")
        scales = column_scales(values, params.width_units)
        keep_rows, merged, candidates = None, 0, None
        if params.t_range is not None:
            found = candidate_partitions(values, scales, params.t_range, params.candidates)
            if not found:
                raise ParameterError(
                    f"no width in t_range {list(params.t_range)} puts at least 2 tuples in every cell; "
                    "raise t_ub (the largest change you tolerate)"
                )
            _, part = found[int(rng.integers(0, len(found)))]  # the width used stays secret
            labels, candidates = part.labels, [p for _, p in found]
            risk = {
                "t_range": list(params.t_range),
                "width_units": params.width_units,
                "q_ew": len(found),
                "max_change_bound": {c: float(params.t_range[1] * sc) for c, sc in zip(params.swap_set, scales)},
            }
        else:
            w = params.widths
            widths = (np.array([w[c] for c in params.swap_set]) if isinstance(w, dict) else np.full(len(scales), w)) * scales
            part = partition(cell_keys(values, widths))
            labels, span = part.labels, np.ones(len(widths), dtype=np.int64)
            lone = int((part.sizes == 1).sum())
            if lone and params.singletons == "merge":
                labels, merged, span = merge_singletons(values, widths, part)
            if lone and params.singletons == "suppress":
                keep_rows = part.sizes[part.labels] >= 2
            risk = {
                "widths": dict(zip(params.swap_set, widths.tolist())),
                "q_ew": 1,
                "max_change_bound": {c: float(wv * n) for c, wv, n in zip(params.swap_set, widths, span)},
            }
            if keep_rows is not None and params.width_units == "sd":
                # The scale is the registered column's standard deviation, suppressed records included: with
                # N and the kept values public, a width in the data's units would give the suppressed values
                # back (a quadratic in each). Widths and bounds stay in the request's units.
                given = widths / scales
                risk = {
                    "widths": dict(zip(params.swap_set, given.tolist())),
                    "q_ew": 1,
                    "bound_units": "sd",
                    "max_change_bound": {c: float(wv * n) for c, wv, n in zip(params.swap_set, given, span)},
                }
        risk |= {
            "cells": part.degree,
            "merged_singletons": merged,
            "suppressed_tuples": 0 if keep_rows is None else int((~keep_rows).sum()),
        }
        return _finish("mews", frame, params, labels, risk, rng, keep_rows, candidates)

    @staticmethod
    def check(original: pd.DataFrame, result: Result, params: MEWSParams) -> None:
        """Value invariance, and no value of S moved by more than its published bound."""
        check_value_invariance(original, result, params)
        if len(result.data) != len(original):
            return  # suppressed rows: the bound is checked per kept row in the tests
        for column, bound in result.privacy["max_change_bound"].items():
            moved = np.abs(result.data[column].to_numpy(float) - original[column].to_numpy(float))
            if moved.max(initial=0.0) > bound * (1 + 1e-12):
                raise InternalError(f"a value of {column!r} moved further than its cell allows")


def check_value_invariance(original: pd.DataFrame, result: Result, params: _Common) -> None:
    """Every released column is a permutation of the original; untouched columns are identical."""
    released = result.data
    if list(released.columns) != list(original.columns):
        raise InternalError("swapping changed the columns")
    if len(released) != len(original):
        return  # suppressed rows: the per-bin invariants are checked in the tests
    swapped = set(params.swap_set) | set(result.privacy["others_swapped_with_eds"])
    for column in original.columns:
        if column in swapped:
            if not np.array_equal(np.sort(released[column].to_numpy()), np.sort(original[column].to_numpy())):
                raise InternalError(f"swapping changed the values of {column!r}")
        elif not released[column].equals(original[column]):
            raise InternalError(f"swapping changed the untouched column {column!r}")


class _Depth:
    def __init__(self, name: str, params: type[DepthParams]):
        self.NAME = name
        self.Params = params

    def needs(self, params: DepthParams, schema: tuple[str, ...]) -> Needs:
        return needs_numeric(params)

    def protects(self, params: DepthParams) -> list[str]:
        return list(params.swap_set)

    def plan(self, params: DepthParams) -> Plan:
        return plan_swapping(self.NAME.upper())

    def run(self, frame: pd.DataFrame, params: DepthParams, plan: Plan, rng: np.random.Generator) -> Result:
        values = matrix(frame, params.swap_set)
        if len(frame) < 2:
            raise ParameterError("swapping needs at least 2 rows")
        if self.NAME == "meds":
            bins, _ = meds_bins(values, params.k)
        else:  # one attribute (EDSParams)
            bins = rank_bins(values[:, 0], params.k, rng)
        return _finish(self.NAME, frame, params, bins, {"k": params.k}, rng)

    def check(self, original: pd.DataFrame, result: Result, params: DepthParams) -> None:
        check_value_invariance(original, result, params)


MEWS = _MEWS()
MEDS = _Depth("meds", DepthParams)
EDS = _Depth("eds", EDSParams)
