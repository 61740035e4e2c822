"""DPNE's corpus on MSNBC (issue #42): ``dpne_corpus.open_partition`` in process on a registered snapshot's
file, cold (read and tokenized by DuckDB, then the cache written beside it) against warm (the cache mapped back),
and reading the file with no cache at all (a path: what a release did before the cache). Each run in this
process, timed with ``time.perf_counter``, after one untimed run (page cache, imports).

Run: PRIVRELEASE_DATA=… .venv/bin/python bench/bench_dpne_corpus.py [--runs 5]   (results recorded by hand in bench/RESULTS.md)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dpne import PARAMS, msnbc

from privrelease.core.datasets import snapshots
from privrelease.core.mechanisms import dpne
from privrelease.core.mechanisms.base import Snapshot
from privrelease.core.mechanisms.dpne import corpus as dpne_corpus


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    params = dpne.Params(**PARAMS)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "v1.parquet"
        duckdb.connect().from_df(msnbc()).write_parquet(str(path))
        snapshot = Snapshot(str(path), snapshots.sha256(path))
        cache = dpne_corpus.cache_path(path, dpne_corpus.cache_key(snapshot.digest, params))

        def opened(source: Snapshot | str) -> float:
            t = time.perf_counter()
            dpne_corpus.open_partition((source, params, 1, 0)).close()
            return time.perf_counter() - t

        opened(str(path))
        times: dict[str, list[float]] = {
            "no cache (the file's path)": [],
            "cold (tokenize, write the cache)": [],
            "warm (the cache mapped)": [],
        }
        for _ in range(args.runs):
            times["no cache (the file's path)"].append(opened(str(path)))
            cache.unlink(missing_ok=True)
            times["cold (tokenize, write the cache)"].append(opened(snapshot))
            times["warm (the cache mapped)"].append(opened(snapshot))
        print(f"load average {os.getloadavg()[0]:.1f}; cache file {cache.stat().st_size / 2**20:.1f} MiB")
        print("| open_partition | median (min–max) |\n|---|---|")
        for name, runs in times.items():
            print(f"| {name} | {statistics.median(runs) * 1000:.0f} ms ({min(runs) * 1000:.0f}–{max(runs) * 1000:.0f}) |")


if __name__ == "__main__":
    main()
