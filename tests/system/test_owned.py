"""Issue #53's third finding: every role read the operator's automations in full through
``GET /api/automations/related-to/{resource}``. Here the operator makes one of each thing of theirs (an automation
related to a deployment, a secret block, a variable, a work pool whose job template holds a secret, a concurrency
limit, and a deployment and a run whose job variables and pull steps hold one), all carrying one marker; then
every read row of the policy is called, as each role, through the session's real proxy, gate and server, and no
answer holds the marker or any of those objects' ids. The same audit through a gate whose policy passes
related-to on and the answers on uncleared (the policy as it was) finds them in each of the rows that now
clear or answer them."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest

from privrelease.gate import access, owned
from tests.conftest import PASSWORD
from tests.system.test_gate_abuse import weakened
from tests.system.test_server import operator

MARKER = f"opsecret-{uuid.UUID(int=53).hex[:12]}"
ROLES = ("alice", "ada", "sam")  # an analyst, the auditor and a steward (tests/conftest.py `people`)


def _made(response: httpx.Response) -> dict:
    assert response.status_code in (200, 201), response.text
    return response.json()


@pytest.fixture(scope="module")
def things(served) -> Iterator[dict[str, str]]:
    """The operator's things, each carrying MARKER; their ids (and the run's, the deployment's, the flow's)."""
    env, _ = served
    api = operator(env)
    secret = _made(api.get("/block_types/slug/secret"))
    (schema,) = _made(api.post("/block_schemas/filter", json={"block_schemas": {"block_type_id": {"any_": [secret["id"]]}}}))
    block = _made(api.post("/block_documents/", json={"name": "probe-secret", "block_schema_id": schema["id"],
                                                       "block_type_id": secret["id"], "data": {"value": MARKER}}))  # fmt: skip
    variable = _made(api.post("/variables/", json={"name": "probe_variable", "value": MARKER}))
    limit = _made(api.post("/v2/concurrency_limits/", json={"name": f"probe-{MARKER}", "limit": 3}))
    template = {
        "job_configuration": {"command": "true", "env": {"TOKEN": MARKER}},
        "variables": {"type": "object", "properties": {}},
    }
    pool = _made(api.post("/work_pools/", json={"name": "probe-pool", "type": "process", "base_job_template": template,
                                                "storage_configuration": {"default_result_storage_block_id": block["id"]}}))  # fmt: skip
    flow = _made(api.post("/flows/", json={"name": "probe-flow"}))
    deployment = _made(api.post("/deployments/", json={
        "name": "probe", "flow_id": flow["id"], "work_pool_name": pool["name"], "concurrency_limit": 2,
        "job_variables": {"env": {"TOKEN": MARKER}},
        "pull_steps": [{"prefect.deployments.steps.run_shell_script": {"script": f"echo {MARKER}"}}],
    }))  # fmt: skip
    run = _made(api.post(f"/deployments/{deployment['id']}/create_flow_run", json={"job_variables": {"env": {"TOKEN": MARKER}}}))
    automation = _made(api.post("/automations/", json={
        "name": "probe-automation", "description": MARKER, "enabled": False,
        "trigger": {"type": "event", "expect": ["probe.never"], "posture": "Reactive", "threshold": 1, "within": 0},
        "actions": [{"type": "run-deployment", "source": "selected", "deployment_id": deployment["id"],
                     "parameters": {"token": MARKER}}],
    }))  # fmt: skip
    limits = _made(api.get(f"/deployments/{deployment['id']}"))["global_concurrency_limit"]
    ids = {"block": block["id"], "variable": variable["id"], "limit": limit["id"], "deployment-limit": limits["id"],
           "pool": pool["id"], "automation": automation["id"]}  # fmt: skip
    try:
        yield ids | {"flow": flow["id"], "deployment": deployment["id"], "run": run["id"], "pool-name": pool["name"]}
    finally:
        api.delete(f"/automations/{automation['id']}")
        api.delete(f"/flow_runs/{run['id']}")
        api.delete(f"/deployments/{deployment['id']}")
        api.delete(f"/flows/{flow['id']}")
        api.delete(f"/work_pools/{pool['name']}")
        api.delete(f"/v2/concurrency_limits/{limit['id']}")
        api.delete(f"/variables/{variable['id']}")
        api.delete(f"/block_documents/{block['id']}")


def _reads(rules: tuple[access.Rule, ...]) -> list[access.Rule]:
    """The rows people read through: every GET, and every POST that only reads."""
    return [r for r in rules if r.who & access.PEOPLE and (r.method == "GET" or r.reads)]


def _path(route: str, things: dict[str, str]) -> str:
    """``route`` with its parameters filled in with the things' ids (another id where no thing has one)."""
    by_kind = {"flows": things["flow"], "deployments": things["deployment"], "flow_runs": things["run"]}
    kind = route.split("/")[2] if route.startswith("/api/") else ""
    values = {"id": by_kind.get(kind, str(uuid.UUID(int=1))), "name": things["pool-name"], "queue": "default",
              "resource": f"prefect.deployment.{things['deployment']}", "key": "probe", "countable": "event",
              "file": "x", "rest": "x"}  # fmt: skip
    return re.sub(r"\{([a-z_]+)\*?\}", lambda m: values[m[1]], route)


