"""Sums by the cell key method (#56): each contribution multiplied by the factor its contributor's key selects.

The factors' distribution has mean 1 and stays within its reach; the guess chance's closed form is the best any
window of guesses achieves (a brute force over windows), and an intruder who knows every other contribution, guessing
by the best rule, succeeds as often as it says (a binomial test). Every cell of every table, a margin or sub-total
included, is a sum of the same perturbed contributions: the intruder who knows the rest reads one factor per
contributor from all of them (the withdrawn per-cell design gave a second view and fails the same test). Factor keys
are the contributor's (its cluster id) or the record's value and place among that value's records: a refresh that
changes a record's other values keeps its factor (keys of what the whole record holds, the weakened way, give a
second draw). Requests and policies that cannot hold are refused, before the charge where the reason is public.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError
from scipy import stats

from privrelease.core.errors import UserError
from privrelease.core.mechanisms import sdc_table
from privrelease.core.mechanisms.base import Earlier
from privrelease.core.noise import keys
from privrelease.core.sdc.cells import factors
from privrelease.core.sdc.cells.rules import TableRules
from privrelease.core.sdc.enforce import FACTOR_KEY, RECORD_KEY
from tests.sdc.test_sdc_table import HIER, _frame, _params, _policy, _register, _release
from tests.support.table_attack import cover, truth

SUMS = {"p_percent": {"p": 10}, "cell_key_sums": {"low": 0.1, "high": 1.0}}
GRID = (np.arange(2_000_000) + 0.5) / 2_000_000  # keys evenly over [0, 1): the factors' distribution, quantised


def _keyed(frame: pd.DataFrame, secret: bytes = bytes(32)) -> pd.DataFrame:
    return frame.assign(**{FACTOR_KEY: keys.factor_keys(secret, frame.hh, "x"), RECORD_KEY: keys.record_keys(secret, frame)})


def _sums(policy: dict | None = None, **request) -> sdc_table.Params:
    return _params(policy or _policy(**SUMS), **({"method": "cell_key", "measure": "sum", "column": "x"} | request))


@pytest.mark.parametrize(("low", "high"), [(0.0, 0.01), (0.1, 1.0), (0.0, 9.0), (1.0, 9.0), (0.3, 0.31)])
def test_the_factors_have_mean_one_and_stay_within_their_reach(low, high):
    """On keys spread evenly over [0, 1), the factors' mean is 1 (to the grid's resolution), every factor within
    [1 / (1 + high), 1 + high] and moved by at least low, and the upward share is the closed form's."""
    f = factors.factor(GRID, low, high)
    least, most = factors.reach(low, high)
    assert f.mean() == pytest.approx(1.0, abs=1e-5 * most)
    assert f.min() >= least * (1 - 1e-12) and f.max() <= most * (1 + 1e-12)
    assert (np.abs(np.log(f)) >= math.log1p(low) * (1 - 1e-12)).all()
    assert (f > 1).mean() == pytest.approx(factors.up_share(low, high), abs=1e-6)


@pytest.mark.parametrize(
    ("low", "high", "p"),
    [(0.1, 1.0, 10), (0.1, 0.5, 10), (0.0, 0.3, 15), (0.05, 1.0, 30), (0.0, 9.0, 0.5), (1.0, 9.0, 99), (0.3, 0.31, 5)],
)
def test_the_guess_chance_is_the_best_window_a_brute_force_finds(low, high, p):
    """The largest share of factors whose logarithm falls in a window of width log((1+p)/(1-p)), over 20,000 window
    places, equals the closed form to the grid's resolution, and none exceeds it."""
    logs = np.sort(np.log(factors.factor(GRID, low, high)))
    width = math.log((1 + p / 100) / (1 - p / 100))
    starts = np.linspace(logs[0] - width, logs[-1], 20_000)
    inside = np.searchsorted(logs, starts + width, side="right") - np.searchsorted(logs, starts, side="left")
    best = inside.max() / logs.size
    chance = factors.guess_chance(low, high, p)
    assert best <= chance + 1e-5 and best == pytest.approx(chance, abs=2e-3)
    assert factors.guess_chance(low, high, 100) == 1.0


