"""Abuse of the gate's open routes (issue #39), each through the real gate and server, and each shown to
work on a weakened gate (built in this process, against the same server, without the one defence):

- a schema of the caller's for Prefect to validate (its regular expressions run in the server's event loop);
- queries with LIKE wildcards, huge limits and lists; bodies nested past any parser, or sent as text/plain;
- a flood of wrong passwords from many addresses (throttled before hashing, logged with name and address);
- taking another analyst's release id before their scheduled run uses it."""

from __future__ import annotations

import base64
import json
import math
import os
import re
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from starlette.requests import Request
from starlette.testclient import TestClient

from privrelease.gate import access, bounds, call, rewrites, throttle
from privrelease.gate.accounts import Accounts
from privrelease.gate.app import REFUSED, Gate, create_app
from tests.conftest import PASSWORD
from tests.system.test_server import deployment, operator

EVIL = {"schema": {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a+)+$"}}},
        "values": {"x": "aaaa!"}}  # the body, with few a's: the weakened gate shows the regex runs  # fmt: skip


def refused(response: httpx.Response) -> bool:
    return response.headers.get(REFUSED) == "1"


@contextmanager
def weakened(env: dict, gate_class: type[Gate] = Gate, rules: tuple[access.Rule, ...] | None = None):
    """A gate without one defence (its class or its rules), in this process, in front of the served Prefect;
    yields a function making a person's client of it."""
    roomy = {k: v for k, v in env.items() if k.startswith(("PRIVRELEASE_ACCOUNT_", "PRIVRELEASE_POOL_"))}  # the served gate's
    saved = {k: os.environ.get(k) for k in roomy}
    os.environ.update(roomy)
    try:
        app = create_app(
            Path(env["PRIVRELEASE_HOME"]),
            env["PREFECT_API_URL"].removesuffix("/api"),
            env["PREFECT_API_AUTH_STRING"],
            gate_class,
            rules,
        )
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    with TestClient(app, base_url="http://testserver/api") as client:

        def person(name: str) -> httpx.Client:
            client.auth = (name, PASSWORD)
            return client

        yield person


def without(route: str, method: str = "POST", **fields) -> tuple[access.Rule, ...]:
    """POLICY with the row for ``method route`` stripped of ``fields`` (set to None)."""
    return tuple(replace(r, **fields) if (r.method, r.route) == (method, route) else r for r in access.RULES)


# -- 1. a caller's schema -----------------------------------------------------------------------------------


def test_only_a_deployments_own_schema_is_validated(served, people):
    env, _ = served
    api, alice = operator(env), people["alice"]
    response = alice.post("/ui/schemas/validate", json=EVIL | {"values": {"x": "a" * 29 + "!"}})
    assert refused(response) and response.status_code == 403 and "deployment's own parameter schema" in response.text
    # what the run form sends: its deployment's schema, whole (as the UI's model maps it) or one field of it
    schema = deployment(api, "dpne")["parameter_openapi_schema"]
    from privrelease.gate.schemas import mapped

    for asked, values in (
        (mapped(schema, top=True), {"epsilon": "many"}),
        (
            {"definitions": schema.get("definitions"), "properties": {"noun-x": mapped(schema["properties"]["epsilon"])}},
            {"noun-x": "many"},
        ),
    ):
        asked = {k: v for k, v in asked.items() if v is not None}
        checked = alice.post("/ui/schemas/validate", json={"schema": asked, "values": values})
        assert checked.status_code == 200 and not refused(checked), checked.text
        assert checked.json()["valid"] is False  # epsilon is a number
    # a field of the form with a pattern of the caller's added, or another form's field under this one's: refused
    planted = mapped(schema["properties"]["epsilon"]) | {"pattern": "^(a+)+$"}
    assert refused(alice.post("/ui/schemas/validate", json={"schema": {"properties": {"x": planted}}, "values": {}}))
    # the weakened gate (the row passes the schema on) lets the caller's regular expression run on the server
    with weakened(env, rules=without("/api/ui/schemas/validate", body=None)) as person:
        answer = person("alice").post("/ui/schemas/validate", json=EVIL)
        assert answer.status_code == 200 and "^(a+)+$" in answer.text and answer.json()["valid"] is False


# -- 4. and the audit: bodies and queries -----------------------------------------------------------------------


class Unbounded(Gate):
    """The gate as it was: any content type, nesting unchecked."""

    async def parse(self, request: Request):
        return json.loads(await request.body() or b"{}")


def _nested(levels: int) -> bytes:
    return b'{"flows": ' + b"[" * levels + b"]" * levels + b"}"


