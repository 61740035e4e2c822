"""Benchmark ``privrelease backup`` and ``privrelease restore`` on the demo home and on a home with 1,000 releases.

The demo home is what ``privrelease demo`` makes (four datasets, one SDC release). The 1,000-release home is the demo
home plus 1,000 DP releases of the logins dataset: 12 made by ``privrelease release`` as typed, the rest charged and
settled on the ledger as the release path does (``Ledger.reserve`` and ``settle``) with their folders copied from a
real release and their manifests citing their own charges, so the ledger rows, the anchors and the files are those
of 1,000 releases without drawing 1,000 times. Each command runs as typed, in its own process, ``--reps`` times; the
restores are drills (``--drill``: the same checks and copies, the original home left in charge).

Run: .venv/bin/python bench/bench_backup.py [--releases 1000] [--reps 3]
Results are recorded by hand in bench/RESULTS.md (command, date, machine).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
EXE = str(Path(sys.executable).parent / "privrelease")


def cli(home: Path, *args: str, env: dict) -> float:
    started = time.perf_counter()
    done = subprocess.run([EXE, "--home", str(home), *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {done.stderr}")
    return time.perf_counter() - started


def size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def many_releases(home: Path, n: int, env: dict) -> None:
    """``n`` DP releases of logins-demo: a dozen as typed, the rest charged, settled and filed as the release path does."""
    os.environ.update(env)
    from privrelease.core.ledger.ledger import PUBLISHED, ChargeRequest, Ledger
    from privrelease.core.privacy.budget import Budget
    from privrelease.core.release.home import Home

    request = home / "requests" / "logins-outliers.yaml"
    ledger = Ledger(home / "privrelease.duckdb")
    ledger.set_budget("logins-demo", Budget(50_000.0, 0.5))
    for _ in range(12):
        cli(home, "release", str(request), "--quiet", env=env)
    first = next(e for e in ledger.entries() if e.dataset == "logins-demo" and e.status == "reserved")
    model = Home(home).releases / "logins-demo" / first.release_id
    params, detail = json.loads(first.params), json.loads(first.detail)
    cost = _cost(first)
    for i in range(12, n):
        rid = f"logins-demo-bench-{i:05d}"
        charge = ledger.reserve(
            ChargeRequest(
                "logins-demo",
                rid,
                "dp",
                cost,
                first.mechanism,
                params,
                {k: v for k, v in detail.items() if k not in ("events", "admission")},
            )
        )
        folder = model.parent / rid
        shutil.copytree(model, folder)
        manifest = json.loads((folder / "manifest.json").read_text()) | {
            "release_id": rid,
            "ledger": {"seq": charge.entry.seq, "hash": charge.entry.hash},
        }
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        ledger.settle(rid, PUBLISHED, {"bench": True})


def _cost(entry):
    from privrelease.core.ledger.account import recorded
    from privrelease.core.privacy.adjacency import read
    from privrelease.core.privacy.cost import DPCost

    return DPCost(recorded(json.loads(entry.detail)["events"], entry.budget), read(entry.adjacency))


def measure(label: str, home: Path, work: Path, reps: int, env: dict) -> None:
    key = home / "keys" / "ledger.key"
    backups, restores, sizes = [], [], []
    for r in range(reps):
        folder = work / f"{label}-backup-{r}"
        backups.append(cli(home, "backup", str(folder), env=env))
        sizes.append(size(folder))
        target = work / f"{label}-restored-{r}"
        target.mkdir()
        restores.append(cli(target, "restore", str(folder), "--key", str(key), "--drill", env=env))
    entries = len((work / f"{label}-backup-0" / "ledger.jsonl").read_text().splitlines())
    files = len(json.loads((work / f"{label}-backup-0" / "backup.json").read_text())["files"])
    print(
        f"| {label} | {entries} | {files} | {statistics.median(sizes) / 2**20:.1f} MB | {statistics.median(backups):.2f} s "
        f"({min(backups):.2f}-{max(backups):.2f}) | {statistics.median(restores):.2f} s ({min(restores):.2f}-{max(restores):.2f}) |"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--releases", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-backup-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")} | {"XDG_STATE_HOME": str(work / "state")}
    home = work / "home"
    cli(home, "demo", env=env)
    print("| home | ledger entries | files | backup size | backup (median of reps, range) | restore (median, range) |")
    print("|---|---|---|---|---|---|")
    measure("demo", home, work, args.reps, env)
    many_releases(home, args.releases, env)
    measure(f"demo + {args.releases} releases", home, work, args.reps, env)
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
