"""The proxy's per-account rate (issue #39's fifth attack, L2): an account looping on the gate from many
addresses, each under the proxy's per-address limits, cost the gate 400 answers a second. Through the
session's real proxy, gate and Prefect server, nginx refuses the loop past its burst (429, before the gate)
while another account's call is answered; through a proxy whose configuration lacks the per-account rate
(the weakened variant, in front of the same gate), every call of the loop reaches the gate."""

from __future__ import annotations

from pathlib import Path

import httpx

from privrelease.gate.accounts import Accounts
from privrelease.gate.app import REFUSED
from tests.conftest import PASSWORD
from tests.system.attacks.test_gate_prefect_load import _together
from tests.system.attacks.test_proxy_connections_and_logs import reconfigured, without

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
    # the weakened proxy (less the per-account zone and its use): none of the loop's calls is refused by nginx
    with reconfigured(
        env, root, "proxy-no-account-rate", int(env["PRIVRELEASE_GATE_PORT"]), lambda text: without(text, "per_account", 2)
    ) as weak:
        assert _by_nginx(_loop(weak)) == 0
