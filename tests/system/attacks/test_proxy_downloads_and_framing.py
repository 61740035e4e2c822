"""Issue #53's fourth and fifth findings, through a real proxy (nginx with deploy/nginx.conf), gate and Prefect
server, each also run where the one defence is missing, where the attack works:

- a download flood gave bystanders 502: nginx holds at most 192 connections to the gate and has no queue for
  more, and 2-4 accounts downloading from many addresses took them all (a file of the catalogue is streamed after
  the gate's decision, so it counted among no account's calls). Now the proxy lets an account hold as many calls
  in progress as the gate does, from however many addresses, and a download holds its account's slot in the gate
  until it is sent;
- pages could be framed by another site (clickjacking) and answers to people carried no Cache-Control. Now every
  answer says X-Frame-Options: DENY and frame-ancestors 'none', and every answer to a person no-store."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from privrelease.gate.access import CATALOGUE_PAGES, UI_PAGES
from privrelease.gate.accounts import Accounts
from privrelease.gate.app import REFUSED, Gate
from privrelease.gate.headers import PROOF
from tests.conftest import PASSWORD
from tests.system.attacks.test_proxy_connections_and_logs import reconfigured, without
from tests.system.test_gate_abuse import weakened
from tests.system.test_proxy import largest_script
from tests.system.test_signin_served import stack

FLOODERS, BYSTANDER = ("fern", "finn", "fay"), "bea"  # this file's accounts
ADDRESSES, AT_ONCE = 5, 16  # each flooding account's addresses, and its downloads at once from each
READS = 20  # the bystander's, during the flood


def _flood(url: str) -> tuple[list[int], list[httpx.Response]]:
    """FLOODERS download from ADDRESSES addresses, AT_ONCE at a time from each, while BYSTANDER reads READS times;
    the bystander's statuses, and the flood's answers."""
    done, flood = threading.Event(), []
    proofs = {  # each account signed in once, its proof shared by all its downloads (as a browser's tabs share it)
        name: httpx.get(f"{url}/api/admin/version", auth=(name, PASSWORD), timeout=60).cookies[PROOF] for name in FLOODERS
    }

    def downloader(name: str, address: str) -> None:
        transport = httpx.HTTPTransport(local_address=address)
        cookies = {PROOF: proofs[name]}
        with httpx.Client(base_url=url, auth=(name, PASSWORD), timeout=60, transport=transport, cookies=cookies) as client:
            while not done.is_set():
                flood.append(client.get("/api/slow-download"))
                if flood[-1].status_code != 200:
                    time.sleep(0.5)  # refused: again a little later

    threads = [
        threading.Thread(target=downloader, args=(name, f"127.0.55.{10 * i + a}"))
        for i, name in enumerate(FLOODERS)
        for a in range(1, ADDRESSES + 1)
        for _ in range(AT_ONCE)
    ]
    for t in threads:
        t.start()
    statuses = []
    try:
        time.sleep(3)  # every download's first call is in
        transport = httpx.HTTPTransport(local_address="127.0.55.100")
        with httpx.Client(base_url=url, auth=(BYSTANDER, PASSWORD), timeout=60, transport=transport) as bystander:
            for _ in range(READS):
                statuses.append(bystander.get("/api/admin/version").status_code)
                time.sleep(0.2)
    finally:
        done.set()
        for t in threads:
            t.join()
    return statuses, flood


def test_bystanders_keep_their_share_under_a_download_flood(served, tmp_path: Path):
    env, _ = served
    accounts = Accounts(Path(env["PRIVRELEASE_HOME"]) / "privrelease.duckdb")
    known = {a.name for a in accounts.all()}
    for name in (*FLOODERS, BYSTANDER):
        if name not in known:
            accounts.add(name, "analyst", PASSWORD)
    with stack(env, tmp_path, "downloads", edit=lambda text: text) as url:
        statuses, flood = _flood(url)
    assert statuses == [200] * READS, statuses
    by_gate = [a for a in flood if a.status_code == 429 and a.headers.get(REFUSED) == "1"]
    assert by_gate and all("calls are in progress" in a.text for a in by_gate)  # downloads count among an account's calls
    # the proxy and gate as they were: no per-account limit of calls in progress, and a download's slot given back
    # before it is sent: the flood takes the proxy's 192 connections to the gate, and the bystander gets 502
    unlimited = lambda text: without(text, "limit_conn account_calls", 1)  # noqa: E731
    with stack(env, tmp_path, "downloads-as-it-was", "early-slot", edit=unlimited) as url:
        statuses, _ = _flood(url)
    assert 502 in statuses, statuses


def _anyones(url: str) -> list[httpx.Response]:
    """Answers to anyone: every page of the UI and the catalogue, a file of the UI's, the UI's settings and health."""
    pages = [f"/{p}" for p in UI_PAGES] + [p.replace("{id}", "x") for p in CATALOGUE_PAGES]
    paths = ["/", *pages, largest_script(), "/robots.txt", "/privrelease-ui.css", "/ui-settings", "/api/health", "/nowhere"]
    with httpx.Client(base_url=url, timeout=60) as client:
        return [client.get(p) for p in paths]


def _peoples(client: httpx.Client) -> list[httpx.Response]:
    """Answers to a person: Prefect's (passed on), the gate's own, the catalogue's, a refusal and a wrong password."""
    return [
        client.post("/api/flow_runs/filter", json={"limit": 1}),
        client.get("/api/admin/version"),
        client.get("/privrelease/api/index.json"),
        client.delete("/api/work_pools/privrelease"),  # 403
        client.get("/api/admin/version", auth=("alice", "a wrong password")),  # 401
    ]


def _framed(answer: httpx.Response) -> bool:
    """Whether ``answer`` may be shown in another site's frame."""
    policies = answer.headers.get_list("content-security-policy")
    return answer.headers.get("x-frame-options") != "DENY" or not any("frame-ancestors 'none'" in p for p in policies)


class Cacheable(Gate):
    """The gate as it was: answers to people passed back with whatever Cache-Control Prefect gave them."""

    async def __call__(self, request):
        return await self.handle(request)


def test_no_page_is_framed_and_no_answer_to_a_person_is_kept(served, people, tmp_path: Path):
    env, _ = served
    url = env["PRIVRELEASE_GATE_URL"]
    with httpx.Client(base_url=url, auth=("alice", PASSWORD), timeout=60) as client:
        peoples = _peoples(client)
    assert [a.status_code for a in peoples] == [200, 200, 200, 403, 401]
    for answer in _anyones(url) + peoples:
        assert not _framed(answer), (answer.request.url, answer.status_code, answer.headers)
    assert all(a.headers.get("cache-control") == "no-store" for a in peoples), [a.headers for a in peoples]
    # the proxy without its two headers: the UI's pages may be framed (only the catalogue's pages said so)
    unframed = lambda text: without(text, "add_header X-Frame-Options", 1).replace(  # noqa: E731
        "add_header Content-Security-Policy \"frame-ancestors 'none'\" always;", ""
    )
    with reconfigured(env, tmp_path, "proxy-framed", int(env["PRIVRELEASE_GATE_PORT"]), unframed) as open_url:
        answers = _anyones(open_url)
        assert all(_framed(a) for a in answers) and "content-security-policy" not in answers[0].headers  # the UI's page
    # the gate as it was: Prefect's answer to a person carries no Cache-Control
    with weakened(env, gate_class=Cacheable) as person:
        assert "cache-control" not in person("alice").post("/flow_runs/filter", json={"limit": 1}).headers
