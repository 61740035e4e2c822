"""An SDC table by the cell key method (``method: cell_key``): every cell published, perturbed by the noise its own
records select (``privrelease.core.sdc.cells.cellkey``), so the same cell gets the same value in every table.

Each record's key (``privrelease.core.noise.keys``: an integer below 2^32, the same at every release) comes with the
prepared rows (``enforce.RECORD_KEY``); a cell's key is its records' keys summed (``cellkey.cell_keys``). The steward's
perturbation table (the policy's ``tables.cell_key``: D, V, js) picks a count's perturbation; a sum moves by steps of
a share of its largest contributions (``share``, ``weights``), a cell the policy's rules find sensitive by ``mu_c``
steps more, and such a cell moved less than its protection stops the release (``assess``). Margins and sub-totals
are cells of their own, so additivity is not restored (as the ABS does not).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from privrelease.core.errors import InternalError
from privrelease.core.mechanisms.base import Result
from privrelease.core.mechanisms.sdc_table import report as out
from privrelease.core.sdc.cells import cellkey
from privrelease.core.sdc.cells import rules as _rules
from privrelease.core.sdc.cells.table import Table
from privrelease.core.sdc.enforce import RECORD_KEY

SHORT = (
    "the cell key method left a sensitive cell's largest contribution guessable by an intruder who knows the others "
    "(with a chance above tables.cell_key.max_guess), or moved the cell less than its protection: the data steward "
    "changes the perturbation (share, D, V, mu_c)"
)
TOLERANCE = 1e-9  # relative: a sensitive cell moved less than its protection by more than rounding is refused


def run(t: Table, frame: pd.DataFrame, params, rules) -> Result:
    """The perturbed table, its pivot, its figures and the steward's internal ones (the perturbations' sizes; for
    sums, each sensitive cell moved less than its protection, which fails the audit)."""
    rule = rules.cell_key
    if RECORD_KEY not in frame.columns:
        raise InternalError("a cell key table's rows came without their records' keys")
    keys = cellkey.cell_keys(t, frame, frame[RECORD_KEY].to_numpy())
    internal: dict = {"measure": out.value_column(params), "method": "cell key"}
    if params.measure == "count":
        truth = np.rint(t.values).astype(np.int64)
        shown = cellkey.perturb(truth, keys, rule).astype(np.float64)
    else:
        truth = t.values
        sensitive, lower, upper, failed = _rules.primary(rules, "sum", t.contributors, t.values, t.top)
        shown = np.round(cellkey.perturb_sums(t.values, t.top, keys, rule, sensitive), 6)
        moved = np.abs(shown - truth)
        need = np.where(shown >= truth, upper, lower)
        precision = (rules.p_percent.p if rules.p_percent is not None else rules.frequency_range) / 100
        chance = {int(c): cellkey.guess(t.values[c], t.top[c], rule, precision) for c in np.flatnonzero(sensitive)}
        risky = np.array([c for c, q in chance.items() if q > rule.max_guess], dtype=np.int64)
        short = np.union1d(np.flatnonzero(sensitive & (moved < need * (1 - TOLERANCE))), risky)
        bits = int(np.bitwise_or.reduce(failed[short], initial=0))
        said = rules.words()
        internal |= {
            "sensitive": int(sensitive.sum()),
            "guess_within": precision,
            "largest_guess_chance": max(chance.values(), default=0.0),
            "exposed": [int(c) for c in short],
            "exposed_rules": [said[r] for r, bit in _rules.RULE_BITS.items() if bits & bit and r in said]
            + ([SHORT] if short.size else []),
        }
    status = np.full(t.size, "published", dtype=object)
    tidy = out.tidy(Table(t.dims, shown, t.contributors, t.top), status, params)
    figures = {"cells": int(t.size), "published": int(t.size), "perturbation": _perturbation(rule, params)}
    moved = np.abs(shown - truth)
    internal |= {
        "cells_changed": int((moved > 0).sum()),
        "mean_absolute_perturbation": float(moved.mean()) if t.size else 0.0,
        "largest_perturbation": float(moved.max(initial=0)),
    }
    return Result(
        tidy,
        {"method": "cell key", "rules": [words(rule, params.measure)]} | figures,
        _report(figures, params, rule),
        [],
        {"cells": figures["cells"], "method": "cell key"},
        name="table",
        tables={"pivot": out.pivot(tidy, params)},
        internal=internal,
    )


def check(t: Table, frame: pd.DataFrame, result: Result, params, rules) -> None:
    """Every count within D of its truth, never 1..js; every sum within its reach (``cellkey.reach``); none below
    zero, a zero kept: else the run failed (nothing published)."""
    rule, value = rules.cell_key, out.value_column(params)
    shown = result.data[value].to_numpy(dtype=np.float64)
    if len(shown) != t.size or (shown < 0).any() or (shown[t.contributors == 0] != 0).any():
        raise InternalError("a cell key table published a cell it should not have")
    if params.measure == "sum":
        reach = cellkey.reach(t.top, rule)
        if (np.abs(shown - t.values) > reach * (1 + 1e-6) + 1e-6).any():  # the published values keep 6 decimals
            raise InternalError("a cell key table published a sum beyond its perturbation")
        return
    counts = np.rint(t.values)
    if (np.abs(shown - counts) > rule.D).any():
        raise InternalError("a cell key table published a count beyond its perturbation")
    if ((shown >= 1) & (shown <= rule.js)).any():
        raise InternalError("a cell key table published a small count its perturbation table forbids")


def _perturbation(rule, params) -> dict:
    if params.measure == "count":
        return {"D": rule.D, "V": rule.V, "js": rule.js}
    return {"D": rule.D, "V": rule.V, "share": rule.share, "weights": list(rule.weights), "mu_c": rule.mu_c}


def words(rule, measure: str = "count") -> str:
    if measure == "sum":
        largest = "largest contribution" if len(rule.weights) == 1 else f"{len(rule.weights)} largest contributions"
        return (
            f"every sum moved by up to {rule.D} steps (variance {rule.V:g}) of {rule.share:g} of its {largest} "
            f"(weights {', '.join(f'{w:g}' for w in rule.weights)}) by its cell's key"
            + (f", a sensitive cell {rule.mu_c:g} steps more" if rule.mu_c else "")
            + "; an intruder who knows all but a sensitive cell's largest contribution guesses it within the policy's "
            f"precision with a chance of at most {rule.max_guess:g}"
        )
    return f"every count perturbed by at most {rule.D} (variance {rule.V:g}) by its cell's key" + (
        f", none published from 1 to {rule.js}" if rule.js else ""
    )


def _report(figures: dict, params, rule) -> str:
    by = " × ".join(params.group_by)
    what = "counts" if params.measure == "count" else f"sums of {params.column}"
    return (
        f"## SDC table: {what} by {by}, by the cell key method\n\n"
        f"Every cell is published perturbed (not differential privacy): {words(rule, params.measure)}. The "
        "perturbation is picked by the cell's key, the sum of its records' keys, so the same cell has the same value "
        "in every table of this dataset. Margins and sub-totals are perturbed as cells of their own: they need not add "
        f"up. {figures['cells']} cells.\n"
    )
