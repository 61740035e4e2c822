"""The gate in front of a real `prefect server` (asking for the operator's credential), as `make serve`
runs them: every route of Prefect's API, the UI's files and the websocket routes against the policy,
for each role and for a caller without credentials; and an analyst's attacks, each refused through
the gate and each shown to work on Prefect's server without the gate, so that every test can fail."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import prefect
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from privrelease.core.ledger.ledger import Ledger
from privrelease.core.privacy.budget import Budget
from privrelease.gate import access, forms
from privrelease.gate.answers import next_events
from privrelease.gate.app import REFUSED
from privrelease.gate.rewrites import stored_schema
from tests.conftest import PASSWORD
from tests.system.test_server import _logs, _wait, deployment, operator, run_processes, worker

DUMMY = "00000000-0000-4000-8000-000000000000"


def refused(response: httpx.Response) -> bool:
    return response.headers.get(REFUSED) == "1"


def _api_routes(api: httpx.Client) -> list[tuple[str, str]]:
    spec = api.get("/openapi.json").json()
    return sorted((method.upper(), "/api" + path) for path, item in spec["paths"].items() for method in item)


def _websocket_routes() -> list[str]:
    """Prefect's websocket routes, from its API app (the OpenAPI document lists none)."""
    from prefect.server.api.server import create_api_app

    found: list[str] = []

    def walk(routes, prefix: str = "") -> None:
        for route in routes:
            if type(route).__name__ == "_IncludedRouter":
                walk(route.original_router.routes, prefix + (getattr(route.include_context, "prefix", "") or ""))
            elif type(route).__name__ == "APIWebSocketRoute":
                found.append("/api" + prefix + route.path)

    walk(create_api_app().routes)
    return sorted(found)


def _filled(path: str) -> str:
    return "/".join(DUMMY if part.startswith("{") else part for part in path.split("/"))


def test_every_route_is_decided_by_the_policy(served, people):
    """Each role (and no credentials) against every (method, route) of the running server's OpenAPI
    document: the gate refuses exactly what the policy does not allow unconditionally (a conditional
    row's condition fails on a resource that does not exist), and a route no row names is refused."""
    env, _ = served
    gate_url = env["PRIVRELEASE_GATE_URL"]
    routes = _api_routes(operator(env))
    assert len(routes) > 150 and ("DELETE", "/api/flow_runs/{id}") in routes
    # every API row of the policy names a route Prefect has: no stale rows
    named = {(m, p) for m, p in routes}
    for rule in access.RULES:
        if rule.route.startswith("/api/") and rule.answer is None:
            assert any(rule.pattern.match(_filled(p)) and m == rule.method for m, p in named), rule
    clients = {"anyone": httpx.Client(base_url=gate_url, timeout=10)} | {
        role: httpx.Client(base_url=gate_url, auth=(name, PASSWORD), timeout=10)
        for role, name in (("analyst", "alice"), ("auditor", "ada"), ("steward", "sam"))
    }
    mismatches, allowed = [], {role: 0 for role in clients}
    for method, path in routes:
        target = _filled(path)
        for role, client in clients.items():
            rule = access.decide(role, method, target)
            # refused too: a conditional row (its resource does not exist), the schema check, the next page
            # of events (an empty body and no page token are not what they take) and the gate's own answer
            # of a deployment (it reads the deployment, which does not exist)
            expect_refused = (rule is None or rule.when is not None or rule.body is stored_schema
                              or rule.answer in (next_events, forms.deployment))  # fmt: skip
            response = client.request(method, target, json={} if method in ("POST", "PUT", "PATCH") else None)
            if refused(response) != expect_refused:
                mismatches.append((role, method, path, response.status_code, response.text[:120]))
            allowed[role] += not expect_refused
            if expect_refused and role == "anyone":
                assert response.status_code == 401, (method, path, response.text)
    assert not mismatches, mismatches[:10]
    # people read what their pages need; a caller without credentials reaches no API route but the health check
    assert allowed["anyone"] == 1 and all(allowed[r] > 20 for r in ("analyst", "auditor", "steward"))


