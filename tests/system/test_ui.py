"""Prefect's UI in a real browser (Debian's chromium, driven by Playwright), reached through privrelease's
gate in front of a real `prefect server` with every deployment and a worker, as each role uses it:

- the analyst signs in; each release form is typed fields (no JSON box, nothing of the operator's); a
  release filled in and submitted completes, its report shows its chart and its ledger entry names
  her; a bound the form breaks is refused naming the field; pages of the operator's show Prefect's
  own error, not a broken page; the event feed shows her runs' events and nothing of the operator's;
- the auditor starts the ledger audit and reads its artifacts; Run on a release form is refused, the form saying
  why in the gate's words (Prefect's "Oops" before);
- a release above the steward's threshold waits until a steward approves it in the UI.

Screenshots go to $PRIVRELEASE_UI_SHOTS (docs/img refreshes the analyst's guide's) or the test's own folder,
which a failure names."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from playwright.sync_api import Page, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from privrelease.core.ledger.ledger import Ledger
from privrelease.core.privacy.budget import Budget
from privrelease.gate.access import RELEASE_FORMS
from tests.conftest import PASSWORD
from tests.system.test_server import _logs, _wait, deployment, operator, worker

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]  # fmt: skip
JSON_BOX = ".p-code-input"  # Prefect's JSON editor (what a tagged union of objects renders as)
OPERATOR = re.compile(r"^(home|source|spec_path|request|runner|dask_address|dask_workers|seed)\b")


def sign_in(page: Page, ui: str, name: str) -> None:
    """Prefect's own sign-in page, as the gate's accounts use it: NAME:PASSWORD in its one field."""
    page.goto(f"{ui}/dashboard")
    page.wait_for_url(re.compile(r"/login"))
    box = page.locator("input[type=password]")
    box.fill(f"{name}:{PASSWORD}")
    box.press("Enter")
    page.wait_for_url(re.compile(r"/dashboard"))


def refusals(page: Page) -> list[str]:
    """The gate's refusals the page receives from now on (method and path)."""
    seen: list[str] = []
    page.on(
        "response",
        lambda r: (
            seen.append(f"{r.request.method} {r.url.split('/api', 1)[-1]}")
            if r.headers.get("x-privrelease-gate-refused")
            else None
        ),
    )
    return seen


def field(page: Page, name: str):
    """The form's input for the top-level parameter ``name``."""
    label = page.locator(".schema-form-property__label", has_text=re.compile(rf"^{re.escape(name)}( \(Optional\))?$"))
    return page.locator(".schema-form-property").filter(has=label).first


def _submit(page: Page, api: str, deployment_id: str, release_id: str, where: str, timeout: float = 90) -> str:
    """Click Submit and return the flow run it created. A 5xx answer to the UI's create call (a SQLite-backed
    server answers 503, "retry", while busy) is retried once, as an analyst clicks again on the error toast
    (Prefect's own client retries those too); anything else fails naming what the browser saw."""
    answers: list[str] = []
    page.on("response", lambda r: answers.append(f"{r.status} {r.request.method} {r.url}") if r.status >= 400 else None)
    page.get_by_role("button", name="Submit").click()
    clicks, deadline = 1, time.monotonic() + timeout
    while True:
        runs = api.post("/flow_runs/filter", timeout=10, json={"deployments": {"id": {"any_": [deployment_id]}}}).json()
        found = [r["id"] for r in runs if r["parameters"].get("release_id") == release_id]
        if found:
            (run_id,) = found
            return run_id
        busy = [a for a in answers if a.startswith("5") and "create_flow_run" in a]
        if len(busy) == clicks == 1 and "/run" in page.url:
            page.get_by_role("button", name="Submit").click()
            clicks += 1
        toasts = page.locator(".p-toast__message").all_inner_texts()
        assert time.monotonic() < deadline, (
            f"no run after Submit; at {page.url}; toasts {toasts}; error answers {answers} {where}"
        )
        time.sleep(0.5)


def _in_browser(served, role: str, act) -> None:
    env, root = served
    shots = Path(os.environ.get("PRIVRELEASE_UI_SHOTS") or root / "ui")
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p, worker(env, root / f"worker-ui-{role}.log"):
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(60_000)  # a loaded machine renders the 1800-px report slowly
        try:
            act(page, env, root, shots)
        except BaseException:
            page.screenshot(path=shots / f"failure-{role}.png", full_page=True)
            print(f"screenshots of the browser test: {shots}")
            raise
        finally:
            browser.close()


OPERATORS_PAGES = {"/blocks", "/variables", "/automations", "/concurrency-limits"}  # refused to every person


