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
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

UI_KEYS = ("definitions", "position", "block_type_slug", "$ref", "anyOf", "allOf", "example", "default", "const",
           "description", "enum", "format", "items", "prefixItems", "properties", "required", "title", "type",
           "maxItems", "minItems")  # fmt: skip
NESTED = ("items", "anyOf", "allOf", "prefixItems")


def _canonical(value: Any) -> str:
    """``value`` as comparable text: sorted keys, and 1.0 as 1 (the browser writes integral numbers without a
    fraction)."""

    def plain(v: Any) -> Any:
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    return json.dumps(plain(value), sort_keys=True)


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
        if not set(asked) <= set(whole) | {"properties"}:
            continue
        same = all(_canonical(asked[k]) in (_canonical(whole[k]), _canonical(schema.get(k))) for k in asked if k != "properties")
        if same and all(_canonical(p) in allowed for p in asked.get("properties", {}).values()):
            return True
    return False
