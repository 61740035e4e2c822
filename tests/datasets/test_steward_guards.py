"""The steward's guard rails on their own messy data (issue #54), as the steward types the commands: the newcomer's
hospital visits (tests/support/newcomer.py) warn at registration and in ``dataset check`` of a repeated identifier (pointing to
the policy's cluster), a near-unique and a name-like publishable column, and invisible or padded ward names (with
``--normalise`` to read them without); ``dataset policy --check`` is a dry run of a policy change on the registered
rows; ``refresh --delimiter``; registration and refresh are on the ledger's history with public facts only; a YAML
error says its line and column; an sdc unit of a person is refused naming the cluster. Every warning is the
steward's: on their command line, in no release, report or ledger entry."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from privrelease.core.ledger.ledger import Ledger
from tests.cli.test_cli import EXE, _tree, typed
from tests.support.newcomer import write

VENV = f"{Path(EXE).parent}:/usr/bin:/bin"


@pytest.fixture
def newcomer(tmp_path: Path) -> tuple[Path, Path]:
    home, work = tmp_path / "home", tmp_path / "work"
    write(work)
    return home, work


def steward(home: Path, work: Path, command: str):
    return typed(home, command, cwd=work, path=VENV)


ADD = "privrelease dataset add hospital --source hospital.csv --format csv --unit record --purpose sdc --policy hospital.policy.yaml"


def _warnings(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("warning: ")]


def test_registration_warns_the_steward_of_what_their_rows_hold(newcomer):
    home, work = newcomer
    check = steward(home, work, ADD.replace("dataset add", "dataset check"))
    assert check.returncode == 0, check.stderr
    said = _warnings(check.stdout)
    assert not home.exists() or not (home / "datasets").exists()  # a dry run: nothing stored
    add = steward(home, work, ADD)
    assert add.returncode == 0, add.stderr
    assert _warnings(add.stdout) == said  # the same warnings as the dry run's
    repeated, name, postcode, ward = said
    assert repeated.startswith("warning: column 'patient_id' looks like an identifier and repeats (4,985 values, ")
    assert "name it as the policy's cluster (cluster: patient_id, as sdcMicro's hhId)" in repeated
    assert name.startswith("warning: column 'name' is named like a personal detail and the policy publishes it (publishable)")
    assert postcode.startswith("warning: column 'postcode' is near-unique (") and "% of its 4,985 values distinct)" in postcode
    assert ward == (
        "warning: column 'ward' has 2 values with invisible characters or spaces around them ('Oncology ', "
        "'Surgery\\u200b'; 4 records): each is a category of its own, apart from the value it looks like. Register with "
        "--normalise to read them without (it is kept for refresh), or clean the source."
    )
    # registered as it was read: the padded wards are categories of their own in the snapshot
    stored = pd.read_parquet(next((home / "datasets" / "hospital").glob("v1.parquet")))
    assert {"Oncology ", "Surgery\u200b"} <= set(stored["ward"])
    # the warnings are the steward's: nothing of them on the ledger (which auditors and analysts read)
    ledger = json.dumps([e.as_dict() for e in Ledger(home / "privrelease.duckdb").entries()])
    assert "Surgery" not in ledger and "postcode" not in ledger.replace('"postcode"', "") and "near-unique" not in ledger

    normalised = steward(home, work, ADD.replace("dataset add hospital", "dataset check h2") + " --normalise")
    assert normalised.returncode == 2 and "already registered as dataset 'hospital'" in normalised.stderr
    (work / "copy").mkdir()
    (work / "copy" / "hospital.csv").write_text((work / "hospital.csv").read_text() + "\n")
    (work / "copy" / "hospital.policy.yaml").write_text((work / "hospital.policy.yaml").read_text())
    add = steward(home, work / "copy", ADD.replace("dataset add hospital", "dataset add h2") + " --normalise")
    assert add.returncode == 0, add.stderr
    assert not [w for w in _warnings(add.stdout) if "invisible" in w]
    stored = pd.read_parquet(next((home / "datasets" / "h2").glob("v1.parquet")))
    assert set(stored["ward"]) == {"Cardiology", "Oncology", "Maternity", "Surgery", "Geriatrics", "Paediatrics"}


def test_a_policy_change_is_tried_on_the_registered_rows_first(newcomer):
    home, work = newcomer
    assert steward(home, work, ADD).returncode == 0
    (work / "clustered.yaml").write_text(
        "identifiers: [visit_id, name]\ncluster: patient_id\nkeys: {categorical: [sex, ward], numeric: [age]}\n"
        "sensitive: [diagnosis]\nthresholds: {k: 3, household_risk: 0.5}\nhierarchies:\n  age: {breaks: [18, 30, 45, 60, 75, 95]}\n"
    )
    before = _tree(home)
    r = steward(home, work, "privrelease dataset policy hospital --policy clustered.yaml --check")
    assert r.returncode == 0, r.stderr
    assert _tree(home) == before  # a dry run: nothing recorded, byte for byte
    lines = r.stdout.splitlines()
    assert lines[0] == "dataset hospital: the disclosure policy fits the registered rows (registration 1)"
    assert not _warnings(r.stdout)  # the cluster named, the name and the postcode no longer published
    cells = next(x for x in lines if x.startswith("note: on the registered rows, before any release's methods, "))
    assert cells.endswith(
        "key cells of fewer than k=3 records (key: sex, ward, age): a release's recoding and local suppression must cover them."
    )
    assert (
        lines[-1]
        == "nothing was recorded (a dry run); record it with: privrelease dataset policy hospital --policy clustered.yaml"
    )
    # the same check refuses what would be refused, naming the line and column of a YAML error
    (work / "broken.yaml").write_text("keys:\n  categorical: [sex, ward\n  numeric: [age]\n")
    r = steward(home, work, "privrelease dataset policy hospital --policy broken.yaml --check")
    assert r.returncode == 2 and r.stderr == (
        "error: --policy 'broken.yaml' is not valid YAML or JSON at line 3, column 10: expected ',' or ']', but got ':'.\n"
    )
    (work / "typo.yaml").write_text("keys: {categorical: [sex, wrad]}\n")
    r = steward(home, work, "privrelease dataset policy hospital --policy typo.yaml --check")
    assert r.returncode == 2 and "names keys.categorical ['wrad'], which the registered schema lacks" in r.stderr
    assert _tree(home) == before
    r = steward(home, work, "privrelease dataset policy hospital --policy clustered.yaml")  # then recorded
    assert r.returncode == 0 and "disclosure policy recorded as ledger entry #3" in r.stdout


def test_refresh_takes_the_delimiter_and_both_are_on_the_history(newcomer):
    home, work = newcomer
    assert steward(home, work, ADD).returncode == 0
    frame = pd.read_csv(work / "hospital.csv", keep_default_na=False)
    frame.head(4000).to_csv(work / "hospital.csv", sep=";", index=False)
    r = steward(home, work, "privrelease dataset refresh hospital")
    assert r.returncode == 2 and "--delimiter" in r.stderr
    r = steward(home, work, "privrelease dataset refresh hospital --delimiter ';'")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("dataset hospital: registration 2, unit record, purpose sdc, 9 columns, 4000 rows (public)")
    frame.head(3900).to_csv(work / "hospital.csv", sep=";", index=False)
    r = steward(home, work, "privrelease dataset refresh hospital")  # the delimiter is kept for the next refresh
    assert r.returncode == 0 and "registration 3" in r.stdout and "3900 rows" in r.stdout, r.stderr

    history = steward(home, work, "privrelease ledger history --dataset hospital").stdout.splitlines()[1:]
    said = [line.split(None, 4)[4] for line in history]
    assert said[0].startswith("registered (by ") and said[0].endswith("version 1 (record, sdc, 9 columns, 4985 rows)")
    assert said[1].startswith("disclosure policy set")
    assert said[2].endswith("version 2 (record, sdc, 9 columns, 4000 rows)") and said[2].startswith("refreshed")
    assert said[3].endswith("version 3 (record, sdc, 9 columns, 3900 rows)")
    entries = Ledger(home / "privrelease.duckdb").entries("hospital")
    facts = [json.loads(e.detail) for e in entries if e.status in ("registered", "refreshed")]
    assert facts[0] == {"version": 1, "unit": "record", "purpose": "sdc", "columns": 9, "rows": 4985}
    assert all(set(f) == {"version", "unit", "purpose", "columns", "rows"} for f in facts)  # no path, no digest

    r = steward(
        home, work, "privrelease dataset add payroll --source payroll.csv --format csv --unit user:person_id --purpose dp"
    )
    assert r.returncode == 0, r.stderr
    (payroll,) = [e for e in Ledger(home / "privrelease.duckdb").entries("payroll") if e.status == "registered"]
    assert json.loads(payroll.detail) == {
        "version": 1,
        "unit": "user:person_id",
        "purpose": "dp",
        "columns": 6,
    }  # rows not public
    said = steward(home, work, "privrelease ledger history --dataset payroll").stdout
    assert said.splitlines()[1].endswith(
        "registered (by " + payroll.requested_by + "): version 1 (user:person_id, dp, 6 columns)"
    )
    assert "registered" not in [t["kind"] for t in json.loads(steward(home, work, "privrelease ledger totals --json").stdout)]


def test_an_sdc_unit_of_a_person_is_refused_naming_the_cluster(newcomer):
    home, work = newcomer
    r = steward(home, work, ADD.replace("--unit record", "--unit user:patient_id"))
    assert r.returncode == 2 and r.stderr == (
        "error: an sdc dataset releases perturbed records: its unit is 'record'. When several records belong to one "
        "person or household ('patient_id'), register with --unit record and name that column as the disclosure "
        "policy's cluster: (as sdcMicro's hhId): the household risk counts their records together.\n"
    )
    r = steward(home, work, "privrelease dataset add payroll --source payroll.csv --format csv --unit record --purpose dp")
    assert r.returncode == 0, r.stderr  # a dp table of payslips under the record unit: the person repeats
    (repeated,) = [w for w in _warnings(r.stdout) if "person_id" in w]
    assert repeated.endswith("the record unit protects one row, not a person with several: register with --unit user:person_id.")


HOSPITAL_REQUEST = """\
dataset: hospital
mechanism:
  name: sdc
  params:
    steps:
      - {method: recode, columns: [age]}
      - {method: suppress}
