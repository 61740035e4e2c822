"""Every registered mechanism honours the contract of ``privrelease.core.mechanisms.base``; one that does not is refused.

The contract: a name, a ``StrictParams`` model, and ``plan`` stating a typed cost from the
parameters alone; a table mechanism also has ``needs``, ``run`` and ``check``, and its result never
restates the cost (the manifest and the ledger take it from the plan). ``EXAMPLES`` holds one small
run per mechanism: a new mechanism is not covered until it adds one here.

A DP plan's recorded events must also be consistent with its charge (docs/ACCOUNTING.md, "Each
charge's parts within its charge"): the parts the filter counts linearly (``approx`` parts, pure
parts) have epsilon and delta within the charge's, and all its events together, converted to
(epsilon, delta) at the charge's delta, are within the charge's epsilon. ``DP_REQUESTS`` adds
more requests of the DP mechanisms (each noise, query and extreme) to their examples.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from privrelease.core.errors import InternalError
from privrelease.core.mechanisms import MECHANISMS, REGISTRY, SDC, registry
from privrelease.core.mechanisms.base import COST_KEYS, Mechanism, Plan, Result, SdcMechanism, TableMechanism, declared
from privrelease.core.params import StrictParams
from privrelease.core.privacy import accountant as acc
from privrelease.core.privacy import events as ev
from privrelease.core.privacy.budget import gaussian_epsilon
from privrelease.core.privacy.cost import DPCost, MPCCost, NoDP
from privrelease.core.tables.schema import Needs
from tests.mechanisms.test_dpne import phrase_corpus
from tests.mechanisms.test_outliers import planted
from tests.mechanisms.test_swapping import binormal

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
    "aggregate": (lambda: _census().assign(x=np.random.default_rng(2).normal(0.5, 0.3, 200)), {"group_by": ["a", "b"], "measures": [{"op": "count"}, {"op": "count_distinct", "column": "c"}],
                            "epsilon": 1.0, "delta": 1e-6}),
    "sdc": (_census, {"steps": [{"method": "recode", "columns": ["a"]}, {"method": "ra", "qi": QI, "sensitive": "s"},
                                {"method": "suppress", "k": 3}],
                      "policy": {"keys": {"categorical": QI}, "sensitive": ["s"],
                                 "hierarchies": {"a": [{"a0": "a01", "a1": "a01"}]}}}),
    "sdc_table": (_census, {"group_by": ["a", "b"], "subtotals": ["a"],
                            "policy": {"keys": {"categorical": QI}, "sensitive": ["s"], "tables": {"min_frequency": 12},
                                       "hierarchies": {"a": [{"a0": "a01", "a1": "a01", "a2": "a23", "a3": "a23"}]}}}),
    "spam-filter-training": (None, {"run_id": "r", "users": ["u1.jsonl", "u2.jsonl"], "test": "t.jsonl"}),
}  # fmt: skip


_COUNT = EXAMPLES["outliers"][1]
_TOP = {**_COUNT, "query": "top_subspaces", "columns": None, "c": 1, "h": 2, "epsilon": 2.0, "rows": 300}
_BOUNDS = {"bounds": {"a": [-3, 3], "b": [-3, 3]}}
_SPAM = EXAMPLES["spam-filter-training"][1]
_AGG = {
    **EXAMPLES["aggregate"][1],
    "measures": [
        {"op": "count"},
        {"op": "sum", "column": "x", "bounds": [-5, 10]},
        {"op": "mean", "column": "x", "bounds": [0, 1], "share": 2},
        {"op": "quantile", "column": "x", "bounds": [0, 1], "q": [0.25, 0.5], "bins": 16},
    ],
}
DP_REQUESTS: dict[str, list[dict]] = {  # name -> more requests (as a request binds them) beside its example
    "dpne": [{**EXAMPLES["dpne"][1], "epsilon": 0.3, "delta": 1e-8, "T": 3}],
    "outliers": [
        {**_COUNT, "noise": "global"}, {**_COUNT, "noise": "smooth"},
        {**_COUNT, "noise": "global", "epsilon": 100.0, "delta": 0.5},
        {**_COUNT, "noise": "global", "epsilon": 1e-3, "delta": 1e-12, "rows": 10**6},
        {**_COUNT, "rows": None}, {**_COUNT, "columns": None},  # the noise is left open: N or the dimension unstated
        {**_COUNT, "standardize": _BOUNDS, "noise": "global", "scale_share": 0.0},
        _TOP, {**_TOP, "c": 8, "rows": 10**6}, {**_TOP, "release_counts": False, "delta": 0.0},  # auto: global, smooth
        {**_TOP, "standardize": {**_BOUNDS, "share": 0.2}, "h": 1},
    ],
    "aggregate": [{**_AGG, "noise": "laplace"}, {**_AGG, "rho": 0.3, "epsilon": None},
                  {**_AGG, "rho": 0.3, "epsilon": None, "noise": "laplace"},
                  {**_AGG, "user_column": "s", "max_groups": 3, "max_rows": 2, "epsilon": 0.1, "delta": 1e-9},
                  {**_AGG, "domains": {"a": ["a0", "a1", "a2", "a3"], "b": ["b0", "b1", "b2", "b3"]}, "noise": "laplace",
                   "delta": 0.0}],
    "spam-filter-training": [{**_SPAM, "dp": {"epsilon": 1.0, "delta": 1e-6}},
                             {**_SPAM, "rounds": 40, "dp": {"epsilon": 8.0, "delta": 1e-5, "colluders": 0}}],
}  # fmt: skip


def linear_epsilon(leaf: ev.Leaf, count: int) -> Fraction:
    """What a part counted by its epsilon adds over its compositions: its figures as the decimals they
    are recorded as (``accountant.exact``, as the filter sums charges), so 0.9 + 1/10 is 1."""
    if isinstance(leaf, ev.Laplace):
        return count * acc.exact(leaf.sensitivity) / acc.exact(leaf.scale)
    return count * acc.exact(leaf.epsilon)


def composed_epsilon(parts: tuple[acc.Part, ...], delta: float) -> float:
    """All the parts together as one (epsilon, delta) at ``delta``, soundly: the Gaussians as the one
    Gaussian they compose to (GDP, exact), at ``delta`` less the (epsilon, delta) parts' deltas, composed
    basically with the other parts at their epsilon (inf: no delta is left for the Gaussians)."""
    linear = float(sum((linear_epsilon(*p) for p in parts if not isinstance(p[0], ev.Gaussian)), Fraction(0)))
    mu2 = sum(n * (leaf.sensitivity / leaf.sigma) ** 2 for leaf, n in parts if isinstance(leaf, ev.Gaussian))
    if not mu2:
        return linear
    left = delta - float(sum((n * acc.exact(leaf.delta) for leaf, n in parts if isinstance(leaf, ev.EpsilonDelta)), Fraction(0)))
    return gaussian_epsilon(1 / math.sqrt(mu2), left) + linear if left > 0 else math.inf


def charge_violations(planned: Plan) -> list[str]:
    """Where a DP plan's events are not consistent with its charge (empty: they are): the parts counted
    linearly within the charge, alone and together, and all events converted at the charge's delta."""
    if not isinstance(planned.cost, DPCost):
        return []
    parts = acc.parts(planned.cost.event)
    charge = planned.cost.budget
    eps, delta = acc.exact(charge.epsilon), acc.exact(charge.delta)
    approx = [(leaf, n) for leaf, n in parts if isinstance(leaf, ev.EpsilonDelta)]
    found = []
    if sum((linear_epsilon(*p) for p in approx), Fraction(0)) > eps:
        found.append("its approx parts' epsilon exceeds the charge's")
    if sum((n * acc.exact(leaf.delta) for leaf, n in approx), Fraction(0)) > delta:
        found.append("its approx parts' delta exceeds the charge's")
    found += [
        f"its {leaf.type} part's epsilon exceeds the charge's"
        for leaf, n in parts
        if leaf.pure_epsilon() is not None and linear_epsilon(leaf, n) > eps
    ]
    if sum((linear_epsilon(*p) for p in parts if not isinstance(p[0], ev.Gaussian)), Fraction(0)) > eps:
        found.append("its linearly counted parts' epsilon exceeds the charge's")
    whole = composed_epsilon(parts, charge.delta)
    if whole > charge.epsilon:
        found.append(f"its events compose to epsilon {whole:.6g} at delta {charge.delta:g}, above the charge's")
    return found


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
    for method, arity in (("needs", 2), ("plan", 1), ("run", 4), ("check", 3)):
        if len(inspect.signature(getattr(m, method)).parameters) != arity:
            found.append(f"{method} does not take {arity} arguments")
    frame = make()
    if not isinstance(m.needs(params, tuple(frame.columns)), Needs):
        found.append("needs() does not return Needs")
    result = m.run(frame, params, planned, np.random.default_rng(0))
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


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_every_dp_plan_records_events_within_its_charge(name):
    m = MECHANISMS[name]
    for raw in [EXAMPLES[name][1], *DP_REQUESTS.get(name, [])]:
        assert charge_violations(m.plan(m.Params.model_validate(raw))) == [], raw
    # the extra requests are DP plans with events, so the check above did not pass them vacuously
    assert all(isinstance(m.plan(m.Params.model_validate(r)).cost, DPCost) for r in DP_REQUESTS.get(name, []))


