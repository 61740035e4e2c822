"""Private spam-filter training through its Prefect flow and the CLI."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
from pathlib import Path

import numpy as np
import pytest
import yaml

from privrelease.core.datasets.demo import mail
from privrelease.core.ledger.ledger import FAILED, PUBLISHED, RESERVED, Ledger
from privrelease.core.privacy import events as ev
from privrelease.core.spam import decision as D
from privrelease.core.spam import features as F
from privrelease.core.spam.dp import ADJACENCY, DPParams
from privrelease.core.spam.dp import calibrate as dp_calibrate
from privrelease.core.spam.parties import Remote
from privrelease.core.spam.run_report import EVALUATION, WITHHELD, markdown
from tests.conftest import REPO
from tests.flows.test_release_flow import cli


def corpus(folder: Path, capsys, seed: int = 5) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "all.jsonl").write_text("".join(json.dumps(m) + "\n" for m in mail(240, seed)))
    code, out, err = cli(capsys, "spam", "split", str(folder / "all.jsonl"), "--out", str(folder), "--users", "3")
    assert code == 0, err
    return out.split()


def spec(folder: Path, **changes) -> str:
    doc = {
        "run_id": "r1",
        "users": ["user-1.jsonl", "user-2.jsonl", "user-3.jsonl"],
        "test": "test.jsonl",
        "features": {"modulus": 100_000, "reduction": "hash", "dimension": 512, "seed": 0},
        "key_bits": 512,
        "learning_rate": 4e-4,
        "rounds": 3,
        "mode": "online",
        "block_size": 60,
        **changes,
    }
    (folder / "spam.yaml").write_text(yaml.safe_dump(doc))
    return str(folder / "spam.yaml")  # as a user types it: the path of the file (here, in the data root)


def test_training_flow_end_to_end_and_private_classification(prefect_server, home, test_mode, tmp_path, capsys):
    paths = corpus(home / "data" / "mail", capsys)
    assert [Path(p).name for p in paths] == ["user-1.jsonl", "user-2.jsonl", "user-3.jsonl", "test.jsonl"]
    sizes = [len(Path(p).read_text().splitlines()) for p in paths]
    assert sum(sizes) == 240 and sizes[3] == 48
    code, out, err = cli(capsys, "spam", "train", (spec(home / "data" / "mail")))
    assert code == 0, err
    folder = home / "spam" / "r1"
    assert sorted(p.name for p in folder.iterdir()) == [
        "model.npy",
        "report.json",
        "report.md",
        "roc.png",
        "transcript.jsonl",
        "twin.npy",  # test mode: the plaintext twin's model
    ]
    report = json.loads((folder / "report.json").read_text())
    assert {"auc_private", "auc_plain", "rounds", "seconds_per_round", "key_bits", "features"} <= set(report)
    assert report["rounds"] == 3 and len(report["seconds_per_round"]) == 3 and report["key_bits"] == 512
    assert report["auc_private"] > 0.85 and f"{report['auc_private']:.4g}" == f"{report['auc_plain']:.4g}"
    assert report["max_weight_gap"] < 1e-9
    lines = [json.loads(line) for line in (folder / "transcript.jsonl").read_text().splitlines()]
    assert set(lines[0]) == {"round", "sender", "receiver", "kind", "payload", "count", "bytes", "digest"}
    # labels come from inspecting the bytes: only the setup's announcements and directory are public
    assert {m["kind"] for m in lines if m["payload"] == "public"} == {"announcement", "directory", "round", "unmask-request"}
    assert {(m["kind"], m["payload"]) for m in lines if m["kind"] != "announcement" and m["sender"] != "server"} == {
        ("self-mask-shares", "sealed"),
        ("masked-gradient", "ciphertext"),
        ("mask-shares", "shares"),
    }
    # 3 users × (round, E[w], unmask request in; self-mask shares out and relayed in; gradient, mask shares out)
    assert sum(1 for m in lines if m["round"] == 1) == 3 * 7
    assert folder.joinpath("model.npy").stat().st_mode & 0o777 == 0o600
    entries = [e for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id == "r1"]
    assert [(e.status, e.kind, e.epsilon) for e in entries] == [(RESERVED, "mpc", 0.0), (PUBLISHED, "mpc", 0.0)]
    assert json.loads(entries[1].detail)["transcript_sha256"] == report["transcript_sha256"]
    # without dp: the model is not a DP output: its AUC stays in the run folder, withheld from the ledger,
    # the command's output and the report artifact
    assert json.loads(entries[1].detail)["auc_private"] == WITHHELD and f"AUC private {WITHHELD}" in out
    shown = markdown(report, public=True)
    assert WITHHELD in shown and f"{report['auc_private']:.6f}" not in shown
    assert f"{report['auc_private']:.6f}" in (folder / "report.md").read_text()
    # the cutoff chosen on the evaluation mail, with its figures beside the AUC; withheld publicly without dp:
    chosen = report["decision"]
    assert chosen["false_positives"] <= 0.01 * (chosen["false_positives"] + chosen["true_negatives"])
    test_spam = sum(json.loads(line)["label"] == "spam" for line in Path(paths[3]).read_text().splitlines())
    assert (chosen["true_positives"] + chosen["false_negatives"], chosen["false_positives"] + chosen["true_negatives"]) == (
        test_spam,
        48 - test_spam,
    )
    assert chosen["recall"] > 0.5 and chosen["at_sign"]["recall"] is not None
    assert "| spam | " in (folder / "report.md").read_text() and "| spam | " not in shown
    # private classification: the client's label is the server's model against its cutoff on the message
    w = np.load(folder / "model.npy")
    params = F.FeatureParams(modulus=100_000, reduction="hash", dimension=512)
    for i, message in enumerate(mail(6, 77)):
        path = tmp_path / f"m{i}.eml"
        path.write_text(message["text"])
        code, out, err = cli(capsys, "spam", "classify", "r1", str(path))
        assert code == 0, err
        x = F.Reducer(params).apply(F.grams(message["text"], 100_000))
        assert out.strip() == D.label(w, x, chosen["cutoff_units"])
        assert ("preparing run r1's classifier" in err) == (i == 0)  # once per model
    code, _, err = cli(capsys, "spam", "train", (spec(home / "data" / "mail")))
    assert code == 2 and "already exists" in err
    # a run whose folder fails part-way (here its ROC plot) leaves no run folder, and is settled failed
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("privrelease.core.spam.run_report.roc", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
        code, _, err = cli(capsys, "spam", "train", spec(home / "data" / "mail", run_id="r-broken", rounds=1))
    assert code != 0 and not (home / "spam" / "r-broken").exists() and sorted(p.name for p in (home / "spam").iterdir()) == ["r1"]
    assert [e.status for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id == "r-broken"] == [RESERVED, FAILED]
    # with dp: a DP charge of the mail corpus, its rounds recorded as Gaussian events for the accountant; on other
    # mail than the runs above read (their round sums were decrypted exactly: tests/spam/test_spam_terms.py)
    dp = {"epsilon": 2.0, "delta": 1e-6, "colluders": 1, "max_features": 100, "radius": 1.0}
    corpus(home / "data" / "other", capsys, seed=6)
    other = spec(home / "data" / "other", run_id="r-dp", rounds=2, dp=dp).replace("mail/", "other/")
    code, _, err = cli(capsys, "spam", "train", other)
    assert code == 2 and "set one with: privrelease ledger set-budget spam-mail" in err
    assert cli(capsys, "ledger", "set-budget", "spam-mail", "--epsilon", "4", "--delta", "1e-5")[0] == 0
    code, out, err = cli(capsys, "spam", "train", other)
    assert code == 0, err
    entries = [e for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id == "r-dp"]
    assert [(e.status, e.kind, e.epsilon, e.delta) for e in entries] == [
        (RESERVED, "dp", 2.0, 1e-6),
        (PUBLISHED, "dp", 0.0, 0.0),
    ]  # the spend is the reservation
    noise = dp_calibrate(DPParams(**dp), 3, 2, threshold=2)
    assert json.loads(entries[0].detail)["events"] == ev.stored(ev.charge([noise.event()], 2.0, 1e-6))
    assert entries[0].adjacency == ADJACENCY.code  # the typed adjacency, stored as its code
    report = json.loads((home / "spam" / "r-dp" / "report.json").read_text())
    assert report["dp"]["share_variance"] == str(noise.share_variance) and report["per_round"][1]["max_gradient_gap"] > 0
    # the decision on the evaluation mail's AUC, said in the dp run's report and on the spam-training page (not without dp:)
    assert EVALUATION in (home / "spam" / "r-dp" / "report.md").read_text()
    assert json.loads(entries[1].detail)["auc_private"] == report["auc_private"]  # a DP output: shown
    assert f"{report['auc_private']:.6f}" in markdown(report, public=True)
    assert EVALUATION not in (folder / "report.md").read_text()
    page = " ".join((REPO / "docs" / "mechanisms" / "spam-training.md").read_text().split())
    assert "With `dp:`, the AUC in the report and the ledger is DP too. " + EVALUATION in page


def test_bad_mail_is_refused_before_anything_is_recorded(prefect_server, home, test_mode, tmp_path, capsys):
    corpus(home / "data" / "mail", capsys)
    with (home / "data" / "mail" / "user-2.jsonl").open("a") as fh:
        fh.write(json.dumps({"text": "hello", "label": "maybe"}) + "\n")
    code, _, err = cli(capsys, "spam", "train", (spec(home / "data" / "mail", run_id="r2")))
    assert code == 2 and "label' (spam or ham)" in err and "user-2.jsonl line" in err
    assert not (home / "spam" / "r2").exists()
    code, _, err = cli(capsys, "spam", "train", (spec(home / "data" / "mail", run_id="r3", key_bits=256)))
    assert code == 2 and "key_bits: Input should be greater than or equal to 512" in err
    code, _, err = cli(capsys, "spam", "train", (spec(home / "data" / "mail", run_id="r4", users=["user-1.jsonl"])))
    assert code == 2 and "users: List should have at least 2 items" in err and not (home / "spam" / "r4").exists()
    code, _, err = cli(capsys, "spam", "classify", "nope", str(home / "data" / "mail" / "test.jsonl"))
    assert code == 2 and "no trained spam run 'nope'" in err


SEND = Remote.send


@pytest.fixture
def flow_logs(caplog):
    """caplog for the flow's run logger. Prefect's first logging setup in a process replaces the root
    logger's handlers, caplog's among them, so it is done before the test and caplog's handler put back."""
    from prefect.logging.configuration import setup_logging

    setup_logging()
    root = logging.getLogger()
    if caplog.handler not in root.handlers:
        root.addHandler(caplog.handler)
    yield caplog
    root.removeHandler(caplog.handler)


