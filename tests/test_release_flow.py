"""The release flow end to end under Prefect's test harness, through the CLI's entry point."""

from __future__ import annotations

import json
import time
from pathlib import Path

import duckdb
import pandas as pd
import pytest
import yaml

from core import noise
from core.demo import census
from core.accounting import Budget
from core.ledger import FAILED, PUBLISHED, RESERVED, Ledger
from core.mechanisms import ra
from flows.cli import main

QI = ["age", "workclass", "education", "marital-status", "relationship", "race", "sex", "native-country", "salary"]


def write_case(folder: Path, frame: pd.DataFrame | str | None = None, **spec_overrides) -> Path:
    """A CSV (a frame, or raw text) and a release spec next to it; returns the spec's path."""
    folder.mkdir(parents=True, exist_ok=True)
    if frame is None:
        frame = census(800)
    if isinstance(frame, str):
        (folder / "in.csv").write_text(frame)
    else:
        frame.to_csv(folder / "in.csv", index=False)
    spec = {
        "dataset": {"id": "census", "source": "in.csv", "format": "csv"},
        "mechanism": {"name": "ra", "params": {"qi": QI, "sensitive": "occupation"}},
    }
    for key, value in spec_overrides.items():
        node = spec
        *path, last = key.split("__")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    (folder / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return folder / "spec.yaml"


def cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def reserved(home: Path) -> list:
    db = home / "privrelease.duckdb"
    return [e for e in Ledger(db).entries() if e.status == RESERVED] if db.exists() else []


def test_release_end_to_end(prefect_server, home, test_mode, tmp_path, capsys):
    spec = write_case(tmp_path / "case", census(1500), seed=42, dataset__suite="census_demo.json")
    code, out, err = cli(capsys, "release", str(spec))
    assert code == 0, err
    folder = Path(out.split("folder ")[1].split()[0])
    assert sorted(p.name for p in folder.iterdir()) == [
        "data.csv", "data.parquet", "manifest.json", "ra_columns.png", "report.md"
    ]
    manifest = json.loads((folder / "manifest.json").read_text())
    original = pd.read_csv(tmp_path / "case" / "in.csv")
    expected = ra.run(original, ra.Params(qi=QI, sensitive="occupation"), noise.generator(42))
    assert manifest["privacy"]["pa"] == expected.privacy["pa"]
    assert manifest["test_mode"] is True and "seed" not in json.dumps(manifest)
    released = pd.read_csv(folder / "data.csv")
    pd.testing.assert_frame_equal(released, expected.data, check_dtype=False)
    parquet = duckdb.connect().execute("SELECT * FROM read_parquet(?)", [str(folder / "data.parquet")]).df()
    pd.testing.assert_frame_equal(parquet, released, check_dtype=False)
    entries = Ledger(home / "privrelease.duckdb").entries()
    assert [e.status for e in entries] == [RESERVED, PUBLISHED]
    assert entries[0].epsilon == entries[0].delta == 0
    assert json.loads(entries[1].detail) == {"pa": expected.privacy["pa"], "pa_max": expected.privacy["pa_max"], "variant": "ra"}
    code, out, _ = cli(capsys, "ledger", "history")
    assert code == 0 and f"pa={expected.privacy['pa']}" in out
    assert manifest["ledger"] == {"seq": entries[0].seq, "hash": entries[0].hash}
    assert manifest["validation"]["suite"] == "census_demo" and manifest["validation"]["success"]
    assert "Pa = " in (folder / "report.md").read_text()
    assert cli(capsys, "ledger", "verify")[0] == 0


def test_retry_with_same_release_id_is_charged_once(prefect_server, home, tmp_path, capsys):
    spec = write_case(tmp_path / "case", release_id="census-2026-q4")
    assert cli(capsys, "release", str(spec))[0] == 0
    code, out, _ = cli(capsys, "release", str(spec))
    assert code == 0 and "already published" in out
    assert len(reserved(home)) == 1
    other = write_case(tmp_path / "other", release_id="census-2026-q4", mechanism__params__k=2)
    code, _, err = cli(capsys, "release", str(other))
    assert code == 2 and "already used for a different release" in err
    assert len(reserved(home)) == 1


def test_enhanced_ra_with_hostile_column_name(prefect_server, home, test_mode, tmp_path, capsys):
    hostile = 'zip"; DROP TABLE ledger; --'
    frame = census(500).rename(columns={"native-country": hostile})
    qi = [hostile if c == "native-country" else c for c in QI]
    spec = write_case(tmp_path / "case", frame, seed=1, mechanism__params={"qi": qi, "sensitive": "occupation", "k": 3})
    code, out, err = cli(capsys, "release", str(spec))
    assert code == 0, err
    folder = Path(out.split("folder ")[1].split()[0])
    released = pd.read_csv(folder / "data.csv")
    assert list(released.columns) == list(frame.columns)
    assert ((released[qi] != frame[qi]).sum(axis=1) <= 3).all()
    assert json.loads((folder / "manifest.json").read_text())["privacy"]["variant"] == "enhanced_ra"


def _bad_cases() -> list:
    good = census(300)
    nan_qi = good.astype({"age": float})
    nan_qi.loc[5, "age"] = float("nan")
    wrong_type = good.astype({"age": str})
    wrong_type.loc[3, "age"] = "forty"
    age_int = [{"type": "expect_column_values_to_be_in_type_list", "kwargs": {"column": "age", "type_list": ["int64"]}}]
    return [
        pytest.param(good.to_csv(index=False).replace("\nGOOD", "") + "1,2\n", {}, "not a well-formed CSV", id="malformed-csv"),
        pytest.param(good, {"mechanism__params__qi": [*QI[:-1], "postcode"]}, "expect_column_to_exist(postcode)", id="missing-column"),
        pytest.param(wrong_type, {"dataset__suite": age_int}, "in_type_list(age): column has type str", id="wrong-type"),
        pytest.param("", {}, "is empty", id="empty-file"),
        pytest.param(nan_qi, {}, "not_be_null(age): 1 unexpected rows", id="nan-in-qi"),
        pytest.param(good, {"mechanism__name": "laplace"}, "unknown mechanism 'laplace'", id="unknown-mechanism"),
        pytest.param(good, {"mechanism__params__k": 10}, "k must be between 1 and the number of QI columns (9)", id="k-too-large"),
        pytest.param(good, {"mechanism__params__k": 0}, "k must be between 1", id="k-zero"),
        pytest.param(good, {"mechanism__params__p": [0.1] * 9}, "p must sum to 1", id="p-sum"),
        pytest.param(good, {"mechanism__params__sensitive": 'x"; DROP TABLE ledger; --'},
                     "expect_column_to_exist(x\"; DROP TABLE ledger; --)", id="quotes-and-semicolons"),
        pytest.param(good, {"seed": 3}, "only in test mode", id="seed-outside-test-mode"),
        pytest.param(good, {"dataset__format": "xlsx"}, "dataset.format", id="unknown-format"),
    ]


@pytest.mark.parametrize("frame,overrides,message", _bad_cases())
def test_bad_input_is_refused_before_anything_is_charged(prefect_server, home, tmp_path, capsys, frame, overrides, message):
    Ledger(home / "privrelease.duckdb").set_budget("census", Budget(1, 1e-6))
    spec = write_case(tmp_path / "case", frame, **overrides)
    code, out, err = cli(capsys, "release", str(spec))
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert message in last and last.startswith("error: ")
    assert reserved(home) == []
    assert not (home / "releases" / "census").exists()
    assert Ledger(home / "privrelease.duckdb").verify() == 1


def test_failure_after_charge_keeps_the_charge_and_publishes_nothing(prefect_server, home, tmp_path, capsys):
    spec = write_case(tmp_path / "case", release_id="taken")
    squatter = home / "releases" / "census" / "taken"
    squatter.mkdir(parents=True)
    code, _, err = cli(capsys, "release", str(spec))
    assert code == 2 and "already exists" in err
    assert [e.status for e in Ledger(home / "privrelease.duckdb").entries()] == [RESERVED, FAILED]
    assert list(squatter.iterdir()) == [] and [p.name for p in squatter.parent.iterdir()] == ["taken"]


def test_flow_itself_rejects_a_bad_spec(prefect_server, home, tmp_path):
    from core.errors import SpecError
    from flows.release import release

    spec = write_case(tmp_path / "case", mechanism__params__k=12)
    with pytest.raises(SpecError, match="k must be between"):
        release(spec_path=str(spec), home=str(home))
    assert reserved(home) == []


CANARY = "CANARY-5f1e0b7c-raw-row"


def test_canary_never_reaches_prefect(prefect_server, home, test_mode, tmp_path, capsys):
    import prefect.settings
    from prefect.logging.handlers import APILogHandler

    frame = census(400)
    frame.loc[3, "native-country"] = CANARY
    frame["note"] = "plain"
    frame.loc[17, "note"] = CANARY + "-note"
    spec = write_case(tmp_path / "ok", frame, seed=9, dataset__id="canary-ds")
    code, out, err = cli(capsys, "release", str(spec))
    assert code == 0, err
    folder = Path(out.split("folder ")[1].split()[0])
    assert CANARY in (folder / "data.csv").read_text()  # control: the canary was really in the data
    in_set = [{"type": "expect_column_values_to_be_in_set",
               "kwargs": {"column": "native-country", "value_set": ["United-States", "Mexico"]}}]  # fmt: skip
    spec = write_case(tmp_path / "bad", frame, seed=9, dataset__id="canary-ds", dataset__suite=in_set)
    code, out, err = cli(capsys, "release", str(spec))
    assert code == 2 and "expect_column_values_to_be_in_set(native-country)" in err
    assert CANARY not in out + err
    APILogHandler().flush()
    time.sleep(2.5)
    db_url = prefect.settings.PREFECT_SERVER_DATABASE_CONNECTION_URL.value()
    db_file = Path(db_url.split(":///", 1)[1])
    prefect_home = Path(prefect.settings.PREFECT_HOME.value())
    places = [p for p in db_file.parent.glob(db_file.name + "*")] + [p for p in prefect_home.rglob("*") if p.is_file()]
    blob = b"".join(p.read_bytes() for p in places)
    assert b"canary-ds" in blob  # control: the flow's log lines and parameters are in what we scan
    assert CANARY.encode() not in blob


def test_typed_request_and_its_errors(prefect_server, home, tmp_path):
    from core.errors import SpecError
    from core.spec import ReleaseRequest
    from flows.release import release

    (home / "in").mkdir()
    census(400).to_csv(home / "in" / "census.csv", index=False)
    request = ReleaseRequest.model_validate({
        "dataset": {"id": "census", "source": "in/census.csv", "format": "csv"},
        "mechanism": {"name": "ra", "params": {"qi": QI, "sensitive": "occupation"}},
    })  # fmt: skip
    summary = release(request=request, home=str(home))
    assert Path(summary["folder"]).parent == home / "releases" / "census"
    with pytest.raises(SpecError, match="either spec_path"):
        release(home=str(home))
    assert len(reserved(home)) == 1