def test_events_beyond_their_charge_are_flagged():
    """The check above can fail: a plan doctored to record an approx part larger than its charge,
    approx parts within it alone but not together, a pure part beyond it or a Gaussian with half its
    std is named; a DP cost without events cannot be built."""
    outliers = MECHANISMS["outliers"]
    planned = outliers.plan(outliers.Params.model_validate({**_COUNT, "noise": "global"}))
    charge = planned.cost.budget
    (gauss, count), (slack, _) = acc.parts(planned.cost.event)
    assert charge_violations(planned) == [] and isinstance(gauss, ev.Gaussian)

    def doctored(*parts: ev.Event) -> Plan:
        event = ev.charge(list(parts), charge.epsilon, charge.delta)
        return replace(planned, cost=replace(planned.cost, event=event))

    assert charge_violations(doctored(ev.times(gauss, count), ev.EpsilonDelta(charge.epsilon * 1.01, slack.delta)))[:2] == [
        "its approx parts' epsilon exceeds the charge's",
        "its linearly counted parts' epsilon exceeds the charge's",
    ]
    assert charge_violations(doctored(ev.EpsilonDelta(0.5, charge.delta * 2))) == ["its approx parts' delta exceeds the charge's"]
    assert (
        charge_violations(doctored(ev.EpsilonDelta(0.9, charge.delta), ev.EpsilonDelta(0.2, 0.0)))[0]
        == "its approx parts' epsilon exceeds the charge's"
    )
    pure = ev.times(ev.DiscreteLaplace(10, 6), 2)  # 2 x 0.6 > 1
    assert charge_violations(doctored(pure))[:2] == [
        "its discrete_laplace part's epsilon exceeds the charge's",
        "its linearly counted parts' epsilon exceeds the charge's",
    ]
    (found,) = charge_violations(doctored(ev.times(ev.Gaussian(gauss.sigma / 2, gauss.sensitivity), count), slack))
    assert found.startswith("its events compose to epsilon ") and found.endswith(f"at delta {charge.delta:g}, above the charge's")
    with pytest.raises(TypeError, match="a DP cost needs a privacy event"):  # a DP plan cannot record none
        replace(planned.cost, event=None)