def _before_signing_in(page: Page, ui: str, slow_settings: bool = False) -> tuple[str | None, str, list[str]]:
    """The sign-in page a person is sent to from the dashboard: its field's placeholder (None if the page never
    shows it), its text (toasts too) and the errors its scripts threw. With ``slow_settings`` the dashboard's
    calls for the server's settings are held until the page is at the sign-in page, as a busy server answers
    them: their 401 comes while the sign-in page renders."""
    thrown: list[str] = []
    page.on("pageerror", lambda e: thrown.append(str(e)))
    held, holding = [], [slow_settings]
    page.route("**/api/admin/settings", lambda route: held.append(route) if holding[0] else route.continue_())
    page.set_default_timeout(60_000)
    page.goto(f"{ui}/dashboard")
    page.wait_for_url(re.compile(r"/login"))
    holding[0] = False
    for route in held:
        route.continue_()
    page.wait_for_load_state("networkidle")  # the calls the dashboard made before it was sent here, answered
    box = page.locator("input[type=password]")
    try:
        box.wait_for(timeout=10_000)
    except PlaywrightTimeout:
        return None, page.inner_text("body"), thrown
    return box.get_attribute("placeholder"), page.inner_text("body"), thrown


def _navigation(page: Page, ui: str) -> set[str]:
    sign_in(page, ui, "alice")
    page.wait_for_load_state("networkidle")
    shown = "els => els.filter(e => e.offsetParent !== null).map(e => e.getAttribute('href'))"
    return set(page.locator("a.p-context-nav-item").evaluate_all(shown))


def test_the_sign_in_page_asks_for_an_account_and_the_navigation_holds_peoples_pages(served, people):
    """Through the proxy: the sign-in page shows no "Authentication failed." or "Oops" before anything is typed
    and asks for name:password, also when the dashboard's settings come back (401) after the page was sent to
    sign in; signed in, the navigation has no page of the operator's. At the gate itself (the weakened variant:
    no proxy, Prefect's UI as it ships) the page shows both toasts and `admin:pass`, and, with the settings
    late, never shows its field (a blank page)."""
    env, _ = served
    ui, bare = env["PRIVRELEASE_GATE_URL"], f"http://127.0.0.1:{env['PRIVRELEASE_GATE_PORT']}"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for slow in (False, True):
                placeholder, text, thrown = _before_signing_in(browser.new_page(), ui, slow_settings=slow)
                assert placeholder == "name:password" and "Authentication failed" not in text and "Oops" not in text, text
                assert not thrown, (slow, thrown)
            shown = _navigation(browser.new_page(), ui)
            assert {"/runs", "/deployments", "/events"} <= shown and not shown & OPERATORS_PAGES, shown
            page = browser.new_page()
            placeholder, _, _ = _before_signing_in(page, bare)
            page.get_by_text("Authentication failed.").first.wait_for()
            assert placeholder == "admin:pass" and "Oops. Something went wrong." in page.inner_text("body")
            placeholder, _, thrown = _before_signing_in(browser.new_page(), bare, slow_settings=True)
            assert placeholder is None and thrown, thrown  # the settings' late 401 thrown: no sign-in field, ever
            assert OPERATORS_PAGES <= _navigation(browser.new_page(), bare)
        finally:
            browser.close()


def test_the_analysts_forms_runs_and_reports(served, people):
    _in_browser(served, "analyst", _as_an_analyst)


