"""Tasks of the release pipeline. Each calls one core step; ``core.pipeline.release`` sequences them.
The outcome is settled by ``tasks.ledger.settle``, the task every flow settles with.

Tasks whose inputs or outputs carry raw rows are never cached or persisted (``RAW``); the others
are kept out of result storage too, since nothing here needs to be replayed.
"""

from __future__ import annotations

import pandas as pd
from prefect import task
from prefect.runtime import flow_run

from core import pipeline
from core.ledger import Charge
from core.mechanisms.base import Plan, Result
from core.publish import Published
from core.spec import Release, ReleaseRequest
from tasks.ledger import RAW, settle

__all__ = ["charge", "load", "prepare", "privatize", "publish", "settle"]  # the steps core.pipeline.release runs


@task(name="prepare", **RAW)
def prepare(store: pipeline.Store, request: ReleaseRequest) -> tuple[Release, Plan]:
    return pipeline.prepare(store, request)


@task(name="load-snapshot", **RAW)
def load(store: pipeline.Store, release: Release) -> pd.DataFrame:
    return pipeline.load(store, release)


@task(name="charge", **RAW)
def charge(store: pipeline.Store, release: Release, plan_: Plan) -> Charge:
    return pipeline.charge(store, release, plan_, flow_run.get_id())


@task(name="privatize", **RAW)
def privatize(release: Release, frame: pd.DataFrame) -> Result:
    return pipeline.privatize(release, frame)


@task(name="publish", **RAW)
def publish(store: pipeline.Store, release: Release, plan_: Plan, result: Result, charge_: Charge) -> Published:
    return pipeline.publish(store, release, plan_, result, charge_)