def test_ui_files_are_served_to_anyone_and_nothing_else_outside_the_api(served):
    env, _ = served
    anyone = httpx.Client(base_url=env["PRIVRELEASE_GATE_URL"], timeout=10)
    static = Path(prefect.__ui_static_path__)  # the UI as Prefect ships it; "/" serves its index.html
    files = sorted(p.relative_to(static).as_posix() for p in static.rglob("*") if p.is_file() and p.name != "index.html")
    assert len(files) > 50
    for name in files:
        response = anyone.get(f"/{name}")
        assert response.status_code == 200 and not refused(response), name
    for page in ("/", "/dashboard", "/runs/flow-run/" + DUMMY, "/deployments/deployment/" + DUMMY, "/login"):
        response = anyone.get(page, headers={"accept": "text/html"})  # as a browser navigates
        assert response.status_code == 200 and "<html" in response.text.lower(), page
    # paths outside the UI's files and pages, and paths that would be read differently upstream
    for path in (
        "/openapi.json",
        "/docs",
        "/api/docs",
        "/api/openapi.json",
        "/v2/",
        "/api/flow_runs/%2e%2e/admin/settings",
        "/api//admin/settings",
        "/api/./admin/settings",
        "/assets/../api/admin/settings",
    ):
        response = anyone.get(path)
        assert refused(response), (path, response.status_code)


def test_websocket_routes_are_refused_through_the_gate(served, people):
    env, _ = served
    routes = _websocket_routes()
    assert {"/api/events/in", "/api/events/out", "/api/logs/out"} <= set(routes)
    gate_ws = env["PRIVRELEASE_GATE_URL"].replace("http://", "ws://")
    token = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    for route in routes:
        with pytest.raises(InvalidStatus) as refusal:
            connect(gate_ws + _filled(route), additional_headers={"Authorization": token}, open_timeout=10)
        assert refusal.value.response.status_code == 403, route
        with pytest.raises(InvalidStatus):  # as Prefect's client asks for it, too
            connect(
                gate_ws + _filled(route), additional_headers={"Authorization": token}, subprotocols=["prefect"], open_timeout=10
            )
    # without the gate, Prefect's server accepts the handshake (and then asks for its credential in a message)
    direct = env["PREFECT_API_URL"].replace("http://", "ws://")
    with connect(direct + "/events/out", subprotocols=["prefect"], open_timeout=10) as socket:
        assert socket.subprotocol == "prefect"


def test_bypassing_the_gate_gets_401(served, people):
    """Prefect's own server answers only the operator's credential: an account's, or none, is refused."""
    env, _ = served
    api = env["PREFECT_API_URL"]
    assert httpx.post(f"{api}/flow_runs/filter", json={}, timeout=10).status_code == 401
    assert httpx.post(f"{api}/flow_runs/filter", json={}, auth=("alice", PASSWORD), timeout=10).status_code == 401
    assert httpx.get(f"{api}/admin/settings", timeout=10).status_code == 401
    assert operator(env).post("/flow_runs/filter", json={}).status_code == 200


def test_admin_settings_are_answered_by_the_gate_with_public_values(served, people):
    env, _ = served
    mine = people["alice"].get("/admin/settings")
    assert mine.status_code == 200 and mine.json() == {"server": {"ui": {"show_promotional_content": False}}}
    assert people["alice"].get("/admin/version").json() == prefect.__version__
    theirs = operator(env).get("/admin/settings").text  # Prefect's own: the database and more
    assert "database" in theirs and "database" not in mine.text
    for path in ("/admin/database/clear", "/admin/database/drop", "/admin/database/create"):
        response = people["sam"].post(path, json={})
        assert refused(response) and response.status_code == 403, path


def test_a_run_started_through_the_gate_is_tagged_with_its_requester_and_nothing_else(served, people):
    env, _ = served
    api = operator(env)
    ra = deployment(api, "ra")
    hostile = {
        "parameters": {},
        "tags": ["requested-by:vera", "x"],
        "job_variables": {"command": "id"},
        "enforce_parameter_schema": False,
        "state": {"type": "RUNNING"},
        "work_queue_name": "other",
    }
    response = people["alice"].post(f"/deployments/{ra['id']}/create_flow_run", json=hostile)
    assert response.status_code == 201, response.text
    run = response.json()
    assert sorted(run["tags"]) == ["publishes", "requested-by:alice"]  # the gate's own tags: who asked, and not a preview
    assert run["job_variables"] == {} and run["state"]["type"] == "SCHEDULED"
    assert run["work_queue_name"] == "default"
    # the schema is enforced whatever the body says: a bound the form states is refused, naming the field
    bad = people["alice"].post(
        f"/deployments/{deployment(api, 'dpne')['id']}/create_flow_run",
        json={"parameters": {"epsilon": -1}, "enforce_parameter_schema": False},
    )
    assert bad.status_code == 409 and "epsilon" in bad.text
    # without the gate the same body sets the tags and the state it asks for
    direct = api.post(f"/deployments/{ra['id']}/create_flow_run", json={"parameters": {}, "tags": ["requested-by:vera"]})
    assert direct.json()["tags"] == ["requested-by:vera"]
    for created in (run["id"], direct.json()["id"]):
        api.delete(f"/flow_runs/{created}")


