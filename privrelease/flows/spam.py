"""The spam-filter training flow: one charged run (``privrelease.core.release.spam_run``), then its artifacts.

The spec and every mail file resolve under the data root and are checked completely, with the
steward's terms for the mail, before anything is reserved; the run is charged, approved when the
steward's rule asks for it, and settled as a release is (``privrelease.core.release.charged``). Parameters are paths
relative to the data root, never mail; logs, artifacts and the ledger carry public values and, with
``dp:``, the server's model's AUC on the evaluation mail (a DP output; without ``dp:`` it is
withheld there and stays in the run folder), never a model trained on pooled plaintext.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.states import State

from privrelease.core import interrupts
from privrelease.core.release import charged
from privrelease.core.release.home import Home
from privrelease.core.release.spam_run import SpamJob
from privrelease.core.spam.run_report import markdown
from privrelease.flows import steps


@flow(name="spam-filter-training", persist_result=False)
def spam_filter_training(spec_path: str) -> dict | State:
    """Train the shared spam filter privately between the server and the users of the spec
    (``spec_path``: relative to the data root, or absolute inside it).

    Each party runs in its own process on this machine and computes its secrets there; there is
    no Dask option, since a party's randomness must not be computed on a shared cluster.
    """
    log = get_run_logger()
    job = SpamJob(spec_path, steps.SPAM)
    try:
        with steps.time_limited():
            outcome = charged.run(Home.open(), job, steps.caller(), steps.pause, log, steps.LEDGER)
    except BaseException as exc:
        if interrupts.caused(exc):  # Ctrl-C at the command line: Cancelled, not a crash (steps.stopped)
            return steps.stopped(exc)
        raise
    report = job.report
    create_table_artifact(
        key="spam-rounds",
        description=f"spam run {outcome['run_id']}: seconds and traffic per round",
        table=[
            {"round": r["round"], "seconds": round(r["seconds"], 3), "ciphertexts": r["ciphertexts"], "bytes": r["bytes"]}
            for r in report["per_round"]
        ],
    )
    create_markdown_artifact(
        key="spam-report", markdown=markdown(report, public=True), description=f"spam run {outcome['run_id']}"
    )
    auc = outcome["auc_private"]
    log.info("AUC of the server's model: %s; run folder %s", auc if isinstance(auc, str) else f"{auc:.6f}", outcome["folder"])
    return outcome
