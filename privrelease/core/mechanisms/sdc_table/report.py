"""What an SDC table releases and says: the tidy table, its pivoted view, the figures, the report and the steward's
internal figures (each sensitive cell's protection and the intruder's interval, the information lost)."""

from __future__ import annotations

import numpy as np
import pandas as pd

MISSING = "(missing)"
FIGURES = ("cells", "published", "primary", "secondary", "empty", "secondary_method")
SHOWN = {"published": "{v}", "primary": "x", "secondary": "x", "empty": "-"}  # τ-ARGUS writes x for a suppressed cell


def value_column(params) -> str:
    return "count" if params.measure == "count" else f"sum_{params.column}"


def tidy(t, status: np.ndarray, params) -> pd.DataFrame:
    """One row per cell: each dimension's label and level (0: its total), the value (none where suppressed), the status."""
    nodes = t.nodes()
    cols: dict[str, object] = {}
    for i, d in enumerate(t.dims):
        cols[d.name] = pd.array(np.array(d.labels, dtype=object)[nodes[:, i]], dtype="string")
        cols[f"{d.name}_level"] = np.array(d.depth, dtype=np.int64)[nodes[:, i]]
    hidden = np.isin(status, ["primary", "secondary"])
    if params.measure == "count":
        value = pd.array(np.rint(t.values).astype(np.int64), dtype="Int64")
    else:
        value = pd.array(np.round(t.values, 6), dtype="Float64")
    value[hidden] = pd.NA
    cols[value_column(params)] = value
    cols["status"] = pd.array(status, dtype="string")
    return pd.DataFrame(cols)


def _label(frame: pd.DataFrame, name: str) -> pd.Series:
    return frame[f"{name}_level"].map(lambda d: "  " * int(d)).astype("string") + frame[name]


def pivot(data: pd.DataFrame, params) -> pd.DataFrame:
    """The table as a person reads it: the last dimension across, the others down (indented by level), x for a
    suppressed cell, - for an empty one."""
    value = value_column(params)
    shown = data[value].astype("string").fillna("")
    text = np.where(data["status"] == "published", shown, data["status"].map(SHOWN).fillna("x"))
    *down, across = params.group_by
    if not down:
        return pd.DataFrame({across: _label(data, across).to_numpy(), value: text})
    columns = list(dict.fromkeys(_label(data, across)))
    width = len(columns)
    rows = len(data) // width
    body = pd.DataFrame(np.asarray(text, dtype=object).reshape(rows, width), columns=columns)
    heads = pd.DataFrame({d: _label(data, d).to_numpy()[::width] for d in down})
    return pd.concat([heads, body], axis=1)


def figures(status: np.ndarray, values: np.ndarray, pattern, audit) -> dict:
    """What the release says of itself (public: how many cells of each status, the method)."""
    count = {s: int((status == s).sum()) for s in ("published", "primary", "secondary", "empty")}
    return {"cells": int(status.size), **count, "secondary_method": pattern.method}


def internal(t, status, pattern, audit, lower, upper, failed, rules, params) -> dict:
    """The steward's figures: each audited cell's value, protection and interval, the information lost."""
    hidden = np.isin(status, ["primary", "secondary"])
    nodes = t.nodes()
    cells = []
    for j, c in enumerate(audit.cells):
        where = {d.name: d.labels[nodes[c, i]] for i, d in enumerate(t.dims)}
        cells.append(
            {
                "cell": where,
                "status": str(status[c]),
                "value": float(t.values[c]),
                "protection": [float(t.values[c] - lower[c]), float(t.values[c] + upper[c])],
                "interval": [float(audit.low[j]), float(audit.high[j])],
                "rules_failed": int(failed[c]),
            }
        )
    return {
        "measure": value_column(params),
        "secondary_method": pattern.method,
        "exact_optimum_proved": bool(pattern.optimal),
        "suppressed_cells": int(hidden.sum()),
        "suppressed_total": float(t.values[hidden].sum()),
        "table_total": float(t.values[0]),
        "audit_passed": bool(audit.passed),
        "cells": cells,
    }


def report(figures: dict, params, rules) -> str:
    by = " × ".join(params.group_by)
    what = "counts" if params.measure == "count" else f"sums of `{params.column}`"
    said = "; ".join(rules.words().values())
    return (
        f"## SDC table: {what} by {by}\n\n"
        f"Cell suppression (not differential privacy), by the disclosure policy's rules: {said}. Margins and "
        f"sub-totals are cells of their own ({'sub-totals of ' + ', '.join(params.subtotals) if params.subtotals else 'totals only'}).\n\n"
        f"| cells | published | primary | secondary | empty |\n|---|---|---|---|---|\n"
        f"| {figures['cells']} | {figures['published']} | {figures['primary']} | {figures['secondary']} | {figures['empty']} |\n\n"
        f"Secondary suppression: {figures['secondary_method']}. The audit (the intruder's linear programs over the "
        "published cells and the table's relations) found every primary cell's feasible interval at least as wide as "
        "its protection interval; a table where it did not is never published. An x in `pivot.csv` is a suppressed "
        "cell, a - an empty one.\n"
    )
