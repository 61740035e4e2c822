"""The neighbouring-dataset harness on what the spam server decrypts with ``dp:``.

Two corpora that differ in one message (one user's message replaced: its label flipped, a message
of ``max_features`` features or more, the worst replacement a brute-force search finds) go through
the real protocol (``Local`` parties, 512-bit keys in test mode) at the same model, round after
round with the model projected as the server projects it. The users add no noise here (their
shares are what the auditor, tests/audits/test_audit_spam.py, draws on top of these sums): the server
decrypts the exact noiseless round sums, whose l2 distance on neighbours must be at most the
calibrated sensitivity ``Noise.l2``, and the brute force over every replacement message on a small
corpus shows how close the worst case comes to it (the bound is not vacuous).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import math
import re
import time
from pathlib import Path

import numpy as np
import pytest

from privrelease.core.ledger.ledger import Ledger
from privrelease.core.spam import dp
from privrelease.core.spam import parties as Q
from privrelease.core.spam import protocol as P
from privrelease.core.spam import wire as W
from privrelease.core.spam.aggregation import W_BITS
from tests.attacks.test_spam_server import summed

Corpus = list[tuple[list[np.ndarray], np.ndarray]]  # per user: messages (feature index sets) and labels ±1


class Noiseless(P.User):
    """A dp: user (capped messages, the dp layout) whose noise share is left out: the server then
    decrypts the exact sum the users' shares are added to."""

    def noise_share(self, layout) -> list[int]:
        return [0] * layout.dimension


def protocol_round(corpus: Corpus, noise: dp.Noise, w: np.ndarray, eta: float) -> tuple[list[int], np.ndarray]:
    """One round of the real protocol at model ``w``: the decrypted noiseless slot sums (4·C_w·g,
    exact integers) and the server's model after its step and projection."""
    server = P.Server(512, w, eta, "batch", 1000, 1, noise.params.radius, noise.share_variance)
    inbox = Q.Local(server)
    users = [Q.Local(Noiseless(f"user-{k + 1}", x, y, noise=noise.share(0))) for k, (x, y) in enumerate(corpus)]
    channel = W.Channel()
    Q.setup(inbox, users, channel)
    Q.train_round(inbox, users, channel, 0)
    return summed(server), server.model()


def rule(x: np.ndarray, y: int, w_int: np.ndarray, d: int) -> list[int]:
    """One (capped) message's exact slot contribution: t = 2y·C_w − C_w·wᵀx on each of its features."""
    out = [0] * d
    t = (int(y) << (W_BITS + 1)) - int(w_int[x].sum())
    for j in x.tolist():
        out[j] = t
    return out


def l2(a: list[int], b: list[int]) -> float:
    return math.sqrt(sum((u - v) ** 2 for u, v in zip(a, b)))


def replaced(corpus: Corpus, user: int, message: int, x: np.ndarray, y: int) -> Corpus:
    xs, ys = list(corpus[user][0]), corpus[user][1].copy()
    xs[message], ys[message] = x, y
    return [(xs, ys) if k == user else part for k, part in enumerate(corpus)]


def small_corpus(d: int, seed: int, per_user: int = 6, longest: int = 9) -> Corpus:
    rng = np.random.default_rng(seed)
    return [
        (
            [np.sort(rng.choice(d, rng.integers(1, longest + 1), replace=False)) for _ in range(per_user)],
            rng.choice([-1, 1], per_user),
        )
        for _ in range(2)
    ]


D_SMALL, F_SMALL = 10, 4


