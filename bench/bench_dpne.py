"""DPNE at the paper's scale: MSNBC (Table 4 settings), its DPSU baselines, and a 10x synthetic corpus.

Run: .venv/bin/python bench/bench_dpne.py [--runs 5] [--skip-synthetic]
Results are recorded by hand in bench/RESULTS.md and docs/REPRODUCTION.md.
"""

from __future__ import annotations

import argparse
import gzip
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import dpne_baselines  # noqa: E402
from privrelease.core import noise  # noqa: E402
from privrelease.core.mechanisms import dpne  # noqa: E402

MSNBC = Path(os.environ.get("PRIVRELEASE_DATA", "data")) / "msnbc" / "msnbc990928.seq.gz"
TABLE4 = {
    "DPNE": [17, 254, 1273, 1954, 2221, 2020],
    "DPSU-all": [17, 249, 930, 1145, 1007, 768],
    "DPSU-even": [17, 246, 899, 1107, 996, 766],
    "DPSU-single": [17, 260, 1483, 2180, 2210, 1819],
}
PARAMS = {"user_column": "user", "text_column": "text", "epsilon": 1.0, "delta": 1e-7, "T": 6, "delta0": 10, "eta": 0.01}


def msnbc() -> pd.DataFrame:
    """One row per user: the page-category sequence as whitespace-separated tokens."""
    with gzip.open(MSNBC, "rt", newline="") as handle:
        lines = handle.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("% Sequences:")) + 2
    texts = [line.strip() for line in lines[start:] if line.strip()]
    return pd.DataFrame({"user": np.arange(len(texts)), "text": texts})


def full_release(frame: pd.DataFrame) -> tuple[float, float, float, dict]:
    """As a steward and an analyst would: `privrelease dataset add`, then `privrelease release`, each
    a fresh process in a fresh home, with no Prefect server configured. Returns the registration
    and release wall times, the release's peak RSS and its counts by length."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "home" / "data"
        data.mkdir(parents=True)
        duckdb.connect().from_df(frame).write_parquet(str(data / "msnbc.parquet"))
        params = ", ".join(f"{k}: {v}" for k, v in PARAMS.items() if k != "user_column")
        (Path(tmp) / "request.yaml").write_text(f"dataset: msnbc\nmechanism: {{name: dpne, params: {{{params}}}}}\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
        env["PRIVRELEASE_HOME"] = str(Path(tmp) / "home")
        exe = str(Path(sys.executable).parent / "privrelease")
        t = time.perf_counter()
        subprocess.run(
            [
                exe,
                "dataset",
                "add",
                "msnbc",
                "--source",
                "msnbc.parquet",
                "--format",
                "parquet",
                "--unit",
                "user:user",
                "--purpose",
                "dp",
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        registration = time.perf_counter() - t
        # a cap above the release's (1, 1e-7): the admission filter sets part of delta aside for its conversion
        subprocess.run(
            [exe, "ledger", "set-budget", "msnbc", "--epsilon", "2", "--delta", "1e-6"], env=env, check=True, capture_output=True
        )
        t = time.perf_counter()
        subprocess.run([exe, "release", str(Path(tmp) / "request.yaml")], env=env, check=True, capture_output=True)
        wall = time.perf_counter() - t
        manifest = next((Path(tmp) / "home" / "releases" / "msnbc").glob("*/manifest.json")).read_text()
    import json

    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return registration, wall, rss, json.loads(manifest)["counts_by_length"]


def summarize(rows: list[list[int]]) -> str:
    a = np.array(rows)
    cells = [f"{m:.0f} ± {s:.0f}" for m, s in zip(a.mean(0), a.std(0, ddof=1) if len(a) > 1 else np.zeros(a.shape[1]))]
    total = a.sum(1)
    return " | ".join(cells) + f" | {total.mean():.0f} ± {total.std(ddof=1) if len(a) > 1 else 0:.0f}"


def synthetic(posts: int, seed: int = 0) -> pd.DataFrame:
    """Zipf-distributed words (vocabulary 100,000, exponent 1.1), 6 tokens a post, 10 posts a user."""
    rng = np.random.default_rng(seed)
    words = rng.zipf(1.1, size=(posts, 6))
    words = np.where(words > 100_000, rng.integers(1, 100_000, size=words.shape), words)
    con = duckdb.connect()
    ids = pd.DataFrame({f"t{i}": words[:, i] for i in range(6)})
    con.register("ids", ids)
    return con.execute(
        "SELECT (row_number() OVER () - 1) // 10 AS user, concat_ws(' ', 'w' || t0, 'w' || t1, 'w' || t2, "
        "'w' || t3, 'w' || t4, 'w' || t5) AS text FROM ids"
    ).df()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument("--release-only", action="store_true", help="only the registration and the CLI release")
    args = parser.parse_args()
    frame = msnbc()
    print(f"MSNBC: {len(frame)} users/posts, {frame['text'].str.count(' ').sum() + len(frame)} tokens")
    registration, wall, rss, counts = full_release(frame)
    print(
        f"`privrelease dataset add` (steward, once): {registration:.1f} s; `privrelease release` of the registered "
        f"dataset: {wall:.1f} s wall, peak RSS {rss:.0f} MiB; counts {counts}"
    )
    if args.release_only:
        return
    params = dpne.Params(**PARAMS)
    rows, times = [], []
    for _ in range(args.runs):
        t = time.perf_counter()
        planned = dpne.plan(params)
        released, _ = dpne.extract(frame, params, planned, noise.generator())  # any draw: the production path's draws, timed
        times.append(time.perf_counter() - t)
        rows.append([int((released["n"] == k).sum()) for k in range(1, 7)])
    print(f"DPNE core: median {statistics.median(times):.1f} s per run")
    print("| method | k=1 | 2 | 3 | 4 | 5 | 6 | total |")
    print(f"| DPNE (ours, {args.runs} runs) | {summarize(rows)} |")
    for variant in ("all", "even", "single"):
        base = [
            list(dpne_baselines.baseline(frame, params, noise.generator(), variant).values()) for _ in range(args.runs)
        ]  # any draw: the production path's draws, timed
        print(f"| DPSU-{variant} (ours) | {summarize(base)} |")
    for name, row in TABLE4.items():
        print(f"| {name} (paper) | " + " | ".join(map(str, row)) + f" | {sum(row) if name != 'DPSU-single' else '-'} |")
    if not args.skip_synthetic:
        big = synthetic(10 * len(frame))
        big_params = dpne.Params(**{**PARAMS, "tokenizer": "whitespace"})
        t = time.perf_counter()
        planned = dpne.plan(big_params)
        released, _ = dpne.extract(big, big_params, planned, noise.generator())  # any draw: the production path's draws, timed
        print(
            f"synthetic Zipf corpus, {len(big)} posts, {big['user'].nunique()} users: DPNE core {time.perf_counter() - t:.1f} s, "
            f"released {len(released)} n-grams; peak RSS of this process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
        )


if __name__ == "__main__":
    main()
