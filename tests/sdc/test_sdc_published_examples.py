"""SDC tables (#56) against the worked examples R's ``sdcTable`` publishes with their figures (GitHub
``sdcTools/sdcTable``): the same data and the same rules in privrelease give the same primary cells, and where
``sdcTable`` publishes a secondary pattern or an intruder's interval, what of it is comparable.

Mapping of ``sdcTable``'s definitions (``R/methods_class_sdcProblem.r`` ``c_rule_freq``, ``R/utils.R``
``domRule``) to the policy's: ``freq`` with ``maxN`` marks cells with 0 < count ≤ maxN, our ``min_frequency``
maxN + 1; ``nk`` marks ``sum(top n) > k/100 · total``, ours alike; ``p`` marks ``total − x1 − x2 < p/100 · x1``, ours
alike; ``pq`` marks ``total − x1 − x2 < (p/q) · x1``, our p% with p = 100·p/q. Each record is a contributor (no id
variable there, no cluster here). Its default protection (``R/methods_multiple_classes.r``, ``.default_bounds``) is
LPL = UPL = 1, SPL = 0, cells at least 0: ours with ``frequency_range: 1`` on counts below 100 (U = max(1% of X, 1) = 1,
L = min(U, X)). Its OPT minimises the suppressed cells' counts (weights default to the frequencies); our ``cost:
value`` minimises the counts plus 1 per cell. Cells are matched by their labels, never by ``sdcTable``'s index
(``tests/testthat/test-cell_info.R`` gives the labels of indices 5, 6, 14 and 15)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from privrelease.core.mechanisms import sdc_table
from privrelease.core.sdc.cells import audit, linked, rules, secondary, table

# ``data-raw/microdata1.R`` (the package's ``microdata1``): 100 records, region, gender (m/f) and val, in its order.
REGION = "CCAACDDAACABBBCDABCABDACDDABDCCBBBBDCDBCBADBBDBCCBACDBCBBACDBADDAADDDACBBDDBDDABBCABBBCACCCDBDBBDBAB"
GENDER = "mmmmmfffmmffmmffmmmmmmmffmmfmmfmfffmfmfmmmfffmfmffmfffmmfmfmmmffmmffmmfmfffffmmfffmmmmmmmfmmfffmmfmm"
VAL = [9, 11, 10, 11, 18, 10, 6, 9, 5, 12, 11, 10, 11, 5, 10, 11, 7, 7, 10, 13, 12, 280, 15, 12, 16, 9, 13, 16, 9, 6, 11,
       14, 12, 8, 18, 8, 7, 7, 11, 11, 15, 6, 14, 8, 12, 9, 14, 6, 12, 13, 9, 9, 9, 7, 6, 9, 9, 7, 9, 8, 10, 9, 7, 6, 8, 9,
       14, 10, 7, 10, 19, 10, 14, 11, 9, 5, 11, 8, 10, 13, 8, 9, 18, 7, 10, 8, 11, 6, 6, 8, 12, 11, 10, 18, 9, 8, 10, 7, 12,
       14]  # fmt: skip


def _microdata1() -> pd.DataFrame:
    return pd.DataFrame({"region": list(REGION), "gender": [{"m": "male", "f": "female"}[g] for g in GENDER], "val": VAL})


def _params(group_by, tables, hierarchies=None, **request) -> sdc_table.Params:
    policy = {"keys": {"categorical": group_by}, "publishable": ["val"], "hierarchies": hierarchies or {}, "tables": tables}
    return sdc_table.Params.model_validate(
        {"group_by": group_by, "subtotals": list(hierarchies or {})} | request | {"policy": policy}
    )


def _labelled(t: table.Table) -> list[tuple[str, ...]]:
    """Each cell's labels, one per dimension (``Total`` for a margin)."""
    return [tuple(d.labels[i] for d, i in zip(t.dims, row)) for row in t.nodes()]


def _primary(frame: pd.DataFrame, params: sdc_table.Params) -> tuple[set, dict]:
    t = sdc_table.tabulate(frame, params)
    sensitive = rules.primary(params.policy.tables, params.measure, t.contributors, t.values, t.top)[0]
    cells = _labelled(t)
    return {cells[i] for i in np.flatnonzero(sensitive)}, dict(zip(cells, t.values))


