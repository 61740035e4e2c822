"""The third attack on the served gate (issue #39), each finding through the real proxy, gate and server,
and each shown to work on a weakened gate (in this process, against the same server) without its defence:

- a burst of bounded schema checks (stored schema, thousands of values) held Prefect's event loop for seconds;
- huge offsets and pages, and the logs' text search, made Prefect answer 500 and reset its connection, which
  the gate then handed to the next caller (502), and its own reads for a check let the error escape (500);
- runs stored with ~50 KB of parameters each made every runs page heavy."""

from __future__ import annotations

import base64
import threading
from dataclasses import replace

import anyio
import httpx
from starlette.requests import Request

from privrelease.core import limits, settings
from privrelease.gate import access, bounds, rewrites
from privrelease.gate.app import Gate
from tests.system.test_gate_abuse import refused, weakened, without
from tests.system.test_server import deployment, operator

ITEMS = [{"a": 1, "b": "x", "c": None}] * 300  # 1,201 values in 7.5 KB: under the KB bound, over the values'


def _form(env: dict, name: str) -> dict:
    return operator(env).get(f"/deployments/{deployment(operator(env), name)['id']}").json()


def test_a_forms_checked_values_are_few(served, people, monkeypatch):
    """The values the UI checks against a stored schema: at most MAX_FORM_VALUES values (the attack's
    1,206 items of three values cost Prefect's event loop about 2 s a call)."""
    env, _ = served
    body = {"schema": _form(env, "outlier-count")["parameter_openapi_schema"], "values": {"standardize": ITEMS}}
    answer = people["alice"].post("/ui/schemas/validate", json=body)
    assert refused(answer) and answer.status_code == 403
    assert f"hold 1202 values; a form's hold at most {bounds.MAX_FORM_VALUES} values" in answer.text, answer.text
    few = {"schema": body["schema"], "values": {"standardize": ITEMS[:100]}}
    assert people["alice"].post("/ui/schemas/validate", json=few).status_code == 200
    monkeypatch.setattr(bounds, "MAX_FORM_VALUES", 10**6)
    with weakened(env) as person:  # the values reach Prefect, which checks every one of them
        checked = person("alice").post("/ui/schemas/validate", json=body)
    assert checked.status_code == 200 and not refused(checked) and checked.json()["errors"], checked.text[:300]


def test_a_runs_parameters_are_few(served, people, monkeypatch):
    """A run's parameters are stored and shown on every runs page: at most MAX_FORM_VALUES values and 16 KB."""
    env, _ = served
    form = f"/deployments/{_form(env, 'outlier-count')['id']}/create_flow_run"
    asked = {"parameters": {"standardize": ITEMS, "preview": True}}
    answer = people["alice"].post(form, json=asked)
    assert refused(answer) and answer.status_code == 413, answer.text
    assert "in 1203 values; the limit is 16 KB and 500 values" in answer.text, answer.text
    monkeypatch.setattr(bounds, "MAX_FORM_VALUES", 10**6)
    with weakened(env) as person:  # stored as asked (Prefect refuses the values, after storing nothing)
        created = person("alice").post(form, json=asked)
    assert created.status_code in (201, 409, 422) and not refused(created), created.text[:300]
    if created.status_code == 201:
        operator(env).delete(f"/flow_runs/{created.json()['id']}")


class Counting(Gate):
    """The gate, counting the calls it has passed on to Prefect at once (each held a little longer, so that
    calls sent together are seen together)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.now = self.most = 0

    async def forward(self, request: Request, path: str, body: bytes, reads: bool):
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await anyio.sleep(0.3)
            return await super().forward(request, path, body, reads)
        finally:
            self.now -= 1


def _together(callers: int, ask) -> list:
    """``ask(i)`` for i in range(callers), each in its own thread, all released at once; their answers."""
    start, answers = threading.Barrier(callers), []

    def one(i: int) -> None:
        start.wait()
        answers.append(ask(i))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def _at_once(env: dict, rules: tuple[access.Rule, ...] | None, callers: int = 6) -> tuple[int, list[int]]:
    """The most schema checks of one account the gate passed on at once, of ``callers`` sent together, and
    the statuses answered."""
    body = {"schema": _form(env, "outlier-count")["parameter_openapi_schema"], "values": {"standardize": ITEMS[:100]}}
    with weakened(env, gate_class=Counting, rules=rules) as person:
        client = person("alice")
        assert client.post("/ui/schemas/validate", json=body).status_code == 200  # signed in: no hash in the burst
        client.app.state.gate.most = 0
        answers = _together(callers, lambda _: client.post("/ui/schemas/validate", json=body))
        most = client.app.state.gate.most
    for answer in answers:
        assert answer.status_code == 200 or (
            answer.status_code == 429 and "is in progress and one waits" in answer.text and answer.headers["retry-after"] == "1"
        ), answer.text
    return most, sorted(a.status_code for a in answers)


def test_an_accounts_schema_checks_reach_prefect_one_at_a_time(served, people):
    """One in progress, one waiting behind it, the rest refused at once: no queue of an account's holds the
    proxy's connections to the gate (the fourth attack filled them so, and nginx answered everyone 502)."""
    env, _ = served
    assert _at_once(env, None) == (1, [200, 200, 429, 429, 429, 429])
    # the weakened gate (the row not marked `alone`) passes them on together
    most, statuses = _at_once(env, without("/api/ui/schemas/validate", alone=False))
    assert most > 1 and statuses == [200] * 6


