"""The release flow: check → admit → (approval) → load → reserve → privatize → (SDC: assess) → publish → settle.

``release`` takes the analyst's request (a registered dataset id, a mechanism and its public
parameters) as the command line does; the forms of the UI (``privrelease/flows/forms.py``) build the same
request from flat parameters and run it with ``run_request``. Public values only, as Prefect
stores parameters in plain text. The home, and so the ledger and the registry, come from the
worker's environment.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.exceptions import FailedRun
from prefect.states import Failed, State

from privrelease.core import interrupts, parallel, settings
from privrelease.core.errors import UserError
from privrelease.core.release import catalogue, pipeline, spec
from privrelease.core.release.home import Home
from privrelease.core.release.spec import ReleaseRequest
from privrelease.flows import steps
from privrelease.flows.artifacts import data_uri, readable


def _kinds(error: type) -> set[str]:
    return {error.__name__}.union(*(_kinds(sub) for sub in error.__subclasses__()))


class OneLine(logging.Filter):
    """A user error is one line in a run's log, the flow's own: the task that raised it does not log
    it again (nor its traceback), nor does the engine re-raise the run the flow already failed with
    it. After the user's Ctrl-C, a task's error lines are its consequences, and so is the engine's "Crash
    detected!" when the signal lands in Prefect's own frames between two steps: the run's Cancelled state
    says what happened (``steps.stopped``). All of them stay with PRIVRELEASE_DEBUG=1."""

    TASK_FAILED = re.compile(rf"Finished in state Failed\('Task run encountered an exception ({'|'.join(_kinds(UserError))}):")

    def filter(self, record: logging.LogRecord) -> bool:
        if settings.flag(settings.DEBUG):
            return True
        exc = record.exc_info[1] if record.exc_info else None
        task = record.name == "prefect.task_runs"
        if record.name in ("prefect.task_runs", "prefect.engine") and record.levelno >= logging.WARNING and interrupts.seen():
            return False
        if isinstance(exc, FailedRun) or (task and (isinstance(exc, UserError) or self.TASK_FAILED.match(record.getMessage()))):
            return False
        if isinstance(exc, UserError):
            record.exc_info, record.exc_text = None, None
        return True


for _name in ("prefect.flow_runs", "prefect.task_runs", "prefect.engine"):
    logging.getLogger(_name).addFilter(OneLine())


def _artifact(outcome: dict) -> None:
    folder = Path(outcome["folder"])
    create_markdown_artifact(
        key=re.sub(r"[^a-z0-9-]+", "-", f"release-{outcome['dataset']}".lower()),
        # a link to the gate's page of the release, where who is signed in downloads its files: nothing of the host
        markdown=f"**[Download this release's files]({catalogue.page(outcome['release_id'])})** "
        f"(data, report, charts, manifest; every published release: [the catalogue]({catalogue.WEB}/releases))\n\n"
        + readable((folder / "report.md").read_text(), folder),
        description=f"release {outcome['release_id']}",
    )


def _preview(request: ReleaseRequest) -> dict:
    """The request's preview as the run's artifact (with its charts, DPNE's detection curves): nothing charged or read."""
    import tempfile

    from privrelease.core.charts import render_chart
    from privrelease.core.release import preview

    found = preview.preview(Home.open(), request)
    markdown = preview.text(found)
    with tempfile.TemporaryDirectory() as tmp:
        for chart in preview.charts(found):
            render_chart(chart, Path(tmp) / chart.filename)
            markdown += f"\n![{chart.title}]({data_uri(Path(tmp) / chart.filename)})\n"
    create_markdown_artifact(
        key=re.sub(r"[^a-z0-9-]+", "-", f"preview-{found['dataset']}".lower()),
        markdown=markdown,
        description="preview: nothing charged",
    )
    return found


def _release(request: ReleaseRequest, log) -> dict:
    """The request as one charged run: its request checked in the flow itself (a refusal is one line in
    the log and the run's state message), each step that touches rows or the ledger a task, a charge the
    steward's rule holds back paused for an approval in the UI."""
    return pipeline.release(Home.open(), request, steps.RELEASE, log, steps.caller(), steps.pause, steps.LEDGER)


@flow(name="release", persist_result=False)
def release(request: ReleaseRequest) -> dict | State:
    """Release a registered dataset as the ``request`` says, each step a task. Where heavy pieces
    run (in process, or a Dask cluster) is the worker's setting (``privrelease.core.parallel.configured``).
    Returns the release id, folder and ledger entry; stopped by its user (Ctrl-C), the run ends
    Cancelled and its caller gets the interrupt, saying what became of the charge."""
    try:
        with parallel.configured():
            outcome = _release(request, get_run_logger())
        if not outcome["already_published"]:
            _artifact(outcome)
    except BaseException as exc:
        if interrupts.caused(exc):  # Ctrl-C at the command line: Cancelled, not a crash (steps.stopped)
            return steps.stopped(exc)
        raise
    return outcome


def run_request(
    release_id: str, dataset: str, mechanism: str, params: dict | Callable[[], dict], preview: bool = False
) -> dict | State:
    """Run a form's release request (its ``params``, or a function that assembles them) through the
    pipeline. A request the mechanism or the dataset refuses (a bound across fields, a column the
    registration lacks, the remaining budget) fails the run with that one line; the traceback only
    with PRIVRELEASE_DEBUG=1. With ``preview``, nothing is charged or read: the run's artifact is
    the request's preview (``privrelease.core.release.preview``)."""
    log = get_run_logger()
    try:
        with steps.time_limited(preview):
            doc = {"dataset": dataset, "mechanism": {"name": mechanism, "params": params() if callable(params) else params}}
            request = spec.parse(doc | ({"release_id": release_id} if release_id else {}))
            if preview:
                return _preview(request)
            with parallel.configured():
                outcome = _release(request, log)
    except UserError as exc:
        # the form's fields are flat: no mechanism.NAME.params. (nor, for an SDC form's chain, steps.N.METHOD.)
        message = re.sub(r"(mechanism\.[a-z]+\.params|steps\.\d+\.[a-z]+)(\.|: )", "", str(exc))
        log.error("%s", message, exc_info=settings.flag(settings.DEBUG))
        return Failed(message=message)
    if not outcome["already_published"]:
        _artifact(outcome)
    return outcome