# -- sdcTable's microdata1: region A-D × gender ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "tables, measure, expected",
    [
        ({"min_frequency": 3}, "count", {("A", "female")}),  # freq maxN = 2: index 6
        ({"min_frequency": 4}, "count", {("A", "female")}),  # freq maxN = 3 (sdc_testproblem(with_supps = TRUE))
        ({"dominance": {"n": 2, "k": 75}}, "sum", {("A", "female"), ("D", "male")}),  # nk: indices 6, 14
        ({"p_percent": {"p": 70}}, "sum", {("A", "female"), ("D", "male")}),  # p = 70: indices 6, 14
        ({"p_percent": {"p": 75}}, "sum", {("A", "female"), ("D", "male")}),  # pq = (60, 80): p/q = 0.75
    ],
)
def test_microdata1s_primary_cells_are_sdcTables(tables, measure, expected):
    """``tests/testthat/test-primarySuppression.r`` on ``sdc_testproblem()`` (``R/test_problems.R``: microdata1,
    region total → A..D, gender total → male, female, numVar val): freq maxN = 2 marks one cell, index 6; nk
    (n = 2, k = 75) on val marks indices 6 and 14; p = 70 marks 6 and 14; pq = (60, 80) marks 6 and 14.
    ``test-cell_info.R`` names index 6 A × female (``u`` after maxN = 3, the only one) and index 14 D × male (freq
    11, val 366). The same rules here mark exactly those cells, of the 15."""
    extra = {"measure": "sum", "column": "val"} if measure == "sum" else {}
    marked, values = _primary(_microdata1(), _params(["region", "gender"], tables, **extra))
    assert marked == expected
    assert values[("D", "male")] == (366 if measure == "sum" else 11)  # test-cell_info.R's figures for index 14
    assert len(values) == 15


def test_microdata1s_exact_secondary_pattern_is_sdcTables_OPT():
    """``tests/testthat/test-protectTable.r``: microdata1 (region A..D × gender), A × female made primary, protected
    by OPT (and HITAS, HYPERCUBE, SIMPLEHEURISTIC alike): 3 secondary suppressions, the non-``s`` cells indices 5, 6,
    11, 12, i.e. A × male, A × female, C × male, C × female (cells ordered region-major, gender male then female, as
    ``test-cell_info.R``'s indices show). Here min_frequency 3 marks A × female alone (its count is 2), its protection
    1 either way (``frequency_range: 1``, sdcTable's default LPL = UPL = 1); the exact method minimising the
    suppressed counts (+1 a cell) suppresses the same rectangle: its cost (A×male 18 + C 22) is the least of any
    pattern, every one needing at least 3 more cells, so the +1 a cell cannot change the optimum."""
    params = _params(["region", "gender"], {"min_frequency": 3, "frequency_range": 1, "cost": "value"}, secondary="exact")
    frame = _microdata1()
    result = sdc_table.run(frame, params, sdc_table.plan(params), np.random.default_rng(0))
    sdc_table.check(frame, result, params)
    status = result.data.set_index(["region", "gender"])["status"]
    assert status[status == "primary"].index.tolist() == [("A", "female")]
    assert sorted(status[status == "secondary"].index) == [("A", "male"), ("C", "female"), ("C", "male")]
    assert (status == "published").sum() == 11  # test-protectTable.r: 11 publishable cells
    assert result.internal["audit_passed"]


# -- the 4 × 4 table of tests/testthat/test-simpleheuristic.R ----------------------------------------------------------

INNER = {"w": [30, 47, 64, 89], "x": [90, 124, 5, 31], "y": [92, 100, 59, 85], "z": [800, 991, 651, 685]}  # v2 a..d
PRIMARY = [("w", "a"), ("w", "b"), ("w", "c"), ("x", "a"), ("x", "c"), ("y", "b"), ("y", "d"), ("z", "b"), ("z", "d")]


def _four_by_four():
    d1, d2 = table.dimension("v1", list("wxyz")), table.dimension("v2", list("abcd"))
    values = np.zeros((5, 5))
    for r, row in INNER.items():
        values[d1.leaf[r], [d2.leaf[c] for c in "abcd"]] = row
    values[0, :], values[:, 0] = values[1:, :].sum(axis=0), values[:, 1:].sum(axis=1)  # margins from the inner cells
    cell = {(r, c): i * 5 + j for i, r in enumerate(d1.labels) for j, c in enumerate(d2.labels)}
    sensitive = np.zeros(25, dtype=bool)
    sensitive[[cell[p] for p in PRIMARY]] = True
    one = sensitive.astype(float)  # sdcTable's default protection: 1 below and 1 above
    return table.relations((5, 5), [d1, d2]), values.ravel(), sensitive, one, cell


