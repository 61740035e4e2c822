"""SDC tables (#56) against τ-ARGUS's own expected output: scenario 2 of the τ-ARGUS GUI tests published in
``sdcTools/checkTauArgus`` (``vignettes/GUItests.Rmd``; its data in ``inst/doc/TEST.zip`` and τ-ARGUS's saved table in
``inst/doc/OUTPUT.zip``, ``OUTPUT/test_1.txt``). The package is GPL-3, so its files are not copied here: unzip both
into one folder and name it.

Scenarios 2–4 use ``example_enterprise.asc`` (8,169 enterprises: holding id, NACE division ``act`` under its sections
by ``nace_divisions.hrc``, ``product``, ``region`` under ``KohStatReg.hrc``, municipality ``mun`` under region and
cohesion region by ``NUTS.hrc``, turnover) and the p%-rule at p = 10 on holdings (τ-ARGUS: "Hold-1" P 10, N 1, "Use
holdings info"), "Missing=safe" (act's missing code is ``00``), each table of turnover: act × product (scenario 2),
act × region (scenario 3's second linked table), region × mun (scenario 4). The same in privrelease: the holding as
the policy's ``cluster`` (contributions summed per holding), ``p_percent: {p: 10}``, the hierarchies from the same
files. τ-ARGUS's status 3 is a primary cell. Two differences of representation are mapped, not hidden: a sub-total
with a single code below it is one cell here (the same total: τ-ARGUS lists it twice), and τ-ARGUS leaves a missing
code safe by its Missing=safe option where privrelease applies the rule to it as to any code. Secondary patterns are
not compared (τ-ARGUS's hypercube and modular methods against privrelease's own, each audited its own way).

Run: .venv/bin/python bench/tauargus_crosscheck.py <folder holding TEST/ and OUTPUT/>
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from privrelease.core.mechanisms import sdc_table  # noqa: E402
from privrelease.core.sdc.cells import rules  # noqa: E402

MISSING = {"act": "00"}  # missing codes in example_enterprise.rda ("act 10 2 00"); region and mun have none
HIERARCHIES = {"act": "nace_divisions.hrc", "region": "KohStatReg.hrc", "mun": "NUTS.hrc"}
TABLES = {  # τ-ARGUS's saved table: (its dimensions, the scenario that saved it)
    "test_1.txt": (("act", "product"), "scenario 2: act × product"),
    "test_2b.txt": (("act", "region"), "scenario 3: act × region (the second of its linked tables)"),
    "test_3a.txt": (("region", "mun"), "scenario 4: region × municipality, both hierarchical"),
}


def enterprises(folder: Path) -> pd.DataFrame:
    """``example_enterprise.asc`` by its metadata (``example_enterprise.rda``): fixed columns 1–9, 10–11, 12–13,
    14–15, 16–18, 19–26."""
    lines = (folder / "TEST" / "example_enterprise.asc").read_text().splitlines()
    rows = [(s[0:9], s[9:11], s[11:13], s[13:15], s[15:18], float(s[18:26])) for s in lines if s.strip()]
    return pd.DataFrame(rows, columns=["holding", "act", "product", "region", "mun", "turnover"])


def parents(folder: Path, name: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Each code's parent in a τ-ARGUS hierarchy file (a code, then its children led by one more ``@``), and the codes
    the file lists under more than one parent (each with those parents: here the last one counts)."""
    out, line_of_depth, seen = {}, {}, {}
    for line in (folder / "TEST" / name).read_text().split():
        depth = len(line) - len(line.lstrip("@"))
        code = line[depth:]
        line_of_depth[depth] = code
        if depth:
            out[code] = line_of_depth[depth - 1]
            seen.setdefault(code, []).append(out[code])
    return out, {c: p for c, p in seen.items() if len(set(p)) > 1}


def levels(codes: list[str], parent: dict[str, str]) -> list[dict[str, str]]:
    """The policy's hierarchy of a dimension: level 1 maps each code present to its parent, level 2 each parent to its
    own, and so on; a code the file lacks (a missing code) is its own parent at every level."""
    out, current = [], sorted(codes)
    while any(c in parent for c in current):
        step = {c: parent.get(c, c) for c in current}
        out.append(step)
        current = sorted(set(step.values()))
    return out


