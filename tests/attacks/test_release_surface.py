"""A curious analyst: allowed to request releases, not to see rows.

Each test replays an attack that worked against the release surface before datasets were
registered by a steward, and asserts what the analyst learns now. The neighbouring-dataset
harness (test_neighbours.py) covers the rest of the surface byte by byte.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from privrelease.cli.main import main
from privrelease.core.datasets.demo import census
from privrelease.core.ledger.ledger import Ledger
from privrelease.core.privacy.budget import Budget
from tests.mechanisms.test_dpne import phrase_corpus
from tests.support.helpers import QI, register, write_request


def _cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


def _readable(home: Path) -> bytes:
    """Everything under the home an analyst or auditor may read: releases, the ledger's JSON."""
    files = [p for p in (home / "releases").rglob("*") if p.is_file()] if (home / "releases").exists() else []
    ledger = json.dumps([e.as_dict() for e in Ledger(home / "privrelease.duckdb").entries()]).encode()
    return b"".join(p.read_bytes() for p in files) + ledger


def test_validation_is_no_counting_oracle(prefect_server, home, tmp_path, capsys):
    """Before: a request carried its own expectation suite and a failure reported exact counts,
    uncharged. Now a request cannot carry a suite, and two tables that differ in how many rows
    satisfy a predicate give the analyst the same answer."""
    answers = []
    for n_old in (3, 4):
        frame = census(400)
        frame["age"] = 30
        frame.loc[: n_old - 1, "age"] = 80
        root = tmp_path / f"h{n_old}"
        register(root, frame)
        suite = [{"type": "expect_column_values_to_be_between", "kwargs": {"column": "age", "max_value": 70}}]
        request = write_request(tmp_path / f"r{n_old}", suite=suite)
        code, said = _cli(capsys, "--home", str(root), "release", str(request))
        answers.append((code, said.replace(str(root), "<home>")))
    assert answers[0] == answers[1] and answers[0][0] == 2
    assert "the release request is invalid" in answers[0][1] and " 3 " not in answers[0][1]


def test_no_input_fingerprint_or_exact_corpus_size_is_published(prefect_server, home, tmp_path, capsys):
    """Before: the input's SHA-256 (a membership oracle) and DPNE's exact post and user counts were
    published. Now neither appears in anything the analyst reads."""
    frame = phrase_corpus(500, seed=9)
    register(home, frame, "posts", "user:user", "dp")
    Ledger(home / "privrelease.duckdb").set_budget("posts", Budget(4.0, 1e-5))
    request = tmp_path / "r.yaml"
    request.write_text(
        json.dumps(
            {
                "dataset": "posts",
                "mechanism": {
                    "name": "dpne",
                    "params": {"text_column": "text", "epsilon": 2.0, "delta": 1e-6, "T": 2, "tokenizer": "words"},
                },
            }
        )
    )
    code, said = _cli(capsys, "release", str(request))
    assert code == 0, said
    seen = _readable(home) + said.encode()
    source = (home / "data" / "posts.csv").read_bytes()
    snapshot = home / "datasets" / "posts" / "v1.parquet"
    for secret in (hashlib.sha256(source).hexdigest(), hashlib.sha256(snapshot.read_bytes()).hexdigest()):
        assert secret[:16].encode() not in seen
    manifest = json.loads(next((home / "releases" / "posts").glob("*/manifest.json")).read_text())
    assert manifest["input"]["rows"] is None and "fingerprint" not in json.dumps(manifest)
    for exact in (len(frame), frame["user"].nunique()):
        assert f'"rows": {exact}'.encode() not in seen and f"{exact} rows".encode() not in seen


def test_the_budget_unit_is_bound_to_the_data(prefect_server, home, tmp_path, capsys):
    """Before: one file could be released under two ids and two caps, from any readable path, into a
    ledger the run chose, under a unit the request chose. Now each is refused."""
    register(home, census(300), "census")
    code, said = _cli(
        capsys,
        "dataset",
        "add",
        "census-again",
        "--source",
        str(home / "data" / "census.csv"),
        "--format",
        "csv",
        "--unit",
        "record",
        "--purpose",
        "sdc",
    )
    assert code == 2 and "already registered as dataset 'census'" in said
    # a source path is the steward's, typed on the command line (any file the steward can read, privrelease/cli/typed.py); a
    # request names a registered id and nothing else (below), and what a run started through the gate names stays
    # inside the data root (tests/spam/test_spam_spec.py)
    for override, message in (
        ({"home": str(tmp_path / "mine")}, "home: Extra inputs are not permitted"),
        ({"dataset": {"id": "x", "source": "/etc/passwd", "format": "csv", "delimiter": ":"}}, "not a source description"),
        ({"dataset": "unregistered"}, "is not registered"),
    ):
        code, said = _cli(capsys, "release", str(write_request(tmp_path / "r", **override)))
        assert code == 2 and message in said, said
    register(home, phrase_corpus(200), "posts", "user:user", "dp")
    Ledger(home / "privrelease.duckdb").set_budget("posts", Budget(4.0, 1e-5))
    doc = {
        "dataset": "posts",
        "mechanism": {"name": "dpne", "params": {"user_column": "text", "text_column": "text", "epsilon": 1.0, "delta": 1e-6}},
    }
    (tmp_path / "unit.yaml").write_text(json.dumps(doc))
    code, said = _cli(capsys, "release", str(tmp_path / "unit.yaml"))
    assert code == 2 and "user_column: Extra inputs are not permitted" in said
    assert not (tmp_path / "mine").exists() and not (home / "releases").exists()


def test_an_sdc_release_claims_no_dp_budget(prefect_server, home, tmp_path, capsys):
    """Before: an RA release was recorded as epsilon = 0 and `ledger totals` reported the dataset
    within a DP budget. Now the entry says sdc and no DP total is shown or settable."""
    register(home, census(300), "census")
    code, said = _cli(capsys, "release", str(write_request(tmp_path / "r", mechanism__params__qi=QI)))
    assert code == 0, said
    code, said = _cli(capsys, "ledger", "totals", "--json")
    (totals,) = json.loads(said)
    assert (totals["kind"], totals["spent"], totals["remaining"], totals["cap"]) == ("sdc", None, None, None)
    code, said = _cli(capsys, "ledger", "set-budget", "census", "--epsilon", "1", "--delta", "0")
    assert code == 2 and "no epsilon" in said
    (entry,) = [e for e in Ledger(home / "privrelease.duckdb").entries() if e.status == "reserved"]  # the release's charge
    assert (entry.kind, entry.adjacency) == ("sdc", None)