def _leaks(ask, things: dict[str, str], rules: tuple[access.Rule, ...]) -> set[str]:
    """The rows whose answer (``ask(method, path)``) holds the marker or an id of the operator's things."""
    secrets = [MARKER] + [things[k] for k in ("block", "variable", "limit", "deployment-limit", "automation")]
    leaked = set()
    for rule in _reads(rules):
        answer = ask(rule.method, _path(rule.route, things))
        assert answer.status_code < 500, (rule.route, answer.status_code, answer.text[:300])
        if any(s in answer.text for s in secrets):
            leaked.add(f"{rule.method} {rule.route}")
    return leaked


def _as_it_was() -> tuple[access.Rule, ...]:
    """The policy before issue #53: related-to passed on, answers passed back uncleared."""
    return tuple(
        replace(r, answer=None, reads=True)
        if r.answer is owned.no_automations
        else replace(r, reply=None)
        if r.reply is owned.cleared
        else r
        for r in access.RULES
    )


def test_no_role_reads_anything_of_the_operators(served, people, things):
    env, _ = served
    url = env["PRIVRELEASE_GATE_URL"]
    for name in ROLES:
        with httpx.Client(base_url=url, auth=(name, PASSWORD), timeout=60) as client:
            ask = lambda method, path, c=client: c.request(method, path, json={} if method == "POST" else None)  # noqa: E731
            assert _leaks(ask, things, access.RULES) == set(), name
    related = people["alice"].get(f"/automations/related-to/prefect.deployment.{things['deployment']}")
    assert related.status_code == 200 and related.json() == []
    # the policy as it was: the automation through related-to, the rest through the rows that now clear it
    defended = {f"{r.method} {r.route}" for r in access.RULES if r.answer is owned.no_automations or r.reply is owned.cleared}
    with weakened(env, rules=_as_it_was()) as person:
        client = person("alice")
        ask = lambda method, path: client.request(method, f"http://testserver{path}", json={} if method == "POST" else None)  # noqa: E731
        assert _leaks(ask, things, _as_it_was()) == defended


def test_cleared_answers_keep_the_shape_prefects_ui_reads():
    deployment = {"id": "d", "job_variables": {"env": {"X": MARKER}}, "pull_steps": [{"x": MARKER}], "name": "n"}
    pool = {"name": "p", "base_job_template": {"job_configuration": {"env": MARKER}}, "storage_configuration": {"x": 1}}
    page = owned.cleared({"results": [deployment], "count": 1}, None)
    assert page == {"results": [deployment | {"job_variables": {}, "pull_steps": None}], "count": 1}
    assert owned.cleared([pool], None)[0]["base_job_template"] == owned.EMPTY_TEMPLATE
    assert owned.cleared(pool, None)["storage_configuration"] == owned.NO_STORAGE
    assert owned.cleared(7, None) == 7
