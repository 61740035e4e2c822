"""Which schemas ``POST /api/ui/schemas/validate`` may check values against: the deployments' own, and
the answer schemas paused runs stored (the flow's, for the steward's approval form).

Prefect validates the caller's values against the caller's schema in its event loop, so a schema
of the caller's (a ``pattern`` that backtracks, ``anyOf`` references that fan out) stalls the server
for everyone. The UI sends the schema of the deployment whose run form is open, but not as stored
and without the deployment's id: it maps it through its own model first (``SchemaResponse`` ->
``Schema`` -> ``SchemaResponse`` in Prefect's UI, which keeps the keys of ``UI_KEYS`` on the schema
and on each of its ``properties`` and ``definitions``, and passes ``items``, ``anyOf``, ``allOf``
and ``prefixItems`` as they are), and it checks a single field as
``{definitions: <the deployment's>, properties: {<random name>: <the field's schema>}}``.

So a schema is accepted when it is made of one stored schema's pieces: each of its keys the
stored (mapped) schema has with the same value, its ``definitions`` the stored ones, and each
of its ``properties`` one of the stored schema's nodes (a property, a definition or a node under
``items``/``anyOf``/``allOf``/``prefixItems``, at any depth), as stored or as the UI maps it. Every
regular expression Prefect may then run is one the operator's deployments or flows declared.

The pieces are compared by their shape, not their values (``SHOWN``): a node's ``default`` and
``example`` are what the form shows first (the UI sends an edited field's value as its default: a
changed bound in a list of ranges broke Submit, issue #54), and its ``enum`` is the choices the gate
offers from the registry (``privrelease.gate.forms``), which follow the datasets registered since the deployment
was stored. Prefect's check of a value against either is a comparison, never a regular expression.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

UI_KEYS = ("definitions", "position", "block_type_slug", "$ref", "anyOf", "allOf", "example", "default", "const",
           "description", "enum", "format", "items", "prefixItems", "properties", "required", "title", "type",
           "maxItems", "minItems")  # fmt: skip
NESTED = ("items", "anyOf", "allOf", "prefixItems")
SHOWN = ("default", "example", "enum")  # what a form shows or offers, not what its fields are: left out of comparisons


def _plain(v: Any) -> Any:
    """1.0 as 1 (the browser writes integral numbers without a fraction), at any depth."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _shape(node: Any) -> Any:
    """A schema node without what it shows (``SHOWN``), in its own keys and its children's: the names under
    ``properties`` and ``definitions`` are kept whatever they are."""
    if isinstance(node, list):
        return [_shape(x) for x in node]
    if not isinstance(node, dict):
        return _plain(node)
    out = {}
    for key, value in node.items():
        if key in SHOWN:
            continue
        if key in ("properties", "definitions") and isinstance(value, dict):
            out[key] = {name: _shape(child) for name, child in value.items()}
        elif key in NESTED:
            out[key] = _shape(value)
        else:
            out[key] = _plain(value)
    return out


def _canonical(value: Any, top_level: bool = False) -> str:
    """A schema node as comparable text: its shape (``_shape``), sorted keys; ``top_level``: a value of the schema
    itself (its ``properties`` or ``definitions`` map, its ``required`` list), whose entries are nodes or names."""
    if top_level and isinstance(value, dict):
        return json.dumps({k: _shape(v) for k, v in value.items()}, sort_keys=True)
    return json.dumps(_shape(value) if not top_level else _plain(value), sort_keys=True)


def mapped(node: Any, top: bool = False) -> Any:
    """``node`` as the UI's model maps it (``definitions`` only on the schema itself)."""
    if not isinstance(node, dict):
        return node
    out = {k: node[k] for k in UI_KEYS if k in node and (top or k != "definitions")}
    for key in ("properties", "definitions"):
        if isinstance(out.get(key), dict):
            out[key] = {name: mapped(child) for name, child in out[key].items()}
    return out


def _nodes(node: Any) -> Iterable[Any]:
    """Every schema node under ``node`` (itself included)."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, list):
            stack.extend(current)
            continue
        if not isinstance(current, dict):
            continue
        yield current
        for key in ("properties", "definitions"):
            if isinstance(current.get(key), dict):
                stack.extend(current[key].values())
        stack.extend(current[key] for key in NESTED if key in current)


def pieces(schema: dict) -> set[str]:
    """The nodes a caller's schema may use from the deployment's ``schema``, as stored and as mapped."""
    return {_canonical(form(n)) for n in _nodes(schema) for form in (lambda x: x, mapped)}


def made_of(asked: Any, stored: Iterable[dict]) -> bool:
    """Whether the ``asked`` schema is made of the pieces of one of the ``stored`` schemas."""
    if not isinstance(asked, dict) or not isinstance(asked.get("properties", {}), dict):
        return False
    for schema in stored:
        whole, allowed = mapped(schema, top=True), pieces(schema)
        if not set(asked) - set(SHOWN) <= set(whole) | {"properties"}:
            continue
        same = all(
            _canonical(asked[k], True) in (_canonical(whole[k], True), _canonical(schema.get(k), True))
            for k in asked
            if k not in ("properties", "required") and k not in SHOWN
        ) and _fewer(asked.get("required", []), whole.get("required", []))
        if same and all(_canonical(p) in allowed for p in asked.get("properties", {}).values()):
            return True
    return False


def _fewer(asked: Any, stored: Any) -> bool:
    """A schema's ``required`` names, some of the stored ones: a form the gate showed without a field (``privrelease.gate.forms``
    leaves out the fields a dataset's unit ignores) requires no more than the stored schema."""
    return isinstance(asked, list) and all(isinstance(x, str) for x in asked) and set(asked) <= set(stored or [])
