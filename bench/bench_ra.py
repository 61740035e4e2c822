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

from core import noise  # noqa: E402
from core.demo import census  # noqa: E402
from core.mechanisms import ra  # noqa: E402

ADULT = REPO.parent / "shared" / "data" / "uci" / "adult.data.gz"
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
        ra.run(frame, params, noise.generator())
        times.append(time.perf_counter() - t)
    tracemalloc.start()
    ra.run(frame, params, noise.generator())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return statistics.median(times), peak / 2**20


def release_adult() -> list[float]:
    """Two releases in one fresh home: the first also creates Prefect's database."""
    walls = []
    with tempfile.TemporaryDirectory() as tmp:
        adult().to_csv(Path(tmp) / "adult.csv", index=False)
        (Path(tmp) / "spec.yaml").write_text(
            "dataset: {id: adult, source: adult.csv, format: csv}\n"
            f"mechanism: {{name: ra, params: {{qi: {QI}, sensitive: occupation}}}}\n"
        )
        env = {**os.environ, "PRIVRELEASE_HOME": str(Path(tmp) / "home")}
        env.pop("PREFECT_API_URL", None)
        exe = Path(sys.executable).parent / "privrelease"
        for _ in range(2):
            t = time.perf_counter()
            subprocess.run([str(exe), "release", str(Path(tmp) / "spec.yaml")], env=env, check=True, capture_output=True)
            walls.append(time.perf_counter() - t)
    return walls


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
        cold, warm = release_adult()
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"privrelease release on Adult (30,162 rows, temporary Prefect server): {cold:.1f} s wall in a fresh "
              f"home (creates Prefect's database), {warm:.1f} s the next time; peak RSS {rss:.0f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
