"""What an outliers release says: its table, privacy section, report and chart, from DP outputs and
public values only (the true counts in ``Counted`` never reach them); and, before it runs, what its
preview says: each count's expected noise and interval, the selection's odds, a warning for a count
that would be mostly noise (``outliers`` hands them to the contract's views)."""

from __future__ import annotations

import math
from typing import Protocol

import pandas as pd

from privrelease.core import noise
from privrelease.core.charts import Chart
from privrelease.core.mechanisms.base import Result
from privrelease.core.mechanisms.outliers.sensitivity import (
    Allocation,
    Counted,
    alpha,
    beta,
    cover_plan,
    global_noise,
    global_std,
    gs_upper,
    smooth_floor,
    uses_global,
)
from privrelease.core.privacy import accuracy


class Query(Protocol):
    """The public parameters a report states (``outliers.Params`` has them)."""

    query: str
    noise: str
    k: int
    r: float
    c: int
    h: int
    rows: int | None
    exact_until: int | None


def public_std(c: Counted, n: int, a: Allocation) -> tuple[float, bool]:
    """A noise std the report may state, from public values and DP outputs only: the exact global
    std, the released smooth std, or else the least smooth std for N (True: a lower bound)."""
    if c.noise_std_released is not None:
        return c.noise_std_released, False
    return smooth_floor(n, beta(a.count.epsilon, a.count.delta)) / alpha(a.count.epsilon, a.count.delta), True


ROUNDED = "Counts are published rounded to integers (post-processing of a draw on a public grid)."


def error_bar(c: Counted, n: int, a: Allocation, rows: int | None) -> dict:
    """A released count's noise and 95% interval, from public values and its DP outputs only
    (``privrelease.core.privacy.accuracy``): the exact std of global noise, or an upper bound on the smooth std from its
    released value (or from S_UB <= N without one)."""
    if c.method == "global":
        std = accuracy.sampler_std(c.noise_std, min(1.0, noise.grid(c.noise_std)))
        out = {"family": "discrete Gaussian (global sensitivity)", "std": std, "level": accuracy.LEVEL}
        half = accuracy.Z95 * std
    else:
        b = beta(a.count.epsilon, a.count.delta)
        grid = noise.grid(b / a.scale) if a.scale > 0 else 0.0
        t = math.ceil((math.ceil(b / grid) + 1) * grid / a.scale / grid) if a.scale > 0 else 0
        upper = accuracy.smooth_std_upper(c.noise_std_released, grid, t, n, alpha(a.count.epsilon, a.count.delta))
        out = {"family": "discrete Gaussian (smooth sensitivity)", "std_upper": upper * (1 + 1e-9), "level": accuracy.LEVEL}
        half = accuracy.Z_SMOOTH * out["std_upper"]
    return out | {"interval": accuracy.count_interval(c.noisy, half, rows), "clamped_to": [0, rows]}


def describe(
    params: Query,
    a: Allocation,
    n: int,
    scaling: dict,
    chosen: list[tuple[str, ...]],
    counted: list[Counted],
    selection: dict | None,
    allocation: dict,
) -> Result:
    """The released table (rank, subspace, noisy count, 95% interval, noise), its privacy section, report and chart."""
    rows = []
    bars = [error_bar(c, n, a, params.rows) for c in counted]
    for rank, s in enumerate(chosen, start=1):
        c = counted[rank - 1] if counted else None
        rows.append(
            {
                "rank": rank,
                "subspace": ",".join(s),
                "noisy_count": int(c.noisy) if c else None,  # an integer: the draw is rounded (post-processing)
                "ci95_low": bars[rank - 1]["interval"][0] if c else None,
                "ci95_high": bars[rank - 1]["interval"][1] if c else None,
                "noise": c.method if c else None,
                "noise_std": c.noise_std_released if c else None,
                "global_noise_std": c.global_std if c else None,
            }
        )
    data = pd.DataFrame(rows).astype({"noisy_count": "Int64", "ci95_low": "Int64", "ci95_high": "Int64"})
    if params.query == "count":
        data = data.drop(columns="rank")
        result = {"subspace": list(chosen[0]), "count": int(counted[0].noisy), "error": bars[0]}
        noise_std: object = counted[0].noise_std_released
    else:
        result = [
            {"subspace": list(s), "count": (int(counted[i].noisy) if counted else None), "error": bars[i] if counted else None}
            for i, s in enumerate(chosen)
        ]
        noise_std = [c.noise_std_released for c in counted] if counted else None
    privacy = {
        "n_records": n,
        "query": params.query,
        "k": params.k,
        "r": params.r,
        "allocation": allocation,
        "alpha": alpha(a.count.epsilon, a.count.delta) if a.counts else None,
        "beta": beta(a.count.epsilon, a.count.delta) if a.counts else None,
        "noise": sorted({c.method for c in counted}),
        "noise_std_release": (
            {
                "method": "exp(grid * (round(ln(S_UB/alpha) / grid) + discrete Laplace)), Laplace scale >= (beta + grid) / epsilon_scale",
                "laplace_scale_log": beta(a.count.epsilon, a.count.delta) / a.scale,
            }
            if any(c.method == "smooth" for c in counted) and a.scale > 0
            else None
        ),
        "standardization": scaling,
        "selection": selection,
        "clamped_to": [0, params.rows],
        "cover": (
            dict(zip(("method", "steps"), cover_plan(n, len(chosen[0]), params.exact_until)))
            if any(c.method == "smooth" for c in counted)
            else None
        ),
    }
    headline = {"query": params.query, "subspaces": [",".join(s) for s in chosen]}
    report = _report(params, privacy, data, _swamped(params, a, n, counted))
    charts = [_chart(data)] if counted else []
    return Result(data, privacy, report, charts, headline, name="outliers", manifest={"result": result, "noise_std": noise_std})


