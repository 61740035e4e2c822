"""The risk and utility report of an SDC release, in two versions as sdcMicro writes them.

- **External** (published with the release: report.md, the manifest's ``sdc_report``, a chart):
  only figures that are functions of the released table and the request's public parameters:
  the k-anonymity, the individual and global re-identification risk and the distinct
  l-diversity of the released key cells (``privrelease.core.sdc.risk``'s released count, which it names), and
  sdcMicro's freqCalc figures beside them for comparison. Anyone holding the released table
  computes the same figures, so publishing them tells nothing the table does not.
- **Internal** (for the data steward, under ``<home>/sdc-reports/<dataset>/<release>/``, owner-
  only, never published, never in Prefect): everything, including what compares the release
  with the original records: the risk before and after, the intruder's (each person's true key
  against the released records), the record-linkage rate, IL1s, the changes of means and
  correlations, pMSE with its null expectation.

Which columns play which part comes from the steward's disclosure policy, whatever the request
protected: its key variables are the key, its sensitive variables those of l-diversity, its
weight and cluster id weigh the risk and give the household risk. The perturbed numeric columns
(for linkage and information loss) are the numeric columns the release changed.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from privrelease.core import paths
from privrelease.core.charts import Chart, drawing
from privrelease.core.db import memory
from privrelease.core.sdc import measures as m
from privrelease.core.sdc import risk

EXTERNAL_CHART = "sdc_cell_sizes.png"
SECTION = "## Disclosure risk of the released table"
NOTES = {  # the figures count exact matches on released values, which the mechanism moved
    "mews": "The keys of a swap are its swapped columns: values moved between records, so a record alone with "
                "its released combination is not a person alone with it; the swap's own risk is p_known and "
                "p_hidden above.\n\n",
    "ra": "RA redrew QI cells, so a released combination may be no person's: a record alone with it is not "
          "necessarily a person alone with it (redrawing can even add such combinations); RA's own risk figure is "
          "Pa above.\n\n",
}  # fmt: skip


NOTES |= {
    "meds": NOTES["mews"],
    "eds": NOTES["mews"],
    "sdc": "A chain's methods coarsened, moved or suppressed key values. After a recoding the counts are of the "
    "recoded key, which the policy's public hierarchies give anyone who knows the true value; after a perturbative "
    "step (RA, PRAM, noise, a swap) they count released combinations, not persons, and that step's own figure "
    "is its risk statement.\n\n",
}


@dataclass(frozen=True)
class Roles:
    mechanism: str
    keys: list[str]  # the policy's key variables
    sensitive: list[str]
    perturbed: list[str]  # numeric columns whose values the release changed
    weight: str | None = None
    cluster: str | None = None
    above: float | None = None  # the policy's individual-risk threshold, if any


def roles(mechanism: str, policy, protected: list[str], privacy: dict, frame: pd.DataFrame, released: pd.DataFrame) -> Roles:
    """The policy's key, sensitive, weight and cluster columns; the release's perturbed numeric columns
    (numeric before and after: a recoded column became intervals)."""
    moved = list(protected) + list(privacy.get("others_swapped_with_eds", []))
    perturbed = [c for c in dict.fromkeys(moved) if c in frame.columns and _numeric(frame[c]) and _numeric(released[c])]
    risk = policy.thresholds.risk
    return Roles(
        mechanism,
        list(policy.key_vars.all),
        list(policy.sensitive),
        perturbed,
        policy.weight,
        policy.cluster,
        risk.above if risk else None,
    )


def _numeric(column: pd.Series) -> bool:
    """A column distances and means apply to (booleans are categories here)."""
    return pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)


ROLE_FIELDS = ("keys_from", "keys", "sensitive", "weight", "cluster")  # what ``external`` puts before the figures
FREQCALC_FIELDS = ("k", "records_f_below_2", "records_f_below_3", "max_individual_risk", "l_min")  # shown for comparison


def external(released: pd.DataFrame, role: Roles) -> dict:
    """The published figures: a function of the released table and the public parameters only. The main ones
    over released cells (``risk.COUNTS["released"]``), sdcMicro's freqCalc figures beside them, for comparison."""
    freqcalc = _disclosure(released, role, "freqcalc")
    return {
        "keys_from": "policy",
        "keys": role.keys,
        "sensitive": role.sensitive,
        "weight": role.weight,
        "cluster": role.cluster,
        "count": "released",
        **_disclosure(released, role),
        "sdcmicro_freqcalc": {k: freqcalc[k] for k in FREQCALC_FIELDS if k in freqcalc},
    }