"""
PAYROLL_REQUEST = """\
dataset: payroll
mechanism:
  name: aggregate
  params:
    group_by: [department]
    measures:
      - {op: count}
      - {op: mean, column: salary, bounds: [0, 10000]}
    epsilon: 1.0
    delta: 1.0e-6
    max_groups: 1
    max_rows: 6
"""


def test_the_newcomers_two_cases_release_from_the_command_line(newcomer):
    """The hospital (recode, then local suppression to the policy's k) and the payroll (counts and mean salaries by
    department, a person's payslips bounded), as the newcomer types them; their UI side is
    tests/system/test_ui_every_field.py."""
    home, work = newcomer
    assert steward(home, work, ADD).returncode == 0
    r = steward(
        home, work, "privrelease dataset add payroll --source payroll.csv --format csv --unit user:person_id --purpose dp"
    )
    assert r.returncode == 0, r.stderr
    assert steward(home, work, "privrelease ledger set-budget payroll --epsilon 4 --delta 1e-5").returncode == 0
    (work / "hospital.yaml").write_text(HOSPITAL_REQUEST)
    (work / "payroll.yaml").write_text(PAYROLL_REQUEST)
    hospital = steward(home, work, "privrelease release hospital.yaml --json")
    assert hospital.returncode == 0, hospital.stderr
    released = pd.read_csv(Path(json.loads(hospital.stdout)["folder"]) / "data.csv")
    keys = released[["sex", "ward", "age"]].astype("string").fillna("*")
    complete = keys[(keys != "*").all(axis=1)]
    assert complete.value_counts().min() >= 3  # the policy's k, counted on the released complete keys
    # the identifier goes; the name the newcomer's policy lists as publishable goes out (registration warned of it)
    assert "visit_id" not in released.columns and "name" in released.columns
    payroll = steward(home, work, "privrelease release payroll.yaml --json")
    assert payroll.returncode == 0, payroll.stderr
    summary = json.loads(payroll.stdout)
    assert summary["budget_next"]["says"].startswith("the next release like this can take epsilon ≤ ")
    table = pd.read_csv(Path(summary["folder"]) / "aggregate.csv")
    assert set(table["department"]) <= {"Finance", "Fïnance", "Operations", "Research", "Sales", "Legal"}