def _swamped(params: Query, a: Allocation, n: int, counted: list[Counted]) -> list[str]:
    """Report lines for counts whose noise std exceeds the public range [0, N] of any count."""
    if params.rows is None:
        return []
    lines = []
    for c in counted:
        std, least = public_std(c, n, a)
        if std > params.rows:
            lines.append(
                f"- **{','.join(c.subspace)}: the noise std ({'at least ' if least else ''}{std:.4g}) exceeds {params.rows}, "
                "the whole range of possible counts**: the released count says almost nothing about the true one. "
                "Raise epsilon, or ask a question with fewer records at stake."
            )
    return lines


def _report(params: Query, privacy: dict, data: pd.DataFrame, swamped: list[str]) -> str:
    lines = [
        "## DP outlier statistics",
        "",
        f"Query **{params.query}**: an outlier has fewer than k={params.k} other records within RMS distance "
        f"r={params.r:g} ({privacy['standardization']['method']} standardization), among N={privacy['n_records']} "
        "records (N is public).",
        "",
    ]
    if params.query == "top_subspaces":
        sel = privacy["selection"]
        lines += [
            f"The {params.h} subspace(s) below were chosen among {sel['candidates']} of dimension {params.c} by "
            f"permute-and-flip (epsilon={sel['epsilon']:.4g} in total, quality = count, sensitivity {sel['utility_divisor']}).",
            "",
        ]
    if data["noisy_count"].notna().any():
        lines += [
            "| " + " | ".join(data.columns) + " |",
            "|" + "---|" * len(data.columns),
            *("| " + " | ".join(_cell(v) for v in row) + " |" for row in data.itertuples(index=False)),
            "",
            "`noise` says which mechanism drew each count. With `smooth`, `noise_std` is the "
            "smooth-sensitivity scale S_UB/α, itself released with noise (Laplace on its logarithm, scale "
            f"{privacy['noise_std_release']['laplace_scale_log']:.3g}) because it depends on the data."
            if privacy["noise_std_release"]
            else "",
            "With `global`, the noise std is public (it depends only on N, k, c and the budget) and exact. "
            "`global_noise_std` is what the Gaussian mechanism on the global-sensitivity upper bound "
            "min(N, k·K_c + 1) needs for the same budget. "
            + (
                f"Counts are clamped to [0, {params.rows}], the range every count lies in (N is declared with the dataset); "
                if params.rows is not None
                else "Counts are clamped at 0 (no number of records was declared, so not above); "
            )
            + "clamping is post-processing and costs nothing. "
            + ROUNDED,
            "",
            "`ci95_low`-`ci95_high` is each count's 95% interval, from public values and the released figures only: "
            "the count +- 1.96 global noise stds, or, for smooth noise, +- 2.05 times an upper bound on its std that "
            "holds with probability 99% (from the released `noise_std`, whose own noise is known; without it, "
            "S_UB <= N), rounded up to whole records. "
            + (
                f"A count clamped to [0, {params.rows}] has its interval cut to that range too: the true count lies "
                "in it, and clamping only moves a count towards it, so the cut interval covers it at least as often."
                if params.rows is not None
                else "The interval is cut at 0, as the counts are."
            ),
            *([""] + swamped if swamped else []),
        ]
    else:
        lines += ["Chosen: " + "; ".join(f"{{{s}}}" for s in data["subspace"]) + " (counts not released)."]
    return "\n".join(lines) + "\n"


