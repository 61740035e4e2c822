"""The steward's disclosure policy decides what an SDC release may show, whatever the request names.

Two attacks that published near-raw microdata before the policy existed are each refused here,
and each succeeds again on a weakened variant (a policy that does not ask for what the real one
asks), so the tests can fail: an analyst's one-column key, and a release of a hospital table whose
own report said most records were unique. Every SDC mechanism, option and chain publishes only the
columns the policy names, in shuffled order; a table that misses a threshold is not published,
and the ledger says why in public words; every error a steward can make in a policy is refused
with what to change, and nothing is registered.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from privrelease.core import noise
from privrelease.core.datasets.demo import write_demo
from privrelease.core.datasets.registry import Registry, Unit
from privrelease.core.errors import SpecError, UserError
from privrelease.core.ledger.ledger import FAILED, POLICY, RESERVED, Ledger
from privrelease.core.release import pipeline
from privrelease.core.release.home import Home
from privrelease.core.release.spec import parse
from privrelease.core.sdc import methods, policy
from tests.support.helpers import open_policy, planned_run, register

PRIVRELEASE = str(Path(sys.executable).parent / "privrelease")


def cli(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PRIVRELEASE, "--home", str(home), *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def charges(home: Path) -> list[str]:
    return [
        e.status
        for e in Ledger(home / "privrelease.duckdb").entries()
        if e.status not in ("cap", POLICY, "registered", "refreshed")
    ]


# -- attack 1: an analyst's one-column key ------------------------------------------------------------


def _one_column_key(home: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    request = tmp_path / "sex.yaml"
    request.write_text(
        yaml.safe_dump(
            {
                "dataset": "census-demo",
                "release_id": "near-raw",
                "mechanism": {"name": "ra", "params": {"qi": ["sex"], "sensitive": "occupation"}},
            }
        )
    )
    return cli(home, "release", str(request))


def test_a_request_protecting_fewer_keys_than_the_policy_is_refused_before_the_charge(tmp_path):
    home = tmp_path / "home"
    write_demo(home, rows=2000)
    r = _one_column_key(home, tmp_path)
    assert r.returncode == 2 and r.stderr.strip() == (
        "error: the request leaves key variables ['workclass', 'education', 'marital-status', 'relationship', 'race', "
        "'native-country', 'age'] of dataset 'census-demo' unprotected; its disclosure policy's key is ['workclass', "
        "'education', 'marital-status', 'relationship', 'race', 'sex', 'native-country', 'age'], and a release protects "
        "every one of them (more is allowed). Add them to qi, or add a step that protects them (sdc: recode, suppress, ...)."
    )
    assert charges(home) == [] and not (home / "releases").exists()


def test_weakened_a_policy_keyed_on_one_column_lets_the_near_raw_table_out(tmp_path):
    """The same request where the steward's key is only ``sex`` (everything else publishable, no
    threshold): the attack of the finding succeeds, every released row equal to a registered row on
    every column but ``sex``. The policy above is what stops it."""
    home = tmp_path / "home"
    write_demo(home, rows=2000)
    registry = Registry(home)
    columns = list(registry.get("census-demo").schema.columns)
    registry.set_policy("census-demo", open_policy(columns, ["sex"], (), ("occupation",)))
    r = _one_column_key(home, tmp_path)
    assert r.returncode == 0, r.stderr
    released = pd.read_parquet(home / "releases" / "census-demo" / "near-raw" / "data.parquet")
    snapshot = registry.load(registry.get("census-demo"))
    rest = [c for c in columns if c != "sex"]
    assert released[rest].merge(snapshot[rest].drop_duplicates(), how="left", indicator=True)["_merge"].eq("both").all()


# -- attack 2: a hospital table --------------------------------------------------------------------------


def hospital(n: int = 4000, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "patient_id": [f"P{i:06d}" for i in rng.permutation(n)],
            "age": rng.integers(0, 100, n),
            "sex": rng.choice(["F", "M"], n),
            "zip": rng.choice([f"{z:05d}" for z in range(300)], n),
            "diagnosis": rng.choice([f"D{d:02d}" for d in range(20)], n),
            "length_of_stay": rng.integers(1, 30, n),
            "cost": rng.gamma(2.0, 3000.0, n).round(2),
        }
    )


HOSPITAL_POLICY = {"identifiers": ["patient_id"], "keys": {"categorical": ["sex", "zip"], "numeric": ["age"]},
                   "sensitive": ["diagnosis"], "publishable": ["length_of_stay"],
                   "thresholds": {"k": 3, "risk": {"above": 0.34, "max_share": 0.0}},
                   "hierarchies": {"age": {"breaks": [10, 20, 30, 40, 50, 60, 70, 80, 90]},
                                   "zip": [{f"{z:05d}": f"{z // 100}xx" for z in range(300)}]}}  # fmt: skip


def _hospital(home: Path, doc: dict = HOSPITAL_POLICY) -> pd.DataFrame:
    frame = hospital()
    register(home, frame, "hospital", policy=policy.parse(doc, "test policy"))
    return frame


def _release(home: Path, mechanism: dict, release_id: str = "r1", seed: int = 5) -> dict:
    return pipeline.release(
        Home(home), parse({"release_id": release_id, "dataset": "hospital", "mechanism": mechanism, "seed": seed})
    )


RA_HOSPITAL = {"name": "ra", "params": {"qi": ["sex", "zip", "age"], "sensitive": "diagnosis"}}


def test_a_table_that_misses_the_thresholds_is_not_published_and_the_ledger_says_why(home, test_mode):
    _hospital(home)
    with pytest.raises(UserError) as caught:  # the CLI's exit 2
        _release(home, RA_HOSPITAL)
    said = (
        "release 'r1' of dataset 'hospital' was not published: the released table would not meet its disclosure "
        "policy (k-anonymity on the key (k ≥ 3); no record with individual risk above 0.34). Protect more (coarser "
        "recoding, local suppression to the policy's k, a wider swap) and release again under a new release_id; "
        "the data steward's internal report has the figures."
    )
    assert str(caught.value) == said
    assert not (home / "releases" / "hospital").exists()
    reserved, failed = [e for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id == "r1"]
    assert (reserved.status, failed.status) == (RESERVED, FAILED)
    assert json.loads(failed.detail) == {"reason": f"ThresholdMissed: {said}"}  # public words, no figure of the table
    internal = json.loads((home / "sdc-reports" / "hospital" / "r1" / "internal.json").read_text())
    assert internal["thresholds_missed"] == ["k-anonymity on the key (k ≥ 3)", "no record with individual risk above 0.34"]
    assert internal["after"]["k"] == 1 and internal["after"]["records_f_below_3"] > 3000  # the steward sees how far


def test_weakened_without_thresholds_the_hospital_release_is_published_with_most_records_unique(home, test_mode):
    _hospital(home, HOSPITAL_POLICY | {"thresholds": {"k": None}})
    summary = _release(home, RA_HOSPITAL)
    manifest = json.loads((Path(summary["folder"]) / "manifest.json").read_text())
    assert manifest["sdc_report"]["records_f_below_2"] > 3000  # what the finding published


def test_a_chain_meets_the_hospital_policy_and_publishes_no_identifier(home, test_mode):
    frame = _hospital(home)
    summary = _release(
        home,
        {
            "name": "sdc",
            "params": {
                "steps": [
                    {"method": "recode", "columns": ["age", "zip"]},
                    {"method": "ra", "qi": ["sex", "zip", "age"], "sensitive": "diagnosis"},
                    {"method": "suppress"},
                ]
            },
        },
    )
    folder = Path(summary["folder"])
    released = pd.read_parquet(folder / "data.parquet")
    assert list(released.columns) == ["age", "sex", "zip", "diagnosis", "length_of_stay"]  # no patient_id, no cost
    published = "".join(p.read_text(errors="ignore") for p in folder.iterdir() if p.suffix in (".csv", ".md", ".json"))
    assert not any(pid in published for pid in frame["patient_id"].head(200))
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["sdc_report"]["k"] >= 3 and manifest["sdc_report"]["keys"] == ["sex", "zip", "age"]


def test_weakened_a_policy_that_publishes_the_identifier_lets_it_out(home, test_mode):
    frame = _hospital(
        home, HOSPITAL_POLICY | {"identifiers": [], "publishable": ["length_of_stay", "patient_id"], "thresholds": {"k": None}}
    )
    released = pd.read_parquet(Path(_release(home, RA_HOSPITAL)["folder"]) / "data.parquet")
    assert sorted(released["patient_id"]) == sorted(frame["patient_id"])


def test_a_swap_of_the_numeric_key_alone_is_refused_and_mews_in_a_chain_meets_the_policy(home, test_mode):
    _hospital(home)
    mews = {"swap_set": ["age"], "t_range": [0.05, 0.5], "width_units": "sd"}
    with pytest.raises(SpecError, match=r"leaves key variables \['sex', 'zip'\]"):
        _release(home, {"name": "mews", "params": mews})
    summary = _release(
        home,
        {
            "name": "sdc",
            "params": {"steps": [{"method": "recode", "columns": ["zip"]}, {"method": "mews", **mews}, {"method": "suppress"}]},
        },
        "r2",
    )
    assert summary["headline"]["k"] >= 3


# -- every mechanism, option and chain: the policy's columns only, rows shuffled ------------------------


def table(n: int = 600, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "id": np.arange(n) + 1000,
            "a": rng.choice(list("pqrs"), n),
            "b": rng.choice(list("uvw"), n),
            "x": rng.normal(50, 10, n).round(1),
            "s": rng.choice(["s1", "s2", "s3"], n),
            "seq": np.arange(n),
            "y": rng.normal(0, 1, n),
            "secret": rng.normal(0, 1, n),
        }
    )


CATEGORICAL = {
    "identifiers": ["id"],
    "keys": {"categorical": ["a", "b"], "numeric": ["x"]},
    "sensitive": ["s"],
    "publishable": ["seq", "y"],
    "thresholds": {"k": None},
    "hierarchies": {"a": [{"p": "pq", "q": "pq", "r": "rs", "s": "rs"}], "x": {"breaks": [40, 50, 60]}},
}
NUMERIC = CATEGORICAL | {"keys": {"numeric": ["x"]}, "publishable": ["a", "b", "seq", "y"], "hierarchies": {}}
REQUESTS = {  # id -> (policy, mechanism)
    "ra": (CATEGORICAL, {"name": "ra", "params": {"qi": ["a", "b", "x"], "sensitive": "s"}}),
    "ra-enhanced": (CATEGORICAL, {"name": "ra", "params": {"qi": ["a", "b", "x", "y"], "sensitive": "s", "k": 2}}),
    "ra-entropy": (CATEGORICAL, {"name": "ra", "params": {"qi": ["a", "b", "x"], "sensitive": "s", "p": "entropy"}}),
    "mews-hidden": (NUMERIC, {"name": "mews", "params": {"swap_set": ["x", "y"], "t_range": [0.5, 2.0]}}),
    "mews-suppress": (NUMERIC, {"name": "mews", "params": {"swap_set": ["x", "y"], "widths": 0.3, "singletons": "suppress"}}),
    "mews-eds": (NUMERIC, {"name": "mews", "params": {"swap_set": ["x"], "widths": 0.5, "others": "eds", "k": 5}}),
    "mews-block": (NUMERIC, {"name": "mews", "params": {"swap_set": ["x", "y"], "widths": 0.5, "swap_mode": "block"}}),
    "meds": (NUMERIC, {"name": "meds", "params": {"swap_set": ["x", "y"], "k": 10}}),
    "eds": (NUMERIC, {"name": "eds", "params": {"swap_set": ["x"], "k": 10, "swap_mode": "pairs"}}),
    "recode-ra-suppress": (CATEGORICAL, {"name": "sdc", "params": {"steps": [
        {"method": "recode", "columns": ["a", "x"]}, {"method": "ra", "qi": ["a", "b"], "sensitive": "s"}, {"method": "suppress"}]}}),
    "topcode-pram-suppress": (CATEGORICAL, {"name": "sdc", "params": {"steps": [
        {"method": "topcode", "column": "x", "top": 60, "bottom": 40}, {"method": "pram", "columns": ["a", "b"], "keep": 0.7},
        {"method": "suppress", "k": 4}]}}),
    "micro-noise-pram": (CATEGORICAL, {"name": "sdc", "params": {"steps": [
        {"method": "microaggregate", "columns": ["x"], "k": 3}, {"method": "noise", "columns": ["y"], "level": 0.2},
        {"method": "pram", "columns": ["a", "b"]}]}}),
    "mews-then-suppress": (CATEGORICAL, {"name": "sdc", "params": {"steps": [
        {"method": "mews", "swap_set": ["x", "y"], "widths": 0.5}, {"method": "suppress", "k": 2}]}}),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(REQUESTS))
def test_every_sdc_release_holds_only_the_policys_columns_in_shuffled_order(home, test_mode, case):
    doc, mechanism = REQUESTS[case]
    frame = table()
    register(home, frame, "t", policy=policy.parse(doc, "test policy"))
    summary = pipeline.release(Home(home), parse({"release_id": "r", "dataset": "t", "mechanism": mechanism, "seed": 9}))
    released = pd.read_parquet(Path(summary["folder"]) / "data.parquet")
    assert list(released.columns) == ["a", "b", "x", "s", "seq", "y"]  # id (identifier) and secret (unnamed) dropped
    # the rows' order tells nothing of the input's: seq (the input position) is uncorrelated with the release's
    rho = np.corrcoef(np.arange(len(released)), released["seq"].to_numpy(float))[0, 1]
    assert abs(rho) < 0.2, rho  # |rho| of a random order of 600 rows has sd 0.04: a false alarm < 1e-6
    text = (Path(summary["folder"]) / "data.csv").read_text()
    assert not any(f",{v}," in text or text.startswith(f"{v},") for v in frame["id"].astype(str).head(50))


# -- thresholds and the registered key ----------------------------------------------------------------------


def test_l_diversity_and_household_thresholds_block(home, test_mode):
    frame = table()
    frame["s"] = np.where(frame["a"] == "p", "s1", frame["s"])  # every record keyed a = p holds one sensitive value
    frame["hh"] = np.arange(len(frame)) // 3
    doc = CATEGORICAL | {
        "keys": {"categorical": ["a"]},
        "publishable": ["b", "x", "seq", "y"],
        "cluster": "hh",
        "thresholds": {"k": 3, "l": 2, "household_risk": 0.9},
        "hierarchies": {},
    }
    register(home, frame, "t", policy=policy.parse(doc, "test policy"))
    request = {
        "release_id": "r",
        "dataset": "t",
        "seed": 3,
        "mechanism": {"name": "sdc", "params": {"steps": [{"method": "pram", "columns": ["b"]}, {"method": "suppress"}]}},
    }
    with pytest.raises(Exception, match=r"l-diversity of the sensitive variables \(l ≥ 2\)") as caught:
        pipeline.release(Home(home), parse(request))
    assert "k-anonymity" not in str(caught.value) and "household" not in str(caught.value)
    doc["thresholds"] = {"k": 3, "household_risk": 0.01}  # three members of cells of 139+: about 0.021 each
    Registry(home).set_policy("t", policy.parse(doc, "test policy"))
    with pytest.raises(Exception, match=r"\(household risk at most 0.01\)"):
        pipeline.release(Home(home), parse(request | {"release_id": "r2"}))
    doc["thresholds"] = {"k": 3}
    Registry(home).set_policy("t", policy.parse(doc, "test policy"))
    summary = pipeline.release(Home(home), parse(request | {"release_id": "r3"}))
    released = pd.read_parquet(Path(summary["folder"]) / "data.parquet")
    # households stay together under fresh labels 1..H, none of them the registered ids' order
    assert sorted(released.groupby("hh").size().unique()) == [3] and set(released["hh"]) == set(range(1, 201))
    assert not (released.sort_values("seq")["hh"].to_numpy() == np.arange(len(frame)) // 3 + 1).all()


def test_the_risk_is_measured_on_the_policys_key_whatever_the_request_protects(home, test_mode):
    """The finding's report used the analyst's one-column key; now it uses the steward's."""
    register(home, table(), "t", policy=policy.parse(CATEGORICAL, "test policy"))
    summary = pipeline.release(
        Home(home),
        parse(
            {
                "release_id": "r",
                "dataset": "t",
                "seed": 2,
                "mechanism": {"name": "ra", "params": {"qi": ["a", "b", "x", "y"], "sensitive": "s"}},
            }
        ),
    )
    report = json.loads((Path(summary["folder"]) / "manifest.json").read_text())["sdc_report"]
    assert (report["keys"], report["sensitive"], report["keys_from"]) == (["a", "b", "x"], ["s"], "policy")


