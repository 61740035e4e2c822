"""The UI's forms (privrelease/flows/forms.py) build the request a request file gives: each alternative a form
offers in place of a mapping or a union reaches the mechanism as that mechanism's parameter, and a
refusal fails the run with one line naming what to change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from privrelease.core.datasets.demo import write_demo
from privrelease.core.datasets.registry import Registry
from privrelease.core.ledger.ledger import Ledger
from tests.support.helpers import open_policy


@pytest.fixture
def demo(home: Path) -> Path:
    write_demo(home, rows=2000)
    return home


def _manifest(summary: dict) -> dict:
    return json.loads((Path(summary["folder"]) / "manifest.json").read_text())


def test_alternatives_reach_the_mechanism(prefect_server, demo):
    from privrelease.flows.forms import ColumnRange, dpne_release, outlier_count_release, ra_release

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
    import privrelease.flows.forms

    for form, params, message in REFUSALS:
        state = getattr(privrelease.flows.forms, form)(**params, return_state=True)
        assert state.is_failed() and message in state.message and "\n" not in state.message, (form, state.message)
    assert not (demo / "releases").exists()
    assert all(
        e.status in ("registered", "cap", "policy") for e in Ledger(demo / "privrelease.duckdb").entries()
    )  # nothing charged


def test_a_form_previews_without_charging(prefect_server, demo):
    """preview: true on a release form checks the request, charges nothing, and shows the preview as the
    run's artifact; a bad request still fails the run in one line."""
    from prefect.artifacts import Artifact

    from privrelease.flows.forms import dpne_release, outlier_count_release

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


def test_the_gate_offers_the_registered_datasets_and_the_chosen_ones_columns(demo):
    """A form's dataset and column fields are stored as text (a dataset registered after the forms were deployed is a
    valid value); the gate shows them with the registered datasets of the form's purpose and their columns, read
    when the form is opened: the sdc forms the columns the policies publish, the dp forms every column but the unit's.
    Opened for one dataset (its page's ?parameters=), the columns are that dataset's, the defaults naming others'
    columns are left out, and a record-unit dataset's form has no field bounding a user's rows."""
    from urllib.parse import quote

    from prefect.utilities.callables import parameter_schema

    from privrelease.core.release.catalogue import Catalogue
    from privrelease.core.release.home import Home
    from privrelease.flows import forms
    from privrelease.gate.forms import chosen, shown
    from privrelease.gate.schemas import made_of

    def stored(form) -> dict:
        return json.loads(json.dumps(parameter_schema(form).model_dump()))

    datasets = Catalogue(Home(demo)).datasets()
    ra = stored(forms.ra_release)
    assert "enum" not in ra["properties"]["dataset"] and "enum" not in ra["properties"]["qi"]["items"]
    census = Registry(demo).get("census-demo")
    published = census.policy.releasable(list(census.schema.columns))
    props = shown(ra, datasets)["properties"]
    assert props["qi"]["items"]["enum"] == published and props["sensitive"]["enum"] == published
    assert props["dataset"]["enum"] == ["census-demo"] and "postcode" not in published

    table = stored(forms.aggregate_release)
    live = shown(table, datasets)
    dp = [d for d in Registry(demo).list() if d.purpose == "dp"]
    assert live["properties"]["dataset"]["enum"] == [d.id for d in dp] == ["logins-demo", "payroll-demo", "posts-demo"]
    assert "person" not in live["properties"]["group_by"]["items"]["enum"]  # payroll's unit: never offered
    assert {"region", "grade", "mb_sent", "text"} <= set(live["definitions"]["ColumnRange"]["properties"]["column"]["enum"])
    assert live["properties"]["group_by"]["maxItems"] == 8 and "max_rows" in live["properties"]
    logins = shown(table, datasets, "logins-demo")
    columns = ["duration_min", "mb_sent", "hour", "failed_logins"]
    assert (
        logins["properties"]["group_by"]["items"]["enum"] == columns
        and logins["properties"]["dataset"]["default"] == "logins-demo"
    )
    assert logins["properties"]["group_by"]["default"] == [] and logins["properties"]["means"]["default"] == []
    assert "max_groups" not in logins["properties"] and "max_rows" not in logins["properties"]
    # what the UI sends back to /api/ui/schemas/validate is made of the stored form's pieces, whichever dataset
    for chosen_id in (None, "logins-demo", "payroll-demo", "posts-demo"):
        assert made_of(shown(table, datasets, chosen_id), [table]) and made_of(shown(ra, datasets, chosen_id), [ra])
    payroll = shown(table, datasets, "payroll-demo")["properties"]
    assert payroll["max_rows"]["default"] == 6 and payroll["means"]["default"][0]["column"] == "salary"
    assert shown(table, []) == table  # nothing registered: the form as stored

    page = f"https://gate.example/deployments/deployment/d1/run?parameters={quote(json.dumps({'dataset': 'logins-demo'}))}"
    assert chosen(page, "d1") == "logins-demo" and chosen(page, "d2") is None
    assert chosen("https://gate.example/deployments/deployment/d1/run", "d1") is None
    assert chosen(page.replace("logins-demo", "..%2Fx"), "d1") is None