def killing(monkeypatch, victims: set[str], round_: int | None) -> None:
    """As a victim is about to be sent its round's E[w] (0-based ``round_``), after it has shared its
    self-mask seeds, SIGKILL its process and wait until it is dead: it dies mid-round. With ``round_``
    None, as it is about to be sent the directory: it dies during setup. (Killing it right after the
    send raced: a fast victim could answer before the signal landed, and then left a round later.)"""

    def send(self, method: str, *args) -> None:
        if self.name in victims and (method == "gradient" and args[1] == round_ or method == "setup" and round_ is None):
            os.kill(self._process.pid, signal.SIGKILL)
            self._process.join(10)
        SEND(self, method, *args)

    monkeypatch.setattr(Remote, "send", send)


def test_a_party_killed_mid_round_leaves_and_below_the_threshold_the_run_fails(
    prefect_server, home, test_mode, capsys, monkeypatch, flow_logs
):
    corpus(home / "data" / "mail", capsys)
    names = ["user-1", "user-2", "user-3"]
    killing(monkeypatch, {"user-2"}, 1)
    code, _, err = cli(capsys, "spam", "train", spec(home / "data" / "mail", run_id="r-left", threshold=2))
    assert code == 0, err
    report = json.loads((home / "spam" / "r-left" / "report.json").read_text())
    assert report["threshold"] == 2 and report["left"] == [{"round": 1, "user": "user-2"}]
    assert [(r["participants"], r["left"]) for r in report["per_round"]] == [
        (names, []),
        (names, ["user-2"]),
        (["user-1", "user-3"], []),
    ]
    # the twin steps on the survivors' mail only: the private model follows the plaintext rule on it, round by round
    assert max(r["max_gradient_gap"] for r in report["per_round"]) < 1e-9 and report["max_weight_gap"] < 1e-9
    assert [r["training_messages"] for r in report["per_round"]][1:] == [120, 120]  # user-1's and user-3's blocks of 60
    assert "user-2 left in round 2 (out for the rest of the run)" in (home / "spam" / "r-left" / "report.md").read_text()
    assert "round 2: user-2 left (its process ended or did not answer); 2 users remain, threshold 2" in flow_logs.text
    entries = [e for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id == "r-left"]
    assert entries[1].status == PUBLISHED and json.loads(entries[1].detail)["rounds"] == [
        {"round": 1, "participants": names, "left": []},
        {"round": 2, "participants": names, "left": ["user-2"]},
        {"round": 3, "participants": ["user-1", "user-3"], "left": []},
    ]
    killing(monkeypatch, {"user-1", "user-3"}, 1)  # two of three: fewer than the threshold remain
    code, _, err = cli(capsys, "spam", "train", spec(home / "data" / "mail", run_id="r-quorum", threshold=2))
    assert (
        code == 2
        and "round 2: only 1 of its 3 users sent their gradient (user-1, user-3 left), fewer than the threshold 2" in err
    )
    assert "nothing is published" in err and not (home / "spam" / "r-quorum").exists()
    entries = [e for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id == "r-quorum"]
    assert [e.status for e in entries] == [RESERVED, FAILED]
    detail = json.loads(entries[1].detail)
    assert "fewer than the threshold 2" in detail["reason"] and detail["rounds"] == [
        {"round": 1, "participants": names, "left": []}
    ]
    killing(monkeypatch, {"user-3"}, None)  # setup has no threshold: a user lost there stops the run, clearly
    code, _, err = cli(capsys, "spam", "train", spec(home / "data" / "mail", run_id="r-setup", threshold=2))
    assert code == 2 and err.startswith("error: setup: the user-3 process is gone. Every user must take part in setup")
    assert "nothing was trained or published" in err and not (home / "spam" / "r-setup").exists()
    entries = [e for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id == "r-setup"]
    assert [e.status for e in entries] == [RESERVED, FAILED]


