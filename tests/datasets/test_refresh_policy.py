"""``privrelease dataset refresh ID --policy FILE``, as the steward types it: the disclosure policy changes with
the rows it is for, checked as at registration; a file that is unreadable, invalid or does not fit the source
as it is now is refused with what to change, and nothing is changed (byte for byte)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from privrelease.core.datasets.demo import census
from tests.cli.test_cli import EXE, _tree, typed
from tests.support.helpers import write_policy

VENV = f"{Path(EXE).parent}:/usr/bin:/bin"


def _steward(home: Path, work: Path, command: str):
    return typed(home, command, cwd=work, path=VENV)


def _census_without_race(home: Path, work: Path) -> Path:
    """An sdc census registered with a policy naming race among its keys, then race dropped from the source."""
    census(200).to_csv(work / "census.csv", index=False)
    policy = write_policy(work)
    r = _steward(home, work, "privrelease dataset add census --source census.csv --format csv --unit record --purpose sdc "
                 f"--policy {policy.name}")  # fmt: skip
    assert r.returncode == 0, r.stderr
    census(200).drop(columns=["race"]).to_csv(work / "census.csv", index=False)
    return policy


def _refused(home: Path, work: Path, command: str) -> str:
    before = _tree(home)
    r = _steward(home, work, command)
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr, r
    assert _tree(home) == before  # nothing changed: no snapshot, no registration, no ledger entry
    return r.stderr


def test_refresh_changes_the_policy_with_the_rows(tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    policy = _census_without_race(home, work)
    columns = "['age', 'workclass', 'education', 'marital-status', 'occupation', 'relationship', 'sex', 'native-country', 'hours-per-week', 'salary']"
    missing = f"error: the disclosure policy of 'census' names keys.categorical ['race'], which the registered schema lacks; its columns are {columns}. Nothing was changed; "
    # the registered policy no longer fits: the refresh says how to pass one that does
    said = _refused(home, work, "privrelease dataset refresh census")
    assert said == missing + "pass a policy that fits the source as it is now with --policy FILE.\n"
    # a new policy file is checked as at registration: the same words for the same file
    (work / "bad.yaml").write_text("keys: [\n")
    assert _refused(home, work, "privrelease dataset refresh census --policy bad.yaml") == (
        "error: --policy 'bad.yaml' is not valid YAML or JSON at line 2, column 1: expected the node content, but found "
        "'<stream end>'.\n"
    )
    (work / "extra.yaml").write_text("keys: {categorical: [sex]}\nkey: [age]\n")
    said = _refused(home, work, "privrelease dataset refresh census --policy extra.yaml")
    assert said == "error: --policy 'extra.yaml' is invalid (key: Extra inputs are not permitted).\n"
    check = _steward(home, work, "privrelease dataset check c2 --source census.csv --format csv --unit record --purpose sdc "
                     "--policy extra.yaml")  # fmt: skip
    assert check.returncode == 2 and check.stderr == said
    assert (
        _refused(home, work, f"privrelease dataset refresh census --policy {policy.name}") == missing + "fix the --policy file.\n"
    )
    assert _refused(home, work, "privrelease dataset refresh census --policy missing.yaml") == (
        f"error: --policy {str(work / 'missing.yaml')!r} is not a file.\n"
    )
    shown = json.loads(_steward(home, work, "privrelease dataset show census").stdout)
    assert shown["version"] == 1 and "race" in shown["policy"]["keys"]["categorical"] and shown["policy_entry"] == 2

    doc = yaml.safe_load(policy.read_text())
    doc["keys"]["categorical"].remove("race")
    doc["thresholds"] = {"k": 2}
    (work / "new.yaml").write_text(yaml.safe_dump(doc))
    r = _steward(home, work, "privrelease dataset refresh census --policy new.yaml")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "dataset census: registration 2, unit record, purpose sdc, 10 columns, 200 rows (public)",
        "warning: columns ['race'] are no longer in the source: they leave the registered schema (public).",
        "dataset census: disclosure policy recorded as ledger entry #4",
        "thresholds every release must meet: k-anonymity on the key (k ≥ 2)",
    ]
    shown = json.loads(_steward(home, work, "privrelease dataset show census").stdout)
    assert shown["version"] == 2 and "race" not in shown["schema"] and shown["policy_entry"] == 4
    assert shown["policy"]["keys"] == doc["keys"] and shown["policy"]["thresholds"]["k"] == 2
    history = json.loads(_steward(home, work, "privrelease ledger history --json").stdout)
    assert [(e["seq"], e["status"], e["requested_by"] is not None) for e in history] == [
        (1, "registered", True),
        (2, "policy", True),
        (3, "refreshed", True),
        (4, "policy", True),
    ]


def test_refresh_refuses_a_policy_for_a_dp_dataset(tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    census(100).to_csv(work / "census.csv", index=False)
    policy = write_policy(work)
    r = _steward(home, work, "privrelease dataset add people --source census.csv --format csv --unit record --purpose dp")
    assert r.returncode == 0, r.stderr
    assert _refused(home, work, f"privrelease dataset refresh people --policy {policy.name}") == (
        "error: dataset 'people' is registered for dp releases; a disclosure policy is for an sdc dataset.\n"
    )
