"""Tasks of the release pipeline. Each calls one core step; ``core.pipeline.release`` sequences them.
The outcome is settled by ``tasks.ledger.settle``, the task every flow settles with.

Tasks whose inputs or outputs carry raw rows are never cached or persisted (``RAW``); the others
are kept out of result storage too, since nothing here needs to be replayed.
"""

from __future__ import annotations

import os

import pandas as pd
from prefect import task
from prefect.flow_runs import pause_flow_run
from prefect.input import RunInput
from prefect.runtime import flow_run
from pydantic import Field

from core import pipeline
from core.accounts import requester
from core.errors import ApprovalError
from core.ledger import Charge
from core.mechanisms.base import Plan, Result
from core.publish import Published
from core.spec import Release, ReleaseRequest
from tasks.ledger import RAW, settle

APPROVAL_TIMEOUT_ENV = "PRIVRELEASE_APPROVAL_TIMEOUT"


class Approval(RunInput):
    """A data steward's answer to a release waiting for approval."""

    approve: bool = Field(description="approve: the release is charged and published; reject: nothing is charged")
    approved_by: str = Field("", description="leave empty: privrelease's gate writes in your account")


__all__ = ["approve", "assess", "charge", "load", "prepare", "privatize", "publish", "settle"]  # the steps core.pipeline.release runs


@task(name="prepare", **RAW)
def prepare(store: pipeline.Store, request: ReleaseRequest) -> tuple[Release, Plan]:
    return pipeline.prepare(store, request)


@task(name="load-snapshot", **RAW)
def load(store: pipeline.Store, release: Release) -> pd.DataFrame:
    return pipeline.load(store, release)


def approve(store: pipeline.Store, release: Release, plan_: Plan, log) -> None:
    """A release above its dataset's approval threshold pauses here, before its charge, until a data
    steward approves or rejects it in the UI (the gate lets only stewards answer, and writes in who
    did). Rejected, or unanswered within $PRIVRELEASE_APPROVAL_TIMEOUT seconds (default a day): the
    run fails, nothing charged, nothing published. A flow-level step, not a task: only a flow pauses."""
    why = pipeline.needs_approval(store, release, plan_)
    if why is None:
        return
    log.info("waiting for a data steward: %s", why)
    answer = pause_flow_run(
        wait_for_input=Approval.with_initial_data(description=f"{why}. Approve to charge and release it; reject "
                                                              "to refuse it (nothing is charged).", approve=False),
        timeout=int(os.environ.get(APPROVAL_TIMEOUT_ENV, 86_400)), key="privrelease-approval",
    )  # fmt: skip
    if not answer.approve:
        raise ApprovalError(f"the data steward {answer.approved_by or '(unknown)'} rejected this release: {why}; "
                            "nothing was charged or published.")  # fmt: skip
    log.info("approved by the data steward %s", answer.approved_by or "(unknown)")


@task(name="charge", **RAW)
def charge(store: pipeline.Store, release: Release, plan_: Plan) -> Charge:
    return pipeline.charge(store, release, plan_, flow_run.get_id(), requester(flow_run.get_tags()))


@task(name="privatize", **RAW)
def privatize(release: Release, frame: pd.DataFrame) -> Result:
    return pipeline.privatize(release, frame)


@task(name="assess", **RAW)
def assess(store: pipeline.Store, release: Release, frame: pd.DataFrame, result: Result) -> Result:
    return pipeline.assess(store, release, frame, result)


@task(name="publish", **RAW)
def publish(store: pipeline.Store, release: Release, plan_: Plan, result: Result, charge_: Charge) -> Published:
    return pipeline.publish(store, release, plan_, result, charge_)
