"""Each mechanism's parameters as people read them: name, type, default, bounds and description.

Read from the mechanism's ``Params`` model (its JSON schema), so ``privrelease mechanisms`` and the
parameter tables of the documentation (``scripts/gendocs.py``) say what the code checks, and nothing
else. ``PAGES`` names each mechanism's page of the documentation site.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import ModuleType

from privrelease.core.mechanisms import MECHANISMS
from privrelease.core.mechanisms.base import declared

DOCS = "docs/mechanisms"
PAGES = {"mews": "swapping", "meds": "swapping", "eds": "swapping", "spam-filter-training": "spam-training"}
BOUNDS = (
    ("minimum", ">="),
    ("exclusiveMinimum", ">"),
    ("maximum", "<="),
    ("exclusiveMaximum", "<"),
    ("minItems", "items >="),
    ("maxItems", "items <="),
    ("minLength", "length >="),
    ("pattern", "matches"),
)


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    default: str  # "required", "filled in", or the default's YAML-ish text
    bounds: str
    description: str


@dataclass(frozen=True)
class Model:
    title: str  # "" for the mechanism's own parameters, else the nested model's name
    description: str
    fields: tuple[Field, ...]


def page(name: str) -> str:
    """The documentation page (a path from the checkout) that describes mechanism ``name``."""
    return f"{DOCS}/{PAGES.get(name, name)}.md"


def lead(name: str) -> str:
    """The first paragraph of the docstring of the module that defines mechanism ``name``."""
    m = MECHANISMS[name]
    doc = m.__doc__ if isinstance(m, ModuleType) else sys.modules[type(m).__module__].__doc__
    return " ".join((doc or name).strip().split("\n\n")[0].split())


def _type(s: dict) -> str:
    if "$ref" in s:
        return s["$ref"].rsplit("/", 1)[1]
    if "const" in s:
        return str(s["const"]).lower() if isinstance(s["const"], bool) else repr(s["const"])
    if "enum" in s:
        return " \\| ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in s["enum"])
    if "anyOf" in s or "oneOf" in s:
        kinds = [_type(x) for x in s.get("anyOf", s.get("oneOf"))]
        return " \\| ".join(k for k in kinds if k != "null") + (" \\| null" if "null" in kinds else "")
    kind = s.get("type", "any")
    if kind == "array":
        if "prefixItems" in s:
            return "[" + ", ".join(_type(x) for x in s["prefixItems"]) + "]"
        return f"list of {_type(s.get('items', {}))}"
    if kind == "object" and "additionalProperties" in s and isinstance(s["additionalProperties"], dict):
        return f"{{column: {_type(s['additionalProperties'])}}}"
    return {"number": "number", "integer": "integer", "string": "text", "boolean": "true \\| false"}.get(kind, kind)


def _bounds(s: dict) -> str:
    found = [f"{word} {_value(key, s[key])}" for key, word in BOUNDS if key in s]
    for alt in s.get("anyOf", []):
        found += [f"{word} {_value(key, alt[key])}" for key, word in BOUNDS if key in alt]
    return ", ".join(found)


def _value(key: str, value: object) -> str:
    return f"`{value}`" if key == "pattern" else str(value)


def _default(s: dict, required: bool, filled: bool) -> str:
    if filled:
        return "filled in"
    if required:
        return "required"
    value = s.get("default")
    return "none" if value is None else (str(value).lower() if isinstance(value, bool) else str(value))


def _model(title: str, schema: dict, filled: set[str]) -> Model:
    required = set(schema.get("required", ()))
    fields = tuple(
        Field(
            name,
            _type(s),
            _default(s, name in required, name in filled),
            _bounds(s),
            " ".join(s.get("description", "").split())
            + (" (from the dataset's registration; a request cannot set it)" if name in filled else ""),
        )
        for name, s in schema.get("properties", {}).items()
    )
    return Model(title, " ".join(schema.get("description", "").split()), fields)


def models(name: str) -> list[Model]:
    """Mechanism ``name``'s parameters, then each model they nest (an SDC chain's steps, a spam run's features)."""
    m = MECHANISMS[name]
    d = declared(m)
    filled = {p for p in (d.UNIT_PARAM, d.ROWS_PARAM, d.POLICY_PARAM) if p}
    schema = m.Params.model_json_schema()
    nested = [_model(t, s, set()) for t, s in sorted(schema.get("$defs", {}).items()) if s.get("properties")]
    return [_model("", schema, filled), *nested]


def text(name: str) -> str:
    """Mechanism ``name`` and its parameters as plain text for the terminal."""
    lines = [f"{name}: {lead(name)}", f"  page: {page(name)}"]
    for model in models(name):
        if model.title:
            lines.append(f"  {model.title}:")
        indent = "    " if model.title else "  "
        for f in model.fields:
            extra = "".join(f"; {x}" for x in (f.default if f.default != "none" else "", f.bounds.replace("`", "")) if x)
            kind = f.type.replace(" \\| ", " | ")
            lines.append(f"{indent}{f.name} ({kind}{extra})")
            if f.description:
                lines.append(f"{indent}    {f.description}")
    return "\n".join(lines)


def markdown(name: str) -> str:
    """Mechanism ``name``'s parameters as markdown tables, one per model."""
    out = []
    for model in models(name):
        if model.title:
            out.append(f"\n**{model.title}**" + (f": {model.description}" if model.description else "") + "\n")
        out.append("| parameter | type | default | bounds | what it is |\n|---|---|---|---|---|")
        for f in model.fields:
            said = f.description.replace("|", "\\|")
            out.append(f"| `{f.name}` | {f.type} | {f.default} | {f.bounds} | {said} |")
    return "\n".join(out).strip("\n") + "\n"
