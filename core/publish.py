"""Publish a release: data, manifest and report written to a temporary folder, then renamed.

A reader sees either no release folder or a complete one. The manifest is the release's
machine-readable record; ``report.md`` (with its charts) is the one a person reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from core import __version__
from core.errors import ReleaseConflict
from core.ingest import Ingested
from core.ledger import Entry
from core.mechanisms.base import Chart, Plan, Result
from core.spec import Release
from core.validate import ValidationReport


@dataclass(frozen=True)
class Published:
    folder: Path
    manifest: dict


def release_folder(releases_root: Path, dataset: str, release_id: str) -> Path:
    return releases_root / dataset / release_id


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fsync_tree(folder: Path) -> None:
    for path in [*folder.iterdir(), folder]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def render_chart(chart: Chart, path: Path) -> None:
    """Grouped bars, step lines or side-by-side scatter plots, written as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    if chart.kind == "line":
        fig, ax = plt.subplots(figsize=(8, 4))
        for name, (xs, ys) in chart.points.items():
            ax.step(xs, ys, where="post", marker="o", label=name)
        ax.set_title(chart.title, fontsize=10)
        ax.set_xlabel(chart.axes[0])
        ax.set_ylabel(chart.axes[1])
        ax.legend(fontsize=8)
        fig.autofmt_xdate()
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return
    if chart.kind == "scatter":
        fig, axes = plt.subplots(1, len(chart.points), figsize=(5 * len(chart.points), 4.5), sharex=True, sharey=True)
        for ax, (name, (xs, ys)) in zip(np.atleast_1d(axes), chart.points.items()):
            ax.scatter(xs, ys, s=2, alpha=0.4)
            ax.set_title(name, fontsize=9)
            ax.set_xlabel(chart.axes[0])
            ax.set_ylabel(chart.axes[1])
        fig.suptitle(chart.title, fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return
    x = np.arange(len(chart.labels))
    width = 0.8 / max(len(chart.series), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(chart.labels) + 2), 4))
    for i, (name, values) in enumerate(chart.series.items()):
        ax.bar(x + (i - (len(chart.series) - 1) / 2) * width, values, width, label=name)
    ax.set_xticks(x, chart.labels, rotation=30, ha="right")
    ax.set_title(chart.title, fontsize=10)
    ax.set_ylabel(chart.ylabel)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def manifest(
    release: Release, plan: Plan, result: Result, entry: Entry, ingested: Ingested,
    validation: ValidationReport, test_mode: bool,
) -> dict:  # fmt: skip
    """The machine-readable record of a release (public parameters and metadata only)."""
    return {
        "release_id": release.release_id,
        "dataset": release.dataset,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "test_mode": test_mode,
        "mechanism": {"name": release.mechanism, "params": release.params.model_dump(mode="json")},
        "privacy": {
            "guarantee": plan.guarantee,
            "adjacency": plan.adjacency,
            **result.privacy,
            "epsilon": plan.cost.epsilon,
            "delta": plan.cost.delta,
        },
        **result.manifest,
        "ledger": {"seq": entry.seq, "hash": entry.hash},
        "input": {
            "source": ingested.source_name,
            "format": release.spec.dataset.format,
            "fingerprint": ingested.fingerprint,
            "rows": ingested.rows,
            "columns": ingested.columns,
        },
        "validation": validation.summary(),
        "software": {"privrelease": __version__, "duckdb": duckdb.__version__},
    }


def report(record: dict, result: Result) -> str:
    """report.md: what was released, under which guarantee, at what cost, and how it was checked."""
    p, v = record["privacy"], record["validation"]
    charts = "".join(f"![{c.title}]({c.filename})\n\n" for c in result.charts)
    files = "\n".join(f"- `{name}` (sha256 `{digest[:16]}…`)" for name, digest in record["files"].items())
    failed = "none" if not v["failures"] else f"{len(v['failures'])}"
    return (
        f"# Release `{record['release_id']}` of dataset `{record['dataset']}`\n\n"
        + ("> **Test release**: made with a fixed seed in test mode; not for publication.\n\n" if record["test_mode"] else "")
        + "| | |\n|---|---|\n"
        f"| mechanism | `{record['mechanism']['name']}` |\n"
        f"| guarantee | {p['guarantee']} |\n"
        f"| privacy cost charged | epsilon = {p['epsilon']:g}, delta = {p['delta']:g} |\n"
        f"| ledger entry | #{record['ledger']['seq']} (`{record['ledger']['hash'][:16]}…`) |\n"
        f"| input | `{record['input']['source']}`, {record['input']['rows']} rows, "
        f"sha256 `{record['input']['fingerprint'][:16]}…` |\n"
        f"| validation | suite `{v['suite']}`: {v['evaluated']} expectations, failures: {failed} |\n"
        f"| created | {record['created']} |\n\n"
        f"Parameters: `{json.dumps(record['mechanism']['params'])}`\n\n"
        + result.report + "\n" + charts + "## Files\n\n" + files + "\n"
    )


def publish(releases_root: Path, record: dict, result: Result) -> Published:
    """Write the release atomically; refuse if the release folder already exists."""
    final = release_folder(releases_root, record["dataset"], record["release_id"])
    if final.exists():
        raise ReleaseConflict(f"release folder {final} already exists; choose a new release_id.")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{record['release_id']}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        con = duckdb.connect()
        try:
            relation = con.from_df(result.data)
            names = [f"{result.name}.parquet"] + ([f"{result.name}.csv"] if result.csv else [])
            relation.write_parquet(str(tmp / names[0]))
            if result.csv:
                relation.write_csv(str(tmp / names[1]))
        finally:
            con.close()
        for chart in result.charts:
            render_chart(chart, tmp / chart.filename)
        files = {name: _sha256(tmp / name) for name in names}
        record = {**record, "files": files}
        (tmp / "report.md").write_text(report(record, result))
        (tmp / "manifest.json").write_text(json.dumps(record, indent=2, sort_keys=False) + "\n")
        _fsync_tree(tmp)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Published(final, record)
