"""Publish a release: data, manifest and report written to a staging folder, then renamed.

The staging folder lives under ``<home>/staging``, outside the published tree but on the same
filesystem, so a reader of ``releases/`` sees either no release folder or a complete one, and an
interrupted release leaves nothing readable there. The manifest is the release's
machine-readable record; ``report.md`` (with its charts) is the one a person reads. The manifest
lists every other file with its digest.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from privrelease import __version__
from privrelease.core import faults
from privrelease.core.charts import drawing
from privrelease.core.datasets.snapshots import sha256
from privrelease.core.db import memory
from privrelease.core.errors import InternalError, ReleaseConflict
from privrelease.core.ledger.chain import Entry
from privrelease.core.mechanisms.base import COST_KEYS, Plan, Result
from privrelease.core.privacy.budget import NOT_DP
from privrelease.core.privacy.cost import DPCost
from privrelease.core.release.catalogue import Published

if TYPE_CHECKING:  # the request's model imports every mechanism: a command that publishes nothing needs none
    from privrelease.core.release.spec import Release


def release_folder(releases_root: Path, dataset: str, release_id: str) -> Path:
    return releases_root / dataset / release_id


def staged(staging_root: Path, dataset: str, release_id: str) -> list[Path]:
    """The staging folders of one release (normally none: publishing renames or removes them)."""
    return sorted((staging_root / dataset).glob(f"{release_id}.*"))


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    for path in [*folder.iterdir(), folder]:
        _fsync(path)


def manifest(release: Release, plan: Plan, result: Result, entry: Entry) -> dict:
    """The machine-readable record of a release: public values and the mechanism's DP outputs only.

    Nothing here is measured on the input: the dataset is described by its registration (schema,
    unit, and the row count only where the unit makes it public), never by a fingerprint.
    """
    cost = plan.cost
    dp = isinstance(cost, DPCost)
    if set(result.privacy) & set(COST_KEYS):
        raise InternalError("a mechanism's result restates its cost; the plan states it once")
    return {
        "release_id": release.release_id,
        "dataset": release.dataset.id,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "test_mode": release.seed is not None,
        "mechanism": {"name": release.mechanism, "params": release.params.model_dump(mode="json")},
        "privacy": {  # the cost as the plan states it (COST_KEYS), then what the run found
            "kind": cost.kind,
            "guarantee": plan.guarantee,
            "adjacency": cost.adjacency.sentence if dp else None,
            "model": cost.model,
            "epsilon": cost.budget.epsilon if dp else None,
            "delta": cost.budget.delta if dp else None,
            **result.privacy,
        },
        **result.manifest,
        "ledger": {"seq": entry.seq, "hash": entry.hash},
        "input": release.dataset.public(),
        "software": {"privrelease": __version__, "duckdb": duckdb.__version__},
    }


def report(record: dict, result: Result) -> str:
    """report.md: what was released, under which guarantee, at what cost."""
    p, ds = record["privacy"], record["input"]
    charts = "".join(f"![{c.title}]({c.filename})\n\n" for c in result.charts)
    files = "\n".join(f"- `{name}` (sha256 `{digest[:16]}…`)" for name, digest in record["files"].items())
    cost = (
        f"epsilon = {p['epsilon']:g}, delta = {p['delta']:g} ({p['adjacency']})"
        if p["kind"] == "dp"
        else f"none: {NOT_DP} (statistical disclosure control; see its risk figures)"
    )
    rows = "" if ds["rows"] is None else f", {ds['rows']} records (public under its unit)"
    return (
        f"# Release `{record['release_id']}` of dataset `{record['dataset']}`\n\n"
        + ("> **Test release**: made with a fixed seed in test mode; not for publication.\n\n" if record["test_mode"] else "")
        + "| | |\n|---|---|\n"
        f"| mechanism | `{record['mechanism']['name']}` |\n"
        f"| guarantee | {p['guarantee']} |\n"
        f"| privacy cost charged | {cost} |\n"
        f"| ledger entry | #{record['ledger']['seq']} (`{record['ledger']['hash'][:16]}…`) |\n"
        f"| dataset | `{ds['id']}` registration {ds['version']}, unit `{ds['unit']}`, {len(ds['schema'])} columns{rows} |\n"
        f"| created | {record['created']} |\n\n"
        f"Parameters: {code(json.dumps(record['mechanism']['params']))}\n\n"
        + result.report
        + "\n"
        + charts
        + "## Files\n\n"
        + files
        + "\n"
    )


def publish(releases_root: Path, staging_root: Path, record: dict, result: Result) -> Published:
    """Write the release to staging (``stage``: its sealed draw), then rename it into place (``place``)."""
    final = release_folder(releases_root, record["dataset"], record["release_id"])
    if final.exists():
        raise ReleaseConflict(f"release folder {final} already exists; choose a new release_id.")
    return place(stage(staging_root, record, result), releases_root)


def room(staging_root: Path, dataset: str, release_id: str) -> Path:
    """Where the disk space a release may need is held from before its charge until it is staged
    (``privrelease.core.environment.hold``)."""
    return staging_root / dataset / f".{release_id}.room"


def stage(staging_root: Path, record: dict, result: Result) -> Path:
    """The release's folder, complete, in staging (owner-only): its files, then ``report.md``, then the manifest,
    synced. A folder with its manifest is a sealed draw, published by ``place`` now or, after a fault, by
    ``privrelease release --resume`` or ``ledger recover``; a folder without one never is (a write failed part-way,
    and it is removed)."""
    tmp = staging_root / record["dataset"] / f"{record['release_id']}.{secrets.token_hex(4)}"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    room(staging_root, record["dataset"], record["release_id"]).unlink(missing_ok=True)  # the space held for it, given to it
    os.chmod(staging_root, 0o700)  # staged results are not yet released: readable by their owner only
    tmp.mkdir()
    try:
        names = [f"{result.name}.parquet", f"{result.name}.csv"]  # the CSV for whoever opens it first
        with drawing((chart, tmp / chart.filename) for chart in result.charts), memory() as con:
            relation = con.from_df(result.data)
            relation.write_parquet(str(tmp / names[0]))
            relation.write_csv(str(tmp / names[1]))
            for name, table in result.tables.items():  # more tables, each a CSV (a pivoted view)
                names.append(f"{name}.csv")
                con.from_df(table).write_csv(str(tmp / names[-1]))
        files = {name: sha256(tmp / name) for name in [*names, *(c.filename for c in result.charts)]}
        (tmp / "report.md").write_text(report({**record, "files": files}, result))
        record = {**record, "files": {**files, "report.md": sha256(tmp / "report.md")}}
        (tmp / "manifest.json").write_text(json.dumps(record, indent=2, sort_keys=False) + "\n")
        _fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    faults.point("staged")
    return tmp


def sealed(staging_root: Path, dataset: str, release_id: str) -> Path | None:
    """The release's sealed draw in staging (a complete staged folder), if one is there."""
    return next((f for f in staged(staging_root, dataset, release_id) if (f / "manifest.json").is_file()), None)


def place(folder: Path, releases_root: Path) -> Published:
    """Rename a sealed draw into ``releases/``, whole; refused if the release folder exists."""
    record = json.loads((folder / "manifest.json").read_text())
    final = release_folder(releases_root, record["dataset"], record["release_id"])
    if final.exists():
        raise ReleaseConflict(f"release folder {final} already exists; choose a new release_id.")
    final.parent.mkdir(parents=True, exist_ok=True)
    os.rename(folder, final)
    _fsync(final.parent)
    return Published(final, record)


def code(text: str) -> str:
    """``text`` as one Markdown code span whatever backticks it holds (CommonMark: a longer run of backticks
    around it), so a parameter's text cannot end the span and write into the report."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {text} {fence}" if longest else f"`{text}`"