def test_an_account_has_at_most_16_calls_in_the_gate(served, people, monkeypatch):
    env, _ = served
    most = limits.Limits().account_calls
    callers = most + 4

    def flood() -> list[httpx.Response]:
        with weakened(env, gate_class=Counting) as person:
            client = person("vera")
            assert client.post("/flow_runs/count", json={}).status_code == 200  # signed in: no hash in the burst
            return _together(callers, lambda _: client.post("/flow_runs/count", json={}))

    answers = flood()
    assert sorted(a.status_code for a in answers) == [200] * most + [429] * 4
    assert all(f"{most} of your calls are in progress already" in a.text for a in answers if a.status_code == 429)
    monkeypatch.setenv(settings.ACCOUNT_CALLS, str(10**6))  # the weakened gate: no limit
    assert sorted(a.status_code for a in flood()) == [200] * callers


def test_what_made_prefect_answer_500_within_the_bounds_is_refused(served, people):
    """The fourth attack's 500s: numbers that are strings, floats or NaN; times far past or ahead; a page token
    nested deeper than Python's parser goes (the gate's own 500)."""
    env, _ = served
    asked = [
        ("/flow_runs/filter", b'{"offset": "9223372036854775808"}', 403, "offset takes a whole number"),
        ("/flow_runs/paginate", b'{"page": 1e+17}', 403, "page takes a whole number"),
        ("/flow_runs/filter", b'{"limit": NaN}', 422, "the body is not JSON"),
        ("/events/count-by/event", b'{"filter": {}, "time_unit": "day", "time_interval": Infinity}', 422, "not JSON"),
        (
            "/flow_runs/filter",
            b'{"flow_runs": {"start_time": {"after_": "0001-01-01T00:00:00+14:00"}}}',
            403,
            "between the years",
        ),
        (
            "/flow_runs/history",
            b'{"history_start": "9999-12-31T00:00:00Z", "history_end": "9999-12-31T23:59:59Z", "history_interval_seconds": 3600}',
            403,
            "between the years",
        ),  # fmt: skip
    ]
    for route, body, status, said in asked:
        answer = people["alice"].post(route, content=body, headers={"content-type": "application/json"})
        assert refused(answer) and answer.status_code == status and said in answer.text, (route, answer.text)
    deep = base64.b64encode(base64.b64encode(b"[" * 1100 + b"]" * 1100)).decode()
    answer = people["alice"].get("/events/filter/next", params={"page-token": deep})
    assert refused(answer) and answer.status_code == 403 and "not one the gate answered" in answer.text
    with weakened(env, rules=_unbounded()) as person:  # passed on as asked: Prefect answers 500
        for route, body, status, _ in asked:
            if status == 403:
                answer = person("alice").post(route, content=body, headers={"content-type": "application/json"})
                assert answer.status_code == 500, (route, answer.status_code)


