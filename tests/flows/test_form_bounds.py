"""Every bound a mechanism's ``Params`` knows is in its form's schema, so the Prefect server refuses an
out-of-range value with 409 naming the field before a run starts (review finding 6).

The schema checked is the one ``prefect deploy`` stores as the deployment's
``parameter_openapi_schema`` (``prefect.utilities.callables.parameter_schema`` of the flow), and the
check is the server's own (``prefect.utilities.schema_tools.validate``, required fields ignored, as
for a run created from a deployment). No server is started: tests/system/test_server.py does that for one
value end to end.
"""

from __future__ import annotations

import pytest
from prefect.utilities.callables import parameter_schema
from prefect.utilities.schema_tools import ValidationError, validate
from pydantic import create_model

from privrelease.core.mechanisms import aggregate, dpne, outliers, ra, sdc_table, swapping
from privrelease.core.sdc import methods
from privrelease.flows import forms, tables
from privrelease.gate.access import RELEASE_FORMS

# The SDC chain's form names each step's bounded field after its step (``microaggregate_k`` is ``Microaggregate.k``).
SDC_STEPS = {"recode_level": (methods.Recode, "level"), "microaggregate_k": (methods.Microaggregate, "k"),
             "pram_keep": (methods.Pram, "keep"), "noise_level": (methods.Noise, "level"),
             "suppress_k": (methods.Suppress, "k")}  # fmt: skip
SdcChain = create_model(
    "SdcChain", **{name: (m.model_fields[f].annotation, m.model_fields[f]) for name, (m, f) in SDC_STEPS.items()}
)

FORMS = {
    "ra": (forms.ra_release, ra.Params),
    "mews": (forms.mews_release, swapping.MEWSParams),
    "meds": (forms.meds_release, swapping.DepthParams),
    "eds": (forms.eds_release, swapping.DepthParams),
    "dpne": (forms.dpne_release, dpne.Params),
    "outlier-count": (forms.outlier_count_release, outliers.Params),
    "outlier-top-subspaces": (forms.outlier_top_release, outliers.Params),
    "aggregate": (forms.aggregate_release, aggregate.Params),
    "sdc": (forms.sdc_release, SdcChain),
    "sdc-table": (tables.sdc_table_release, sdc_table.Params),
}
BOUNDS = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "minLength", "maxLength", "pattern",
          "minItems", "maxItems", "enum"}  # fmt: skip

STRICTER = {"minimum": "exclusiveMinimum", "maximum": "exclusiveMaximum"}  # a count's delta > 0: stricter is fine


def _schema(name: str) -> dict:
    return parameter_schema(FORMS[name][0]).model_dump_for_openapi()


def _bounds(node: dict, defs: dict, path: str = "") -> dict:
    """The JSON-schema bounds under ``node``, by path (alternatives other than null merged)."""
    if "$ref" in node:
        node = defs[node["$ref"].split("/")[-1]]
    out = {path + k: node[k] for k in BOUNDS & node.keys()}
    for part in node.get("allOf", []) + [a for a in node.get("anyOf", []) if a.get("type") != "null"]:
        out |= _bounds(part, defs, path)
    if "items" in node:
        out |= _bounds(node["items"], defs, path + "items.")
    for name, sub in node.get("properties", {}).items():
        out |= _bounds(sub, defs, f"{path}{name}.")
    return out


@pytest.mark.parametrize("name", FORMS)
def test_a_forms_field_has_every_bound_of_its_params_field(name):
    schema = _schema(name)
    params = FORMS[name][1].model_json_schema()
    missing = {}
    for field, node in schema["properties"].items():
        if field not in params["properties"] or (name, field) in {("outlier-top-subspaces", "columns")}:
            continue  # not a Params field; top-subspaces' empty columns means every column (None)
        have = _bounds(node, schema.get("definitions", {}) | schema.get("$defs", {}))
        want = _bounds(params["properties"][field], params.get("$defs", {}))
        if field == "standardize":  # split here: public scales as items, the estimate's share on its own
            want = {k.removeprefix("share."): v for k, v in want.items()}
            have = _bounds(schema["properties"]["estimate_share"], {})
        lost = {k: v for k, v in want.items() if have.get(k) != v and have.get(STRICTER.get(k, k)) != v}
        if lost:
            missing[field] = lost
    assert missing == {}


# Values each Params refuses, one per bound, including those only a validator checked before.
REFUSED = {
    "ra": [("k", -1), ("p_per_column", [1.5]), ("p_per_column", [-0.1]), ("qi", []), ("sensitive", "")],
    "mews": [("t_lb", 0), ("t_ub", -1), ("width", 0), ("widths", [{"column": "age", "width": 0}]),
             ("k", 1), ("candidates", 1), ("candidates", 10_001), ("swap_set", [])],
    "meds": [("k", 1), ("swap_set", [])],
    "dpne": [("epsilon", -1), ("epsilon", 0), ("epsilon", 51), ("delta", 0), ("delta", 1), ("T", 0), ("T", 51),
             ("delta0", 0), ("delta0", dpne.MAX_DELTA0 + 1), ("delta0_per_level", [dpne.MAX_DELTA0 + 1]),
             ("delta0_per_level", [0]), ("eta", 0), ("eta", 0.6), ("c", 0), ("c", 1), ("text_column", "")],
    "outlier-count": [("epsilon", -1), ("epsilon", 0), ("delta", 0), ("delta", 1), ("k", 0), ("r", 0),
                      ("standardize", [{"column": "a", "mean": 0, "std": 0}]), ("estimate_share", 0),
                      ("scale_share", 1), ("columns", [])],
    "outlier-top-subspaces": [("epsilon", -1), ("delta", -0.1), ("delta", 1), ("c", 0), ("h", 0), ("k", 0),
                              ("r", -1), ("count_share", 0), ("count_share", 1), ("scale_share", -0.1)],
    "aggregate": [("epsilon", 0), ("epsilon", 51), ("rho", 0), ("delta", 1), ("max_groups", 0), ("max_rows", 0),
                  ("group_by", []), ("quantiles", [{"column": "a", "low": 0, "high": 1, "q": [1.5]}]),
                  ("quantiles", [{"column": "a", "low": 0, "high": 1, "q": [0.5], "bins": 1}])],
    "sdc": [("recode_level", 0), ("recode_level", 11), ("microaggregate_k", 1), ("pram_keep", 0.95),
            ("pram_keep", 0), ("noise_level", 0.05), ("noise_level", 11), ("suppress_k", 1)],
    "sdc-table": [("group_by", []), ("group_by", ["a", "b", "c", "d", "e"]), ("measure", "mean"), ("method", "swap"),
                  ("secondary", "best"), ("column", "")],
}  # fmt: skip


@pytest.mark.parametrize(("name", "field", "value"), [(n, f, v) for n, cases in REFUSED.items() for f, v in cases])
def test_the_server_refuses_an_out_of_bound_value_naming_the_field(name, field, value):
    with pytest.raises(ValidationError, match=f"field '{field}'|'{field}'|{field}"):
        validate({field: value}, _schema(name), raise_on_error=True, ignore_required=True)


@pytest.mark.parametrize("name", FORMS)
def test_the_defaults_pass_the_schema(name):
    validate({}, _schema(name), raise_on_error=True, ignore_required=True)


def test_every_release_form_is_checked():
    """The forms checked here are the release forms of prefect.yaml, as the gate reads them."""
    assert sorted(FORMS) == sorted(RELEASE_FORMS)
