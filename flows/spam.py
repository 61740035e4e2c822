"""The spam-filter training flow: check → setup → one task per protocol round → report.

The spec and every mail file resolve under the data root and are checked completely
(``core.spam.spec.check``) before anything is reserved. The run is reserved and settled in the
ledger like a release (``tasks.ledger``), at the cost its plan states (no epsilon without ``dp:``, the
protocol's guarantee being cryptographic; with it a DP charge of the mail corpus), with the digest of its transcript. Parameters are paths relative to the
data root, never mail; logs, artifacts and the ledger carry public values and, with ``dp:``, the
server's model's AUC on the evaluation mail (a DP output; without ``dp:`` it is withheld there and
stays in the run folder), never a model trained on pooled plaintext.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from core.ledger import FAILED, PUBLISHED
from core.mechanisms import spam_training
from core.pipeline import Store, failure
from core.spam.dp import ADJACENCY
from core.spam.spec import check
from core.spam.training import markdown, public_auc
from tasks import ledger
from tasks import spam as t


@flow(name="spam-filter-training", persist_result=False)
def spam_filter_training(spec_path: str) -> dict:
    """Train the shared spam filter privately between the server and the users of the spec
    (``spec_path``: relative to the data root, or absolute inside it).

    Each party runs in its own process on this machine and computes its secrets there; there is
    no Dask option, since a party's randomness must not be computed on a shared cluster.
    """
    log = get_run_logger()
    store = Store.open()
    inputs = check(spec_path, store.root)
    spec = inputs.spec
    folder = store.root / "spam" / spec.run_id
    dataset = spam_training.ledger_dataset(spec)
    ledger.reserve(store, dataset, spec.run_id, spam_training.NAME, spam_training.plan(spec),
                   spec.model_dump(mode="json", exclude={"seed"}), ADJACENCY)  # fmt: skip
    rounds: list[dict] = []  # who took part in each round, who left: public names, for the ledger
    try:
        training = t.setup(inputs)
        try:
            log.info("setup: %d users (one process each), %d features, %d-bit key", len(training.users), spec.features.size,
                     spec.key_bits)  # fmt: skip
            for number in range(1, spec.rounds + 1):
                r = t.run_round(training, number)
                log.info("round %d: %.2f s, %d messages, %d ciphertexts, %.1f MB", number, r.seconds, r.messages,
                         r.ciphertexts, r.bytes / 1e6)  # fmt: skip
                rounds.append({"round": number, "participants": r.participants, "left": r.left})
                for name in r.left:
                    log.warning("round %d: %s left (its process ended or did not answer); %d users remain, threshold %d",
                                number, name, len(r.participants) - len(r.left), spec.quorum)  # fmt: skip
            report = t.write(training, folder)
        finally:
            training.close()
    except Exception as exc:
        ledger.settle(store, dataset, spec.run_id, FAILED, {**failure(exc), "rounds": rounds})
        raise
    auc = public_auc(report)  # a DP output with dp:, else withheld (the run folder keeps it)
    ledger.settle(store, dataset, spec.run_id, PUBLISHED,
                  {**{k: report[k] for k in ("transcript_sha256", "threshold")}, "auc_private": auc, "rounds": rounds})  # fmt: skip
    create_table_artifact(
        key="spam-rounds", description=f"spam run {spec.run_id}: seconds and traffic per round",
        table=[{"round": r["round"], "seconds": round(r["seconds"], 3), "ciphertexts": r["ciphertexts"], "bytes": r["bytes"]}
               for r in report["per_round"]],
    )  # fmt: skip
    create_markdown_artifact(key="spam-report", markdown=markdown(report, public=True), description=f"spam run {spec.run_id}")
    log.info("AUC of the server's model: %s; run folder %s", auc if isinstance(auc, str) else f"{auc:.6f}", folder)
    return {"run_id": spec.run_id, "folder": str(folder), "auc_private": auc,
            **({"auc_plain": report["auc_plain"]} if report["test_mode"] else {})}  # fmt: skip