def test_a_release_whose_policy_changed_after_its_check_is_refused(home, test_mode):
    register(home, table(), "t", policy=policy.parse(CATEGORICAL, "test policy"))
    store = Home(home)
    release, _ = pipeline.prepare(store, parse({"dataset": "t", "mechanism": REQUESTS["ra"][1], "seed": 1}))
    Registry(home).set_policy("t", policy.parse(CATEGORICAL | {"thresholds": {"k": 5}}, "test policy"))
    with pytest.raises(Exception, match="the disclosure policy of dataset 't' changed since the request was checked"):
        pipeline.load(store, release)


def test_an_sdc_dataset_without_a_policy_releases_nothing(home, test_mode):
    frame = table()
    (home / "data").mkdir(exist_ok=True)
    frame.to_csv(home / "data" / "t.csv", index=False)
    Registry(home).add("t", "t.csv", "csv", Unit("record"), "sdc", root=home / "data")
    with pytest.raises(
        SpecError,
        match=r"dataset 't' has no disclosure policy, so no SDC release of it is possible; its "
        r"data steward sets one with: privrelease dataset policy t --policy FILE\.",
    ):
        pipeline.release(Home(home), parse({"dataset": "t", "mechanism": REQUESTS["ra"][1]}))
    assert charges(home) == []


