"""The UI's forms (flows/forms.py) build the request a request file gives: each alternative a form
offers in place of a mapping or a union reaches the mechanism as that mechanism's parameter, and a
refusal fails the run with one line naming what to change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.datasets.demo import write_demo
from core.datasets.registry import Registry
from core.ledger.ledger import Ledger
from tests.helpers import open_policy


@pytest.fixture
def demo(home: Path) -> Path:
    write_demo(home, rows=2000)
    return home


def _manifest(summary: dict) -> dict:
    return json.loads((Path(summary["folder"]) / "manifest.json").read_text())


def test_alternatives_reach_the_mechanism(prefect_server, demo):
    from flows.forms import ColumnRange, dpne_release, outlier_count_release, ra_release

    # by default the form recodes with the policy's hierarchies, runs RA, then suppresses to the policy's k
    chain = _manifest(ra_release(k=2))
    steps = chain["mechanism"]["params"]["steps"]
    assert [s["method"] for s in steps] == ["recode", "ra", "suppress"] and steps[1]["k"] == 2
    assert steps[0]["columns"] == ["age", "education", "native-country"] and chain["sdc_report"]["k"] >= 3
    census = Registry(demo).get("census-demo")  # the steward keys this census on age and sex, no threshold
    Registry(demo).set_policy("census-demo", open_policy(list(census.schema.columns), ["age", "sex"], ("age",), ("occupation",)))
    ra = _manifest(ra_release(qi=["age", "sex"], p_per_column=[0.25, 0.75], recode=[], suppress=False))
    assert ra["mechanism"]["params"]["p"] == [0.25, 0.75] and ra["mechanism"]["params"]["k"] is None  # plain RA
    enhanced = _manifest(ra_release(qi=["age", "sex", "race"], k=2, recode=[], suppress=False))
    assert enhanced["mechanism"]["params"]["k"] == 2
    ngrams = _manifest(dpne_release(epsilon=0.5, T=2, delta0_per_level=[5, 3]))
    assert ngrams["mechanism"]["params"]["delta0"] == [5, 3]
    ranges = [ColumnRange(column="mb_sent", low=0, high=800), ColumnRange(column="hour", low=0, high=24)]
    estimated = _manifest(outlier_count_release(standardize=[], estimate=ranges, estimate_share=0.2))
    assert estimated["mechanism"]["params"]["standardize"] == {
        "bounds": {"mb_sent": [0.0, 800.0], "hour": [0.0, 24.0]},
        "share": 0.2,
    }
    raw = _manifest(outlier_count_release(standardize=[], r=5.0))
    assert raw["mechanism"]["params"]["standardize"] is False


REFUSALS = [
    ("ra_release", {"qi": ["age", "sex"], "k": 10}, "k must be between 1 and the number of QI columns (2), got 10"),
    ("ra_release", {"qi": ["age", "postcode"]}, "dataset 'census-demo' has no column 'postcode'"),
    (
        "ra_release",
        {"qi": ["age", "sex"], "recode": [], "suppress": False},
        "the request leaves key variables ['workclass', 'education', 'marital-status', "
        "'relationship', 'race', 'native-country'] of dataset 'census-demo' unprotected",
    ),
    (
        "outlier_count_release",
        {"estimate": [{"column": "hour", "low": 0, "high": 24}]},
        "give either standardize (public scales) or estimate (a charged estimate), not both.",
    ),
    ("dpne_release", {"epsilon": 30.0}, "has only epsilon=20, delta=9e-06 left of its cap"),
]


def test_refusals_fail_the_run_in_one_line(prefect_server, demo):
    """k against the QI columns, a column the registration lacks, two scalings at once, the budget."""
    import flows.forms

    for form, params, message in REFUSALS:
        state = getattr(flows.forms, form)(**params, return_state=True)
        assert state.is_failed() and message in state.message and "\n" not in state.message, (form, state.message)
    assert not (demo / "releases").exists()
    assert all(e.status in ("cap", "policy") for e in Ledger(demo / "privrelease.duckdb").entries())  # nothing charged


def test_a_form_previews_without_charging(prefect_server, demo):
    """preview: true on a release form checks the request, charges nothing, and shows the preview as the
    run's artifact; a bad request still fails the run in one line."""
    from prefect.artifacts import Artifact

    from flows.forms import dpne_release, outlier_count_release

    before = Ledger(demo / "privrelease.duckdb").entries()
    found = outlier_count_release(epsilon=0.5, preview=True)
    assert found["verdict"] == "admitted" and found["charge"] == {"epsilon": 0.5, "delta": 1e-6}
    shown = Artifact.get("preview-logins-demo")
    assert shown.description == "preview: nothing charged" and "- cost: epsilon=0.5 delta=1e-06" in shown.data
    state = dpne_release(epsilon=30.0, preview=True, return_state=True)  # the budget's refusal is the verdict
    assert state.is_completed() and state.result()["verdict"] == "refused"
    assert "| m | w = 1 |" in Artifact.get("preview-posts-demo").data
    assert (
        "![Probability that an n-gram held by m users is released](data:image/png;base64,"
        in Artifact.get("preview-posts-demo").data
    )
    state = outlier_count_release(columns=["nope"], preview=True, return_state=True)
    assert state.is_failed() and "columns ['nope']" in state.message and "\n" not in state.message
    assert Ledger(demo / "privrelease.duckdb").entries() == before and not (demo / "releases").exists()