def table_figures(external_figures: dict) -> dict:
    """The released table's figures of an external report, without the roles it names first."""
    return {k: v for k, v in external_figures.items() if k not in ROLE_FIELDS}


def _disclosure(frame: pd.DataFrame, role: Roles, count: risk.Count = "released", persons: pd.DataFrame | None = None) -> dict:
    return risk.disclosure(frame, role.keys, role.sensitive, role.weight, role.cluster, role.above, count, persons)


def intruder(released: pd.DataFrame, role: Roles, persons: pd.DataFrame | None) -> dict:
    """The figures over each person's anonymity set: the released records compatible with their true key
    (``persons``: row by row, the key before local suppression; none: the released key)."""
    return _disclosure(released, role, "intruder", persons)


def internal(
    original: pd.DataFrame, released: pd.DataFrame, role: Roles, after: dict | None = None, persons: pd.DataFrame | None = None
) -> dict:
    """Everything the steward reviews: before and after, the intruder's figures, linkage, information loss, pMSE.
    ``after``: the released table's disclosure figures when ``external`` has computed them already; ``persons``:
    as ``intruder`` takes them."""
    numeric_all = [c for c in original.columns if _numeric(original[c]) and _numeric(released[c])]
    paired = len(original) == len(released)
    with memory() as con:
        con.register("original", original)
        con.register("released", released)
        out = {
            "before": _disclosure(original, role),
            "after": table_figures(external(released, role)) if after is None else after,
            "intruder": intruder(released, role, persons),
            "il1s": m.il1s(con, "original", "released", role.perturbed) if paired else None,
            **m.changes(con, "original", "released", numeric_all),
        }
    out["linkage"] = m.linkage(original, released, role.perturbed) if paired and role.perturbed else None
    columns = list(dict.fromkeys([*role.perturbed, *role.keys, *original.columns]))  # perturbed first: squared
    recoded = [c for c in original.columns if _numeric(original[c]) != _numeric(released[c])]
    columns = [c for c in columns if c not in recoded]  # a recoded column's values are another kind: nothing to compare
    out["pmse"] = m.pmse(original, released, columns, set(numeric_all))
    out["paired"] = paired
    return out


def _disclosure_rows(figures: dict, partial: bool = False) -> list[tuple[str, str]]:
    """The figures as (measure, value) rows; ``partial``: only those the figures hold (the freqCalc comparison)."""
    shown = {
        "records": ("records", "{}"),
        "cells": ("key cells (distinct key combinations)", "{}"),
        "k": ("k-anonymity: the smallest f_k", "{}"),
        "records_f_below_2": ("records with f_k < 2 (sample uniques)", "{}"),
        "records_f_below_3": ("records with f_k < 3", "{}"),
        "expected_reidentifications": ("expected re-identifications Σ r_k", "{:.2f}"),
        "global_risk": ("global risk (expected re-identifications / records)", "{:.4f}"),
        "max_individual_risk": ("highest individual risk r_k", "{:.4f}"),
    }
    rows = [(name, form.format(figures[key])) for key, (name, form) in shown.items() if key in figures or not partial]
    if partial:
        return rows + ([("smallest distinct l of a sensitive variable", f"{figures['l_min']}")] if "l_min" in figures else [])
    if "records_risk_above" in figures:
        above = figures["records_risk_above"]
        rows.append((f"records with individual risk above {above['above']:g}", f"{above['records']}"))
    if "l_min" in figures:
        rows += [
            ("smallest distinct l of a sensitive variable", f"{figures['l_min']}"),
            ("records with l < 2", f"{figures['records_l_below_2']}"),
        ]
    if "household_risk_max" in figures:
        rows += [
            ("highest household risk", f"{figures['household_risk_max']:.4f}"),
            ("expected re-identifications of households' members", f"{figures['household_expected_reidentifications']:.2f}"),
        ]
    return rows


