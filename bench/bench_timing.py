"""Timing of the data-dependent step on neighbouring tables (review finding 4).

Prefect shows every task's duration to analysts, and the privatize task's duration depends on the
data. This measures how much: ``run`` (the privatize step) of each DP mechanism on random pairs of
neighbouring tables, the time on each, and the largest difference between neighbours. docs/SECURITY.md's
release-surface guarantees state the result as a bound.

Run: .venv/bin/python bench/bench_timing.py [--pairs 40]   (results recorded by hand in bench/RESULTS.md)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ["PRIVRELEASE_TEST_MODE"] = "1"

from fractions import Fraction

from privrelease.core import noise
from privrelease.core.mechanisms import aggregate as agg
from privrelease.core.mechanisms import dpne
from privrelease.core.mechanisms import outliers as o
from privrelease.core.noise import exponential


def seconds(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def pairs_outliers(n: int, dims: int, rng: np.random.Generator, clustered: bool):
    """A table of n records in [0, 1]^dims (uniform, or half of them in one tight cluster) and a neighbour
    with one record replaced by a uniform one."""
    x = rng.random((n, dims))
    if clustered:
        x[: n // 2] = 0.5 + 0.01 * rng.random((n // 2, dims))
    y = x.copy()
    y[rng.integers(n)] = rng.random(dims)
    cols = [f"c{i}" for i in range(dims)]
    return pd.DataFrame(x, columns=cols), pd.DataFrame(y, columns=cols)


def pairs_dpne(users: int, rng: np.random.Generator):
    words = [f"w{i}" for i in range(30)]
    posts = [" ".join(rng.choice(words, size=int(rng.integers(2, 9)))) for _ in range(users)]
    d = pd.DataFrame({"user": range(users), "text": posts})
    return d, d.drop(index=int(rng.integers(users))).reset_index(drop=True)


def pairs_aggregate(users: int, rng: np.random.Generator, crowded: bool):
    """A user-unit table of ``users`` users over 20 keys, values in [0, 100]: each user one row in one key, or (not
    ``crowded``) a neighbour with one random user removed; ``crowded``: the neighbour adds one user with rows in
    three keys, so the bounding runs another plan (every row kept as it is, against ranking that user's rows)."""
    d = pd.DataFrame({"user": np.arange(users), "g": rng.integers(0, 20, users), "x": rng.uniform(0, 100, users).round(1)})
    if crowded:
        extra = pd.DataFrame({"user": [users] * 3, "g": [0, 1, 2], "x": [50.0, 50.0, 50.0]})
        return d, pd.concat([d, extra], ignore_index=True)
    return d, d.drop(index=int(rng.integers(users))).reset_index(drop=True)


def exponential_passes(candidates: int, repeats: int = 50) -> None:
    """One quantile draw's float pass against the exact MPFR pass it falls back to (``privrelease.core.noise.exponential``),
    over ``candidates`` candidates of weight 1 (a key's occupied steps in its interval)."""
    w, low = np.ones(candidates, np.int64), np.arange(candidates, dtype=np.int64)
    target, rate = Fraction(candidates, 2), Fraction(1, 4)
    rng = noise.generator(0)
    fast = [seconds(lambda: exponential._float_pass(w, low, low, target, rate, 2**63)) for _ in range(repeats)]
    exact = [seconds(lambda: exponential._exact_pass(rng, w, low, low, target, rate, 2**63)) for _ in range(repeats)]
    print(
        f"| quantile draw over {candidates:,} candidates: float pass / exact MPFR pass | {repeats} | "
        f"{statistics.median(fast) * 1e3:.2f} ms / {statistics.median(exact) * 1e3:.2f} ms | "
        f"{max(fast) * 1e3:.2f} ms / {max(exact) * 1e3:.2f} ms | | |"
    )


def measure(label: str, make, params, run, pairs: int) -> None:
    rng = np.random.default_rng(0)
    times_d, times_p, gaps = [], [], []
    run(*make(np.random.default_rng(99))[:1], params, noise.generator(0))  # warm-up: imports, DuckDB's first start
    for i in range(pairs):
        d, p = make(rng)
        td = seconds(lambda: run(d, params, noise.generator(i)))  # noqa: B023
        tp = seconds(lambda: run(p, params, noise.generator(i)))  # noqa: B023
        times_d.append(td), times_p.append(tp), gaps.append(abs(td - tp))
    both = times_d + times_p
    print(
        f"| {label} | {pairs} | {statistics.median(both) * 1e3:.1f} ms | {max(both) * 1e3:.1f} ms | "
        f"{statistics.median(gaps) * 1e3:.1f} ms | {max(gaps) * 1e3:.1f} ms |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=40)
    a = ap.parse_args()
    print("| privatize step (`run`) | pairs | median | max | median gap between neighbours | max gap |")
    print("|---|---|---|---|---|---|")
    for dims in (2, 3):
        for clustered in (False, True):
            cols = [f"c{i}" for i in range(dims)]
            params = o.Params(
                query="count", columns=cols, k=3, r=0.1, epsilon=1.0, delta=1e-5, standardize=False, noise="smooth", rows=15
            )
            measure(
                f"outliers count, smooth, N = 15, {dims}-D, {'half clustered' if clustered else 'uniform'}",
                lambda rng, dims=dims, clustered=clustered: pairs_outliers(15, dims, rng, clustered),
                params,
                o.run,
                a.pairs,
            )
    params = o.Params(
        query="count", columns=["c0", "c1"], k=3, r=0.1, epsilon=1.0, delta=1e-5, standardize=False, noise="global", rows=1000
    )
    measure("outliers count, global, N = 1,000, 2-D", lambda rng: pairs_outliers(1000, 2, rng, True), params, o.run, a.pairs)
    params = dpne.Params(user_column="user", text_column="text", epsilon=4, delta=1e-6, T=4, delta0=10)
    measure("DPNE, 2,000 users, T = 4", lambda rng: pairs_dpne(2000, rng), params, dpne.run, a.pairs // 2)
    params = agg.Params(
        group_by=["g"],
        measures=[{"op": "count"}, {"op": "quantile", "column": "x", "bounds": [0, 100], "q": [0.5]}],
        epsilon=1.0,
        delta=1e-6,
        user_column="user",
        max_groups=3,
        max_rows=1,
        domains={"g": list(range(20))},
    )
    for crowded in (False, True):
        measure(
            f"aggregate count + median, 20,000 users, 20 keys, {'a user in 3 keys added' if crowded else 'a user removed'}",
            lambda rng, crowded=crowded: pairs_aggregate(20_000, rng, crowded),
            params,
            agg.run,
            a.pairs // 2,
        )
    for candidates in (100, 10_000):
        exponential_passes(candidates)


if __name__ == "__main__":
    main()
