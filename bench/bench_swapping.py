"""MEWS / MEDS benchmarks and the shape of the paper's Tables 1 and 2.

Run: .venv/bin/python bench/bench_swapping.py [--skip-scaling] [--skip-tables]
Writes docs/img/mews_table1.png and docs/img/mews_table2.png; numbers go to bench/RESULTS.md and
docs/REPRODUCTION.md by hand.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from privrelease.core.mechanisms import swapping as sw  # noqa: E402

UCI = Path(os.environ.get("PRIVRELEASE_DATA", "data")) / "uci"


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def binormal(n: int, rho: float, seed: int) -> pd.DataFrame:
    """n tuples after truncation to [-2, 2]^2 (n counts the tuples that survive)."""
    g = rng(seed)
    x = g.multivariate_normal([0, 0], [[1, rho], [rho, 1]], size=int(n * 1.15) + 100)
    x = x[(np.abs(x) <= 2).all(axis=1)][:n]
    return pd.DataFrame({"x": x[:, 0], "y": x[:, 1]})


def scaling() -> None:
    print("## MEWS scaling (4 attributes, widths 0.5 sd, singletons merged)")
    for n in (1_000_000, 10_000_000):
        frame = pd.DataFrame(rng(0).normal(size=(n, 4)), columns=list("abcd"))
        p = sw.MEWSParams(swap_set=list("abcd"), widths=0.5, singletons="merge")
        times = []
        for s in range(3):
            t = time.perf_counter()
            r = sw.MEWS.run(frame, p, sw.MEWS.plan(p), rng(s))
            times.append(time.perf_counter() - t)
        print(f"MEWS n={n:,}: median {np.median(times):.2f} s (d = {r.privacy['partition_degree']})")
    print("## MEDS vs MEWS at equal n (4 attributes; MEDS k = 50)")
    for n in (2000, 4000, 8000, 16000):
        frame = pd.DataFrame(rng(1).normal(size=(n, 4)), columns=list("abcd"))
        t = time.perf_counter()
        sw.MEDS.run(frame, depth := sw.DepthParams(swap_set=list("abcd"), k=50), sw.MEDS.plan(depth), rng(0))
        meds = time.perf_counter() - t
        t = time.perf_counter()
        sw.MEWS.run(
            frame, merged := sw.MEWSParams(swap_set=list("abcd"), widths=0.5, singletons="merge"), sw.MEWS.plan(merged), rng(0)
        )
        mews = time.perf_counter() - t
        print(f"n={n:>6,}: MEDS {meds:7.2f} s   MEWS {mews:5.3f} s   ratio {meds / mews:7.0f}")


def table1() -> list[tuple]:
    """Risk P (width hidden, and given the published d) against n, rho and t_ub."""
    rows = []
    for rho, t_ub, n in itertools.product((0.0, 0.5, 0.9), (0.5, 1.0), (1_000, 10_000, 100_000)):
        frame = binormal(n, rho, seed=n)
        p = sw.MEWSParams(swap_set=["x", "y"], t_range=(0.02, t_ub), width_units="absolute", candidates=100)
        try:
            priv = sw.MEWS.run(frame, p, sw.MEWS.plan(p), rng(0)).privacy
            rows.append((rho, t_ub, n, priv["q_ew"], priv["p_known"], priv["p_hidden"], priv["p_hidden_given_published"]))
        except Exception as exc:  # noqa: BLE001 - no feasible width is a result here
            rows.append((rho, t_ub, n, 0, float("nan"), float("nan"), float("nan")))
            print("no feasible width:", rho, t_ub, n, type(exc).__name__)
    print("| rho | t_ub | n | q_ew | P known | P hidden | P given published d |", flush=True)
    for r in rows:
        print(
            "| "
            + " | ".join(f"{v:.4f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v) for v in r)
            + " |"
        )
    return rows


def delta_rho(a: pd.DataFrame, b: pd.DataFrame) -> np.ndarray:
    ca, cb = a.corr().to_numpy(), b.corr().to_numpy()
    i, j = np.triu_indices(len(ca), 1)
    return np.abs(ca[i, j] - cb[i, j])


def datasets() -> dict[str, pd.DataFrame]:
    g = rng(7)
    x = g.multivariate_normal(np.zeros(4), [[1, 0.5, 0, 0], [0.5, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], size=100_000)
    out = {"Syn100k": pd.DataFrame(x, columns=["v1", "v2", "v3", "v4"])}
    if (UCI / "abalone.data.gz").exists():
        abalone = pd.read_csv(UCI / "abalone.data.gz")
        out["Abalone"] = abalone.drop(columns=["Sexo", "Anillos"]).astype(float)
        magic = pd.read_csv(UCI / "magic04.data.gz", header=None)
        out["MAGIC"] = magic.iloc[:, :10].astype(float).set_axis([f"fm{i}" for i in range(10)], axis=1)
    return out


def width_for_degree(sample: pd.DataFrame, cols: list[str], target: int) -> tuple[float, int]:
    """The MEWS width (in sd) whose partition degree, singletons merged, is closest to ``target``."""
    lo, hi, best = 0.05, 20.0, (20.0, 1)
    for _ in range(30):
        mid = (lo * hi) ** 0.5
        d = sw.MEWS.run(
            sample, mp := sw.MEWSParams(swap_set=cols, widths=mid, singletons="merge"), sw.MEWS.plan(mp), rng(0)
        ).privacy["partition_degree"]
        if abs(d - target) < abs(best[1] - target):
            best = (mid, d)
        lo, hi = (mid, hi) if d > target else (lo, mid)
    return best


def table2(runs: int = 3) -> list[tuple]:
    """Mean Δρ over attribute pairs and its spread over runs: MEWS vs MEDS at about equal degree."""
    rows = []
    for name, frame in datasets().items():
        cols = list(frame.columns)
        # MEDS costs O(n^2) per pair of bins above 4 dimensions: compare on 4,000-row samples
        sample = frame if len(frame) <= 4_200 else frame.sample(4_000, random_state=0).reset_index(drop=True)
        for k in (100, 40):
            width, degree = width_for_degree(sample, cols, len(sample) // k)
            mews_dr = [
                delta_rho(
                    sample,
                    sw.MEWS.run(
                        sample, wp := sw.MEWSParams(swap_set=cols, widths=width, singletons="merge"), sw.MEWS.plan(wp), rng(s)
                    ).data,
                )
                for s in range(runs)
            ]
            meds_dr = [
                delta_rho(sample, sw.MEDS.run(sample, dp := sw.DepthParams(swap_set=cols, k=k), sw.MEDS.plan(dp), rng(s)).data)
                for s in range(runs)
            ]
            rows.append(
                (
                    name,
                    len(sample),
                    len(cols),
                    round(width, 3),
                    degree,
                    k,
                    len(sample) // k,
                    float(np.mean(mews_dr)),
                    float(np.std([d.mean() for d in mews_dr])),
                    float(np.mean(meds_dr)),
                    float(np.std([d.mean() for d in meds_dr])),
                )
            )
            print(rows[-1], flush=True)
    print(
        "| data | n | attrs | MEWS width (sd) | MEWS d | MEDS k | MEDS d | MEWS mean Δρ | (sd over runs) | MEDS mean Δρ | (sd over runs) |"
    )
    for r in rows:
        print("| " + " | ".join(f"{v:.4f}" if isinstance(v, float) else str(v) for v in r) + " |")
    return rows


def plots(t1: list[tuple], t2: list[tuple]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = REPO / "docs" / "img"
    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, t_ub in zip(axes, (0.5, 1.0)):
        for rho in (0.0, 0.5, 0.9):
            pts = [(r[2], r[5]) for r in t1 if r[0] == rho and r[1] == t_ub]
            ax.plot(*zip(*pts), marker="o", label=f"ρ = {rho}")
        ax.set_xscale("log")
        ax.set_title(f"MEWS risk P (width hidden), t_ub = {t_ub}", fontsize=10)
        ax.set_xlabel("n")
        ax.axhline(0.07, color="grey", ls=":", lw=1)
    axes[0].set_ylabel("P")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out / "mews_table1.png", dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [f"{r[0]}\nd={r[4]}" for r in t2]
    xs = np.arange(len(t2))
    ax.bar(xs - 0.2, [r[7] for r in t2], 0.4, yerr=[r[8] for r in t2], label="MEWS")
    ax.bar(xs + 0.2, [r[9] for r in t2], 0.4, yerr=[r[10] for r in t2], label="MEDS")
    ax.set_xticks(xs, labels, fontsize=8)
    ax.set_ylabel("mean Δρ over attribute pairs")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "mews_table2.png", dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--skip-tables", action="store_true")
    args = parser.parse_args()
    if not args.skip_scaling:
        scaling()
    if not args.skip_tables:
        t2 = table2()
        plots(table1(), t2)


if __name__ == "__main__":
    main()