def _cell(v: object) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def _chart(data: pd.DataFrame) -> Chart:
    series = {"noisy count": data["noisy_count"].tolist(), "global-sensitivity noise std": data["global_noise_std"].tolist()}
    bars = list(zip(data["ci95_low"].tolist(), data["ci95_high"].tolist()))
    if data["noise_std"].notna().all() and (data["noise"] == "smooth").any():  # global: the series above already
        series["noise std (released; smooth)" if (data["noise"] == "smooth").all() else "noise std (released)"] = data[
            "noise_std"
        ].tolist()
    return Chart(
        "outliers.png",
        "Noisy outlier counts (bars: 95% intervals) and noise scales",
        data["subspace"].tolist(),
        series,
        "records",
        intervals=bars,
    )


# -- before a release: the preview (public values only; N is public under the record unit) -----------------


def expected_counts(params: Query, a: Allocation, c: int) -> dict | None:
    """Each count's noise (global: exact; smooth: its std S_UB/α, somewhere in [least, N/α]) and 95%
    interval half-width, for subspaces of c dimensions."""
    if not a.counts:
        return None
    n = params.rows
    if uses_global(params, a, n, c):
        gs, _ = global_noise(n, params.k, c, a)  # the std the draw uses
        std = accuracy.sampler_std(gs, min(1.0, noise.grid(gs)))
        counts = {
            "noise": "global",
            "family": "discrete Gaussian",
            "std": std,
            "std_least": std,
            "half_width": math.ceil(accuracy.Z95 * std),
            "smooth_bound": None,
        }
    else:
        al = alpha(a.count.epsilon, a.count.delta)
        least = smooth_floor(n, beta(a.count.epsilon, a.count.delta)) / al
        counts = {
            "noise": "smooth",
            "family": "discrete Gaussian",
            "std": None,
            "std_least": least,
            "std_most": n / al,
            "half_width": math.ceil(accuracy.Z95 * least),
            "smooth_bound": {
                "alpha": al,
                "S_UB_least": least * al,
                "S_UB_most": n,
                "global_std": global_std(n, params.k, c, a.whole),
            },
        }
    return counts | {"per_release": a.counts, "range": [0, n]}


def expected_selection(params: Query, a: Allocation, candidates: int) -> dict | None:
    """The top-h selection's odds: at least how likely a subspace whose count leads every other by Δ is chosen first."""
    if not a.select:
        return None
    sens = gs_upper(params.rows, params.k, params.c)
    leads = sorted({max(1, round(sens * x)) for x in (0.5, 1, 2, 4, 8, 16, 32, 64)})
    return {
        "family": "permute-and-flip (exact)",
        "epsilon_per_draw": a.select / params.h,
        "candidates": candidates,
        "sensitivity": sens,
        "leads": leads,
        "p_first": [accuracy.lead_probability(a.select / params.h, sens, d, candidates) for d in leads],
    }


def too_noisy(params: Query, counts: dict | None) -> list[str]:
    """A warning before the charge when a count's noise std would be more than half of its public range [0, N]."""
    n = params.rows
    if not counts or counts["std_least"] <= n / 2:
        return []
    least = "at least " if counts["noise"] == "smooth" else ""
    return [
        f"an outlier count's noise std is {least}{counts['std_least']:.4g}, more than half of its public range "
        f"[0, {n}]: the released count would say little about the true one. Raise epsilon (or lower k, or "
        "ask about fewer dimensions) before you spend the budget."
    ]


def expected_lines(figures: dict) -> list[str]:
    """The expected counts and selection, in markdown."""
    out = []
    c = figures["counts"]
    if c:
        if c["noise"] == "global":
            out.append(
                f"- each count: {c['family']} noise (global sensitivity), std {c['std']:.4g}; 95% interval: the "
                f"released count ± {c['half_width']}, cut to [0, {c['range'][1]}] (counts are clamped to it)"
            )
        else:
            sb = c["smooth_bound"]
            out.append(
                f"- each count: {c['family']} noise of std S_UB/α (smooth sensitivity, α = {sb['alpha']:.4g}); "
                f"S_UB is data, between {sb['S_UB_least']:.4g} and {sb['S_UB_most']}, so the std is between "
                f"{c['std_least']:.4g} and {c['std_most']:.4g} (global-sensitivity std: {sb['global_std']:.4g}); "
                f"95% interval half-width at least {c['half_width']}, stated after the release from its released std"
            )
    s = figures["selection"]
    if s:
        out += [
            "",
            f"Top-h selection by {s['family']} draws at epsilon {s['epsilon_per_draw']:.4g} each, among "
            f"{s['candidates']} subspaces (count sensitivity {s['sensitivity']}): "
            "probability that a subspace whose count leads every other by Δ is chosen first (at least):",
            "",
            "| Δ | P |",
            "|---|---|",
            *(f"| {d} | {p:.3f} |" for d, p in zip(s["leads"], s["p_first"])),
        ]
    return out
