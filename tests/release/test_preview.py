"""The preview (``privrelease release --preview``, ``privrelease.core.release.preview``): the release's own checks, its
cost as the ledger then charges it, nothing written, no row read; and the warnings before a charge."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest

from privrelease.core.datasets.registry import Registry
from privrelease.core.errors import SpecError
from privrelease.core.ledger.ledger import Ledger
from privrelease.core.privacy import accuracy
from privrelease.core.privacy.budget import Budget
from privrelease.core.release import charged, pipeline, preview
from privrelease.core.release.home import Home
from privrelease.core.release.spec import parse
from tests.cli.test_cli import run
from tests.mechanisms.test_dpne import phrase_corpus
from tests.mechanisms.test_outliers import planted
from tests.support.helpers import register

SCALES = {c: {"mean": 0.0, "std": 1.0} for c in "abcde"}
OUTLIERS = {"name": "outliers", "params": {"query": "count", "columns": ["a", "b"], "k": 3, "r": 0.5, "epsilon": 1.0,
                                           "delta": 1e-4, "standardize": SCALES}}  # fmt: skip
CASES = {  # every DP mechanism and each way it spends: name -> (table, unit, mechanism)
    "dpne": (lambda: phrase_corpus(200, seed=1), "user:user",
             {"name": "dpne", "params": {"text_column": "text", "epsilon": 2.0, "delta": 1e-6, "T": 2, "delta0": 5}}),
    "outliers-count-global": (planted, "record", OUTLIERS),
    "outliers-count-smooth": (planted, "record", {"name": "outliers", "params": {**OUTLIERS["params"], "noise": "smooth"}}),
    "outliers-top": (planted, "record", {"name": "outliers", "params": {**OUTLIERS["params"], "query": "top_subspaces",
                                                                       "columns": None, "c": 1, "h": 2}}),
    "outliers-private-scale": (planted, "record", {"name": "outliers", "params": {
        **OUTLIERS["params"], "standardize": {"bounds": {"a": [-5, 5], "b": [-5, 5]}, "share": 0.2}}}),
}  # fmt: skip


def _setup(home: Path, case: str, cap: Budget = Budget(10.0, 1e-3)) -> dict:
    make, unit, mechanism = CASES[case]
    register(home, make(), "ds", unit, "dp")
    Ledger(home / "privrelease.duckdb").set_budget("ds", cap)
    return {"dataset": "ds", "mechanism": mechanism}


def _ledger_bytes(home: Path) -> str:
    files = sorted(p for p in home.rglob("*") if p.is_file() and "datasets" not in p.parts)
    return hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in files)).hexdigest()


@pytest.mark.parametrize("case", sorted(CASES))
def test_preview_cost_is_the_charge(case, home, test_mode):
    """What the preview says a release costs and leaves is what the ledger then charges and shows."""
    doc = _setup(home, case)
    store = Home(home)
    seen = preview.preview(store, parse(doc))
    assert seen["verdict"] == preview.ADMITTED and seen["accuracy"] is not None
    assert bool(seen["notes"]) == (case == "dpne") and all(f"> note: {n}" in preview.text(seen) for n in seen["notes"])
    pipeline.release(store, parse({**doc, "seed": 3, "release_id": "r1"}))
    ledger = Ledger(home / "privrelease.duckdb")
    charge = next(e for e in ledger.entries() if e.release_id == "r1")
    assert seen["charge"] == {"epsilon": charge.epsilon, "delta": charge.delta}
    totals = next(t for t in ledger.totals() if t.dataset == "ds")
    assert seen["left_after"]["epsilon"] == pytest.approx(totals.remaining.epsilon, rel=1e-12)
    assert seen["left_after"]["delta"] == pytest.approx(totals.remaining.delta, rel=1e-12)
    assert seen["left_after"]["counted_by"] == json.loads(charge.detail)["admission"]["mode"]
    assert seen["left_after"]["region"] == json.loads(charge.detail)["admission"]["region"]
    if case == "outliers-count-global":  # the interval the release states is the one tests/privacy/test_intervals.py tests
        result = json.loads(next(home.glob("releases/ds/r1/manifest.json")).read_text())["result"]
        foretold, error = seen["accuracy"]["counts"], result["error"]
        assert error["family"] == "discrete Gaussian (global sensitivity)" and error["std"] == foretold["std"]
        assert error["interval"] == accuracy.count_interval(result["count"], accuracy.Z95 * error["std"], 300)
        assert error["interval"][1] - error["interval"][0] <= 2 * foretold["half_width"]


def test_preview_writes_nothing_reads_no_row_and_refuses_as_a_release(tmp_path: Path):
    """As a user runs it: the home unchanged byte for byte; a dropped dataset still previews; a bad
    request gets the release's own message and exit 2; a refused budget is the verdict, exit 2."""
    home = tmp_path / "home"
    doc = _setup(home, "outliers-count-global", Budget(1.5, 1e-3))
    request = tmp_path / "r.json"
    request.write_text(json.dumps(doc))
    before = _ledger_bytes(home)
    r = run(home, "release", "--preview", str(request))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "- cost: epsilon=1 delta=0.0001" in r.stdout and "- verdict: **admitted**" in r.stdout
    figures = json.loads(run(home, "release", "--preview", "--json", str(request)).stdout)
    # the count is one Gaussian: the basic region closes, and what is left is the filter's (less than 1.5 - 1)
    left = figures["left_after"]
    assert left["by"] == "filter" and left["epsilon"] < 0.5
    # the one figure an analyst acts on, now and after it, beside the cap (the cap less the spend: --verbose only)
    room = figures["room"]
    assert f"- budget: {room['says']}; cap epsilon=1.5, delta=0.001\n  (nothing spent yet)\n" in r.stdout
    assert f"- after it: {room['after']['says']}\n" in r.stdout and "the cap less" not in r.stdout
    assert room["after"]["epsilon"] < room["epsilon"] <= 1.5 * 2
    verbose = run(home, "release", "--preview", "--verbose", str(request)).stdout
    assert f"- the cap less what would be spent after it: epsilon={left['epsilon']:.4g} of 1.5" in verbose
    # the delta left is less than the cap less the charges: a tenth of it is set aside, and the line says so
    assert left["held_back"] == 1e-4 and "  (0.0001 of the cap's delta is set aside to state the total spent" in verbose
    assert "- accounting: admitted by the Rényi filter; the Rényi filter (order " in verbose
    assert "95% interval: the released count ±" in r.stdout
    assert _ledger_bytes(home) == before  # the ledger, registry, anchors and keys: unchanged

    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({**doc, "mechanism": {**doc["mechanism"], "params": {**doc["mechanism"]["params"], "columns": ["a", "zz"]}}})
    )
    released, previewed = run(home, "release", str(bad)), run(home, "release", "--preview", str(bad))
    assert previewed.returncode == released.returncode == 2 and previewed.stdout == ""
    assert previewed.stderr == released.stderr and previewed.stderr.startswith("error: ")

    costly = tmp_path / "costly.json"
    costly.write_text(
        json.dumps({**doc, "mechanism": {**doc["mechanism"], "params": {**doc["mechanism"]["params"], "epsilon": 2.0}}})
    )
    r = run(home, "release", "--preview", str(costly))
    assert r.returncode == 2 and "- verdict: **refused: this release needs epsilon=2" in r.stdout
    assert r.stderr.startswith("error: this release needs epsilon=2") and f"can take epsilon ≤ {room['epsilon']:.3g}" in r.stderr
    assert _ledger_bytes(home) == before

    Registry(home).drop("ds")
    assert not any((home / "datasets").rglob("*.parquet"))
    before = _ledger_bytes(home)
    r = run(home, "release", "--preview", "--json", str(request))
    dropped = json.loads(r.stdout)
    # the figures need registration facts only; the verdict is the release's own refusal (it needs the rows)
    assert r.returncode == 2 and dropped["verdict"] == preview.REFUSED and "is not registered" in dropped["reason"]
    assert {k: dropped[k] for k in ("accuracy", "warnings", "notes", "guarantee")} == {
        k: figures[k] for k in ("accuracy", "warnings", "notes", "guarantee")
    }
    assert _ledger_bytes(home) == before
    with pytest.raises(SpecError, match="is not registered") as refused:
        pipeline.prepare(Home(home), parse(doc))
    assert str(refused.value) == dropped["reason"]


