"""What people read through the gate (issue #39), through the real gate and server, each shown to leak on a
weakened gate (built in this process, against the same server, without the one defence):

- events: only flow-run, task-run and artifact events (an analyst's of their own runs), payloads cut to
  the state change; never a variable's value, also not through a forged next-page token;
- nothing of the host (the home's and the checkout's paths, the host's name, the worker's process ids)
  in a release's and an audit's artifacts, logs and events, nor in its flow run."""

from __future__ import annotations

import base64
import json
import re
import socket
import time
from dataclasses import replace
from pathlib import Path

import httpx

from privrelease.gate import access, bounds, events, forms, owned
from privrelease.gate.app import REFUSED, Gate
from privrelease.gate.redact import Redactor
from tests.conftest import REPO
from tests.system.test_gate_abuse import weakened, without
from tests.system.test_server import _logs, _wait, deployment, operator, worker

SECRET = "s3cret-variable-value"
HOST = re.compile(rf"(?<![\w.-]){re.escape(socket.gethostname())}(?![\w-])")  # the host's name, as a word


def _events(client: httpx.Client, flt: dict) -> list[dict]:
    response = client.post("/events/filter", json={"filter": flt, "limit": 50})
    assert response.status_code == 200, response.text
    return response.json()["events"]


def _until(api: httpx.Client, flt: dict, timeout: float = 60) -> list[dict]:
    """Events the operator reads once the server has stored them (events are written asynchronously)."""
    deadline = time.monotonic() + timeout
    while not (found := _events(api, flt)):
        assert time.monotonic() < deadline, flt
        time.sleep(0.5)
    return found


def test_events_are_read_by_allow_list(served, people, monkeypatch):
    env, _ = served
    api = operator(env)
    api.post("/variables/", json={"name": "operators_secret", "value": SECRET})
    ra = deployment(api, "ra")["id"]
    mine, theirs = (
        people[n].post(f"/deployments/{ra}/create_flow_run", json={"parameters": {}}).json() for n in ("alice", "vera")
    )
    try:
        deadline = time.monotonic() + 60  # events are stored asynchronously: wait for this variable's own
        while SECRET not in json.dumps(_events(api, {"event": {"name": ["prefect.variable.created"]}})):
            assert time.monotonic() < deadline, "the variable's event was never stored"
            time.sleep(0.5)
        for run in (mine, theirs):
            _until(api, {"any_resource": {"id": [f"prefect.flow-run.{run['id']}"]}})
        asked = [
            {},
            {"event": {"prefix": ["prefect.variable."]}},
            {"event": {"name": ["prefect.variable.created"]}},
            {"any_resource": {"id_prefix": ["prefect.variable"]}},
            {"event": {"prefix": ["prefect."]}},
        ]
        for who in ("alice", "ada"):
            for flt in asked:
                seen = _events(people[who], flt)
                assert SECRET not in json.dumps(seen) and all(e["event"].startswith(events.ALLOWED) for e in seen), (who, flt)
                assert all(set(e["payload"]) <= set(events.PAYLOAD) for e in seen)
        counted = people["alice"].post("/events/count-by/event", json={"filter": {"event": {"prefix": ["prefect.variable."]}}})
        assert counted.status_code == 200 and counted.json() == [], counted.text  # the feed's counts: the same filter
        assert [
            c["value"]
            for c in api.post("/events/count-by/event", json={"filter": {"event": {"prefix": ["prefect.variable."]}}}).json()
        ]
        # an analyst reads her own runs' events only; the auditor reads every run's
        runs = {run["id"]: {"any_resource": {"id": [f"prefect.flow-run.{run['id']}"]}} for run in (mine, theirs)}
        assert _events(people["alice"], runs[mine["id"]]) and not _events(people["alice"], runs[theirs["id"]])
        assert _events(people["ada"], runs[theirs["id"]])
        # a forged next-page token asking for the variable's events: its filter is rebuilt
        forged = {"filter": {"event": {"prefix": ["prefect.variable."]}}, "count": 100, "page_size": 1, "offset": 0}
        token = base64.b64encode(base64.b64encode(json.dumps(forged).encode())).decode()
        page = people["alice"].get("/events/filter/next", params={"page-token": token})
        assert page.status_code == 200 and SECRET not in page.text, page.text
        bad = people["alice"].get("/events/filter/next", params={"page-token": "bm90IGEgdG9rZW4="})
        assert bad.status_code == 403 and bad.headers.get(REFUSED) == "1"
        # the weakened gate (the next page passed on as asked, its query too) answers the forged token with the
        # variable's events
        monkeypatch.setattr(bounds, "url_query", lambda asked: dict(asked))
        with weakened(env, rules=without("/api/events/filter/next", method="GET", answer=None)) as person:
            assert SECRET in person("alice").get("/events/filter/next", params={"page-token": token}).text
        # the weakened gate (the row passes the filter on as asked) shows the operator's variable to an analyst
        with weakened(env, rules=without("/api/events/filter", body=None, reply=None)) as person:
            leaked = person("alice").post("/events/filter", json={"filter": {"event": {"prefix": ["prefect.variable."]}}})
            assert SECRET in leaked.text
    finally:
        api.delete("/variables/name/operators_secret")
        for run in (mine, theirs):
            api.delete(f"/flow_runs/{run['id']}")