@pytest.mark.parametrize(
    "mechanism,message",
    [
        (
            {"name": "ra", "params": {"qi": ["a", "b", "x", "id"], "sensitive": "s"}},
            "['id'] of dataset 't' is a direct identifier in its disclosure policy: it is never published, so no release can name it.",
        ),
        (
            {"name": "ra", "params": {"qi": ["a", "b", "x"], "sensitive": "secret"}},
            "['secret'] of dataset 't' is not named by its disclosure policy, so it is never published",
        ),
        (
            {"name": "sdc", "params": {"steps": [{"method": "recode", "columns": ["b"]}, {"method": "suppress"}]}},
            "recode: the disclosure policy has no hierarchy for ['b']",
        ),
        (  # a typo is named as one, not blamed on the hierarchies (issue #54)
            {"name": "sdc", "params": {"steps": [{"method": "recode", "columns": ["aa"]}, {"method": "suppress"}]}},
            "recode: the disclosure policy names no column 'aa' (a typo?); recode takes its key variables with a hierarchy",
        ),
        (
            {"name": "sdc", "params": {"steps": [{"method": "recode", "columns": ["a"], "level": 2}, {"method": "suppress"}]}},
            "recode: 'a' has 1 hierarchy levels, not 2",
        ),
        (
            {
                "name": "sdc",
                "params": {
                    "steps": [
                        {"method": "recode", "columns": ["x"]},
                        {"method": "microaggregate", "columns": ["x"]},
                        {"method": "suppress"},
                    ]
                },
            },
            "step 2 (microaggregate) needs ['x'] numeric, but an earlier recode step made them intervals",
        ),
        (
            {
                "name": "sdc",
                "params": {
                    "steps": [{"method": "ra", "qi": ["a"], "sensitive": "s"}, {"method": "eds", "swap_set": ["x"], "k": 5}]
                },
            },
            "a chain applies at most one of ra, mews, meds, eds",
        ),
        ({"name": "sdc", "params": {"steps": [{"method": "topcode", "column": "x"}]}}, "topcode needs top, bottom or both"),
        ({"name": "sdc", "params": {"steps": []}}, "steps: List should have at least 1 item"),
    ],
    ids=["identifier", "unnamed", "no-hierarchy", "typo", "level", "recoded-then-numeric", "two-papers", "topcode", "empty"],
)
def test_requests_the_policy_or_the_chain_refuses_are_refused_before_the_charge(home, mechanism, message):
    register(home, table(), "t", policy=policy.parse(CATEGORICAL, "test policy"))
    with pytest.raises(UserError) as caught:
        pipeline.release(Home(home), parse({"dataset": "t", "mechanism": mechanism}))
    assert message in str(caught.value)
    assert charges(home) == [] and not (home / "releases").exists()


