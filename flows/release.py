"""The release flow: prepare → load → charge → privatize → check → publish → settle.

Its parameters are the analyst's request (a registered dataset id, a mechanism and its public
parameters) and the runner settings: public values only, as Prefect stores them in plain text.
The home, and so the ledger and the registry, come from the worker's environment.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from pydantic import Field

from core import parallel
from core.errors import UserError
from core.ledger import FAILED, PUBLISHED
from core.mechanisms.base import DPCost
from core.pipeline import Store, existing
from core.spec import ReleaseRequest
from tasks import release as t


@flow(name="release", persist_result=False)
def release(
    request: ReleaseRequest,
    runner: Literal["local", "dask"] = "local", dask_address: str | None = None,
    dask_workers: Annotated[int, Field(ge=1, le=256)] = 2,
) -> dict:  # fmt: skip
    """Release a registered dataset as the ``request`` says.

    ``runner: dask`` spreads the mechanism's heavy pieces over a Dask cluster: ``dask_address``,
    or a local cluster of ``dask_workers`` processes. Returns the release id, folder and ledger entry.
    """
    log = get_run_logger()
    store = Store.open()
    spec, plan = t.prepare(store, request)
    frame = t.load(store, spec)
    charge = t.charge(store, spec, plan)
    if charge.previous_status == PUBLISHED:
        log.info("release %s was already published; nothing charged or drawn", spec.release_id)
        return _summary(existing(store, spec), str(store.releases / spec.dataset.id / spec.release_id), True)
    cost = plan.cost
    log.info("ledger entry #%d: %s (%s)", charge.entry.seq,
             f"epsilon={cost.budget.epsilon:g} delta={cost.budget.delta:g}" if isinstance(cost, DPCost) else cost.kind,
             "retry of an earlier charge" if charge.previous_status else "new charge")  # fmt: skip
    try:
        with parallel.using(runner, dask_address, dask_workers):
            result = t.privatize(spec, frame)
        published = t.publish(store, spec, plan, result, charge)
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}" if isinstance(exc, UserError) else type(exc).__name__
        t.settle(store, spec, FAILED, {"reason": reason})
        raise
    t.settle(store, spec, PUBLISHED, result.headline)
    log.info("published %s", published.folder)
    create_markdown_artifact(
        key=re.sub(r"[^a-z0-9-]+", "-", f"release-{spec.dataset.id}".lower()),
        markdown=f"Release folder: `{published.folder}`\n\n" + (published.folder / "report.md").read_text(),
        description=f"release {spec.release_id}",
    )
    return _summary(published.manifest, str(published.folder), False)


def _summary(manifest: dict, folder: str, already: bool) -> dict:
    return {
        "release_id": manifest["release_id"],
        "dataset": manifest["dataset"],
        "folder": folder,
        "already_published": already,
        "mechanism": manifest["mechanism"]["name"],
        "ledger": manifest["ledger"],
        "privacy": manifest["privacy"],
    }