def test_who_starts_what(served, people):
    """Analysts and stewards start the release forms, the auditor only the ledger audit."""
    env, _ = served
    api = operator(env)
    audit, dpne = deployment(api, "ledger-audit"), deployment(api, "dpne")
    spam = deployment(api, "spam-filter-training")
    started = []
    for name, target, allowed in (
        ("ada", dpne, False),
        ("ada", audit, True),
        ("alice", audit, False),
        ("sam", dpne, True),
        ("alice", spam, False),
        ("ada", spam, False),
    ):
        response = people[name].post(f"/deployments/{target['id']}/create_flow_run", json={"parameters": {}})
        assert (response.status_code == 201) == allowed and refused(response) != allowed, (name, target["name"], response.text)
        if allowed:
            started.append(response.json()["id"])
    for run_id in started:
        api.delete(f"/flow_runs/{run_id}")


@pytest.fixture
def victim(served, people):
    """Vera's scheduled release run, with an artifact (no worker runs it)."""
    env, _ = served
    api = operator(env)
    run = people["vera"].post(f"/deployments/{deployment(api, 'ra')['id']}/create_flow_run", json={"parameters": {}}).json()
    artifact = api.post(
        "/artifacts/", json={"key": "vera-report", "type": "markdown", "data": "# vera", "flow_run_id": run["id"]}
    ).json()
    yield run, artifact
    api.delete(f"/flow_runs/{run['id']}")


def test_an_analyst_cannot_touch_another_accounts_run(served, people, victim):
    env, _ = served
    api = operator(env)
    run, artifact = victim
    alice = people["alice"]
    attacks = [
        ("DELETE", f"/flow_runs/{run['id']}", None),
        ("DELETE", f"/artifacts/{artifact['id']}", None),
        ("POST", f"/flow_runs/{run['id']}/set_state", {"state": {"type": "COMPLETED"}, "force": True}),
        ("POST", f"/flow_runs/{run['id']}/set_state", {"state": {"type": "CANCELLING"}}),  # not hers to cancel
        ("PATCH", f"/flow_runs/{run['id']}", {"tags": ["requested-by:alice"]}),
        ("POST", f"/flow_runs/{run['id']}/resume", {"run_input": {"approve": True}}),
        ("POST", f"/flow_runs/{run['id']}/input", {"key": "privrelease-approval", "value": "{}"}),
    ]
    for method, path, body in attacks:
        response = alice.request(method, path, json=body)
        assert refused(response) and response.status_code == 403, (method, path, response.text)
    after = api.get(f"/flow_runs/{run['id']}").json()
    assert after["state"]["type"] == "SCHEDULED" and sorted(after["tags"]) == ["publishes", "requested-by:vera"]
    assert api.get(f"/artifacts/{artifact['id']}").status_code == 200
    # her own cancellation is allowed, and only a cancellation
    own = people["vera"]
    assert refused(own.post(f"/flow_runs/{run['id']}/set_state", json={"state": {"type": "COMPLETED"}}))
    cancelled = own.post(f"/flow_runs/{run['id']}/set_state", json={"state": {"type": "CANCELLING"}})
    assert cancelled.status_code in (200, 201) and not refused(cancelled), cancelled.text
    assert api.get(f"/flow_runs/{run['id']}").json()["state"]["type"] in ("CANCELLING", "CANCELLED")
    # without the gate each attack works: the artifact is deleted, the run's state set
    assert api.delete(f"/artifacts/{artifact['id']}").status_code == 204
    forced = api.post(f"/flow_runs/{run['id']}/set_state", json={"state": {"type": "COMPLETED"}, "force": True})
    assert forced.status_code in (200, 201) and api.get(f"/flow_runs/{run['id']}").json()["state"]["type"] == "COMPLETED"


