"""Linked SDC tables (#56): tables of one snapshot, each safe alone, can together let the intruder pin a cell down.
Every pair is attacked by the independent LP over both tables' published cells (``tests/support/table_attack.py``);
the product's linked audit (``privrelease.core.sdc.cells.linked``) refuses exactly the second table of a pair that
exposes a cell, naming the first, and publishes one that does not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from privrelease.core.errors import UserError
from privrelease.core.mechanisms import sdc_table
from privrelease.core.mechanisms.base import Earlier
from privrelease.core.release import pipeline
from privrelease.core.release.home import Home
from privrelease.core.release.spec import parse
from tests.sdc.test_sdc_table import (
    HIER,
    _assert_protected,
    _frame,
    _params,
    _protection,
    _register,
    _release,
    assert_payroll_protected,
)
from tests.support.table_attack import attack_linked, truth

# seed 9's records: a × b (exact) and a × b with a's sub-totals, each passes its own audit; together they expose
SEED = 9
FIRST, SECOND = {"secondary": "exact"}, {"secondary": "exact", "subtotals": ["a"]}


def _narrowed(frame, tables) -> list[list[int]]:
    """Each table's primary rows that the independent attack over all the tables narrows below their protection."""
    found = attack_linked(
        [(r.data, p.group_by, {d: HIER[d] for d in p.subtotals}, "count" if p.measure == "count" else f"sum_{p.column}")
         for p, r in tables], frame)  # fmt: skip
    out = []
    for (p, r), intervals in zip(tables, found):
        values = truth(frame, r.data, p.group_by, {d: HIER[d] for d in p.subtotals}, p.column)
        lo, hi = _protection(p, frame, r.data, values)
        tol = 1e-6 * np.maximum(1.0, values)
        out.append(
            [int(i) for i in np.flatnonzero(r.data.status == "primary")
             if not (intervals[i][0] <= values[i] - lo[i] + tol[i] and intervals[i][1] >= values[i] + hi[i] - tol[i])]
        )  # fmt: skip
    return out


@pytest.mark.parametrize("measure", [{}, {"measure": "sum", "column": "x"}])
def test_two_tables_safe_alone_expose_a_cell_together_and_the_second_is_refused(measure):
    frame = _frame(seed=SEED)
    p1, p2 = _params(**FIRST, **measure), _params(**SECOND, **measure)
    r1, r2 = _release(frame, p1), _release(frame, p2)
    for p, r in ((p1, r1), (p2, r2)):  # each alone: the independent attack and the product's own audit pass
        _assert_protected(frame, p, r)
        assert sdc_table.assess(frame, r, p)[2] == []
    assert any(_narrowed(frame, [(p1, r1), (p2, r2)]))  # together: the independent attack pins a cell down
    external, internal, missed = sdc_table.assess(frame, r2, p2, [Earlier("t1", p1.model_dump(mode="json"), r1.data, True)])
    assert external["audit"] == "failed" and len(missed) == 1 and "together with t1" in missed[0]
    assert "contributors" in missed[0] or "contributions" in missed[0]  # the policy's rules, in its words
    assert internal["linked"]["with"] == ["t1"] and any(internal["linked"]["exposed"].values())


def test_linked_tables_that_expose_nothing_are_published_and_resist_the_attack():
    """The same records: a table of a alone, then a × b, then a × b again: the independent attack over all three
    narrows no primary cell, and the linked audit passes each."""
    frame = _frame(seed=SEED)
    pa, pb = _params(group_by=["a"]), _params(**FIRST)
    ra, rb = _release(frame, pa), _release(frame, pb)
    assert not any(_narrowed(frame, [(pa, ra), (pb, rb), (pb, rb)]))
    earlier = [Earlier("ta", pa.model_dump(mode="json"), ra.data, True), Earlier("tb", pb.model_dump(mode="json"), rb.data, True)]
    external, internal, missed = sdc_table.assess(frame, rb, pb, earlier)
    assert missed == [] and external["audit"] == "passed" and internal["linked"]["with"] == ["ta", "tb"]


