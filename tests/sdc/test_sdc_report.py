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

from privrelease.core.datasets.demo import census
from privrelease.core.datasets.registry import Registry
from privrelease.core.release import pipeline
from privrelease.core.release.home import Home
from privrelease.core.release.spec import parse
from privrelease.core.sdc import report as sdc_report
from privrelease.core.sdc import risk as sdc_risk
from tests.mechanisms.test_swapping import binormal
from tests.support.helpers import open_policy, register

RA = {"name": "ra", "params": {"qi": ["age", "sex", "race", "education"], "sensitive": "occupation"}}
MEWS = {"name": "mews", "params": {"swap_set": ["x", "y"], "widths": 0.5, "others": "eds", "k": 5}}


def _keys(mechanism: dict) -> tuple[list[str], tuple[str, ...]]:
    """The policy's key and sensitive columns: the request's own here (the report measures the policy's)."""
    p = mechanism["params"]
    return (list(p["qi"]), (p["sensitive"],)) if "qi" in p else (list(p["swap_set"]), ())


def _release(home: Path, frame: pd.DataFrame, mechanism: dict) -> tuple[Path, Path]:
    keys, sensitive = _keys(mechanism)
    numeric = tuple(k for k in keys if pd.api.types.is_numeric_dtype(frame[k]) and not pd.api.types.is_bool_dtype(frame[k]))
    register(home, frame, "ds", "record", "sdc", policy=open_policy(list(frame.columns), keys, numeric, sensitive))
    summary = pipeline.release(Home(home), parse({"release_id": "r1", "dataset": "ds", "mechanism": mechanism, "seed": 5}))
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
    module = pipeline.mechanisms.get(mechanism["name"])
    params = module.Params.model_validate(mechanism["params"])
    policy = Registry(home).get("ds").policy
    role = sdc_report.roles(mechanism["name"], policy, module.protects(params), manifest["privacy"], original, released)
    assert (sorted(role.keys), role.sensitive) == (sorted(_keys(mechanism)[0]), list(_keys(mechanism)[1]))
    # the published figures are a function of the published table: recomputed from data.parquet alone
    assert manifest["sdc_report"] == json.loads(json.dumps(sdc_report.external(released, role)))
    assert sdc_report.external_section(manifest["sdc_report"], mechanism["name"]) in report
    assert "sdc_cell_sizes.png" in manifest["files"] and (folder / "sdc_cell_sizes.png").is_file()
    # the internal report: under the home, outside releases/, readable by its owner only
    assert internal.is_relative_to(home / "sdc-reports") and not internal.is_relative_to(home / "releases")
    assert sorted(p.name for p in internal.iterdir()) == [
        "internal.json",
        "internal.md",
        "records.parquet",
        "sdc_risk_before_after.png",
    ]
    assert all(_mode(p) == 0o600 for p in internal.iterdir())
    assert _mode(internal) == _mode(internal.parent) == _mode(home / "sdc-reports") == 0o700
    figures = json.loads((internal / "internal.json").read_text())
    assert figures["before"] == json.loads(json.dumps(sdc_risk.disclosure(original, role.keys, role.sensitive)))
    public = ("keys_from", "keys", "sensitive", "weight", "cluster")
    assert {k: v for k, v in manifest["sdc_report"].items() if k not in public} == figures["after"]
    assert figures["thresholds_missed"] == []
    # the per-record risks agree with the table's figures; rows are named by their registered row
    records = duckdb.connect().execute("SELECT * FROM read_parquet(?)", [str(internal / "records.parquet")]).df()
    assert sorted(records["row"]) == list(range(len(original))) and list(records["row"]) != list(range(len(original)))
    records = records.sort_values("row").reset_index(drop=True)
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
    assert (
        f"pMSE = {pmse}" in text
        and "pMSE = " not in published
        and "il1s" not in published.lower().replace("information loss il1s", "")
    )
    assert sdc_report.NOTES[mechanism["name"]] in report
    if mechanism["name"] == "mews":
        assert figures["linkage"]["perturbed_records"] > 0 and 0 <= figures["linkage"]["linkage_rate"] < 1
        assert figures["il1s"] > 0 and figures["pmse"]["ratio"] > 0


def test_a_dp_release_has_no_sdc_report(home, test_mode):
    from privrelease.core.ledger.ledger import Ledger
    from privrelease.core.privacy.budget import Budget
    from tests.release.test_golden import CASES

    make, unit, purpose, mechanism = CASES["outliers-count"]
    register(home, make(), "ds", unit, purpose)
    Ledger(home / "privrelease.duckdb").set_budget("ds", Budget(10.0, 1e-3))
    summary = pipeline.release(Home(home), parse({"release_id": "r1", "dataset": "ds", "mechanism": mechanism, "seed": 5}))
    folder = Path(summary["folder"])
    assert "sdc_report" not in json.loads((folder / "manifest.json").read_text())
    assert sdc_report.SECTION not in (folder / "report.md").read_text() and not (home / "sdc-reports").exists()


def test_boolean_keys_do_not_stop_a_release(home, test_mode):
    """A boolean QI column is a category (no distance or mean): the release publishes with both reports
    (IL1s on it raised after the charge before)."""
    frame = census(400)
    frame["smoker"] = frame["age"] % 3 == 0
    frame["bonus"] = (frame["age"] * 10.0).where(frame.index == 0)  # one value: a mean, but none once it moves
    folder, internal = _release(
        home, frame, {"name": "ra", "params": {"qi": ["age", "smoker", "sex"], "sensitive": "occupation"}}
    )
    figures = json.loads((internal / "internal.json").read_text())
    assert "bonus" in figures["means"] and "smoker" not in figures["means"]
    assert sorted(json.loads((folder / "manifest.json").read_text())["sdc_report"]["keys"]) == ["age", "sex", "smoker"]


def test_a_column_emptied_by_suppression_has_no_mean_change():
    """Whether the internal report can be written must not depend on suppressed records' values."""
    original = pd.DataFrame({"x": [1.0, 2, 3, 50], "y": [1.0, 2, 3, 4], "bonus": [None, None, None, 7.0]})
    out = sdc_report.internal(original, original.iloc[:3], sdc_report.Roles("mews", ["x", "y"], [], ["x", "y"]))
    assert out["means"]["bonus"] == {"original": 7.0, "released": None, "change": None, "relative": None}
    assert out["means"]["x"]["change"] == pytest.approx(2 - 14)


def test_the_internal_reports_after_is_the_external_reports_figures():
    """The release passes the external report's figures to the internal one as its "after" (computed
    once): they are the released table's disclosure figures, as the internal report computes them itself."""
    original = census(300)
    released = original.assign(age=original["age"].sample(frac=1.0, random_state=3).to_numpy())
    role = sdc_report.Roles("ra", ["age", "sex"], ["occupation"], ["age"])
    external = sdc_report.external(released, role)
    figures = {k: v for k, v in external.items() if k not in sdc_report.ROLE_FIELDS}
    itself = sdc_report.internal(original, released, role)
    assert sdc_report.internal(original, released, role, figures) == itself
    assert itself["after"] == figures and itself["after"] != itself["before"]
