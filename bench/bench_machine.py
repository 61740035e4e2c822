"""What two processes get from this machine's two cores: the same compute-bound loop and the same
memory-streaming loop, run alone and then as two processes at once. The ratio bounds what any
two-worker split (the Dask runner's, DuckDB's two threads) can gain on work of that kind.

Run: .venv/bin/python bench/bench_machine.py [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from multiprocessing import get_context

import numpy as np


def compute(_: int = 0) -> float:
    """Integer arithmetic in the interpreter: registers and L1, no memory traffic to speak of."""
    t, x = time.perf_counter(), 0
    for i in range(20_000_000):
        x = (x * 31 + i) & 0xFFFFFFFF
    return time.perf_counter() - t


def stream(_: int = 0) -> float:
    """A 200 MB int32 array read and written 200 times: memory bandwidth, as the counting's array passes."""
    a = np.ones(50_000_000, np.int32)
    a += 1  # touch every page before timing
    t = time.perf_counter()
    for _ in range(200):
        a += 1
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    ctx = get_context("spawn")
    print("| work | one process alone | each of two at once | two processes' throughput / one's |")
    print("|---|---|---|---|")
    for name, fn in (("compute-bound loop", compute), ("memory-streaming loop", stream)):
        alone, together = [], []
        for _ in range(args.runs):
            with ctx.Pool(1) as pool:
                alone.append(pool.map(fn, [0])[0])
            with ctx.Pool(2) as pool:
                together.append(max(pool.map(fn, [0, 1])))
        a, b = statistics.median(alone), statistics.median(together)
        print(f"| {name} | {a:.2f} s | {b:.2f} s | {2 * a / b:.2f}x |")


if __name__ == "__main__":
    main()
