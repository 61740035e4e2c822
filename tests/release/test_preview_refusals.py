"""A request whose refusal depends only on its parameters (and the public schema, policy and ledger) is refused
by the mechanism's check, before any charge, for every mechanism (#42): the preview refuses it and the release
writes no ledger entry. A preview once said ``admitted`` for an EDS request with two swap_set columns that the
release then refused after charging (``EDS swaps one attribute at a time``, a ledger entry written).

Each generated request is a valid base request (shown admitted below) with one defect."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privrelease.core import mechanisms
from privrelease.core.datasets.demo import census, logins, posts
from privrelease.core.errors import UserError
from privrelease.core.ledger.ledger import Ledger
from privrelease.core.privacy.budget import Budget
from privrelease.core.release import pipeline, preview
from privrelease.core.release.home import Home
from privrelease.core.release.spec import parse
from tests.cli.test_cli import run
from tests.support.helpers import open_policy, register

NUMERIC = ["age", "hours-per-week"]  # the census table's numeric columns; the rest are categorical
WORDS = ["workclass", "education", "race", "sex", "salary"]
SCALES = {c: {"mean": m, "std": s} for c, m, s in (("duration_min", 30, 8), ("mb_sent", 50, 15), ("hour", 13, 3),
                                                   ("failed_logins", 1, 0.5))}  # fmt: skip
BASES = {  # mechanism -> (dataset, a valid request's parameters)
    "ra": ("table", {"qi": ["age", "workclass", "education"], "sensitive": "occupation"}),
    "mews": ("table", {"swap_set": ["age"], "widths": 0.5}),
    "meds": ("table", {"swap_set": ["age", "hours-per-week"], "k": 5}),
    "eds": ("table", {"swap_set": ["age"], "k": 5}),
    "sdc": ("table", {"steps": [{"method": "ra", "qi": ["age", "workclass"], "sensitive": "occupation"}, {"method": "suppress"}]}),
    "sdc_table": ("counts", {"group_by": ["workclass", "sex"], "subtotals": ["workclass"]}),
    "dpne": ("posts", {"text_column": "text", "epsilon": 1.0, "delta": 1e-7, "T": 2, "delta0": 10}),
    "outliers": ("logins", {"query": "top_subspaces", "c": 1, "h": 2, "k": 3, "r": 0.05, "epsilon": 2.0, "delta": 1e-5,
                            "standardize": SCALES}),
    "aggregate": ("logins", {"group_by": ["hour"], "measures": [{"op": "count"},
                             {"op": "mean", "column": "mb_sent", "bounds": [0, 500]}], "epsilon": 1.0, "delta": 1e-6}),
}  # fmt: skip

unknown = st.from_regex(r"[a-z]{3,9}", fullmatch=True).filter(lambda c: c not in NUMERIC + WORDS + ["occupation"])
not_positive = st.one_of(st.floats(max_value=0.0), st.just(math.inf))
two_numeric = st.permutations(NUMERIC)
low_k = st.integers(min_value=-5, max_value=1)


def _swap_defects(base: dict) -> st.SearchStrategy[dict]:
    """What every swap refuses: a swap_set naming a column twice, a non-numeric or unknown column, a depth below 2."""
    return st.one_of(
        st.sampled_from(NUMERIC).map(lambda c: base | {"swap_set": [c, c]}),
        st.sampled_from(WORDS).map(lambda c: base | {"swap_set": [c]}),
        unknown.map(lambda c: base | {"swap_set": [c]}),
        low_k.map(lambda k: base | {"k": k}),
    )


DEFECTS = {  # mechanism -> a strategy of its base parameters with one defect
    "ra": lambda b: st.one_of(
        st.sampled_from(b["qi"]).map(lambda c: b | {"qi": b["qi"] + [c]}),
        st.sampled_from(b["qi"]).map(lambda c: b | {"sensitive": c}),
        st.lists(st.floats(0, 1), min_size=3, max_size=3).filter(lambda p: abs(sum(p) - 1) > 1e-6).map(lambda p: b | {"p": p}),
        st.one_of(low_k.filter(lambda k: k < 1), st.integers(4, 50)).map(lambda k: b | {"k": k}),
        unknown.map(lambda c: b | {"qi": b["qi"] + [c]}),
    ),
    "mews": lambda b: st.one_of(
        _swap_defects(b | {"k": 5}),
        not_positive.map(lambda w: b | {"widths": w}),
        st.tuples(st.floats(0.01, 5), st.floats(0, 1)).map(lambda t: b | {"widths": None, "t_range": [t[0], t[0] * t[1]]}),
        st.just(b | {"t_range": [0.1, 1.0]}),
        st.just(b | {"others": "eds"}),
        st.just(b | {"singletons": "error"}),
    ),
    "meds": lambda b: st.one_of(_swap_defects(b), st.just({k: v for k, v in b.items() if k != "k"})),
    "eds": lambda b: st.one_of(_swap_defects(b), two_numeric.map(lambda s: b | {"swap_set": s})),
    "sdc": lambda b: st.one_of(
        two_numeric.map(lambda s: {"steps": [{"method": "eds", "swap_set": s, "k": 5}, b["steps"][1]]}),
        st.just({"steps": b["steps"] + [{"method": "eds", "swap_set": ["age"], "k": 5}]}),
        st.just({"steps": list(reversed(b["steps"]))}),
        st.sampled_from(NUMERIC + WORDS).map(lambda c: {"steps": [{"method": "recode", "columns": [c]}, *b["steps"]]}),
        st.sampled_from(WORDS).map(lambda c: {"steps": [{"method": "mews", "swap_set": ["age", c], "widths": 1}]}),
    ),
    "sdc_table": lambda b: st.one_of(
        unknown.map(lambda c: b | {"group_by": [*b["group_by"], c]}),
        st.sampled_from(NUMERIC).map(lambda c: b | {"measure": "sum", "column": c}),  # the policy has no magnitude rule
        st.just(b | {"subtotals": ["sex"]}),  # no hierarchy for sex
        st.just(b | {"group_by": ["sex", "sex"], "subtotals": []}),
    ),
    "dpne": lambda b: st.one_of(
        not_positive.map(lambda e: b | {"epsilon": e}),
        st.floats(50, 1e6).map(lambda e: b | {"epsilon": e}),  # more than the cap's 10
        st.lists(st.integers(1, 20), min_size=1, max_size=4).filter(lambda d: len(d) != 2).map(lambda d: b | {"delta0": d}),
        st.integers(-3, 0).map(lambda t: b | {"T": t}),
        unknown.map(lambda c: b | {"text_column": c}),
    ),
    "outliers": lambda b: st.one_of(
        st.integers(5, 30).map(lambda c: b | {"c": c}),
        st.integers(5, 100).map(lambda h: b | {"h": h}),
        unknown.map(lambda c: b | {"columns": ["hour", c]}),
        st.sampled_from(list(SCALES)).map(lambda c: b | {"standardize": {k: v for k, v in SCALES.items() if k != c}}),
        st.just(b | {"query": "count", "delta": 0.0}),
        st.floats(100, 1e6).map(lambda e: b | {"epsilon": e}),  # more than the cap's 40
    ),
    "aggregate": lambda b: st.one_of(
        unknown.map(lambda c: b | {"group_by": [c]}),
        unknown.map(lambda c: b | {"measures": [{"op": "sum", "column": c, "bounds": [0, 1]}]}),
        st.just(b | {"measures": [{"op": "mean", "column": "mb_sent", "bounds": [500, 0]}]}),
        st.just(b | {"measures": [{"op": "quantile", "column": "mb_sent", "bounds": [0, 500]}]}),  # no q
        not_positive.map(lambda e: b | {"epsilon": e}),
        st.floats(100, 1e6).map(lambda e: b | {"epsilon": e}),  # more than the cap's 40
    ),
}


@pytest.fixture(scope="module")
def opened(tmp_path_factory) -> Home:
    home = tmp_path_factory.mktemp("refusals") / "home"
    register(home, census(300), "table", keys=["age"])  # an open policy: its one key, age, is what a swap protects
    register(home, posts(300), "posts", unit="user:user", purpose="dp")
    register(home, logins(200), "logins", unit="record", purpose="dp")
    columns = list(census(5).columns)  # a policy with table rules and a hierarchy of workclass, for sdc_table
    tables = {
        "tables": {"min_frequency": 3},
        "hierarchies": {"workclass": [{"Self-emp-inc": "self", "Self-emp-not-inc": "self"}]},
    }
    register(home, census(250), "counts", policy=open_policy(columns, ["age", "workclass"], ("age",), **tables))
    ledger = Ledger(home / "privrelease.duckdb")
    ledger.set_budget("posts", Budget(10.0, 1e-5))
    ledger.set_budget("logins", Budget(40.0, 1e-3))
    return Home(home)


def test_every_mechanism_is_covered_and_each_base_request_is_admitted(opened: Home):
    assert set(BASES) == set(mechanisms.REGISTRY) == set(DEFECTS)
    for name, (dataset, params) in BASES.items():
        seen = preview.preview(opened, parse({"dataset": dataset, "mechanism": {"name": name, "params": params}}))
        assert seen["verdict"] == preview.ADMITTED, (name, seen["reason"])


@pytest.mark.parametrize("name", sorted(BASES))
def test_a_refusal_from_parameters_comes_before_the_charge(name: str, opened: Home):
    dataset, base = BASES[name]

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(DEFECTS[name](base))
    def refused(params: dict) -> None:
        doc = {"dataset": dataset, "mechanism": {"name": name, "params": params}}
        before = len(opened.ledger.entries())
        try:
            request = parse(doc)
        except UserError:  # the request's own form: refused as it is read, by the preview and the release alike
            return
        try:
            assert preview.preview(opened, request)["verdict"] == preview.REFUSED, params
        except UserError:
            pass
        with pytest.raises(UserError):
            pipeline.release(opened, request)
        assert len(opened.ledger.entries()) == before, f"{params} was refused after a ledger entry"

    refused()


def test_eds_with_two_columns_as_typed(tmp_path: Path):
    """The reported case, as a user types it: the preview refuses it (exit 2), and so does the release, writing nothing."""
    home = tmp_path / "home"
    register(home, census(300), "table", keys=["age"])
    request = tmp_path / "eds.yaml"
    request.write_text(
        yaml.safe_dump({"dataset": "table", "mechanism": {"name": "eds", "params": {"swap_set": NUMERIC, "k": 5}}})
    )
    for args in (["--preview"], []):
        r = run(home, "release", str(request), *args)
        assert r.returncode == 2 and r.stderr.startswith("error: the release request is invalid") and r.stdout == "", r
        assert "EDS swaps one attribute at a time: give a single swap_set column, or use MEDS" in r.stderr
    assert [e["status"] for e in yaml.safe_load(run(home, "ledger", "history", "--json").stdout)] == ["registered", "policy"]


@pytest.mark.parametrize("name", ["mews", "meds", "eds"])
def test_a_swap_of_a_one_record_table_is_refused_before_the_charge(name: str, tmp_path: Path):
    """Its public number of records says it: the swap's own check refuses it, not its run after the charge."""
    home = tmp_path / "home"
    register(home, census(1), "one", keys=["age"])
    opened, (_, params) = Home(home), BASES[name]
    request = parse({"dataset": "one", "mechanism": {"name": name, "params": params}})
    for call in (preview.preview, pipeline.release):
        with pytest.raises(UserError, match=f"{name}: swapping needs at least 2 records; dataset 'one' has 1."):
            call(opened, request)
    assert [e.status for e in opened.ledger.entries()] == ["registered", "policy"]
