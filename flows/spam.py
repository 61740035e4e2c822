"""The spam-filter training flow: setup → one task per protocol round → report.

The run is reserved and settled in the ledger like a release (``tasks.ledger``), at the cost its
plan states (no epsilon: the protocol's guarantee is cryptographic), with the digest of its transcript.
Parameters are paths, never mail.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from core.errors import SpecError
from core.ledger import FAILED, PUBLISHED
from core.mechanisms import spam_training
from core.pipeline import Store, failure
from core.spam.spec import load_spec
from tasks import ledger
from tasks import spam as t

LEDGER_DATASET = "spam-filter"


@flow(name="spam-filter-training", persist_result=False)
def spam_filter_training(spec_path: str) -> dict:
    """Train the shared spam filter privately between the server and the users of the spec.

    Each party runs in its own process on this machine and computes its secrets there; there is
    no Dask option, since a party's randomness must not be computed on a shared cluster.
    """
    log = get_run_logger()
    store = Store.open()
    spec, base = load_spec(spec_path)
    folder = store.root / "spam" / spec.run_id
    if folder.exists():
        raise SpecError(f"spam run {spec.run_id!r} already exists at {folder}; choose a new run_id.")
    ledger.reserve(store, LEDGER_DATASET, spec.run_id, spam_training.NAME, spam_training.plan(spec),
                   spec.model_dump(mode="json", exclude={"seed"}), None)  # fmt: skip
    try:
        training = t.setup(spec, base)
        try:
            log.info("setup: %d users (one process each), %d features, %d-bit key", len(training.users), spec.features.size,
                     spec.key_bits)  # fmt: skip
            for number in range(1, spec.rounds + 1):
                r = t.run_round(training, number)
                log.info("round %d: %.2f s, %d messages, %d ciphertexts, %.1f MB", number, r.seconds, r.messages,
                         r.ciphertexts, r.bytes / 1e6)  # fmt: skip
            report = t.write(training, folder)
        finally:
            training.close()
    except Exception as exc:
        ledger.settle(store, LEDGER_DATASET, spec.run_id, FAILED, failure(exc))
        raise
    ledger.settle(store, LEDGER_DATASET, spec.run_id, PUBLISHED,
                  {k: report[k] for k in ("transcript_sha256", "auc_private", "auc_plain")})  # fmt: skip
    create_table_artifact(
        key="spam-rounds", description=f"spam run {spec.run_id}: seconds and traffic per round",
        table=[{"round": r["round"], "seconds": round(r["seconds"], 3), "ciphertexts": r["ciphertexts"], "bytes": r["bytes"]}
               for r in report["per_round"]],
    )  # fmt: skip
    create_markdown_artifact(key="spam-report", markdown=(folder / "report.md").read_text(), description=f"spam run {spec.run_id}")
    log.info("AUC private %.6f, plaintext %.6f; run folder %s", report["auc_private"], report["auc_plain"], folder)
    return {"run_id": spec.run_id, "folder": str(folder), "auc_private": report["auc_private"], "auc_plain": report["auc_plain"]}