@pytest.mark.parametrize(("radius", "eta", "attained"), [(0.01, 0.5, 0.98), (0.5, 0.5, 0.70), (50.0, 50.0, 0.45)])
def test_round_sums_on_neighbours_stay_within_the_sensitivity(test_mode, radius, eta, attained):
    """Three rounds, the model projected onto the ball as the server does (each step leaves it), on
    a 2-user corpus of 10 features with messages of up to 9 features capped to F = 4. At each
    round's model: (1) the protocol's decrypted sum equals the exact integer rule on the capped
    messages; (2) a brute force over every replacement message (any message is capped to one of the
    386 feature sets of at most F of the 10 features; either label) for every message of the corpus
    finds no l2 distance above ``Noise.l2``, and the worst one reaches ``attained`` of it. The bound
    is 2·√F·T (the triangle inequality); the worst case is a label flip, 4·C_w·√F = 2/(2 + R·√F) of
    the bound (0.990 at R = 0.01), when R·√F is small, and two disjoint messages, at most
    √F·C_w·√((2 + R·√F)² + 4), about half the bound, as R·√F grows (found: 0.990, 0.706, 0.492);
    (3) the protocol, run on the corpus with that worst replacement and with a message of more
    than F features flipped, gives sums within ``Noise.l2`` of the original's."""
    params = dp.DPParams(epsilon=1.0, delta=1e-6, colluders=1, max_features=F_SMALL, radius=radius)
    noise = dp.calibrate(params, 2, 3)
    corpus = small_corpus(D_SMALL, seed=int(radius * 100))
    capped = [[dp.cap(v, F_SMALL, 0) for v in x] for x, _ in corpus]
    long_one = next(i for i, v in enumerate(corpus[1][0]) if len(v) > F_SMALL)
    candidates = [np.array(c, dtype=np.int64) for f in range(F_SMALL + 1) for c in itertools.combinations(range(D_SMALL), f)]
    w = dp.project(np.random.default_rng(1).normal(0, 1, D_SMALL), radius)  # a model on the ball's surface
    worst_ratio, projected = 0.0, 0
    for _ in range(3):
        sums, after = protocol_round(corpus, noise, w, eta)
        w_int = np.rint(np.ldexp(w, W_BITS)).astype(np.int64)
        exact = [
            sum(col) for col in zip(*(rule(v, y, w_int, D_SMALL) for xs, (_, ys) in zip(capped, corpus) for v, y in zip(xs, ys)))
        ]
        assert sums == exact
        best = (0.0, None)
        for user, (_, ys) in enumerate(corpus):
            for i, (v, y) in enumerate(zip(capped[user], ys)):
                mine = rule(v, y, w_int, D_SMALL)
                for c, label in itertools.product(candidates, (-1, 1)):
                    gap = l2(mine, rule(c, label, w_int, D_SMALL))
                    assert gap <= noise.l2
                    best = max(best, (gap, (user, i, c, label)), key=lambda b: b[0])
        worst_ratio = max(worst_ratio, best[0] / noise.l2)
        user, i, c, label = best[1]
        worst, _ = protocol_round(replaced(corpus, user, i, c, label), noise, w, eta)
        assert l2(worst, sums) == pytest.approx(best[0], rel=1e-12)
        flipped, _ = protocol_round(replaced(corpus, 1, long_one, corpus[1][0][long_one], -corpus[1][1][long_one]), noise, w, eta)
        assert 0 < l2(flipped, sums) <= noise.l2
        assert l2(flipped, sums) == pytest.approx(4 * 2**W_BITS * math.sqrt(F_SMALL), rel=1e-12)  # F of its features kept
        projected += np.linalg.norm(w + eta * np.array(sums) / 2.0 ** (W_BITS + 2)) > radius
        assert np.linalg.norm(after) <= radius
        w = after
    assert projected == 3  # the projection was active in every round
    assert attained <= worst_ratio <= 1


# -- (b) the whole surface of a dp: run on neighbouring corpora -------------------------------------------

DP = {"epsilon": 2.0, "delta": 1e-6, "colluders": 1, "max_features": 100, "radius": 1.0}
TWINS = re.compile(r" Test mode: plaintext twin[^\n]*")  # test mode only: the flow builds no twins otherwise
TIMING = re.compile(r"^\| \d+ \| [^\n]*$|^round \d+: [\d.]+ s, ", re.M)  # the per-round table rows and log lines' seconds


def _spam_run(home: Path, flip: bool, monkeypatch, capsys) -> dict:
    """A dp: training through the CLI and its Prefect flow in its own home; ``flip``: user 2's
    longest message with its label flipped (D′). Returns everything a user of the tool can read."""
    from tests.flows.test_release_flow import cli
    from tests.system.test_spam_flow import corpus, spec

    monkeypatch.setenv("PRIVRELEASE_HOME", str(home))
    folder = home / "data" / "mail"
    corpus(folder, capsys)
    if flip:
        path = folder / "user-2.jsonl"
        mail = [json.loads(line) for line in path.read_text().splitlines()]
        i = max(range(len(mail)), key=lambda k: len(mail[k]["text"]))
        mail[i]["label"] = "ham" if mail[i]["label"] == "spam" else "spam"
        path.write_text("".join(json.dumps(m) + "\n" for m in mail))
    assert cli(capsys, "ledger", "set-budget", "spam-mail", "--epsilon", "4", "--delta", "1e-5")[0] == 0
    code, _, err = cli(capsys, "spam", "train", spec(folder, rounds=2, dp=DP))
    assert code == 0, err
    run = home / "spam" / "r1"
    entries = json.loads(
        json.dumps([e.as_dict() for e in Ledger(home / "privrelease.duckdb").entries()]).replace(str(home), "<home>")
    )
    return {
        "home": str(home),
        "report": json.loads((run / "report.json").read_text()),
        "md": (run / "report.md").read_text(),
        "files": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run.iterdir())},
        "transcript": [json.loads(line) for line in (run / "transcript.jsonl").read_text().splitlines()],
        "ledger": entries,
    }


