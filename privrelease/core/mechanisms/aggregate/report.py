"""What an aggregate release publishes, from its noisy vectors and public values only: each measure's
estimate and 95% interval per key, the report and a chart per measure; and before it runs, what the
preview says (each cell's noise std and 95% half-width).

Intervals (each covers its cell's true value with probability at least 95%):

- count, count_distinct: y ± h with P[|noise| > h] <= 5%, published as rint(y) clamped to >= 0
  with its interval cut the same way (``accuracy.count_interval``);
- sum: y ± h; a sum read from a mean's vectors, C + m N: h from both noises' laws (``sum_half``);
- mean = m + S/C (m the bounds' midpoint, S the centred sum, C the count): S and C each within
  their 97.5% half-widths (a union bound: both hold with probability >= 95%), and the interval is the
  range of m + S'/C' over that box (C' > 0), cut to [L, U]; the whole [L, U] when C' could be 0;
- quantile: the interval from the noisy histogram of B bins (every q from the same counts):
  D_j = C_j - q N, the count of bins 0..j less q times the total, is noised by a linear combination of
  the bins' noise; with every D_j within its half-width w_j at once (Bonferroni over the B edges at
  5%/B), the bin j* holding the ceil(qN)-th smallest value (the first j with D_j >= 0) lies between the
  first j with D~_j + w_j >= 0 and the first with D~_j - w_j >= 0. The estimate is the midpoint of the
  answer-grid step the exponential mechanism drew inside that interval (``aggregate_quantile``).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pandas as pd

from privrelease.core.charts import Chart
from privrelease.core.mechanisms.aggregate.budget import Accounting, Noised, derived_sum
from privrelease.core.mechanisms.aggregate.params import Params
from privrelease.core.privacy import events

MISS = 0.05
SHOWN = 40  # keys drawn per chart


def estimates(params: Params, acc: Accounting, keys: pd.DataFrame, noisy: dict) -> pd.DataFrame:
    """The released table: ``keys`` then, per measure output, its estimate and ``_lo``, ``_hi``.
    ``noisy[(kind, measure)]`` holds each vector's noisy values over ``keys`` (floats, grid applied); a quantile
    level's ``noisy[("interval", measure, q)]`` its interval's first and last bins, ``noisy[("pick", measure, q)]``
    the step drawn inside them."""
    out = keys.reset_index(drop=True).copy()
    counts = acc.counts
    for i, m in enumerate(params.measures):
        if m.op in ("count", "count_distinct"):
            n = counts if m.op == "count" else acc.of("distinct", i)
            y = noisy[(n.vector.kind, n.vector.measure)]
            h = math.ceil(n.half(MISS))
            value = np.maximum(np.rint(y), 0)
            _put(out, m.names[0], value, np.maximum(value - h, 0), value + h)
        elif m.op == "sum" and params.mean_of(i) is not None:
            nc, nn, mid = derived_sum(acc, params, i)
            y, h = noisy[("centred", params.mean_of(i))] + mid * noisy[("counts", None)], sum_half(nc, nn, mid)
            _put(out, m.names[0], y, y - h, y + h)
        elif m.op == "sum":
            n = acc.of("sum", i)
            y = noisy[("sum", i)]
            _put(out, m.names[0], y, y - n.half(MISS), y + n.half(MISS))
        elif m.op == "mean":
            _put(out, m.names[0], *_mean(m.bounds, noisy[("centred", i)], acc.of("centred", i), noisy[("counts", None)], counts))
        else:
            low, high = m.bounds
            step, per = (high - low) / m.grid, m.grid // m.bins
            for name, q in zip(m.names, m.q):
                lo, hi = noisy[("interval", i, q)]
                top = np.minimum(low + (hi + 1) * per * step, high)  # low + S h can round past U
                _put(out, name, low + (noisy[("pick", i, q)] + 0.5) * step, low + lo * per * step, top)
    return out


def _put(out: pd.DataFrame, name: str, value, low, high) -> None:
    out[name], out[f"{name}_lo"], out[f"{name}_hi"] = (np.asarray(a, dtype=float) for a in (value, low, high))


def _mean(bounds, s, ns: Noised, c, nc: Noised) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    low, high = bounds
    mid = (low + high) / 2
    hs, hc = ns.half(MISS / 2), nc.half(MISS / 2)
    value = np.clip(mid + s / np.maximum(c, 1.0), low, high)
    known = c + hc >= 1.0  # a nonempty key's count is at least 1: the box's counts are [max(c - hc, 1), c + hc]
    c_lo = np.maximum(c - hc, 1.0)
    corners = np.stack([(s + a * hs) / b for a in (-1, 1) for b in (c_lo, c + hc)])
    lo = np.where(known, np.clip(mid + corners.min(axis=0), low, high), low)
    hi = np.where(known, np.clip(mid + corners.max(axis=0), low, high), high)
    return value, lo, hi


def sum_half(nc: Noised, nn: Noised, mid: float) -> float:
    """A half-width h with P[|C + m N| > h] <= 5% for a sum read from a mean's vectors, C the centred sum's noise and
    N the count's. Each is discrete on a grid of at least 2^26 steps per std (``aggregate_budget.grid``), so read as
    continuous. Gaussian: C + m N is Gaussian of their joint std. Laplace, scales b1 and b2 = |m| times N's: the sum
    of two Laplaces has P[|Z| > h] = (b1^2 e^(-h/b1) - b2^2 e^(-h/b2)) / (b1^2 - b2^2), solved for h by bisection
    (rounded up; b1 = b2 is nudged apart by one part in 10^9, which can only widen it)."""
    if isinstance(nc.leaf, events.DiscreteGaussian):
        return NormalDist().inv_cdf(1 - MISS / 2) * math.hypot(nc.std, mid * nn.std)
    b1, b2 = nc.leaf.scale * nc.unit, abs(mid) * nn.leaf.scale * nn.unit
    b1, b2 = max(b1, b2) * (1 + 1e-9), min(b1, b2)
    low, high = 0.0, nc.half(MISS / 2) + abs(mid) * nn.half(MISS / 2)  # the union bound: P[miss] <= 5% there
    for _ in range(100):
        h = (low + high) / 2
        missed = (b1 * b1 * math.exp(-h / b1) - b2 * b2 * math.exp(-h / b2)) / (b1 * b1 - b2 * b2)
        low, high = (low, h) if missed <= MISS else (h, high)
    return high


def band(q: float, bins: int, n: Noised) -> np.ndarray:
    """w_j for j = 0..B-1: each D~_j = sum_{i<=j} (1-q) h~_i - sum_{i>j} q h~_i is within w_j of D_j for all
    j at once with probability >= 95% (Gaussian: D_j's std at 5%/B each; Laplace: every bin's noise at 5%/B)."""
    j = np.arange(bins)
    per = n.half(MISS / bins)
    if isinstance(n.leaf, events.DiscreteGaussian):
        return per * np.sqrt((j + 1) * (1 - q) ** 2 + (bins - j - 1) * q**2)
    return per * ((j + 1) * (1 - q) + (bins - j - 1) * q)


def _first(mask: np.ndarray) -> np.ndarray:
    """Per row, the first column where ``mask`` holds (the last column where none does)."""
    return np.where(mask.any(axis=1), mask.argmax(axis=1), mask.shape[1] - 1)


def interval(q: float, hist: np.ndarray, n: Noised) -> tuple[np.ndarray, np.ndarray]:
    """Per key, the first and last bin of level q's 95% interval (the band above, from the noisy histogram)."""
    d = np.cumsum(hist, axis=1) - q * hist.sum(axis=1, keepdims=True)
    w = band(q, hist.shape[1], n)
    return _first(d + w >= 0), _first(d - w >= 0)


