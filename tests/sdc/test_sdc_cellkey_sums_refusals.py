"""Sums by the cell key method (#56): what is refused, and when. A policy whose factors cannot protect (no p%-rule,
a chance above max_guess, no contributor id, one that may be empty); a request the policy does not allow; a table
that would give a second view of cells published before (a column's sums by the other method, a cell key table
under another perturbation or cluster, sums beside the dataset's microdata), before the charge, under the publish
lock when one was published meanwhile, and when a sealed draw is resumed; the preview says the same.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from privrelease.core.errors import UserError
from privrelease.core.mechanisms import sdc_table
from privrelease.core.mechanisms.base import Earlier
from privrelease.core.sdc.cells.rules import TableRules
from tests.sdc.test_sdc_cellkey_sums import SUMS, _keyed, _sums
from tests.sdc.test_sdc_table import HIER, _frame, _params, _policy, _register, _release


@pytest.mark.parametrize(
    ("tables", "said"),
    [
        ({"cell_key_sums": {"low": 0.1, "high": 1.0}}, "this policy has no p_percent; set tables.p_percent"),
        (
            {"p_percent": {"p": 10}, "cell_key_sums": {"low": 0.1, "high": 0.3}},
            "with chance 0.548, above max_guess 0.25; raise high",
        ),
        ({"p_percent": {"p": 10}, "cell_key_sums": {"low": 0.5, "high": 0.5}}, "high 0.5 must be above low 0.5"),
        ({"p_percent": {"p": 10}, "cell_key_sums": {"low": 0.1, "high": 10}}, "less than or equal to 9"),
    ],
)
def test_a_policy_whose_factors_cannot_protect_is_refused_saying_what_to_change(tables, said):
    with pytest.raises(ValidationError, match=said):
        TableRules.model_validate(tables)


def test_a_sum_by_the_cell_key_method_without_the_policys_factors_is_refused_before_the_charge(home, test_mode):
    from privrelease.core.release import pipeline
    from privrelease.core.release.home import Home
    from privrelease.core.release.spec import parse

    _register(home, _frame(seed=3), {"p_percent": {"p": 10}})
    request = {"group_by": ["a"], "method": "cell_key", "measure": "sum", "column": "x"}
    doc = {"dataset": "ds", "mechanism": {"name": "sdc_table", "params": request}, "seed": 5}
    with pytest.raises(UserError, match=r"tables.cell_key_sums: low, high, max_guess\), which this policy lacks"):
        pipeline.release(Home(home), parse(doc))
    assert not (home / "releases").exists() or not any((home / "releases").rglob("manifest.json"))


SUM, COUNT = {"measure": "sum", "column": "x"}, {"measure": "count"}


@pytest.mark.parametrize(
    ("first", "policy", "then", "said"),
    [
        (SUM | {"method": "suppression"}, {}, SUM | {"method": "cell_key"}, "by method suppression, and a column's sums are published by one"),
        (SUM | {"method": "cell_key"}, {}, SUM | {"method": "suppression"}, "published by one method .*: ask for method: cell_key"),
        (
            SUM | {"method": "cell_key"},
            {"cell_key_sums": {"low": 0.1, "high": 2.0}},
            SUM | {"method": "cell_key"},
            "restores the policy.s tables.cell_key_sums and cluster",
        ),
        (
            COUNT | {"method": "cell_key"},
            {"cell_key": {"D": 2, "V": 1.0, "js": 2}},
            COUNT | {"method": "cell_key"},
            "restores the policy.s tables.cell_key to",
        ),
    ],
)  # fmt: skip
def test_a_table_that_would_give_a_second_view_of_published_cells_is_refused_before_the_charge(
    home, test_mode, first, policy, then, said
):
    """Sums of a column by the other method after the first (an exact sum beside its perturbed one gives the factor
    away), or a cell key table under other factors or another perturbation table (the policy changed in between: the
    same keys through two perturbations give two views of each cell): refused before anything is charged, the ledger
    unchanged, naming the table published before; a table of the other measure is not held back, nor one after an
    edit of max_guess alone (it moves no factor)."""
    from privrelease.core.datasets.registry import Registry
    from privrelease.core.release import pipeline
    from privrelease.core.release.home import Home
    from privrelease.core.release.spec import parse
    from privrelease.core.sdc.policy import Policy

    tables = {"min_frequency": 3, "p_percent": {"p": 10}, "cell_key": {"D": 3, "V": 1.5, "js": 2}} | {
        "cell_key_sums": {"low": 0.1, "high": 1.0}
    }
    _register(home, _frame(seed=3), tables)

    def release(release_id: str, request: dict) -> dict:
        doc = {"release_id": release_id, "dataset": "ds", "seed": 5,
               "mechanism": {"name": "sdc_table", "params": {"group_by": ["a", "b"]} | request}}  # fmt: skip
        return pipeline.release(Home(home), parse(doc))

    def set_policy(changed: dict) -> None:
        Registry(home).set_policy("ds", Policy.model_validate(_policy(**(tables | changed)) | {"thresholds": {"k": None}}))

    release("t1", first)
    set_policy(policy)
    before = Home(home).ledger.entries("ds")
    with pytest.raises(UserError, match=said) as refused:
        release("t2", then)
    assert "(published before: t1). Nothing was charged." in str(refused.value)
    assert Home(home).ledger.entries("ds") == before
    release("t3", (COUNT if first["measure"] == "sum" else SUM) | {"method": "suppression"})
    if "cell_key_sums" in policy:
        set_policy({"cell_key_sums": {"low": 0.1, "high": 1.0, "max_guess": 0.9}})
        release("t4", then)


def test_a_sums_preview_says_its_chance_and_that_a_column_has_one_method(home, test_mode):
    from privrelease.core.release import preview
    from privrelease.core.release.home import Home
    from privrelease.core.release.spec import parse

    _register(home, _frame(seed=3), SUMS)
    request = {"group_by": ["a", "b"], "method": "cell_key", "measure": "sum", "column": "x"}
    shown = preview.text(
        preview.preview(Home(home), parse({"dataset": "ds", "mechanism": {"name": "sdc_table", "params": request}}))
    )
    assert "verdict: **admitted**" in shown and "chance at most 0.207 (the policy allows 0.25)" in shown
    assert "published by one method" in shown


def test_a_table_published_between_the_check_and_the_audit_is_still_refused():
    """The same reasons when an earlier table was published after this one's check (the audit reads them again):
    sums by the other method, or a cell key count table under another perturbation table, fail the audit."""
    frame = _keyed(_frame(seed=3))
    policy = _policy(min_frequency=3, **SUMS, cell_key={"D": 3, "V": 1.5, "js": 2})
    sums, suppressed = _sums(policy), _params(policy, measure="sum", column="x")
    earlier = [Earlier("t1", suppressed.model_dump(mode="json"), _release(frame, suppressed).data, True)]
    _, internal, missed = sdc_table.assess(frame, _release(frame, sums), sums, earlier)
    assert missed and "ask for method: suppression (published before: t1)" in missed[0] and internal["linked"]["refused"]
    counts = _params(policy, method="cell_key")
    other = _params(_policy(min_frequency=3, **SUMS, cell_key={"D": 2, "V": 1.0, "js": 2}), method="cell_key")
    earlier = [Earlier("t2", other.model_dump(mode="json"), _release(frame, other).data, True)]
    assert "restores the policy's tables.cell_key to" in sdc_table.assess(frame, _release(frame, counts), counts, earlier)[2][0]
    assert sdc_table.assess(frame, _release(frame, sums), sums, [])[2] == []


def test_factors_need_a_contributor_id_on_every_record_and_keep_the_one_they_were_keyed_by():
    """A policy with factors and no cluster, or whose cluster column may be empty, is refused saying what to name;
    a table after cell key sums keyed by another cluster is refused (other ids, other factors: a second view)."""
    from privrelease.core.sdc.policy import Policy, PolicyMismatch
    from privrelease.core.tables.schema import Column, Schema

    without = {k: v for k, v in _policy(**SUMS).items() if k != "cluster"}
    with pytest.raises(ValidationError, match="tables.cell_key_sums needs cluster: each contributor's factor is keyed"):
        Policy.model_validate(without)
    schema = Schema(columns={"a": Column(type="string"), "b": Column(type="string"), "x": Column(type="float"),
                             "hh": Column(type="integer", nullable=True)})  # fmt: skip
    with pytest.raises(PolicyMismatch, match="the cluster column 'hh' may be empty .* an id on every record"):
        Policy.model_validate(_policy(**SUMS)).check(schema, "ds")
    earlier = _sums().model_dump(mode="json")
    moved = _sums(_policy(**SUMS) | {"cluster": "b", "keys": {"categorical": ["a"]}, "hierarchies": HIER})
    assert "'cluster': 'hh'}, and the policy now sets" in sdc_table.follows(moved, {"t1": ("sdc_table", earlier)})
    assert sdc_table.follows(_sums(), {"t1": ("sdc_table", earlier)}) is None


def test_a_columns_sums_and_the_datasets_microdata_are_not_both_published(home, test_mode):
    """After a microdata release (every releasable column, record by record), a table of sums of one of its columns,
    by either method, is refused before the charge; after a table of sums, a microdata release holding its column
    is refused. Count tables are not held back."""
    from privrelease.core.release import pipeline
    from privrelease.core.release.home import Home
    from privrelease.core.release.spec import parse

    _register(home, _frame(seed=3), {"min_frequency": 3, **SUMS})
    micro = {"name": "sdc", "params": {"steps": [{"method": "suppress"}]}}

    def release(release_id: str, dataset: str, mechanism: dict):
        return pipeline.release(
            Home(home), parse({"release_id": release_id, "dataset": dataset, "mechanism": mechanism, "seed": 5})
        )

    table = {"name": "sdc_table", "params": {"group_by": ["a", "b"], "measure": "sum", "column": "x"}}
    release("m1", "ds", micro)
    for method in ("suppression", "cell_key"):
        with pytest.raises(UserError, match=r"published x record by record.* \(published before: m1\)\. Nothing was charged"):
            release(f"s-{method}", "ds", {"name": "sdc_table", "params": table["params"] | {"method": method}})
    release("c1", "ds", {"name": "sdc_table", "params": {"group_by": ["a", "b"]}})
    _register(home, _frame(seed=4), {"min_frequency": 3, **SUMS}, dataset_id="ds2")
    release("s1", "ds2", table)
    with pytest.raises(UserError, match=r"sums of x were published by tables of this dataset \(s1\).* Nothing was charged"):
        release("m2", "ds2", micro)


def test_a_microdata_release_and_a_table_of_sums_published_meanwhile_are_not_both_published(home, test_mode, monkeypatch):
    """Each passes its check before the other publishes: the one publishing second is refused under the publish
    lock, naming the other, both ways; a sums table sealed by a fault at publishing is not resumed after a microdata
    release was published meanwhile (the helper's race: both were published)."""
    import errno

    from privrelease.core.errors import ReleaseConflict
    from privrelease.core.release import charged, pipeline
    from privrelease.core.release import publish as _publish
    from privrelease.core.release.home import Home
    from privrelease.core.release.spec import parse

    micro = {"name": "sdc", "params": {"steps": [{"method": "suppress"}]}}
    sums = {"name": "sdc_table", "params": {"group_by": ["a", "b"], "measure": "sum", "column": "x", "method": "cell_key"}}

    def doc(release_id: str, dataset: str, mechanism: dict):
        return parse({"release_id": release_id, "dataset": dataset, "mechanism": mechanism, "seed": 5})

    for n, (first, then) in enumerate(((micro, sums), (sums, micro))):
        dataset = f"ds{n}"
        _register(home, _frame(seed=3 + n), {"min_frequency": 3, **SUMS}, dataset_id=dataset)

        def privatize(release, plan, frame, other=then, ds=dataset):
            pipeline.release(Home(home), doc(f"other-{ds}", ds, other))  # checked and published while this one runs
            return pipeline.privatize(release, plan, frame)

        with pytest.raises(ReleaseConflict, match=rf"as a release published while it ran forbids it: .*other-{dataset}\b"):
            pipeline.release(Home(home), doc(f"this-{dataset}", dataset, first), steps=pipeline.Steps(privatize=privatize))
        assert (home / "releases" / dataset / f"other-{dataset}").exists() and not (
            home / "releases" / dataset / f"this-{dataset}"
        ).exists()

    _register(home, _frame(seed=9), {"min_frequency": 3, **SUMS}, dataset_id="ds9")
    place, faulty = _publish.place, {"sealed"}
    monkeypatch.setattr(
        _publish,
        "place",
        lambda folder, root: (
            (_ for _ in ()).throw(OSError(errno.ENOSPC, "full", str(root)))
            if folder.name.lstrip(".").split(".")[0] in faulty
            else place(folder, root)
        ),
    )
    with pytest.raises(UserError, match="kept sealed"):
        pipeline.release(Home(home), doc("sealed", "ds9", sums))
    pipeline.release(Home(home), doc("micro", "ds9", micro))  # its run's recovery fails to publish the sealed draw
    faulty.clear()
    charge = next(e for e in Home(home).ledger.entries("ds9") if e.release_id == "sealed" and e.status == "reserved")
    with pytest.raises(
        ReleaseConflict, match=r"not published from its sealed draw: a microdata release .*\(published before: micro\)"
    ):
        charged.resume(Home(home), charge)