def test_an_events_count_from_year_one_is_refused(served, people):
    """The sixth attack's 500: events counted by week from year 1 (each 500 a 34 KB traceback in Prefect's log:
    a disk filled by any account). The event filter's times are held to the years every other time is."""
    env, _ = served
    since = {"since": "0001-01-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"}
    body = {"filter": {"occurred": since}, "time_unit": "week", "time_interval": 1000}
    for route, asked in (("/events/count-by/time", body), ("/events/filter", {"filter": {"occurred": since}})):
        answer = people["alice"].post(route, json=asked)
        assert refused(answer) and answer.status_code == 403 and "since takes a time between the years" in answer.text
    recent = {"since": "2026-01-01T00:00:00Z", "until": "2026-02-01T00:00:00Z"}
    assert people["alice"].post("/events/count-by/time", json=body | {"filter": {"occurred": recent}}).status_code == 200
    unscoped = tuple(replace(r, body=None) if r.body is rewrites.event_count else r for r in access.RULES)
    with weakened(env, rules=unscoped) as person:  # the count passed on as asked: Prefect answers 500
        assert person("alice").post("/events/count-by/time", json=body).status_code == 500


def test_offsets_pages_and_the_logs_text_search_never_reach_prefect(served, people):
    """Each of these made Prefect answer 500 (SQLite's integers overflow; it has no concat) and reset its
    connection: refused by the gate with a message saying what is allowed."""
    env, _ = served
    asked = [
        ("/task_runs/filter", {"offset": 2**63 - 1, "limit": 1}, f"offset takes a whole number from 0 to {bounds.MAX_OFFSET:,}"),
        ("/flow_runs/filter", {"offset": bounds.MAX_OFFSET + 1}, f"offset takes a whole number from 0 to {bounds.MAX_OFFSET:,}"),
        ("/flow_runs/paginate", {"page": 10**17, "limit": 200}, f"page takes a whole number from 0 to {bounds.MAX_PAGE:,}"),
        ("/logs/filter", {"logs": {"text": {"query": "a b -c"}}, "limit": 5}, "the logs' text search does not work"),
    ]
    for route, body, said in asked:
        answer = people["alice"].post(route, json=body)
        assert refused(answer) and answer.status_code == 403 and said in answer.text, (route, answer.text)
    assert people["alice"].post("/flow_runs/filter", json={"offset": bounds.MAX_OFFSET, "limit": 1}).status_code == 200
    # Prefect answers the page and the text search with its 500; the offsets within 64 bits it answers (2**63, its
    # 500, is past 64 bits and refused as the body is read: tests/system/attacks/test_gate_unread_values.py)
    with weakened(env, rules=_unbounded()) as person:
        assert [person("alice").post(route, json=body).status_code for route, body, _ in asked] == [200, 200, 500, 500]


def _unbounded() -> tuple[access.Rule, ...]:
    """POLICY with every read query passed on as asked."""
    return tuple(replace(r, body=None) if r.body is rewrites.bounded else r for r in access.RULES)


class Unretried(Gate):
    """The gate as it was: a read whose pooled connection Prefect had closed is not asked again."""

    async def upstream_call(self, method: str, path: str, reads: bool, **kwargs) -> httpx.Response:
        return await super().upstream_call(method, path, False, **kwargs)


TOO_WIDE = {"history_start": "2026-01-01T00:00:00Z", "history_end": "2026-02-01T00:00:00Z", "history_interval_seconds": 1e20}


def _after_a_500(env: dict, gate_class: type[Gate], tries: int = 40) -> list[int]:
    """Statuses of a steward's calls, each sent right after a query that makes Prefect answer 500 and close
    its connection (one connection to Prefect, so the next call is handed the one closed): a read passed
    on, and a steward's resume, which the gate checks by reading the run first."""
    statuses = []
    with weakened(env, gate_class=gate_class, rules=_unbounded()) as person:
        gate = person("sam").app.state.gate
        gate.client = httpx.AsyncClient(base_url=gate.upstream, limits=httpx.Limits(max_connections=1))
        for i in range(tries):
            assert person("sam").post("/flow_runs/history", json=TOO_WIDE).status_code == 500
            if i % 2:
                statuses.append(person("sam").post("/flow_runs/count", json={}).status_code)
            else:  # no run of this id: the gate's own read finds none, and refuses
                statuses.append(person("sam").post("/flow_runs/00000000-0000-4000-8000-000000000000/resume", json={}).status_code)
    return statuses


def test_a_connection_prefect_closed_is_asked_again_not_handed_on(served, people):
    env, _ = served
    assert set(_after_a_500(env, Gate)) <= {200, 403}
    # the weakened gate hands the closed connection to the next call: Prefect "did not answer" it (502)
    assert 502 in _after_a_500(env, Unretried)


# The fifth attack's wrong sign-ins from fresh addresses, each waiting for a check and holding one of the proxy's
# connections to the gate: now strangers never wait for a check and few wait at all (tests/gate/test_signin.py,
# tests/system/test_signin_served.py).