def external_section(figures: dict, mechanism: str) -> str:
    sensitive = f"; sensitive {', '.join(f'`{c}`' for c in figures['sensitive'])}" if figures["sensitive"] else ""
    weight = f"; weights `{figures['weight']}`" if figures.get("weight") else ""
    cluster = f"; households `{figures['cluster']}`" if figures.get("cluster") else ""
    freqcalc = dict(_disclosure_rows(figures["sdcmicro_freqcalc"], partial=True))
    rows = "\n".join(f"| {name} | {value} | {freqcalc.get(name, '')} |" for name, value in _disclosure_rows(figures))
    return (
        f"{SECTION}\n\n"
        f"Key variables of the data steward's disclosure policy: {', '.join(f'`{k}`' for k in figures['keys'])}"
        f"{sensitive}{weight}{cluster}, whatever the request protected. Every figure here is computed from the released "
        "table alone. f_k is the number of released records with record k's key combination, a suppressed (missing) "
        "key value counted as a value of its own (k-anonymity as Samarati and Sweeney define it; ARX counts a suppressed "
        "record so): each of them is compatible with the true key of the person behind record k, so an intruder who "
        "knows that key finds at least f_k released records that could be theirs, whatever they know of the method. "
        "Its re-identification risk r_k is sdcMicro's over those records (1/f_k without sampling weights: the released "
        "table is taken as the population), and l counts the distinct sensitive values among them. The last column is "
        "sdcMicro's freqCalc, which counts a missing value as matching every value: shown for comparison only, never as "
        "the guarantee, since an intruder who knows a person's true value excludes the records that differ from it.\n\n"
        + NOTES.get(mechanism, "")
        + "| measure | value | sdcMicro freqCalc (comparison) |\n|---|---|---|\n"
        + rows
        + "\n\n"
        "What compares the release with the input (the risk before the release, record linkage, information loss "
        "IL1s, changes of means and correlations, pMSE) is in the data steward's internal report, which is not "
        "published.\n\n"
    )


def external_chart(figures: dict) -> Chart:
    bands = figures["records_by_cell_size"]
    return Chart(
        EXTERNAL_CHART,
        "Released records by the size f_k of their key cell",
        list(bands),
        {"released": [float(v) for v in bands.values()]},
        ylabel="records",
    )


def attach(result, figures: dict, mechanism: str):
    """The result (a mechanism's ``Result``) with the external report: a report section, the manifest's
    figures and a chart."""
    return dataclasses.replace(
        result,
        report=result.report.rstrip("\n") + "\n\n" + external_section(figures, mechanism),
        charts=[*result.charts, external_chart(figures)],
        manifest={**result.manifest, "sdc_report": figures},
    )


def records(
    original: pd.DataFrame, released: pd.DataFrame, role: Roles, persons: pd.DataFrame | None = None
) -> pd.DataFrame | None:
    """Each record's f_k and risk in the original and in the released table, and its person's as the intruder
    counts them (rows paired by position; ``row`` is the record's row in the registered table, ``released_row``
    its row in the release)."""
    if len(original) != len(released):
        return None
    before, after = risk.record_risks(original, role.keys), risk.record_risks(released, role.keys)
    theirs = risk.record_risks(released, role.keys, "intruder", persons)
    rows = original.attrs["input_rows"].order if "input_rows" in original.attrs else range(len(original))
    return pd.DataFrame(
        {
            "row": rows,
            "released_row": range(len(released)),
            "fk_original": before["fk"],
            "risk_original": before["risk"],
            "fk_released": after["fk"],
            "risk_released": after["risk"],
            "fk_intruder": theirs["fk"],
            "risk_intruder": theirs["risk"],
        }
    )


