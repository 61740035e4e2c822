"""The release flow: ingest → validate → plan → charge → privatize → check → publish → settle.

Parameters are paths and public release parameters, never data: Prefect stores flow
parameters in plain text.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from prefect import flow, get_run_logger
from pydantic import Field
from prefect.artifacts import create_markdown_artifact

from core import parallel
from core.errors import SpecError, UserError
from core.ledger import FAILED, PUBLISHED
from core.pipeline import Store, existing
from core.spec import ReleaseRequest
from tasks import release as t


@flow(name="release", persist_result=False)
def release(
    spec_path: str | None = None, request: ReleaseRequest | None = None, home: str | None = None,
    runner: Literal["local", "dask"] = "local", dask_address: str | None = None,
    dask_workers: Annotated[int, Field(ge=1, le=256)] = 2,
) -> dict:  # fmt: skip
    """Release one dataset as its spec file (``spec_path``) or a typed ``request`` says.

    ``runner: dask`` spreads the mechanism's heavy pieces over a Dask cluster: ``dask_address``,
    or a local cluster of ``dask_workers`` processes. Returns the release id, folder and ledger entry.
    """
    log = get_run_logger()
    store = Store.open(home)
    if (spec_path is None) == (request is None):
        raise SpecError("give either spec_path (a release spec file) or request (a typed release spec): exactly one")
    spec = t.load_spec(spec_path) if spec_path is not None else t.parse_request(request, store)
    ingested = t.ingest(store, spec)
    log.info("ingested %s: %d rows, %d columns, sha256 %s", spec.dataset, ingested.rows,
             len(ingested.columns), ingested.fingerprint[:16])  # fmt: skip
    frame = t.load(store, ingested)
    validation = t.validate(spec, frame)
    log.info("validation passed: %d expectations of suite %r", validation.evaluated, validation.suite)
    plan = t.plan(spec)
    charge = t.charge(store, spec, plan, ingested)
    if charge.previous_status == PUBLISHED:
        log.info("release %s was already published; nothing charged or drawn", spec.release_id)
        return _summary(existing(store, spec), str(store.releases / spec.dataset / spec.release_id), True)
    log.info("ledger entry #%d: epsilon=%g delta=%g (%s)", charge.entry.seq, plan.cost.epsilon,
             plan.cost.delta, "retry of an earlier charge" if charge.previous_status else "new charge")  # fmt: skip
    try:
        with parallel.using(runner, dask_address, dask_workers):
            result = t.privatize(spec, frame)
        published = t.publish(store, spec, plan, result, charge, ingested, validation)
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}" if isinstance(exc, UserError) else type(exc).__name__
        t.settle(store, spec, FAILED, {"reason": reason})
        raise
    t.settle(store, spec, PUBLISHED, result.headline)
    log.info("published %s", published.folder)
    create_markdown_artifact(
        key=re.sub(r"[^a-z0-9-]+", "-", f"release-{spec.dataset}".lower()),
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
        "ledger": manifest["ledger"],
        "privacy": manifest["privacy"],
    }