# -- the steward's policy: errors, the command line, the ledger -------------------------------------------


BAD_POLICIES = [
    ({"keys": {}}, "keys: name at least one key variable"),
    ({"keys": {"categorical": ["a"]}, "sensitive": ["a"]}, "column 'a' is named twice (keys.categorical and sensitive)"),
    ({"keys": {"categorical": ["a"]}, "hierarchies": {"b": [{"u": "uv"}]}}, "hierarchies: 'b' is not a key variable"),
    ({"keys": {"categorical": ["a"]}, "hierarchies": {"a": {"breaks": [1, 2]}}}, "hierarchies: 'a' needs levels"),
    ({"keys": {"numeric": ["x"]}, "hierarchies": {"x": {"breaks": [2, 1]}}}, "breaks must be finite and strictly increasing"),
    ({"keys": {"categorical": ["a"]}, "thresholds": {"household_risk": 0.5}}, "household_risk needs cluster"),
    ({"keys": {"categorical": ["a"]}, "thresholds": {"l": 2}}, "thresholds: l needs at least one sensitive variable"),
    ({"keys": {"categorical": ["a"]}, "thresholds": {"k": 1}}, "thresholds.k: Input should be greater than or equal to 2"),
    ({"keys": {"categorical": ["a"]}, "colour": "red"}, "colour: Extra inputs are not permitted"),
    (["a"], "is not a mapping"),
    ({"keys": {"numeric": ["x"]}, "hierarchies": {"x": [1, 2]}},
     "hierarchies: 'x': a numeric key's hierarchy is {breaks: [b0, b1, ...]}, a categorical key's a list"),
]  # fmt: skip


def test_a_categorical_hierarchy_read_as_numbers_is_kept_as_text():
    """YAML reads ``1: low`` as a number; the recoding compares text, so the level is kept as text."""
    rules = policy.parse(yaml.safe_load("keys: {categorical: [grade]}\nhierarchies: {grade: [{1: low, 2: low, 3: high}]}"), "p")
    frame = pd.DataFrame({"grade": [1, 2, 3, 4]})
    out, _ = methods.recode(frame, methods.Recode(method="recode", columns=["grade"]), rules)
    assert list(out["grade"]) == ["low", "low", "high", "4"]


@pytest.mark.parametrize("doc,message", BAD_POLICIES)
def test_a_policy_the_steward_got_wrong_is_refused_with_what_to_change(doc, message):
    with pytest.raises(SpecError) as caught:
        policy.parse(doc, "--policy 'p.yaml'")
    assert message in str(caught.value) and str(caught.value).startswith("--policy 'p.yaml'")


