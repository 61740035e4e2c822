"""Issue 7's benchmarks: REST trigger → published on a real server, and the Dask runner's speed-up.

Run: .venv/bin/python bench/bench_runner.py rest [--runs 3] [--query-seconds 1]
     PRIVRELEASE_DATA=... .venv/bin/python bench/bench_runner.py dpne [--runs 3] [--copies 10]
         (MSNBC ten times over, the DPNE mechanism, in process vs 2 Dask workers)
     PRIVRELEASE_DATA=... .venv/bin/python bench/bench_runner.py netns [--runs 2] [--copies 1]   (as root)
         (the same on two hosts: network namespaces A and B, a Dask scheduler and a worker on A, a
          worker on B, the snapshot read by each from one shared folder; bytes per level)
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from privrelease.core import parallel  # noqa: E402


def rest(runs: int, query_seconds: int) -> None:
    """Submit-to-published of the `ra` form's Quick run (the 20,000-row demo census) on a warm worker,
    split into pickup (submitted → the worker's process starts the run), the run, and the rest."""
    import httpx

    from privrelease.core.datasets.demo import write_demo
    from tests.system.test_server import _create_run, _run, deployment, running_server, worker

    with tempfile.TemporaryDirectory() as tmp, running_server(Path(tmp)) as env:
        api = env["PREFECT_API_URL"]
        env["PREFECT_WORKER_QUERY_SECONDS"] = str(query_seconds)
        write_demo(Path(env["PRIVRELEASE_HOME"]))  # registers the demo datasets (a 20,000-row census table)
        _run(env, "work-pool", "create", "privrelease", "--type", "process", "--base-job-template", "deploy/process-pool.json")
        _run(env, "--no-prompt", "deploy", "--all")
        with worker(env, Path(tmp) / "worker.log"):
            ra = deployment(api, "ra")
            for i in range(runs + 1):  # the first run warms the worker up
                t = time.perf_counter()
                run_id = _create_run(api, ra["id"], {}).json()["id"]
                while (run := httpx.get(f"{api}/flow_runs/{run_id}", timeout=60).json())["state"]["type"] not in (
                    "COMPLETED",
                    "FAILED",
                    "CRASHED",
                ):
                    time.sleep(0.2)
                total = time.perf_counter() - t
                created, start, end = (np.datetime64(run[k].rstrip("Z")[:26]) for k in ("created", "start_time", "end_time"))
                pickup, flow = ((start - created) / np.timedelta64(1, "s"), (end - start) / np.timedelta64(1, "s"))
                print(
                    f"{'warm-up' if i == 0 else f'run {i}'}: {run['state']['type']} {total:.1f} s submit to published "
                    f"(submitted to running {pickup:.1f} s, running {flow:.1f} s)",
                    flush=True,
                )


def msnbc_times(copies: int) -> pd.DataFrame:
    """MSNBC ``copies`` times over, each copy's users with ids of their own (10x: 9,898,180 users)."""
    from bench.bench_dpne import msnbc

    one = msnbc()
    ids = one["user"].to_numpy()
    return pd.DataFrame(
        {"user": np.concatenate([ids + c * len(one) for c in range(copies)]), "text": np.tile(one["text"].to_numpy(), copies)}
    )


def _timed(state, fn, *args):
    """``fn(state, *args)`` and the wall and CPU seconds it took in the process that holds the partition."""
    t, cpu = time.perf_counter(), time.process_time()
    out = fn(state, *args)
    return out, (time.perf_counter() - t, time.process_time() - cpu)


class Levels:
    """Times each ``Partitions.map`` call (one per level) while installed: each partition's own
    counting time (measured on its worker), the flow's wait for all of them, and the flow's work
    from one level's counts to the next level's request (merge, noise, thresholds); with ``wire``
    (a byte counter), also what crossed the network during the level."""

    def __init__(self, wire: Callable[[], int] | None = None):
        self.rows: list[dict] = []
        self._wire = wire
        self._plain = parallel.Partitions.map
        self._last = self.opened = 0.0
        levels = self

        def timed_map(partitions, fn, *args):
            start = time.perf_counter()
            if levels.rows:
                levels.rows[-1]["flow"] = start - levels._last
            else:
                levels.opened = start - levels._last
            before = wire() if wire else 0
            outs = levels._plain(partitions, _timed, fn, *args)
            levels._last = time.perf_counter()
            levels.rows.append(
                {
                    "parts": [s for _, (s, _) in outs],
                    "cpu": [c for _, (_, c) in outs],
                    "wait": levels._last - start,
                    "flow": 0.0,
                    "wire": wire() - before if wire else None,
                    "sent": len(pickle.dumps(args)),
                    "back": sum(len(pickle.dumps(o)) for o, _ in outs),
                }
            )
            return [o for o, _ in outs]

        parallel.Partitions.map = timed_map

    def start(self) -> None:
        self.rows.clear()
        self._last = time.perf_counter()

    def stop(self) -> None:
        if self.rows:
            self.rows[-1]["flow"] = time.perf_counter() - self._last

    def report(self) -> None:
        print(f"  opening the partitions (reading and tokenizing): {self.opened:.1f} s", flush=True)
        for k, r in enumerate(self.rows, 1):
            parts = " / ".join(f"{s:.1f}" for s in r["parts"])
            cpu = " / ".join(f"{s:.1f}" for s in r["cpu"])
            print(
                f"  level {k}: partitions {parts} s (CPU {cpu} s), the flow waits {r['wait']:.1f} s "
                f"(straggler and round trip {r['wait'] - max(r['parts']):.2f} s), then works {r['flow']:.2f} s; "
                f"sends {r['sent'] / 1e3:.1f} kB to each partition, gets back {r['back'] / 1e3:.0f} kB"
                + ("" if r["wire"] is None else f"; {r['wire'] / 1e3:.0f} kB crossed the link"),
                flush=True,
            )


def dpne(runs: int, copies: int) -> None:
    """In process against 2 Dask workers, alternating, on one stored snapshot (as a release reads it:
    the flow loads the frame, workers read their user partitions from the file); per level, each
    partition's counting time, the flow's wait and the flow's own work."""
    import duckdb

    from bench.bench_dpne import PARAMS
    from privrelease.core.mechanisms import dpne as mech

    params = mech.Params(**PARAMS, tokenizer="whitespace")
    levels = Levels()
    with tempfile.TemporaryDirectory() as tmp, parallel.local_cluster(2) as cluster:  # as the runner starts one
        path = str(Path(tmp) / "v1.parquet")
        duckdb.connect().from_df(msnbc_times(copies)).write_parquet(path)
        frame = duckdb.connect().execute("SELECT * FROM read_parquet(?)", [path]).df()
        print(f"MSNBC x{copies}: {len(frame):,} users; cluster of 2 single-threaded workers started", flush=True)
        times: dict[str, list[float]] = {"local": [], "dask": []}
        for _ in range(runs):
            for kind in ("local", "dask"):
                with parallel.using(kind, cluster.scheduler_address):
                    levels.start()
                    t = time.perf_counter()
                    released, _ = mech.extract(frame, params, np.random.default_rng(1), snapshot=path)
                    times[kind].append(time.perf_counter() - t)
                    levels.stop()
                print(f"{kind}: {times[kind][-1]:.1f} s ({len(released)} n-grams; {os.getloadavg()[0]:.2f} load)", flush=True)
                levels.report()
        local, spread = statistics.median(times["local"]), statistics.median(times["dask"])
        print(f"median of {runs}: in process {local:.1f} s, Dask {spread:.1f} s, speed-up {local / spread:.2f}x")


def _veth_bytes(ns: str) -> int:
    """Bytes received plus sent by namespace ``ns``'s end of the veth pair (its only link but lo)."""
    links = json.loads(
        subprocess.run(["ip", "-n", ns, "-s", "-j", "link", "show"], capture_output=True, text=True, check=True).stdout
    )
    (veth,) = [link for link in links if link["ifname"] != "lo"]
    return veth["stats64"]["rx"]["bytes"] + veth["stats64"]["tx"]["bytes"]


def netns(runs: int, copies: int) -> None:
    """DPNE on two hosts (network namespaces): a scheduler and one worker on A (with the flow), one on
    B; each worker reads its users from the snapshot in a folder both mount. Per level: the bytes
    the flow sends to the partitions and gets back (pickled), and what crossed the veth pair."""
    import duckdb

    from bench.bench_dpne import PARAMS
    from privrelease.core.mechanisms import dpne as mech
    from tests.support.netns import A_ADDR, B_ADDR, exec_in, inside, two_hosts

    params = mech.Params(**PARAMS, tokenizer="whitespace")
    host_b: list[str] = []  # B's namespace, named when it is made
    levels = Levels(wire=lambda: _veth_bytes(host_b[0]))
    with tempfile.TemporaryDirectory() as tmp, two_hosts() as (a, b), inside(a):
        host_b.append(b)
        path = str(Path(tmp) / "v1.parquet")  # the shared store: one folder, the same path on both hosts
        duckdb.connect().from_df(msnbc_times(copies)).write_parquet(path)
        frame = duckdb.connect().execute("SELECT * FROM read_parquet(?)", [path]).df()
        dask = str(Path(sys.executable).parent / "dask")
        lean = {
            **os.environ,
            "DASK_CONFIG": str(REPO / "deploy" / "dask.yaml"),
        }  # as docs/guides/hosts.md starts workers on other hosts
        procs = [
            subprocess.Popen(
                [dask, "scheduler", "--host", A_ADDR, "--port", "8786", "--no-dashboard"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        ]
        for prefix, addr in (([], A_ADDR), (exec_in(b), B_ADDR)):
            procs.append(
                subprocess.Popen(
                    [
                        *prefix,
                        dask,
                        "worker",
                        f"tcp://{A_ADDR}:8786",
                        "--nthreads",
                        "1",
                        "--host",
                        addr,
                        "--no-dashboard",
                        "--memory-limit",
                        "0",
                    ],
                    env=lean,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        try:
            from distributed import Client

            with Client(f"tcp://{A_ADDR}:8786") as client:
                client.wait_for_workers(2, timeout=120)
            print(f"MSNBC x{copies}: {len(frame):,} users; scheduler and a worker on A, a worker on B", flush=True)
            times: dict[str, list[float]] = {"local": [], "dask": []}
            for _ in range(runs):
                for kind in ("local", "dask"):
                    total = _veth_bytes(b)
                    with parallel.using(kind, f"tcp://{A_ADDR}:8786"):
                        levels.start()
                        t = time.perf_counter()
                        released, _ = mech.extract(frame, params, np.random.default_rng(1), snapshot=path)
                        times[kind].append(time.perf_counter() - t)
                        levels.stop()
                    total = _veth_bytes(b) - total
                    print(
                        f"{kind}: {times[kind][-1]:.1f} s ({len(released)} n-grams; {os.getloadavg()[0]:.2f} load), "
                        f"{total / 1e3:.0f} kB over the link",
                        flush=True,
                    )
                    levels.report()
            local, spread = statistics.median(times["local"]), statistics.median(times["dask"])
            print(f"median of {runs}: in process {local:.1f} s, Dask on two hosts {spread:.1f} s, speed-up {local / spread:.2f}x")
        finally:
            for proc in reversed(procs):
                proc.terminate()
                proc.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["rest", "dpne", "netns"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--query-seconds", type=int, default=1, help="the worker's polling interval (Prefect's default: 10)")
    ap.add_argument("--copies", type=int, default=10, help="dpne: MSNBC this many times over")
    args = ap.parse_args()
    {
        "rest": lambda: rest(args.runs, args.query_seconds),
        "dpne": lambda: dpne(args.runs, args.copies),
        "netns": lambda: netns(args.runs, args.copies),
    }[args.what]()


if __name__ == "__main__":
    main()