def internal_markdown(release_id: str, dataset: str, mechanism: str, figures: dict) -> str:
    before, after = dict(_disclosure_rows(figures["before"])), dict(_disclosure_rows(figures["after"]))
    theirs = dict(_disclosure_rows(figures["intruder"]))
    table = "\n".join(f"| {k} | {before[k]} | {after[k]} | {theirs[k]} |" for k in before)
    bands = "\n".join(
        f"| {b} | {figures['before']['records_by_cell_size'][b]} | {figures['after']['records_by_cell_size'][b]} |"
        for b in figures["before"]["records_by_cell_size"]
    )
    link = figures["linkage"]
    linkage = (
        "not computed: no perturbed numeric column, or rows were suppressed"
        if not link or link["linkage_rate"] is None
        else f"{link['linkage_rate']:.4f} of {link['perturbed_records']} perturbed records"
    )
    il1s = "not computed" if figures["il1s"] is None else f"{figures['il1s']:.4f}"
    means = "\n".join(
        f"| {c} | {v['original']:.6g} | {v['released']:.6g} | {v['change']:+.6g} |"
        for c, v in figures["means"].items()
        if v["change"] is not None
    )
    p = figures["pmse"]
    corr = (
        "none (fewer than two numeric columns)"
        if figures["max_pair"] is None
        else f"{figures['max_abs_correlation_change']:.4f} ({figures['max_pair']})"
    )
    return (
        f"# Internal SDC report: release `{release_id}` of `{dataset}` ({mechanism})\n\n"
        "> **For the data steward only.** Compares the release with the original records; never publish it.\n\n"
        + (
            "**Not published**: the released table missed the disclosure policy's thresholds: "
            + "; ".join(figures["thresholds_missed"])
            + ".\n\n"
            if figures.get("thresholds_missed")
            else "The released table met every threshold of the disclosure policy.\n\n"
        )
        + "## Disclosure risk before and after\n\n"
        "Released: over each record's released cell (a suppressed value a value of its own), as published. Intruder: "
        "over the released records compatible with each person's true key (their record's key before local "
        "suppression); the thresholds are checked on both.\n\n"
        "| measure | original | released | intruder |\n|---|---|---|---|\n" + table + "\n\n"
        "| records in cells of size f_k | original | released |\n|---|---|---|\n" + bands + "\n\n"
        "![risk before and after](sdc_risk_before_after.png)\n\n"
        + (
            "Each record's f_k and r_k, before, after and the intruder's (its row in the registered table and in the release): "
            "`records.parquet`.\n\n"
            if figures["paired"]
            else ""
        )
        + "## Record linkage and information loss\n\n"
        f"- record linkage in rank space (nearest original record is the record's own): {linkage}\n"
        f"- IL1s (sdcMicro dUtility, perturbed numeric columns): {il1s}\n"
        f"- largest change of a correlation between numeric columns: {corr}\n"
        + (
            "- pMSE: not computed (the release kept no row)"
            if p["pmse"] is None
            else f"- pMSE = {p['pmse']:.3g}, null expectation (k − 1)(1 − c)²c/N = {p['null_expectation']:.3g} "
            f"(k = {p['parameters']} parameters), ratio {p['ratio'] if p['ratio'] is None else format(p['ratio'], '.3g')}"
        )
        + (f"; fitted on one record in {p['every']} of each table" if p["every"] > 1 else "")
        + (f"; left out of the model (over {m.MAX_LEVELS} levels): {', '.join(p['left_out'])}" if p["left_out"] else "")
        + "\n\n| column | original mean | released mean | change |\n|---|---|---|---|\n"
        + means
        + "\n"
    )


def internal_chart(figures: dict) -> Chart:
    names = ["records_f_below_2", "records_f_below_3", "expected_reidentifications"]
    labels = ["f_k < 2", "f_k < 3", "expected re-identifications"]
    if "records_l_below_2" in figures["before"]:
        names.append("records_l_below_2")
        labels.append("l < 2")
    return Chart(
        "sdc_risk_before_after.png",
        "Disclosure risk before and after the release",
        labels,
        {"original": [float(figures["before"][n]) for n in names], "released": [float(figures["after"][n]) for n in names]},
        ylabel="records",
    )


def folder(root: Path, dataset: str, release_id: str) -> Path:
    return paths.sdc_reports(root) / dataset / release_id


def _private(path: Path) -> None:
    os.chmod(path, 0o600)


def write_internal(
    root: Path, dataset: str, release_id: str, mechanism: str, figures: dict, records: pd.DataFrame | None = None
) -> Path:
    """Write the internal report (markdown, JSON, chart and, given, the per-record risks), readable by
    the home's owner only."""
    target = folder(root, dataset, release_id)
    for part in (paths.sdc_reports(root), target.parent, target):
        part.mkdir(exist_ok=True, mode=0o700)
        os.chmod(part, 0o700)
    chart = internal_chart(figures)
    with drawing([(chart, target / chart.filename)]):
        if records is not None:
            with memory() as con:
                con.from_df(records).write_parquet(str(target / "records.parquet"))
        (target / "internal.md").write_text(internal_markdown(release_id, dataset, mechanism, figures))
        (target / "internal.json").write_text(json.dumps(figures, indent=2, default=str) + "\n")
    for name in (chart.filename, "internal.md", "internal.json", *(["records.parquet"] if records is not None else [])):
        _private(target / name)
    return target


def write_own(root: Path, dataset: str, release_id: str, figures: dict) -> Path:
    """The internal report of a mechanism that assesses itself (a table's audit), owner-only: its figures as JSON
    and, where it gives one, its ``markdown``."""
    target = folder(root, dataset, release_id)
    for part in (paths.sdc_reports(root), target.parent, target):
        part.mkdir(exist_ok=True, mode=0o700)
        os.chmod(part, 0o700)
    markdown = figures.pop("markdown", "")
    (target / "internal.md").write_text(markdown or "```json\n" + json.dumps(figures, indent=2, default=str) + "\n```\n")
    (target / "internal.json").write_text(json.dumps(figures, indent=2, default=str) + "\n")
    for name in ("internal.md", "internal.json"):
        _private(target / name)
    return target


def attach_own(result, figures: dict):
    """The result with a self-assessed mechanism's external figures in its manifest (its report says them)."""
    return dataclasses.replace(result, manifest={**result.manifest, "sdc_report": figures})