def test_a_count_table_is_not_audited_with_a_sum_table():
    """Counts are linked with counts, sums of a column with sums of that column: a sum table published before does
    not enter a count table's linked audit."""
    frame = _frame(seed=SEED)
    p1, p2 = _params(**FIRST, measure="sum", column="x"), _params(**SECOND)
    r1, r2 = _release(frame, p1), _release(frame, p2)
    external, internal, missed = sdc_table.assess(frame, r2, p2, [Earlier("t1", p1.model_dump(mode="json"), r1.data, True)])
    assert missed == [] and "linked" not in internal


def _refresh(home, frame) -> None:
    """The steward registers the dataset's source again, holding ``frame``'s records."""
    frame.to_csv(home / "data" / "ds.csv", index=False)
    Home(home).registry.refresh("ds", root=home / "data")


def test_the_second_table_of_an_exposing_pair_is_not_published(home, test_mode):
    """Through the release pipeline: t1 published; t2, which with t1 exposes a cell, refused after its audit (its
    failed entry names t1), nothing of it published; t3, t1's request again, published. The same records registered
    again are still linked with t1 (t4 refused); other records registered are not (t5 published)."""
    frame = _frame(seed=SEED)
    _register(home, frame)

    def release(release_id: str, request: dict) -> dict:
        doc = {"release_id": release_id, "dataset": "ds", "mechanism": {"name": "sdc_table", "params": request}, "seed": 5}
        return pipeline.release(Home(home), parse(doc))

    release("t1", {"group_by": ["a", "b"], **FIRST})
    with pytest.raises(UserError, match="together with t1 an intruder's linear programs narrow a protected cell"):
        release("t2", {"group_by": ["a", "b"], **SECOND})
    assert not (home / "releases" / "ds" / "t2").exists()
    internal = json.loads((home / "sdc-reports" / "ds" / "t2" / "internal.json").read_text())
    assert internal["linked"]["with"] == ["t1"] and internal["rules_missed"]
    assert release("t3", {"group_by": ["a", "b"], **FIRST})["folder"]
    _refresh(home, frame)  # registration 2: the same records
    with pytest.raises(UserError, match="together with t1, t3 an intruder"):
        release("t4", {"group_by": ["a", "b"], **SECOND})
    _refresh(home, _frame(seed=SEED + 1))  # registration 3: other records
    assert release("t5", {"group_by": ["a", "b"], **SECOND})["folder"]
    internal = json.loads((home / "sdc-reports" / "ds" / "t5" / "internal.json").read_text())
    assert internal["linked"] == {"with": [], "other_records": ["t1", "t3"]}


# -- the real tables of the "done when", linked ---------------------------------------------------------------


@pytest.mark.parametrize(("second", "exposes"), [(["occupation", "sex"], False), (["education", "occupation"], True)])
def test_adult_tables_linked_with_education_occupation_sex(second, exposes):
    """UCI Adult's education × occupation × sex with margins, then a second table of the same records. With occupation
    × sex the independent attack over both narrows no primary cell and the linked audit passes; with education ×
    occupation (the first table summed over sex, suppressed apart) it narrows cells of both, and the linked audit
    refuses it: the product refuses exactly when the attack finds a cell."""
    from tests.conftest import adult_clean

    frame = adult_clean()
    policy = {"keys": {"categorical": ["education", "occupation", "sex"]}, "tables": {"min_frequency": 10, "cost": "count"}}
    p1, p2 = (
        sdc_table.Params.model_validate({"group_by": g, "secondary": "heuristic", "policy": policy})
        for g in (["education", "occupation", "sex"], second)
    )
    r1, r2 = _release(frame, p1), _release(frame, p2)
    found = attack_linked([(r1.data, p1.group_by, {}, "count"), (r2.data, p2.group_by, {}, "count")], frame)
    narrowed = 0
    for p, r, intervals in ((p1, r1, found[0]), (p2, r2, found[1])):
        values = truth(frame, r.data, p.group_by, {})
        for i in np.flatnonzero(r.data.status == "primary"):  # protection: 30% of the count, at least 1, both ways
            need = max(1.0, 0.3 * values[i])
            low, high = intervals[i]
            narrowed += not (low <= values[i] - min(need, values[i]) + 1e-6 and high >= values[i] + need - 1e-6)
    assert (narrowed > 0) == exposes
    external, internal, missed = sdc_table.assess(frame, r2, p2, [Earlier("t1", p1.model_dump(mode="json"), r1.data, True)])
    assert bool(missed) == exposes and external["audit"] == ("failed" if exposes else "passed")