@pytest.mark.parametrize(
    "doc,message",
    [
        ({"keys": {"categorical": ["postcode"]}}, "names keys.categorical ['postcode'], which the registered schema lacks"),
        ({"keys": {"numeric": ["a"]}}, "names 'a' as keys.numeric, but it is registered as string; keys.numeric must be numeric"),
        ({"keys": {"categorical": ["a"]}, "weight": "s"}, "names 's' as weight, but it is registered as string"),
    ],
)
def test_a_policy_that_does_not_fit_the_schema_registers_nothing(tmp_path, doc, message):
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    table().to_csv(home / "data" / "t.csv", index=False)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    r = cli(
        home,
        "dataset",
        "add",
        "t",
        "--source",
        str(home / "data" / "t.csv"),
        "--format",
        "csv",
        "--unit",
        "record",
        "--purpose",
        "sdc",
        "--policy",
        str(tmp_path / "p.yaml"),
    )
    assert r.returncode == 2 and message in r.stderr and r.stderr.count("\n") == 1
    assert cli(home, "dataset", "list").stdout.startswith("no datasets registered")


def test_the_steward_registers_shows_and_changes_a_policy_each_change_on_the_ledger(tmp_path):
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    frame = table()
    frame.to_csv(home / "data" / "t.csv", index=False)
    doc = CATEGORICAL | {"identifiers": [], "publishable": ["seq", "y"]}  # id left out: registration says so
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    r = cli(
        home,
        "dataset",
        "add",
        "t",
        "--source",
        str(home / "data" / "t.csv"),
        "--format",
        "csv",
        "--unit",
        "record",
        "--purpose",
        "sdc",
        "--policy",
        str(tmp_path / "p.yaml"),
    )
    assert r.returncode == 0, r.stderr
    assert (
        "warning: column 'id' holds a different value in every row (an identifier?); the policy does not name it, "
        "so no release publishes it."
    ) in r.stdout
    assert "note: the disclosure policy does not name ['id', 'secret']; no release publishes them." in r.stdout
    assert "thresholds every release must meet: none (any table the methods produce is published)" in r.stdout
    shown = json.loads(cli(home, "dataset", "show", "t").stdout)
    assert shown["policy"]["keys"] == {"categorical": ["a", "b"], "numeric": ["x"]} and shown["policy_entry"] == 2
    (tmp_path / "p2.yaml").write_text(yaml.safe_dump(doc | {"publishable": ["seq", "y", "id"], "thresholds": {"k": 4}}))
    r = cli(home, "dataset", "policy", "t", "--policy", str(tmp_path / "p2.yaml"))
    assert r.returncode == 0 and r.stdout.startswith("dataset t: disclosure policy recorded as ledger entry #3")
    assert (
        "warning: column 'id' holds a different value in every row (an identifier?); the policy names it "
        "publishable, so a release publishes it."
    ) in r.stdout
    entries = Ledger(home / "privrelease.duckdb").entries()
    assert [e.status for e in entries] == ["registered", POLICY, POLICY] and entries[2].requested_by
    assert json.loads(entries[2].detail)["thresholds"]["k"] == 4
    assert cli(home, "ledger", "verify").returncode == 0
    history = cli(home, "ledger", "history").stdout.splitlines()
    assert " registered (by " in history[1] and " policy " in history[3]
    assert history[3].endswith("key=a,b,x thresholds: k=4 identifiers=0")
    assert json.loads(cli(home, "dataset", "show", "t").stdout)["policy_entry"] == 3
    r = cli(
        home,
        "dataset",
        "add",
        "d",
        "--source",
        str(home / "data" / "t.csv"),
        "--format",
        "csv",
        "--unit",
        "record",
        "--purpose",
        "dp",
        "--policy",
        str(tmp_path / "p2.yaml"),
    )
    assert r.returncode == 2 and "--policy is a disclosure policy for an sdc dataset" in r.stderr


def test_the_preview_says_what_public_values_tell(home):
    register(home, table(), "t", policy=policy.parse(CATEGORICAL | {"thresholds": {"k": 3, "l": 2}}, "test policy"))
    from privrelease.core.release import preview

    found = preview.preview(Home(home), parse({"dataset": "t", "mechanism": REQUESTS["recode-ra-suppress"][1]}))
    assert found["verdict"] == "admitted" and found["notes"] == [
        "published columns: ['a', 'b', 'x', 's', 'seq', 'y']; dropped: identifiers ['id'], columns the policy does not "
        "name ['secret']; rows shuffled.",
        "risk is measured on the policy's key ['a', 'b', 'x'] after the last step.",
        "k-anonymity on the key (k ≥ 3) holds by construction: the last step suppresses key values until every released "
        "key cell (a suppressed value a value of its own) holds that many records, so every person is compatible with "
        "at least that many released records given their true key.",
        "thresholds the released table must meet: k-anonymity on the key (k ≥ 3); l-diversity of the sensitive variables "
        "(l ≥ 2). Whether it does depends on the rows: a release that misses one is not published, and its failed ledger "
        "entry names the thresholds missed (never a figure of the table).",
    ]


# -- MEWS with suppression publishes nothing computed from the suppressed records (third review, finding 1) ---


def _outlier(value: tuple[float, float], n: int = 200) -> pd.DataFrame:
    rng = np.random.default_rng(4)
    frame = pd.DataFrame({"x": rng.normal(5, 1, n).round(4), "y": rng.normal(8, 1, n).round(4)})
    frame.loc[0, ["x", "y"]] = value  # alone in its cell at widths of 3 sd: suppressed
    return frame


def _solve(kept: np.ndarray, n: int, width: float, w: float) -> np.ndarray:
    """The suppressed value v from a width published in the data's units (w · sd of all n values)."""
    s1, s2, var = kept.sum(), (kept**2).sum(), (width / w) ** 2
    return np.roots([1 - 1 / n, -2 * s1 / n, s2 - s1**2 / n - (n - 1) * var])


