"""The seventh attack's H1 and L2 (issue #39), through the real proxy, gate and server, each shown to work on the
gate as it was (a weakened gate in this process, against the same server):

- times the gate could not read (ordinal dates, epoch milliseconds as text, numbers) and numbers it did not
  bound (a history's interval, a log level, 1e999, whole numbers past 64 bits, a page token's offset) and
  strings holding a lone surrogate reached Prefect, which answered 500 and wrote a 13-75 KB traceback each;
- a run Prefect failed on (500) was not counted in the account's runs a minute;
- the events' next page named Prefect's own address."""

from __future__ import annotations

import base64
import json
import time
from dataclasses import replace
from datetime import datetime

import httpx

from privrelease.gate import access, bounds, call, rewrites
from privrelease.gate.app import Gate
from privrelease.gate.quotas import Quotas
from tests.system.test_gate_abuse import refused, weakened, without
from tests.system.test_server import deployment, operator

WINDOW = {"history_start": "2026-01-01T00:00:00Z", "history_end": "2026-02-01T00:00:00Z"}
SURROGATE = "the JSON body holds a string that is not UTF-8 text"
# (route, body as sent, the gate's answer, what it says): each got Prefect's 500 from the gate as it was
ASKED = [
    ("/events/count-by/time", {"filter": {"occurred": {"since": "0001-001", "until": "2026-001"}}, "time_unit": "week",
     "time_interval": 1000}, 403, "since takes a time between the years 1970 and 2200, as ISO 8601 text"),
    ("/events/count-by/time", {"filter": {"occurred": {"since": "-62135596800000", "until": "1790000000000"}},
     "time_unit": "day", "time_interval": 1000}, 403, "since takes a time between the years"),
    ("/events/count-by/time", {"filter": {"occurred": {"since": "0001-001T00:00:00Z", "until": "2026-01-01T00:00:00Z"}},
     "time_unit": "week", "time_interval": 1000}, 403, "since takes a time between the years"),
    ("/flow_runs/history", WINDOW | {"history_end": 253402214400000, "history_interval_seconds": 3153600000}, 403,
     "history_end takes a time between the years"),
    ("/task_runs/history", WINDOW | {"history_end": 253402214400000, "history_interval_seconds": 3153600000}, 403,
     "history_end takes a time between the years"),
    ("/flow_runs/history", WINDOW | {"history_end": "9999-365", "history_interval_seconds": 3153600000}, 403,
     "history_end takes a time between the years"),
    ("/flow_runs/history", WINDOW | {"history_interval_seconds": 1e20}, 403,
     "history_interval_seconds takes a number from 1 to 315,360,000, not 1e+20"),
    ("/flow_runs/history", WINDOW | {"history_interval_seconds": 2**63}, 422, "past 64 bits"),
    ("/flow_runs/history", b'{"history_start": "2026-01-01T00:00:00Z", "history_end": "2026-02-01T00:00:00Z", '
     b'"history_interval_seconds": 1e999}', 422, "the body's number 1e999 is past a 64-bit float's range"),
    ("/logs/filter", {"logs": {"level": {"ge_": 2**70}}}, 422, "whole numbers lie within"),
    ("/flow_runs/filter", b'{"flow_runs": {"name": {"like_": "\\udfff"}}}', 400, SURROGATE),
    ("/flow_runs/filter", b'{"flow_runs": {"name": {"any_": ["\\ud800"]}}}', 400, SURROGATE),
    ("/events/filter", b'{"filter": {"resource": {"id": ["\\ud800"]}}}', 400, SURROGATE),
]  # fmt: skip


def _sent(body: dict | bytes) -> dict:
    return {
        "content": body if isinstance(body, bytes) else json.dumps(body).encode(),
        "headers": {"content-type": "application/json"},
    }


class Lenient(bounds.Bound):
    """A time's bound as it was: what Python's ``fromisoformat`` cannot read, and any number, passed on as asked."""

    def held(self, key: str, value):
        try:
            datetime.fromisoformat(value)
        except (TypeError, ValueError):
            return value
        return super().held(key, value)