def test_payroll_salary_sums_linked_by_both_secondary_methods_resist_the_attack():
    """The demo payroll's salary sums by region × grade (each person one contributor; (1, 60)-dominance and the
    15%-rule) published by the exact method and again by the heuristic: the independent attack over both narrows no
    primary cell below its protection, and the linked audit passes."""
    from privrelease.core.datasets.demo import payroll

    frame = payroll(persons=160, seed=56)
    policy = {"keys": {"categorical": ["region", "grade"]}, "publishable": ["salary", "month"], "cluster": "person",
              "tables": {"min_frequency": 3, "dominance": {"n": 1, "k": 60}, "p_percent": {"p": 15}}}  # fmt: skip
    p1, p2 = (
        sdc_table.Params.model_validate(
            {"group_by": ["region", "grade"], "measure": "sum", "column": "salary", "secondary": m, "policy": policy}
        )
        for m in ("exact", "heuristic")
    )
    r1, r2 = _release(frame, p1), _release(frame, p2)
    found = attack_linked([(r.data, ["region", "grade"], {}, "sum_salary") for r in (r1, r2)], frame)
    for r, intervals, method in ((r1, found[0], "exact"), (r2, found[1], "heuristic")):
        assert (r.data.status == "primary").sum() > 0
        assert_payroll_protected(frame, r.data, intervals, f"{method}, linked")
    external, internal, missed = sdc_table.assess(frame, r2, p2, [Earlier("t1", p1.model_dump(mode="json"), r1.data, True)])
    assert missed == [] and internal["linked"]["exposed"] == {"this table": [], "t1": []}


def test_tables_too_large_to_audit_together_are_refused(monkeypatch):
    """Fail closed: tables whose finest cells pass the linked audit's limit are not published, and the verdict
    says why."""
    from privrelease.core.sdc.cells import linked

    monkeypatch.setattr(linked, "LIMIT", 5)
    frame = _frame(seed=SEED)
    p1, p2 = _params(**FIRST), _params(group_by=["a"])
    r1, r2 = _release(frame, p1), _release(frame, p2)
    external, internal, missed = sdc_table.assess(frame, r2, p2, [Earlier("t1", p1.model_dump(mode="json"), r1.data, True)])
    assert external["audit"] == "failed" and "not audited, so not published" in missed[0]
    assert "more than the 5 the linked audit takes" in internal["linked"]["verdict"]


def test_a_table_published_while_another_is_audited_fails_the_other(home, test_mode):
    """t1 is published while t2 (which with t1 exposes a cell) is being audited, without it: t2 is not published
    (it names t1 and asks to be released again, when it is audited with t1 and refused)."""
    from privrelease.core.errors import ReleaseConflict

    _register(home, _frame(seed=SEED))

    def doc(release_id: str, request: dict):
        return parse(
            {"release_id": release_id, "dataset": "ds", "mechanism": {"name": "sdc_table", "params": request}, "seed": 5}
        )

    def meanwhile(home_, release, frame, result):
        audited = pipeline.assess(home_, release, frame, result)  # audited with nothing: t1 is not published yet
        pipeline.release(Home(home), doc("t1", {"group_by": ["a", "b"], **FIRST}))
        return audited

    with pytest.raises(ReleaseConflict, match="t1 of dataset 'ds' was published while it was audited"):
        pipeline.release(Home(home), doc("t2", {"group_by": ["a", "b"], **SECOND}), steps=pipeline.Steps(assess=meanwhile))
    assert (home / "releases" / "ds" / "t1").exists() and not (home / "releases" / "ds" / "t2").exists()
    with pytest.raises(UserError, match="together with t1 an intruder"):
        pipeline.release(Home(home), doc("t3", {"group_by": ["a", "b"], **SECOND}))


