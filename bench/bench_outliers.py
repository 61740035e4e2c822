"""DP outlier statistics: timings, and the paper's count and top-h experiments.

Run: .venv/bin/python bench/bench_outliers.py [--skip-timing] [--skip-repro] [--runs 1000]
Writes docs/img/outliers_noise.png and docs/img/outliers_topk.png; numbers go to
bench/RESULTS.md and docs/REPRODUCTION.md by hand. Standardization here uses the data's own
mean and std, as the paper did (a benchmark, not a release).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.outliers_baselines import gs_lower, paper_global_std  # noqa: E402
from privrelease.core.errors import InternalError  # noqa: E402
from privrelease.core.mechanisms import outliers as o  # noqa: E402
from privrelease.core.mechanisms.outliers import geometry as geo  # noqa: E402
from privrelease.core.mechanisms.outliers import sensitivity as sens  # noqa: E402
from privrelease.core.privacy import events  # noqa: E402
from privrelease.core.privacy.budget import Budget  # noqa: E402

UCI = Path(os.environ.get("PRIVRELEASE_DATA", "data")) / "uci"
DELTA = 0.01
ADULT_NUMERIC = ["age", "education-num", "capital-gain", "capital-loss", "hours-per-week"]


def zscore(x: np.ndarray) -> np.ndarray:
    sd = x.std(axis=0)
    return (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1.0)  # Ionosphere's attribute 2 is constant


def synthetic1(seed: int) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    return np.vstack([g.normal(0, 1, (45, 2)), g.normal(20, 10, (5, 2))]), np.r_[np.zeros(45), np.ones(5)]


def synthetic2(seed: int) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    out = np.hstack([g.normal(20, 10, (10, 2)), g.normal(0, 1, (10, 8))])
    return np.vstack([g.normal(0, 1, (490, 10)), out]), np.r_[np.zeros(490), np.ones(10)]


def labelled_sample(x: np.ndarray, is_out: np.ndarray, inliers: int, outliers: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    i = g.choice(np.flatnonzero(~is_out), inliers, replace=False)
    j = g.choice(np.flatnonzero(is_out), outliers, replace=False)
    return zscore(x[np.r_[i, j]]), np.r_[np.zeros(inliers), np.ones(outliers)]


def adult(inliers: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    frame = pd.read_csv(UCI / "adult.data.gz", skipinitialspace=True, na_values="?").dropna()
    frame.columns = [c.strip() for c in frame.columns]
    return labelled_sample(
        frame[ADULT_NUMERIC].to_numpy(float), (frame["Salary"] == ">50K").to_numpy(), inliers, 10 if inliers > 45 else 5, seed
    )


def ionosphere(seed: int) -> tuple[np.ndarray, np.ndarray]:
    frame = pd.read_csv(UCI / "ionosphere.data.gz", header=None)
    return labelled_sample(frame.iloc[:, :34].to_numpy(float), (frame[34] == 0.0).to_numpy(), 225, 10, seed)


def timing() -> None:
    print("## S_UB on Synthetic 2 (N = 500, d = 10, k = 3, r = 0.13, delta = 0.01)")
    x, _ = synthetic2(0)
    for eps in (0.2, 0.8, 3.2):
        b = sens.beta(eps, DELTA)
        t = time.perf_counter()
        steps = []
        for cols in [[j] for j in range(10)] + [list(range(10))]:
            pts = geo.subspace_points(x[:, cols])
            steps.append(sens.smooth_bound(geo.degrees(pts, 0.13), 3, b, geo.Cover(pts, 0.13)).steps)
        print(f"eps={eps}: all 10 1-D subspaces + the full space: {time.perf_counter() - t:.3f} s (steps {steps})")
    print("## degrees, N = 1,000,000 standard normal, r = 0.05")
    for dim in (1, 3):
        pts = geo.subspace_points(np.random.default_rng(1).normal(size=(1_000_000, dim)))
        t = time.perf_counter()
        deg = geo.degrees(pts, 0.05)
        print(f"{dim}-D: {time.perf_counter() - t:.2f} s (mean degree {deg.mean():.0f})")
    print("## exact cover cost on dense 3-D data (standard normal, r = 0.5, k = 3, eps = 1)")
    for n in (50, 100, 200):
        pts = geo.subspace_points(np.random.default_rng(1).normal(size=(n, 3)))
        for until in (None, 10, 5):
            t = time.perf_counter()
            try:
                s = sens.smooth_bound(geo.degrees(pts, 0.5), 3, sens.beta(1, DELTA), geo.Cover(pts, 0.5), until)
                what = f"S_UB {s.value:.2f}, t* {s.argmax}, exact steps {s.steps}"
            except InternalError:
                what = "stopped at the enclosing-ball limit"
            print(f"n={n} exact_until={until}: {time.perf_counter() - t:.2f} s ({what})")
    blocks_timing()


def blocks_timing() -> None:
    """What releases use in 3-D beyond the search's public worst case: the blocks bound."""
    print("## blocks bound against band counts on dense 3-D data (standard normal, r = 0.5, k = 3, eps = 1)")
    for n in (50, 100, 200, 2000, 20000):
        pts = geo.subspace_points(np.random.default_rng(1).normal(size=(n, 3)))
        deg = geo.degrees(pts, 0.5)
        t = time.perf_counter()
        s = sens.smooth_bound(deg, 3, sens.beta(1, DELTA), geo.Cover(pts, 0.5, "blocks"))
        took = time.perf_counter() - t
        band = sens.smooth_bound(deg, 3, sens.beta(1, DELTA), None, 0)
        print(f"n={n} plan={sens.cover_plan(n, 3, None)}: blocks {took:.2f} s (S_UB {s.value:.2f}), band S_UB {band.value:.2f}")