def test_the_simpleheuristic_examples_pattern_and_the_intruders_interval_are_sdcTables():
    """``tests/testthat/test-simpleheuristic.R`` (the same table as ``problemdata()`` in ``R/test_problems.R``): a
    4 × 4 table of counts (v1 w..z × v2 a..d, margins summed from the inner cells by makeProblem) with 9 cells made
    primary by hand. Its comment: with at least 2 suppressions in every relation, w × b (47) can still be recomputed
    exactly (SIMPLEHEURISTIC_OLD adds nothing and leaves it so); SIMPLEHEURISTIC adds exactly 1 suppression, after
    which ``attack(to_attack = 8)`` gives w × b (freq 47) the interval [0, 78]. Here the audit finds w × b, and only
    it, pinned at [47, 47]; the exact method, least count or least total, adds one cell; minimising the total it adds
    x × d (31), and the intruder's interval for w × b is then [0, 78] exactly as published (of the single cells that
    protect the table, x × d is the only one that gives [0, 78]: the published bounds name the cell sdcTable chose)."""
    a, values, sensitive, one, cell = _four_by_four()
    empty = np.zeros(25, dtype=bool)
    weak = audit.audit(a, values, sensitive, sensitive, one, one)
    assert weak.exposed.tolist() == [cell["w", "b"]]
    i = weak.cells.tolist().index(cell["w", "b"])
    assert weak.low[i] == pytest.approx(47) and weak.high[i] == pytest.approx(47)
    for cost in ("count", "value"):
        pattern = secondary.exact(a, values, sensitive, one, one, empty, cost)
        assert pattern.optimal and (pattern.suppressed & ~sensitive).sum() == 1
        assert audit.audit(a, values, pattern.suppressed, sensitive, one, one).passed
    assert np.flatnonzero(pattern.suppressed & ~sensitive).tolist() == [cell["x", "d"]]  # cost: value
    low, high = audit.intervals(a, values, pattern.suppressed, np.array([cell["w", "b"]]))
    assert (low[0], high[0]) == (pytest.approx(0), pytest.approx(78))
    giving_78 = []
    for c in np.flatnonzero(~sensitive):
        s = sensitive.copy()
        s[c] = True
        low, high = audit.intervals(a, values, s, np.array([cell["w", "b"]]))
        if low[0] == pytest.approx(0) and high[0] == pytest.approx(78):
            giving_78.append(int(c))
    assert giving_78 == [cell["x", "d"]]


# -- the linked tables of tests/testthat/test-linked-tables.r ------------------------------------------------------------

COUNTS = {"A": 2, "B": 2, "I": 8, "J": 8, "K": 3, "L": 3, "M": 3, "N": 7}
BY_COUNTY = [{"A": "county-1", "B": "county-1", "I": "county-1", "J": "county-1",
              "K": "county-2", "L": "county-2", "M": "county-2", "N": "county-2"}]  # fmt: skip
BY_SIZE = [{v: ("big" if v in "LM" else "small") for v in COUNTS}]


def _linked(levels, also: tuple[str, ...] = ()) -> linked.Linked:
    frame = pd.DataFrame({"region": [v for v, n in COUNTS.items() for _ in range(n)]})
    dims = [table.dimension("region", sorted(COUNTS), levels)]
    t = table.build(frame, dims, np.ones(len(frame)), np.arange(len(frame)))
    r = rules.TableRules(min_frequency=4, frequency_range=1)  # freq maxN = 3
    sensitive, lower, upper, _ = rules.primary(r, "count", t.contributors, t.values, t.top)
    suppressed = sensitive | np.isin(dims[0].labels, also)
    return linked.Linked("t", t, suppressed, sensitive, lower, upper)


