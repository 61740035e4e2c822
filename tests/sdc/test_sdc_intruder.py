"""The fourth privacy review's SDC findings, through the release pipeline: local suppression's k counted from the
intruder's side (finding 1), a step that protects must protect (finding 3), nothing published that the released
table does not determine (finding 4).

Each published table is checked against tests/support/intruder.py, which counts, apart from the product's measures, the
released records compatible with each person's true key; each weakened variant shows the old count (sdcMicro's
freqCalc, a missing value matching every value) passing what the intruder breaks."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
import yaml

from privrelease.core.datasets.demo import CENSUS_POLICY, census
from privrelease.core.errors import UserError
from privrelease.core.ledger.ledger import FAILED, RESERVED, Ledger
from privrelease.core.release import pipeline, preview
from privrelease.core.release.home import Home
from privrelease.core.release.spec import parse
from privrelease.core.sdc import methods, policy, risk
from privrelease.core.sdc import report as sdc_report
from tests.support import intruder
from tests.support.helpers import register

SUPPRESS = {"name": "sdc", "params": {"steps": [{"method": "suppress"}]}}


def _read(path: Path) -> pd.DataFrame:
    return duckdb.connect().execute("SELECT * FROM read_parquet(?)", [str(path)]).df()


def test_a_census_release_leaves_no_person_compatible_with_fewer_than_k_records(home, test_mode):
    """The reviewer's chain [suppress] on the demo census (here 3,000 rows): every person, whose true key is their
    registered row's, is compatible with at least 3 published records; the report says which count it publishes,
    keeps freqCalc's beside it, and the steward's per-record intruder count is the independent one."""
    frame = census(3000)
    rules = policy.parse(yaml.safe_load(CENSUS_POLICY), "the demo census policy")
    register(home, frame, "census", policy=rules)
    summary = pipeline.release(Home(home), parse({"release_id": "r1", "dataset": "census", "mechanism": SUPPRESS, "seed": 3}))
    folder = Path(summary["folder"])
    released = _read(folder / "data.parquet")
    records = _read(sdc_report.folder(home, "census", "r1") / "records.parquet").sort_values("released_row")
    persons = frame.iloc[records["row"].to_numpy()].reset_index(drop=True)  # the person behind each released row
    keys = rules.key_vars.all
    compatible = intruder.compatible(persons, released, keys)
    assert compatible.min() >= 3 and released[keys].isna().any(axis=1).sum() > 1000
    assert (records["fk_intruder"].to_numpy() == compatible).all()  # the product's intruder count agrees
    manifest = json.loads((folder / "manifest.json").read_text())
    report = manifest["sdc_report"]
    assert report["count"] == "released" and report["k"] >= 3 and set(report["sdcmicro_freqcalc"]) >= {"k", "l_min"}
    assert report["sdcmicro_freqcalc"]["k"] >= report["k"]  # freqCalc overstates: beside, never the guarantee
    text = (folder / "report.md").read_text()
    assert "a suppressed (missing) key value counted as a value of its own" in text and "never as the guarantee" in text
    # finding 4: the step publishes figures of the released table only (no rounds)
    assert manifest["privacy"]["steps"] == [
        {
            "method": "suppress",
            "k": 3,
            "suppressed_cells": int(released[keys].isna().sum().sum()),
            "suppressed_by_column": released[keys].isna().sum().to_dict(),
        }
    ]
    internal = json.loads((sdc_report.folder(home, "census", "r1") / "internal.json").read_text())
    assert internal["intruder"]["k"] == int(compatible.min()) and internal["intruder"]["k"] >= internal["after"]["k"]


def _reviewers_44_rows() -> pd.DataFrame:
    """Every (A1, B1) record a Doctor; a Nurse alone with (A1, B9); the rest in cells of 10 of mixed occupations."""
    rows = [("A1", "B1", "Doctor")] * 3 + [("A1", "B9", "Nurse")]
    jobs = ["Doctor", "Nurse", "Clerk", "Nurse", "Clerk", "Doctor", "Clerk", "Nurse", "Doctor", "Clerk"]
    for a, b in (("A1", "B2"), ("A2", "B1"), ("A2", "B2"), ("A2", "B3")):
        rows += [(a, b, job) for job in jobs]
    return pd.DataFrame(rows, columns=["A", "B", "occupation"])


REVIEW_POLICY = {"keys": {"categorical": ["A", "B"]}, "sensitive": ["occupation"], "thresholds": {"k": 3, "l": 2}}


def test_the_reviewers_44_rows_are_refused_for_their_true_l(home, test_mode):
    """Policy k: 3, l: 2. Suppressing the lone Nurse's key leaves the (A1, B1) cell all Doctors, and an intruder
    who knows the method knows no suppressed record is one of them (their complete cell was never below k): the
    released l is 1, so the table is refused, its ledger entry failed, nothing published."""
    frame = _reviewers_44_rows()
    assert len(frame) == 44
    register(home, frame, "t", policy=policy.parse(REVIEW_POLICY, "test policy"))
    with pytest.raises(UserError, match=r"would not meet its disclosure policy \(l-diversity of the sensitive variables"):
        pipeline.release(Home(home), parse({"release_id": "r1", "dataset": "t", "mechanism": SUPPRESS, "seed": 1}))
    assert not (home / "releases" / "t").exists()
    reserved, failed = [e for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id == "r1"]
    assert (reserved.status, failed.status) == (RESERVED, FAILED)
    internal = json.loads((sdc_report.folder(home, "t", "r1") / "internal.json").read_text())
    assert internal["after"]["l_min"] == 1 and internal["after"]["k"] >= 3
    # weakened: counted as sdcMicro's freqCalc counts it (what the release measured before), the same table met
    # k = 3 and l = 2, while every (A1, B1) record is a Doctor
    assert internal["after"]["sdcmicro_freqcalc"]["k"] >= 3 and internal["after"]["sdcmicro_freqcalc"]["l_min"] >= 2


def test_weakened_the_reviewers_table_under_freqcalc_passes_while_a_b1_is_all_doctors():
    """The same check on the reviewer's released table (the old suppression touched the Nurse's B only): freqCalc
    says k = 4, l = 2; the released cells say the (A1, B1) people are Doctors with certainty (l = 1)."""
    frame = _reviewers_44_rows()
    old = frame.astype({"B": object}).copy()
    old.loc[3, "B"] = None  # the Nurse's B: the largest freqCalc cell (A1, *) for her
    said = risk.disclosure(old, ["A", "B"], ["occupation"], count="freqcalc")
    assert (said["k"], said["l_min"]) == (4, 2)
    cells = risk.disclosure(old, ["A", "B"], ["occupation"])
    assert cells["l_min"] == 1 and cells["k"] == 1
    alone = intruder.compatible(frame, old, ["A", "B"])
    assert alone[3] == 1  # the Nurse: no other released record fits (A1, B9)


# -- finding 3: a step that protects must protect -------------------------------------------------------------------

PEOPLE = {"keys": {"categorical": ["sex", "region"], "numeric": ["age"]}, "sensitive": ["disease"], "thresholds": {"k": None}}


def _people(n: int = 200) -> pd.DataFrame:
    rng = np.random.default_rng(8)
    return pd.DataFrame(
        {
            "sex": rng.choice(["F", "M"], n),
            "region": rng.choice(list("NESW"), n),
            "age": rng.integers(18, 80, n),
            "disease": rng.choice(["d1", "d2"], n),
        }
    )


NOMINAL = {  # the reviewer's requests, each with the words that say what to change
    "noise": (
        [{"method": "pram", "columns": ["sex", "region"]}, {"method": "noise", "columns": ["age"], "level": 1e-300}],
        "noise: level 1e-300 adds less than 0.1 of the column's standard deviation, so it does not count as protecting "
        "its columns (at a tiny level it releases them as they are): level at least 0.1",
    ),
    "pram": (
        [{"method": "pram", "columns": ["sex", "region"], "keep": 0.99999999}, {"method": "recode", "columns": ["age"]}],
        "pram: keep 0.99999999 redraws fewer than one value in ten, so it does not count as protecting its columns (at "
        "keep near 1 it releases them as they are): keep at most 0.9",
    ),
    "topcode": (
        [{"method": "pram", "columns": ["sex", "region"]}, {"method": "topcode", "column": "age", "top": 1000}],
        "key variables ['age'] of dataset 'p' are protected only by topcode, which changes nothing where its bounds "
        "lie outside the values (not public, so nothing tells before the rows are read): it protects only under a "
        "policy with a threshold measured on the key (k, risk, global_risk or household_risk), and this policy sets "
        "none. Add a step that protects them (recode, suppress, microaggregate, noise, pram), or ask the data steward "
        "for a threshold.",
    ),
}


@pytest.mark.parametrize("case", list(NOMINAL))
def test_a_step_that_changes_nothing_is_refused_before_the_charge_saying_what_to_change(home, case):
    """A bound (noise, pram) refuses the request itself; top coding, nominal, is refused under a policy without a
    threshold measured on the key, by the release and by its preview alike (the reviewer's preview: "admitted")."""
    steps, said = NOMINAL[case]
    register(home, _people(), "p", policy=policy.parse(PEOPLE, "test policy"))
    doc = {"release_id": "r1", "dataset": "p", "mechanism": {"name": "sdc", "params": {"steps": steps}}}
    with pytest.raises(UserError) as caught:
        pipeline.release(Home(home), parse(doc))
    assert said in str(caught.value)
    assert [e for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id] == []
    if case == "topcode":  # the preview refuses it as the release does
        with pytest.raises(UserError) as previewed:
            preview.preview(Home(home), parse(doc))
        assert said in str(previewed.value)


def test_weakened_those_strengths_release_the_keys_as_they_are(test_mode):
    """What the bounds keep out: built without them, each step leaves its column exactly as it was."""
    frame = _people(1000)
    rng = np.random.default_rng(3)
    noised, _ = methods.noise(frame, methods.Noise.model_construct(method="noise", columns=["age"], level=1e-300), rng)
    prammed, _ = methods.pram(frame, methods.Pram.model_construct(method="pram", columns=["sex"], keep=0.99999999), rng)
    topped, _ = methods.topcode(frame, methods.TopCode(method="topcode", column="age", top=1000))
    assert (noised["age"] == frame["age"]).all() and (prammed["sex"] == frame["sex"]).all()
    assert (topped["age"] == frame["age"]).all()


def test_under_a_threshold_a_topcode_is_admitted_as_nominal_and_the_preview_says_so(home):
    register(home, _people(), "p", policy=policy.parse(PEOPLE | {"thresholds": {"k": 3}}, "test policy"))
    steps = NOMINAL["topcode"][0]
    found = preview.preview(Home(home), parse({"dataset": "p", "mechanism": {"name": "sdc", "params": {"steps": steps}}}))
    assert found["verdict"] == "admitted"
    assert (
        "['age'] are protected only by topcode, nominally (its bounds may lie outside the values): the thresholds, "
        "measured on the final table, are what protects them." in found["notes"]
    )
