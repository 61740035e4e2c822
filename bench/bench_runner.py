"""Issue 7's benchmarks: REST trigger → published on a real server, and the Dask runner's speed-up.

Run: .venv/bin/python bench/bench_runner.py rest [--runs 3]
     .venv/bin/python bench/bench_runner.py dpne        (MSNBC, the DPNE mechanism, in process vs 2 Dask workers)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from core import parallel  # noqa: E402


def rest(runs: int) -> None:
    import httpx

    from core.demo import write_demo
    from tests.test_server import BIN, _create_run, _run, _stop, _wait, running_server

    with tempfile.TemporaryDirectory() as tmp, running_server(Path(tmp)) as env:
        api = env["PREFECT_API_URL"]
        write_demo(Path(env["PRIVRELEASE_HOME"]))  # registers the demo datasets (a 20,000-row census table)
        _run(env, "work-pool", "create", "privrelease", "--type", "process", "--base-job-template", "deploy/process-pool.json")
        _run(env, "--no-prompt", "deploy", "--all")
        log = open(Path(tmp) / "worker.log", "w")
        worker = subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", "privrelease", "--install-policy", "never"],
                                  env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            deployment = httpx.get(f"{api}/deployments/name/release/tabular-release", timeout=10).json()
            for i in range(runs):
                t = time.perf_counter()
                run = _create_run(api, deployment["id"], {})
                state = _wait(api, run.json()["id"], Path(tmp) / "worker.log")
                print(f"run {i + 1}: {state} {time.perf_counter() - t:.1f} s from POST to published", flush=True)
        finally:
            _stop(worker)
            log.close()


def dpne() -> None:
    from bench.bench_dpne import PARAMS, msnbc
    from core.mechanisms import dpne as mech

    frame = msnbc()
    params = mech.Params(**PARAMS, tokenizer="whitespace")
    for kind in ("local", "dask", "local", "dask"):
        with parallel.using(kind, n_workers=2):
            t = time.perf_counter()
            released, _ = mech.extract(frame, params, np.random.default_rng(1))
            print(f"{kind}: {time.perf_counter() - t:.1f} s ({len(released)} n-grams)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["rest", "dpne"])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    {"rest": lambda: rest(args.runs), "dpne": dpne}[args.what]()


if __name__ == "__main__":
    main()