def _as_an_analyst(page: Page, env: dict, root: Path, shots: Path) -> None:
    api, ui = operator(env), env["PRIVRELEASE_GATE_URL"]
    where = f"(screenshots in {shots})"
    sign_in(page, ui, "alice")
    refused = refusals(page)  # from here on: the sign-in page asks without credentials, and is told to sign in
    # every release deployment's form: typed fields, no JSON box, nothing of the operator's
    for name in RELEASE_FORMS:
        page.goto(f"{ui}/deployments/deployment/{deployment(api, name)['id']}/run")
        page.wait_for_selector(".schema-form-property__label")
        labels = page.locator(".schema-form-property__label").all_inner_texts()
        assert labels[0].startswith("dataset") and not [x for x in labels if OPERATOR.match(x)], (name, labels, where)
        assert page.locator(JSON_BOX).count() == 0, (name, where)
        if name == "aggregate":  # the registered dp datasets and their columns, offered by name
            assert "payroll-demo" in field(page, "dataset").inner_text() and "region" in field(page, "group_by").inner_text()
    page.get_by_text("Additional Options").click()  # the selector does find Prefect's JSON editor (job variables)
    assert page.locator(JSON_BOX).count() >= 1, where

    # an Enhanced RA release as an analyst makes it: pick the mechanism's deployment, type its fields (k), submit
    ra = deployment(api, "ra")
    page.goto(f"{ui}/deployments")
    page.get_by_role("link", name="ra", exact=True).first.click()
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_text("Custom run").click()
    field(page, "k").locator("input").fill("3")
    field(page, "release_id").locator("input, textarea").first.fill("ui-enhanced-ra")
    field(page, "k").scroll_into_view_if_needed()
    page.screenshot(path=shots / "ui-form.png")
    run_id = _submit(page, api, ra["id"], "alice.ui-enhanced-ra", where)  # the gate names her id <account>.<id>
    page.wait_for_url(re.compile(r"/deployments/deployment/[^/?]+(\?.*)?$"))  # back on the deployment's runs
    assert _wait(api, run_id, root / "worker-ui-analyst.log") == "COMPLETED", where
    charges = [
        e
        for e in Ledger(Path(env["PRIVRELEASE_HOME"]) / "privrelease.duckdb").entries()
        if e.release_id == "alice.ui-enhanced-ra" and e.status == "reserved"
    ]
    assert [e.requested_by for e in charges] == ["alice"]
    assert not refused, (refused, where)  # her pages asked for nothing the gate refuses
    (artifact,) = api.post("/artifacts/filter", timeout=10, json={"artifacts": {"flow_run_id": {"any_": [run_id]}}}).json()
    page.set_viewport_size({"width": 1280, "height": 1800})  # the whole report in one screenshot
    failed: list[str] = []
    page.on("response", lambda r: failed.append(f"{r.status} {r.request.method} {r.url}") if r.status >= 400 else None)
    page.goto(f"{ui}/artifacts/artifact/{artifact['id']}")
    image = page.locator("img[alt]").first
    try:
        image.wait_for()
    except Exception as exc:  # name what the browser was answered
        raise AssertionError(f"the report did not render; answers over 400: {failed} {where}") from exc
    deadline = time.monotonic() + 15
    while page.evaluate("(img) => img.naturalWidth", image.element_handle()) == 0:
        assert time.monotonic() < deadline, f"the report's chart did not load {where}"
        time.sleep(0.2)
    # nothing runs past the view's edge (the UI never wraps a table cell)
    assert page.evaluate(
        "Array.from(document.querySelectorAll('.artifact-data-markdown table'))"
        ".every(t => t.scrollWidth <= t.parentElement.clientWidth)"
    ), where
    page.screenshot(path=shots / "ui-report.png")
    page.set_viewport_size({"width": 1280, "height": 900})

    # a bound the form breaks: the server refuses it, naming the field
    page.goto(f"{ui}/deployments/deployment/{deployment(api, 'outlier-count')['id']}/run")
    field(page, "epsilon").locator("input").fill("-1")
    page.get_by_role("button", name="Submit").click()
    # Prefect's toast: "Validation failed for field 'epsilon'. Failure reason: -1 is less than or equal to the minimum of 0"
    page.get_by_text(re.compile(r"Validation failed for field 'epsilon'.*minimum of 0")).first.wait_for()
    field(page, "epsilon").scroll_into_view_if_needed()
    page.screenshot(path=shots / "ui-error.png")
    assert "/run" in page.url, where  # still on the form: no run was created

    # a page of the operator's: the gate refuses its calls, Prefect shows its own error, the UI goes on working
    refused.clear()
    page.goto(f"{ui}/blocks")
    page.get_by_text("Oops. Something went wrong.").first.wait_for()
    assert any(r.startswith("POST /block") for r in refused), refused
    page.get_by_text("Deployments", exact=True).first.click()
    page.get_by_role("link", name="dpne", exact=True).first.wait_for()

    # the event feed: her runs' events, nothing of the operator's (a variable's value); its resource picker asks
    # for the operator's automations, blocks and work queues, which the gate refuses: Prefect's toast
    api.post("/variables/", json={"name": "ui_feed_probe", "value": "operator-only-value"})
    refused.clear()
    page.goto(f"{ui}/events")
    page.get_by_text("prefect.flow-run.Completed").first.wait_for()
    page.get_by_text("Oops. Something went wrong.").first.wait_for()
    assert "requested-by:alice" in page.inner_text("body") and "prefect.variable" not in page.inner_text("body"), where
    assert set(refused) == {"POST /automations/filter", "POST /block_documents/filter", "POST /work_queues/filter"}, refused
    api.delete("/variables/name/ui_feed_probe")


def test_the_auditor_audits_and_starts_no_release(served, people):
    _in_browser(served, "auditor", _as_the_auditor)


def _quick_run(page: Page, ui: str, deployment_id: str) -> None:
    page.goto(f"{ui}/deployments/deployment/{deployment_id}")
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_text("Quick run").click()


