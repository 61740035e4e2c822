"""A release's wall time as its dataset's ledger history grows (issue #57): the same `privrelease release` of a DP
count by group on UCI Adult, timed in a fresh process after 0, ``--step``, 2 x ``--step``, ... earlier charges of the
same request, for each checkout, interleaved in one home so that both see the same history and load.

Before a release is charged, the command checks that no identical request waits sealed (``--resume``); after it, the
budget line bisects for the largest epsilon the cap still admits. Both read the dataset's history: this measures
what that costs as it grows. The earlier charges are made in this process (``cli.main``, its imports paid once).

Run: PRIVRELEASE_DATA=... .venv/bin/python bench/bench_history.py [--step 100] [--steps 3] [--runs 3] [--against /path]
(results recorded by hand in bench/RESULTS.md)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ra import adult

REPO = Path(__file__).resolve().parent.parent
REQUEST = """dataset: adult
mechanism:
  name: aggregate
  params:
    group_by: [sex]
    measures:
      - {op: count}
    epsilon: 0.001
    delta: 1.0e-12
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--step", type=int, default=100, help="earlier charges added between measurements")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3, help="timed releases per checkout at each history length")
    parser.add_argument("--checkout", default=str(REPO))
    parser.add_argument("--against", help="a second checkout, its releases interleaved with the first's")
    args = parser.parse_args()
    checkouts = [args.checkout] + ([args.against] if args.against else [])
    with tempfile.TemporaryDirectory() as tmp:
        home, data = Path(tmp) / "home", Path(tmp) / "data"
        data.mkdir()
        adult().to_csv(data / "adult.csv", index=False)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")} | {"PRIVRELEASE_HOME": str(home)}
        os.environ.update(env)
        from privrelease.cli.main import main as cli

        exe = str(Path(sys.executable).parent / "privrelease")
        for command in (
            [
                "dataset",
                "add",
                "adult",
                "--source",
                str(data / "adult.csv"),
                "--format",
                "csv",
                "--unit",
                "record",
                "--purpose",
                "dp",
            ],
            ["ledger", "set-budget", "adult", "--epsilon", "1000", "--delta", "1e-6"],
        ):
            subprocess.run([exe, *command], env=env, check=True, capture_output=True)
        request = Path(tmp) / "request.yaml"
        request.write_text(REQUEST)
        print("| earlier charges | checkout | wall, median (min–max) |")
        print("|---|---|---|")
        for step in range(args.steps + 1):
            if step:
                with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                    for _ in range(args.step):  # the history, made in this process
                        assert cli(["release", str(request)]) == 0
            times: dict[str, list[float]] = {c: [] for c in checkouts}
            for i in range(args.runs):
                for c in checkouts if i % 2 == 0 else checkouts[::-1]:
                    t = time.perf_counter()
                    subprocess.run([exe, "release", str(request)], env=env | {"PYTHONPATH": c}, check=True, capture_output=True)
                    times[c].append(time.perf_counter() - t)
            for c, walls in times.items():
                print(f"| {step * args.step} | {c} | {statistics.median(walls):.2f} s ({min(walls):.2f}–{max(walls):.2f}) |")


if __name__ == "__main__":
    main()
