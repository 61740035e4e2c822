"""Where Prefect meets the core: every step of a charged run as a Prefect task, a steward's approval
as a suspended flow run, who is running, and how long a run the worker runs may take.

The steps are the core's own plain functions (``privrelease.core.release.pipeline.Steps``, ``privrelease.core.release.spam_run.Steps``,
``privrelease.core.release.charged.DIRECT``), each wrapped here once (``tasks``), so a step's signature exists in one
place. Tasks carry raw rows or mail: none is ever cached or its result persisted (``RAW``).
"""

from __future__ import annotations

import contextlib
import json
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, fields, replace
from datetime import UTC, datetime
from typing import TypeVar

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext
from prefect.flow_runs import pause_flow_run, suspend_flow_run
from prefect.input import RunInput, create_flow_run_input, read_flow_run_input
from prefect.runtime import flow_run
from prefect.states import Cancelled, State
from pydantic import Field

from privrelease.core import interrupts, limits, settings
from privrelease.core.charts import render_chart
from privrelease.core.errors import ApprovalError, LedgerCorrupt
from privrelease.core.ledger import audit as _audit
from privrelease.core.ledger.approval import Approval, ApprovalRule, Look
from privrelease.core.people import requester
from privrelease.core.release import charged, pipeline, spam_run
from privrelease.core.release.charged import Caller, Log
from privrelease.core.release.home import Home

RAW = {"cache_policy": NO_CACHE, "persist_result": False}
S = TypeVar("S")

APPROVAL = "privrelease-approval"  # the pause's key: the answer's flow-run input keys are named after it
SHOWN = "privrelease-approval-shown"  # the look the steward was asked about, kept with the run
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


def stopped(exc: BaseException) -> State:
    """A run its user stopped (Ctrl-C at the command line) ends Cancelled, its message the words saying what became
    of its charge (``privrelease.core.interrupts.Interrupted``: public values only); the exception itself goes on to the caller,
    which says them and exits 130. The frames it passed through are cleared first: Prefect keeps a crashed task's
    exception to the end of the process, and DuckDB objects left in those frames would then make DuckDB print
    leak warnings as the process exits."""
    chained: BaseException | None = exc
    while chained is not None:
        traceback.clear_frames(chained.__traceback__)
        chained = chained.__context__
    # outside the charged run (its artifact, say) the ledger tells; and the data must be an Exception: Prefect raises
    # it in its event-loop thread, which a KeyboardInterrupt would kill, with a traceback and exit code 1
    if not isinstance(exc, interrupts.Interrupted):
        exc = interrupts.Interrupted(charged.said(Home.open()))
    return Cancelled(message=exc.words, data=exc)


@contextmanager
def time_limited(preview: bool = False) -> Iterator[None]:
    """A run of the worker's (its process started for one flow run: ``$PREFECT__FLOW_RUN_ID``) stopped once it has
    taken the operator's limit, ``$PRIVRELEASE_RUN_SECONDS`` (a preview's: ``$PRIVRELEASE_PREVIEW_SECONDS``), free
    ones too: it fails with the one line saying so, and its process ends, as after any failure. A charge it made
    stands, recorded as failed. A steward's approval is no part of it: a suspended run's process ends while it waits,
    and the answer starts it again with its time afresh. The command line's runs, on the operator's own host, are not
    limited."""
    if settings.get(settings.FLOW_RUN_ID) is None:
        yield
        return
    configured = limits.configured()
    seconds, name = (
        (configured.preview_seconds, settings.PREVIEW_SECONDS) if preview else (configured.run_seconds, settings.RUN_SECONDS)
    )
    words = (
        f"the run was stopped after {seconds} s, the longest a {'preview' if preview else 'run'} may take on this worker "
        f"(${name}, the operator's setting): ask for less work (fewer rows or columns, a larger k for MEDS or EDS, fewer "
        "candidates for MEWS, a smaller T or delta0 for DPNE), or ask the operator to raise it"
    )
    with interrupts.limited(seconds, words):
        yield


def caller() -> Caller:
    """This flow run, and the account the gate recorded as asking for it (its requester tag)."""
    return Caller(flow_run.get_id(), requester(flow_run.get_tags()))


class Answer(RunInput):
    """A data steward's answer to a run waiting for approval."""

    approve: bool = Field(description="approve: the run is charged and goes on; reject: nothing is charged")
    approved_by: str = Field("", description="leave empty: privrelease's gate writes in your account")


def pause(dataset: str, look: Look, log: Log) -> Approval:
    """A charge the steward's rule holds back waits here, before the charge, until a data steward approves
    or rejects it in the UI (the gate lets only stewards answer, and writes in who did). Rejected, or
    unanswered within $PRIVRELEASE_APPROVAL_TIMEOUT seconds (default a day): the run fails, nothing charged.

    A deployment's run is suspended: its process ends and frees the worker while it waits, and the
    steward's answer starts it again from the beginning (nothing was charged or drawn before this point);
    back here, ``suspend_flow_run`` returns the answer kept with the run instead of waiting again. Outside a
    deployment (the command line with a Prefect server) the run cannot be restarted, so it pauses in its
    process. The approval covers what the steward was shown (kept with the run when it was first asked);
    the charge takes the look again under its lock, and one larger than that is refused."""
    shown, again = _shown(look)
    why = shown.words(dataset)
    if not again:
        log.info("waiting for a data steward: %s", why)
    wait = Answer.with_initial_data(
        description=f"{why}. Approve to charge and release it; reject to refuse it (nothing is charged).", approve=False
    )
    timeout = int(settings.number(settings.APPROVAL_TIMEOUT, 86_400))
    context = FlowRunContext.get()
    restartable = context is not None and context.flow_run is not None and context.flow_run.deployment_id is not None
    wait_for = suspend_flow_run if restartable else pause_flow_run
    answer = wait_for(wait_for_input=wait, timeout=timeout, key=APPROVAL)
    if not answer.approve:
        raise ApprovalError(
            f"the data steward {answer.approved_by or '(unknown)'} rejected this release: {why}; nothing "
            "was charged or published."
        )
    return Approval.given(shown, answer.approved_by, datetime.now(UTC))


def _shown(look: Look) -> tuple[Look, bool]:
    """The look the steward is asked about: this one, kept with the run; or, in a run started again after
    the steward's answer, the one kept when it was first asked (the approval covers that one), and True."""
    kept = read_flow_run_input(SHOWN)
    if kept is None:
        create_flow_run_input(SHOWN, json.dumps(asdict(look)))  # a string: Python's JSON keeps an infinite share
        return look, False
    fields_ = json.loads(kept)
    return Look(**fields_ | {"rule": ApprovalRule(**fields_["rule"])}), True


# the ledger audit's steps (privrelease/flows/audit.py)
@task(name="read-ledger", **RAW)
def read_ledger(home: Home) -> _audit.Audit:
    with contextlib.suppress(LedgerCorrupt):  # a broken ledger is reported by the audit itself
        charged.recover(home)  # interrupted runs are settled before the audit reads the ledger
    return _audit.audit(home.ledger, home.releases)


@task(name="chart-spend", **RAW)
def chart_spend(home: Home, audit: _audit.Audit, stamp: str) -> str | None:
    spec = _audit.spend_chart(audit.entries)
    if spec is None:
        return None
    path = home.root / "audit" / f"ledger-spend-{stamp}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    render_chart(spec, path)
    return str(path)
