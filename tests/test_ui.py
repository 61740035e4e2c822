"""The analyst's Prefect UI in a real browser (Debian's chromium, driven by Playwright) against a real
`prefect server` with every deployment and a worker: each release form is typed fields (no JSON box,
nothing of the operator's), a release filled in and submitted as an analyst does it completes and its
report shows its chart, and a bound the form breaks is refused naming the field.

Screenshots go to $PRIVRELEASE_UI_SHOTS (docs/img refreshes the README's) or the test's own folder,
which a failure names."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

from tests.test_server import RELEASE_FORMS, _wait, deployment, worker

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]  # fmt: skip
JSON_BOX = ".p-code-input"  # Prefect's JSON editor (what a tagged union of objects renders as)
OPERATOR = re.compile(r"^(home|source|spec_path|request|runner|dask_address|dask_workers|seed)\b")


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
        runs = api.post("/flow_runs/filter", timeout=10, json={
            "deployments": {"id": {"any_": [deployment_id]}}}).json()  # fmt: skip
        found = [r["id"] for r in runs if r["parameters"].get("release_id") == release_id]
        if found:
            (run_id,) = found
            return run_id
        busy = [a for a in answers if a.startswith("5") and "create_flow_run" in a]
        if len(busy) == clicks == 1 and "/run" in page.url:
            page.get_by_role("button", name="Submit").click()
            clicks += 1
        toasts = page.locator(".p-toast__message").all_inner_texts()
        assert time.monotonic() < deadline, (f"no run after Submit; at {page.url}; toasts {toasts}; "
                                             f"error answers {answers} {where}")  # fmt: skip
        time.sleep(0.5)


def test_the_analysts_forms_runs_and_reports(served):
    env, root = served
    shots = Path(os.environ.get("PRIVRELEASE_UI_SHOTS") or root / "ui")
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p, worker(env, root / "worker-ui.log"):
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(30_000)
        try:
            _as_an_analyst(page, env["PREFECT_API_URL"], root, shots)
        except BaseException:
            page.screenshot(path=shots / "failure.png", full_page=True)
            print(f"screenshots of the browser test: {shots}")
            raise
        finally:
            browser.close()


def _as_an_analyst(page: Page, api: str, root: Path, shots: Path) -> None:
    ui = api.removesuffix("/api")
    where = f"(screenshots in {shots})"
    # every release deployment's form: typed fields, no JSON box, nothing of the operator's
    for name in RELEASE_FORMS:
        page.goto(f"{ui}/deployments/deployment/{deployment(api, name)['id']}/run")
        page.wait_for_selector(".schema-form-property__label")
        labels = page.locator(".schema-form-property__label").all_inner_texts()
        assert labels[0].startswith("dataset") and not [x for x in labels if OPERATOR.match(x)], (name, labels, where)
        assert page.locator(JSON_BOX).count() == 0, (name, where)
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
    run_id = _submit(page, api, ra["id"], "ui-enhanced-ra", where)
    page.wait_for_url(re.compile(r"/deployments/deployment/[^/?]+(\?.*)?$"))  # back on the deployment's runs
    assert _wait(api, run_id, root / "worker-ui.log") == "COMPLETED", where
    (artifact,) = api.post("/artifacts/filter", timeout=10,
                             json={"artifacts": {"flow_run_id": {"any_": [run_id]}}}).json()  # fmt: skip
    page.set_viewport_size({"width": 1280, "height": 1800})  # the whole report in one screenshot
    page.goto(f"{ui}/artifacts/artifact/{artifact['id']}")
    image = page.locator("img[alt]").first
    image.wait_for()
    deadline = time.monotonic() + 15
    while page.evaluate("(img) => img.naturalWidth", image.element_handle()) == 0:
        assert time.monotonic() < deadline, f"the report's chart did not load {where}"
        time.sleep(0.2)
    # nothing runs past the view's edge (the UI never wraps a table cell)
    assert page.evaluate("Array.from(document.querySelectorAll('.artifact-data-markdown table'))"
                         ".every(t => t.scrollWidth <= t.parentElement.clientWidth)"), where
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