class Unredacted(Gate):
    """The gate passing Prefect's answers back as they are."""

    def __init__(self, *args):
        super().__init__(*args)
        self.redact = lambda body: body


def _read(client: httpx.Client, run_id: str) -> str:
    """Everything a person reads of a run: the run, its logs, artifacts and events (as text)."""
    texts = [
        client.get(f"/flow_runs/{run_id}").text,
        client.post("/logs/filter", json={"logs": {"flow_run_id": {"any_": [run_id]}}, "limit": 200}).text,
        client.post("/artifacts/filter", json={"artifacts": {"flow_run_id": {"any_": [run_id]}}}).text,
        client.post("/events/filter", json={"filter": {"any_resource": {"id": [f"prefect.flow-run.{run_id}"]}}}).text,
    ]
    return "\n".join(texts)


def _host_strings(env: dict, pids: list[int]) -> list[re.Pattern]:
    home = Path(env["PRIVRELEASE_HOME"])
    texts = {str(home), str(home.resolve()), str(REPO), str(REPO.resolve())}
    patterns = [re.compile(re.escape(t)) for t in texts] + [HOST]
    return patterns + [re.compile(rf"(?<![\w.:/-]){pid}(?![\w.:/-])") for pid in pids]


def test_nothing_of_the_host_in_what_people_read(served, people):
    """A release (alice) and a ledger audit (ada) through the gate and a worker: their runs, logs, artifacts
    and events, read through the gate, hold neither path, the host's name nor the worker's process ids."""
    env, root = served
    api, log = operator(env), root / "worker-host.log"
    with worker(env, log) as proc:
        started = [
            people["alice"].post(
                f"/deployments/{deployment(api, 'ra')['id']}/create_flow_run", json={"parameters": {"release_id": "host-free"}}
            ),
            people["ada"].post(f"/deployments/{deployment(api, 'ledger-audit')['id']}/create_flow_run", json={}),
        ]
        assert all(s.status_code == 201 for s in started), [s.text for s in started]
        release, audit = (s.json() for s in started)
        assert _wait(api, release["id"], log) == "COMPLETED" and _wait(api, audit["id"], log) == "COMPLETED"
        pids = [proc.pid]
    for run in (release, audit):
        _logs(api, run["id"])
        infra = api.get(f"/flow_runs/{run['id']}").json()["infrastructure_pid"]
        pids += [int(p) for p in re.findall(r"\d+$", infra or "")]
    found = {"alice": "", "ada": ""}
    deadline = time.monotonic() + 120  # a loaded machine's worker sends its last log lines late
    while not ("releases/census-demo/alice.host-free" in found["alice"] and "requested_by" in found["ada"]):
        assert time.monotonic() < deadline, found
        found = {"alice": _read(people["alice"], release["id"]), "ada": _read(people["ada"], audit["id"])}
        time.sleep(0.5)
    for who, text in found.items():
        leaks = [p.pattern for p in _host_strings(env, pids) if p.search(text)]
        assert not leaks, (who, leaks)
    # the weakened gate (Prefect's answers as they are, the operator's settings in them too: gate.owned) shows the
    # host: the run's process on it, the checkout
    # (a deployment read as Prefect answers it, not as gate.forms fills in its form and clears it)
    as_they_are = tuple(
        replace(r, reply=None)
        if r.reply is owned.cleared
        else replace(r, answer=None, reads=True)
        if r.answer is forms.deployment
        else r
        for r in access.RULES
    )
    with weakened(env, gate_class=Unredacted, rules=as_they_are) as person:
        text = _read(person("alice"), release["id"]) + person("alice").get(f"/deployments/{release['deployment_id']}").text
    shown = [p.pattern for p in _host_strings(env, pids) if p.search(text)]
    assert str(REPO) in text and len(shown) >= 2, (shown, pids, text[:3000])


def test_the_redactor_replaces_longer_paths_first():
    redact = Redactor(Path("/srv/repo/home"), Path("/srv/repo"), host="worker-7")
    body = json.dumps(
        {
            "a": "/srv/repo/home/releases/x",
            "b": "/srv/repo/flows",
            "c": "on worker-7",
            "d": "worker-77",
            "infrastructure_pid": "worker-7:4242",
        }
    ).encode()
    assert json.loads(redact(body)) == {
        "a": "<home>/releases/x",
        "b": "<repo>/flows",
        "c": "on <host>",
        "d": "worker-77",
        "infrastructure_pid": None,
    }
    assert Redactor(Path("/h"), Path("/r"), host="vm")(b'"a vm" "vm:12"') == b'"a vm" "vm:12"'  # too short to take out
    assert Redactor(Path("/h"), Path("/r"), host="localhost")(b'"localhost"') == b'"localhost"'