def test_mews_with_suppression_publishes_the_same_figures_on_neighbouring_tables(tmp_path, test_mode):
    mews = {"name": "mews", "params": {"swap_set": ["x", "y"], "widths": 3.0, "singletons": "suppress"}}
    runs = []
    for name, value in (("d", (97.31, 71.4)), ("d2", (60.0, 40.0))):
        home = tmp_path / name
        rules = {"keys": {"numeric": ["x", "y"]}, "thresholds": {"k": None}}
        register(home, _outlier(value), "t", policy=policy.parse(rules, "test policy"))
        summary = pipeline.release(Home(home), parse({"release_id": "r", "dataset": "t", "mechanism": mews, "seed": 1}))
        manifest = json.loads((Path(summary["folder"]) / "manifest.json").read_text())
        report = (Path(summary["folder"]) / "report.md").read_text().split("## Disclosure risk")[0]
        runs.append((manifest["privacy"], report.split("| created |")[1].split("\n", 1)[1]))
    assert runs[0][0]["suppressed_tuples"] == runs[1][0]["suppressed_tuples"] == 1
    assert runs[0][0] == runs[1][0] and runs[0][1] == runs[1][1]  # the suppressed record moves no published figure
    assert runs[0][0]["widths"] == {"x": 3.0, "y": 3.0} and runs[0][0]["bound_units"] == "sd"


def test_weakened_widths_in_the_data_units_give_the_suppressed_record_back():
    """The finding's attack, on what was published before: w × the registered column's sd."""
    frame = _outlier((97.31, 71.4))
    for column, value in (("x", 97.31), ("y", 71.4)):
        width = 3.0 * frame[column].std(ddof=1)
        roots = _solve(frame[column].to_numpy()[1:], len(frame), width, 3.0)
        assert min(abs(roots - value)) < 1e-6


# -- an independent attack on the chain (each finding's attack, then the weakened variant it needs) --------


def people(n: int = 300, seed: int = 5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "ssn": [f"{i:09d}" for i in rng.permutation(n)],
            "sex": rng.choice(["F", "M"], n),
            "region": rng.choice(list("NESW"), n),
            "age": rng.integers(18, 80, n),
            "income": rng.normal(40_000, 10_000, n).round(0),
            "disease": rng.choice(["d1", "d2", "d3"], n),
            "hh": np.arange(n) // 2,
            "w": rng.uniform(1, 5, n).round(2),
        }
    )
    frame.loc[17, "income"] = 999_999.0  # alone: suppressed or top-coded
    return frame


PEOPLE = {"identifiers": ["ssn"], "keys": {"categorical": ["sex", "region"], "numeric": ["age"]}, "sensitive": ["disease"],
          "publishable": ["income"], "weight": "w", "cluster": "hh", "thresholds": {"k": 3}}  # fmt: skip


def _people_release(home: Path, frame: pd.DataFrame, steps: list, doc: dict = PEOPLE) -> dict:
    register(home, frame, "p", policy=policy.parse(doc, "test policy"))
    summary = pipeline.release(
        Home(home),
        parse({"release_id": "r", "dataset": "p", "seed": 6, "mechanism": {"name": "sdc", "params": {"steps": steps}}}),
    )
    return json.loads((Path(summary["folder"]) / "manifest.json").read_text())


MEWS_THEN_SUPPRESS = [{"method": "mews", "swap_set": ["income", "age"], "widths": {"income": 2, "age": 100},
                       "singletons": "suppress"}, {"method": "suppress"}]  # fmt: skip


def test_a_paper_step_in_a_chain_publishes_its_parameters_only(tmp_path, test_mode):
    """Finding: the MEWS step's widths (w × the sd of the column with its suppressed record) and its
    bound (capped at a range a later top-coding hides) gave the suppressed and the top-coded income
    back. In a chain a paper's step states its parameters; neighbours differing in the suppressed
    record publish the same manifest but for the released table's own figures."""
    found = []
    for name, income in (("a", 999_999.0), ("b", 123_456.0)):
        frame = people()
        frame.loc[17, "income"] = income
        manifest = _people_release(tmp_path / name, frame, MEWS_THEN_SUPPRESS)
        found.append(manifest["privacy"]["steps"])
    assert found[0][0] == found[1][0] == {"method": "mews", **_mews_params(MEWS_THEN_SUPPRESS[0])}
    topcoded = _people_release(
        tmp_path / "c",
        people(),
        [
            {"method": "mews", "swap_set": ["income"], "widths": 1e9, "width_units": "absolute"},
            {"method": "topcode", "column": "income", "top": 80_000},
            {"method": "suppress"},
        ],
    )
    assert "max_change_bound" not in json.dumps(topcoded) and "p_known" not in json.dumps(topcoded)


def _mews_params(step: dict) -> dict:
    from privrelease.core.mechanisms import swapping

    return swapping.MEWSParams.model_validate({k: v for k, v in step.items() if k != "method"}).model_dump(mode="json")


def test_weakened_the_paper_steps_own_figures_give_the_top_coded_value_back(test_mode):
    """What the step published before: MEWS's bound on the table before top-coding, capped at that table's
    range, plus the released minimum, is the maximum that top-coding hid."""
    from privrelease.core.mechanisms import swapping

    frame = people()
    own = swapping.MEWSParams(swap_set=["income"], widths=1e9, width_units="absolute")
    result = planned_run(swapping.MEWS, frame, own, noise.generator(6))
    assert result.privacy["max_change_bound"]["income"] + frame["income"].min() == 999_999.0


