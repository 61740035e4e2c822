"""Results under a test seed stay byte-identical: one release per mechanism, digests of its files.

Each case registers a small synthetic table and runs the release pipeline with a fixed seed and
release id. The data files, the report and the manifest (with the times and the ledger hash
masked: they depend on the clock) and the ledger entries must have the digests recorded here. A
change that moves any released byte fails this test; if the change is meant, record the new
digests (``print(digests(...))`` below) and say in the commit why the outputs changed. Charts
(PNG) are left out: their bytes depend on the font rasterizer, not on the release.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privrelease.core.ledger.ledger import Ledger
from privrelease.core.mechanisms.outliers.report import ROUNDED
from privrelease.core.privacy.budget import Budget
from privrelease.core.release import pipeline
from privrelease.core.release.home import Home
from privrelease.core.release.spec import parse
from tests.conftest import REPO
from tests.mechanisms.test_dpne import phrase_corpus
from tests.mechanisms.test_outliers import planted
from tests.mechanisms.test_swapping import binormal
from tests.support.helpers import QI, register

SCALES = {c: {"mean": 0.0, "std": 1.0} for c in "abcde"}


def _census(n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({c: rng.choice([f"{c}{i}" for i in range(4)], n) for c in QI})
    frame["occupation"] = rng.choice(["o1", "o2", "o3"], n)
    return frame


CASES = {  # name -> (table, unit, purpose, mechanism)
    "ra": (_census, "record", "sdc", {"name": "ra", "params": {"qi": QI, "sensitive": "occupation", "p": "entropy"}}),
    "era": (_census, "record", "sdc", {"name": "ra", "params": {"qi": QI, "sensitive": "occupation", "k": 3}}),
    "mews": (lambda: binormal(800)[["id", "x", "label", "y", "z"]], "record", "sdc",
             {"name": "mews", "params": {"swap_set": ["x", "y"], "t_range": [0.1, 1.0], "width_units": "sd",
                                         "others": "eds", "k": 5}}),
    "meds": (lambda: binormal(600), "record", "sdc", {"name": "meds", "params": {"swap_set": ["x", "y"], "k": 20}}),
    "eds": (lambda: binormal(600), "record", "sdc", {"name": "eds", "params": {"swap_set": ["z"], "k": 10}}),
    "sdc-chain": (_census, "record", "sdc", {"name": "sdc", "params": {"steps": [
        {"method": "pram", "columns": ["sex"], "keep": 0.7}, {"method": "ra", "qi": QI[:4], "sensitive": "occupation"},
        {"method": "suppress", "k": 3}]}}),
    "dpne": (lambda: phrase_corpus(600, seed=3), "user:user", "dp",
             {"name": "dpne", "params": {"text_column": "text", "epsilon": 2.0, "delta": 1e-6, "T": 3, "delta0": 10,
                                         "tokenizer": "words", "publish_weights": True}}),
    "outliers-count": (lambda: planted(300, seed=4), "record", "dp",
                       {"name": "outliers", "params": {"query": "count", "columns": ["a", "b"], "k": 3, "r": 0.5,
                                                       "epsilon": 1.0, "delta": 1e-4, "standardize": SCALES,
                                                       "noise": "smooth"}}),
    "outliers-top": (lambda: planted(300, seed=4), "record", "dp",
                     {"name": "outliers", "params": {"query": "top_subspaces", "c": 1, "h": 2, "k": 3, "r": 0.5,
                                                     "epsilon": 2.0, "delta": 1e-4, "standardize": SCALES,
                                                     "release_counts": True}}),
}  # fmt: skip

GOLDEN = {  # the SDC digests moved with the disclosure policy (rows shuffled, columns the policy names); their manifests
    # and reports with #52 (the figures over released cells, sdcMicro's freqCalc beside them); every case's ledger,
    # manifest and report with #54 (a dataset's registration is a ledger entry of its own, so the charge's entry
    # number moved): no data file moved
    "ra": {"<ledger>": "d13b82ca05e2c08e", "data.csv": "5d437e2609317229", "data.parquet": "6c630566b30cb785",
          "manifest.json": "1387989d9dcfd9c4", "report.md": "09b3642068e054e3"},
    "era": {"<ledger>": "8463c4cdc6cf85c7", "data.csv": "7d933ed628c3b658", "data.parquet": "cd3742bdda61ddb3",
           "manifest.json": "5d5d454316c568b8", "report.md": "b67aa391a3c4e207"},
    "mews": {"<ledger>": "b06c3452bd589757", "data.csv": "56c522fc7d2309ed", "data.parquet": "03fc254125ee26ec",
            "manifest.json": "8e0d25802dad9c0c", "report.md": "74fc904777205395"},
    "meds": {"<ledger>": "f475eb3144213703", "data.csv": "996bb7439ae51890", "data.parquet": "9d2f84e1a3d6f10e",
            "manifest.json": "0c74e6e9382aa65f", "report.md": "02cf3857832fc87e"},
    "eds": {"<ledger>": "ed0f1a3d9557373c", "data.csv": "7b1cbe7493912e5e", "data.parquet": "140f586cfd417c9d",
           "manifest.json": "6bb24bcef4d813e5", "report.md": "21f05429d0d40307"},
    "sdc-chain": {"<ledger>": "5cea7bfa3793cee4", "data.csv": "bd1287809587ecaf", "data.parquet": "32afdc20848d7f97",
                 "manifest.json": "1a674f21176e7fa6", "report.md": "aa112b3cd77db616"},
    # dpne's ledger entry moved with #55's one namespace: its plan names where the noise comes from,
    # privrelease.core.noise (was core.noise); its released files did not move
    "dpne": {"<ledger>": "5f29a532db038d00", "manifest.json": "01f00a6e1676389e", "ngrams.csv": "27a8ead094c3dffb",
             "ngrams.parquet": "02e1caacbf8f11aa", "report.md": "a327495ececcc04d"},
    # the outlier cases' digests are those of the Gaussian calibration with scipy.special's normal CDF: core.normal
    # computes it bit for bit without scipy (a CDF from the C library's erfc moved sigma by 1e-15 to 4e-14 relative,
    # and the exact sampler's seeded draws with it)
    "outliers-count": {"<ledger>": "babeafabe1049bc2", "manifest.json": "67855d71734894cb", "outliers.csv": "196e97da3384c6ed",
                       "outliers.parquet": "7f537c53750dfce5", "report.md": "6db1ef5a3789d545"},
    # the dp cases' ledger entries moved with #38 item 1 (typed privacy events): an entry records its event's
    # parts in the tree's form and no longer the plan's accountant keys; their released files did not move.
    # outliers-top draws global noise: its ledger entry and manifest moved with its events (#37 finding 5: the
    # Gaussian it draws, not an (eps, delta) count and a Laplace std); its released files did not. And
    # since #55 the registry fills a request's empty columns with the registered ones (its plan knows the dimension it
    # draws in): its ledger entry, manifest and report show them among its parameters; its data did not move
    "outliers-top": {"<ledger>": "288c85a0a27fc55b", "manifest.json": "d9e10285f114ddcb", "outliers.csv": "8bfda1a53db0faa4",
                     "outliers.parquet": "c2077e9ca9ae9abc", "report.md": "bd3fae8c7837b6b2"},
}  # fmt: skip


def _masked(name: str, data: bytes) -> bytes:
    """The file with what depends on the clock replaced: creation and registration times, the ledger hash."""
    if name == "manifest.json":
        doc = json.loads(data)
        doc["created"] = doc["input"]["registered"] = doc["ledger"]["hash"] = doc["files"]["report.md"] = "X"
        return json.dumps(doc, indent=2).encode()
    if name == "report.md":
        text = re.sub(r"\| created \| .* \|", "| created | X |", data.decode())
        return re.sub(r"ledger entry \| #(\d+) \(`[0-9a-f]+…`\)", r"ledger entry | #\1 (X)", text).encode()
    return data


def digests(home: Path, case: str) -> dict[str, str]:
    make, unit, purpose, mechanism = CASES[case]
    protected = mechanism["params"].get("qi") or mechanism["params"].get("swap_set") or QI[:4]
    register(home, make(), "ds", unit, purpose, keys=protected[:1] if purpose == "sdc" else None)
    ledger = Ledger(home / "privrelease.duckdb")
    if purpose == "dp":
        ledger.set_budget("ds", Budget(10.0, 1e-3))
    request = parse({"dataset": "ds", "release_id": f"golden-{case}", "seed": 7, "mechanism": mechanism})
    folder = Path(pipeline.release(Home(home), request)["folder"])
    out = {
        f.name: hashlib.sha256(_masked(f.name, f.read_bytes())).hexdigest()[:16]
        for f in sorted(folder.iterdir())
        if f.suffix != ".png"
    }
    entries = [(e.kind is None, e.status, e.kind, e.epsilon, e.delta, e.detail, e.params) for e in ledger.entries()]
    out["<ledger>"] = hashlib.sha256(repr(entries).encode()).hexdigest()[:16]
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_seeded_release_is_byte_identical(case, tmp_path, monkeypatch, test_mode):
    monkeypatch.setenv("PRIVRELEASE_HOME", str(tmp_path))
    assert digests(tmp_path, case) == GOLDEN[case]
    (manifest,) = tmp_path.glob("**/manifest.json")
    opens_in_pandas(manifest, case)


def opens_in_pandas(manifest: Path, case: str) -> None:
    """Analysts open releases with pandas first: its default Parquet engine (pyarrow) reads each table,
    and the CSV beside it holds the same rows."""
    tables = sorted(manifest.parent.glob("*.parquet"))
    assert tables
    for table in tables:
        frame = pd.read_parquet(table)
        twin = pd.read_csv(table.with_suffix(".csv"))
        assert len(frame) == len(twin) and list(frame.columns) == list(twin.columns)
        numeric = frame.select_dtypes("number").columns
        np.testing.assert_allclose(frame[numeric].to_numpy(float), twin[numeric].to_numpy(float), rtol=1e-12)
    if case == "outliers-count":  # the Noise page, the report and the table say the same about rounding
        page = " ".join((REPO / "docs" / "mechanisms" / "noise.md").read_text().split())
        assert ROUNDED in page and ROUNDED in " ".join((manifest.parent / "report.md").read_text().split())
        assert str(pd.read_parquet(manifest.parent / "outliers.parquet")["noisy_count"].dtype) == "int64"
