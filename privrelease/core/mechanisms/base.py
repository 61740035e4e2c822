"""The contract every mechanism honours, and the typed cost its plan states.

Every mechanism has a ``NAME``, a ``Params`` model (a ``StrictParams``) and ``plan(params)``: its
cost, from public parameters only, before any data is read. The cost is stated there and nowhere
else: a ``DPCost`` (its privacy event, ``privrelease.core.privacy.events``, whose (epsilon, delta) is derived from
it, under a typed adjacency, ``privrelease.core.privacy.adjacency``), ``NoDP`` (statistical disclosure
control, with the model it gives instead) or ``MPCCost`` (a secure computation). The manifest and
the ledger take it from the plan; a ``Result`` carries only what the run found.

A ``TableMechanism`` releases a table from a registered dataset: ``needs(params, columns)`` (what
the registered schema must provide), ``run(frame, params, plan, rng)`` and ``check(original, result,
params)`` (output invariants). ``run`` is handed the very plan that was charged and draws only with the
leaves of its event (``privrelease.core.privacy.draws``): it never plans again, nor builds a leaf of its own, so the
noise drawn is the noise charged by construction (as OpenDP builds a measurement's sampler and its privacy
map from one value, and PipelineDP hands a mechanism the ``MechanismSpec`` its accountant filled in).

What a mechanism may declare besides, each with its default, is ``Declared``, and ``declared(m)``
reads it, the one way anything does: the parameters the registry fills from the dataset's
registration, never from a request (``UNIT_PARAM``, ``ROWS_PARAM``, ``POLICY_PARAM``, ``DOMAINS_PARAM``), whether
its Dask workers read the stored snapshot themselves, and its views before a release (its expected
``accuracy`` with the lines and charts that show it, its ``warnings`` and ``notes``), as
diffprivlib's mechanisms carry their bias and variance. The preview asks for them by these names
and knows no mechanism by its own.

An ``SdcMechanism`` is a ``TableMechanism`` under statistical disclosure control that also says which of the
policy's key variables a request ``protects``. A mechanism that reads no registered table (spam-filter training, a protocol between parties) is
a ``Mechanism`` but not a ``TableMechanism``: its run is its own flow's, and only its plan is shared.
``tests/mechanisms/test_contract.py`` checks every registered mechanism against these protocols.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from privrelease.core.charts import Chart
from privrelease.core.params import StrictParams
from privrelease.core.privacy.cost import Cost
from privrelease.core.tables.schema import Needs

if TYPE_CHECKING:  # the frames a run takes: the gate and the ledger's commands read the contract, never a frame
    import numpy as np
    import pandas as pd

COST_KEYS = ("kind", "guarantee", "adjacency", "model", "epsilon", "delta")  # the manifest's, from the plan


@dataclass(frozen=True)
class Plan:
    """What a run will cost, known before any data is read."""

    cost: Cost
    guarantee: str  # one line, for the manifest and report
    detail: dict = field(default_factory=dict)  # display figures for the ledger entry (e.g. sigmas); never the cost


@dataclass(frozen=True)
class Snapshot:
    """A registered snapshot's Parquet file, its digest checked against the registration: what ``run`` and
    ``check`` get instead of its rows when the mechanism declares ``READS_SNAPSHOT`` (it reads the file in
    DuckDB itself, so the rows are never all in this process's memory, nor converted to pandas). ``digest`` is
    its SHA-256 as checked (private: a key for caches of what is computed from its bytes, never shown; empty
    when unknown, and then nothing is cached)."""

    path: str
    digest: str = field(default="", repr=False)


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
    # an SDC chain's key before local suppression, row by row with ``data``: each released record's person's key as
    # the release codes it, for the intruder's count in the steward's internal report; never published
    persons: pd.DataFrame | None = None
    # more tables published beside ``data``, each as <name>.csv (an SDC table's pivoted view, for a person to read)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    # the steward's internal figures of a mechanism that assesses itself (``Declared.assess``): never published
    internal: dict | None = None


@dataclass(frozen=True)
class Earlier:
    """A release of the same mechanism published before from the same dataset, as a mechanism's own assessment
    (``Declared.assess``) reads it: an SDC table's linked audit."""

    release_id: str
    params: dict  # its parameters as published (its manifest's)
    data: pd.DataFrame  # its published data
    same_registration: bool  # drawn from the snapshot this release reads (else an earlier registration's)


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
    def run(self, frame: pd.DataFrame | Snapshot, params: StrictParams, plan: Plan, rng: np.random.Generator) -> Result: ...
    def check(self, original: pd.DataFrame | Snapshot, result: Result, params: StrictParams) -> None: ...


@runtime_checkable
class SdcMechanism(TableMechanism, Protocol):
    """A table mechanism under statistical disclosure control (its plan's cost is ``NoDP``): ``protects(params)``
    names the disclosure policy's key variables a request protects, which the policy's check before the charge
    (``privrelease.core.sdc.enforce``) and the risk report read."""

    def protects(self, params: StrictParams) -> list[str]: ...


def _none(*_: object) -> None:
    return None


def _no(*_: object) -> bool:
    return False


def _empty(*_: object) -> list:
    return []


@dataclass(frozen=True)
class Declared:
    """What a mechanism may declare beyond its protocol, by the attribute names it uses, with the
    defaults of one that declares nothing. The views take public values only: the parameters (the
    registry's bound in), the plan and the registered column names; ``accuracy_lines`` and
    ``accuracy_charts`` show what ``accuracy`` returned."""

    UNIT_PARAM: str | None = None  # the parameter filled with the registered unit's column (its privacy unit)
    ROWS_PARAM: str | None = None  # the parameter filled with the registered, public number of records
    POLICY_PARAM: str | None = None  # the parameter filled with the dataset's disclosure policy
    DOMAINS_PARAM: str | None = None  # the parameter filled with the key domains declared at registration
    COLUMNS_PARAM: str | None = None  # the parameter filled with the registered column names where a request leaves it empty
    UNIT_OPTIONAL: bool = False  # UNIT_PARAM is left None under the record unit (else such a dataset is refused)
    READS_SNAPSHOT_ON_WORKERS: bool = False  # on Dask, its workers read the stored snapshot (checked before the charge)
    READS_SNAPSHOT: bool = False  # a DP release's run gets the checked snapshot's file (a ``Snapshot``), not its rows
    # whether an SDC release's run gets each record's key (the cell key method: ``enforce.RECORD_KEY``, never published)
    record_keys: Callable[[StrictParams], bool] = _no
    # the column whose contributions it also gets a factor key for (sums by the cell key method: ``enforce.FACTOR_KEY``)
    factor_keys: Callable[[StrictParams], str | None] = _none
    accuracy: Callable[[StrictParams, Plan, tuple[str, ...]], dict | None] = _none  # each DP output's noise and interval
    accuracy_lines: Callable[[dict], list[str]] = _empty  # those figures in markdown
    accuracy_charts: Callable[[dict], list[Chart]] = _empty  # and drawn
    warnings: Callable[[StrictParams, Plan, tuple[str, ...]], list[str]] = _empty  # a request that would buy mostly noise
    notes: Callable[[StrictParams, Plan, tuple[str, ...]], list[str]] = _empty  # what the analyst must judge before spending
    # an SDC mechanism's own assessment in place of the microdata risk report (a table's audit): (frame, result,
    # params, the ``Earlier`` releases of the mechanism from the dataset) -> (external figures, internal figures,
    # the policy's rules missed in words); None: the microdata's
    assess: Callable[[pd.DataFrame, Result, StrictParams, list[Earlier]], tuple[dict, dict, list[str]]] | None = None
    # why an SDC release audited by its own ``assess`` may not follow the releases published before from the dataset
    # (by release id, each one's mechanism and parameters: a public record), checked before the charge; None: it may.
    # A microdata release is held to ``enforce.after_tables``.
    follows: Callable[[StrictParams, dict[str, tuple[str, dict]]], str | None] = _none

    @property
    def filled(self) -> tuple[str, ...]:
        """The parameters the registry fills in, which a request never gives."""
        return tuple(p for p in (self.UNIT_PARAM, self.ROWS_PARAM, self.POLICY_PARAM, self.DOMAINS_PARAM) if p)


def declared(m: object) -> Declared:
    """What ``m`` declares, the defaults standing for what it leaves out."""
    return Declared(**{f.name: getattr(m, f.name) for f in fields(Declared) if hasattr(m, f.name)})