def ours(frame: pd.DataFrame, dims: tuple[str, ...], hierarchies: dict) -> tuple[set, dict]:
    """privrelease's primary cells (labels; ``Total`` for a margin) and every cell's total."""
    policy = {"keys": {"categorical": list(dims)}, "publishable": ["turnover"], "cluster": "holding",
              "hierarchies": hierarchies, "tables": {"p_percent": {"p": 10}}}  # fmt: skip
    params = sdc_table.Params.model_validate(
        {"group_by": list(dims), "subtotals": list(hierarchies), "measure": "sum", "column": "turnover", "policy": policy}
    )
    t = sdc_table.tabulate(frame, params)
    sensitive = rules.primary(params.policy.tables, params.measure, t.contributors, t.values, t.top)[0]
    cells = [tuple(d.labels[i] for d, i in zip(t.dims, row)) for row in t.nodes()]
    return {cells[i] for i in np.flatnonzero(sensitive)}, dict(zip(cells, t.values))


def theirs(folder: Path, name: str) -> tuple[set, dict]:
    """τ-ARGUS's primary cells (status 3) and its non-empty cells' totals (status 14 is empty)."""
    primary, values = set(), {}
    for line in (folder / "OUTPUT" / name).read_text().splitlines():
        *labels, value, status = (x.strip().strip('"').strip() for x in line.split(","))
        if status != "14":
            values[tuple(labels)] = float(value)
            if status == "3":
                primary.add(tuple(labels))
    return primary, values


def alone(levels_: list[dict[str, str]]) -> dict[str, str]:
    """Each sub-total with a single code below it, and that code (followed down): one cell here, two in τ-ARGUS."""
    below: dict[str, set[str]] = {}
    for step in levels_:
        for child, parent in step.items():
            if child != parent:
                below.setdefault(parent, set()).add(child)
    single = {p: next(iter(c)) for p, c in below.items() if len(c) == 1}
    out = {}
    for p in single:
        code = p
        while code in single:
            code = single[code]
        out[p] = code
    return out


def compare(folder: Path, frame: pd.DataFrame, name: str, dims: tuple[str, ...], what: str) -> None:
    read = {d: parents(folder, HIERARCHIES[d]) for d in dims if d in HIERARCHIES}
    hierarchies = {d: levels(frame[d].unique().tolist(), parent) for d, (parent, _) in read.items()}
    twice = {f"{HIERARCHIES[d]}: {c} under {' and '.join(p)}" for d, (_, dup) in read.items() for c, p in dup.items()}
    lone = {d: alone(h) for d, h in hierarchies.items()}

    def cell(c: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(lone.get(d, {}).get(label, label) for d, label in zip(dims, c))

    def missing(c: tuple[str, ...]) -> bool:
        return any(MISSING.get(d) == label for d, label in zip(dims, c))

    mine, totals = ours(frame, dims, hierarchies)
    primary, values = theirs(folder, name)
    compared = {cell(c) for c in values}
    differ = [c for c in values if cell(c) in totals and abs(totals[cell(c)] - values[c]) > 0.005]
    absent = [c for c in compared if c not in totals]
    tau, here = {cell(c) for c in primary}, {cell(c) for c in mine if not missing(c)}
    print(f"## {what} ({name})")
    print(
        f"cells compared {len(compared):,}; totals that differ from τ-ARGUS's {len(differ)}; not in privrelease's table {len(absent)}"
    )
    print(f"primary cells: τ-ARGUS {len(tau)}, privrelease {len(here)}; the same cells: {tau == here}")
    print(f"only τ-ARGUS {sorted(tau - here)}; only privrelease {sorted(here - tau)}")
    if twice:
        print(f"codes a hierarchy file lists under two parents ({'; '.join(sorted(twice))}): τ-ARGUS keeps both places, "
              "this script the last, so the totals over that code's first block differ")  # fmt: skip
    print(
        f"privrelease's primary cells of a missing code (τ-ARGUS: safe, Missing=safe): {len(mine) - len([c for c in mine if not missing(c)])}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path, help="TEST.zip and OUTPUT.zip of sdcTools/checkTauArgus, unzipped here")
    folder = parser.parse_args().folder
    frame = enterprises(folder)
    print(f"{len(frame):,} enterprises, {frame['holding'].nunique():,} holdings")
    for name, (dims, what) in TABLES.items():
        compare(folder, frame, name, dims, what)


if __name__ == "__main__":
    main()
