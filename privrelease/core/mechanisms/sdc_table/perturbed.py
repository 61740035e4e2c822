"""An SDC table by the cell key method (``method: cell_key``): every cell published, its count perturbed by the noise
its own records select (``privrelease.core.sdc.cells.cellkey``), so the same cell gets the same count in every table;
a sum made of its contributions each multiplied by the factor its contributor's key selects (``sums``,
``privrelease.core.sdc.cells.factors``), so every cell, a margin too, is a sum of the same perturbed contributions.

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
from privrelease.core.sdc.cells import cellkey, factors
from privrelease.core.sdc.cells.table import Table
from privrelease.core.sdc.enforce import FACTOR_KEY, RECORD_KEY


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
    how = (
        "The perturbation is picked by the cell's key, the sum of its records' keys, so the same cell has the same "
        "count in every table of this dataset. Margins and sub-totals are perturbed as cells of their own: they need "
        "not add up."
    )
    return _published(tidy, params, words(rule), how, figures, internal)


def _published(tidy: pd.DataFrame, params, said: str, how: str, figures: dict, internal: dict) -> Result:
    """A cell key table's result: the tidy table and its pivot, the rule in words, its figures and its report."""
    what = "counts" if params.measure == "count" else f"sums of {params.column}"
    empty = f", {figures['empty']} of them empty" if "empty" in figures else ""
    report = (
        f"## SDC table: {what} by {' × '.join(params.group_by)}, by the cell key method\n\n"
        f"Every cell is published with its {params.measure} perturbed (not differential privacy): "
        f"{said}. {how} {figures['cells']} cells{empty}.\n"
    )
    return Result(
        tidy,
        {"method": "cell key", "rules": [said]} | figures,
        report,
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


def factors_of(frame: pd.DataFrame, rule) -> np.ndarray:
    """Each row's factor, from its contributor's key (``enforce.FACTOR_KEY``) and the steward's ``low`` and ``high``."""
    if FACTOR_KEY not in frame.columns:
        raise InternalError("a cell key table of sums came without its contributors' keys")
    return factors.factor(frame[FACTOR_KEY].to_numpy(dtype=np.float64), rule.low, rule.high)


def sums(t: Table, moved: Table, params, rules) -> Result:
    """The table of perturbed sums (``moved``: ``t`` tabulated from the perturbed contributions), its pivot, its
    figures and the steward's internal ones (the cells' relative changes)."""
    rule, p = rules.cell_key_sums, rules.p_percent.p
    status = np.full(t.size, "published", dtype=object)
    status[t.contributors == 0] = "empty"
    tidy = out.tidy(moved, status, params)
    held = t.values > 0
    change = np.abs(moved.values[held] / t.values[held] - 1)
    chance = factors.guess_chance(rule.low, rule.high, p)
    figures = {
        "cells": int(t.size),
        "published": int((status == "published").sum()),
        "empty": int((status == "empty").sum()),
        "factors": {"low": rule.low, "high": rule.high, "guess_chance": round(chance, 4), "precision_percent": p},
    }
    internal = {
        "measure": out.value_column(params),
        "method": "cell key",
        "median_relative_change": float(np.median(change)) if change.size else 0.0,
        "largest_relative_change": float(change.max(initial=0)),
    }
    how = (
        "A contributor's factor is the same in every table of this dataset (its mean is 1), so the same cell has the "
        "same sum in every table, and margins and sub-totals are the sums of the cells below them."
    )
    return _published(tidy, params, sum_words(rules), how, figures, internal)


def check_sums(t: Table, result: Result, params, rules) -> None:
    """Every sum within its contributions' smallest and largest factors, an empty cell zero: else the run failed."""
    rule, value = rules.cell_key_sums, out.value_column(params)
    shown = result.data[value].to_numpy(dtype=np.float64)
    least, most = factors.reach(rule.low, rule.high)
    least, most = least * (1 - factors.ROUNDED), most * (1 + factors.ROUNDED)  # each contribution rounded
    slack = 1e-6 * np.maximum(1.0, t.values)  # the published rounding
    if len(shown) != t.size or (shown < least * t.values - slack).any() or (shown > most * t.values + slack).any():
        raise InternalError("a cell key table published a sum beyond its contributions' factors")
    if (shown[t.contributors == 0] != 0).any():
        raise InternalError("a cell key table published an empty cell as other than zero")


def setting(params) -> dict:
    """The perturbation a cell key table is published under (public): the count table's or the sums' factors."""
    tables = params.policy.tables
    if params.measure == "count":
        return tables.cell_key.model_dump(mode="json")
    keyed = {"cluster": params.policy.cluster}  # the factors' keys are of its ids: another cluster, other factors
    return tables.cell_key_sums.model_dump(mode="json", include={"low", "high"}) | keyed  # max_guess moves none


def conflict(params, then) -> str | None:
    """Why a table ``params`` asks may not follow ``then`` (an earlier table of the same measure and column from
    the dataset), with what to ask instead, or None: sums by both methods, or the cell key method under another
    perturbation."""
    if params.measure == "sum" and then.method != params.method:
        return (
            f"sums of {params.column} were published from this dataset by method {then.method}, and a column's sums "
            "are published by one method (a cell's exact sum beside its perturbed one would give the perturbation "
            f"away, and with it the cell's contributions): ask for method: {then.method}"
        )
    if params.method == then.method == "cell_key" and setting(then) != setting(params):
        what, field = (
            ("counts", "tables.cell_key")
            if params.measure == "count"
            else (f"sums of {params.column}", "tables.cell_key_sums and cluster")
        )
        return (
            f"this dataset's {what} were published by the cell key method under {setting(then)}, and the policy now "
            f"sets {setting(params)}: the same keys through another perturbation would give a second view of every "
            f"cell, and the two together its value; the data steward restores the policy's {field} to what they were"
        )
    return None


def sum_words(rules) -> str:
    rule = rules.cell_key_sums
    chance = factors.guess_chance(rule.low, rule.high, rules.p_percent.p)
    return (
        f"every contribution multiplied or divided by 1 + c, c from {rule.low:g} to {rule.high:g}, by its "
        f"contributor's key; an intruder who knows every other contribution guesses one within "
        f"{rules.p_percent.p:g}% with chance at most {chance:.3f} (the policy allows {rule.max_guess:g})"
    )
