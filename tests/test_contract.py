"""Every registered mechanism honours the contract of ``core.mechanisms.base``; one that does not is refused.

The contract: a name, a ``StrictParams`` model, and ``plan`` stating a typed cost from the
parameters alone; a table mechanism also has ``needs``, ``run`` and ``check``, and its result never
restates the cost (the manifest and the ledger take it from the plan). ``EXAMPLES`` holds one small
run per mechanism: a new mechanism is not covered until it adds one here.
"""

from __future__ import annotations

import inspect

import numpy as np
import pandas as pd
import pytest

from core.errors import InternalError
from core.mechanisms import MECHANISMS, REGISTRY, registry
from core.mechanisms.base import COST_KEYS, DPCost, Mechanism, MPCCost, NoDP, Plan, Result, TableMechanism, declared
from core.params import StrictParams
from core.schema import Needs
from tests.test_dpne import phrase_corpus
from tests.test_outliers import planted
from tests.test_swapping import binormal

QI = ["a", "b", "c"]


def _census(n: int = 200) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    return pd.DataFrame({c: rng.choice([f"{c}{i}" for i in range(4)], n) for c in [*QI, "s"]})


EXAMPLES: dict[str, tuple] = {  # name -> (table or None, parameters as a request binds them)
    "ra": (_census, {"qi": QI, "sensitive": "s", "p": "entropy"}),
    "mews": (lambda: binormal(800), {"swap_set": ["x", "y"], "t_range": [0.1, 1.0], "width_units": "sd", "others": "eds", "k": 5}),
    "meds": (lambda: binormal(300), {"swap_set": ["x", "y"], "k": 20}),
    "eds": (lambda: binormal(300), {"swap_set": ["z"], "k": 10}),
    "dpne": (lambda: phrase_corpus(300), {"user_column": "user", "text_column": "text", "epsilon": 2.0, "delta": 1e-6,
                                          "T": 2, "delta0": 10, "tokenizer": "words"}),
    "outliers": (lambda: planted(120), {"query": "count", "columns": ["a", "b"], "k": 3, "r": 0.5, "epsilon": 1.0,
                                        "delta": 1e-4, "standardize": False, "rows": 120}),
    "sdc": (_census, {"steps": [{"method": "recode", "columns": ["a"]}, {"method": "ra", "qi": QI, "sensitive": "s"},
                                {"method": "suppress", "k": 3}],
                      "policy": {"keys": {"categorical": QI}, "sensitive": ["s"],
                                 "hierarchies": {"a": [{"a0": "a01", "a1": "a01"}]}}}),
    "spam-filter-training": (None, {"run_id": "r", "users": ["u1.jsonl", "u2.jsonl"], "test": "t.jsonl"}),
}  # fmt: skip


def violations(m: object, example: tuple) -> list[str]:
    """What ``m`` breaks of the contract, on its example run (empty: it honours it)."""
    if not isinstance(m, Mechanism):
        return ["not a Mechanism (NAME, Params, plan)"]
    found = []
    if not (isinstance(m.Params, type) and issubclass(m.Params, StrictParams)):
        found.append("Params is not a StrictParams model")
        return found
    make, raw = example
    params = m.Params.model_validate(raw)
    planned = m.plan(params)
    if not isinstance(planned, Plan) or not isinstance(planned.cost, DPCost | NoDP | MPCCost):
        return [*found, "plan() does not return a Plan with a typed cost (DPCost, NoDP or MPCCost)"]
    if isinstance(planned.cost, DPCost) and planned.cost.unit not in ("record", "user"):
        found.append("a DP cost names no privacy unit")
    if make is None:
        return found + (["a mechanism without a table run must not be a TableMechanism"] if isinstance(m, TableMechanism) else [])
    if not isinstance(m, TableMechanism):
        return [*found, "not a TableMechanism (needs, run, check)"]
    for method, arity in (("needs", 2), ("plan", 1), ("run", 3), ("check", 3)):
        if len(inspect.signature(getattr(m, method)).parameters) != arity:
            found.append(f"{method} does not take {arity} arguments")
    frame = make()
    if not isinstance(m.needs(params, tuple(frame.columns)), Needs):
        found.append("needs() does not return Needs")
    result = m.run(frame, params, np.random.default_rng(0))
    if not isinstance(result, Result):
        return [*found, "run() does not return a Result"]
    restated = sorted(set(result.privacy) & set(COST_KEYS))
    if restated:
        found.append(f"its result restates the plan's cost: {restated}")
    try:
        m.check(frame, result, params)
    except InternalError as exc:
        found.append(f"check() refuses its own run: {exc}")
    return found


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_every_registered_mechanism_honours_the_contract(name):
    assert name in EXAMPLES, f"add an example run of {name!r} to EXAMPLES"
    m = MECHANISMS[name]
    assert m.NAME == name
    assert violations(m, EXAMPLES[name]) == []