def test_an_intruder_who_knows_every_other_contribution_guesses_as_often_as_the_chance_says():
    """40,000 single-contributor cells, each contributor's key from the dataset's secret. An intruder who knows every
    other contribution reads y = x · f and guesses y / exp(t): it learns the best t of a fine grid on half of them
    (where it knows x), then guesses the other half. Its share within 10% is the closed form's chance (two-sided
    binomial test, error rate 1e-3, fixed secret), and no t of the grid does better there than the chance allows
    (a one-sided bound at 1e-3 over the grid's 2,001)."""
    rng = np.random.default_rng(7)
    n = 40_000
    frame = pd.DataFrame({"id": np.arange(n), "x": np.round(rng.lognormal(8, 2, n), 2)})
    f = factors.factor(keys.factor_keys(bytes(range(32)), frame.id, "x"), 0.1, 1.0)
    x = frame.x.to_numpy()
    y = x * f
    chance = factors.guess_chance(0.1, 1.0, 10)
    shifts = np.linspace(-1.0, 1.0, 2_001)

    def hits(part: slice) -> np.ndarray:
        return np.array([(np.abs(y[part] / math.exp(t) / x[part] - 1) <= 0.1).sum() for t in shifts])

    learn, guess = slice(0, n // 2), slice(n // 2, n)
    t = int(np.argmax(hits(learn)))
    tried = hits(guess)
    assert stats.binomtest(int(tried[t]), n // 2, chance).pvalue > 1e-3
    assert tried.max() <= stats.binom.ppf(1 - 1e-3 / shifts.size, n // 2, chance)


def _one_factor_each(frame: pd.DataFrame, tables: list[tuple], low: float = 0.1, high: float = 1.0) -> dict[int, list[float]]:
    """The intruder who knows every contribution but one's, and the others' perturbed values: for each household,
    what it reads from every cell of every table that holds it (the cell's published sum less the others' perturbed
    contributions, over its own true contribution), over the household's factor: 1 to the rounding for one factor."""
    perturbed = factors.moved(frame.x.to_numpy(), factors.factor(frame[FACTOR_KEY].to_numpy(), low, high))
    x, hh = frame.x.to_numpy(), frame.hh.to_numpy()
    f = factors.factor(frame[FACTOR_KEY].to_numpy(), low, high)
    read: dict[int, list[float]] = {}
    for data, by, hier in tables:
        for row in data.to_dict("records"):
            mask = np.ones(len(frame), dtype=bool)
            for d in by:
                leaves = sorted(frame[d].astype(str).unique())
                mask &= frame[d].isin(cover(row[d], int(row[f"{d}_level"]), leaves, hier.get(d, []))).to_numpy()
            for h in np.unique(hh[mask]):
                mine = mask & (hh == h)
                if x[mine].sum() > 0:
                    seen = (float(row["sum_x"]) - perturbed[mask & ~mine].sum()) / x[mine].sum()
                    read.setdefault(int(h), []).append(seen / f[hh == h][0])
    return read


def test_every_table_and_margin_shows_each_contributor_by_one_factor():
    """a × b with a's sub-totals, a alone and b alone: the intruder reads exactly one factor per household from
    every cell, margin and sub-total of the three tables. Each cell's published sum, margins included, is the sum
    of the cells below it, and the same cell has the same sum in every table. The withdrawn design (each cell moved
    by its own key) shows a contributor by several factors: the test fails on it."""
    frame = _keyed(_frame(seed=3))
    shapes = [(["a", "b"], ["a"]), (["a"], []), (["b"], [])]
    tables = [(_release(frame, _sums(group_by=by, subtotals=sub)).data, by, HIER if sub else {}) for by, sub in shapes]
    read = _one_factor_each(frame, tables)
    assert len(read) > 200 and sum(map(len, read.values())) > 8 * len(read)
    assert max(abs(r - 1) for v in read.values() for r in v) <= factors.ROUNDED + 1e-6  # each part rounded, one factor
    ab, a, b = (t[0] for t in tables)
    margin = ab[(ab.b_level == 0) & (ab.a_level != 1)].set_index("a")["sum_x"]  # the total and a's values
    assert margin.to_dict() == a.set_index("a")["sum_x"].to_dict() and len(margin) == 5
    assert ab[ab.a_level == 0].set_index("b")["sum_x"].to_dict() == b.set_index("b")["sum_x"].to_dict()
    leaves = ab[(ab.a_level == 2) & (ab.b_level == 1)]
    assert leaves.sum_x.sum() == pytest.approx(float(ab[(ab.a_level == 0) & (ab.b_level == 0)].sum_x.iloc[0]), rel=1e-9)
    true = truth(frame, ab, ["a", "b"], {"a": HIER["a"]}, "x")
    assert (ab.sum_x.to_numpy() != true).mean() > 0.9 and set(ab.status) == {"published"}
    per_cell = ab.assign(sum_x=ab.sum_x * (1 + 0.2 * np.where(np.arange(len(ab)) % 2, 1, -1)))  # the weakened way
    assert max(abs(r - 1) for v in _one_factor_each(frame, [(per_cell, ["a", "b"], HIER)]).values() for r in v) > 0.15


def test_factor_keys_are_the_contributors_and_survive_a_refresh_of_their_other_values():
    """Every record of a household has its household's key for a column, whatever the records hold, in any order,
    its ids read as integers or as floats; another column's sums have other keys (one factor for two columns gives
    one from the other); another secret, other keys; 200,000 keys pass a chi-square test of uniformity over 64 bins
    (error rate 1e-3, fixed secret), independent of the record keys. The keys of a record's value and place among
    that value's records (the withdrawn, weakened way) move when records of its value change."""
    secret = bytes(range(32))
    frame = _frame(2_000, seed=5)
    by_hh = keys.factor_keys(secret, frame.hh, "x")
    assert frame.assign(k=by_hh).groupby("hh").k.nunique().max() == 1 and len(np.unique(by_hh)) == frame.hh.nunique()
    order = np.random.default_rng(1).permutation(len(frame))
    assert (keys.factor_keys(secret, frame.hh.iloc[order].astype(float), "x") == by_hh[order]).all()
    assert (keys.factor_keys(secret, frame.hh, "y") != by_hh).all() and (
        keys.factor_keys(bytes(32), frame.hh, "x") != by_hh
    ).all()
    many = keys.factor_keys(secret, pd.Series(np.arange(200_000)), "x")
    assert stats.chisquare(np.bincount((many * 64).astype(int), minlength=64)).pvalue > 1e-3
    assert abs(stats.spearmanr(by_hh, keys.record_keys(secret, frame)).statistic) < 0.1
    with pytest.raises(ValueError, match="every row's contributor id"):
        keys.factor_keys(secret, pd.Series([1, None], dtype="Int64"), "x")

    def weak(rows: pd.DataFrame) -> np.ndarray:  # of the value and its place among that value's records, by record key
        place = rows.assign(k=keys.record_keys(secret, rows)).sort_values(["x", "k"]).groupby("x").cumcount().sort_index()
        return keys.factor_keys(secret, rows.x.astype(str) + "/" + place.astype(str), "x")

    ties = frame.assign(x=np.round(frame.x, -1))
    moved = ties.assign(b=np.where(np.arange(len(ties)) % 50 == 0, "b9", ties.b))  # 2% of records move
    assert (weak(moved) != weak(ties)).mean() > 0.05
    assert (keys.factor_keys(secret, moved.hh, "x") == keys.factor_keys(secret, ties.hh, "x")).all()


def test_sums_through_the_pipeline_keep_their_keys_secret_and_a_refresh_keeps_each_cell(home, test_mode):
    """Two tables released by the command's path: consistent margins; no published file holds a key; the manifest
    says the chance. The same records registered again, in reverse order and with another value in a column the
    table does not read, give the same sums, cell for cell (each household keeps its factor)."""
    from privrelease.core.datasets.registry import Registry
    from privrelease.core.release import pipeline
    from privrelease.core.release.home import Home
    from privrelease.core.release.spec import parse

    frame = _frame(seed=3).assign(z=1)
    _register(home, frame, SUMS)

    def release(release_id: str, request: dict) -> pd.DataFrame:
        request = {"method": "cell_key", "measure": "sum", "column": "x"} | request
        doc = {"release_id": release_id, "dataset": "ds", "mechanism": {"name": "sdc_table", "params": request}, "seed": 5}
        folder = pipeline.release(Home(home), parse(doc))["folder"]
        written = "".join(p.read_text(errors="replace") for p in Path(folder).glob("*"))
        assert RECORD_KEY not in written and FACTOR_KEY not in written
        return pd.read_parquet(f"{folder}/table.parquet")

    ab = release("s1", {"group_by": ["a", "b"]})
    a = release("s2", {"group_by": ["a"]})
    assert ab[ab.b_level == 0].set_index("a")["sum_x"].to_dict() == a.set_index("a")["sum_x"].to_dict()
    manifest = json.loads((home / "releases" / "ds" / "s1" / "manifest.json").read_text())
    assert manifest["privacy"]["method"] == "cell key" and manifest["sdc_report"]["audit"] == "passed"
    assert manifest["privacy"]["factors"]["guess_chance"] == pytest.approx(factors.guess_chance(0.1, 1.0, 10), abs=1e-4)
    (home / "data" / "ds.csv").write_text(frame.iloc[::-1].assign(z=2).to_csv(index=False))
    Registry(home).refresh("ds")
    assert release("s3", {"group_by": ["a", "b"]}).equals(ab)


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


@pytest.mark.parametrize(
    ("first", "then", "said"),
    [
        ({"method": "suppression"}, {"method": "cell_key"}, "by method suppression, and a column's sums are published by one"),
        ({"method": "cell_key"}, {"method": "suppression"}, "published by one method .*: ask for method: cell_key"),
        ({"method": "cell_key"}, {"method": "cell_key", "high": 2.0}, "restores the policy.s tables.cell_key_sums and cluster"),
        (
            {"measure": "count", "method": "cell_key"},
            {"measure": "count", "method": "cell_key", "D": 2},
            "restores the policy.s tables.cell_key to",
        ),
    ],
)
def test_a_table_that_would_give_a_second_view_of_published_cells_is_refused_before_the_charge(
    home, test_mode, first, then, said
):
    """Sums of a column by the other method after the first (an exact sum beside its perturbed one gives the factor
    away), or a cell key table under other factors or another perturbation table (the same keys through two
    perturbations give two views of each cell): refused before anything is charged, the ledger unchanged, naming
    the table published before; a table of another column or measure is not held back."""
    from privrelease.core.datasets.registry import Registry
    from privrelease.core.release import pipeline
    from privrelease.core.release.home import Home
    from privrelease.core.release.spec import parse
    from privrelease.core.sdc.policy import Policy

    tables = {"min_frequency": 3, "p_percent": {"p": 10}, "cell_key": {"D": 3, "V": 1.5, "js": 2}} | {
        "cell_key_sums": {"low": 0.1, "high": 1.0}
    }
    _register(home, _frame(seed=3), tables)

    def doc(release_id: str, params: dict) -> dict:
        request = {"group_by": ["a", "b"], "measure": "sum", "column": "x"} | params
        if request["measure"] == "count":
            request.pop("column")
        return {"release_id": release_id, "dataset": "ds", "mechanism": {"name": "sdc_table", "params": request}, "seed": 5}

    pipeline.release(Home(home), parse(doc("t1", {k: v for k, v in first.items() if k in ("method", "measure")})))
    changed = dict(tables)
    if "high" in then:
        changed["cell_key_sums"] = {"low": 0.1, "high": then["high"]}
    if "D" in then:
        changed["cell_key"] = {"D": then["D"], "V": 1.0, "js": 2}
    Registry(home).set_policy("ds", Policy.model_validate(_policy(**changed) | {"thresholds": {"k": None}}))
    before = Home(home).ledger.entries("ds")
    request = doc("t2", {k: v for k, v in then.items() if k in ("method", "measure")})
    with pytest.raises(UserError, match=said) as refused:
        pipeline.release(Home(home), parse(request))
    assert "(published before: t1). Nothing was charged." in str(refused.value)
    assert Home(home).ledger.entries("ds") == before
    other = {"measure": "count", "method": "suppression"} if first.get("measure") != "count" else {"method": "suppression"}
    pipeline.release(Home(home), parse(doc("t3", other)))
    if "high" in then:  # the chance the steward accepts moves no factor: not a second view
        changed["cell_key_sums"] = {"low": 0.1, "high": 1.0, "max_guess": 0.9}
        Registry(home).set_policy("ds", Policy.model_validate(_policy(**changed) | {"thresholds": {"k": None}}))
        pipeline.release(Home(home), parse(doc("t4", {"method": "cell_key"})))


@pytest.mark.parametrize("measure", ["sum"])
def test_a_sums_preview_says_its_chance_and_that_a_column_has_one_method(home, test_mode, measure):
    from privrelease.core.release import preview
    from privrelease.core.release.home import Home
    from privrelease.core.release.spec import parse

    _register(home, _frame(seed=3), SUMS)
    request = {"group_by": ["a", "b"], "method": "cell_key", "measure": measure, "column": "x"}
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


def test_two_parts_of_one_contributor_do_not_give_their_values_away():
    """A contributor's two parts x1, x2 (integers from 100 to 20,000) in two cells: an intruder who knows everything
    else reads them moved by one factor. From exact products the ratio's lowest terms gave both values back for most
    contributors (the helper's attack: 180 of 300); rounded to two significant figures, almost none (below 2%). Large
    integer ids keep keys of their own (a float's 53 bits gave 60 enterprises with 19-digit ids one key)."""
    from fractions import Fraction

    rng = np.random.default_rng(11)
    n = 2_000
    x = rng.integers(100, 20_001, (n, 2))
    f = factors.factor(keys.factor_keys(bytes(range(32)), pd.Series(np.arange(n)), "x"), 0.1, 1.0)[:, None]

    def recovered(y: np.ndarray) -> float:
        back = [Fraction(float(a / b)).limit_denominator(20_000) for a, b in y]
        return float(np.mean([(r.numerator, r.denominator) == (a, b) for r, (a, b) in zip(back, x)]))

    assert recovered(x * f) > 0.5  # the weakened way: exact products
    assert recovered(factors.moved(x, f)) < 0.02
    big = pd.Series([2**62 + i for i in range(60)], dtype="int64")
    assert len(set(keys.factor_keys(bytes(32), big, "x"))) == 60
    assert len(set(keys.factor_keys(bytes(32), big.astype(str), "x"))) == 60