def test_an_analyst_changes_nothing_of_the_operators(served, people):
    """Work pools, automations, variables, blocks, events, flows and deployments: refused through the
    gate, nothing changed; the same calls with the operator's credential straight to Prefect succeed."""
    env, _ = served
    api = operator(env)
    pool = api.get("/work_pools/privrelease").json()
    template = json.loads(json.dumps(pool["base_job_template"]))
    template["job_configuration"]["command"] = "sh -c 'cat $PRIVRELEASE_HOME/ledger.key'"
    automation = {
        "name": "exfiltrate",
        "enabled": False,
        "trigger": {
            "type": "event",
            "expect": ["prefect.flow-run.Completed"],
            "posture": "Reactive",
            "threshold": 1,
            "within": 0,
        },
        "actions": [{"type": "cancel-flow-run"}],
    }
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    attacks = [
        ("PATCH", "/work_pools/privrelease", {"base_job_template": template}),
        ("POST", "/automations/", automation),
        ("POST", "/variables/", {"name": "planted", "value": "x"}),
        ("POST", "/block_types/", {"name": "planted", "slug": "planted"}),
        (
            "POST",
            "/events",
            [
                {
                    "occurred": now,
                    "event": "prefect.flow-run.Completed",
                    "resource": {"prefect.resource.id": "x"},
                    "id": "11111111-1111-4111-8111-111111111111",
                }
            ],
        ),
        ("POST", "/flows/", {"name": "planted"}),
        ("POST", "/concurrency_limits/", {"tag": "planted", "concurrency_limit": 0}),
    ]
    for method, path, body in attacks:
        for who in ("alice", "ada", "sam"):
            response = people[who].request(method, path, json=body)
            assert refused(response) and response.status_code == 403, (who, method, path, response.text)
    assert api.get("/work_pools/privrelease").json()["base_job_template"] == pool["base_job_template"]
    assert api.post("/automations/filter", json={}).json() == []
    assert api.get("/variables/name/planted").status_code == 404
    assert api.get("/block_types/slug/planted").status_code == 404
    assert api.post("/flows/filter", json={"flows": {"name": {"any_": ["planted"]}}}).json() == []
    # the same calls without the gate, with the operator's credential, take effect (then are undone)
    for method, path, body in attacks:
        response = api.request(method, path, json=body)
        assert response.status_code in (200, 201, 204), (path, response.text)
    assert api.get("/work_pools/privrelease").json()["base_job_template"]["job_configuration"]["command"].startswith("sh -c")
    assert len(api.post("/automations/filter", json={}).json()) == 1
    assert api.get("/variables/name/planted").status_code == 200
    assert api.post("/flows/filter", json={"flows": {"name": {"any_": ["planted"]}}}).json() != []
    api.patch("/work_pools/privrelease", json={"base_job_template": pool["base_job_template"]})
    for automation_ in api.post("/automations/filter", json={}).json():
        api.delete(f"/automations/{automation_['id']}")
    api.delete("/variables/name/planted")
    api.delete(f"/block_types/{api.get('/block_types/slug/planted').json()['id']}")
    api.delete(f"/flows/{api.get('/flows/name/planted').json()['id']}")
    api.delete("/concurrency_limits/tag/planted")
    assert api.get("/work_pools/privrelease").json()["base_job_template"] == pool["base_job_template"]


def _shell_deployment(api: httpx.Client, pool: str, marker: Path) -> str:
    """What the issue's analyst did: a flow, a deployment whose pull step runs a shell command, a run."""
    flow_id = api.post("/flows/", json={"name": "innocent"}).json()["id"]
    created = api.post(
        "/deployments/",
        json={
            "name": f"innocent-{pool}",
            "flow_id": flow_id,
            "entrypoint": "privrelease/flows/audit.py:ledger_audit",
            "work_pool_name": pool,
            "pull_steps": [
                {
                    "prefect.deployments.steps.run_shell_script": {
                        "script": f"sh -c 'env | grep PRIVRELEASE_ > {marker}; ls $PRIVRELEASE_HOME >> {marker}'"
                    }
                }
            ],
        },
    )
    assert created.status_code in (200, 201), created.text
    return created.json()["id"]


