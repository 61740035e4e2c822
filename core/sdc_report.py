"""The risk and utility report of an SDC release, in two versions as sdcMicro writes them.

- **External** (published with the release: report.md, the manifest's ``sdc_report``, a chart):
  only figures that are functions of the released table and the request's public parameters:
  the k-anonymity, the individual and global re-identification risk and the distinct
  l-diversity of the released key cells. Anyone holding the released table computes the same
  figures, so publishing them tells nothing the table does not.
- **Internal** (for the data steward, under ``<home>/sdc-reports/<dataset>/<release>/``, owner-
  only, never published, never in Prefect): everything, including what compares the release
  with the original records: the risk before and after, the record-linkage rate, IL1s, the
  changes of means and correlations, pMSE with its null expectation.

Which columns play which part comes from the request: RA's ``qi`` are the key columns and its
``sensitive`` column the one of l-diversity, its numeric QI columns the perturbed ones; a swap's
``swap_set`` is its key combination and, with the columns EDS swapped outside it, its perturbed
numeric columns.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from core import paths
from core import sdc_measures as m
from core.charts import Chart, render_chart
from core.mechanisms.base import Result

EXTERNAL_CHART = "sdc_cell_sizes.png"
SECTION = "## Disclosure risk of the released table"
NOTES = {  # the figures count exact matches on released values, which the mechanism moved
    "swap_set": "The keys of a swap are its swapped columns: values moved between records, so a record alone with "
                "its released combination is not a person alone with it; the swap's own risk is p_known and "
                "p_hidden above.\n\n",
    "qi": "RA redrew QI cells, so a released combination may be no person's: a record alone with it is not "
          "necessarily a person alone with it (redrawing can even add such combinations); RA's own risk figure is "
          "Pa above.\n\n",
}  # fmt: skip


@dataclass(frozen=True)
class Roles:
    keys_from: str  # the parameter naming the key columns: qi or swap_set
    keys: list[str]
    sensitive: str | None
    perturbed: list[str]  # numeric columns whose values the mechanism moves


def roles(params, privacy: dict, frame: pd.DataFrame) -> Roles:
    """The request's key, sensitive and perturbed numeric columns."""
    if hasattr(params, "qi"):
        source, keys, sensitive, moved = "qi", list(params.qi), params.sensitive, list(params.qi)
    else:
        source, keys, sensitive = "swap_set", list(params.swap_set), None
        moved = list(params.swap_set) + list(privacy.get("others_swapped_with_eds", []))
    numeric = [c for c in moved if pd.api.types.is_numeric_dtype(frame[c])]
    return Roles(source, keys, sensitive, numeric)


def external(released: pd.DataFrame, role: Roles) -> dict:
    """The published figures: a function of the released table and the public parameters only."""
    con = duckdb.connect()
    try:
        con.register("released", released)
        figures = m.disclosure(con, "released", role.keys, role.sensitive)
    finally:
        con.close()
    return {"keys_from": role.keys_from, "keys": role.keys, "sensitive": role.sensitive, **figures}


def internal(original: pd.DataFrame, released: pd.DataFrame, role: Roles) -> dict:
    """Everything the steward reviews: before and after, linkage, information loss, pMSE."""
    numeric_all = [c for c in original.columns if pd.api.types.is_numeric_dtype(original[c])
                   and not pd.api.types.is_bool_dtype(original[c])]  # fmt: skip
    paired = len(original) == len(released)
    con = duckdb.connect()
    try:
        con.register("original", original)
        con.register("released", released)
        out = {
            "before": m.disclosure(con, "original", role.keys, role.sensitive),
            "after": m.disclosure(con, "released", role.keys, role.sensitive),
            "il1s": m.il1s(con, "original", "released", role.perturbed) if paired else None,
            **m.changes(con, "original", "released", numeric_all),
        }
    finally:
        con.close()
    out["linkage"] = m.linkage(original, released, role.perturbed) if paired and role.perturbed else None
    columns = list(dict.fromkeys([*role.perturbed, *role.keys, *original.columns]))  # perturbed first: squared
    out["pmse"] = m.pmse(original, released, columns, set(numeric_all))
    out["paired"] = paired
    return out