def _without_timing(key: str, data: str) -> object:
    if key == "spam-rounds":  # the table artifact: seconds, ciphertexts and bytes per round
        return [{k: v for k, v in row.items() if k != "seconds"} for row in json.loads(data)]
    return TIMING.sub("", TWINS.sub("", data)).replace("**", "")  # bold: the harness's tokens are unformatted


def test_a_dp_run_shows_only_dp_outputs_and_public_values_on_neighbours(prefect_server, test_mode, tmp_path, monkeypatch, capsys):
    """The spam flow with dp: on D and on D′ (one user's message with its label flipped): the run
    folder, report, transcript, ledger and Prefect's parameters, tasks, logs and artifacts are the
    same, except (1) the DP outputs: the server's model (``model.npy``), its AUC on the operator's
    evaluation mail, the ROC plot and the decision cutoff with its counts on that mail, functions of the DP round sums and of the operator's own mail
    (docs/mechanisms/spam-training.md); (2) values drawn afresh by every run whatever the mail: digests of ciphertexts, of the
    key directory and of the transcript, the directory's size (n in decimal), and seconds; (3) the test-mode plaintext twins, which only
    test mode builds. The control: the flipped message does change the twins' gradients."""
    from prefect.logging.handlers import APILogHandler

    from tests.privacy.test_neighbours import _prefect_surface, _same_but_outputs

    runs = [_spam_run(tmp_path / name, flip, monkeypatch, capsys) for name, flip in (("d", False), ("dp", True))]
    APILogHandler().flush()
    time.sleep(2.5)
    outputs, gaps = [], []
    for run in runs:
        flow_run_id = next(e["flow_run_id"] for e in run["ledger"] if e["flow_run_id"])
        run["prefect"] = json.loads(json.dumps(asyncio.run(_prefect_surface(flow_run_id))).replace(run.pop("home"), "<home>"))
        report, files = run["report"], run["files"]
        gaps.append([r.pop("max_gradient_gap") for r in report["per_round"]] + [files.pop("twin.npy")])
        for key in ("auc_plain", "auc_plain_exact_sigmoid", "max_weight_gap", "decision_plain"):
            report.pop(key)
        chosen = report.pop("decision")  # the cutoff and its counts: the DP model scored on the operator's mail
        assert chosen.pop("max_false_positive_rate") == 0.01
        at_sign = chosen.pop("at_sign")
        varying = [
            report.pop("auc_private"),
            report.pop("transcript_sha256"),
            report.pop("directory_digest"),
            report.pop("setup_seconds"),
            *report.pop("seconds_per_round"),
            *["-" if v is None else v for v in (*chosen.values(), *at_sign.values())],  # "-": no precision (none flagged)
            *[files.pop(name) for name in ("model.npy", "roc.png", "report.json", "report.md", "transcript.jsonl")],
        ]
        for r in report["per_round"]:
            varying += [r.pop("seconds"), *r.pop("steps").values()]
        for line in run["transcript"]:
            line.pop("digest")
            if line["kind"] == "directory":  # it prints the fresh key's n in decimal: its length varies by a digit
                line.pop("bytes")
        for entry in run["ledger"]:
            for key in ("ts", "hash", "prev_hash", "flow_run_id"):
                entry.pop(key)
            entry["detail"] = json.loads(entry["detail"]) if isinstance(entry["detail"], str) else entry["detail"]
            for key in ("auc_private", "transcript_sha256"):
                entry["detail"].pop(key, None)
        assert len(TWINS.findall(run["md"])) == 1
        run["md"] = _without_timing("report.md", run["md"])
        prefect = run["prefect"]
        prefect["logs"] = [TIMING.sub("round N: ", line).replace(";", " ;") for line in prefect["logs"]]
        prefect["artifacts"] = [(k, kind, desc, _without_timing(k, data)) for k, kind, desc, data in prefect["artifacts"]]
        outputs.append([float(v) if not isinstance(v, str) else v for v in varying])
    a, b = runs
    assert a["report"] == b["report"] and a["files"] == b["files"] and a["transcript"] == b["transcript"]
    assert a["ledger"] == b["ledger"]
    for key in ("parameters", "state", "tasks"):
        assert a["prefect"][key] == b["prefect"][key], key
    (report_a, rounds_a), (report_b, rounds_b) = a["prefect"]["artifacts"], b["prefect"]["artifacts"]
    assert report_a[:3] == report_b[:3] == ("spam-report", "markdown", "spam run r1") and rounds_a == rounds_b
    _same_but_outputs(report_a[3], report_b[3], *outputs, "report artifact")
    _same_but_outputs("\n".join(a["prefect"]["logs"]), "\n".join(b["prefect"]["logs"]), *outputs, "Prefect logs")
    _same_but_outputs(a["md"], b["md"], *outputs, "report.md")
    assert gaps[0] != gaps[1]  # control: the neighbours' plaintext differs where only test mode looks