def test_the_shell_pull_step_attack(served, people, tmp_path):
    """Through the gate an analyst creates no flow, deployment or run of their own; without the gate
    (Prefect's API with its credential) the deployment is created, and a worker without privrelease's
    guard runs its shell command, while the guarded pool's worker refuses it before any of it runs."""
    env, root = served
    api = operator(env)
    marker = Path(tempfile.mkdtemp(dir=tmp_path)) / "stolen"
    alice = people["alice"]
    assert refused(alice.post("/flows/", json={"name": "innocent"}))
    assert refused(alice.post("/deployments/", json={"name": "innocent", "flow_id": DUMMY}))
    assert refused(alice.post("/flow_runs/", json={"flow_id": DUMMY}))
    # without the gate: the weakened variant (a pool with Prefect's default job template) runs the command
    api.post("/work_pools/", json={"name": "unguarded", "type": "process"})
    unguarded = _shell_deployment(api, "unguarded", marker)
    run = api.post(f"/deployments/{unguarded}/create_flow_run", json={}).json()["id"]
    # refused through the gate for a person: not one of the release forms
    assert refused(alice.post(f"/deployments/{unguarded}/create_flow_run", json={"parameters": {}}))
    with worker(env, root / "worker-unguarded.log", pool="unguarded"):
        _wait(api, run, root / "worker-unguarded.log")
    assert "PRIVRELEASE_HOME" in marker.read_text()  # the attack works without the gate and the guard
    marker.unlink()
    guarded = _shell_deployment(api, "privrelease", marker)
    created = api.post(f"/deployments/{guarded}/create_flow_run", json={})
    assert created.status_code == 201, created.text
    run = created.json()["id"]
    with worker(env, root / "worker-guarded.log"):
        assert _wait(api, run, root / "worker-guarded.log") == "FAILED"
    assert not marker.exists()
    state = api.get(f"/flow_runs/{run}").json()["state"]
    assert state["message"].startswith("refused by the worker's guard: its deployment 'innocent-privrelease' is not declared")
    assert "refused by the worker's guard" in (root / "worker-guarded.log").read_text()
    for deployment_id in (unguarded, guarded):
        api.delete(f"/deployments/{deployment_id}")


def test_the_ledger_names_who_asked(served, people):
    """A release started through the gate is charged in the ledger under the account that started it."""
    env, root = served
    api = operator(env)
    home = Path(env["PRIVRELEASE_HOME"])
    with worker(env, root / "worker-requester.log"):
        run = (
            people["vera"]
            .post(f"/deployments/{deployment(api, 'ra')['id']}/create_flow_run", json={"parameters": {"release_id": "asked"}})
            .json()
        )
        assert _wait(api, run["id"], root / "worker-requester.log") == "COMPLETED"
    (charge,) = [
        e for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id == "vera.asked" and e.status == "reserved"
    ]
    assert charge.requested_by == "vera"


def _until(
    api: httpx.Client,
    run_id: str,
    states: tuple[str, ...],
    log: Path,
    timeout: float = 120,
    proc: subprocess.Popen | None = None,
    seen: set[str] | None = None,
) -> str:
    """Wait for the run to reach one of ``states``; with the worker ``proc``, add the run's id to ``seen``
    if a process of the worker's ran it meanwhile."""
    deadline = time.monotonic() + timeout
    while (state := api.get(f"/flow_runs/{run_id}").json()["state"]["type"]) not in states:
        assert time.monotonic() < deadline, (state, log.read_text()[-3000:])
        if proc is not None and seen is not None and run_processes(proc, run_id):
            seen.add(run_id)
        time.sleep(0.1 if proc is not None else 0.5)
    return state


def _left_the_worker(proc: subprocess.Popen, run_id: str, log: Path, timeout: float = 60) -> None:
    """Wait until no process of the worker runs ``run_id`` (a run paused in its process never gets there)."""
    deadline = time.monotonic() + timeout
    while held := run_processes(proc, run_id):
        assert time.monotonic() < deadline, (f"the waiting run still holds {[p.pid for p in held]}", log.read_text()[-3000:])
        time.sleep(0.2)