def test_bodies_must_be_json_of_bounded_nesting(served, people):
    env, _ = served
    alice = people["alice"]
    for levels in (bounds.MAX_DEPTH + 1, 5000):
        response = alice.post("/flows/filter", content=_nested(levels), headers={"content-type": "application/json"})
        assert refused(response) and response.status_code == 400 and f"at most {bounds.MAX_DEPTH}" in response.text, levels
    assert (
        alice.post("/flows/filter", content=_nested(3), headers={"content-type": "application/json"}).status_code == 422
    )  # Prefect's
    ra = deployment(operator(env), "ra")["id"]
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        response = alice.post(f"/deployments/{ra}/create_flow_run", content=b'{"parameters": {}}', headers={"content-type": kind})
        assert refused(response) and response.status_code == 415 and "Content-Type: application/json" in response.text, kind
    with weakened(env, gate_class=Unbounded) as person:
        deep = person("alice").post("/flows/filter", content=_nested(5000), headers={"content-type": "application/json"})
        assert deep.status_code == 500 and "internal error" in deep.text  # a RecursionError in the gate
        created = person("alice").post(
            f"/deployments/{ra}/create_flow_run", content=b'{"parameters": {}}', headers={"content-type": "text/plain"}
        )
        assert created.status_code == 201  # what a cross-site form can send starts a run
        operator(env).delete(f"/flow_runs/{created.json()['id']}")


def test_queries_are_bounded(served, people):
    env, _ = served
    api, alice = operator(env), people["alice"]
    wild = {"flow_runs": {"name": {"like_": "%a%a%a%a%a%a%a%a%a%a%a%a%b"}}}
    response = alice.post("/flow_runs/filter", json=wild)
    assert refused(response) and response.status_code == 403 and "like_" in response.text
    assert api.post("/flow_runs/filter", json=wild).status_code == 200  # Prefect hands the wildcards to LIKE
    many = {"flow_runs": {"id": {"any_": [f"00000000-0000-4000-8000-{i:012d}" for i in range(bounds.MAX_LIST + 1)]}}}
    response = alice.post("/flow_runs/count", json=many)
    assert refused(response) and f"at most {bounds.MAX_LIST} items" in response.text
    assert api.post("/flow_runs/count", json=many).status_code == 200
    # a limit past the cap is lowered, not refused (Prefect itself refuses it)
    assert alice.post("/flow_runs/filter", json={"limit": 10_000}).status_code == 200
    assert api.post("/flow_runs/filter", json={"limit": 10_000}).status_code == 422
    plain = alice.post("/flow_runs/filter", json={"flow_runs": {"name": {"like_": "a"}}, "limit": 5})
    assert plain.status_code == 200 and len(plain.json()) <= 5
    with weakened(env, rules=without("/api/flow_runs/filter", body=None)) as person:
        assert person("alice").post("/flow_runs/filter", json=wild).status_code == 200


# -- 3. sign-in flood ----------------------------------------------------------------------------------------


