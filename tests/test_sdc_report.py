"""The SDC report's two versions through the release pipeline (run directly, no Prefect): the
external one published with the release is what its released table alone gives; the internal one
lies under the home, owner-only, and nothing of it reaches the release folder."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from core import pipeline, sdc_measures, sdc_report
from core.demo import census
from core.spec import parse
from tests.helpers import register
from tests.test_swapping import binormal

RA = {"name": "ra", "params": {"qi": ["age", "sex", "race", "education"], "sensitive": "occupation"}}
MEWS = {"name": "mews", "params": {"swap_set": ["x", "y"], "widths": 0.5, "others": "eds", "k": 5}}


def _release(home: Path, frame: pd.DataFrame, mechanism: dict) -> tuple[Path, Path]:
    register(home, frame, "ds", "record", "sdc")
    summary = pipeline.release(pipeline.Store(home), parse({"release_id": "r1", "dataset": "ds", "mechanism": mechanism,
                                                            "seed": 5}))  # fmt: skip
    return Path(summary["folder"]), sdc_report.folder(home, "ds", "r1")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("frame,mechanism", [(lambda: census(800), RA), (lambda: binormal(600), MEWS)], ids=["ra", "mews"])
def test_external_report_is_the_released_tables_and_internal_stays_home(home, test_mode, frame, mechanism):
    original = frame()
    folder, internal = _release(home, original, mechanism)
    released = duckdb.connect().execute("SELECT * FROM read_parquet(?)", [str(folder / "data.parquet")]).df()
    manifest = json.loads((folder / "manifest.json").read_text())
    report = (folder / "report.md").read_text()
    params = pipeline.mechanisms.get(mechanism["name"]).Params.model_validate(mechanism["params"])
    role = sdc_report.roles(params, manifest["privacy"], original)
    # the published figures are a function of the published table: recomputed from data.parquet alone
    assert manifest["sdc_report"] == json.loads(json.dumps(sdc_report.external(released, role)))
    assert sdc_report.external_section(manifest["sdc_report"]) in report
    assert "sdc_cell_sizes.png" in manifest["files"] and (folder / "sdc_cell_sizes.png").is_file()
    # the internal report: under the home, outside releases/, readable by its owner only
    assert internal.is_relative_to(home / "sdc-reports") and not internal.is_relative_to(home / "releases")
    assert sorted(p.name for p in internal.iterdir()) == ["internal.json", "internal.md", "records.parquet",
                                                          "sdc_risk_before_after.png"]  # fmt: skip
    assert all(_mode(p) == 0o600 for p in internal.iterdir())
    assert _mode(internal) == _mode(internal.parent) == _mode(home / "sdc-reports") == 0o700
    figures = json.loads((internal / "internal.json").read_text())
    con = duckdb.connect()
    con.register("t", original)
    assert figures["before"] == json.loads(json.dumps(sdc_measures.disclosure(con, "t", role.keys, role.sensitive)))
    assert {k: v for k, v in manifest["sdc_report"].items() if k not in ("keys_from", "keys", "sensitive")} == figures["after"]
    # the per-record risks (pandas, row by row) agree with the set-wise figures (DuckDB)
    records = duckdb.connect().execute("SELECT * FROM read_parquet(?)", [str(internal / "records.parquet")]).df()
    assert list(records["row"]) == list(range(len(original)))
    for when in ("before", "after"):
        side = "original" if when == "before" else "released"
        assert records[f"risk_{side}"].sum() == pytest.approx(figures[when]["expected_reidentifications"])
        assert (records[f"fk_{side}"] < 3).sum() == figures[when]["records_f_below_3"]
    assert (records["fk_original"] == original.groupby(role.keys)[role.keys[0]].transform("size")).all()
    # nothing that compares with the input is published: not the internal report's words or figures
    published = report + json.dumps(manifest)
    text = (internal / "internal.md").read_text()
    assert "For the data steward only" in text and "For the data steward only" not in published
    pmse = f"{figures['pmse']['pmse']:.3g}"
    assert f"pMSE = {pmse}" in text and "pMSE = " not in published and "il1s" not in published.lower().replace(
        "information loss il1s", "")  # fmt: skip
    assert sdc_report.NOTES["swap_set" if mechanism["name"] == "mews" else "qi"] in report
    if mechanism["name"] == "mews":
        assert figures["linkage"]["perturbed_records"] > 0 and 0 <= figures["linkage"]["linkage_rate"] < 1
        assert figures["il1s"] > 0 and figures["pmse"]["ratio"] > 0


def test_a_dp_release_has_no_sdc_report(home, test_mode):
    from core.accounting import Budget
    from core.ledger import Ledger
    from tests.test_golden import CASES

    make, unit, purpose, mechanism = CASES["outliers-count"]
    register(home, make(), "ds", unit, purpose)
    Ledger(home / "privrelease.duckdb").set_budget("ds", Budget(10.0, 1e-3))
    summary = pipeline.release(pipeline.Store(home), parse({"release_id": "r1", "dataset": "ds", "mechanism": mechanism,
                                                            "seed": 5}))  # fmt: skip
    folder = Path(summary["folder"])
    assert "sdc_report" not in json.loads((folder / "manifest.json").read_text())
    assert sdc_report.SECTION not in (folder / "report.md").read_text() and not (home / "sdc-reports").exists()
