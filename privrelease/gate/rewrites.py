"""What the gate does to a call it passes on to Prefect (rows of ``privrelease.gate.access`` with ``when=``,
``body=`` or ``reply=``): conditions checked against Prefect's own records, body rewrites (the body passed on is
made from the body asked, or refused with the reason) and replies (the answer passed back is made from Prefect's).
The calls the gate answers itself are in ``privrelease.gate.answers``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

from privrelease.core import limits
from privrelease.core.params import ID_PATTERN
from privrelease.core.people import PUBLISHES, REQUESTED_BY
from privrelease.gate import bounds, events, schemas
from privrelease.gate.call import Call, Condition, says

MAX_NAME = 100  # a run's name: shown on every page that lists it, copied into its logs and events


def _tag(call: Call) -> str:
    """The tag of a run the caller started through the gate."""
    assert call.account is not None  # conditions and rewrites are only on rows for people
    return f"{REQUESTED_BY}{call.account.name}"


# -- conditions: checked against Prefect's own records ------------------------------------------------


def deployment_in(names: Iterable[str]) -> Condition:
    """The deployment ``{id}`` is one of ``names``."""
    names = tuple(names)
    listed = ", ".join(f"`{n}`" for n in names)

    @says(f"the deployment is {listed}" if len(names) == 1 else f"the deployment is one of {listed}")
    async def holds(call: Call) -> bool:
        deployment = await call.prefect.read(f"/api/deployments/{call.params['id']}")
        return deployment is not None and deployment["name"] in names

    return holds


async def _run(call: Call) -> tuple[dict | None, bool]:
    """The flow run ``{id}``, and whether the caller started it through the gate (its requester tag)."""
    run = await call.prefect.read(f"/api/flow_runs/{call.params['id']}")
    return run, run is not None and _tag(call) in run.get("tags", [])


@says(f"the run is the caller's own (tagged `{REQUESTED_BY}<account>`)")
async def own_run(call: Call) -> bool:
    _, mine = await _run(call)
    return mine


@says("the run is paused for approval and is not the caller's own")
async def awaits_approval(call: Call) -> bool:
    run, mine = await _run(call)
    return run is not None and not mine and run["state"]["type"] == "PAUSED"


# -- rewrites: the body passed on is made from the body asked --------------------------------------------


def release_id(asked: object, call: Call) -> str | None:
    """A release id the caller chose, in their own namespace: ``<account>.<id>`` (kept if it is already theirs),
    so no one takes an id another account's scheduled run will use. None: not an id the gate passes on."""
    assert call.account is not None
    mine = f"{call.account.name}."
    if not isinstance(asked, str):
        return None
    named = asked if asked.startswith(mine) else mine + asked
    own = named.removeprefix(mine)
    return named if own and "." not in own and re.fullmatch(ID_PATTERN, named) else None


async def unnamed(parameters: dict, call: Call) -> list[str]:
    """The parameters the deployment ``{id}``'s form does not name (Prefect's schema check lets them through,
    and they would be stored with the run and fail it only when it starts, holding a slot until then)."""
    deployment = await call.prefect.read(f"/api/deployments/{call.params['id']}")
    named = ((deployment or {}).get("parameter_openapi_schema") or {}).get("properties") or {}
    return sorted(set(parameters) - set(named))