def _disclosure_rows(figures: dict) -> list[tuple[str, str]]:
    rows = [
        ("records", f"{figures['records']}"),
        ("key cells (distinct key combinations)", f"{figures['cells']}"),
        ("records in cells with f_k < 2 (sample uniques)", f"{figures['records_f_below_2']}"),
        ("records in cells with f_k < 3", f"{figures['records_f_below_3']}"),
        ("expected re-identifications Σ r_k", f"{figures['expected_reidentifications']:.2f}"),
        ("global risk (expected re-identifications / records)", f"{figures['global_risk']:.4f}"),
        ("highest individual risk r_k", f"{figures['max_individual_risk']:.4f}"),
    ]
    if "l_min" in figures:
        rows += [("smallest distinct l of the sensitive column", f"{figures['l_min']}"),
                 ("records in cells with l < 2", f"{figures['records_l_below_2']}")]  # fmt: skip
    return rows


def external_section(figures: dict) -> str:
    sensitive = f"; sensitive column `{figures['sensitive']}`" if figures["sensitive"] else ""
    rows = "\n".join(f"| {name} | {value} |" for name, value in _disclosure_rows(figures))
    return (
        f"{SECTION}\n\n"
        f"Key columns {', '.join(f'`{k}`' for k in figures['keys'])}{sensitive}. Every figure here is computed from "
        "the released table alone, as sdcMicro's `measure_risk` computes it on anonymized keys: f_k is the number of "
        "released records sharing record k's key combination, and its re-identification risk is r_k = 1/f_k (no "
        "sampling weights: the released table is taken as the population).\n\n"
        + NOTES[figures["keys_from"]]
        + "| measure | value |\n|---|---|\n" + rows + "\n\n"
        "What compares the release with the input (the risk before the release, record linkage, information loss "
        "IL1s, changes of means and correlations, pMSE) is in the data steward's internal report, which is not "
        "published.\n\n"
    )


def external_chart(figures: dict) -> Chart:
    bands = figures["records_by_cell_size"]
    return Chart(EXTERNAL_CHART, "Released records by the size f_k of their key cell", list(bands),
                 {"released": [float(v) for v in bands.values()]}, ylabel="records", )  # fmt: skip


def attach(result: Result, figures: dict) -> Result:
    """The result with the external report: a report section, the manifest's figures and a chart."""
    return dataclasses.replace(
        result,
        report=result.report.rstrip("\n") + "\n\n" + external_section(figures),
        charts=[*result.charts, external_chart(figures)],
        manifest={**result.manifest, "sdc_report": figures},
    )


def records(original: pd.DataFrame, released: pd.DataFrame, role: Roles) -> pd.DataFrame | None:
    """Each record's f_k and risk in the original and in the released table (rows paired by position)."""
    if len(original) != len(released):
        return None
    before, after = m.record_risks(original, role.keys), m.record_risks(released, role.keys)
    return pd.DataFrame({"row": range(len(original)), "fk_original": before["fk"], "risk_original": before["risk"],
                         "fk_released": after["fk"], "risk_released": after["risk"]})  # fmt: skip