def test_preview_of_a_release_id_already_used_says_what_the_release_would_do(home, test_mode):
    doc = _setup(home, "outliers-count-global") | {"release_id": "r1", "seed": 3}
    store = Home(home)
    assert preview.preview(store, parse(doc))["verdict"] == preview.ADMITTED
    pipeline.release(store, parse(doc))
    seen = preview.preview(store, parse(doc))
    assert seen["verdict"] == preview.PUBLISHED_ALREADY and seen["charge"] is None and "charges nothing" in seen["reason"]
    charge = charged.reserve(
        store, pipeline.claim(*pipeline.prepare(store, parse(doc | {"release_id": "r2"}))), charged.Caller(), None
    )
    store.ledger.settle("r2", "failed", {"reason": "test"})
    seen = preview.preview(store, parse(doc | {"release_id": "r2"}))
    assert charge.entry.release_id == "r2" and seen["verdict"] == preview.REFUSED
    assert "was charged before and did not publish (its ledger status is failed)" in seen["reason"]


def test_preview_waits_for_approval(home):
    doc = _setup(home, "outliers-count-global")
    Ledger(home / "privrelease.duckdb").set_budget("ds", Budget(10.0, 1e-3), approve_above=0.05)
    seen = preview.preview(Home(home), parse(doc))
    assert seen["verdict"] == preview.APPROVAL and "take at most 5.0% without approval" in seen["reason"]