@says(
    "passes on only the parameters the form names (checked against its schema), a printable name and a "
    f"scheduled time; a chosen release id becomes `<account>.<id>`; tags the run `{REQUESTED_BY}<account>` (and "
    f"`{PUBLISHES}` unless it is a preview)"
)
async def start_run(body: dict, call: Call) -> dict | str:
    """A run of a deployment: no tags, job variables, work queue or ``enforce_parameter_schema: false`` of
    the caller's; the release flow records the requester tag in the ledger as who asked."""
    parameters = body.get("parameters", {})
    if not isinstance(parameters, dict):
        return "parameters must be an object"
    if extra := await unnamed(parameters, call):
        shown = ", ".join(repr(name[:40]) for name in extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
        return f"this form has no parameter {shown}: remove it (the form's fields are its parameters)"
    if parameters.get("release_id"):
        named = release_id(parameters["release_id"], call)
        if named is None:
            return (
                f"release_id {parameters['release_id']!r} is not allowed: use letters, digits, '_' and '-' "
                f"(the gate names it {call.account.name}.<release_id>, at most 80 characters in all)"
            )
        parameters = parameters | {"release_id": named}
    tags = [_tag(call)] + ([] if parameters.get("preview") is True else [PUBLISHES])  # the server takes only a boolean
    out: dict = {"parameters": parameters, "tags": tags, "enforce_parameter_schema": True}
    if isinstance(body.get("name"), str):
        if len(body["name"]) > MAX_NAME:
            return f"a run's name may hold at most {MAX_NAME} characters"
        if not body["name"].isprintable():
            return "a run's name may hold printable characters only (no line breaks, tabs or control characters)"
        out["name"] = body["name"]
    state = body.get("state")
    if isinstance(state, dict) and state.get("type") == "SCHEDULED":
        details = state.get("state_details")
        when = details.get("scheduled_time") if isinstance(details, dict) else None
        out["state"] = {"type": "SCHEDULED", "state_details": {"scheduled_time": when if isinstance(when, str) else None}}
    return out


@says("only a cancellation, naming who cancelled")
async def cancel(body: dict, call: Call) -> dict | str:
    assert call.account is not None
    state = body.get("state")
    if not isinstance(state, dict) or state.get("type") not in ("CANCELLING", "CANCELLED"):
        return "you may only cancel your own runs"
    return {"state": {"type": "CANCELLING", "message": f"cancelled by {call.account.name}"}}


@says("only approve true or false; the approver's name is written into the answer")
async def answer_approval(body: dict, call: Call) -> dict | str:
    assert call.account is not None
    run_input = body.get("run_input")
    if not isinstance(run_input, dict) or not isinstance(run_input.get("approve"), bool):
        return "an approval is its form's answer: approve true or false"
    return {"run_input": {"approve": run_input["approve"], "approved_by": call.account.name}}


def _within(make: Callable[..., dict], *args: Any) -> dict | str:
    """The body ``make`` builds, or why it is out of bounds."""
    try:
        return make(*args)
    except bounds.OutOfBounds as error:
        return str(error)


@says(
    f"bounded: `limit` at most {bounds.MAX_LIMIT}, lists of at most {bounds.MAX_LIST} items, "
    f"`like_` text of at most {bounds.MAX_LIKE} characters without `%`, `offset` at most {bounds.MAX_OFFSET:,}, "
    f"`page` at most {bounds.MAX_PAGE:,}; times ISO 8601 text between the years {bounds.YEARS[0]} and {bounds.YEARS[1]}, "
    "passed on as the gate read them; a history's interval 1 s to 10 years; no logs' text search"
)
async def bounded(body: dict, call: Call) -> dict | str:
    return _within(bounds.query, body)


async def _is_stored(schema: Any, call: Call) -> bool:
    """Whether ``schema`` is a deployment's parameter schema, or the answer schema of a run paused for one (the
    flow's own); the paused runs are read only when no deployment's matches."""
    found = await call.prefect.find("/api/deployments/filter", {"limit": bounds.MAX_LIMIT}) or []
    if schemas.made_of(
        schema, [d["parameter_openapi_schema"] for d in found if isinstance(d.get("parameter_openapi_schema"), dict)]
    ):
        return True
    paused = (
        await call.prefect.find(
            "/api/flow_runs/filter", {"flow_runs": {"state": {"type": {"any_": ["PAUSED"]}}}, "limit": bounds.MAX_LIMIT}
        )
        or []
    )
    for run in paused:  # a paused or suspended run's keyset names its answer schema ("paused-1-schema", "suspended-<key>-schema")
        key = ((run.get("state") or {}).get("state_details") or {}).get("run_input_keyset", {}) or {}
        value = (
            await call.prefect.read(f"/api/flow_runs/{run['id']}/input/{quote(key['schema'], safe='')}")
            if key.get("schema")
            else None
        )
        if isinstance(value, dict) and schemas.made_of(schema, [value]):
            return True
    return False


@says(
    "only a deployment's own parameter schema, or a paused run's answer schema (as the forms send them); "
    f"values of at most {bounds.MAX_FORM_VALUES} values"
)
async def stored_schema(body: dict, call: Call) -> dict | str:
    """The UI checks a run form's values against its deployment's schema, and a paused run's answer against the
    schema the flow paused with; a schema of the caller's is refused (Prefect would run the caller's regular
    expressions in its event loop), and so are values larger than a form's (Prefect's check of them takes its
    event loop for a time that grows faster than their number)."""
    if not isinstance(body.get("values"), dict):
        return "the values checked must be an object"
    kb, many = limits.configured().parameters_kb, bounds.nodes(body["values"])
    if len(json.dumps(body["values"])) > kb * 1024 or many > bounds.MAX_FORM_VALUES:
        return (
            f"the values checked hold {many} values; a form's hold at most {bounds.MAX_FORM_VALUES} values "
            f"and {kb} KB, as a run's parameters"
        )
    if not await _is_stored(body.get("schema"), call):
        return (
            "the schema checked must be a deployment's own parameter schema or a paused run's answer schema "
            "(what their forms send); a schema of your own is not checked"
        )
    return {"schema": body["schema"], "values": body["values"]}


@says(f"only flow-run, task-run and artifact events (an analyst's: of their own runs); at most {bounds.EVENTS_PAGE} a page")
async def event_query(body: dict, call: Call) -> dict | str:
    assert call.account is not None
    return _within(events.query, body, call.account)


@says("counts of the same events (the filter rebuilt as above)")
async def event_count(body: dict, call: Call) -> dict | str:
    assert call.account is not None
    return _within(events.count, body, call.account)


# -- replies: the answer passed back is made from Prefect's ---------------------------------------------


@says("each event's payload cut to its state change")
def events_shown(answer: Any, call: Call) -> Any:
    assert call.account is not None
    return events.shown(answer, call.account)
