"""Every field of every release form, given a value other than its default, in a real browser (issue #54's done-when):
Debian's chromium driven by Playwright through the proxy, the gate and a real `prefect server` with every deployment
and a worker, as the analyst alice, on datasets registered after the server started and the forms were deployed.

Each form is opened with its values (as a link to a run form carries them: the form shows them in its fields) and
submitted with Submit, so the UI's own validation call and run creation carry every value; each run then completes
with exactly the values the form held (the flow run's parameters, and for a release the ledger's charge), or fails
with its sentence on the run's page. Two runs a form: a release, and a preview with the fields the release leaves
aside (a field one value of another overrides: ``p`` beside ``p_per_column``, ``t_lb`` beside ``widths``). A check
first: every field of every form's stored schema is non-default in at least one of them.

The newcomer's hospital case (tests/support/newcomer.py, with the policy they wrote) releases from the SDC chain form too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
from playwright.sync_api import Page

from privrelease.core.datasets import demo
from privrelease.core.datasets.registry import Registry
from privrelease.core.ledger.ledger import Ledger
from privrelease.core.privacy.budget import Budget
from privrelease.core.sdc.policy import Policy
from privrelease.gate.access import RELEASE_FORMS
from tests.support.helpers import register
from tests.support.newcomer import HOSPITAL_POLICY, hospital, payroll
from tests.system.test_server import _wait, deployment, operator
from tests.system.test_ui import _in_browser, _submit, sign_in
from tests.system.test_ui_forms import _form

# the hospital's visits with its stay filled in (a steward's cleaning: MEWS and microaggregation take no blank), and a
# policy with a second level for the wards and the stay publishable
HOSPITAL_UI_POLICY = {
    "identifiers": ["visit_id", "patient_id", "name"],
    "keys": {"categorical": ["sex", "ward"], "numeric": ["age"]},
    "sensitive": ["diagnosis"],
    "publishable": ["postcode", "length_of_stay"],
    "thresholds": {"k": 3},
    "tables": {"min_frequency": 3, "dominance": {"n": 1, "k": 80}, "p_percent": {"p": 10}, "cell_key": {"D": 2, "V": 1.0, "js": 1}},
    "hierarchies": {
        "age": {"breaks": [18, 30, 45, 60, 75, 95]},
        "ward": [
            {"Surgery\u200b": "Surgery", "Oncology ": "Oncology"},
            {"Cardiology": "Adult", "Oncology": "Adult", "Surgery": "Adult", "Geriatrics": "Adult",
             "Maternity": "Family", "Paediatrics": "Family"},
        ],
    },
}  # fmt: skip

HOSPITAL, PAYROLL, POSTS, LOGINS = "hospital-ui", "payroll-ui", "posts-ui", "logins-ui"
TABLES = "hospital-tables-ui"  # another draw of the visits for tables of sums only: none beside a microdata release
SCALES = [{"column": "duration_min", "mean": 31.0, "std": 9.0}, {"column": "hour", "mean": 12.0, "std": 3.5}]
SDC_DEPTH = {"swap_mode": "pairs", "others": "eds", "recode": ["ward"], "recode_level": 2}

# (form, its values): a release with every field the form reads at once, a preview with those it leaves aside (a
# field one value of another overrides), and, for the forms whose key a swap cannot protect alone, the release without
# local suppression, which the dataset's policy refuses (its sentence in FAILS). The release_id is the run's own.
UNPROTECTED = r"leaves key variables \['sex', 'ward'\] of dataset 'hospital-ui' unprotected"
RUNS = [
    ("ra", {"dataset": HOSPITAL, "qi": ["age", "sex", "ward"], "sensitive": "diagnosis", "k": 2, "recode": ["age", "ward"],
            "recode_level": 2}),
    ("ra", {"dataset": HOSPITAL, "qi": ["age", "sex", "ward"], "sensitive": "diagnosis", "p": "entropy",
            "p_per_column": [0.5, 0.25, 0.25], "recode": ["age"], "suppress": False, "preview": True}),
    ("mews", {"dataset": HOSPITAL, "swap_set": ["age", "length_of_stay"], "t_lb": 0.5, "t_ub": 2.0, "width": 1.5,
              "widths": [{"column": "age", "width": 5.0}, {"column": "length_of_stay", "width": 2.0}],
              "width_units": "absolute", "swap_mode": "pairs", "others": "eds", "k": 5, "candidates": 50,
              "singletons": "suppress", "recode": ["ward"], "recode_level": 2}),
    ("mews", {"dataset": HOSPITAL, "swap_set": ["age", "length_of_stay"], "t_lb": 0.5, "t_ub": 2.0,
              "swap_mode": "block", "preview": True}),
    ("mews", {"dataset": HOSPITAL, "swap_set": ["age"], "suppress": False}),
    ("meds", {"dataset": HOSPITAL, "swap_set": ["age", "length_of_stay"], "k": 10, **SDC_DEPTH}),
    ("meds", {"dataset": HOSPITAL, "swap_set": ["age"], "k": 10, "swap_mode": "block", "preview": True}),
    ("meds", {"dataset": HOSPITAL, "swap_set": ["age"], "suppress": False}),
    ("eds", {"dataset": HOSPITAL, "swap_set": ["age"], "k": 5, **SDC_DEPTH}),
    ("eds", {"dataset": HOSPITAL, "swap_set": ["age"], "k": 6, "swap_mode": "block", "preview": True}),
    ("eds", {"dataset": HOSPITAL, "swap_set": ["age"], "suppress": False}),
    ("sdc", {"dataset": HOSPITAL, "recode": ["age", "ward"], "recode_level": 2,
             "topcode": [{"column": "length_of_stay", "top": 40.0, "bottom": 0.5}], "microaggregate": ["length_of_stay"],
             "microaggregate_k": 4, "pram": ["diagnosis"], "pram_keep": 0.7, "noise": ["length_of_stay"],
             "noise_level": 0.2, "suppress": True, "suppress_k": 4}),
    ("sdc", {"dataset": HOSPITAL, "recode": ["age"], "pram": ["sex", "ward"], "suppress": False, "preview": True}),
    ("dpne", {"dataset": POSTS, "text_column": "body", "epsilon": 2.0, "delta": 1e-6, "T": 3, "delta0": 5,
              "delta0_per_level": [6, 5, 4], "eta": 0.02, "split": "geometric", "c": 0.8, "pruning": "single",
              "tokenizer": "whitespace", "publish_weights": True}),
    ("dpne", {"dataset": POSTS, "text_column": "body", "epsilon": 2.0, "delta0": 5, "preview": True}),
    ("outlier-count", {"dataset": LOGINS, "columns": ["duration_min", "hour"], "k": 4, "r": 0.3, "epsilon": 0.8,
                       "delta": 1e-5, "standardize": SCALES, "estimate": [], "estimate_share": 0.2,
                       "scale_share": 0.2, "noise": "global"}),
    ("outlier-count", {"dataset": LOGINS, "columns": ["duration_min", "hour"], "epsilon": 0.8, "standardize": [],
                       "estimate": [{"column": "duration_min", "low": 0.0, "high": 80.0},
                                    {"column": "hour", "low": 0.0, "high": 24.0}],
                       "estimate_share": 0.2, "preview": True}),
    ("outlier-top-subspaces", {"dataset": LOGINS, "columns": ["duration_min", "mb_sent", "hour"], "c": 2, "h": 3,
                               "k": 4, "r": 0.1, "epsilon": 1.5, "delta": 1e-6, "release_counts": False,
                               "count_share": 0.4, "standardize": SCALES + [{"column": "mb_sent", "mean": 49.0, "std": 14.0}],
                               "estimate": [], "estimate_share": 0.2, "scale_share": 0.2, "noise": "smooth"}),
    ("outlier-top-subspaces", {"dataset": LOGINS, "columns": ["duration_min", "hour"], "standardize": [],
                               "estimate": [{"column": "duration_min", "low": 0.0, "high": 80.0},
                                            {"column": "hour", "low": 0.0, "high": 24.0}], "preview": True}),
    ("aggregate", {"dataset": PAYROLL, "group_by": ["department"], "count": False, "distinct": ["grade"],
                   "sums": [{"column": "salary", "low": 0.0, "high": 8000.0}],
                   "means": [{"column": "salary", "low": 0.0, "high": 9000.0}],
                   "quantiles": [{"column": "salary", "low": 0.0, "high": 10000.0, "q": [0.5, 0.9], "bins": 128,
                                  "interval_share": 0.2}],
                   "epsilon": None, "rho": 0.5, "delta": 1e-5, "noise": "gaussian", "max_groups": 2, "max_rows": 4}),
    ("aggregate", {"dataset": PAYROLL, "group_by": ["grade"], "epsilon": 0.7, "noise": "laplace", "delta": 1e-5,
                   "max_groups": 2, "max_rows": 4, "preview": True}),
    ("sdc-table", {"dataset": TABLES, "group_by": ["sex", "ward"], "measure": "sum", "column": "length_of_stay",
                   "subtotals": ["ward"], "secondary": "exact"}),
    ("sdc-table", {"dataset": HOSPITAL, "group_by": ["ward"], "method": "cell_key", "preview": True}),
]  # fmt: skip
FAILS = {4: UNPROTECTED, 7: UNPROTECTED, 10: UNPROTECTED}  # a run that fails, by its place in RUNS: its sentence


def _registered(home: Path) -> None:
    """The four datasets the forms are filled for, registered after the server started (once a session)."""
    if HOSPITAL in {d.id for d in Registry(home).list()}:
        return
    visits = hospital()
    visits["length_of_stay"] = pd.to_numeric(visits["length_of_stay"]).fillna(0.0)
    register(home, visits, HOSPITAL, policy=Policy.model_validate(HOSPITAL_UI_POLICY))
    other = hospital(seed=57)
    other["length_of_stay"] = pd.to_numeric(other["length_of_stay"]).fillna(0.0)
    register(home, other, TABLES, policy=Policy.model_validate(HOSPITAL_UI_POLICY))
    register(home, hospital(), "hospital54", policy=Policy.model_validate(HOSPITAL_POLICY))  # the newcomer's own
    # tables of their own (a source registered twice is refused: one source, one budget): other draws of the samples
    register(home, payroll(seed=56), PAYROLL, unit="user:person_id", purpose="dp")
    register(home, demo.posts(seed=56).rename(columns={"text": "body"}), POSTS, unit="user:user", purpose="dp")
    register(home, demo.logins(seed=56), LOGINS, purpose="dp")
    ledger = Ledger(home / "privrelease.duckdb")
    for dataset in (PAYROLL, POSTS, LOGINS):
        ledger.set_budget(dataset, Budget(20.0, 1e-3))


def test_every_field_of_every_form_is_given_a_value_of_its_own(served, people):
    env, _ = served
    api = operator(env)
    # the check of the table: every field of every release form (as the server stores it) non-default in some run
    assert {form for form, _ in RUNS} == set(RELEASE_FORMS)
    for form in RELEASE_FORMS:
        schema = deployment(api, form)["parameter_openapi_schema"]["properties"]
        given = [values | {"release_id": "x"} for name, values in RUNS if name == form]
        plain = [f for f, node in schema.items() if not any(f in v and v[f] != node.get("default") for v in given)]
        assert plain == [], (form, plain)
    _registered(Path(env["PRIVRELEASE_HOME"]))
    _in_browser(served, "every-field", _as_an_analyst)


def _as_an_analyst(page: Page, env: dict, root: Path, shots: Path) -> None:
    api, ui, home = operator(env), env["PRIVRELEASE_GATE_URL"], Path(env["PRIVRELEASE_HOME"])
    where = f"(screenshots in {shots})"
    sign_in(page, ui, "alice")
    ids = {form: deployment(api, form)["id"] for form in RELEASE_FORMS}
    outcomes = []
    for i, (form, values) in enumerate(RUNS + [("sdc", {"dataset": "hospital54", "recode": ["age"], "suppress": True})]):
        name = f"ui-all-{i}-{form}"
        _form(page, ui, ids[form], values | {"release_id": name})
        page.screenshot(path=shots / f"ui-all-{i}-{form}.png", full_page=True)
        run_id = _submit(page, api, ids[form], f"alice.{name}", where)
        state = _wait(api, run_id, root / "worker-ui-every-field.log")
        run = api.get(f"/flow_runs/{run_id}").json()
        sent = {k: run["parameters"].get(k) for k in values}
        if state == "FAILED":  # the sentence on the run's page (its log), as the analyst reads it
            page.goto(f"{ui}/runs/flow-run/{run_id}")
            page.get_by_text((run["state"].get("message") or "")[:80]).first.wait_for()
            page.screenshot(path=shots / f"ui-all-{i}-{form}-refused.png")
        outcomes.append((i, form, state, run["state"].get("message"), sent == values or (sent, values)))
    page.screenshot(path=shots / "ui-all-last.png")
    failed = [o for o in outcomes if o[2] != "COMPLETED" and o[0] not in FAILS or o[4] is not True]
    assert not failed, (failed, where)
    for i, _form_name, state, message, _ in outcomes:
        if i in FAILS:
            assert state == "FAILED" and re.search(FAILS[i], message or ""), (i, message)
    charged = {e.release_id for e in Ledger(home / "privrelease.duckdb").entries() if e.status == "reserved"}
    releases = {f"alice.ui-all-{i}-{form}" for i, (form, v) in enumerate(RUNS) if not v.get("preview") and i not in FAILS}
    assert releases <= charged, releases - charged
    assert f"alice.ui-all-{len(RUNS)}-sdc" in charged  # the newcomer's hospital, released from the UI
    print(json.dumps(outcomes, default=str))