def test_the_registries_cover_what_requests_and_flows_run():
    assert set(REGISTRY) == {"ra", "dpne", "outliers", "mews", "meds", "eds", "sdc"}
    assert set(MECHANISMS) == set(REGISTRY) | {"spam-filter-training"}
    assert all(isinstance(m, TableMechanism) for m in REGISTRY.values())
    assert not isinstance(MECHANISMS["spam-filter-training"], TableMechanism)  # its run is its flow's protocol


class _Restating:
    """An RA that restates its cost in its result and has no output check: the contract must see both."""

    NAME = "restating"
    Params = REGISTRY["ra"].Params

    def plan(self, params):
        return REGISTRY["ra"].plan(params)

    def needs(self, params, columns):
        return REGISTRY["ra"].needs(params, columns)

    def run(self, frame, params, rng):
        result = REGISTRY["ra"].run(frame, params, rng)
        return Result(result.data, {**result.privacy, "epsilon": 0.0, "delta": 0.0}, result.report)


class _Untyped(_Restating):
    """A plan whose cost is a bare number, as before costs were typed."""

    def plan(self, params):
        return Plan(cost=0.0, guarantee="none")  # type: ignore[arg-type]

    def check(self, original, result, params):
        return None


def test_an_incomplete_mechanism_is_refused():
    restating = _Restating()
    assert not isinstance(restating, TableMechanism)
    with pytest.raises(TypeError, match="mechanism 'restating' is not a TableMechanism: it lacks check"):
        registry(restating, kind=TableMechanism)
    assert violations(restating, EXAMPLES["ra"]) == ["not a TableMechanism (needs, run, check)"]
    restating.check = lambda original, result, params: None  # now complete in shape, still restating its cost
    assert violations(restating, EXAMPLES["ra"]) == ["its result restates the plan's cost: ['delta', 'epsilon']"]
    assert violations(_Untyped(), EXAMPLES["ra"]) == ["plan() does not return a Plan with a typed cost (DPCost, NoDP or MPCCost)"]


def test_what_a_mechanism_declares_is_read_in_one_place_and_checked_when_registered():
    dpne, outliers, ra = (declared(REGISTRY[n]) for n in ("dpne", "outliers", "ra"))
    assert dpne.filled == ("user_column",) and dpne.READS_SNAPSHOT_ON_WORKERS
    assert outliers.filled == ("rows",) and declared(REGISTRY["sdc"]).filled == ("policy",)
    assert ra.filled == () and not ra.READS_SNAPSHOT_ON_WORKERS  # the defaults: nothing filled in, no views
    assert ra.accuracy(None, None, ()) is None and ra.warnings(None, None, ()) == ra.notes(None, None, ()) == []

    class Misnamed(_Untyped):
        UNIT_PARAM = "user"

    with pytest.raises(TypeError, match="mechanism 'restating' declares user filled in, but its Params has no such field"):
        registry(Misnamed(), kind=TableMechanism)