def test_ra_in_a_chain_publishes_no_pa_and_weakened_pa_gives_an_exact_count(tmp_path, test_mode):
    """Finding: top-code age to two values, run RA on it, and Pa = e^H of that split: with N public, an exact
    count of people at or over an age the release itself never shows (its ages are moved)."""
    steps = [
        {"method": "topcode", "column": "age", "top": 60, "bottom": 59.5},
        {"method": "ra", "qi": ["age", "sex", "region"], "sensitive": "disease"},
        {"method": "suppress"},
    ]
    manifest = _people_release(tmp_path, people(), steps)
    assert manifest["privacy"]["steps"][1] == {
        "method": "ra",
        "qi": ["age", "sex", "region"],
        "sensitive": "disease",
        "p": "uniform",
        "k": None,
    }
    assert "pa" not in json.dumps(manifest["privacy"]).replace('"p"', "")
    from privrelease.core.mechanisms import ra

    binary = people().assign(age=lambda f: f["age"].clip(59.5, 60))
    pa = planned_run(ra, binary, ra.Params(qi=["age"], sensitive="disease"), noise.generator(6)).privacy["pa"]
    share = [q for q in np.linspace(0.001, 0.5, 200_000) if abs(np.exp(-q * np.log(q) - (1 - q) * np.log(1 - q)) - pa) < 1e-5]
    assert round(min(share) * 300) == int((people()["age"] >= 60).sum()) or round((1 - min(share)) * 300) == int(
        (people()["age"] >= 60).sum()
    )


@pytest.mark.parametrize("column", ["hh", "w"])
def test_no_step_may_name_the_weight_or_the_cluster(home, column):
    """Finding: a top-coding of the registered household ids split the records by id, and ids follow the
    input order. The cluster is relabelled before any step, and no request may name it or the weight."""
    register(home, people(), "p", policy=policy.parse(PEOPLE, "test policy"))
    request = {
        "dataset": "p",
        "mechanism": {
            "name": "sdc",
            "params": {"steps": [{"method": "topcode", "column": column, "top": 100}, {"method": "suppress"}]},
        },
    }
    with pytest.raises(
        SpecError,
        match=rf"\['{column}'\] of dataset 'p' is the weight or cluster id of its disclosure "
        "policy: it is published as the policy says",
    ):
        pipeline.release(Home(home), parse(request))
    assert charges(home) == []


def test_the_cluster_ids_no_step_sees_are_fresh_labels(home, test_mode):
    from privrelease.core.sdc import enforce

    frame = people()
    prepared_ = enforce.prepare(frame, policy.parse(PEOPLE, "p"), noise.generator(3))
    registered = frame["hh"].to_numpy()[prepared_.attrs["input_rows"].order]
    relabelled = prepared_["hh"].to_numpy()
    assert (pd.Series(relabelled).groupby(registered).nunique() == 1).all()  # households kept together
    assert abs(np.corrcoef(registered, relabelled)[0, 1]) < 0.25  # labels unrelated to the registered ids


def test_a_table_a_swap_suppressed_whole_is_an_empty_release_not_an_internal_error(tmp_path, test_mode):
    """Finding: MEWS suppressing every row crashed the internal report, an internal error only tables
    without two records sharing their swapped values gave (an oracle). Now the release goes on as for any
    other table: here, one that kept no record, published empty, the internal report written."""
    steps = [
        {"method": "mews", "swap_set": ["income", "age"], "widths": 1e-3, "width_units": "absolute", "singletons": "suppress"},
        {"method": "pram", "columns": ["sex", "region"]},
    ]
    manifest = _people_release(tmp_path, people(), steps)
    assert manifest["sdc_report"]["records"] == 0
    internal = (tmp_path / "sdc-reports" / "p" / "r" / "internal.md").read_text()
    assert "pMSE: not computed (the release kept no row)" in internal


def test_suppress_is_the_last_step(home):
    register(home, people(), "p", policy=policy.parse(PEOPLE, "test policy"))
    request = {
        "dataset": "p",
        "mechanism": {"name": "sdc", "params": {"steps": [{"method": "suppress"}, {"method": "pram", "columns": ["sex"]}]}},
    }
    with pytest.raises(SpecError, match="suppress is the last step: a later step would undo the k-anonymity it reaches"):
        pipeline.release(Home(home), parse(request))


# -- a second independent attack on the chain, and the weakened variant each fix needs ------------------------


def test_a_policy_may_not_key_on_a_column_with_missing_values(home):
    """Finding: a missing key value matches every value, so two records missing every key made 48 unique
    records pass k = 3, l = 2 and the risk limit untouched. Keys are complete columns now."""
    frame = people(50)
    frame["zip"] = [f"z{i}" for i in range(50)]
    frame.loc[[0, 1], ["zip", "sex", "age"]] = None
    doc = PEOPLE | {"keys": {"categorical": ["zip", "sex"], "numeric": ["age"]}, "thresholds": {"k": 3, "l": 2}}
    with pytest.raises(SpecError, match=r"names key variables \['zip', 'sex', 'age'\] that may be empty"):
        register(home, frame, "p", policy=policy.parse(doc, "test policy"))
    assert Registry(home).list() == []
    # weakened: measured as sdcMicro's freqCalc measures it (a missing value matches every value), the raw table met
    # k = 3 and l = 2
    from privrelease.core.sdc import risk

    said = risk.disclosure(frame, ["zip", "sex", "age"], ["disease"], count="freqcalc")
    assert said["k"] == 3 and said["l_min"] >= 2 and frame["zip"].iloc[2:].is_unique


def test_a_weight_that_is_not_positive_is_refused_and_unreadable_figures_fail_closed(home, tmp_path):
    """Finding: weights of −1 made every risk −inf, and no threshold compares above −inf."""
    frame = people(50).assign(w=-1.0)
    with pytest.raises(Exception, match=r"the weight column 'w' holds 50 values that are not positive"):
        register(home, frame, "p", policy=policy.parse(PEOPLE, "test policy"))
    other = tmp_path / "h2"
    frame = people(50)
    frame.loc[3, "w"] = 0.0
    register(other, frame, "p", policy=policy.parse(PEOPLE | {"weight": None}, "test policy"))
    with pytest.raises(Exception, match=r"dataset 'p': the weight column 'w' holds 1 values that are not positive"):
        Registry(other).set_policy("p", policy.parse(PEOPLE, "test policy"))
    from privrelease.core.sdc import enforce

    figures = {"records": 50, "k": 1, "global_risk": -math.inf, "records_risk_above": {"above": 0.2, "records": 0}}
    rules = policy.parse(PEOPLE | {"thresholds": {"k": None, "risk": {"above": 0.2, "max_share": 0}, "global_risk": 0.05}}, "p")
    assert enforce.missed(figures, rules) == ["no record with individual risk above 0.2", "global risk at most 0.05"]


