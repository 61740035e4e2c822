"""SDC tables (#56): the heuristic on a 10,000-cell hierarchical table (goal: at most 60 s), and the exact method
against it on a small one.

The table: 200,000 synthetic records by region → district (4 × 5: 25 nodes with the sub-totals), sector → branch
(4 × 5: 25 nodes) and 15 size classes (16 nodes with the total): 25 × 25 × 16 = 10,000 cells. Records fall on the
dimensions by skewed weights, so many inner cells are small (sensitive at min_frequency 5); a magnitude variant
sums a lognormal turnover over 60,000 enterprises (the contributor) under (1, 70)-dominance and the 10%-rule.

    .venv/bin/python bench/bench_sdc_table.py [--linked]

``--linked``: the counts table as published before, then a second table of the same records (district × branch with
their sub-totals, 625 cells) audited with it (``sdc_table.assess`` with the first as an earlier release): the linked
audit's LPs over the 6,000 finest cells, timed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from privrelease.core.mechanisms import sdc_table


def hierarchy(prefix: str, groups: int, members: int) -> tuple[list[str], list[dict[str, str]]]:
    leaves = [f"{prefix}{g}.{m}" for g in range(groups) for m in range(members)]
    return leaves, [{leaf: f"{prefix}{leaf[len(prefix)]}" for leaf in leaves}]


def records(n: int, seed: int = 56) -> tuple[pd.DataFrame, dict]:
    rng = np.random.default_rng(seed)
    districts, h1 = hierarchy("R", 4, 5)
    branches, h2 = hierarchy("S", 4, 5)
    sizes = [f"z{i:02d}" for i in range(15)]

    def pick(values):
        w = rng.dirichlet(np.full(len(values), 3.0))
        return rng.choice(values, n, p=w)

    frame = pd.DataFrame(
        {
            "district": pick(districts),
            "branch": pick(branches),
            "size": pick(sizes),
            "firm": rng.integers(0, 60_000, n),
            "turnover": np.round(rng.lognormal(4, 1.5, n), 2),
        }
    )
    return frame, {"district": h1, "branch": h2}


def policy(hier: dict, **tables) -> dict:
    return {"keys": {"categorical": ["district", "branch", "size"]}, "publishable": ["turnover"], "cluster": "firm",
            "hierarchies": hier, "tables": tables}  # fmt: skip


def timed(frame, request: dict) -> tuple[float, dict, dict]:
    params = sdc_table.Params.model_validate(request)
    start = time.perf_counter()
    result = sdc_table.run(frame, params, sdc_table.plan(params), np.random.default_rng(0))
    return time.perf_counter() - start, result.privacy, result.internal


def linked() -> None:
    from privrelease.core.mechanisms.base import Earlier

    frame, hier = records(200_000)
    rules = policy(hier, min_frequency=5, cost="count")
    first = sdc_table.Params.model_validate(
        {
            "group_by": ["district", "branch", "size"],
            "subtotals": ["district", "branch"],
            "secondary": "heuristic",
            "policy": rules,
        }
    )
    second = sdc_table.Params.model_validate(
        {"group_by": ["district", "branch"], "subtotals": ["district", "branch"], "secondary": "heuristic", "policy": rules}
    )
    results = [sdc_table.run(frame, p, sdc_table.plan(p), np.random.default_rng(0)) for p in (first, second)]
    start = time.perf_counter()
    earlier = [Earlier("first", first.model_dump(mode="json"), results[0].data, True)]
    _, internal, missed = sdc_table.assess(frame, results[1], second, earlier)
    seconds = time.perf_counter() - start
    exposed = {k: len(v) for k, v in internal["linked"].get("exposed", {}).items()}
    print(
        f"linked audit of a 625-cell table with the 10,000-cell one: {seconds:.1f} s; exposed {exposed}; refused {bool(missed)}"
    )


def main() -> None:
    if "--linked" in sys.argv:
        linked()
        return
    frame, hier = records(200_000)
    big = {"group_by": ["district", "branch", "size"], "subtotals": ["district", "branch"], "secondary": "heuristic"}
    for name, tables, extra in [
        ("counts, min_frequency 5", {"min_frequency": 5, "cost": "count"}, {}),
        ("turnover sums, (1,70)-dominance + 10%", {"dominance": {"n": 1, "k": 70}, "p_percent": {"p": 10}},
         {"measure": "sum", "column": "turnover"}),
    ]:  # fmt: skip
        seconds, privacy, internal = timed(frame, big | extra | {"policy": policy(hier, **tables)})
        print(f"10,000-cell table, {name}: {seconds:.1f} s; cells {privacy['cells']}, primary {privacy['primary']}, "
              f"secondary {privacy['secondary']}, empty {privacy['empty']}, audit passed {internal['audit_passed']}")  # fmt: skip
    small, hier = records(3_000, seed=7)
    small = small[small.district.str.startswith("R0") & small.branch.str.startswith("S0")]
    for method in ("exact", "heuristic"):
        request = {"group_by": ["district", "branch"], "secondary": method,
                   "policy": policy(hier, min_frequency=5, cost="value")}  # fmt: skip
        seconds, privacy, internal = timed(small, request)
        print(f"6 x 6 table, {method}: {seconds:.2f} s; primary {privacy['primary']}, secondary {privacy['secondary']}, "
              f"suppressed total {internal['suppressed_total']:.0f} of {internal['table_total']:.0f}, "
              f"optimum proved {internal['exact_optimum_proved']}")  # fmt: skip


if __name__ == "__main__":
    main()
