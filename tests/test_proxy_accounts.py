"""The proxy's per-account rate (issue #39's fifth attack, L2): an account looping on the gate from many
addresses, each under the proxy's per-address limits, cost the gate 400 answers a second. Through the
session's real proxy, gate and Prefect server, nginx refuses the loop past its burst (429, before the gate)
while another account's call is answered; through a proxy whose configuration lacks the per-account rate
(the weakened variant, in front of the same gate), every call of the loop reaches the gate."""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path

import httpx

import gate.proxy
from gate.accounts import Accounts
from gate.app import REFUSED
from tests.conftest import PASSWORD
from tests.test_gate_attack3 import _together
from tests.test_server import _free_port, _service

LOOPER, OTHER = "lupe", "ovid"  # accounts of this test's own (their limits are not shared with other tests')
ADDRESSES = [f"127.0.7.{i}" for i in range(1, 9)]  # the loop's: 75 calls each, under the per-address burst
CALLS, THREADS = 600, 16  # the loop: 600 calls, 16 at once (the gate's limit of one account's)
ROUTE = "/api/admin/settings"  # answered by the gate itself


def _client(url: str, name: str, address: str) -> httpx.Client:
    return httpx.Client(base_url=url, auth=(name, PASSWORD), timeout=60, transport=httpx.HTTPTransport(local_address=address))


def _loop(url: str) -> list[httpx.Response]:
    """The loop's answers: CALLS calls of LOOPER's, THREADS at once, from ADDRESSES."""

    def one(i: int) -> list[httpx.Response]:
        with _client(url, LOOPER, ADDRESSES[i % len(ADDRESSES)]) as client:
            return [client.get(ROUTE) for _ in range(CALLS // THREADS)]

    return [answer for batch in _together(THREADS, one) for answer in batch]


def _by_nginx(answers: list[httpx.Response]) -> int:
    """How many of ``answers`` nginx refused (429 without the gate's mark)."""
    return sum(1 for a in answers if a.status_code == 429 and a.headers.get(REFUSED) != "1")


@contextmanager
def _without_account_rate(env: dict, root: Path):
    """nginx with deploy/nginx.conf less its per-account rate, in front of the session's gate; yields its URL."""
    port, state = _free_port(), root / "proxy-no-account-rate"
    state.mkdir(exist_ok=True)
    text = gate.proxy.config(
        host="127.0.0.1", port=port, gate_port=int(env["PRIVRELEASE_GATE_PORT"]), ui=gate.proxy.ui_folder(), state=state
    )
    weak = "\n".join(line for line in text.splitlines() if "per_account" not in line)
    assert len(weak.splitlines()) == len(text.splitlines()) - 2  # the zone and its use
    (state / "nginx.conf").write_text(weak)
    nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    command = [nginx, "-p", str(state), "-e", "stderr", "-c", str(state / "nginx.conf"), "-g", "daemon off;"]
    with _service(command, env, root / "proxy-no-account-rate.log", f"http://127.0.0.1:{port}") as url:
        yield url


def test_an_account_looping_from_many_addresses_is_refused_by_the_proxy(served, people):
    env, root = served
    accounts = Accounts(Path(env["PRIVRELEASE_HOME"]) / "privrelease.duckdb")
    known = {a.name for a in accounts.all()}
    for name in (LOOPER, OTHER):
        if name not in known:
            accounts.add(name, "analyst", PASSWORD)
    url = env["PRIVRELEASE_GATE_URL"]
    answers = _loop(url)
    refused = _by_nginx(answers)
    assert refused > 0 and all(a.status_code in (200, 429) for a in answers), [a.status_code for a in answers][:40]
    with _client(url, OTHER, "127.0.7.20") as other:
        answer = other.get(ROUTE)
    assert answer.status_code == 200, answer.text
    # the weakened proxy: none of the loop's calls is refused by nginx
    with _without_account_rate(env, root) as weak:
        assert _by_nginx(_loop(weak)) == 0