def count_experiment() -> list[dict]:
    rows = []
    eps_grid = np.round(np.arange(0.1, 1.0, 0.1), 1)
    for name, (x, _), r in (("Synthetic 1", synthetic1(0), 1.1), ("Adult 1", adult(45, 0), 0.35)):
        pts = geo.subspace_points(x)
        deg = geo.degrees(pts, r)
        cover = geo.Cover(pts, r)
        n, d = x.shape
        for eps in eps_grid:
            s = sens.smooth_bound(deg, 3, sens.beta(eps, DELTA), cover)
            rows.append(
                {
                    "data": name,
                    "eps": eps,
                    "q": int((deg < 3).sum()),
                    "S_UB": s.value,
                    "t*": s.argmax,
                    "smooth": s.value / sens.alpha(eps, DELTA),
                    "global_lower (paper, not private)": paper_global_std(gs_lower(n, 3, d), eps, DELTA),
                    "global_upper (valid)": paper_global_std(sens.gs_upper(n, 3, d), eps, DELTA),
                    "global_upper analytic": sens.global_std(n, 3, d, Budget(eps, DELTA)),
                }
            )
    return rows


def topk_experiment(runs: int) -> tuple[list[dict], dict]:
    """Precision/recall of the exponential-mechanism choice (the paper's eps/h per draw, and ours)."""
    sets = {"Synthetic 2": (synthetic2(0), 0.13), "Adult 2": (adult(369, 0), 0.02), "Ionosphere": (ionosphere(0), 0.06)}
    g = np.random.default_rng(12345)
    rows, truths = [], {}
    for name, ((x, label), r) in sets.items():
        n, d = x.shape
        flagged = np.array([geo.degrees(geo.subspace_points(x[:, [j]]), r) < 3 for j in range(d)])
        counts = flagged.sum(axis=1)
        if name == "Synthetic 2":
            truth = {0, 1}
        else:  # where labelled outliers are flagged at least twice as often as inliers
            rate_out = flagged[:, label == 1].mean(axis=1)
            rate_in = flagged[:, label == 0].mean(axis=1)
            truth = set(np.flatnonzero(rate_out >= 2 * np.maximum(rate_in, 1e-9)).tolist())
        truths[name] = {"counts": counts.tolist(), "truth": sorted(truth)}
        gs = sens.gs_upper(n, 3, 1)  # the counts' sensitivity
        for eps in (0.2, 0.4, 0.8, 1.6, 3.2):
            for h in (1, 2, 3, 4, 5):
                for variant, scale in (("ours (eps-DP)", 1.0), ("paper (2eps-DP)", 2.0)):
                    leaves = [events.PermuteAndFlip(eps * scale / h)] * h
                    tp = np.array([len(truth & set(o.select_top(counts, gs, leaves, g).tolist())) for _ in range(runs)])
                    rows.append(
                        {
                            "data": name,
                            "eps": eps,
                            "h": h,
                            "variant": variant,
                            "precision": tp.mean() / h,
                            "recall": tp.mean() / max(len(truth), 1),
                        }
                    )
    return rows, truths


def plots(count_rows: list[dict], topk_rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = pd.DataFrame(count_rows)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, (name, part) in zip(axes, frame.groupby("data", sort=False)):
        for col, style in (("smooth", "o-"), ("global_lower (paper, not private)", "s--"), ("global_upper analytic", "^-")):
            ax.plot(part["eps"], part[col], style, label=col)
        ax.axhline(part["q"].iloc[0], color="grey", lw=0.8, label="true count")
        ax.set_yscale("log")
        ax.set_title(f"{name}: noise std against epsilon (delta = 0.01)", fontsize=9)
        ax.set_xlabel("epsilon")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("noise std (log scale)")
    fig.tight_layout()
    fig.savefig(REPO / "docs" / "img" / "outliers_noise.png", dpi=100)
    plt.close(fig)

    frame = pd.DataFrame(topk_rows)
    frame = frame[frame["variant"] == "ours (eps-DP)"]
    fig, axes = plt.subplots(2, 3, figsize=(13, 7), sharex=True, sharey=True)
    for col, (name, part) in enumerate(frame.groupby("data", sort=False)):
        for eps, sub in part.groupby("eps"):
            axes[0, col].plot(sub["h"], sub["precision"], "o-", label=f"eps={eps}")
            axes[1, col].plot(sub["h"], sub["recall"], "o-", label=f"eps={eps}")
        axes[0, col].set_title(f"{name}: precision", fontsize=9)
        axes[1, col].set_title(f"{name}: recall", fontsize=9)
        axes[1, col].set_xlabel("h")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(REPO / "docs" / "img" / "outliers_topk.png", dpi=100)
    plt.close(fig)


def markdown(frame: pd.DataFrame) -> str:
    head = [str(c) for c in frame.columns]
    rows = [[f"{v:.3g}" if isinstance(v, float) else str(v) for v in row] for row in frame.itertuples(index=False)]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--skip-repro", action="store_true")
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--only-blocks", action="store_true", help="just the blocks-bound timing")
    args = ap.parse_args()
    if args.only_blocks:
        return blocks_timing()
    if not args.skip_timing:
        timing()
    if not args.skip_repro:
        count_rows = count_experiment()
        print(markdown(pd.DataFrame(count_rows)))
        topk_rows, truths = topk_experiment(args.runs)
        print(truths)
        table = pd.DataFrame(topk_rows)
        table["P/R"] = [f"{p:.2f}/{r:.2f}" for p, r in zip(table["precision"], table["recall"])]
        print(markdown(table.pivot(index=["data", "variant", "eps"], columns="h", values="P/R").reset_index()))
        plots(count_rows, topk_rows)


if __name__ == "__main__":
    main()
