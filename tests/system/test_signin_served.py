"""Issue #53's sign-in findings, attacked through a real proxy (nginx with deploy/nginx.conf), a real gate
(``python -m tests.support.slow_gate``: the gate as ``python -m privrelease.gate`` starts it, its throttle leaking one failure in
LEAK_S seconds so that the tests can wait for it) and the session's Prefect server, from loopback addresses the
proxy names; each attack also run through the variant without the one defence (``tests/support/slow_gate.py``
WEAKENED), where it works:

- the throttle answered a right password it had checked before while it refused every wrong one;
- guesses sent at once were all checked, and an address that kept failing never waited longer;
- strangers' sign-ins (names no account has), each hashed, filled the queue of checks, and a real account's
  first sign-in was refused;
- any Authorization header made its caller a person to the proxy, so its limits for anyone never applied; and
  sign-ins that had not succeeded took as many of the proxy's connections to the gate as people's calls."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from privrelease.gate.accounts import Accounts
from privrelease.gate.app import REFUSED
from privrelease.gate.headers import PROOF
from tests.conftest import PASSWORD
from tests.system.attacks.test_gate_prefect_load import _together
from tests.system.attacks.test_proxy_connections_and_logs import reconfigured
from tests.system.test_server import gate as started_gate

LEAK_S = 5  # the variant gate's seconds for one failed sign-in to leak out (the served gate's: 60)
SIGN_IN_LIMITS = ("zone=signing_in", "limit_conn signing_in_calls")  # the proxy's own limits of sign-ins per address


def unlimited_sign_ins(text: str) -> str:
    """The proxy without its limits of sign-ins per address (the last test here checks them), so that the gate's own
    throttle is what answers the attacks on it."""
    return "\n".join(line for line in text.splitlines() if not any(word in line for word in SIGN_IN_LIMITS))


ROUTE = "/api/admin/version"  # answered by the gate itself: a sign-in and nothing more
TESS, RHEA = "tess", "rhea"  # this file's accounts; rhea signs in only once, during the strangers' flood


@contextmanager
def stack(
    env: dict, root: Path, name: str, weakened: str = "", leak: float = LEAK_S, edit: Callable[[str], str] = unlimited_sign_ins
) -> Iterator[str]:
    """tests.support.slow_gate (``weakened``: one of its WEAKENED, or none) in front of the session's server, and a proxy in
    front of it (its configuration changed by ``edit``); yields the proxy's URL."""
    extra = {"PRIVRELEASE_TEST_LEAK_S": str(leak), "PRIVRELEASE_TEST_WEAKENED": weakened}
    with started_gate(env | extra, root / f"{name}-gate.log", module="tests.support.slow_gate") as gate_url:
        with reconfigured(env, root, name, int(gate_url.rsplit(":", 1)[1]), edit) as url:
            yield url


@pytest.fixture(scope="module")
def stacks(served, tmp_path_factory) -> Iterator[dict[str, str]]:
    """The gate and its variants, each behind its own proxy: their URLs by variant ("" for the gate)."""
    env, _ = served
    accounts = Accounts(Path(env["PRIVRELEASE_HOME"]) / "privrelease.duckdb")
    known = {a.name for a in accounts.all()}
    for name in (TESS, RHEA):
        if name not in known:
            accounts.add(name, "analyst", PASSWORD)
    root = tmp_path_factory.mktemp("signin")
    with (
        stack(env, root, "gate") as gate,
        stack(env, root, "cache-first", "cache-first") as cache_first,
        stack(env, root, "counted-after", "counted-after") as counted_after,
        stack(env, root, "one-queue", "one-queue") as one_queue,
    ):
        yield {"": gate, "cache-first": cache_first, "counted-after": counted_after, "one-queue": one_queue}


def _from(url: str, address: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=120, transport=httpx.HTTPTransport(local_address=address))


def _throttled(answer: httpx.Response) -> bool:
    return (
        answer.status_code == 429
        and answer.headers.get(REFUSED) == "1"
        and int(answer.headers["retry-after"]) > 0
        and re.search(r"too many failed sign-ins .*; try again in \d+ seconds", answer.text) is not None
    )


