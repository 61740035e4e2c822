"""A training run's report: report.md (the operator's, or the public version for Prefect's artifact),
the ROC chart, and the AUC as others may read it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

# with dp: why the AUC the report and the ledger hold is itself DP (docs/mechanisms/spam-training.md, "What the server still learns")
EVALUATION = (
    "The AUC is measured on the evaluation mail (`test:`), the server operator's own mail, not a user's: "
    "the model is DP with respect to the users' messages, so its AUC on the operator's mail is "
    "post-processing of a DP output with the operator's data, and DP with respect to the users' mail. That "
    "holds only when the evaluation mail is the operator's own: `privrelease spam split` carves its "
    "test.jsonl out of the corpus it splits among the users, a way to try the protocol, and the people "
    "whose messages went to that file are not protected by the model's DP: their messages set the AUC "
    "directly."
)

WITHHELD = (
    "withheld: without dp: the model is not a DP output of the users' mail, so its AUC stays in the run "
    "folder's report.json and report.md, for the server's operator"
)


def public_auc(report: dict) -> float | str:
    """The model's AUC where others read it (the ledger, Prefect's log and artifacts): a DP output with
    ``dp:``, otherwise withheld."""
    return report["auc_private"] if report.get("dp") else WITHHELD


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels > 0, scores))


def roc(labels: np.ndarray, curves: dict[str, np.ndarray], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import roc_curve

    fig, ax = plt.subplots(figsize=(5, 5))
    for (name, scores), style in zip(curves.items(), ("-", "--")):
        fpr, tpr, _ = roc_curve(labels > 0, scores)
        ax.plot(fpr, tpr, style, label=f"{name} (AUC {auc(labels, scores):.5f})")
    ax.plot([0, 1], [0, 1], ":", color="grey")
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title("ROC on the test mail", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def cell(text: str) -> str:
    """Text as one cell of a Markdown table: a ``|`` in it would start a new cell."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def share(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def decision_lines(report: dict) -> list[str]:
    """The cutoff ``spam classify`` uses and its precision, recall and confusion matrix on the evaluation mail."""
    d = report.get("decision")
    if not d:
        return ["Decision threshold: none recorded (a run trained before #42): `spam classify` compares at 0, the sign."]
    sign = d["at_sign"]
    return [
        f"Decision threshold of `spam classify`: spam iff the score wᵀx exceeds **{d['cutoff']:.6g}**, the least "
        f"cutoff at which at most {d['max_false_positive_rate']:.2%} of the evaluation mail's ham is called spam "
        f"(`max_false_positive_rate`). On the evaluation mail (the mail it was chosen on, like the AUC): precision "
        f"{share(d['precision'])}, recall {share(d['recall'])}, false-positive rate {share(d['false_positive_rate'])}; "
        f"at the bare sign (score > 0) recall would be {share(sign['recall'])} and the false-positive rate "
        f"{share(sign['false_positive_rate'])}. Computed from the model and the evaluation mail only (docs/SPAM.md).",
        "",
        "| evaluation mail | called spam | called ham |",
        "|---|---|---|",
        f"| spam | {d['true_positives']} | {d['false_negatives']} |",
        f"| ham | {d['false_positives']} | {d['true_negatives']} |",
    ]


def markdown(report: dict, public: bool = False) -> str:
    """report.md (the run folder's, the operator's); ``public``: the version for Prefect's artifact, where
    a model without dp: has its AUC and decision figures withheld (``public_auc``)."""
    steps = sorted({s for r in report["per_round"] for s in r["steps"]})
    head = "| round | total s | " + " | ".join(cell(s) for s in steps) + " | messages | ciphertexts | MB |"
    rows = [
        f"| {r['round']} | {r['seconds']:.2f} | "
        + " | ".join(f"{r['steps'].get(s, 0):.2f}" for s in steps)
        + f" | {r['messages']} | {r['ciphertexts']} | {r['bytes'] / 1e6:.1f} |"
        for r in report["per_round"]
    ]
    return "\n".join(
        [
            f"# Private spam-filter training `{report['run_id']}`",
            "",
            (
                f"AUC on {report['test_messages']} test messages: {WITHHELD} "
                f"(η = {report['learning_rate']}, {report['rounds']} rounds, {report['mode']} mode)."
                if public and not report.get("dp")
                else f"AUC on {report['test_messages']} test messages: private **{report['auc_private']:.6f}** "
                f"(η = {report['learning_rate']}, {report['rounds']} rounds, {report['mode']} mode)."
                + (
                    f" Test mode: plaintext twin on the pooled mail {report['auc_plain']:.6f} (same rule), largest weight "
                    f"difference {report['max_weight_gap']:.2e}; with the exact sigmoid {report['auc_plain_exact_sigmoid']:.6f}."
                    if report["test_mode"]
                    else ""
                )
            ),
            "",
            *(
                [f"Decision threshold and its confusion matrix: {WITHHELD}.", ""]
                if public and not report.get("dp")
                else [*decision_lines(report), ""]
            ),
            f"{len(report['users'])} users holding {', '.join(map(str, report['users']))} messages (at least "
            f"{report['floor']} per user and round); {report['key_bits']}-bit "
            f"Paillier keys; features: {report['features']['reduction']} to {report['features']['dimension']} "
            f"(4-grams mod {report['features']['modulus']})"
            + (
                " — **data-dependent reduction**: its feature list reveals document frequencies"
                if report["features"]["data_dependent"]
                else ""
            )
            + ".",
            "",
            "Seconds per protocol step, and traffic:",
            "",
            head,
            "|" + "---|" * (len(steps) + 5),
            *rows,
            "",
            "What the server learns: " + report["server_learns"] + ".",
            "",
            f"Threshold: a round completes if at least {report['threshold']} users remain. "
            + (
                "; ".join(f"{e['user']} left in round {e['round'] + 1}" for e in report["left"])
                + " (out for the rest of the run)."
                if report["left"]
                else "No user left."
            ),
            *(
                [
                    "",
                    f"Differential privacy: (ε = {report['dp']['epsilon']:g}, δ = {report['dp']['delta']:g}) for the whole run, "
                    f"per replaced message, with up to {report['dp']['colluders']} colluding users adding nothing: "
                    f"{report['dp']['mechanism']}, noise std {report['dp']['sigma_of_g']:.4g} per gradient coordinate and round; "
                    f"at most {report['dp']['max_features']} features per message, model kept in the l2 ball of radius "
                    f"{report['dp']['radius']:g}. " + EVALUATION,
                ]
                if report.get("dp")
                else []
            ),
            "",
            "![ROC](roc.png)",
            "",
        ]
    )
