"""Tasks of the spam-filter training flow. The training object carries mail: never cached or persisted."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from core.spam.spec import Inputs
from core.spam.training import RoundReport, Training
from tasks.ledger import RAW


@task(name="spam-setup", **RAW)
def setup(inputs: Inputs) -> Training:
    return Training.setup(inputs)


@task(name="spam-round", task_run_name="round-{number}", **RAW)
def run_round(training: Training, number: int) -> RoundReport:
    return training.run_round()


@task(name="spam-report", **RAW)
def write(training: Training, folder: Path) -> dict:
    return training.write(folder)
