"""Sums by the cell key method (#56): each contribution multiplied by the factor its contributor's key selects.

The factors' distribution has mean 1 and stays within its reach; the guess chance's closed form is the best any
window of guesses achieves (a brute force over windows), and an intruder who knows every other contribution, guessing
by the best rule, succeeds as often as it says (a binomial test). Every cell of every table, a margin or sub-total
included, is a sum of the same perturbed contributions: the intruder who knows the rest reads one factor per
contributor from all of them, to the rounding (the withdrawn per-cell design gave a second view and fails the same
test). Factor keys are of the summed column and the contributor's id (its cluster's): a refresh that changes a
record's other values keeps its factor (keys of a value's place among its records, the weakened way, move), and two
parts of one contributor do not give their values away. What is refused, and when: test_sdc_cellkey_sums_refusals.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from privrelease.core.mechanisms import sdc_table
from privrelease.core.noise import keys
from privrelease.core.sdc.cells import factors
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
