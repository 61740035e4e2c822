"""The release forms as the registry makes them: what the gate answers for a deployment the UI opens.

A release form's parameter schema is stored when it is deployed (``privrelease/flows/forms.py``), with its dataset and
column fields as text, so a dataset registered since then is a valid value and the release checks every
name anyway. What the UI shows is read live: the gate answers ``GET /api/deployments/{id}`` with the
deployment as Prefect has it and its form's fields marked by ``privrelease/flows/forms.py`` (``FORM_FIELD``) filled in
from the registered datasets, at most ``catalogue.FRESH_S`` seconds old:

- the dataset field (``dataset:<purpose>``) offers the datasets registered for the form's purpose (an sdc
  dataset only once it has a disclosure policy);
- a column field (``column``) offers their columns (those an sdc dataset's policy publishes; a dp dataset's
  but the privacy unit's own);
- when the form was opened for one dataset (its page's address carries ``?parameters={"dataset": ID}``, as the
  catalogue's links do, and the browser names that page as the call's Referer), only that dataset's columns,
  that dataset as the default, the defaults of other datasets' columns left out, and fields that bound a
  user's rows (``user-unit``) left out for a dataset of the record unit, which ignores them.

The values a person submits are checked against the stored schema (Prefect, at ``create_flow_run``) and by
the release itself; what the form offers is public (ids, column names, units). ``POST /api/ui/schemas/validate``
compares schemas by their shape, whatever their choices and defaults (``privrelease.gate.schemas``).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from privrelease.core.params import ID_PATTERN
from privrelease.core.release.catalogue import FORM_FIELD, offered
from privrelease.gate import owned
from privrelease.gate.call import Call, Refused, says
from privrelease.gate.catalogue import read_catalogue

DATASET, COLUMN, USER_UNIT = "dataset", "column", "user-unit"
RUN_PAGE = re.compile(r"/deployments/deployment/([^/]+)/run$")


def chosen(referer: str, deployment_id: str) -> str | None:
    """The dataset a run form was opened for: the ``dataset`` of its page's ``?parameters=`` (JSON), if the page
    is this deployment's run form."""
    parts = urlsplit(referer or "")
    page = RUN_PAGE.search(parts.path)
    if page is None or page[1] != deployment_id:
        return None
    try:
        given = json.loads(parse_qs(parts.query).get("parameters", ["{}"])[0])
    except ValueError:
        return None
    name = given.get("dataset") if isinstance(given, dict) else None
    return name if isinstance(name, str) and re.fullmatch(ID_PATTERN, name) else None


def _nodes(node: Any):
    """Every schema node under ``node`` (itself included)."""
    if isinstance(node, list):
        for x in node:
            yield from _nodes(x)
    elif isinstance(node, dict):
        yield node
        for key in ("properties", "definitions"):
            if isinstance(node.get(key), dict):
                for child in node[key].values():
                    yield from _nodes(child)
        for key in ("items", "anyOf", "allOf", "prefixItems"):
            if key in node:
                yield from _nodes(node[key])


def _marked(node: Any, mark: str) -> bool:
    return isinstance(node, dict) and str(node.get(FORM_FIELD, "")).split(":")[0] == mark


def purpose(schema: dict) -> str | None:
    """The purpose of the datasets a form releases: its dataset field's mark (``dataset:dp``), None for a form without."""
    field = (schema.get("properties") or {}).get("dataset")
    return field[FORM_FIELD].split(":")[1] if _marked(field, DATASET) else None


def shown(schema: dict, datasets: list[dict], chosen_id: str | None = None) -> dict:
    """``schema`` (a release form's stored parameter schema) as the UI shows it, given the registered ``datasets``
    (their catalogue entries) and the dataset the form was opened for; the stored schema itself for a form
    without a marked dataset field, or when none of its purpose is registered."""
    kind = purpose(schema)
    fits = [d for d in datasets if d["purpose"] == kind and (kind == "dp" or d.get("policy"))]
    if not fits:
        return schema
    one = next((d for d in fits if d["id"] == chosen_id), None)
    ids = [d["id"] for d in fits]
    columns = offered(one) if one else list(dict.fromkeys(c for d in fits for c in offered(d)))
    out = copy.deepcopy(schema)
    definitions = out.get("definitions") or {}
    for node in _nodes(out):
        if _marked(node, DATASET):
            node["enum"] = ids
            node["default"] = one["id"] if one else node.get("default") if node.get("default") in ids else ids[0]
        elif _marked(node, COLUMN):
            node["enum"] = columns
    properties = out.get("properties") or {}
    for name, field in list(properties.items()):
        if one and one["unit"] == "record" and _marked(field, USER_UNIT):
            del properties[name]
            if name in out.get("required", []):
                out["required"] = [r for r in out["required"] if r != name]
        elif "default" in field:
            _keep_offered(field, definitions, set(columns))
    return out


def _keep_offered(field: dict, definitions: dict, columns: set[str]) -> None:
    """A field's default without the columns the form does not offer: a column field's, a list of columns' items,
    a list of objects' items whose ``column`` is not offered."""
    default, items = field["default"], field.get("items") or {}
    if _marked(field, COLUMN) and default not in columns:
        del field["default"]
    elif isinstance(default, list) and _marked(items, COLUMN):
        field["default"] = [c for c in default if c in columns]
    elif isinstance(default, list) and "$ref" in items:
        target = definitions.get(items["$ref"].rsplit("/", 1)[-1]) or {}
        if _marked((target.get("properties") or {}).get("column"), COLUMN):
            field["default"] = [x for x in default if isinstance(x, dict) and x.get("column") in columns]


@says(
    "answered by the gate: the deployment as Prefect has it, the operator's settings cleared (privrelease.gate.owned), its release "
    "form's dataset and column fields offering the registered datasets and their columns (one dataset's when its run "
    "page was opened for it)"
)
async def deployment(call: Call) -> Any:
    found = await call.prefect.read(f"/api/deployments/{quote(call.params['id'], safe='')}")
    if found is None:
        raise Refused(404, f"privrelease gate: no deployment {call.params['id']!r}")
    found = owned.cleared(found, call)  # the operator's settings in it: never a person's to read
    schema = found.get("parameter_openapi_schema")
    if isinstance(schema, dict) and purpose(schema) is not None:
        try:
            datasets = await read_catalogue(call, lambda c: c.datasets())
        except Refused:  # the registry busy: the form as stored (text fields), which the release checks all the same
            return found
        found["parameter_openapi_schema"] = shown(schema, datasets, chosen(call.referer, call.params["id"]))
    return found
