"""The catalogues through the real proxy, gate and server (issue #42), and in a real browser:

- people signed in read the index of published releases, one release, its files (each matching its digest),
  and the datasets' public facts and budget; a caller without credentials reads none of it (the page
  itself, which holds no data, loads for anyone);
- path traversal to the home's files is refused through the proxy; on gates built in this process
  against the same home, each of the two defences (the gate's path check, the catalogue's names from the
  manifest) holds alone, and a gate without both hands out the steward's raw source file;
- in the browser, the analyst who asked for a release follows its artifact's link to the gate's page and
  downloads its data, which matches the manifest's sha256."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page

from privrelease.core.release import pipeline, spec
from privrelease.core.release.catalogue import Catalogue
from privrelease.core.release.home import Home
from privrelease.gate import access
from privrelease.gate.app import REFUSED, Gate
from privrelease.gate.catalogue import FRESH_S
from tests.conftest import PASSWORD
from tests.release.test_catalogue import RAW, Unchecked
from tests.system.test_gate_abuse import weakened
from tests.system.test_server import _wait, deployment, operator
from tests.system.test_ui import _in_browser, people_post, sign_in

FILES = "/privrelease/api/releases/{id}/files/{name}"


@pytest.fixture(scope="module")
def published(served, people) -> dict:
    """One SDC release of the demo census, published in the served home as the analyst's run would."""
    env, _ = served
    root = Path(env["PRIVRELEASE_HOME"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PRIVRELEASE_HOME", str(root))
        mp.delenv("PREFECT_API_URL", raising=False)
        return pipeline.release(Home(root), spec.load(root / "requests" / "census-ra.yaml"), log=logging.getLogger("test"))


def _listing(client: httpx.Client, rid: str) -> dict:
    """The index once it lists ``rid``: the gate keeps the index it answers for FRESH_S seconds (another test's
    read may have kept one from before this release), so a release is listed within that, and no later."""
    deadline = time.monotonic() + FRESH_S + 2
    while True:
        index = client.get("/privrelease/api/index.json").json()
        if any(r["id"] == rid for r in index["releases"]) or time.monotonic() > deadline:
            return index
        time.sleep(0.5)


def _sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def test_people_read_the_catalogues_through_the_proxy_and_anyone_else_nothing(served, people, published):
    env, _ = served
    url, home = env["PRIVRELEASE_GATE_URL"], Path(env["PRIVRELEASE_HOME"])
    rid = published["release_id"]
    anyone = httpx.Client(base_url=url, timeout=30)
    for path in ("/privrelease/api/index.json", f"/privrelease/api/releases/{rid}", FILES.format(id=rid, name="data.csv"),
                 f"/privrelease/api/releases/{rid}/all.zip", "/privrelease/api/datasets",
                 "/privrelease/api/datasets/posts-demo"):  # fmt: skip
        response = anyone.get(path)
        assert response.status_code == 401 and response.headers.get(REFUSED) == "1", path
    page = anyone.get(f"/privrelease/releases/{rid}")  # the page: a shell, no data
    assert page.status_code == 200 and '<script src="/privrelease/catalogue.js">' in page.text and rid not in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    manifest = json.loads((home / "releases" / "census-demo" / rid / "manifest.json").read_text())
    for name in ("alice", "ada", "sam"):  # every role reads what was published
        client = httpx.Client(base_url=url, auth=(name, PASSWORD), timeout=30)
        index = _listing(client, rid)
        (entry,) = [r for r in index["releases"] if r["id"] == rid]
        assert entry["guarantee"] == manifest["privacy"]["guarantee"] and entry["privacy"]["sdc_methods"] == [
            "recode",
            "ra",
            "suppress",
        ]
        assert str(home) not in json.dumps(index)
        one = client.get(f"/privrelease/api/releases/{rid}").json()
        assert one["report_markdown"] == (home / "releases" / "census-demo" / rid / "report.md").read_text()
        for f in one["files"]:
            got = client.get(FILES.format(id=rid, name=f["name"]))
            assert got.status_code == 200 and _sha(got.content) == f["sha256"], f
            assert got.headers["content-disposition"] == f'attachment; filename="{f["name"]}"'
        zipped = client.get(f"/privrelease/api/releases/{rid}/all.zip")
        assert zipped.status_code == 200 and zipped.headers["content-type"] == "application/zip"
        assert zipped.headers["content-disposition"] == f'attachment; filename="{rid}.zip"'
        with zipfile.ZipFile(io.BytesIO(zipped.content)) as archive:
            assert {n: _sha(archive.read(n)) for n in archive.namelist()} == {
                f"{rid}/{f['name']}": f["sha256"] for f in one["files"]
            }
        assert {f["name"]: f["sha256"] for f in one["files"]} == {
            **manifest["files"],
            "manifest.json": one["files"][-1]["sha256"],
        }
    alice = httpx.Client(base_url=url, auth=("alice", PASSWORD), timeout=30)
    missing = alice.get("/privrelease/api/releases/nope")
    assert (
        missing.status_code == 404
        and "no published release 'nope'" in missing.text
        and "GET /privrelease/api/index.json" in missing.text
    )
    missing = alice.get("/privrelease/api/releases/nope/all.zip")
    assert missing.status_code == 404 and "no published release 'nope'" in missing.text
    missing = alice.get(FILES.format(id=rid, name="secret.csv"))
    assert missing.status_code == 404 and "has no file 'secret.csv'; its files are data.parquet" in missing.text
    datasets = {d["id"]: d for d in alice.get("/privrelease/api/datasets").json()}
    assert {"census-demo", "logins-demo", "posts-demo"} <= set(datasets) and datasets["census-demo"]["budget"] is None
    posts = alice.get("/privrelease/api/datasets/posts-demo").json()
    assert posts["schema"]["text"] == {"type": "string", "nullable": False} and posts["budget"]["cap"]["epsilon"] == 20.0
    assert "source" not in json.dumps(datasets) and str(home) not in json.dumps(datasets)
    # traversal to the steward's raw source, as a caller writes it: refused, and nothing of the file comes back
    raw = (home / "data" / "demo" / "census.csv").read_bytes()
    for path in (
        FILES.format(id=rid, name=RAW.replace("/", "%2F")),
        FILES.format(id=rid, name=RAW.replace("/", "%2f").replace(".", "%2e")),
        f"/privrelease/api/releases/{rid}/files/{RAW}",
        "/privrelease/api/releases/..%2F..%2Fdata%2Fdemo/files/census.csv",
    ):
        response = alice.get(path)
        assert response.status_code in (400, 403, 404) and raw[:200] not in response.content, (path, response.status_code)


class Traversing(Gate):
    """The weakened gate: no path check (dot segments, encoded slashes pass)."""

    @staticmethod
    def malformed(path: str) -> bool:
        return False


class TraversingUnchecked(Traversing):
    """Weaker still: its catalogue serves any name (``tests.release.test_catalogue.Unchecked``)."""

    CATALOGUE = Unchecked


# the file row taking the rest of the path ({name*}), as a route written for nested names would
NESTED = tuple(replace(r, route=FILES.replace("{name}", "{name*}")) if r.route == FILES else r for r in access.RULES)


def test_traversal_is_refused_by_each_defence_and_works_without_both(served, people, published):
    env, _ = served
    home, rid = Path(env["PRIVRELEASE_HOME"]), published["release_id"]
    raw = (home / "data" / "demo" / "census.csv").read_bytes()
    attack = "http://testserver" + FILES.format(id=rid, name=RAW.replace("/", "%2F"))  # a gate in this process
    with weakened(env, TraversingUnchecked, NESTED) as person:  # neither defence: the raw microdata comes back
        leaked = person("alice").get(attack)
        assert leaked.status_code == 200 and leaked.content == raw
    with weakened(env, Traversing, NESTED) as person:  # the catalogue's check alone: not a file its manifest lists
        refused = person("alice").get(attack)
        assert refused.status_code == 404 and "has no file" in refused.text and raw[:200] not in refused.content
    with weakened(env, type("PathsChecked", (Gate,), {"CATALOGUE": Unchecked}), NESTED) as person:  # the path check alone
        refused = person("alice").get(attack)
        assert refused.status_code == 400 and "malformed path" in refused.text


def test_the_analyst_downloads_her_release_from_the_ui(served, people):
    _in_browser(served, "catalogue", _downloads)


def _downloads(page: Page, env: dict, root: Path, shots: Path) -> None:
    api, ui, home = operator(env), env["PRIVRELEASE_GATE_URL"], Path(env["PRIVRELEASE_HOME"])
    ra = deployment(api, "ra")["id"]
    run = people_post(env, "alice", f"/deployments/{ra}/create_flow_run", {"parameters": {"release_id": "catalogue-ui"}})
    assert _wait(api, run["id"], root / "worker-ui-catalogue.log") == "COMPLETED"
    rid = "alice.catalogue-ui"  # the gate names her id <account>.<id>
    (artifact,) = api.post("/artifacts/filter", json={"artifacts": {"flow_run_id": {"any_": [run["id"]]}}}).json()
    assert f"(/privrelease/releases/{rid})" in artifact["data"] and str(home) not in artifact["data"]
    manifest = Catalogue(Home(home)).get(rid).manifest
    sign_in(page, ui, "alice")
    page.goto(f"{ui}/artifacts/artifact/{artifact['id']}")
    link = page.get_by_role("link", name="Download this release's files")
    assert link.get_attribute("href") == f"/privrelease/releases/{rid}"
    with page.context.expect_page() as opened:  # the UI opens an artifact's links in a new tab
        link.click()
    tab = opened.value
    tab.wait_for_url(re.compile(rf"/privrelease/releases/{re.escape(rid)}$"))
    tab.get_by_text(manifest["privacy"]["guarantee"]).first.wait_for()
    with tab.expect_download() as caught:
        tab.locator("button[data-file='data.csv']").click()
    saved = shots / "catalogue-data.csv"
    caught.value.save_as(saved)
    assert caught.value.suggested_filename == "data.csv" and _sha(saved.read_bytes()) == manifest["files"]["data.csv"]
    tab.screenshot(path=shots / "ui-catalogue.png", full_page=True)
    # every file at once: one zip of what the manifest lists, each file as published
    with tab.expect_download() as caught:
        tab.locator("#download-all").click()
    zipped = shots / "catalogue-all.zip"
    caught.value.save_as(zipped)
    with zipfile.ZipFile(zipped) as archive:
        got = {name: _sha(archive.read(name)) for name in archive.namelist()}
    assert caught.value.suggested_filename == f"{rid}.zip"
    assert got == {f"{rid}/{name}": digest for name, digest in Catalogue(Home(home)).get(rid).files().items()}

    # signing in on the catalogue's own form (a name and a password, not Prefect's one "name:password" field), which
    # sends her back to the page she asked for, and signs her in to Prefect's pages too
    tab.evaluate("localStorage.clear()")
    tab.goto(f"{ui}/privrelease/releases/{rid}")
    tab.get_by_role("button", name="Sign in").wait_for()  # signed out: the page asks her to sign in, where she is
    tab.goto(f"{ui}/privrelease/signin?next=/privrelease/releases/{rid}")
    tab.fill("#name", "nobody-of-ours")  # a name no account has: the same answer as a wrong password
    tab.fill("#password", "a guess")
    tab.get_by_role("button", name="Sign in").click()
    tab.get_by_text("That name and password were not accepted.").wait_for()
    tab.fill("#name", "alice")
    tab.fill("#password", PASSWORD)
    tab.get_by_role("button", name="Sign in").click()
    tab.wait_for_url(re.compile(rf"/privrelease/releases/{re.escape(rid)}$"))
    tab.get_by_text(manifest["privacy"]["guarantee"]).first.wait_for()
    tab.goto(f"{ui}/privrelease/signin?next=/%09/elsewhere.example/")  # only this site: a tab dropped makes //elsewhere
    tab.fill("#name", "alice")
    tab.fill("#password", PASSWORD)
    tab.get_by_role("button", name="Sign in").click()
    tab.wait_for_url(re.compile(r"/privrelease/releases$"))
    tab.goto(f"{ui}/dashboard")
    tab.wait_for_load_state("networkidle")
    assert "/login" not in tab.url, tab.url
