"""Benchmark RA / Enhanced RA on 1,000,000 rows x 9 QI columns, and a whole release of UCI Adult.

Run: .venv/bin/python bench/bench_ra.py [--rows N] [--skip-release]
Results are recorded by hand in bench/RESULTS.md (command, date, machine).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from privrelease.core import noise  # noqa: E402
from privrelease.core.datasets.demo import census  # noqa: E402
from privrelease.core.mechanisms import ra  # noqa: E402

ADULT = Path(os.environ.get("PRIVRELEASE_DATA", "data")) / "uci" / "adult.data.gz"
QI = ["education", "race", "sex", "workclass", "marital-status", "age", "relationship", "native-country", "Salary"]


def adult() -> pd.DataFrame:
    frame = pd.read_csv(ADULT, skipinitialspace=True, na_values="?")
    frame.columns = [c.strip() for c in frame.columns]
    return frame.dropna().reset_index(drop=True)


def adult_like(rows: int) -> pd.DataFrame:
    """Each QI column drawn from Adult's marginal (the demo table's if Adult is absent)."""
    source = adult() if ADULT.exists() else census().rename(columns={"salary": "Salary"})
    rng = np.random.default_rng(0)
    out = {c: source[c].to_numpy()[rng.integers(0, len(source), rows)] for c in QI}
    out["occupation"] = source["occupation"].to_numpy()[rng.integers(0, len(source), rows)]
    return pd.DataFrame(out)


def time_mechanism(frame: pd.DataFrame, params: ra.Params, repeats: int = 5) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        ra.run(frame, params, ra.plan(params), noise.generator())  # any draw: the production path's draws, timed
        times.append(time.perf_counter() - t)
    tracemalloc.start()
    ra.run(frame, params, ra.plan(params), noise.generator())  # any draw: the production path's draws, timed
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return statistics.median(times), peak / 2**20


def release_adult() -> tuple[float, list[float]]:
    """The steward registers Adult once, then two releases from the CLI in that home, with no Prefect
    server configured (the run is direct; with PREFECT_API_URL set it is a flow run on that server)."""
    walls = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "home" / "data"
        data.mkdir(parents=True)
        adult().to_csv(data / "adult.csv", index=False)
        (Path(tmp) / "request.yaml").write_text(
            f"dataset: adult\nmechanism: {{name: ra, params: {{qi: {QI}, sensitive: occupation}}}}\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
        env["PRIVRELEASE_HOME"] = str(Path(tmp) / "home")
        exe = Path(sys.executable).parent / "privrelease"
        t = time.perf_counter()
        subprocess.run(
            [
                str(exe),
                "dataset",
                "add",
                "adult",
                "--source",
                "adult.csv",
                "--format",
                "csv",
                "--unit",
                "record",
                "--purpose",
                "sdc",
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        registration = time.perf_counter() - t
        for _ in range(2):
            t = time.perf_counter()
            subprocess.run([str(exe), "release", str(Path(tmp) / "request.yaml")], env=env, check=True, capture_output=True)
            walls.append(time.perf_counter() - t)
    return registration, walls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--skip-release", action="store_true")
    args = parser.parse_args()
    frame = adult_like(args.rows)
    print(f"table: {args.rows} rows x {len(QI)} QI columns (+ sensitive), dtypes {sorted(set(map(str, frame.dtypes)))}")
    for label, params in (
        ("RA, uniform p", ra.Params(qi=QI, sensitive="occupation")),
        ("RA, entropy p", ra.Params(qi=QI, sensitive="occupation", p="entropy")),
        ("Enhanced RA, k = 3", ra.Params(qi=QI, sensitive="occupation", k=3)),
    ):
        median, peak = time_mechanism(frame, params)
        print(f"{label:<20} median {median:.3f} s   peak traced memory {peak:.0f} MiB")
    if not args.skip_release and ADULT.exists():
        registration, (first, second) = release_adult()
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(
            f"Adult (30,162 rows): dataset add {registration:.1f} s; privrelease release {first:.1f} s, then "
            f"{second:.1f} s; peak RSS {rss:.0f} MiB"
        )


if __name__ == "__main__":
    main()
