"""Ingestion into DuckDB and validation with Great Expectations, without Prefect."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
import pytest

from core import ingest, validate
from core.db import quote_ident
from core.errors import IngestError, SpecError, ValidationFailed

HOSTILE = 'we"ird; DROP TABLE ledger; --'


def test_quote_ident_survives_hostile_names(tmp_path: Path):
    con = duckdb.connect(str(tmp_path / "x.duckdb"))
    con.execute(f"CREATE TABLE t ({quote_ident(HOSTILE)} INTEGER)")
    con.execute(f"INSERT INTO t VALUES (1)")
    assert con.execute(f"SELECT {quote_ident(HOSTILE)} FROM t").fetchall() == [(1,)]
    assert [r[0] for r in con.execute("SHOW TABLES").fetchall()] == ["t"]


def test_ingest_is_content_addressed(tmp_path: Path):
    db, src = tmp_path / "db.duckdb", tmp_path / "in.csv"
    pd.DataFrame({HOSTILE: [1, 2, 3], "b": ["x", "y", "z"]}).to_csv(src, index=False)
    first = ingest.ingest(db, "ds", src, "csv")
    again = ingest.ingest(db, "ds", src, "csv")
    assert first == again and first.rows == 3 and list(first.columns) == [HOSTILE, "b"]
    assert first.columns[HOSTILE] == "BIGINT"
    frame = ingest.load(db, first)
    assert list(frame[HOSTILE]) == [1, 2, 3]
    src.write_text(src.read_text() + "4,w\n")
    changed = ingest.ingest(db, "ds", src, "csv")
    assert changed.table != first.table and changed.rows == 4


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_other_formats(tmp_path: Path, fmt: str):
    src = tmp_path / f"in.{fmt}"
    frame = pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})
    con = duckdb.connect()
    if fmt == "parquet":
        con.from_df(frame).write_parquet(str(src))
    else:
        src.write_text(frame.to_json(orient="records", lines=True))
    got = ingest.ingest(tmp_path / "db.duckdb", "ds", src, fmt)
    assert got.rows == 2 and list(got.columns) == ["a", "b"]


@pytest.mark.parametrize(
    "content,fmt,message",
    [
        ("a,b,c\n1,2,3\n4,SECRET5\n7,8,9\n", "csv", "not a well-formed CSV"),
        ("a,b\n1,\"unterminated\n", "csv", "not a well-formed CSV"),
        ("", "csv", "is empty"),
        ("a,b\n1,2\n", "parquet", "not a readable Parquet"),
        ('{"a": 1}\n{"a": SECRET\n', "jsonl", "not valid JSON lines"),
    ],
    ids=["ragged-csv", "unbalanced-quote", "empty-file", "csv-as-parquet", "broken-jsonl"],
)
def test_unreadable_files_get_a_clear_error_without_content(tmp_path: Path, content, fmt, message):
    src = tmp_path / "in.data"
    src.write_text(content)
    with pytest.raises(IngestError, match=message) as info:
        ingest.ingest(tmp_path / "db.duckdb", "ds", src, fmt)
    assert "SECRET" not in str(info.value)


def test_missing_file(tmp_path: Path):
    with pytest.raises(IngestError, match="is not a file"):
        ingest.ingest(tmp_path / "db.duckdb", "ds", tmp_path / "nope.csv", "csv")


def test_needs_catch_missing_null_and_empty():
    needs = validate.Needs(columns=("a", "b"), numeric=("a",))
    frame = pd.DataFrame({"a": ["1", None, "SECRETVALUE"], "c": [1, 2, 3]})
    with pytest.raises(ValidationFailed) as info:
        validate.validate(frame, "needs", needs.expectations())
    text = str(info.value)
    assert "expect_column_values_to_not_be_null(a): 1 unexpected rows" in text
    assert "expect_column_to_exist(b)" in text
    assert "expect_column_values_to_be_in_type_list(a): column has type str" in text
    assert "SECRETVALUE" not in text and "Nothing was charged" in text
    with pytest.raises(ValidationFailed, match="the table has 0 rows"):
        validate.validate(frame.iloc[:0], "needs", validate.Needs(columns=("c",)).expectations())
    report = validate.validate(pd.DataFrame({"a": [1.0], "b": ["x"]}), "needs", needs.expectations())
    assert report.success and report.evaluated == len(needs.expectations())


def test_nan_counts_as_null():
    frame = pd.DataFrame({"a": [1.0, float("nan"), 3.0]})
    with pytest.raises(ValidationFailed, match=r"not_be_null\(a\): 1 unexpected"):
        validate.validate(frame, "s", validate.Needs(columns=("a",)).expectations())


def test_suite_files_and_inline(tmp_path: Path):
    schemas = Path(__file__).resolve().parent.parent / "schemas"
    name, exps = validate.load_suite("census_demo.json", schemas, tmp_path)
    assert name == "census_demo" and len(exps) == 8
    name, exps = validate.load_suite([{"type": "expect_column_to_exist", "kwargs": {"column": "a"}}], schemas, tmp_path)
    assert name == "inline" and exps[0]["kwargs"] == {"column": "a"}
    with pytest.raises(SpecError, match="was not found"):
        validate.load_suite("nope.json", schemas, tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        validate.load_suite("bad.json", schemas, tmp_path)
    with pytest.raises(SpecError, match="expect_nonsense not found"):
        validate.validate(pd.DataFrame({"a": [1]}), "inline", [{"type": "expect_nonsense", "kwargs": {}}])
    with pytest.raises(SpecError, match="expect_column_values_to_not_be_null"):
        validate.validate(pd.DataFrame({"a": [1]}), "inline", [{"type": "expect_column_values_to_not_be_null", "kwargs": {}}])
