"""Issue #39's benchmark: the memory of N previews submitted at once, with and without the pool's limit.

Run: .venv/bin/python bench/bench_quotas.py [--runs 12] [--limit 4]

A `prefect server` (SQLite), the `privrelease` pool and every deployment, then for each variant N
previews of the `dpne` form (nothing charged, each a flow-run process) created at once with the
operator's credential and one worker started: the pool without a concurrency limit (the worker's
--limit N), then the pool limited to --limit runs at once (and the worker likewise). The worker's
process tree is sampled every 0.5 s: its summed PSS (proportional set size: shared pages divided
among the processes that share them) and how many flow-run processes it holds. Then one release
that waits for a steward (outlier-count, every charge held back): the worker's tree once the run is
suspended.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from privrelease.core.ledger.ledger import Ledger  # noqa: E402
from privrelease.core.privacy.budget import Budget  # noqa: E402
from tests.system.test_server import _wait, deploy, deployment, operator, run_processes, running_server, worker  # noqa: E402

MiB = 1 << 20


class Sampler(threading.Thread):
    """The worker's process tree every 0.5 s: peak summed PSS, peak number of flow-run processes."""

    def __init__(self, proc):
        super().__init__(daemon=True)
        self.proc, self.stop, self.peak_pss, self.peak_runs, self.per_run = proc, threading.Event(), 0, 0, []

    def run(self) -> None:
        while not self.stop.is_set():
            tree = [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(recursive=True)]
            pss, runs = 0, []
            for p in tree:
                try:
                    pss += p.memory_full_info().pss
                    if "PREFECT__FLOW_RUN_ID" in p.environ() and p.name().startswith("python"):
                        runs.append(p.memory_full_info().pss)
                except psutil.Error:
                    pass
            self.peak_pss, self.peak_runs = max(self.peak_pss, pss), max(self.peak_runs, len(runs))
            self.per_run.extend(runs)
            time.sleep(0.5)


def tree_pss(proc) -> int:
    total = 0
    for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]:
        try:
            total += p.memory_full_info().pss
        except psutil.Error:
            pass
    return total


def seconds(run: dict, a: str, b: str) -> float:
    return (datetime.fromisoformat(run[b]) - datetime.fromisoformat(run[a])).total_seconds()


def previews(env: dict, root: Path, runs: int, pool_limit: int | None, worker_limit: int) -> None:
    api = operator(env)
    api.patch("/work_pools/privrelease", json={"concurrency_limit": pool_limit})
    dpne = deployment(api, "dpne")["id"]
    ids = [
        api.post(f"/deployments/{dpne}/create_flow_run", json={"parameters": {"preview": True}}).json()["id"] for _ in range(runs)
    ]
    t = time.perf_counter()
    with worker(env, root / f"worker-{pool_limit}.log", limit=worker_limit) as proc:
        sampler = Sampler(proc)
        sampler.start()
        states = [_wait(api, i, root / f"worker-{pool_limit}.log", 1800) for i in ids]
        sampler.stop.set()
        sampler.join()
    wall = time.perf_counter() - t
    done = [api.get(f"/flow_runs/{i}").json() for i in ids]
    running = [seconds(r, "start_time", "end_time") for r in done]
    per_run = statistics.median(sampler.per_run) / MiB if sampler.per_run else 0
    print(
        f"| {pool_limit or 'none'} | {worker_limit} | {runs} | {sampler.peak_runs} | {sampler.peak_pss / MiB:.0f} MiB | "
        f"{per_run:.0f} MiB | {statistics.median(running):.1f} s ({min(running):.1f}-{max(running):.1f}) | {wall:.0f} s | "
        f"{states.count('COMPLETED')}/{runs} |",
        flush=True,
    )


def waiting(env: dict, root: Path) -> None:
    api = operator(env)
    ledger = Ledger(Path(env["PRIVRELEASE_HOME"]) / "privrelease.duckdb")
    ledger.set_budget("logins-demo", Budget(40.0, 1e-3), approve_above=0.0)
    form = deployment(api, "outlier-count")["id"]
    with worker(env, root / "worker-wait.log") as proc:
        time.sleep(5)
        idle = tree_pss(proc)
        run = api.post(f"/deployments/{form}/create_flow_run", json={"parameters": {}}).json()["id"]
        peak = 0
        while api.get(f"/flow_runs/{run}").json()["state"]["type"] != "PAUSED":
            peak = max(peak, tree_pss(proc))
            time.sleep(0.5)
        while run_processes(proc, run):
            time.sleep(0.5)
        time.sleep(2)
        print(
            f"worker idle {idle / MiB:.0f} MiB; while the release ran up to its question {peak / MiB:.0f} MiB; "
            f"while it waits for the steward (suspended) {tree_pss(proc) / MiB:.0f} MiB, "
            f"{len(run_processes(proc, run))} processes for it",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--limit", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, running_server(Path(tmp)) as env:
        root = Path(tmp)
        deploy(env)
        print(
            "| pool limit | worker limit | previews | most flow-run processes at once | peak PSS of the worker's tree "
            "| median PSS of one flow-run process | running, median (min-max) | all done | completed |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        previews(env, root, args.runs, None, args.runs)
        previews(env, root, args.runs, args.limit, args.limit)
        waiting(env, root)


if __name__ == "__main__":
    main()
