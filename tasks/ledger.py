"""The ledger steps every flow shares: reserve a run's planned cost, settle its outcome.

A flow reserves before its run touches private data and settles after, ``published`` with its
headline figures or ``failed`` with ``core.pipeline.failure`` (no data in the reason); a run
killed in between is settled by ``core.pipeline.recover``.
Tasks whose inputs or outputs carry raw rows are never cached or persisted (``RAW``); the others
are kept out of result storage too, since nothing here needs to be replayed.
"""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from core import pipeline
from core.accounts import requester
from core.ledger import Charge
from core.mechanisms.base import Plan

RAW = {"cache_policy": NO_CACHE, "persist_result": False}


@task(name="reserve", **RAW)
def reserve(store: pipeline.Store, dataset: str, run_id: str, mechanism: str, plan_: Plan, params: dict,
            adjacency: str | None) -> Charge:  # fmt: skip
    return pipeline.reserve(store, dataset, run_id, mechanism, plan_, params, adjacency, flow_run.get_id(),
                            requester(flow_run.get_tags()))  # fmt: skip


@task(name="settle", **RAW)
def settle(store: pipeline.Store, dataset: str, run_id: str, status: str, detail: dict) -> None:
    pipeline.settle(store, dataset, run_id, status, detail, flow_run.get_id())