def test_an_earlier_table_that_cannot_be_read_as_published_fails_the_release(home, test_mode):
    """Fail closed: t1's published table altered (or its folder gone), t2 cannot be audited with it and is not
    published; the error says what the operator does."""
    import shutil

    _register(home, _frame(seed=SEED))

    def release(release_id: str, request: dict):
        doc = {"release_id": release_id, "dataset": "ds", "mechanism": {"name": "sdc_table", "params": request}, "seed": 5}
        return pipeline.release(Home(home), parse(doc))

    folder = Path(release("t1", {"group_by": ["a", "b"], **FIRST})["folder"])
    (folder / "table.parquet").chmod(0o644)
    (folder / "table.parquet").write_bytes(b"not the table")
    with pytest.raises(UserError, match="cannot be read as published .* restores that folder from a backup"):
        release("t2", {"group_by": ["a"]})
    shutil.rmtree(folder)
    with pytest.raises(UserError, match="release t1 of dataset 'ds', published before, cannot be read"):
        release("t3", {"group_by": ["a"]})
    assert not (home / "releases" / "ds" / "t2").exists() and not (home / "releases" / "ds" / "t3").exists()


def test_a_sealed_table_is_not_resumed_after_another_was_published(home, test_mode, monkeypatch):
    """t2's draw sealed by a fault at publishing that holds for t2 alone (a large table on a nearly full disk, say);
    t1, which with t2 exposes a cell, is published meanwhile (each run's recovery tries t2 first, and fails): once
    the fault is gone, `release --resume t2` refuses, naming t1, as the next run's recovery leaves it (t2 was not
    audited with t1). A sealed table with nothing published since is resumed."""
    import errno

    from privrelease.core.errors import ReleaseConflict
    from privrelease.core.ledger.ledger import Ledger
    from privrelease.core.release import charged
    from privrelease.core.release import publish as _publish

    _register(home, _frame(seed=SEED))
    place, faulty = _publish.place, set()

    def placed(folder, root):
        if folder.name.lstrip(".").split(".")[0] in faulty:
            raise OSError(errno.ENOSPC, "No space left on device", str(root))
        return place(folder, root)

    monkeypatch.setattr(_publish, "place", placed)

    def release(release_id: str, request: dict):
        doc = {"release_id": release_id, "dataset": "ds", "mechanism": {"name": "sdc_table", "params": request}, "seed": 5}
        return pipeline.release(Home(home), parse(doc))

    def charge(release_id: str):
        return next(
            e for e in Ledger(home / "privrelease.duckdb").entries("ds") if e.release_id == release_id and e.status == "reserved"
        )

    faulty.add("t2")
    with pytest.raises(UserError, match="kept sealed"):
        release("t2", {"group_by": ["a", "b"], **SECOND})
    release("t1", {"group_by": ["a", "b"], **FIRST})
    faulty.clear()
    with pytest.raises(ReleaseConflict, match="t1 of dataset 'ds' was published since it was audited"):
        charged.resume(Home(home), charge("t2"))
    release("t4", {"group_by": ["a"]})  # the next run's recovery leaves t2 sealed
    assert not (home / "releases" / "ds" / "t2").exists()
    faulty.add("t3")
    with pytest.raises(UserError, match="kept sealed"):
        release("t3", {"group_by": ["b"]})
    faulty.clear()
    assert charged.resume(Home(home), charge("t3"))["folder"]