@pytest.mark.system
def test_a_large_charge_waits_for_a_steward(served, people):
    """A release above the steward's threshold is suspended before its charge: its process ends and frees
    the worker while it waits; the analyst cannot answer it, nor can a steward answer their own; a
    rejection charges and publishes nothing; an approval starts the run again, which is charged once and
    publishes once, and the ledger names who asked."""
    env, root = served
    api, log = operator(env), root / "worker-approval.log"
    home = Path(env["PRIVRELEASE_HOME"])
    ledger = Ledger(home / "privrelease.duckdb")
    ledger.set_budget("logins-demo", Budget(40.0, 1e-3), approve_above=0.0)  # every DP release waits
    form = deployment(api, "outlier-count")["id"]  # (the n-gram corpus stays unspent for test_server)
    seen: set[str] = set()  # runs a process of the worker was seen running
    try:
        with worker(env, log) as proc:
            rejected = (
                people["alice"].post(f"/deployments/{form}/create_flow_run", json={"parameters": {"release_id": "big-1"}}).json()
            )
            assert _until(api, rejected["id"], ("PAUSED",), log, proc=proc, seen=seen) == "PAUSED"
            assert rejected["id"] in seen  # it ran in a process of the worker's, until it was suspended
            _left_the_worker(proc, rejected["id"], log)  # which ended: the worker holds nothing for it while it waits
            assert api.get(f"/flow_runs/{rejected['id']}").json()["state"]["name"] == "Suspended"
            assert not [e for e in ledger.entries() if e.release_id == "alice.big-1"]  # nothing charged while it waits
            for who in ("alice", "vera", "ada"):
                answer = people[who].post(f"/flow_runs/{rejected['id']}/resume", json={"run_input": {"approve": True}})
                assert refused(answer) and answer.status_code == 403, who
            answer = people["sam"].post(f"/flow_runs/{rejected['id']}/resume", json={"run_input": {"approve": False}})
            assert answer.status_code in (200, 201) and not refused(answer), answer.text
            assert _until(api, rejected["id"], ("COMPLETED", "FAILED", "CRASHED"), log) == "FAILED"
            message = api.get(f"/flow_runs/{rejected['id']}").json()["state"]["message"]
            assert message.startswith("the data steward sam rejected this release") and "nothing was charged" in message
            assert not [e for e in ledger.entries() if e.release_id == "alice.big-1"]
            assert not (home / "releases" / "logins-demo" / "alice.big-1").exists()

            approved = (
                people["alice"].post(f"/deployments/{form}/create_flow_run", json={"parameters": {"release_id": "big-2"}}).json()
            )
            _until(api, approved["id"], ("PAUSED",), log)
            _left_the_worker(proc, approved["id"], log)
            assert people["sam"].post(
                f"/flow_runs/{approved['id']}/resume", json={"run_input": {"approve": True}}
            ).status_code in (200, 201)
            assert _wait(api, approved["id"], log) == "COMPLETED"
            own = people["sam"].post(f"/deployments/{form}/create_flow_run", json={"parameters": {"release_id": "big-3"}}).json()
            _until(api, own["id"], ("PAUSED",), log)
            assert refused(people["sam"].post(f"/flow_runs/{own['id']}/resume", json={"run_input": {"approve": True}}))
            assert people["sam"].post(
                f"/flow_runs/{own['id']}/set_state", json={"state": {"type": "CANCELLING"}}
            ).status_code in (200, 201)
            _until(api, own["id"], ("CANCELLED",), log)
    finally:
        ledger.set_budget("logins-demo", Budget(40.0, 1e-3))
    # charged once, published once, under the approval of what the steward was shown
    assert [e.status for e in ledger.entries() if e.release_id == "alice.big-2"] == ["reserved", "published"]
    (charge,) = [e for e in ledger.entries() if e.release_id == "alice.big-2" and e.status == "reserved"]
    assert charge.requested_by == "alice" and (home / "releases" / "logins-demo" / "alice.big-2" / "manifest.json").exists()
    assert json.loads(charge.detail)["approval"]["approved_by"] == "sam"
    messages = [x["message"] for x in _logs(api, approved["id"])]
    assert messages.count("approved by the data steward sam") == 1
    assert sum(m.startswith("waiting for a data steward") for m in messages) == 1  # asked once; started again after


