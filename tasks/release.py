"""Tasks of the release pipeline. Each calls one core step.

Tasks whose inputs or outputs carry raw rows are never cached or persisted (``RAW``).
"""

from __future__ import annotations

import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from core import pipeline, spec
from core.ingest import Ingested
from core.ledger import Charge
from core.mechanisms.base import Plan, Result
from core.publish import Published
from core.spec import Release
from core.validate import ValidationReport

RAW = {"cache_policy": NO_CACHE, "persist_result": False}


@task(name="load-spec", **RAW)
def load_spec(spec_path: str) -> Release:
    return spec.load(spec_path)


@task(name="parse-request", **RAW)
def parse_request(request: spec.ReleaseRequest, store: pipeline.Store) -> Release:
    return spec.parse(request.model_dump(mode="json"), store.root)


@task(name="ingest", **RAW)
def ingest(store: pipeline.Store, release: Release) -> Ingested:
    return pipeline.ingest(store, release)


@task(name="load-table", **RAW)
def load(store: pipeline.Store, ingested: Ingested) -> pd.DataFrame:
    return pipeline.load(store, ingested)


@task(name="validate", **RAW)
def validate(release: Release, frame: pd.DataFrame) -> ValidationReport:
    return pipeline.validate(release, frame)


@task(name="plan", **RAW)
def plan(release: Release) -> Plan:
    return pipeline.plan(release)


@task(name="charge", **RAW)
def charge(store: pipeline.Store, release: Release, plan_: Plan, ingested: Ingested) -> Charge:
    return pipeline.charge(store, release, plan_, ingested, flow_run.get_id())


@task(name="privatize", **RAW)
def privatize(release: Release, frame: pd.DataFrame) -> Result:
    return pipeline.privatize(release, frame)


@task(name="publish", **RAW)
def publish(
    store: pipeline.Store, release: Release, plan_: Plan, result: Result, charge_: Charge,
    ingested: Ingested, validation: ValidationReport,
) -> Published:  # fmt: skip
    return pipeline.publish(store, release, plan_, result, charge_, ingested, validation)


@task(name="settle", **RAW)
def settle(store: pipeline.Store, release: Release, status: str, detail: dict) -> None:
    store.ledger.settle(release.release_id, status, detail, flow_run.get_id())