def test_the_registries_cover_what_requests_and_flows_run():
    assert set(REGISTRY) == {"ra", "dpne", "outliers", "aggregate", "mews", "meds", "eds", "sdc", "sdc_table"}
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

    def run(self, frame, params, plan, rng):
        result = REGISTRY["ra"].run(frame, params, plan, rng)
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


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_an_sdc_plan_comes_from_an_sdc_mechanism_which_says_what_it_protects(name):
    """The contract's SDC part is written (#55): a mechanism whose plan is not DP (``NoDP``) is registered as an
    ``SdcMechanism`` and the registry checked ``protects`` when it loaded it; no other mechanism is."""
    m = MECHANISMS[name]
    sdc = isinstance(m.plan(m.Params.model_validate(EXAMPLES[name][1])).cost, NoDP)
    assert (name in SDC) == sdc and MECHANISMS.kind(name) is (SdcMechanism if sdc else Mechanism)
    if sdc:
        assert isinstance(m, SdcMechanism) and isinstance(m.protects(m.Params.model_validate(EXAMPLES[name][1])), list)


def test_an_sdc_mechanism_without_protects_is_refused_when_it_loads():
    """The weakened variant: RA without ``protects`` is still a TableMechanism, and the SDC registry refuses it."""
    ra = REGISTRY["ra"]

    class Unprotected:
        NAME, Params, plan, needs, run, check = ra.NAME, ra.Params, ra.plan, ra.needs, ra.run, ra.check

    assert isinstance(Unprotected(), TableMechanism) and not isinstance(Unprotected(), SdcMechanism)
    registry(Unprotected(), kind=TableMechanism)  # as a plain table mechanism it would pass
    with pytest.raises(TypeError, match="mechanism 'ra' is not a SdcMechanism: it lacks protects"):
        registry(Unprotected(), kind=SdcMechanism)
