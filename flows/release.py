"""The release flow: prepare → load → charge → privatize → check → publish → settle.

Its one parameter is the analyst's request (a registered dataset id, a mechanism and its public
parameters): public values only, as Prefect stores them in plain text.
The home, and so the ledger and the registry, come from the worker's environment.
"""

from __future__ import annotations

import re
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from core import parallel, pipeline
from core.spec import ReleaseRequest
from tasks import release as steps


@flow(name="release", persist_result=False)
def release(request: ReleaseRequest) -> dict:
    """Release a registered dataset as the ``request`` says, each step a task. Where heavy pieces
    run (in process, or a Dask cluster) is the worker's setting (``core.parallel.configured``).
    Returns the release id, folder and ledger entry."""
    with parallel.configured():
        summary = pipeline.release(pipeline.Store.open(), request, steps, get_run_logger())
    if not summary["already_published"]:
        create_markdown_artifact(
            key=re.sub(r"[^a-z0-9-]+", "-", f"release-{summary['dataset']}".lower()),
            markdown=f"Release folder: `{summary['folder']}`\n\n" + (Path(summary["folder"]) / "report.md").read_text(),
            description=f"release {summary['release_id']}",
        )
    return summary