def test_a_throttled_address_is_refused_the_right_password_too(stacks):
    """The first finding: 600 x 429 for wrong guesses, then 200 for the right one. Now the right password is refused
    while the address is throttled (its owner elsewhere still signs in), and let in once the wait is over."""
    for variant in ("", "cache-first"):
        guesser, owner = _from(stacks[variant], "127.0.53.1"), _from(stacks[variant], "127.0.53.2")
        assert guesser.get(ROUTE, auth=(TESS, PASSWORD)).status_code == 200  # checked, and remembered
        assert [guesser.get(ROUTE, auth=(TESS, f"guess-{i}")).status_code for i in range(3)] == [401] * 3
        assert _throttled(guesser.get(ROUTE, auth=(TESS, "guess-3")))
        right = guesser.get(ROUTE, auth=(TESS, PASSWORD))
        if variant:
            assert right.status_code == 200, variant  # the variant: the right one is told apart from the rest
            continue
        assert _throttled(right), right.text
        assert owner.get(ROUTE, auth=(TESS, PASSWORD)).status_code == 200  # not locked out
        time.sleep(int(right.headers["retry-after"]) + 0.5)
        assert guesser.get(ROUTE, auth=(TESS, PASSWORD)).status_code == 200  # the wait is over


def _by_proxy(answer: httpx.Response) -> bool:
    """Whether ``answer`` is nginx's refusal (429 without the gate's mark): past its limits, before the gate."""
    return answer.status_code == 429 and answer.headers.get(REFUSED) is None


def test_guesses_sent_at_once_are_checked_three_at_most(stacks):
    """One address sends 16 guesses at once (16 names: a password spray), as many as the proxy lets it hold: three
    are checked, the rest refused before any check; without the count of checks in progress, all 16 are checked."""
    for variant, checked in (("", 3), ("counted-after", 16)):
        client = _from(stacks[variant], "127.0.53.10")
        answers = _together(16, lambda i, c=client: c.get(ROUTE, auth=(f"sprayed{i}", "Summer2026!")))
        assert sorted(a.status_code for a in answers) == [401] * checked + [429] * (16 - checked), variant
        assert all(_throttled(a) for a in answers if a.status_code == 429)


def _retries(client: httpx.Client, rounds: int) -> list[int]:
    """Retry-After after an address's first three failures, then after one more failure each time the wait is over
    (a name of no account's: a stranger's sign-in is throttled as any other)."""
    for i in range(3):
        client.get(ROUTE, auth=("ursula", f"wrong-{i}"))
    seen = []
    for i in range(rounds):
        answer = client.get(ROUTE, auth=("ursula", "wrong"))
        assert _throttled(answer), answer.text
        seen.append(int(answer.headers["retry-after"]))
        if i + 1 < rounds:
            time.sleep(seen[-1] + 0.5)
            assert client.get(ROUTE, auth=("ursula", f"wrong-again-{i}")).status_code == 401  # the one guess it gets
    return seen


def test_an_address_that_keeps_failing_waits_longer_each_time(stacks):
    first, second = _retries(_from(stacks[""], "127.0.53.20"), 2)
    assert first <= LEAK_S < second  # the ban doubled
    assert max(_retries(_from(stacks["counted-after"], "127.0.53.20"), 2)) <= LEAK_S  # without bans: never longer


def _strangers(url: str, done: threading.Event) -> tuple[list[threading.Thread], list[httpx.Response]]:
    """40 addresses, 3 callers each, signing in with names no account has until ``done``."""
    answers: list[httpx.Response] = []

    def caller(address: str, k: int) -> None:
        with _from(url, address) as client:
            n = 0
            while not done.is_set():
                answers.append(client.get(ROUTE, auth=(f"stranger-{address}-{k}-{n}", "guess")))
                n += 1
                if answers[-1].status_code == 429:
                    time.sleep(0.25)

    threads = [threading.Thread(target=caller, args=(f"127.0.54.{i}", k)) for i in range(1, 41) for k in range(3)]
    for t in threads:
        t.start()
    return threads, answers


def _during_the_flood(url: str) -> tuple[httpx.Response, list[httpx.Response]]:
    """RHEA's first sign-in to the gate at ``url`` while strangers flood it; and the strangers' answers."""
    done = threading.Event()
    threads, answers = _strangers(url, done)
    try:
        time.sleep(3)  # every caller's first sign-in is in
        rhea = _from(url, "127.0.53.30").get(ROUTE, auth=(RHEA, PASSWORD))
    finally:
        done.set()
        for t in threads:
            t.join()
    return rhea, answers


