"""The release pipeline's steps as plain functions; ``flows/release.py`` runs them as tasks.

ingest → validate → plan → charge → privatize → check → publish → settle.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from core import ingest as _ingest
from core import mechanisms, noise, paths
from core import publish as _publish
from core import validate as _validate
from core.ledger import Charge, Ledger
from core.mechanisms.base import Plan, Result
from core.spec import Release

SCHEMAS_DIR = Path(__file__).resolve().parent.parent / "schemas"


@dataclass(frozen=True)
class Store:
    """The state folder: the DuckDB database (tables and ledger) and the releases."""

    root: Path

    @classmethod
    def open(cls, explicit: str | Path | None = None) -> Store:
        return cls(paths.home(explicit))

    @property
    def db(self) -> Path:
        return paths.database(self.root)

    @property
    def releases(self) -> Path:
        return paths.releases(self.root)

    @property
    def ledger(self) -> Ledger:
        return Ledger(self.db)


def ingest(store: Store, release: Release) -> _ingest.Ingested:
    ds = release.spec.dataset
    return _ingest.ingest(store.db, ds.id, release.source, ds.format, ds.delimiter)


def load(store: Store, ingested: _ingest.Ingested) -> pd.DataFrame:
    return _ingest.load(store.db, ingested)


def validate(release: Release, frame: pd.DataFrame) -> _validate.ValidationReport:
    """The dataset's suite (if any) plus what the mechanism needs of its input."""
    name, expectations = _validate.load_suite(release.spec.dataset.suite, SCHEMAS_DIR, release.spec_dir)
    needs = mechanisms.get(release.mechanism).needs(release.params, tuple(frame.columns))
    return _validate.validate(frame, name, expectations + needs.expectations())


def plan(release: Release) -> Plan:
    return mechanisms.get(release.mechanism).plan(release.params)


def charge(store: Store, release: Release, plan_: Plan, ingested: _ingest.Ingested, flow_run_id: str | None) -> Charge:
    """Reserve the release's cost; the reservation pins the parameters and the input's fingerprint."""
    params = {
        "mechanism": release.params.model_dump(mode="json"),
        "input_fingerprint": ingested.fingerprint,
        "test_mode": release.spec.seed is not None,
    }
    return store.ledger.reserve(
        release.dataset, release.release_id, plan_.cost, release.mechanism, params, plan_.detail, flow_run_id
    )


def privatize(release: Release, frame: pd.DataFrame) -> Result:
    """Run the mechanism on fresh randomness (a fixed seed only in test mode), then check it."""
    module = mechanisms.get(release.mechanism)
    result = module.run(frame, release.params, noise.generator(release.spec.seed))
    module.check(frame, result, release.params)
    return result


def publish(
    store: Store, release: Release, plan_: Plan, result: Result, charge_: Charge,
    ingested: _ingest.Ingested, validation: _validate.ValidationReport,
) -> _publish.Published:  # fmt: skip
    record = _publish.manifest(
        release, plan_, result, charge_.entry, ingested, validation, release.spec.seed is not None
    )
    return _publish.publish(store.releases, record, result)


def existing(store: Store, release: Release) -> dict:
    """The manifest of a release that is already published."""
    folder = _publish.release_folder(store.releases, release.dataset, release.release_id)
    return json.loads((folder / "manifest.json").read_text())
