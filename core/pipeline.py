"""The release pipeline's steps as plain functions; ``flows/release.py`` runs them as tasks.

prepare → load → charge → privatize → check → publish → settle.

``prepare`` reads only public facts (the request, the registered schema, the ledger's totals),
so a wrong request is refused in well under a second and before anything is charged. Only
``load`` touches the rows, and nothing after it can refuse for a reason that depends on them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from core import mechanisms, noise, paths
from core import publish as _publish
from core import spec as _spec
from core.errors import SpecError
from core.ledger import Charge, Ledger
from core.mechanisms.base import DPCost, Plan, Result
from core.registry import Registry
from core.spec import Release, ReleaseRequest


@dataclass(frozen=True)
class Store:
    """The state folder: the DuckDB database (registry and ledger), snapshots and releases."""

    root: Path

    @classmethod
    def open(cls) -> Store:
        """The home configured for this process (``$PRIVRELEASE_HOME``): never a request's choice."""
        return cls(paths.home())

    @property
    def db(self) -> Path:
        return paths.database(self.root)

    @property
    def releases(self) -> Path:
        return paths.releases(self.root)

    @property
    def ledger(self) -> Ledger:
        return Ledger(self.db)

    @property
    def registry(self) -> Registry:
        return Registry(self.root)


def prepare(store: Store, request: ReleaseRequest) -> tuple[Release, Plan]:
    """Bind a request to its registered dataset and plan it; refuse what cannot run, from public facts."""
    dataset = store.registry.get(request.dataset)
    release = _spec.bind(request, dataset)
    module = mechanisms.get(release.mechanism)
    plan_ = module.plan(release.params)
    if plan_.cost.kind != dataset.purpose:
        kinds = {"dp": "differentially private releases", "sdc": "statistical disclosure control (RA, swapping)"}
        raise SpecError(f"dataset {dataset.id!r} is registered for {kinds[dataset.purpose]}; mechanism "
                        f"{release.mechanism!r} gives {kinds[plan_.cost.kind]}. Ask the data steward for a "
                        "dataset registered for that purpose.")  # fmt: skip
    if isinstance(plan_.cost, DPCost) and plan_.cost.unit != dataset.unit.kind:
        raise SpecError(f"mechanism {release.mechanism!r} is private for a {plan_.cost.unit} unit, but dataset "
                        f"{dataset.id!r} is registered with unit {dataset.unit}.")  # fmt: skip
    module.needs(release.params, tuple(dataset.schema.columns)).check(dataset.schema, dataset.id)
    if isinstance(plan_.cost, DPCost):
        store.ledger.admit(dataset.id, plan_.cost.budget)
    return release, plan_


def load(store: Store, release: Release) -> pd.DataFrame:
    return store.registry.load(release.dataset)


def charge(store: Store, release: Release, plan_: Plan, flow_run_id: str | None) -> Charge:
    """Reserve the release's cost; the reservation pins the parameters and the registration version."""
    params = {
        "mechanism": release.params.model_dump(mode="json"),
        "registration": release.dataset.version,
        "test_mode": release.seed is not None,
    }
    cost = plan_.cost
    return store.ledger.reserve(
        release.dataset.id, release.release_id, cost.kind, cost.budget if isinstance(cost, DPCost) else None,
        release.dataset.unit.adjacency if isinstance(cost, DPCost) else None, release.mechanism, params,
        plan_.detail, flow_run_id,
    )  # fmt: skip


def privatize(release: Release, frame: pd.DataFrame) -> Result:
    """Run the mechanism on fresh randomness (a fixed seed only in test mode), then check it."""
    module = mechanisms.get(release.mechanism)
    result = module.run(frame, release.params, noise.generator(release.seed))
    module.check(frame, result, release.params)
    return result


def publish(store: Store, release: Release, plan_: Plan, result: Result, charge_: Charge) -> _publish.Published:
    record = _publish.manifest(release, plan_, result, charge_.entry)
    return _publish.publish(store.releases, record, result)


def existing(store: Store, release: Release) -> dict:
    """The manifest of a release that is already published."""
    folder = _publish.release_folder(store.releases, release.dataset.id, release.release_id)
    return json.loads((folder / "manifest.json").read_text())
