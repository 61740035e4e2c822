"""The shape every mechanism module has: a typed parameter object, ``plan`` and ``run``.

A mechanism module exposes ``NAME``, ``Params`` (a pydantic model), ``needs(params, columns)`` (what
the registered schema must provide, given its column names), ``plan(params)`` (its cost from public
parameters only: a ``DPCost`` or ``NoDP``), ``run(frame, params, rng)`` and ``check(original, result,
params)`` (output invariants). A mechanism whose privacy unit is a column names that parameter in
``UNIT_PARAM``: the pipeline fills it from the dataset's registered unit, never from a request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

from core.accounting import Budget
from core.schema import Needs


class StrictParams(BaseModel):
    """Base for parameter objects: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class DPCost:
    """An (epsilon, delta) charge, valid for datasets whose privacy unit is ``unit``."""

    budget: Budget
    unit: Literal["record", "user"]
    kind: Literal["dp"] = "dp"


@dataclass(frozen=True)
class NoDP:
    """No differential privacy: statistical disclosure control, whose risk figures the release states."""

    kind: Literal["sdc"] = "sdc"


@dataclass(frozen=True)
class Plan:
    """What a release will cost, known before any data is read."""

    cost: DPCost | NoDP
    guarantee: str  # one line, for the manifest and report
    detail: dict = field(default_factory=dict)  # accountant detail for the ledger (e.g. sigmas)


@dataclass(frozen=True)
class Chart:
    """A chart rendered by ``core.publish``: grouped bars, or ``points`` as scatter or step lines."""

    filename: str
    title: str
    labels: list[str]
    series: dict[str, list[float]]
    ylabel: str = ""
    kind: str = "bar"
    points: dict = field(default_factory=dict)  # name -> (x array, y array), for "scatter" and "line"
    axes: tuple[str, str] = ("", "")


@dataclass(frozen=True)
class Result:
    """A mechanism's output: the released table and what the manifest and report say of it."""

    data: pd.DataFrame
    privacy: dict  # goes to manifest.json under "privacy"
    report: str  # markdown section for report.md
    charts: list[Chart] = field(default_factory=list)
    headline: dict = field(default_factory=dict)  # the figures the ledger records with the outcome
    name: str = "data"  # the release file's stem: <name>.parquet
    csv: bool = True  # also publish <name>.csv
    manifest: dict = field(default_factory=dict)  # extra top-level manifest fields (a mechanism's contract)


class Mechanism(Protocol):
    NAME: str
    Params: type[StrictParams]

    def needs(self, params: StrictParams, columns: tuple[str, ...]) -> Needs: ...
    def plan(self, params: StrictParams) -> Plan: ...
    def run(self, frame: pd.DataFrame, params: StrictParams, rng: np.random.Generator) -> Result: ...
    def check(self, original: pd.DataFrame, result: Result, params: StrictParams) -> None: ...