def test_a_noisy_outlier_count_is_warned_before_its_charge(home, test_mode, caplog):
    """#30 item 8: a count whose noise std exceeds half of [0, N] is warned in the preview and in the
    release's output before the charge; the release still goes on."""
    doc = _setup(home, "outliers-count-global")
    doc["mechanism"]["params"] |= {"epsilon": 0.05}
    seen = preview.preview(Home(home), parse(doc))
    std = seen["accuracy"]["counts"]["std"]
    assert std > 150 and seen["warnings"] == [
        f"an outlier count's noise std is {std:.4g}, more than half of its public range [0, 300]: the released count "
        "would say little about the true one. Raise epsilon (or lower k, or ask about fewer dimensions) before you "
        "spend the budget."
    ]
    assert "> warning: an outlier count's noise std" in preview.text(seen)
    with caplog.at_level(logging.INFO, logger="privrelease"):
        pipeline.release(Home(home), parse({**doc, "seed": 1}), log=logging.getLogger("privrelease"))
    lines = [r.getMessage() for r in caplog.records if r.name == "privrelease"]
    warned = next(i for i, m in enumerate(lines) if m.startswith("warning: an outlier count's noise std"))
    assert warned < next(i for i, m in enumerate(lines) if m.startswith("ledger entry #"))
    # control: at epsilon = 1 the std is below N/2, and nothing is said
    doc["mechanism"]["params"] |= {"epsilon": 1.0}
    assert preview.preview(Home(home), parse(doc))["warnings"] == []


def test_an_aggregate_whose_user_bounds_are_left_at_their_defaults_is_warned_before_its_charge(home, test_mode, caplog):
    """Under the user unit, an aggregate that gives neither max_groups nor max_rows counts one row per person: said in
    the preview and in the release's output before the charge; not when either bound is given (even as 1)."""
    register(home, phrase_corpus(200, seed=1), "ds", "user:user", "dp")
    Ledger(home / "privrelease.duckdb").set_budget("ds", Budget(10.0, 1e-3))
    counts = {"group_by": ["text"], "measures": [{"op": "count"}], "epsilon": 1.0, "delta": 1e-6}
    doc = {"dataset": "ds", "mechanism": {"name": "aggregate", "params": counts}}
    said = (
        "each `user` counts at most 1 row in 1 key (max_rows and max_groups were not given: their defaults are 1): a "
        "person with more rows is counted once, in a key a keyed hash picks, so the table counts persons' picked rows, "
        "not rows. Set max_groups and max_rows to what one person contributes (the noise grows with them: preview the "
        "request first)."
    )
    assert preview.preview(Home(home), parse(doc))["warnings"] == [said]
    with caplog.at_level(logging.INFO, logger="privrelease"):
        pipeline.release(Home(home), parse({**doc, "seed": 1}), log=logging.getLogger("privrelease"))
    lines = [r.getMessage() for r in caplog.records if r.name == "privrelease"]
    assert lines.index(f"warning: {said}") < next(i for i, m in enumerate(lines) if m.startswith("ledger entry #"))
    for given in ({"max_rows": 1}, {"max_groups": 3, "max_rows": 2}):
        bounded = {**doc, "mechanism": {"name": "aggregate", "params": {**counts, **given}}}
        assert preview.preview(Home(home), parse(bounded))["warnings"] == []


def test_preview_of_an_unknown_dataset_is_the_release_error(home):
    with pytest.raises(SpecError, match="dataset 'nope' is not registered"):
        preview.preview(Home(home), parse({"dataset": "nope", "mechanism": CASES["dpne"][2]}))


def test_the_release_line_gives_each_count_its_interval():
    from privrelease.cli.main import _said

    error = {"family": "discrete Gaussian (global sensitivity)", "std": 51.4, "interval": [0.0, 148.0]}
    assert _said(
        "result", [{"subspace": ["hour"], "count": 47.0, "error": error}, {"subspace": ["a", "b"], "count": None, "error": None}]
    ) == ("hour: 47 (95% interval 0 to 148); a,b: not released")
    assert _said("pa", 33.99) == 33.99
