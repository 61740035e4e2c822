"""The n-gram release (DPNE) through the release flow and the CLI, under Prefect's test harness."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
import yaml

from core.accounting import Budget
from core.ledger import PUBLISHED, RESERVED, Ledger
from tests.test_dpne import phrase_corpus
from tests.test_release_flow import cli

DPNE = {"name": "dpne", "params": {"user_column": "user", "text_column": "text", "epsilon": 4.0,
                                   "delta": 1e-7, "T": 5, "delta0": 20, "tokenizer": "words"}}  # fmt: skip


def write_corpus(folder: Path, text: str | bytes | None = None, fmt: str = "csv", **params) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / f"corpus.{fmt}"
    if text is None:
        frame = phrase_corpus(1500)
        if fmt == "jsonl":
            source.write_text(frame.to_json(orient="records", lines=True))
        else:
            frame.to_csv(source, index=False)
    else:
        source.write_bytes(text if isinstance(text, bytes) else text.encode())
    mechanism = {"name": "dpne", "params": {**DPNE["params"], **params}}
    spec = {"dataset": {"id": "posts", "source": source.name, "format": fmt}, "mechanism": mechanism}
    (folder / "spec.yaml").write_text(yaml.safe_dump(spec))
    return folder / "spec.yaml"


def test_dpne_release_charges_then_publishes(prefect_server, home, tmp_path, capsys):
    spec = write_corpus(tmp_path / "a", fmt="jsonl", publish_weights=True)
    code, _, err = cli(capsys, "release", str(spec))
    assert code == 2 and "no privacy budget" in err and "privrelease ledger set-budget posts" in err
    assert not (home / "releases" / "posts").exists()
    assert cli(capsys, "ledger", "set-budget", "posts", "--epsilon", "6", "--delta", "1e-6")[0] == 0
    code, out, err = cli(capsys, "release", str(spec))
    assert code == 0, err
    folder = Path(out.split("folder ")[1].split()[0])
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "ngrams.parquet", "ngrams_by_length.png", "report.md"]
    table = duckdb.connect().execute("SELECT * FROM read_parquet(?)", [str(folder / "ngrams.parquet")]).df()
    assert list(table.columns) == ["ngram", "n", "noisy_weight"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["counts_by_length"] == {str(k): int((table["n"] == k).sum()) for k in range(1, 6)}
    assert "the cat sat on the" in set(table["ngram"])
    assert manifest["privacy"]["adjacency"].startswith("add or remove one user")
    reserved, published = [e for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id]
    assert (reserved.status, reserved.epsilon, reserved.delta) == (RESERVED, 4.0, 1e-7)
    detail = json.loads(reserved.detail)
    assert detail["sigma_star"] == pytest.approx(1.327904, abs=1e-6) and len(detail["sigmas"]) == 5 and detail["rho_1"] > 0
    assert published.status == PUBLISHED
    assert json.loads(published.detail)["counts_by_length"] == manifest["counts_by_length"]
    report = (folder / "report.md").read_text()
    assert "sigma* = 1.327904" in report and "simulated" not in json.dumps(manifest)

    code, _, err = cli(capsys, "release", str(spec))  # a second epsilon = 4 would exceed the cap of 6
    assert code == 2 and "has only epsilon=2" in err.strip().splitlines()[-1]
    assert len(list((home / "releases" / "posts").iterdir())) == 1
    assert len([e for e in Ledger(home / "privrelease.duckdb").entries() if e.status == RESERVED]) == 1


@pytest.mark.parametrize(
    "text,params,message",
    [
        (None, {"user_column": "author"}, "expect_column_to_exist(author)"),
        ("user,text\n", {}, "the table has 0 rows"),
        (b"user,text\n1,caf\xe9 \xff\xfe\n", {}, "not UTF-8 encoded"),
    ],
    ids=["no-user-column", "empty-corpus", "not-utf8"],
)
def test_bad_corpus_is_refused_before_the_charge(prefect_server, home, tmp_path, capsys, text, params, message):
    Ledger(home / "privrelease.duckdb").set_budget("posts", Budget(10, 1e-5))
    spec = write_corpus(tmp_path / "bad", text, **params)
    code, _, err = cli(capsys, "release", str(spec))
    assert code == 2 and message in err.strip().splitlines()[-1]
    assert [e.status for e in Ledger(home / "privrelease.duckdb").entries()] == ["cap"]
    assert not (home / "releases" / "posts").exists()


def test_a_ten_megabyte_post_is_capped_not_fatal(prefect_server, home, tmp_path, capsys, test_mode):
    frame = phrase_corpus(1200)
    huge = " ".join(f"tok{i % 200_000}" for i in range(1_250_000))  # about 10 MB, one user
    lines = frame.to_csv(index=False) + f'77777,"{huge}"\n'
    assert len(huge) > 10_000_000
    spec = write_corpus(tmp_path / "big", lines, T=3)
    doc = yaml.safe_load(spec.read_text())
    spec.write_text(yaml.safe_dump({**doc, "seed": 5}))
    Ledger(home / "privrelease.duckdb").set_budget("posts", Budget(10, 1e-5))
    code, out, err = cli(capsys, "release", str(spec))
    assert code == 0, err
    table = duckdb.connect().execute("SELECT * FROM read_parquet(?)", [str(Path(out.split("folder ")[1].split()[0]) / "ngrams.parquet")]).df()
    assert not table["ngram"].str.contains("tok").any()  # the big user's words stay private