def test_the_aggregate_form_releases_a_record_unit_dataset_with_its_defaults(prefect_server, demo):
    """The form's user-unit fields (max_groups 1, max_rows 6 pre-filled) are ignored for a dataset of the record unit,
    which refused them before ("under the record unit ... drop them"); an empty one under the user unit is the
    mechanism's 1."""
    from privrelease.flows.forms import ColumnRange, aggregate_release

    ranges = [ColumnRange(column="mb_sent", low=0, high=800)]
    summary = aggregate_release(dataset="logins-demo", group_by=["failed_logins"], means=ranges, sums=ranges[:0], count=True)
    params = _manifest(summary)["mechanism"]["params"]
    assert (params["max_groups"], params["max_rows"], params["user_column"]) == (1, 1, None)
    summary = aggregate_release(max_groups=None, max_rows=None)
    params = _manifest(summary)["mechanism"]["params"]
    assert (params["max_groups"], params["max_rows"], params["user_column"]) == (1, 1, "person")


def test_the_sdc_chain_form(prefect_server, demo):
    """The SDC chain form (the command line's recode -> suppress, and the steward's other methods in their order):
    its defaults recode and suppress; every step asked for is in the chain; no step is refused in one line."""
    from privrelease.flows.forms import ColumnCodes, sdc_release

    default = _manifest(sdc_release())["mechanism"]["params"]["steps"]
    assert [s["method"] for s in default] == ["recode", "suppress"] and default[0]["columns"] == RECODE_DEMO
    chain = sdc_release(
        recode=["education"],
        topcode=[ColumnCodes(column="hours-per-week", top=60, bottom=10)],
        pram=["race"],
        pram_keep=0.7,
        noise=["age"],
        noise_level=0.2,
        suppress_k=4,
        preview=True,
    )
    assert chain["verdict"] == "admitted"
    state = sdc_release(recode=[], suppress=False, return_state=True)
    assert state.is_failed() and "the chain has no step" in state.message and "\n" not in state.message


RECODE_DEMO = ["age", "education", "native-country"]


def test_the_aggregate_form_releases_the_demo_payroll_table(prefect_server, demo):
    """The aggregate form's defaults (its Quick run in the UI) release the demo payroll by region and grade:
    every declared key (5 regions x 4 grades) appears once, with each measure's interval around its value."""
    import pandas as pd

    from privrelease.core.datasets.demo import GRADES, REGIONS
    from privrelease.flows.forms import ColumnQuantiles, aggregate_release

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


def test_the_table_form_releases_by_suppression_and_by_cell_key(prefect_server, demo):
    """The SDC table form (privrelease/flows/tables.py) on the demo census, whose policy sets table rules: a table by
    cell suppression (audited), and by the cell key method, whose margin cells equal the same cells of a second
    table of the form, and refuses sums by it, which the policy does not allow; its request is the one a request
    file gives."""
    import pandas as pd

    from privrelease.core.datasets import snapshots
    from privrelease.flows.tables import sdc_table_release

    # the dataset's record-key secret, fixed (a test's, as a seed): whether the cell key tables' counts, each within 3
    # of the truth, narrow a cell the suppressed table hid depends on the keys (with other keys the linked audit may
    # refuse them, as it should)
    (snapshots.folder(demo, "census-demo") / snapshots.SECRET).write_bytes(bytes(range(32)))
    suppressed = _manifest(sdc_table_release(group_by=["education", "race", "sex"], secondary="heuristic"))
    assert suppressed["mechanism"]["params"]["group_by"] == ["education", "race", "sex"]
    assert suppressed["sdc_report"]["audit"] == "passed" and suppressed["sdc_report"]["primary"] > 0
    both = sdc_table_release(group_by=["race", "sex"], method="cell_key")
    one = sdc_table_release(group_by=["race"], method="cell_key")
    both, one = (pd.read_parquet(Path(s["folder"]) / "table.parquet") for s in (both, one))
    assert both[both.sex_level == 0].set_index("race")["count"].to_dict() == one.set_index("race")["count"].to_dict()
    hours = dict(group_by=["race"], measure="sum", column="hours-per-week", method="cell_key", return_state=True)
    state = sdc_table_release(**hours)  # the demo census has no contributor id to key factors by: no factors
    assert state.is_failed() and "(tables.cell_key_sums: low, high, max_guess), which this policy lacks" in state.message
    assert "\n" not in state.message
    assert sdc_table_release(group_by=["race"], preview=True)["verdict"] == "admitted"