def table_widths(text: str) -> set[int]:
    """The number of cells of each line of report.md's per-round table, splitting at unescaped ``|``."""
    table = [line for line in text.splitlines() if line.startswith("| round") or line.startswith("| 1 ")]
    return {len(re.split(r"(?<!\\)\|", line)) for line in table}


def test_a_step_name_with_a_bar_stays_in_its_cell(monkeypatch):
    report = {
        "run_id": "r",
        "test_messages": 4,
        "learning_rate": 0.1,
        "rounds": 1,
        "mode": "batch",
        "auc_private": 0.9,
        "test_mode": False,
        "users": [2, 2],
        "floor": 1,
        "key_bits": 512,
        "features": {"reduction": "hash", "dimension": 8, "modulus": 100, "data_dependent": False},
        "server_learns": "sums",
        "threshold": 2,
        "left": [],
        "dp": None,
        "per_round": [
            {
                "round": 1,
                "seconds": 1.0,
                "steps": {"encrypt | sum": 0.5, "decrypt": 0.25},
                "messages": 3,
                "ciphertexts": 4,
                "bytes": 1e6,
            }
        ],
    }
    assert table_widths(markdown(report)) == {9}  # round, total, 2 steps, messages, ciphertexts, MB, and the two ends
    assert "encrypt \\| sum" in markdown(report)
    monkeypatch.setattr("privrelease.core.spam.run_report.cell", str)  # weakened: the name as it is
    assert table_widths(markdown(report)) == {9, 10}