def test_microaggregating_a_key_then_suppressing_is_refused(home, test_mode):
    register(home, people(40), "p", policy=policy.parse(PEOPLE, "test policy"))
    request = {
        "dataset": "p",
        "mechanism": {
            "name": "sdc",
            "params": {"steps": [{"method": "microaggregate", "columns": ["age"], "k": 3}, {"method": "suppress"}]},
        },
    }
    with pytest.raises(UserError, match=r"microaggregate then suppress: \['age'\] are key variables, and a group mean"):
        pipeline.release(Home(home), parse(request))
    assert charges(home) == []


def test_weakened_suppressed_group_means_are_told_by_their_missing_occurrences(test_mode):
    """The finding's attack on what the chain published: group sizes follow from N and k, so a mean seen
    fewer than k times in the release is a suppressed member's value."""
    frame = people(40)
    rules = policy.parse(PEOPLE, "p")
    aggregated, _ = methods.microaggregate(frame, methods.Microaggregate(method="microaggregate", columns=["age"], k=3))
    released, said = methods.suppress(aggregated, methods.Suppress(method="suppress"), rules)
    hidden = aggregated["age"][released["age"].isna()]
    seen = released["age"].dropna().round(6).value_counts()
    told = {v for v in aggregated["age"].round(6).unique() if seen.get(v, 0) < 3}
    assert said["suppressed_by_column"]["age"] > 0 and told & set(hidden.round(6))


@pytest.mark.parametrize(
    "doc,step,message",
    [
        (
            PEOPLE,
            {"method": "eds", "swap_set": ["age"], "k": 4, "others": "eds"},
            "eds: others: eds would rank-swap the weight or cluster id ['hh', 'w']",
        ),
        (
            PEOPLE | {"weight": None, "cluster": None, "publishable": ["income", "hh", "w"]},
            {"method": "mews", "swap_set": ["age"], "widths": 1.0, "others": "eds", "k": 4},
            "mews: others: eds rank-swaps every numeric column outside the swap set, and ['income'] may be empty",
        ),
        (PEOPLE, {"method": "microaggregate", "columns": ["age"], "k": 50}, "microaggregate: k = 50 is more than the 40 records"),
        (PEOPLE, {"method": "suppress", "k": 41}, "suppress: k = 41 is more than the 40 records"),
    ],
)
def test_steps_a_registration_rules_out_are_refused_before_the_charge(home, doc, step, message):
    frame = people(40)
    frame.loc[5, "income"] = None  # income is nullable in the registered schema
    register(home, frame, "p", policy=policy.parse(doc, "test policy"))
    steps = [step] if step["method"] in ("microaggregate", "suppress") else [step, {"method": "suppress"}]
    if step["method"] == "microaggregate":  # the key needs a step that protects it besides
        steps = [{"method": "pram", "columns": ["sex", "region"]}, step]
    request = {"dataset": "p", "mechanism": {"name": "sdc", "params": {"steps": steps}}}
    with pytest.raises(SpecError) as caught:
        pipeline.release(Home(home), parse(request))
    assert message in str(caught.value) and charges(home) == []


def test_records_without_a_household_are_their_own():
    from privrelease.core.sdc import risk

    r = np.array([0.5, 0.5, 0.5, 0.5])
    assert list(risk.household_risk(r, pd.Series([1, 1, None, None]))) == pytest.approx([0.75, 0.75, 0.5, 0.5])


def test_the_policy_commands_refuse_what_a_steward_typed_wrong(tmp_path):
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    frame = table()
    frame.to_csv(home / "data" / "t.csv", index=False)
    assert (
        cli(
            home,
            "dataset",
            "add",
            "d",
            "--source",
            str(home / "data" / "t.csv"),
            "--format",
            "csv",
            "--unit",
            "record",
            "--purpose",
            "dp",
        ).returncode
        == 0
    )
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(CATEGORICAL))
    (tmp_path / "bad.yaml").write_text("keys: [unclosed\n")
    (tmp_path / "weighted.yaml").write_text(yaml.safe_dump(CATEGORICAL | {"weight": "y", "publishable": ["seq"]}))
    said = {
        (
            "dataset",
            "policy",
            "d",
            "--policy",
            str(tmp_path / "p.yaml"),
        ): "error: dataset 'd' is registered for dp releases; a disclosure policy is for an sdc dataset.",
        ("dataset", "policy", "nosuch", "--policy", str(tmp_path / "p.yaml")): "error: dataset 'nosuch' is not registered;",
        (
            "dataset",
            "policy",
            "d",
            "--policy",
            str(tmp_path / "missing.yaml"),
        ): f"error: --policy '{tmp_path / 'missing.yaml'}' is not a file.",
        (
            "dataset",
            "policy",
            "d",
            "--policy",
            str(tmp_path / "bad.yaml"),
        ): "error: --policy 'bad.yaml' is not valid YAML or JSON at line 2, column 1: expected ',' or ']', but got",
    }
    for args, message in said.items():
        r = cli(home, *args)
        assert r.returncode == 2 and r.stderr.startswith(message) and "Traceback" not in r.stderr, (args, r.stderr)
    frame.assign(y=frame["y"].where(frame.index > 0)).to_csv(home / "data" / "w.csv", index=False)
    r = cli(
        home,
        "dataset",
        "add",
        "w",
        "--source",
        str(home / "data" / "w.csv"),
        "--format",
        "csv",
        "--unit",
        "record",
        "--purpose",
        "sdc",
        "--policy",
        str(tmp_path / "weighted.yaml"),
    )
    assert r.returncode == 2 and "the weight column 'y' may be empty (nullable); every record needs its weight." in r.stderr
    assert [e.dataset for e in Ledger(home / "privrelease.duckdb").entries()] == ["d"]  # only d's registration
