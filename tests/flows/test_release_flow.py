"""The release flow end to end under Prefect's test harness, through the CLI's entry point."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from privrelease.cli.main import main
from privrelease.core import noise
from privrelease.core.datasets.demo import SUITES, census
from privrelease.core.ledger.ledger import FAILED, POLICY, PUBLISHED, REGISTERED, RESERVED, Ledger
from privrelease.core.mechanisms import ra
from tests.support.helpers import QI, planned_run, prepared, register, write_request


def cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def reserved(home: Path) -> list:
    db = home / "privrelease.duckdb"
    return [e for e in Ledger(db).entries() if e.status == RESERVED] if db.exists() else []


def test_release_end_to_end(prefect_server, home, test_mode, tmp_path, capsys):
    register(home, census(1500), suite=str(SUITES / "census_demo.json"))
    spec = write_request(tmp_path / "case", seed=42)
    code, out, err = cli(capsys, "release", str(spec))
    assert code == 0, err
    folder = Path(out.split("folder ")[1].split()[0])
    assert sorted(p.name for p in folder.iterdir()) == [
        "data.csv",
        "data.parquet",
        "manifest.json",
        "ra_columns.png",
        "report.md",
        "sdc_cell_sizes.png",
    ]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert sorted(manifest["files"]) == ["data.csv", "data.parquet", "ra_columns.png", "report.md", "sdc_cell_sizes.png"]
    original = pd.read_csv(home / "data" / "census.csv")
    expected = planned_run(ra, prepared(home, original, 42), ra.Params(qi=QI, sensitive="occupation"), noise.generator(42))
    assert manifest["privacy"]["pa"] == expected.privacy["pa"]
    assert manifest["test_mode"] is True and "seed" not in json.dumps(manifest)
    released = pd.read_csv(folder / "data.csv")
    pd.testing.assert_frame_equal(released, expected.data, check_dtype=False)
    parquet = duckdb.connect().execute("SELECT * FROM read_parquet(?)", [str(folder / "data.parquet")]).df()
    pd.testing.assert_frame_equal(parquet, released, check_dtype=False)
    registered, policy, *entries = Ledger(home / "privrelease.duckdb").entries()
    assert registered.status == REGISTERED
    assert policy.status == POLICY and [e.status for e in entries] == [RESERVED, PUBLISHED]
    assert json.loads(entries[0].params)["policy"] == policy.seq  # the charge names the policy it was checked against
    assert entries[0].epsilon == entries[0].delta == 0 and entries[0].kind == "sdc"
    assert json.loads(entries[1].detail) == {"pa": expected.privacy["pa"], "pa_max": expected.privacy["pa_max"], "variant": "ra"}
    code, out, _ = cli(capsys, "ledger", "history", "--verbose")
    assert code == 0 and f"pa={expected.privacy['pa']}" in out
    assert manifest["ledger"] == {"seq": entries[0].seq, "hash": entries[0].hash}
    assert manifest["input"] == {**register_facts(home), "version": 1}
    assert manifest["privacy"]["kind"] == "sdc" and manifest["privacy"]["epsilon"] is None
    assert "Pa = " in (folder / "report.md").read_text()
    assert cli(capsys, "ledger", "verify")[0] == 0


def register_facts(home: Path) -> dict:
    from privrelease.core.datasets.registry import Registry

    return Registry(home).get("census").public()


def test_retry_with_same_release_id_is_charged_once(prefect_server, home, tmp_path, capsys):
    register(home, census(800))
    spec = write_request(tmp_path / "case", release_id="census-2026-q4")
    assert cli(capsys, "release", str(spec))[0] == 0
    code, out, _ = cli(capsys, "release", str(spec))
    assert code == 0 and "already published" in out
    assert len(reserved(home)) == 1
    other = write_request(tmp_path / "other", release_id="census-2026-q4", mechanism__params__k=2)
    code, _, err = cli(capsys, "release", str(other))
    assert code == 2 and "already used for a different release" in err
    assert len(reserved(home)) == 1


def test_enhanced_ra_with_hostile_column_name(prefect_server, home, test_mode, tmp_path, capsys):
    hostile = 'zip"; DROP TABLE ledger; --'
    frame = census(500).rename(columns={"native-country": hostile})
    qi = [hostile if c == "native-country" else c for c in QI]
    register(home, frame)
    spec = write_request(tmp_path / "case", seed=1, mechanism__params={"qi": qi, "sensitive": "occupation", "k": 3})
    code, out, err = cli(capsys, "release", str(spec))
    assert code == 0, err
    folder = Path(out.split("folder ")[1].split()[0])
    released = pd.read_csv(folder / "data.csv")
    assert list(released.columns) == list(frame.columns)
    assert ((released[qi] != prepared(home, frame, 1)[qi]).sum(axis=1) <= 3).all()  # rows in the shuffled order
    assert json.loads((folder / "manifest.json").read_text())["privacy"]["variant"] == "enhanced_ra"


def _bad_requests() -> list:
    return [
        pytest.param(
            {"mechanism__params__qi": [*QI[:-1], "postcode"]}, "dataset 'census' has no column 'postcode'", id="missing-column"
        ),
        pytest.param({"mechanism__name": "laplace"}, "unknown mechanism 'laplace'", id="unknown-mechanism"),
        pytest.param({"mechanism__params__k": 10}, "k must be between 1 and the number of QI columns (9)", id="k-too-large"),
        pytest.param({"mechanism__params__k": 0}, "k must be between 1", id="k-zero"),
        pytest.param({"mechanism__params__p": [0.1] * 9}, "p must sum to 1", id="p-sum"),
        pytest.param(
            {"mechanism__params__sensitive": 'x"; DROP TABLE ledger; --'},
            "has no column 'x\"; DROP TABLE ledger; --'",
            id="quotes-and-semicolons",
        ),
        pytest.param({"seed": 3}, "only in test mode", id="seed-outside-test-mode"),
        pytest.param({"dataset": "nope"}, "dataset 'nope' is not registered", id="unregistered-dataset"),
        pytest.param(
            {"dataset": {"id": "census", "source": "/etc/passwd", "format": "csv"}},
            "dataset is the id of a registered dataset, not a source",
            id="source-in-request",
        ),
        pytest.param({"home": "/tmp/elsewhere"}, "home: Extra inputs are not permitted", id="home-in-request"),
        pytest.param(
            {
                "mechanism": {
                    "name": "outliers",
                    "params": {
                        "query": "count",
                        "k": 2,
                        "r": 0.5,
                        "epsilon": 1,
                        "delta": 1e-6,
                        "standardize": False,
                        "columns": ["age"],
                    },
                }
            },
            "registered for statistical disclosure control (RA, swapping); mechanism 'outliers' gives "
            "differentially private releases",
            id="dp-mechanism-on-sdc-dataset",
        ),
        pytest.param(
            {"mechanism__params__qi": ["age", "hours-per-week"], "mechanism__params__sensitive": "note"},
            "column 'note' of dataset 'census' may hold empty values",
            id="nullable-column",
        ),
    ]


@pytest.mark.parametrize("overrides,message", _bad_requests())
def test_bad_request_is_refused_before_anything_is_charged(prefect_server, home, tmp_path, capsys, overrides, message):
    frame = census(300)
    frame["note"] = ["x", None] * 150
    register(home, frame)
    spec = write_request(tmp_path / "case", **overrides)
    code, out, err = cli(capsys, "release", str(spec))
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert message in last and last.startswith("error: ") and err.count("error:") == 1
    assert reserved(home) == []
    assert not (home / "releases").exists()


def test_failure_after_charge_keeps_the_charge_and_publishes_nothing(prefect_server, home, tmp_path, capsys):
    register(home, census(300))
    spec = write_request(tmp_path / "case", release_id="taken")
    squatter = home / "releases" / "census" / "taken"
    squatter.mkdir(parents=True)
    code, _, err = cli(capsys, "release", str(spec))
    assert code == 2 and "already exists" in err
    assert [e.status for e in Ledger(home / "privrelease.duckdb").entries()] == [REGISTERED, POLICY, RESERVED, FAILED]
    assert list(squatter.iterdir()) == [] and [p.name for p in squatter.parent.iterdir()] == ["taken"]
    squatter.rmdir()
    code, _, err = cli(capsys, "release", str(spec))  # a retry would draw again under the same charge
    assert code == 2 and "was charged before and did not publish (its ledger status is failed)" in err
    assert [e.status for e in Ledger(home / "privrelease.duckdb").entries()] == [REGISTERED, POLICY, RESERVED, FAILED]
    assert not squatter.exists()


def test_flow_itself_rejects_a_bad_request(prefect_server, home, tmp_path):
    from privrelease.core.errors import SpecError
    from privrelease.core.release.spec import ReleaseRequest
    from privrelease.flows.release import release

    register(home, census(300))
    request = ReleaseRequest.model_validate(
        {"dataset": "census", "mechanism": {"name": "ra", "params": {"qi": [*QI[:-1], "postcode"], "sensitive": "occupation"}}}
    )
    with pytest.raises(SpecError, match="no column 'postcode'"):
        release(request=request)
    assert reserved(home) == []


def test_a_changed_snapshot_is_refused_without_detail(prefect_server, home, tmp_path, capsys):
    register(home, census(300))
    (snapshot,) = (home / "datasets" / "census").glob("*.parquet")
    duckdb.connect().execute(f"COPY (SELECT * FROM read_parquet('{snapshot}') LIMIT 299) TO '{snapshot}' (FORMAT parquet)")
    code, _, err = cli(capsys, "release", str(write_request(tmp_path / "case")))
    assert code == 2 and err.strip().splitlines()[-1] == (
        "error: dataset 'census' changed since registration; ask the data steward to check it."
    )
    assert reserved(home) == []


def test_a_snapshot_this_worker_cannot_reach_is_refused_as_such(prefect_server, home, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PRIVRELEASE_SNAPSHOT_STORE", str(tmp_path / "shared"))
    register(home, census(300))
    monkeypatch.setenv("PRIVRELEASE_SNAPSHOT_STORE", str(tmp_path / "elsewhere"))  # a worker not given the mount
    code, _, err = cli(capsys, "release", str(write_request(tmp_path / "case")))
    assert code == 2 and err.strip().splitlines()[-1] == (
        "error: dataset 'census' cannot be read on this worker: its snapshot census/v1.parquet does not exist in the "
        f"snapshot store {tmp_path / 'elsewhere'} ($PRIVRELEASE_SNAPSHOT_STORE), a folder missing on this worker. It "
        f"was registered from host {socket.gethostname()!r}; set $PRIVRELEASE_SNAPSHOT_STORE on this worker to the "
        "store that host wrote to (a folder every worker mounts). Nothing was charged."
    )
    assert [e.status for e in Ledger(home / "privrelease.duckdb").entries()] == [REGISTERED, POLICY]  # nothing charged


CANARY = "CANARY-5f1e0b7c-raw-row"


def test_canary_never_reaches_prefect(prefect_server, home, test_mode, tmp_path, capsys):
    import prefect.settings
    from prefect.logging.handlers import APILogHandler

    frame = census(400)
    frame.loc[3, "native-country"] = CANARY
    frame["note"] = "plain"
    frame.loc[17, "note"] = CANARY + "-note"
    register(home, frame, "canary-ds")
    spec = write_request(tmp_path / "ok", "canary-ds", seed=9)
    code, out, err = cli(capsys, "release", str(spec))
    assert code == 0, err
    folder = Path(out.split("folder ")[1].split()[0])
    assert CANARY in (folder / "data.csv").read_text()  # control: the canary was really in the data
    spec = write_request(tmp_path / "bad", "canary-ds", seed=9, mechanism__params__sensitive="nope")
    code, out, err = cli(capsys, "release", str(spec))
    assert code == 2 and "no column 'nope'" in err
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


def test_typed_request(prefect_server, home, tmp_path):
    from privrelease.core.release.spec import ReleaseRequest
    from privrelease.flows.release import release

    register(home, census(400))
    request = ReleaseRequest.model_validate(
        {"dataset": "census", "mechanism": {"name": "ra", "params": {"qi": QI, "sensitive": "occupation"}}}
    )
    summary = release(request=request)
    assert Path(summary["folder"]).parent == home / "releases" / "census"
    assert len(reserved(home)) == 1