def test_the_linked_tables_example_of_sdcTable():
    """``tests/testthat/test-linked-tables.r``: regions A..N (counts 2, 2, 8, 8, 3, 3, 3, 7), one table by county
    (county-1: A, B, I, J; county-2: K..N), one by size (big: L, M; small: the rest), freq maxN = 3 in both: 5
    primary cells each (A, B, K, L, M), no secondary needed and every cell protected alone; together, small −
    county-1 = K + N = 10 and N (7) is published, so K = 3 (the test's comment calls it B; the cell is K);
    ``protect_linked_tables`` suppresses N in both tables (1 secondary each). Here: 5 primaries each, each table
    passes its own audit, the linked audit exposes K in both and only K; N suppressed in both, it passes; N suppressed
    in one table alone, the other publishes it and K is exposed again."""
    county, size = _linked(BY_COUNTY), _linked(BY_SIZE)
    for t in (county, size):
        labels = t.table.dims[0].labels
        assert sorted(labels[i] for i in np.flatnonzero(t.sensitive)) == ["A", "B", "K", "L", "M"]
        a = table.relations(t.table.shape, t.table.dims)
        assert audit.audit(a, t.table.values, t.suppressed, t.sensitive, t.lower, t.upper).passed
    exposed = linked.audit([county, size])
    assert [[t.table.dims[0].labels[i] for i in e] for t, e in zip((county, size), exposed)] == [["K"], ["K"]]
    both = linked.audit([_linked(BY_COUNTY, ("N",)), _linked(BY_SIZE, ("N",))])
    assert all(e.size == 0 for e in both)
    one = linked.audit([_linked(BY_COUNTY, ("N",)), size])
    assert any(e.size for e in one)


# -- the vignette's table (vignettes/sdcTable.rmd) ------------------------------------------------------------------------

# ``vignettes/completedat.rds`` (and ``microdat.rds``, 1000 records, the same counts): the counts by V1 (A, Ba, Bb,
# Bc, C, D), V2 (m, w) and V3 (a..f).
LEAVES = {"A": [[12, 16, 11, 13, 6, 22], [19, 21, 15, 11, 13, 10]], "Ba": [[18, 15, 26, 7, 13, 18], [12, 12, 10, 13, 15, 16]],
          "Bb": [[18, 10, 15, 15, 9, 18], [12, 6, 21, 12, 21, 16]], "Bc": [[10, 17, 7, 13, 14, 19], [18, 12, 21, 16, 11, 18]],
          "C": [[11, 12, 11, 8, 10, 14], [16, 12, 15, 14, 17, 10]], "D": [[13, 10, 14, 14, 12, 16], [19, 16, 11, 8, 9, 15]]}  # fmt: skip


def test_the_vignettes_table_has_sdcTables_15_primary_cells():
    """The vignette (``vignettes/sdcTable.rmd``, rendered ``articles/sdcTable.md`` on gh-pages): 1000 records by V1
    (Tot → A, B, C, D; B → Ba, Bb, Bc), V2 (m, w), V3 (a..f), 168 cells; ``primarySuppression(type = "freq", maxN =
    10)`` leaves 153 ``s`` and 15 ``u``; it prints, among others, Tot×Tot×Tot 1000, Tot×Tot×a..e 178, 159, 177, 144,
    150, C×Tot×f 24, Tot×m×f 107, B×m×f 55, Tot×w×f 85, B×w×f 50 (which check the counts' transcription).
    min_frequency 11 marks the same 15 of 168 cells here: every cell of count at most 10. (Its secondary figures, OPT
    22 cells minimising the suppressed counts, HITAS 13, are not compared: our exact optimum minimises another cost,
    and a count-minimal one takes a minute.)"""
    rows = [(v1, v2, v3) for v1, by in LEAVES.items() for v2, r in zip("mw", by) for v3, n in zip("abcdef", r) for _ in range(n)]
    frame = pd.DataFrame(rows, columns=["V1", "V2", "V3"])
    params = _params(["V1", "V2", "V3"], {"min_frequency": 11}, {"V1": [{"Ba": "B", "Bb": "B", "Bc": "B"}]})
    marked, values = _primary(frame, params)
    assert len(values) == 168 and len(marked) == 15
    assert marked == {c for c, v in values.items() if v <= 10}
    published = {("Total", "Total", "Total"): 1000, ("Total", "Total", "a"): 178, ("Total", "Total", "b"): 159,
                 ("Total", "Total", "c"): 177, ("Total", "Total", "d"): 144, ("Total", "Total", "e"): 150,
                 ("C", "Total", "f"): 24, ("Total", "m", "f"): 107, ("B", "m", "f"): 55, ("Total", "w", "f"): 85,
                 ("B", "w", "f"): 50}  # fmt: skip
    assert {c: values[c] for c in published} == published