def _as_it_was(monkeypatch) -> None:
    """The gate's bounds as they were (in this process: the weakened gate's): times checked only when
    ``fromisoformat`` reads them, no bound on a history's interval, a level or a page token's offset, Python's
    own JSON parser (1e999 read as infinity, any whole number), any string passed on."""
    was = {key: b for key, b in bounds.FIELDS.items() if key in ("limit", "page", "time_interval", "page_size", "count")}
    times = {
        key: Lenient(*[getattr(b, f) for f in ("kind", "low", "high")]) for key, b in bounds.FIELDS.items() if b.kind == "time"
    }
    monkeypatch.setattr(bounds, "FIELDS", was | times | {"offset": bounds.Bound("whole", 0, 2**64)})
    monkeypatch.setattr(bounds, "loads", json.loads)
    monkeypatch.setattr(bounds, "unfit", lambda doc: None)


def test_what_prefect_answered_500_to_is_refused_naming_the_field(served, people, monkeypatch):
    env, _ = served
    for route, body, status, said in ASKED:
        answer = people["alice"].post(route, **_sent(body))
        assert refused(answer) and answer.status_code == status and said in answer.text, (route, answer.text)
    _as_it_was(monkeypatch)
    with weakened(env) as person:  # every one reaches Prefect, which answers 500 (a traceback in its log)
        statuses = [person("alice").post(route, **_sent(body)).status_code for route, body, _, _ in ASKED]
    assert statuses == [500] * len(ASKED), statuses


def test_times_in_bounds_are_passed_on_as_prefect_reads_them(served, people):
    """A time Prefect reads (an ordinal date within the years, an offset) is passed on rewritten in ISO 8601."""
    recent = {"since": "2026-001", "until": "2026-02-01T00:00:00+14:00"}
    assert bounds.query({"occurred": recent}) == {
        "occurred": {"since": "2026-01-01T00:00:00+00:00", "until": "2026-02-01T00:00:00+14:00"}
    }
    body = {"filter": {"occurred": recent}, "time_unit": "day", "time_interval": 1}
    assert people["alice"].post("/events/count-by/time", json=body).status_code == 200
    history = people["alice"].post("/flow_runs/history", json=WINDOW | {"history_interval_seconds": 86400})
    assert history.status_code == 200 and len(history.json()) == 31
    assert people["alice"].post("/logs/filter", json={"logs": {"level": {"ge_": 20}}, "limit": 1}).status_code == 200


class Recording(Gate):
    """The gate, keeping the status of every answer Prefect gave it."""

    def __init__(self, *args):
        super().__init__(*args)
        self.answered: list[int] = []

    async def upstream_call(self, method: str, path: str, reads: bool, **kwargs) -> httpx.Response:
        response = await super().upstream_call(method, path, reads, **kwargs)
        self.answered.append(response.status_code)
        return response


def _token(offset: int) -> str:
    doc = {"filter": {}, "count": 1, "page_size": 50, "offset": offset}
    return base64.b64encode(base64.b64encode(json.dumps(doc).encode())).decode()


def test_a_page_tokens_offset_is_bounded(served, people, monkeypatch):
    """The attack's token (offset 2**63): the gate answered 403, but only after Prefect's 500."""
    env, _ = served
    for offset, said in ((2**63, "not one the gate answered"), (bounds.MAX_OFFSET + 1, "offset takes a whole number from 0")):
        with weakened(env, gate_class=Recording) as person:
            answer = person("sam").get("/events/filter/next", params={"page-token": _token(offset)})
            assert refused(answer) and answer.status_code == 403 and said in answer.text, answer.text
            assert 500 not in person("sam").app.state.gate.answered
    _as_it_was(monkeypatch)
    with weakened(env, gate_class=Recording) as person:
        assert person("sam").get("/events/filter/next", params={"page-token": _token(2**63)}).status_code == 403
        assert 500 in person("sam").app.state.gate.answered  # Prefect's traceback written all the same


class Uncounted(Quotas):
    """The quotas as they were: a run Prefect answered 5xx to not counted in the account's runs a minute."""

    async def start(self, account: str, body: dict, create):
        response = await super().start(account, body, create)
        if not isinstance(response, tuple) and response.status_code >= 500:
            self._started[account].pop()
        return response


def _failed_starts(env: dict, quotas: type[Quotas], monkeypatch) -> list[int]:
    """Statuses of three runs started by one account whose name Prefect fails on (a lone surrogate, passed on by
    a gate without that bound), two allowed a minute."""

    async def as_asked(body: dict, call: call.Call) -> dict | str:  # the rewrite, its name as asked
        return await rewrites.start_run({k: v for k, v in body.items() if k != "name"}, call) | {"name": body["name"]}

    form = f"/deployments/{deployment(operator(env), 'ra')['id']}/create_flow_run"
    rules = tuple(replace(r, body=as_asked) if r.body is rewrites.start_run else r for r in access.RULES)
    monkeypatch.setattr(bounds, "unfit", lambda doc: None)
    with weakened(env, rules=rules) as person:
        gate = person("vera").app.state.gate
        gate.quotas = quotas(replace(gate.quotas.limits, per_minute=2), gate.count)
        body = b'{"parameters": {"preview": true}, "name": "x\\ud800y"}'
        return [person("vera").post(form, **_sent(body)).status_code for _ in range(3)]


