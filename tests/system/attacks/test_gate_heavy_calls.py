"""The second independent attack on the served stack (issue #39), each finding through the real proxy, gate and
server, and each shown to work on a weakened gate without the one bound:

- a deployment's own schema checked against a huge list of wrong values (Prefect's error list grows with its square);
- event filters of many related resources and labels (each label a JSON query over every event);
- bodies of very many values, and run names of a megabyte copied into every page, log and event;
- the proxy opening more connections to the gate than the gate holds (past them the gate answers everyone 503);
- a parameter whose text ends the report's code span and writes into a release's report."""

from __future__ import annotations

import asyncio
import re

from privrelease.core.release.publish import code
from privrelease.gate import bounds, events, rewrites, signin
from privrelease.gate.__main__ import CONNECTIONS
from tests.conftest import REPO
from tests.system.test_gate_abuse import refused, weakened, without
from tests.system.test_server import deployment, operator


def test_a_stored_schemas_values_are_bounded_like_a_runs_parameters(served, people, monkeypatch):
    env, _ = served
    form = operator(env).get(f"/deployments/{deployment(operator(env), 'outlier-count')['id']}").json()
    wrong = {"standardize": [{"column": "m" * 1000, "mean": 1.5, "std": -2.5}] * 70}  # 70 KB of wrong values
    body = {"schema": form["parameter_openapi_schema"], "values": wrong}
    answer = people["alice"].post("/ui/schemas/validate", json=body)
    assert refused(answer) and answer.status_code == 403 and "values and 16 KB, as a run's parameters" in answer.text
    monkeypatch.setattr(rewrites.limits, "configured", lambda: rewrites.limits.Limits(parameters_kb=10**6))
    with weakened(env) as person:  # no bound on the values: Prefect validates every one of them
        validated = person("alice").post("/ui/schemas/validate", json=body)
    assert validated.status_code == 200 and not validated.headers.get("x-privrelease-gate-refused")


def test_event_filters_take_few_related_resources_and_labels(served, people, monkeypatch):
    env, _ = served
    labels = {f"k{i}": ["v"] for i in range(6)}
    body = {"filter": {"related": [{"labels": labels}] * 4, "occurred": {"since": "2000-01-01T00:00:00Z"}}, "limit": 50}
    answer = people["ada"].post("/events/filter", json=body)
    assert refused(answer) and answer.status_code == 403 and "at most 3 resource filters" in answer.text
    one = {"filter": {"related": [{"labels": labels}]}, "limit": 5}
    answer = people["ada"].post("/events/filter", json=one)
    assert refused(answer) and "at most 5 labels" in answer.text
    for name, value in (("MAX_RELATED", 10**6), ("MAX_LABELS", 10**6)):
        monkeypatch.setattr(events, name, value)
    with weakened(env) as person:  # the labels reach Prefect's query
        assert person("ada").post("/events/filter", json=body).status_code == 200


def test_a_body_of_very_many_values_is_refused(served, people, monkeypatch):
    many = {"flow_runs": {"id": {"any_": ["00000000-0000-4000-8000-000000000000"] * 400}}, "pad": [[0] * 400] * 14}
    answer = people["alice"].post("/flow_runs/filter", json=many)
    assert refused(answer) and answer.status_code == 400 and f"at most {bounds.MAX_NODES} are allowed" in answer.text
    monkeypatch.setattr(bounds, "MAX_NODES", 10**7)
    env, _ = served
    with weakened(env) as person:
        assert person("alice").post("/flow_runs/filter", json=many).status_code != 400


def test_a_runs_name_is_short(served, people, monkeypatch):
    env, _ = served
    api = operator(env)
    ra = deployment(api, "ra")["id"]
    long = {"name": "n-" + "A" * 5000, "parameters": {"preview": True}}
    answer = people["vera"].post(f"/deployments/{ra}/create_flow_run", json=long)
    assert refused(answer) and answer.status_code == 403 and f"at most {rewrites.MAX_NAME} characters" in answer.text
    monkeypatch.setattr(rewrites, "MAX_NAME", 10**7)
    with weakened(env) as person:
        created = person("vera").post(f"/deployments/{ra}/create_flow_run", json=long)
    assert created.status_code == 201 and len(created.json()["name"]) == 5002
    api.delete(f"/flow_runs/{created.json()['id']}")


def test_parameters_the_form_does_not_name_and_unprintable_run_names_are_refused(served, people, monkeypatch):
    """Prefect's schema check lets unknown parameters through: they were stored with the run (plain text, in
    Prefect's database) and failed it only when it started. A run's name is shown on every page listing it."""
    env, _ = served
    api = operator(env)
    ra = deployment(api, "ra")["id"]
    smuggled = {"parameters": {"preview": True, "home": "/etc", "__class__": 1}}
    answer = people["vera"].post(f"/deployments/{ra}/create_flow_run", json=smuggled)
    assert refused(answer) and answer.status_code == 403, answer.text
    assert "this form has no parameter '__class__', 'home': remove it" in answer.text
    forged = {"name": "q4\nrequested-by:alice", "parameters": {"preview": True}}
    answer = people["vera"].post(f"/deployments/{ra}/create_flow_run", json=forged)
    assert refused(answer) and "printable characters only" in answer.text
    plain = people["vera"].post(f"/deployments/{ra}/create_flow_run", json={"parameters": {"preview": True}})
    assert plain.status_code == 201, plain.text
    # the weakened gate: without the names' check the extra parameters are stored with the run; with a rewrite
    # passing the name as asked, the name is too
    monkeypatch.setattr(rewrites, "unnamed", lambda parameters, call: asyncio.sleep(0, []))
    with weakened(env) as person:
        created = person("vera").post(f"/deployments/{ra}/create_flow_run", json=smuggled)
    assert created.status_code == 201 and created.json()["parameters"]["home"] == "/etc", created.text

    async def named_as_asked(body: dict, call) -> dict:
        return {"parameters": body["parameters"], "name": body["name"]}

    with weakened(env, rules=without("/api/deployments/{id}/create_flow_run", body=named_as_asked)) as person:
        named = person("vera").post(f"/deployments/{ra}/create_flow_run", json=forged)
    assert named.status_code == 201 and "\n" in named.json()["name"], named.text
    for run in (plain, created, named):
        api.delete(f"/flow_runs/{run.json()['id']}")


def test_the_proxy_opens_fewer_connections_to_the_gate_than_it_holds():
    conf = (REPO / "deploy" / "nginx.conf").read_text()
    people, signing_in, anyone = [int(n) for n in re.findall(r"server 127\.0\.0\.1:\{\{gate_port\}\} max_conns=(\d+);", conf)]
    (per_address,) = {int(n) for n in re.findall(r"limit_conn per_address (\d+);", conf)}  # the server's and the gate's location
    idle = sum(int(n) for n in re.findall(r"keepalive (\d+);", conf))  # kept open between calls: counted by the gate too
    assert people + signing_in + anyone + idle < CONNECTIONS and per_address < anyone < people
    assert signin.STRANGERS_WAITING + signin.NAMES_WAITING < signing_in  # sign-ins waiting never fill their pool


def test_a_parameter_cannot_end_the_reports_code_span():
    assert code('{"a": 1}') == '`{"a": 1}`'  # as before, for text without backticks
    span = code('{"c": "x` ![i](http://evil/) `"}')
    assert span.startswith("`` ") and span.endswith(" ``") and span.count("``") == 2