def _flood(client: Callable[[int], httpx.Client], attackers: int, tries: int) -> list[httpx.Response]:
    """``attackers`` clients at once (``client(i)``: each from its own address), each trying ``tries`` wrong
    passwords for the owner's name."""
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def attack(i: int) -> None:
        caller = client(i)
        for t in range(tries):
            response = caller.post("/flow_runs/count", json={}, auth=("owner", f"wrong-{i}-{t}"))
            with lock:
                answers.append(response)

    threads = [threading.Thread(target=attack, args=(i,)) for i in range(attackers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def _from(url: str, address: str) -> httpx.Client:
    """A client whose connections leave from ``address`` (any of 127/8 on loopback): the proxy names the caller by it."""
    return httpx.Client(base_url=url, timeout=120, transport=httpx.HTTPTransport(local_address=address))


class Unthrottled(Gate):
    """The gate with a throttle that never refuses."""

    def __init__(self, *args):
        super().__init__(*args)
        self.signin.throttle = throttle.Throttle(capacity=math.inf)


def test_wrong_passwords_are_throttled_before_hashing(served, people):
    """40 clients (addresses the proxy names) try wrong passwords for the owner's name: once the name has failed
    a few times, an address that failed is refused with 429 and a Retry-After before any hashing, so each attacker
    costs one hash; the owner, from an address without failures, is hashed at once and signs in."""
    env, root = served
    Accounts(Path(env["PRIVRELEASE_HOME"]) / "privrelease.duckdb").add("owner", "analyst", PASSWORD)
    started = time.monotonic()
    url = f"{env['PRIVRELEASE_GATE_URL']}/api"
    answers = _flood(lambda i: _from(url, f"127.0.1.{i + 1}"), 40, 4)
    leaked = math.ceil((time.monotonic() - started) / throttle.LEAK_S)  # failures the name's bucket let out meanwhile
    hashed = [a for a in answers if a.status_code == 401]
    throttled = [a for a in answers if a.status_code == 429]
    assert len(hashed) + len(throttled) == 160 and len(hashed) <= 40 + throttle.CAPACITY + leaked, len(hashed)
    for answer in throttled:  # the throttle's, or the name's checks in progress (privrelease.gate.signin.NAME_WAITING)
        wait = int(answer.headers["retry-after"])
        busy = "too many sign-ins are being checked" in answer.text
        assert wait > 0 and (busy or f"try again in {wait} seconds" in answer.text) and refused(answer), answer.text
    owner = _from(url, "127.0.9.1").get("/admin/version", auth=("owner", PASSWORD))
    assert owner.status_code == 200, owner.text
    assert re.search(r"failed sign-in: name 'owner' from 127\.0\.1\.\d+", (root / "gate.log").read_text())
    # the weakened gate (a throttle that never refuses) hashes every attempt
    with weakened(env, gate_class=Unthrottled) as person:
        answers = _flood(lambda i: person("alice"), 1, 12)
    assert [a.status_code for a in answers] == [401] * 12


def test_the_address_is_the_proxys_x_real_ip_only_from_the_proxy():
    def request(peer: str, real: str | None) -> Request:
        headers = [(b"x-real-ip", real.encode())] if real else []
        return Request({"type": "http", "client": (peer, 5000), "headers": headers, "method": "GET", "path": "/"})

    assert Gate.address(request("127.0.0.1", "203.0.113.9")) == "203.0.113.9"
    assert Gate.address(request("198.51.100.4", "203.0.113.9")) == "198.51.100.4"  # not the proxy: its own address
    assert Gate.address(request("127.0.0.1", "not-an-address")) == "127.0.0.1"


# -- 5. release ids --------------------------------------------------------------------------------------------


def test_release_ids_are_the_requesters_own(served, people):
    env, _ = served
    api = operator(env)
    ra = deployment(api, "ra")["id"]
    week = (datetime.now(UTC) + timedelta(days=7)).isoformat()  # within the schedule horizon (privrelease.gate.quotas)
    later = {"type": "SCHEDULED", "state_details": {"scheduled_time": week}}
    vera = people["vera"].post(
        f"/deployments/{ra}/create_flow_run", json={"parameters": {"release_id": "monthly"}, "state": later}
    )
    assert vera.status_code == 201 and vera.json()["parameters"]["release_id"] == "vera.monthly"
    alice = people["alice"]
    taken = alice.post(f"/deployments/{ra}/create_flow_run", json={"parameters": {"release_id": "vera.monthly"}})
    assert refused(taken) and taken.status_code == 403 and "alice.<release_id>" in taken.text
    own = alice.post(f"/deployments/{ra}/create_flow_run", json={"parameters": {"release_id": "monthly"}})
    assert own.json()["parameters"]["release_id"] == "alice.monthly"
    again = alice.post(f"/deployments/{ra}/create_flow_run", json={"parameters": {"release_id": "alice.monthly"}})
    assert again.json()["parameters"]["release_id"] == "alice.monthly"  # a retry of her own keeps its id
    created = [vera.json()["id"], own.json()["id"], again.json()["id"]]

    async def as_asked(body: dict, call: call.Call) -> dict | str:  # the rewrite without the namespace
        return await rewrites.start_run(body | {"parameters": {}}, call) | {"parameters": body.get("parameters", {})}

    rules = tuple(replace(r, body=as_asked) if r.body is rewrites.start_run else r for r in access.RULES)
    with weakened(env, rules=rules) as person:
        stolen = person("alice").post(f"/deployments/{ra}/create_flow_run", json={"parameters": {"release_id": "vera.monthly"}})
        assert stolen.json()["parameters"]["release_id"] == vera.json()["parameters"]["release_id"]  # vera's id, taken first
        created.append(stolen.json()["id"])
    for run_id in created:
        api.delete(f"/flow_runs/{run_id}")


def test_a_page_token_is_bounded_like_a_filter():
    """A forged token's filter is rebuilt (unit: the events module), and a token that is not one is refused."""
    from privrelease.gate import events
    from privrelease.gate.accounts import Account

    alice = Account("alice", "analyst", "", "")
    forged = {"filter": {"event": {"prefix": ["prefect.variable."]}}, "count": 10, "page_size": 50, "offset": 0}
    token = base64.b64encode(base64.b64encode(json.dumps(forged).encode())).decode()
    rebuilt = json.loads(base64.b64decode(base64.b64decode(events.page_token(token, alice))))
    assert rebuilt["filter"]["event"]["prefix"] == [events.NOTHING]
    assert rebuilt["filter"]["related"] == [{"id": ["prefect.tag.requested-by:alice"]}]
    again = json.loads(base64.b64decode(base64.b64decode(events.page_token(events.page_token(token, alice), alice))))
    assert again == rebuilt  # a token the gate rebuilt is rebuilt to itself
    for bad in ("x", base64.b64encode(b"{}").decode()):
        with pytest.raises(bounds.OutOfBounds):
            events.page_token(bad, alice)
