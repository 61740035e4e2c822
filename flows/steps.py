"""Where Prefect meets the core: every step of a charged run as a Prefect task, a steward's approval
as a paused flow run, and who is running.

The steps are the core's own plain functions (``core.release.pipeline.Steps``, ``core.release.spam_run.Steps``,
``core.release.charged.DIRECT``), each wrapped here once (``tasks``), so a step's signature exists in one
place. Tasks carry raw rows or mail: none is ever cached or its result persisted (``RAW``).
"""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import UTC, datetime
from typing import TypeVar

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.flow_runs import pause_flow_run
from prefect.input import RunInput
from prefect.runtime import flow_run
from pydantic import Field

from core import settings
from core.errors import ApprovalError
from core.ledger.approval import Approval, Look
from core.people import requester
from core.release import charged, pipeline, spam_run
from core.release.charged import Caller, Log

RAW = {"cache_policy": NO_CACHE, "persist_result": False}
S = TypeVar("S")

NAMES = {"load": "load-snapshot", "setup": "spam-setup", "run_round": "spam-round", "write": "spam-report"}


def tasks(steps: S) -> S:
    """The same steps, each run as a Prefect task named after it."""
    wrapped = {}
    for f in fields(steps):
        name = NAMES.get(f.name, f.name)
        extra = {"task_run_name": "round-{number}"} if f.name == "run_round" else {}
        wrapped[f.name] = task(getattr(steps, f.name), name=name, **RAW, **extra)
    return replace(steps, **wrapped)


RELEASE = tasks(pipeline.Steps())
SPAM = tasks(spam_run.Steps())
LEDGER = tasks(charged.DIRECT)


def caller() -> Caller:
    """This flow run, and the account the gate recorded as asking for it (its requester tag)."""
    return Caller(flow_run.get_id(), requester(flow_run.get_tags()))


class Answer(RunInput):
    """A data steward's answer to a run waiting for approval."""

    approve: bool = Field(description="approve: the run is charged and goes on; reject: nothing is charged")
    approved_by: str = Field("", description="leave empty: privrelease's gate writes in your account")


def pause(dataset: str, look: Look, log: Log) -> Approval:
    """A charge the steward's rule holds back pauses here, before the charge, until a data steward approves
    or rejects it in the UI (the gate lets only stewards answer, and writes in who did). Rejected, or
    unanswered within $PRIVRELEASE_APPROVAL_TIMEOUT seconds (default a day): the run fails, nothing charged.
    The approval covers what the steward was shown; the charge takes the look again under its lock."""
    why = look.words(dataset)
    log.info("waiting for a data steward: %s", why)
    answer = pause_flow_run(
        wait_for_input=Answer.with_initial_data(description=f"{why}. Approve to charge and release it; reject to "
                                                            "refuse it (nothing is charged).", approve=False),
        timeout=int(settings.number(settings.APPROVAL_TIMEOUT, 86_400)), key="privrelease-approval",
    )  # fmt: skip
    if not answer.approve:
        raise ApprovalError(f"the data steward {answer.approved_by or '(unknown)'} rejected this release: {why}; nothing "
                            "was charged or published.")  # fmt: skip
    return Approval.given(look, answer.approved_by, datetime.now(UTC))