def test_strangers_never_take_a_real_accounts_sign_in(stacks):
    rhea, answers = _during_the_flood(stacks[""])
    assert rhea.status_code == 200, rhea.text
    wrong = _from(stacks[""], "127.0.53.31").get(ROUTE, auth=(TESS, "a wrong password"))
    strangers = [a for a in answers if a.status_code == 401]
    assert wrong.status_code == 401 and strangers and all(a.content == wrong.content for a in strangers)
    assert {a.status_code for a in answers} <= {401, 429}
    assert all(
        _by_proxy(a) or _throttled(a) or "too many sign-ins are being checked" in a.text for a in answers if a.status_code == 429
    )
    # the variant: strangers hashed, and every sign-in waits in one queue of 24: the real account is refused
    rhea, _ = _during_the_flood(stacks["one-queue"])
    assert rhea.status_code == 429 and "too many sign-ins are being checked" in rhea.text


def _garbage_held(url: str, address: str, n: int) -> list[socket.socket]:
    """``n`` calls with an Authorization header that is no credential, sending their body a byte at a time."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    held = []
    for _ in range(n):
        s = socket.create_connection((host, int(port)), timeout=10, source_address=(address, 0))
        s.sendall(b"POST /api/flow_runs/count HTTP/1.1\r\nHost: x\r\nAuthorization: Basic !!garbage!!\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")  # fmt: skip
        held.append(s)
    return held


def _anyones_share(text: str) -> str:
    """The proxy as it was: any Authorization header makes a person."""
    return re.sub(r"map \$http_authorization \$account \{.*?\n    \}", "map $http_authorization $account {\n        default $http_authorization;\n    }", text, flags=re.S)  # fmt: skip


def test_credentials_that_do_not_decode_are_anyones_to_the_proxy(served, people, tmp_path: Path):
    """Six calls with a garbage Authorization header held by one address: its seventh is refused by the proxy (429,
    anyone's 6 at once), while a person's is passed on; the proxy as it was (any header a person's, and no limits of
    sign-ins) passes the garbage on to the gate."""
    env, _ = served
    port = int(env["PRIVRELEASE_GATE_PORT"])
    as_it_was = lambda text: unlimited_sign_ins(_anyones_share(text))  # noqa: E731
    for name, edit, by_proxy in (("proxy", lambda text: text, True), ("proxy-as-it-was", as_it_was, False)):
        with reconfigured(env, tmp_path, name, port, edit) as url:
            held = _garbage_held(url, "127.0.53.40", 6)
            try:
                time.sleep(1)  # every held call's head is read
                client = _from(url, "127.0.53.40")
                seventh = client.get(ROUTE, headers={"Authorization": "Basic !!garbage!!"})
                assert (seventh.status_code, seventh.headers.get(REFUSED)) == ((429, None) if by_proxy else (401, "1")), name
                assert client.get(ROUTE, auth=("alice", PASSWORD)).status_code == 200, name
            finally:
                for s in held:
                    s.close()


def _refused_of_12(url: str, cookies: dict) -> int:
    """How many of 12 calls of alice's at once from 127.0.53.50 with ``cookies`` the proxy refused."""
    answers = _together(12, lambda i: _from(url, "127.0.53.50").get(ROUTE, auth=("alice", PASSWORD), cookies=cookies))
    assert {a.status_code for a in answers} <= {200, 429}
    return sum(_by_proxy(a) for a in answers)


def test_sign_ins_that_have_not_succeeded_are_few_per_address(served, people, tmp_path: Path):
    """12 calls at once from one address with a right credential but no proof that it signed in (a client that keeps
    no cookie, or a guesser's fresh credentials): the proxy passes on two at a time and refuses the rest (429, before
    the gate), and so with a forged proof; with the proof the gate gave the same person from another address, none is refused
    by the proxy. The proxy without its sign-in limits passes every one on."""
    env, _ = served
    port = int(env["PRIVRELEASE_GATE_PORT"])
    for name, edit, limited in (("proxy", lambda t: t, True), ("proxy-unlimited", unlimited_sign_ins, False)):
        with reconfigured(env, tmp_path, name, port, edit) as url:
            elsewhere = _from(url, "127.0.53.51")
            assert elsewhere.get(ROUTE, auth=("alice", PASSWORD)).status_code == 200 and PROOF in elsewhere.cookies, name

            refused = [_refused_of_12(url, cookies) for cookies in ({}, {PROOF: "forged"}, {PROOF: elsewhere.cookies[PROOF]})]
            assert min(refused[:2]) > 0 if limited else refused[:2] == [0, 0], (name, refused)
            assert refused[2] == 0, (name, refused)