def internal_markdown(release_id: str, dataset: str, mechanism: str, figures: dict) -> str:
    before, after = dict(_disclosure_rows(figures["before"])), dict(_disclosure_rows(figures["after"]))
    risk = "\n".join(f"| {k} | {before[k]} | {after[k]} |" for k in before)
    bands = "\n".join(f"| {b} | {figures['before']['records_by_cell_size'][b]} | {figures['after']['records_by_cell_size'][b]} |"
                      for b in figures["before"]["records_by_cell_size"])  # fmt: skip
    link = figures["linkage"]
    linkage = ("not computed: no perturbed numeric column, or rows were suppressed" if not link or link["linkage_rate"] is None
               else f"{link['linkage_rate']:.4f} of {link['perturbed_records']} perturbed records")  # fmt: skip
    il1s = "not computed" if figures["il1s"] is None else f"{figures['il1s']:.4f}"
    means = "\n".join(f"| {c} | {v['original']:.6g} | {v['released']:.6g} | {v['change']:+.6g} |"
                      for c, v in figures["means"].items() if v["original"] is not None)  # fmt: skip
    p = figures["pmse"]
    corr = ("none (fewer than two numeric columns)" if figures["max_pair"] is None
            else f"{figures['max_abs_correlation_change']:.4f} ({figures['max_pair']})")  # fmt: skip
    return (
        f"# Internal SDC report: release `{release_id}` of `{dataset}` ({mechanism})\n\n"
        "> **For the data steward only.** Compares the release with the original records; never publish it.\n\n"
        "## Disclosure risk before and after\n\n| measure | original | released |\n|---|---|---|\n" + risk + "\n\n"
        "| records in cells of size f_k | original | released |\n|---|---|---|\n" + bands + "\n\n"
        "![risk before and after](sdc_risk_before_after.png)\n\n"
        + ("Each record's f_k and r_k, before and after (rows in the input's order): `records.parquet`.\n\n"
           if figures["paired"] else "")
        + "## Record linkage and information loss\n\n"
        f"- record linkage in rank space (nearest original record is the record's own): {linkage}\n"
        f"- IL1s (sdcMicro dUtility, perturbed numeric columns): {il1s}\n"
        f"- largest change of a correlation between numeric columns: {corr}\n"
        f"- pMSE = {p['pmse']:.3g}, null expectation (k − 1)(1 − c)²c/N = {p['null_expectation']:.3g} "
        f"(k = {p['parameters']} parameters), ratio {p['ratio'] if p['ratio'] is None else format(p['ratio'], '.3g')}"
        + (f"; fitted on every {p['every']}th record of each table" if p["every"] > 1 else "")
        + (f"; left out of the model (over {m.MAX_LEVELS} levels): {', '.join(p['left_out'])}" if p["left_out"] else "")
        + "\n\n| column | original mean | released mean | change |\n|---|---|---|---|\n" + means + "\n"
    )


def internal_chart(figures: dict) -> Chart:
    names = ["records_f_below_2", "records_f_below_3", "expected_reidentifications"]
    labels = ["f_k < 2", "f_k < 3", "expected re-identifications"]
    if "records_l_below_2" in figures["before"]:
        names.append("records_l_below_2")
        labels.append("l < 2")
    return Chart("sdc_risk_before_after.png", "Disclosure risk before and after the release", labels,
                 {"original": [float(figures["before"][n]) for n in names],
                  "released": [float(figures["after"][n]) for n in names]}, ylabel="records")  # fmt: skip


def folder(root: Path, dataset: str, release_id: str) -> Path:
    return paths.sdc_reports(root) / dataset / release_id


def _private(path: Path) -> None:
    os.chmod(path, 0o600)


def write_internal(root: Path, dataset: str, release_id: str, mechanism: str, figures: dict,
                   records: pd.DataFrame | None = None) -> Path:  # fmt: skip
    """Write the internal report (markdown, JSON, chart and, given, the per-record risks), readable by
    the home's owner only."""
    target = folder(root, dataset, release_id)
    for part in (paths.sdc_reports(root), target.parent, target):
        part.mkdir(exist_ok=True, mode=0o700)
        os.chmod(part, 0o700)
    if records is not None:
        con = duckdb.connect()
        try:
            con.from_df(records).write_parquet(str(target / "records.parquet"))
        finally:
            con.close()
    chart = internal_chart(figures)
    render_chart(chart, target / chart.filename)
    (target / "internal.md").write_text(internal_markdown(release_id, dataset, mechanism, figures))
    (target / "internal.json").write_text(json.dumps(figures, indent=2, default=str) + "\n")
    for name in (chart.filename, "internal.md", "internal.json", *(["records.parquet"] if records is not None else [])):
        _private(target / name)
    return target