def test_what_prefect_would_resolve_after_the_gate_decided_is_refused(served, people):
    """Prefect's server resolves ``__prefect_kind`` objects in a run's parameters and a pause's answer
    (workspace variables, Jinja templates) after the gate saw them: refused in any body, however spelled."""
    env, _ = served
    api = operator(env)
    ra = deployment(api, "ra")["id"]
    variable = {"__prefect_kind": "workspace_variable", "variable_name": "secret"}
    for body in (
        {"parameters": {"release_id": variable}},
        {"parameters": {"qi": [{"__prefect_kind": "jinja", "template": "{{ 7*7 }}"}]}},
    ):
        response = people["alice"].post(f"/deployments/{ra}/create_flow_run", json=body)
        assert refused(response) and response.status_code == 403 and "__prefect_kind" in response.text
    escaped = b'{"parameters": {"release_id": {"\\u005f_prefect_kind": "workspace_variable", "variable_name": "secret"}}}'
    response = people["alice"].post(
        f"/deployments/{ra}/create_flow_run", content=escaped, headers={"content-type": "application/json"}
    )
    assert refused(response) and response.status_code == 403
    validate = people["alice"].post("/ui/schemas/validate", json={"schema": {}, "values": {"x": variable}})
    assert refused(validate)
    # without the gate, Prefect resolves it: the variable is looked up on the server
    direct = api.post(f"/deployments/{ra}/create_flow_run", json={"parameters": {"release_id": variable}})
    assert direct.status_code == 400 and "Variable 'secret' not found" in direct.text


def test_the_gate_passes_on_only_what_it_decided_on(served, people):
    """No header of the caller's labels a run as an automation's; bodies are bounded and must be JSON;
    malformed bodies are refused, not crashed on."""
    env, _ = served
    api = operator(env)
    ra = deployment(api, "ra")["id"]
    label = {
        "Prefect-Automation-Id": "11111111-2222-4333-8444-555555555555",
        "Prefect-Automation-Name": base64.b64encode(b"operator nightly release").decode(),
    }
    run = people["alice"].post(f"/deployments/{ra}/create_flow_run", json={"parameters": {}}, headers=label).json()
    direct = api.post(f"/deployments/{ra}/create_flow_run", json={"parameters": {}}, headers=label).json()
    assert (direct["created_by"] or {}).get("type") == "AUTOMATION"  # what the headers do without the gate
    assert (run["created_by"] or {}).get("type") != "AUTOMATION"
    for created in (run["id"], direct["id"]):
        api.delete(f"/flow_runs/{created}")
    big = people["alice"].post(
        "/flow_runs/filter", content=b"{" + b" " * (2 << 20) + b"}", headers={"content-type": "application/json"}
    )
    assert big.status_code == 413  # by the proxy, before the gate; without it, by the gate (tests/system/test_proxy.py)
    assert refused(people["alice"].post("/flow_runs/filter", content=b"not json"))
    for path, body in ((f"/deployments/{ra}/create_flow_run", {"state": {"type": "SCHEDULED", "state_details": [1]}}),):
        response = people["alice"].post(path, json=body)
        assert response.status_code == 201, response.text
        api.delete(f"/flow_runs/{response.json()['id']}")
    mine = people["alice"].post(f"/deployments/{ra}/create_flow_run", json={"parameters": {}}).json()
    for body in ({"state": "x"}, {"state": ["CANCELLING"]}, []):
        response = people["alice"].post(f"/flow_runs/{mine['id']}/set_state", json=body)
        assert refused(response) and response.status_code == 403, (body, response.text)
    api.delete(f"/flow_runs/{mine['id']}")


@pytest.mark.system
def test_callers_that_never_read_hold_no_connection_to_prefect(served):
    """More callers than the gate has connections to Prefect each ask for the UI's largest file and never
    read it; the gate still answers (it reads Prefect's answer whole before passing it on). The bare gate, behind
    the proxy: through the proxy, nginx serves the UI's files from disk (tests/system/test_proxy.py)."""
    env, _ = served
    gate_url = f"http://127.0.0.1:{env['PRIVRELEASE_GATE_PORT']}"
    static = Path(prefect.__ui_static_path__)
    largest = max((p for p in static.rglob("*.js")), key=lambda p: p.stat().st_size).relative_to(static).as_posix()
    port = int(gate_url.rsplit(":", 1)[1])
    stalled = []
    try:
        for _ in range(110):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(f"GET /{largest} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            stalled.append(s)
        time.sleep(2)
        # generous: on a loaded machine the gate may take a while to read 110 copies of the file from
        # Prefect; a gate that held a connection per stalled caller would never answer at all
        assert httpx.get(f"{gate_url}/api/health", timeout=120).status_code == 200
        assert httpx.get(f"{gate_url}/ui-settings", timeout=120).status_code == 200
    finally:
        for s in stalled:
            s.close()
