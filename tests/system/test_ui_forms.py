"""The release forms follow the registry, in a real browser (issue #54): Debian's chromium driven by Playwright
through the proxy, the gate and a real `prefect server` with every deployment and a worker.

- the analyst opens the aggregate form for the newcomer's payroll (tests/support/newcomer.py), registered after the server
  started and the forms were deployed: it is offered, with its columns; she edits a pre-filled bound (a mean's
  upper bound, 10,000 to 20,000: the UI then sends a schema whose stored default changed, which the gate refused
  with "Oops"), the epsilon, the rows kept per person and the id, and the run completes with exactly those values;
- the same form opened for a record-unit dataset shows no field bounding a user's rows, and its run completes;
- the SDC chain form releases the census's recode -> PRAM -> local suppression;
- (tests/system/test_ui.py: a refused start, the auditor on a release form, shows the gate's sentence, not "Oops".)
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from playwright.sync_api import Page

from privrelease.core.datasets.registry import Registry
from privrelease.core.ledger.ledger import Ledger
from privrelease.core.privacy.budget import Budget
from tests.support.helpers import register
from tests.support.newcomer import payroll
from tests.system.test_server import _wait, deployment, operator
from tests.system.test_ui import _in_browser, _submit, field, sign_in


def _form(page: Page, ui: str, deployment_id: str, given: dict) -> None:
    """A deployment's run form, opened with ``given`` as its parameters (as a link to it carries them)."""
    page.goto(f"{ui}/deployments/deployment/{deployment_id}/run?parameters={quote(json.dumps(given))}")
    page.wait_for_selector(".schema-form-property__label")


def _labels(page: Page) -> list[str]:
    return [x.removesuffix(" (Optional)") for x in page.locator(".schema-form-property__label").all_inner_texts()]


def _params(home: Path, release_id: str) -> dict:
    (charge,) = [
        e for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id == release_id and e.status == "reserved"
    ]
    return json.loads(charge.params)["mechanism"]


def test_the_forms_follow_the_registry_in_the_browser(served, people):
    env, _ = served
    home = Path(env["PRIVRELEASE_HOME"])
    if "payroll54" not in {d.id for d in Registry(home).list()}:
        register(home, payroll(), "payroll54", unit="user:person_id", purpose="dp")  # after the forms were deployed
        Ledger(home / "privrelease.duckdb").set_budget("payroll54", Budget(8.0, 1e-5))
    _in_browser(served, "forms", _as_an_analyst)


def _as_an_analyst(page: Page, env: dict, root: Path, shots: Path) -> None:
    api, ui, home = operator(env), env["PRIVRELEASE_GATE_URL"], Path(env["PRIVRELEASE_HOME"])
    where = f"(screenshots in {shots})"
    sign_in(page, ui, "alice")
    aggregate = deployment(api, "aggregate")

    # the payroll registered after the server started: offered, with its own columns and its user-unit fields
    _form(page, ui, aggregate["id"], {"dataset": "payroll54", "group_by": ["department"]})
    assert "payroll54" in field(page, "dataset").inner_text() and "department" in field(page, "group_by").inner_text(), where
    assert {"max_groups", "max_rows"} <= set(_labels(page)), where
    means = field(page, "means")
    assert "salary" in means.inner_text(), where  # the default mean's column is the payroll's: kept
    bounds = means.locator("input[type=number]")
    assert bounds.count() == 2 and bounds.nth(1).input_value() == "10000", where
    bounds.nth(1).fill("20000")  # the pre-filled bound edited: Submit was refused with "Oops" (#54 item 1)
    field(page, "epsilon").locator("input").fill("0.5")
    field(page, "max_rows").locator("input").fill("3")
    field(page, "release_id").locator("input, textarea").first.fill("ui-payroll54")
    page.screenshot(path=shots / "ui-form-payroll54.png")
    run_id = _submit(page, api, aggregate["id"], "alice.ui-payroll54", where)
    assert _wait(api, run_id, root / "worker-ui-forms.log") == "COMPLETED", where
    params = _params(home, "alice.ui-payroll54")  # exactly what she typed, and the defaults she left
    assert params["group_by"] == ["department"] and params["epsilon"] == 0.5
    (mean,) = [m for m in params["measures"] if m["op"] == "mean"]
    assert mean["column"] == "salary" and mean["bounds"] == [0, 20000]
    assert (params["max_rows"], params["max_groups"], params["user_column"]) == (3, 1, "person_id")

    # a record-unit dataset: no field bounding a user's rows, and the release runs (it was refused: "drop them")
    _form(page, ui, aggregate["id"], {"dataset": "logins-demo", "group_by": ["failed_logins"],
                                       "means": [{"column": "mb_sent", "low": 0, "high": 800}]})  # fmt: skip
    labels = _labels(page)
    assert "max_rows" not in labels and "max_groups" not in labels and "group_by" in labels, (labels, where)
    field(page, "release_id").locator("input, textarea").first.fill("ui-logins")
    run_id = _submit(page, api, aggregate["id"], "alice.ui-logins", where)
    assert _wait(api, run_id, root / "worker-ui-forms.log") == "COMPLETED", where
    params = _params(home, "alice.ui-logins")
    assert (params["max_rows"], params["max_groups"], params["user_column"]) == (1, 1, None)

    # the SDC chain form: recode, PRAM and local suppression, one release
    sdc = deployment(api, "sdc")
    _form(page, ui, sdc["id"], {"dataset": "census-demo", "pram": ["race"]})
    field(page, "pram_keep").locator("input").fill("0.7")
    field(page, "release_id").locator("input, textarea").first.fill("ui-chain")
    page.screenshot(path=shots / "ui-form-sdc.png")
    run_id = _submit(page, api, sdc["id"], "alice.ui-chain", where)
    assert _wait(api, run_id, root / "worker-ui-forms.log") == "COMPLETED", where
    steps = _params(home, "alice.ui-chain")["steps"]
    assert [s["method"] for s in steps] == ["recode", "pram", "suppress"] and steps[1]["keep"] == 0.7
