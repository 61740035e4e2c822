"""Headers the gate cannot read (issue #39's seventh attack, H4 and L1), through the real proxy, gate and server:

- a byte outside printable ASCII in a header the gate reads or passes on is refused (400) before anything
  else; it made the gate's own call to Prefect raise, answered 500 with a traceback in the gate's log, and
  reset a connection the proxy then gave to someone else's call (502);
- a defect the gate did not foresee is answered (500, one line), not left to the server;
- credentials are read in one spelling only, the one the proxy counts an account's calls by.

Each is shown to matter on a weakened gate (in this process, against the same server)."""

from __future__ import annotations

import base64

import httpx
import pytest

from privrelease.gate import headers
from privrelease.gate.app import Gate
from tests.conftest import PASSWORD
from tests.system.test_gate_abuse import refused, weakened

LATIN = b"\xe9t\xe9"


def _anyone(env: dict) -> httpx.Client:
    return httpx.Client(base_url=f"{env['PRIVRELEASE_GATE_URL']}/api", timeout=30)


def test_a_header_byte_outside_ascii_is_refused_before_anything(served, people, monkeypatch):
    env, _ = served
    anyone = _anyone(env)
    for name in ("User-Agent", "Accept", "Accept-Language", "Content-Type"):
        answer = anyone.get("/health", headers={name: LATIN})
        assert answer.status_code == 400 and refused(answer), (name, answer.status_code, answer.text)
        assert f"the '{name.lower()}' header holds a byte outside printable ASCII" in answer.text, answer.text
    answer = anyone.post("/flow_runs/count", headers={"Authorization": b"Basic " + LATIN}, json={})
    assert answer.status_code == 400 and refused(answer), answer.text
    signed_in = people["alice"].post("/flow_runs/count", headers={"User-Agent": LATIN}, json={})
    assert signed_in.status_code == 400 and refused(signed_in)
    assert people["alice"].post("/flow_runs/count", json={}).status_code == 200  # the same call, in ASCII
    # weakened: without the check the gate's call to Prefect fails; the catch-all still answers it (500, one line)
    monkeypatch.setattr(headers, "unreadable", lambda raw: None)
    with weakened(env) as person:
        answer = person("alice").post("/flow_runs/count", headers={"User-Agent": LATIN}, json={})
        assert answer.status_code == 500 and "internal error" in answer.text, answer.text


class Unguarded(Gate):  # the gate without its catch-all
    async def __call__(self, request):
        return await self.handle(request)


def test_without_the_catch_all_a_defect_reaches_the_server(served, people, monkeypatch):
    env, _ = served
    monkeypatch.setattr(headers, "unreadable", lambda raw: None)
    with weakened(env, gate_class=Unguarded) as person, pytest.raises(UnicodeEncodeError):
        person("alice").post("/flow_runs/count", headers={"User-Agent": LATIN}, json={})


def test_credentials_in_another_spelling_are_refused(served, people, monkeypatch):
    env, _ = served
    token = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    anyone = _anyone(env)
    assert anyone.post("/flow_runs/count", headers={"Authorization": f"Basic {token}"}, json={}).status_code == 200
    spellings = [f"basic {token}", f"BASIC {token}", f"Basic  {token}",
                 f"Basic {token}==", f"Basic {token[:4]}\t{token[4:]}"]  # fmt: skip
    for spelling in spellings:
        answer = anyone.post("/flow_runs/count", headers={"Authorization": spelling}, json={})
        assert answer.status_code in (400, 401) and refused(answer), (spelling, answer.status_code)

    # weakened: the gate reading any spelling (as before) lets one account's calls go uncounted by the proxy
    def lenient(header: str):
        scheme, _, rest = header.strip().partition(" ")
        raw = base64.b64decode(rest.strip() + "==")
        name, _, password = raw.decode().partition(":")
        return (name, password) if scheme.lower() == "basic" else None

    monkeypatch.setattr(headers, "credentials", lenient)
    with weakened(env) as person:
        client = person("alice")
        client.auth = None
        answer = client.post("/flow_runs/count", headers={"Authorization": f"basic  {token}"}, json={})
        assert answer.status_code == 200, answer.text
