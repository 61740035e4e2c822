"""The n-gram release (DPNE) through the release flow and the CLI, under Prefect's test harness."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pandas as pd
import pytest
import yaml

from privrelease.core import noise
from privrelease.core.ledger.ledger import PUBLISHED, RESERVED, Ledger
from privrelease.core.mechanisms import dpne
from privrelease.core.mechanisms.base import Snapshot
from privrelease.core.privacy.budget import Budget
from privrelease.core.release import pipeline, spec
from privrelease.core.release.home import Home
from tests.flows.test_release_flow import cli
from tests.mechanisms.test_dpne import phrase_corpus
from tests.support.helpers import planned_run, register

DPNE = {"name": "dpne", "params": {"text_column": "text", "epsilon": 4.0,
                                   "delta": 1e-7, "T": 5, "delta0": 20, "tokenizer": "words"}}  # fmt: skip


def write_corpus(home: Path, folder: Path, frame=None, fmt: str = "csv", seed: int | None = None, **params) -> Path:
    """Register a corpus (user unit, DP purpose) and write a DPNE request for it."""
    register(home, phrase_corpus(1500) if frame is None else frame, "posts", "user:user", "dp", fmt=fmt)
    doc = {"dataset": "posts", "mechanism": {"name": "dpne", "params": {**DPNE["params"], **params}}}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "request.yaml").write_text(yaml.safe_dump(doc if seed is None else {**doc, "seed": seed}))
    return folder / "request.yaml"


def test_dpne_release_charges_then_publishes(prefect_server, home, tmp_path, capsys):
    spec = write_corpus(home, tmp_path / "a", fmt="jsonl", publish_weights=True)
    code, _, err = cli(capsys, "release", str(spec))
    assert code == 2 and "no privacy budget" in err and "privrelease ledger set-budget posts" in err
    assert not (home / "releases" / "posts").exists()
    assert cli(capsys, "ledger", "set-budget", "posts", "--epsilon", "6", "--delta", "1e-6")[0] == 0
    code, out, err = cli(capsys, "release", str(spec))
    assert code == 0, err
    folder = Path(out.split("folder ")[1].split()[0])
    assert sorted(p.name for p in folder.iterdir()) == [
        "detection.png",
        "manifest.json",
        "ngrams.csv",
        "ngrams.parquet",
        "ngrams_by_length.png",
        "report.md",
    ]
    table = duckdb.connect().execute("SELECT * FROM read_parquet(?)", [str(folder / "ngrams.parquet")]).df()
    assert list(table.columns) == ["ngram", "n", "noisy_weight"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["counts_by_length"] == {str(k): int((table["n"] == k).sum()) for k in range(1, 6)}
    assert "the cat sat on the" in set(table["ngram"])
    assert manifest["privacy"]["adjacency"].startswith("add or remove one user")
    assert manifest["input"]["rows"] is None  # the corpus size is not public under the user unit
    assert manifest["mechanism"]["params"]["user_column"] == "user"  # filled from the registration
    reserved, published = [e for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id]
    assert (reserved.status, reserved.epsilon, reserved.delta) == (RESERVED, 4.0, 1e-7)
    detail = json.loads(reserved.detail)
    assert detail["sigma_star"] == pytest.approx(1.327904, abs=1e-6) and len(detail["sigmas"]) == 5 and detail["rho_1"] > 0
    assert published.status == PUBLISHED
    assert "simulated" not in json.dumps([e.as_dict() for e in Ledger(home / "privrelease.duckdb").entries()])
    assert json.loads(published.detail)["counts_by_length"] == manifest["counts_by_length"]
    report = (folder / "report.md").read_text()
    assert "sigma* = 1.327904" in report and "simulated" not in json.dumps(manifest)
    # the report says which draw is not exact, as docs/mechanisms/noise.md does (third privacy review, finding 7)
    assert "how many pass drawn by numpy's floating-point binomial sampler (DPNE's one draw that is not exact)" in report
    accuracy = manifest["privacy"]["accuracy"]
    assert len(accuracy["levels"]) == 5 and accuracy["spurious_share"][0] == 0
    assert all(rho is None or lv["threshold"] == rho for lv, rho in zip(accuracy["levels"], manifest["privacy"]["rho"]))
    assert "### Accuracy" in report and "![Probability that an n-gram held by m users is released](detection.png)" in report

    code, _, err = cli(capsys, "release", str(spec))  # a second epsilon = 4 would exceed the cap of 6
    last = err.strip().splitlines()[-1]
    assert code == 2 and "needs epsilon=4, delta=1e-07 but dataset 'posts' cannot take it" in last, err
    assert len(list((home / "releases" / "posts").iterdir())) == 1
    assert len([e for e in Ledger(home / "privrelease.duckdb").entries() if e.status == RESERVED]) == 1


def test_a_release_reads_the_checked_snapshot_file_and_gets_what_the_rows_give(home, tmp_path, test_mode):
    """The pipeline hands DPNE the registered snapshot's file (DuckDB reads and tokenizes it; no pandas copy of
    the posts), and the n-grams are the ones the same run gives on the rows themselves, draw for draw."""
    request = write_corpus(home, tmp_path / "a", T=3)
    Ledger(home / "privrelease.duckdb").set_budget("posts", Budget(10.0, 1e-3))
    store = Home.open()
    bound, _ = pipeline.prepare(store, spec.load(request))
    rows = pipeline.load(store, bound)
    assert isinstance(rows, Snapshot) and Path(rows.path).is_file()
    by_file = planned_run(dpne, rows, bound.params, noise.generator(11))
    by_rows = planned_run(dpne, store.registry.load(bound.dataset), bound.params, noise.generator(11))
    pd.testing.assert_frame_equal(by_file.data, by_rows.data)
    assert by_file.headline == by_rows.headline and len(by_file.data) > 10
    dpne.check(rows, by_file, bound.params)


@pytest.mark.parametrize(
    "text,unit,message",
    [
        (None, "user:author", "--unit names column 'author', which the file lacks"),
        ("user,text\n", "user:user", "has a header but no rows"),
        (b"user,text\n1,caf\xe9 \xff\xfe\n", "user:user", "not UTF-8 encoded"),
        ("user,text\n1,hello\n2,a\x00b\n", "user:user", "column 'text': 1 values holding NUL or control characters"),
        ("user,text,text\n1,a,b\n", "user:user", "the CSV header repeats column names ['text']"),
    ],
    ids=["no-user-column", "empty-corpus", "not-utf8", "nul-byte", "duplicate-header"],
)
def test_bad_corpus_is_refused_at_registration(home, tmp_path, text, unit, message):
    from privrelease.core.errors import IngestError

    with pytest.raises(IngestError) as info:
        register(home, phrase_corpus(50) if text is None else text, "posts", unit, "dp")
    assert message in str(info.value)
    assert not (home / "datasets" / "posts").exists() or not list((home / "datasets" / "posts").iterdir())


def test_user_column_in_a_request_is_refused(home, tmp_path, capsys):
    spec = write_corpus(home, tmp_path / "u", user_column="text")
    code, _, err = cli(capsys, "release", str(spec))
    assert code == 2 and "user_column: Extra inputs are not permitted" in err


def test_a_ten_megabyte_post_is_capped_not_fatal(prefect_server, home, tmp_path, capsys, test_mode):
    frame = phrase_corpus(1200)
    huge = " ".join(f"tok{i % 200_000}" for i in range(1_250_000))  # about 10 MB, one user
    lines = frame.to_csv(index=False) + f'77777,"{huge}"\n'
    assert len(huge) > 10_000_000
    spec = write_corpus(home, tmp_path / "big", lines, T=3, seed=5)
    Ledger(home / "privrelease.duckdb").set_budget("posts", Budget(10, 1e-5))
    code, out, err = cli(capsys, "release", str(spec))
    assert code == 0, err
    table = (
        duckdb.connect()
        .execute("SELECT * FROM read_parquet(?)", [str(Path(out.split("folder ")[1].split()[0]) / "ngrams.parquet")])
        .df()
    )
    assert not table["ngram"].str.contains("tok").any()  # the big user's words stay private
