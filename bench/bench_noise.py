"""Throughput of core.noise's exact samplers, and what noise costs DPNE on MSNBC (Table 4 settings).

Run: .venv/bin/python bench/bench_noise.py [--runs 3] [--skip-dpne]
Results are recorded by hand in bench/RESULTS.md. The DPNE part times ``dpne.extract`` and, inside
it, every call into ``privrelease.core.noise`` (wrapped here, in the benchmark only); run the same script from
an older checkout to get the "before" row.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from privrelease.core import noise  # noqa: E402


def rate(label: str, n: int, seconds: float) -> None:
    print(f"| {label} | {n:,} | {seconds:.2f} s | {n / seconds:,.0f} /s | {seconds / n * 1e6:.1f} µs |")


def samplers() -> None:
    rng = noise.generator()  # any draw: the production path's draws, timed
    print("| sampler | draws | time | draws/s | per draw |\n|---|---|---|---|---|")
    sigma = 11.78  # DPNE's sigma_k on MSNBC at Table 4 settings
    unit = noise.grid(sigma)
    zeros = np.zeros(1_000_000, np.int64)
    t = time.perf_counter()
    noise.gaussian(rng, sigma, zeros, unit)
    rate("discrete Gaussian, bulk (one call, s = sigma/grid ~ 2^20)", len(zeros), time.perf_counter() - t)
    t = time.perf_counter()
    noise.gaussian_tail(rng, sigma, unit, 5 * sigma, 1_000_000)
    rate("discrete Gaussian tail beyond 5 sigma, bulk", 1_000_000, time.perf_counter() - t)
    t = time.perf_counter()
    noise.laplace(rng, 3.0, zeros, noise.grid(3.0))
    rate("discrete Laplace, bulk", len(zeros), time.perf_counter() - t)
    t = time.perf_counter()
    np.random.default_rng().normal(0, sigma, len(zeros))  # any draw: the production path's draws, timed
    rate("for scale: numpy float Gaussian (not used for DP)", len(zeros), time.perf_counter() - t)
    one = np.zeros(1, np.int64)
    t = time.perf_counter()
    for _ in range(10_000):
        noise.gaussian(rng, 496.0, one, noise.grid(496.0))
    rate("discrete Gaussian, one value a call (global outlier counts)", 10_000, time.perf_counter() - t)
    unit = noise.scalar_grid(40.0)
    t = time.perf_counter()
    for _ in range(10_000):
        noise.exact_gaussian(rng, 496.0, 0, unit)
    rate("exact_gaussian in Python integers, s >= 2^40 (smooth outlier counts)", 10_000, time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(10_000):
        noise.laplace(rng, 0.5, one, noise.grid(0.5))
    rate("discrete Laplace, one value a call (the released noise std)", 10_000, time.perf_counter() - t)
    quality = np.arange(100) * 3
    t = time.perf_counter()
    for _ in range(1_000):
        noise.permute_and_flip(rng, quality, Fraction(1, 20))
    rate("permute-and-flip over 100 candidates (one selection)", 1_000, time.perf_counter() - t)


def dpne_cost(runs: int) -> None:
    from bench_dpne import PARAMS, msnbc

    from privrelease.core.mechanisms import dpne

    spent = [0.0]
    for name in ("gaussian", "gaussian_tail"):
        original = getattr(noise, name)

        def timed(*args, _f=original, **kw):
            t = time.perf_counter()
            try:
                return _f(*args, **kw)
            finally:
                spent[0] += time.perf_counter() - t

        setattr(noise, name, timed)
    frame = msnbc()
    params = dpne.Params(**PARAMS)
    totals, noise_times = [], []
    for _ in range(runs):
        spent[0] = 0.0
        t = time.perf_counter()
        planned = dpne.plan(params)
        released, _ = dpne.extract(frame, params, planned, noise.generator())  # any draw: the production path's draws, timed
        totals.append(time.perf_counter() - t)
        noise_times.append(spent[0])
    print(
        f"DPNE on MSNBC ({len(released)} n-grams released in the last run): median {statistics.median(totals):.2f} s "
        f"per run, of which noise {statistics.median(noise_times):.3f} s ({runs} runs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-dpne", action="store_true")
    parser.add_argument("--only-dpne", action="store_true")
    args = parser.parse_args()
    if not args.only_dpne:
        samplers()
    if not args.skip_dpne:
        dpne_cost(args.runs)


if __name__ == "__main__":
    main()