def true_quantile(values: np.ndarray, q: float, bounds) -> float:
    """The ceil(qN)-th smallest of the clipped values, q the decimal it is written as: what a quantile's
    interval covers and its exponential mechanism's best step holds (tests, bench)."""
    x = np.sort(np.clip(values, *bounds))
    return float(x[max(math.ceil(events.exact(q) * len(x)), 1) - 1])


# -- the preview and the report ----------------------------------------------------------------------------


def cells(params: Params, acc: Accounting) -> list[dict]:
    """Per vector: its noise std per cell and 95% half-width (a quantile's: its rank band at the median edge)."""
    out = []
    for n in acc.noised:
        v = n.vector
        row = {"vector": v.part, "noise": type(n.leaf).__name__, "l2_sensitivity": v.l2, "l1_sensitivity": v.l1,
               "noise_std": n.std, "half_width_95": n.half(MISS)}  # fmt: skip
        if v.kind == "histogram":
            m = params.measures[v.measure]
            row["rank_half_width_95_at_median"] = float(band(0.5, m.bins, n)[m.bins // 2])
        out.append(row)
    for i, m in enumerate(params.measures):  # a sum read from a mean's vectors: no vector, the noise of C + m N
        if params.mean_of(i) is not None:
            nc, nn, mid = derived_sum(acc, params, i)
            out.append({"vector": f"{m.names[0]}: centred sum + {mid:g} x count", "noise": f"{type(nc.leaf).__name__} (two)",
                        "l2_sensitivity": None, "l1_sensitivity": None, "noise_std": math.hypot(nc.std, mid * nn.std),
                        "half_width_95": sum_half(nc, nn, mid)})  # fmt: skip
    return out


def picks(params: Params, acc: Accounting) -> list[dict]:
    """Per quantile level: its draw's epsilon, its score's sensitivity and a 95% bound on the drawn step's rank error:
    a draw scores below -(2 Delta / epsilon)(ln(S) + ln 20) with probability at most 5% when the step holding the
    quantile is among the S steps drawn from (McSherry & Talwar's bound)."""
    out = []
    for p in acc.picks:
        m = params.measures[p.measure]
        rank = 2 * float(p.sensitivity) / p.leaf.epsilon * (math.log(m.grid) + math.log(1 / MISS))
        out.append({"draw": p.leaf.part, "epsilon_per_key": p.leaf.epsilon, "sensitivity": float(p.sensitivity),
                    "rank_error_95": rank, "step": (m.bounds[1] - m.bounds[0]) / m.grid})  # fmt: skip
    return out


SIZES = (10, 30, 100, 300, 1000, 3000, 10000)  # rows in a key, for a mean's expected error by group size


def counted(params: Params) -> str:
    """What each figure counts, in words: capped rows of each user under the user unit, records under the record unit."""
    if params.user_column:
        rows = (
            f"rows after capping each `{params.user_column}` at {params.max_rows} rows per key and {params.max_groups} "
            f"key{'s' if params.max_groups > 1 else ''} (a keyed hash picks which): not persons, and not every row"
        )
    else:
        rows = "records (rows)"
    return (
        f"a count is of {rows}; a distinct count, of the column's distinct values among those; a sum or a mean, of the "
        "column's values on those, each clipped to the bounds first"
    )


def mean_errors(params: Params, acc: Accounting) -> list[dict]:
    """Per mean measure, its 95% error bound for a key of n rows (n in ``SIZES``), from public values: with the centred
    sum within h_S and the count within h_C (97.5% each), a mean m + S'/C' of a key whose true count is n > h_C lies
    within (h_S + r h_C) / (n - h_C) of the true one (r half the bounds' width: |S| <= n r); at most the bounds' width."""
    out = []
    for i, m in enumerate(params.measures):
        if m.op != "mean":
            continue
        hs, hc = acc.of("centred", i).half(MISS / 2), acc.counts.half(MISS / 2)
        width = m.bounds[1] - m.bounds[0]
        errors = [min((hs + width / 2 * hc) / (n - hc), width) if n > hc else width for n in SIZES]
        out.append({"measure": m.names[0], "bounds": list(m.bounds), "sizes": list(SIZES), "error_95": errors})
    return out


def mean_error_lines(found: list[dict]) -> list[str]:
    """The means' expected error by the number of rows in a key (none: no lines)."""
    if not found:
        return []
    head = "| rows in the key | " + " | ".join(f"{n:,}" for n in SIZES) + " |"
    rule = "|---|" + "---|" * len(SIZES)
    rows = [f"| {e['measure']}: 95% error | " + " | ".join(f"±{x:.4g}" for x in e["error_95"]) + " |" for e in found]
    return [
        "",
        "Expected error of a mean by the number of rows in its key (a key's count is released beside it):",
        "",
        head,
        rule,
        *rows,
    ]


def warnings(params: Params, table: pd.DataFrame) -> list[str]:
    """What the released table itself shows an analyst should not read as a figure (from the DP outputs only): keys
    whose count's noise is larger than the count, and means at a bound (clipped to it: the noisy sum pushed them past)."""
    out = []
    for m in params.measures:
        for name in m.names:
            value, hi = table[name], table[f"{name}_hi"]
            if m.op in ("count", "count_distinct"):
                small = int(((hi - value) > value).sum())
                if small:
                    out.append(
                        f"{small} of {len(table)} keys' {name}: the noise (95% ±{float((hi - value).max()):.4g}) is larger "
                        "than the released value; read them as small, not as the figure"
                    )
            elif m.op == "mean":
                at = int(((value <= m.bounds[0]) | (value >= m.bounds[1])).sum())
                if at:
                    out.append(
                        f"{at} of {len(table)} keys' {name} is at a bound of [{m.bounds[0]:g}, {m.bounds[1]:g}]: the noise "
                        "pushed it past and it was clipped (its key has few rows: see the expected error by group size); "
                        "its interval, not the value, is the figure"
                    )
    return out


def lines(params: Params, acc: Accounting, released: int | None = None) -> list[str]:
    keys = (
        f"keys selected privately: a key is released when its noisy count reaches {acc.threshold * acc.counts.unit:g} "
        f"(delta {acc.delta_select:.3g} for selection)"
        if params.selects
        else "keys public (the declared domains): every key is released, empty ones with noise"
    )
    rows = "\n".join(
        f"| {c['vector']} | {c['noise']} | {_g(c['l2_sensitivity'])} | {_g(c['l1_sensitivity'])} | {c['noise_std']:.6g} | "
        f"{c['half_width_95']:.6g} |"
        for c in cells(params, acc)
    )
    return [
        f"- {keys}" + ("" if released is None else f"; {released} keys released") + ".",
        "- unit: "
        + (
            f"user `{params.user_column}`, at most {params.max_groups} keys and {params.max_rows} rows per key "
            "per user (chosen by a keyed hash of the user's own rows)"
            if params.user_column
            else "record (replace one record)"
        )
        + ".",  # fmt: skip
        f"- what the figures count: {counted(params)}.",
        "- quantiles: each level's interval from a noisy histogram over equal public bins, its estimate drawn by the "
        "exponential mechanism over the answer grid's steps inside that interval; means: a noisy centred sum over the noisy count; a sum of a mean's column and "
        "bounds: that centred sum plus the bounds' midpoint times the noisy count.",
        "",
        "| vector | noise | l2 sensitivity | l1 sensitivity | noise std per cell | 95% half-width |",
        "|---|---|---|---|---|---|",
        rows,
        *pick_lines(picks(params, acc)),
        *mean_error_lines(mean_errors(params, acc)),
    ]


def _g(x: float | None) -> str:
    return "—" if x is None else f"{x:.6g}"


def pick_lines(found: list[dict]) -> list[str]:
    """The quantile draws' table (none: no lines)."""
    rows = [f"| {p['draw']} | {p['epsilon_per_key']:.6g} | {p['sensitivity']:.6g} | ±{p['rank_error_95']:.4g} | {p['step']:.6g} |"
            for p in found]  # fmt: skip
    head = [
        "",
        "| quantile draw | epsilon per key | score sensitivity | rank error (95%) | answer step |",
        "|---|---|---|---|---|",
    ]
    return head + rows if rows else []


def report(params: Params, acc: Accounting, guarantee: str, table: pd.DataFrame) -> str:
    warned = "".join(f"> warning: {w}\n\n" for w in warnings(params, table))
    return (
        "## Aggregate\n\n"
        + guarantee
        + ".\n\n"
        + warned
        + "\n".join(lines(params, acc, len(table)))
        + "\n\n"
        + (
            "Each estimate has its 95% interval beside it (`_lo`, `_hi`): a count's cut at 0, a mean's from its sum's and "
            "count's 97.5% intervals, a quantile's from a simultaneous band over the histogram's bin edges.\n"
        )
    )


def charts(params: Params, table: pd.DataFrame) -> list[Chart]:
    """One chart per measure output: its estimates with their intervals, for the first keys."""
    shown = table.head(SHOWN)
    labels = [" / ".join(str(v) for v in row) for row in shown[params.group_by].itertuples(index=False)]
    out = []
    for name in [n for m in params.measures for n in m.names]:
        out.append(
            Chart(
                f"{name}.png",
                f"{name} by {' x '.join(params.group_by)}" + (f" (first {SHOWN} keys)" if len(table) > SHOWN else ""),
                labels,
                {name: shown[name].tolist()},
                name,
                intervals=list(zip(shown[f"{name}_lo"].tolist(), shown[f"{name}_hi"].tolist())),
            )
        )
    return out