def test_the_forms_offer_the_registered_datasets_and_columns_by_name(demo):
    """Deployed from a home (make serve's), the SDC forms' column fields are enums of the columns the
    registered sdc datasets' policies publish, and their dataset field an enum of those datasets; the DP
    forms' (the aggregate table's group_by, measures and dataset) the dp datasets' columns and ids. From
    a fresh checkout they take text. Computed as `prefect deploy` stores it, in a process of its own."""
    import os
    import subprocess
    import sys

    code = (
        "import json, sys; from prefect.utilities.callables import parameter_schema; from flows import forms; "
        "s = parameter_schema(getattr(forms, sys.argv[1])).model_dump(); print(json.dumps(s))"
    )

    def schema(home: str | None, form: str) -> dict:
        env = {k: v for k, v in os.environ.items() if k != "PRIVRELEASE_HOME"} | ({"PRIVRELEASE_HOME": home} if home else {})
        env["PRIVRELEASE_FORMS_FROM_REGISTRY"] = "1"
        r = subprocess.run([sys.executable, "-c", code, form], env=env, capture_output=True, text=True, timeout=120, check=True)
        return json.loads(r.stdout)

    registry = Registry(demo)
    published = registry.get("census-demo").policy.published(list(registry.get("census-demo").schema.columns))
    props = schema(str(demo), "ra_release")["properties"]
    assert props["qi"]["items"]["enum"] == published and props["sensitive"]["enum"] == published
    assert props["recode"]["items"]["enum"] == published and props["dataset"]["const"] == "census-demo"  # one dataset
    fresh = schema(None, "ra_release")["properties"]
    assert fresh["qi"]["items"] == {"minLength": 1, "type": "string"} and "const" not in fresh["dataset"]
    dp = [d for d in registry.list() if d.purpose == "dp"]
    columns = list(dict.fromkeys(c for d in dp for c in d.schema.columns))
    table = schema(str(demo), "aggregate_release")
    props = table["properties"]
    assert props["dataset"]["enum"] == [d.id for d in dp] and "payroll-demo" in props["dataset"]["enum"]
    assert props["group_by"]["items"]["enum"] == columns and props["distinct"]["items"]["enum"] == columns
    assert props["group_by"]["maxItems"] == 8 and props["group_by"]["minItems"] == 1  # the Params' bounds
    assert table["definitions"]["ColumnRange"]["properties"]["column"]["enum"] == columns
    fresh = schema(None, "aggregate_release")["properties"]
    assert fresh["group_by"]["items"] == {"minLength": 1, "type": "string"} and "enum" not in fresh["dataset"]


def test_the_aggregate_form_releases_the_demo_payroll_table(prefect_server, demo):
    """The aggregate form's defaults (its Quick run in the UI) release the demo payroll by region and grade:
    every declared key (5 regions x 4 grades) appears once, with each measure's interval around its value."""
    import pandas as pd

    from core.datasets.demo import GRADES, REGIONS
    from flows.forms import ColumnQuantiles, aggregate_release

    summary = aggregate_release()
    table = pd.read_csv(Path(summary["folder"]) / "aggregate.csv")
    assert sorted(zip(table["region"], table["grade"])) == sorted((r, g) for r in REGIONS for g in GRADES)
    for measure in ("count", "salary_mean"):
        assert (table[f"{measure}_lo"] <= table[measure]).all() and (table[measure] <= table[f"{measure}_hi"]).all()
    assert _manifest(summary)["mechanism"]["params"]["max_rows"] == 6
    median = ColumnQuantiles(column="salary", low=0, high=10_000, q=[0.5], interval_share=0.5)
    summary = aggregate_release(count=False, means=[], quantiles=[median])  # a quantile's interval share reaches the request
    (measure,) = _manifest(summary)["mechanism"]["params"]["measures"]
    assert measure["interval_share"] == 0.5 and measure["q"] == [0.5]
    table = pd.read_csv(Path(summary["folder"]) / "aggregate.csv")
    assert ((table["salary_q50_lo"] <= table["salary_q50"]) & (table["salary_q50"] <= table["salary_q50_hi"])).all()
