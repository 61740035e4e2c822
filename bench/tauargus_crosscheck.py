"""SDC tables (#56) against τ-ARGUS's own expected output: scenario 2 of the τ-ARGUS GUI tests published in
``sdcTools/checkTauArgus`` (``vignettes/GUItests.Rmd``; its data in ``inst/doc/TEST.zip`` and τ-ARGUS's saved table in
``inst/doc/OUTPUT.zip``, ``OUTPUT/test_1.txt``). The package is GPL-3, so its files are not copied here: unzip both
into one folder and name it.

Scenario 2: ``example_enterprise.asc`` (8,169 enterprises: holding id, NACE division ``act`` under its sections by
``nace_divisions.hrc``, ``product``, turnover), the table act × product of turnover, the p%-rule at p = 10 on holdings
(τ-ARGUS: "Hold-1" P 10, N 1, "Use holdings info"), "Missing=safe" (act's missing code is ``00``). The same in
privrelease: the holding as the policy's ``cluster`` (contributions summed per holding), ``p_percent: {p: 10}``, act's
hierarchy from the same file. τ-ARGUS's status 3 is a primary cell. Two differences of representation are mapped,
not hidden: a section with a single division is one cell here (the same total: τ-ARGUS lists it twice), and τ-ARGUS
leaves code ``00`` safe by its Missing=safe option where privrelease applies the rule to it as to any code.

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

MISSING = "00"  # act's missing code in example_enterprise.rda ("act 10 2 00")


def enterprises(folder: Path) -> pd.DataFrame:
    """``example_enterprise.asc`` by its metadata (``example_enterprise.rda``): fixed columns 1–9, 10–11, 12–13, 19–26."""
    lines = (folder / "TEST" / "example_enterprise.asc").read_text().splitlines()
    rows = [(s[0:9], s[9:11], s[11:13], float(s[18:26])) for s in lines if s.strip()]
    return pd.DataFrame(rows, columns=["holding", "act", "product", "turnover"])


def sections(folder: Path) -> dict[str, str]:
    """Each NACE division's section, from ``nace_divisions.hrc`` (a section, then its divisions led by ``@``)."""
    out, current = {}, ""
    for line in (folder / "TEST" / "nace_divisions.hrc").read_text().split():
        if line.startswith("@"):
            out[line[1:]] = current
        else:
            current = line
    return out


def ours(frame: pd.DataFrame, section: dict[str, str]) -> tuple[set, dict]:
    """privrelease's primary cells (labels; ``Total`` for a margin) and every cell's total."""
    levels = {a: section.get(a, a) for a in sorted(frame["act"].unique())}
    policy = {"keys": {"categorical": ["act", "product"]}, "publishable": ["turnover"], "cluster": "holding",
              "hierarchies": {"act": [levels]}, "tables": {"p_percent": {"p": 10}}}  # fmt: skip
    params = sdc_table.Params.model_validate(
        {"group_by": ["act", "product"], "subtotals": ["act"], "measure": "sum", "column": "turnover", "policy": policy}
    )
    t = sdc_table.tabulate(frame, params)
    sensitive = rules.primary(params.policy.tables, params.measure, t.contributors, t.values, t.top)[0]
    cells = [tuple(d.labels[i] for d, i in zip(t.dims, row)) for row in t.nodes()]
    return {cells[i] for i in np.flatnonzero(sensitive)}, dict(zip(cells, t.values))


def theirs(folder: Path) -> tuple[set, dict]:
    """τ-ARGUS's primary cells (status 3) and its non-empty cells' totals (status 14 is empty)."""
    primary, values = set(), {}
    for line in (folder / "OUTPUT" / "test_1.txt").read_text().splitlines():
        act, product, value, status = (x.strip().strip('"').strip() for x in line.split(","))
        if status != "14":
            values[act, product] = float(value)
            if status == "3":
                primary.add((act, product))
    return primary, values


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path, help="TEST.zip and OUTPUT.zip of sdcTools/checkTauArgus, unzipped here")
    folder = parser.parse_args().folder
    section = sections(folder)
    frame = enterprises(folder)
    mine, totals = ours(frame, section)
    primary, values = theirs(folder)
    divisions: dict[str, list[str]] = {}
    for act in frame["act"].unique():
        divisions.setdefault(section.get(act, act), []).append(act)
    lone = {s: d[0] for s, d in divisions.items() if len(d) == 1 and d[0] != s}  # a section of one division

    def cell(c: tuple[str, str]) -> tuple[str, str]:
        return (lone.get(c[0], c[0]), c[1])

    compared = {cell(c) for c in values}
    differ = [c for c in values if cell(c) in totals and abs(totals[cell(c)] - values[c]) > 0.005]
    tau = {cell(c) for c in primary}
    here = {cell(c) for c in mine if c[0] != MISSING}
    print(f"{len(frame):,} enterprises, {frame['holding'].nunique():,} holdings; τ-ARGUS's non-empty cells {len(values):,}")
    print(f"cell totals that differ from τ-ARGUS's: {len(differ)} of {len(compared)} compared")
    print(f"primary cells: τ-ARGUS {len(tau)}, privrelease {len(here)} (code {MISSING} left out: τ-ARGUS's Missing=safe)")
    print(f"the same cells: {tau == here}; only τ-ARGUS {sorted(tau - here)}; only privrelease {sorted(here - tau)}")
    print(f"privrelease's cells of code {MISSING} its rule marks (τ-ARGUS: safe as missing): "
          f"{sorted(c for c in mine if c[0] == MISSING)}")  # fmt: skip


if __name__ == "__main__":
    main()
