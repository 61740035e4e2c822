"""An SDC table by the cell key method (``method: cell_key``): every cell published, its count perturbed by the noise
its own records select (``privrelease.core.sdc.cells.cellkey``), so the same cell gets the same count in every table.

Each record's key (``privrelease.core.noise.keys``: an integer below 2^32, the same at every release) comes with the
prepared rows (``enforce.RECORD_KEY``); a cell's key is its records' keys summed (``cellkey.cell_keys``). The steward's
perturbation table (the policy's ``tables.cell_key``: D, V, js) picks the cell's perturbation; margins and
sub-totals are cells of their own, so additivity is not restored (as the ABS does not). Counts only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from privrelease.core.errors import InternalError
from privrelease.core.mechanisms.base import Result
from privrelease.core.mechanisms.sdc_table import report as out
from privrelease.core.sdc.cells import cellkey
from privrelease.core.sdc.cells.table import Table
from privrelease.core.sdc.enforce import RECORD_KEY


def run(t: Table, frame: pd.DataFrame, params, rules) -> Result:
    """The perturbed table, its pivot, its figures and the steward's internal ones (the perturbations' sizes)."""
    rule = rules.cell_key
    counts = np.rint(t.values).astype(np.int64)
    if RECORD_KEY not in frame.columns:
        raise InternalError("a cell key table's rows came without their records' keys")
    shown = cellkey.perturb(counts, cellkey.cell_keys(t, frame, frame[RECORD_KEY].to_numpy()), rule)
    status = np.full(t.size, "published", dtype=object)
    tidy = out.tidy(Table(t.dims, shown.astype(float), t.contributors, t.top), status, params)
    changed = shown != counts
    figures = {"cells": int(t.size), "published": int(t.size), "perturbation": {"D": rule.D, "V": rule.V, "js": rule.js}}
    internal = {
        "measure": out.value_column(params),
        "method": "cell key",
        "cells_changed": int(changed.sum()),
        "mean_absolute_perturbation": float(np.abs(shown - counts).mean()) if t.size else 0.0,
        "largest_perturbation": int(np.abs(shown - counts).max(initial=0)),
    }
    return Result(
        tidy,
        {"method": "cell key", "rules": [words(rule)]} | figures,
        _report(figures, params, rule),
        [],
        {"cells": figures["cells"], "method": "cell key"},
        name="table",
        tables={"pivot": out.pivot(tidy, params)},
        internal=internal,
    )


def check(t: Table, frame: pd.DataFrame, result: Result, params, rules) -> None:
    """Every cell within D of its count, never 1..js, a zero kept: else the run failed (nothing published)."""
    rule, value = rules.cell_key, out.value_column(params)
    shown = result.data[value].to_numpy(dtype=np.int64)
    counts = np.rint(t.values).astype(np.int64)
    if len(shown) != t.size or (np.abs(shown - counts) > rule.D).any() or (shown < 0).any():
        raise InternalError("a cell key table published a count beyond its perturbation")
    if ((shown >= 1) & (shown <= rule.js)).any() or (shown[counts == 0] != 0).any():
        raise InternalError("a cell key table published a small count its perturbation table forbids")


def words(rule) -> str:
    return f"every count perturbed by at most {rule.D} (variance {rule.V:g}) by its cell's key" + (
        f", none published from 1 to {rule.js}" if rule.js else ""
    )


def _report(figures: dict, params, rule) -> str:
    by = " × ".join(params.group_by)
    return (
        f"## SDC table: counts by {by}, by the cell key method\n\n"
        f"Every cell is published with its count perturbed (not differential privacy): {words(rule)}. The "
        "perturbation is picked by the cell's key, the sum of its records' keys, so the same cell has the same count "
        "in every table of this dataset. Margins and sub-totals are perturbed as cells of their own: they need not add "
        f"up. {figures['cells']} cells.\n"
    )