def _as_the_auditor(page: Page, env: dict, root: Path, shots: Path) -> None:
    api, ui = operator(env), env["PRIVRELEASE_GATE_URL"]
    sign_in(page, ui, "ada")
    refused = refusals(page)
    audit, dpne = deployment(api, "ledger-audit"), deployment(api, "dpne")
    before = len(api.post("/flow_runs/filter", json={"deployments": {"id": {"any_": [dpne["id"]]}}}).json())
    _quick_run(page, ui, dpne["id"])  # a release form: the gate refuses the run, the form shows its sentence (#54)
    page.get_by_text(re.compile("the auditor role may not start a run of this deployment")).first.wait_for()
    assert page.get_by_text("Oops. Something went wrong.").count() == 0
    assert [r for r in refused if r.endswith("/create_flow_run")] == [f"POST /deployments/{dpne['id']}/create_flow_run"]
    assert len(api.post("/flow_runs/filter", json={"deployments": {"id": {"any_": [dpne["id"]]}}}).json()) == before
    mine = {"deployments": {"id": {"any_": [audit["id"]]}}, "flow_runs": {"tags": {"all_": ["requested-by:ada"]}}}
    earlier = {r["id"] for r in api.post("/flow_runs/filter", json=mine).json()}  # other tests' audits by ada
    _quick_run(page, ui, audit["id"])  # the ledger audit: started, and it runs
    deadline = time.monotonic() + 60
    while not (runs := [r for r in api.post("/flow_runs/filter", json=mine).json() if r["id"] not in earlier]):
        assert time.monotonic() < deadline, "the auditor's Quick run created no run"  # (its schedule makes runs of its own)
        time.sleep(0.5)
    (run,) = runs
    assert _wait(api, run["id"], root / "worker-ui-auditor.log") == "COMPLETED"
    artifacts = {
        a["key"]: a for a in api.post("/artifacts/filter", json={"artifacts": {"flow_run_id": {"any_": [run["id"]]}}}).json()
    }
    page.goto(f"{ui}/artifacts/artifact/{artifacts['ledger-history']['id']}")  # every entry, with who asked
    page.get_by_text("requested_by").first.wait_for()
    page.screenshot(path=shots / "ui-audit.png")
    assert [r for r in refused if not r.endswith("/create_flow_run")] == [], refused


def test_a_large_release_waits_for_the_stewards_approval_in_the_ui(served, people):
    _in_browser(served, "steward", _as_the_steward)


def _as_the_steward(page: Page, env: dict, root: Path, shots: Path) -> None:
    api, ui = operator(env), env["PRIVRELEASE_GATE_URL"]
    ledger = Ledger(Path(env["PRIVRELEASE_HOME"]) / "privrelease.duckdb")
    ledger.set_budget("logins-demo", Budget(40.0, 1e-3), approve_above=0.0)  # every DP release waits
    try:
        run = people_post(
            env,
            "alice",
            f"/deployments/{deployment(api, 'outlier-count')['id']}/create_flow_run",
            {"parameters": {"release_id": "ui-approved"}},
        )
        deadline = time.monotonic() + 120
        while api.get(f"/flow_runs/{run['id']}").json()["state"]["type"] != "PAUSED":
            assert time.monotonic() < deadline, (root / "worker-ui-steward.log").read_text()[-3000:]
            time.sleep(0.5)
        sign_in(page, ui, "sam")
        refused = refusals(page)
        page.goto(f"{ui}/runs/flow-run/{run['id']}")
        page.get_by_role("button", name=re.compile("^Resume")).first.click()
        page.get_by_text("Approve to charge and release it").wait_for()
        page.screenshot(path=shots / "ui-approve.png")
        switch = page.get_by_role("switch").first  # "approve"
        switch.click()
        assert switch.get_attribute("aria-checked") == "true"
        page.get_by_role("button", name="Submit").click()
        assert _wait(api, run["id"], root / "worker-ui-steward.log") == "COMPLETED"
        assert not refused, refused
    finally:
        ledger.set_budget("logins-demo", Budget(40.0, 1e-3))
    (charge,) = [e for e in ledger.entries() if e.release_id == "alice.ui-approved" and e.status == "reserved"]
    assert charge.requested_by == "alice"
    assert "approved by the data steward sam" in [x["message"] for x in _logs(api, run["id"])]


def people_post(env: dict, name: str, path: str, body: dict) -> dict:
    """A call through the gate as ``name`` (what the UI's button would send)."""
    import httpx

    response = httpx.post(f"{env['PRIVRELEASE_GATE_URL']}/api{path}", json=body, auth=(name, PASSWORD), timeout=10)
    assert response.status_code == 201, response.text
    return response.json()