def test_runs_prefect_failed_on_count_in_the_runs_a_minute(served, people, monkeypatch):
    env, _ = served
    form = f"/deployments/{deployment(operator(env), 'ra')['id']}/create_flow_run"
    answer = people["vera"].post(form, **_sent(b'{"parameters": {"preview": true}, "name": "x\\ud800y"}'))
    assert refused(answer) and answer.status_code == 400 and SURROGATE in answer.text, answer.text
    assert _failed_starts(env, Quotas, monkeypatch) == [500, 500, 429]
    assert _failed_starts(env, Uncounted, monkeypatch) == [500, 500, 500]  # the weakened quotas: never refused


def test_the_next_page_of_events_is_the_gates_own_path(served, people):
    """Prefect names its own address (http://127.0.0.1:<its port>/api/...), which a browser cannot reach: the gate
    answers its own path, which the UI reads through the proxy."""
    env, _ = served
    api = operator(env)
    form = deployment(api, "ra")["id"]
    created = [
        api.post(f"/deployments/{form}/create_flow_run", json={"parameters": {"preview": True}}).json()["id"] for _ in range(2)
    ]
    try:
        for _ in range(60):  # the server records events a moment after the runs are created
            page = people["sam"].post("/events/filter", json={"filter": {}, "limit": 1}).json()
            if page["next_page"] is not None:
                break
            time.sleep(0.5)
        following = page["next_page"]
        assert following.startswith("/api/events/filter/next?page-token="), following
        second = people["sam"].get(following.removeprefix("/api"))
        assert second.status_code == 200 and len(second.json()["events"]) == 1, second.text[:300]
        assert second.json()["next_page"] is None or second.json()["next_page"].startswith("/api/events/filter/next?")
        with weakened(env, rules=without("/api/events/filter", reply=None)) as person:  # Prefect's answer as it is
            leaked = person("sam").post("/events/filter", json={"filter": {}, "limit": 1}).json()["next_page"]
        assert leaked.startswith(env["PREFECT_API_URL"].removesuffix("/api")), leaked
    finally:
        for run_id in created:
            api.delete(f"/flow_runs/{run_id}")


def test_a_urls_query_is_read_as_prefect_reads_it_and_nothing_else_passed(served, people, monkeypatch):
    """The eighth attack's High: the run graph's `since` (a URL query parameter, read by Prefect as a plain datetime)
    without a zone, or with one taking it past year 1 or 9999, made Prefect answer 500 with a traceback."""
    env, _ = served
    api, alice = operator(env), people["alice"]
    ra = deployment(api, "ra")["id"]
    run = alice.post(f"/deployments/{ra}/create_flow_run", json={"parameters": {"preview": True}}).json()
    graph = f"/flow_runs/{run['id']}/graph-v2"
    try:
        for since in ("2026-01-01T00:00:00", "2026-11-26 10:00", "2026-01-01T00:00:00+14:00"):  # no zone: read as UTC
            answer = alice.get(graph, params={"since": since})
            assert answer.status_code == 200, (since, answer.text)
        for since in ("0001-01-01T00:00:00+23:59", "9999-12-31T23:59:59-23:59", "2026"):
            answer = alice.get(graph, params={"since": since})
            assert refused(answer) and answer.status_code == 403 and "since takes a time between the years" in answer.text
        answer = alice.get("/flow_run_states/", params={"flow_run_id": "not-an-id"})
        assert refused(answer) and "flow_run_id takes a run's id (a UUID)" in answer.text
        states = alice.get("/flow_run_states/", params={"flow_run_id": run["id"], "anything": "x" * 500})
        assert states.status_code == 200 and states.json(), states.text  # an unknown parameter is dropped
        # weakened: the query passed on as asked, and Prefect fails on the time without a zone
        monkeypatch.setattr(bounds, "url_query", lambda asked: dict(asked))
        with weakened(env) as person:
            assert person("alice").get(graph, params={"since": "2026-01-01T00:00:00"}).status_code == 500
    finally:
        api.delete(f"/flow_runs/{run['id']}")
