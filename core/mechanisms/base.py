"""The contract every mechanism honours, and the typed cost its plan states.

Every mechanism has a ``NAME``, a ``Params`` model (a ``StrictParams``) and ``plan(params)``: its
cost, from public parameters only, before any data is read. The cost is stated there and nowhere
else: a ``DPCost`` (epsilon, delta under the dataset's adjacency), ``NoDP`` (statistical disclosure
control, with the model it gives instead) or ``MPCCost`` (a secure computation). The manifest and
the ledger take it from the plan; a ``Result`` carries only what the run found.

A ``TableMechanism`` releases a table from a registered dataset: ``needs(params, columns)`` (what
the registered schema must provide), ``run(frame, params, rng)`` and ``check(original, result,
params)`` (output invariants). One whose privacy unit is a column names that parameter in
``UNIT_PARAM``, one that needs the public number of records ``ROWS_PARAM``: the pipeline fills
them from the dataset's registration, never from a request.

A mechanism that reads no registered table (spam-filter training, a protocol between parties) is
a ``Mechanism`` but not a ``TableMechanism``: its run is its own flow's, and only its plan is shared.
``tests/test_contract.py`` checks every registered mechanism against these protocols.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import pandas as pd

from core.accounting import Budget
from core.charts import Chart
from core.params import StrictParams
from core.schema import Needs

COST_KEYS = ("kind", "guarantee", "adjacency", "model", "epsilon", "delta")  # the manifest's, from the plan


@dataclass(frozen=True)
class DPCost:
    """An (epsilon, delta) charge, valid for datasets whose privacy unit is ``unit``."""

    budget: Budget
    unit: Literal["record", "user"]
    kind: Literal["dp"] = "dp"

    @property
    def model(self) -> str:
        return ("user-level " if self.unit == "user" else "") + "(epsilon, delta)-differential privacy"


@dataclass(frozen=True)
class NoDP:
    """No differential privacy: statistical disclosure control under ``model``, whose risk figures the release states."""

    model: str
    kind: Literal["sdc"] = "sdc"


@dataclass(frozen=True)
class MPCCost:
    """No epsilon: a secure computation whose guarantee (``model``) is cryptographic."""

    model: str
    kind: Literal["mpc"] = "mpc"


Cost = DPCost | NoDP | MPCCost


@dataclass(frozen=True)
class Plan:
    """What a run will cost, known before any data is read."""

    cost: Cost
    guarantee: str  # one line, for the manifest and report
    detail: dict = field(default_factory=dict)  # accountant detail for the ledger (e.g. sigmas)


@dataclass(frozen=True)
class Result:
    """A mechanism's output: the released table and what the manifest and report say of it."""

    data: pd.DataFrame
    privacy: dict  # goes to manifest.json under "privacy", after the plan's cost (never restating it)
    report: str  # markdown section for report.md
    charts: list[Chart] = field(default_factory=list)
    headline: dict = field(default_factory=dict)  # the figures the ledger records with the outcome
    name: str = "data"  # the release files' stem: <name>.parquet and <name>.csv
    manifest: dict = field(default_factory=dict)  # extra top-level manifest fields (a mechanism's contract)


@runtime_checkable
class Mechanism(Protocol):
    """What every mechanism states: its name, its parameters and, from them alone, its cost."""

    NAME: str
    Params: type[StrictParams]

    def plan(self, params: StrictParams) -> Plan: ...


@runtime_checkable
class TableMechanism(Mechanism, Protocol):
    """A mechanism that releases a table from a registered dataset, through the release pipeline."""

    def needs(self, params: StrictParams, columns: tuple[str, ...]) -> Needs: ...
    def run(self, frame: pd.DataFrame, params: StrictParams, rng: np.random.Generator) -> Result: ...
    def check(self, original: pd.DataFrame, result: Result, params: StrictParams) -> None: ...
