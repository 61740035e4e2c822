"""DP outlier statistics through the release flow and the CLI, under Prefect's test harness."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from privrelease.core.ledger.ledger import PUBLISHED, RESERVED, Ledger
from tests.flows.test_release_flow import cli
from tests.mechanisms.test_outliers import planted
from tests.support.helpers import register

PUBLIC = {c: {"mean": 0.0, "std": 1.0} for c in "abcde"}


def write(home: Path, folder: Path, frame: pd.DataFrame, seed: int | None = None, **params) -> Path:
    """Register ``frame`` (record unit, DP purpose) and write an outliers request for it."""
    register(home, frame, "sessions", "record", "dp")
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"dataset": "sessions", "mechanism": {"name": "outliers", "params": params}}
    (folder / "request.yaml").write_text(yaml.safe_dump(doc if seed is None else {**doc, "seed": seed}))
    return folder / "request.yaml"


def entries(home: Path) -> list:
    db = home / "privrelease.duckdb"
    return [e for e in Ledger(db).entries() if e.release_id] if db.exists() else []


def test_count_release_charges_then_publishes(prefect_server, home, tmp_path, capsys):
    spec = write(
        home,
        tmp_path / "a",
        planted(),
        columns=["a", "b"],
        k=3,
        r=0.1,
        epsilon=1.0,
        delta=1e-4,
        standardize=PUBLIC,
        noise="smooth",
    )
    assert cli(capsys, "ledger", "set-budget", "sessions", "--epsilon", "3", "--delta", "1e-3")[0] == 0
    code, out, err = cli(capsys, "release", str(spec))
    assert code == 0, err
    folder = Path(out.split("folder ")[1].split()[0])
    assert sorted(p.name for p in folder.iterdir()) == [
        "manifest.json",
        "outliers.csv",
        "outliers.parquet",
        "outliers.png",
        "report.md",
    ]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["result"]["subspace"] == ["a", "b"] and isinstance(manifest["result"]["count"], int)  # rounded
    assert manifest["noise_std"] > 0 and manifest["privacy"]["noise"] == ["smooth"]
    assert manifest["privacy"]["adjacency"].startswith("replace one record")
    assert manifest["privacy"]["standardization"]["method"] == "public"
    reserved, published = entries(home)
    assert (reserved.status, reserved.epsilon, reserved.delta) == (RESERVED, 1.0, 1e-4)
    assert published.status == PUBLISHED
    report = (folder / "report.md").read_text()
    assert "global_noise_std" in report and "Laplace on its logarithm" in report and "outliers.png" in report


def test_top_subspaces_release_with_private_standardization(prefect_server, home, test_mode, tmp_path, capsys):
    frame = planted(2000, seed=1).assign(a=lambda f: f["a"] * 50 + 100)  # a on another scale
    bounds = {"a": [-100, 300], "b": [-5, 5], "c": [-5, 5], "d": [-5, 5], "e": [-5, 5]}
    spec = write(
        home,
        tmp_path / "b",
        frame,
        seed=7,
        query="top_subspaces",
        c=1,
        h=2,
        k=3,
        r=0.05,
        epsilon=8.0,
        delta=1e-4,
        standardize={"bounds": bounds, "share": 0.25},
    )
    assert cli(capsys, "ledger", "set-budget", "sessions", "--epsilon", "10", "--delta", "1e-3")[0] == 0
    code, out, err = cli(capsys, "release", str(spec))
    assert code == 0, err
    folder = Path(out.split("folder ")[1].split()[0])
    manifest = json.loads((folder / "manifest.json").read_text())
    assert len(manifest["result"]) == 2 and len({tuple(r["subspace"]) for r in manifest["result"]}) == 2
    assert len(manifest["noise_std"]) == 2
    scales = manifest["privacy"]["standardization"]["scales"]
    inliers = frame["a"].iloc[10:]  # the charged estimate, released; planted outliers are clipped
    assert scales["a"]["std"] == pytest.approx(inliers.std(), rel=0.3) and scales["a"]["mean"] == pytest.approx(
        inliers.mean(), abs=10
    )
    table = pd.read_csv(folder / "outliers.csv")
    assert list(table.columns) == [
        "rank",
        "subspace",
        "noisy_count",
        "ci95_low",
        "ci95_high",
        "noise",
        "noise_std",
        "global_noise_std",
    ]
    assert [e.epsilon for e in entries(home) if e.status == RESERVED] == [8.0]


@pytest.mark.parametrize(
    "change,params,message",
    [
        ("text", {}, "column 'note' of dataset 'sessions' is registered as string"),
        ("nan", {}, "column 'c' of dataset 'sessions' may hold empty values"),
        (None, {"columns": ["a", "zz"]}, "columns ['zz'] are not in the table"),
        (None, {"query": "top_subspaces", "c": 2, "h": 11}, "h=11 is more than the 10 candidate subspaces"),
        (None, {"r": -1.0}, "r: Input should be greater than 0"),
        (None, {"k": 0}, "k: Input should be greater than or equal to 1"),
        (
            None,
            {"noise": "smooth", "epsilon": 30.0},
            "delta per count 0.0001 (Theorem 2; docs/REPRODUCTION.md derives the bound). Lower epsilon or use noise: global",
        ),
    ],
    ids=["non-numeric", "nullable", "missing-column", "h-too-large", "negative-r", "k-zero", "smooth-epsilon-bound"],
)
def test_bad_request_is_refused_before_the_charge(prefect_server, home, tmp_path, capsys, change, params, message):
    frame = planted(200)
    if change == "text":
        frame["note"] = "x"
    elif change == "nan":
        frame.loc[5, "c"] = np.nan
    base = {"k": 3, "r": 0.1, "epsilon": 1.0, "delta": 1e-4, "standardize": False, **params}
    spec = write(home, tmp_path / "bad", frame, **base)
    assert cli(capsys, "ledger", "set-budget", "sessions", "--epsilon", "3", "--delta", "1e-3")[0] == 0
    code, _, err = cli(capsys, "release", str(spec))
    assert code == 2 and message in err.strip().splitlines()[-1], err
    assert not (home / "releases" / "sessions").exists()
    assert entries(home) == []


def test_infinite_values_are_refused_at_registration(home):
    from privrelease.core.errors import IngestError

    frame = planted(200)
    frame.loc[5, "d"] = np.inf
    with pytest.raises(IngestError, match=r"column 'd': 1 values infinite or NaN \(first at lines \[7\]\)"):
        register(home, frame, "sessions", "record", "dp")
