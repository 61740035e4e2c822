"""What a DP release's answer is worth, from public values only: each output's noise family and
scale, its 95% interval, DPNE's detection table and spurious share, the top-h selection's odds.
The preview (``core.preview``) states these before a release; the release states them (with its
DP outputs) after.

Nothing here reads a row: inputs are the mechanism's parameters (with the registration's public
facts bound in, e.g. N under the record unit) and, after a release, its DP outputs.

Intervals:

- a Gaussian output y = q + Z with Z ~ N_Z(0, s^2) in grid units (``core.noise``) has std
  unit * s >= sigma; y ± 1.96 · unit · s covers q with probability 95% (s >= 2^20, so the
  discrete law's coverage differs from the continuous one's by about 10^-6 at most);
- a count is published as rint(y) and clamped to its range [0, N]: rint and clamping move y no
  farther from the integer q in [0, N], so [rint(y) − ⌈h⌉, rint(y) + ⌈h⌉] ∩ [0, N] covers q
  whenever y ± h does (the interval of a clamped count is clamped too, and said so);
- a smooth-sensitivity count's std S_UB/α is data; only its DP release s' is public:
  ln s' = grid · (round(ln std / grid) + Y) with Y discrete Laplace of scale t, so
  std <= s' · e^{grid · (j + 1/2)} except with probability P[−Y >= j] <= e^{−j/t} <= 1% (j = ⌈t ln 100⌉),
  and the interval uses that upper std at z = Φ^-1(1 − 0.02) (the 4% left): 95% in all. Without a released
  std, S_UB <= N gives std <= N/α.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from core import noise
from core.charts import Chart
from core.mechanisms.dpne_counts import unit_weights

LEVEL = 0.95
Z95 = NormalDist().inv_cdf(1 - (1 - LEVEL) / 2)
STD_MISS = 0.01  # the share of the 5% a released smooth std's upper bound may miss
Z_SMOOTH = NormalDist().inv_cdf(1 - (1 - LEVEL - STD_MISS) / 2)


def sampler_std(sigma: float, unit: float) -> float:
    """The std ``core.noise.gaussian`` draws with for ``sigma`` on ``unit`` (never below sigma)."""
    return unit * math.sqrt(noise.gaussian_variance_units(sigma, unit))


def count_interval(value: float, half: float, rows: int | None) -> list[int]:
    """A published integer count's 95% interval: ± ⌈half⌉, cut to the count's range [0, N]."""
    h, v = math.ceil(half), round(value)
    return [max(0, v - h), v + h if rows is None else min(rows, v + h)]


def smooth_std_upper(released: float | None, grid: float, t: int, rows: int, al: float) -> float:
    """An upper bound on a smooth count's noise std that fails with probability <= STD_MISS (module doc)."""
    most = rows / al  # S_UB <= N
    if released is None:
        return most
    j = math.ceil(t * math.log(1 / STD_MISS))
    return min(most, released * math.exp(grid * (j + 0.5)))


# -- DPNE --------------------------------------------------------------------------------------------


def detection(sigma: float, unit: float, rho: float, weight_units: int, m: np.ndarray) -> np.ndarray:
    """P[an n-gram whose m holders each add ``weight_units`` (grid units) is released at threshold rho]:
    P[unit * (m w + Z) > rho] for the level's discrete Gaussian Z (``noise.tail_probability``)."""
    return np.array([noise.tail_probability(sigma, unit, rho - int(k) * weight_units * unit) for k in m])


def holders_needed(unit: float, rho: float, weight_units: int) -> int:
    """The fewest holders of weight ``weight_units`` that give an n-gram a release probability of at least
    1/2: P = Φ(−(n0 − 1/2)/s) with n0 = ⌊rho/unit − m·w⌋ + 1 is >= 1/2 exactly when rho/unit − m·w < 0."""
    return math.floor(rho / (unit * weight_units)) + 1


def holders_grid(sigma: float, rho: float, full: float, capped: float) -> list[int]:
    """About ten numbers of holders, from where detection starts at weight ``full`` to where it is
    near 1 at weight ``capped``."""
    lo = max(1, math.floor((rho - 3 * sigma) / full))
    hi = max(lo + 1, math.ceil((rho + 3 * sigma) / capped))
    return sorted({int(x) for x in np.round(np.geomspace(lo, hi, 10))})


def dpne_levels(params, sigmas: list[float], units: list[float], rho_1: float,
                rho: list[float | None] | None = None) -> list[dict]:  # fmt: skip
    """Per level: the noise, the threshold (the one used, or before a release the least it can be) and
    the detection table at the two extreme weights (a holder with that one n-gram; one at the cap)."""
    out = []
    for k, (sigma, unit, cap) in enumerate(zip(sigmas, units, params.caps), start=1):
        used = rho[k - 1] if rho is not None else None
        least = rho_1 if k == 1 else max(0.0, sigma * NormalDist().inv_cdf(1 - params.eta))
        threshold = used if used is not None else least
        weights = unit_weights(cap, unit)
        full, capped = int(weights[1]), int(weights[cap])
        m = holders_grid(sigma, threshold, full * unit, capped * unit)
        m_arr = np.array(m)
        out.append({
            "k": k, "noise": "discrete Gaussian", "sigma": sigma, "grid": unit,
            "weight_half_width": Z95 * sampler_std(sigma, unit),
            "threshold": threshold, "threshold_exact": k == 1 or used is not None,
            "spurious_per_previous": 0.0 if k == 1 else params.eta,
            "holders": m,
            "p_weight_1": detection(sigma, unit, threshold, full, m_arr).tolist(),
            "weight_cap": capped * unit,
            "p_weight_cap": detection(sigma, unit, threshold, capped, m_arr).tolist(),
        })  # fmt: skip
    return out


def dpne_spurious(levels: list[dict], released: list[int], candidates: list[int | None]) -> list[float | None]:
    """After a release: the expected number of spurious n-grams per level is at most |V_k| · P[Z > rho_k]
    (every zero-weight candidate passes with that probability); as a share of those released."""
    out: list[float | None] = []
    for lv, n, v in zip(levels, released, candidates):
        if lv["k"] == 1:
            out.append(0.0)
        elif v is None or not n:
            out.append(None)
        else:
            out.append(min(1.0, v * noise.tail_probability(lv["sigma"], lv["grid"], lv["threshold"]) / n))
    return out


def dpne_release(params, sigmas: list[float], units: list[float], rho_1: float, rho: list[float | None],
                 released: list[int], candidates: list[int | None]) -> tuple[dict, list[str], Chart]:  # fmt: skip
    """What a DPNE release says of its accuracy (from its parameters and DP outputs): the manifest's
    part, the report's lines and the detection-probability chart."""
    levels = dpne_levels(params, sigmas, units, rho_1, rho)
    spurious = dpne_spurious(levels, released, candidates)
    lines = ["", "### Accuracy", "", f"Each noisy weight at level k is its users' summed weight plus discrete Gaussian "
             f"noise of std sigma_k: a 95% interval is ± {levels[0]['weight_half_width']:.4g} at level 1 (before "
             "selection: a released n-gram was selected for a high noisy weight, so its weight is biased upward). "
             "Expected spurious n-grams at level k: at most |V_k| · P[noise > rho_k] (every zero-weight "
             "candidate passes with that probability), shown as a share of those released.", "",
             *dpne_lines(levels, spurious)]  # fmt: skip
    return {"levels": levels, "spurious_share": spurious}, lines, detection_chart(levels)


def detection_chart(levels: list[dict]) -> Chart:
    """The detection-probability curves of the first two levels, at both weights."""
    points = {f"level {lv['k']}, w = 1": (lv["holders"], lv["p_weight_1"]) for lv in levels[:2]}
    points |= {f"level {lv['k']}, w = {lv['weight_cap']:.3g}": (lv["holders"], lv["p_weight_cap"]) for lv in levels[:2]}
    return Chart("detection.png", "Probability that an n-gram held by m users is released", [], {}, kind="curve",
                 points=points, axes=("users holding it (m)", "probability released"))  # fmt: skip


def dpne_lines(levels: list[dict], spurious: list | None = None) -> list[str]:
    """DPNE's per-level noise, threshold, spurious share and detection table (preview and report)."""
    out = ["| length k | noise std | weight 95% ± | threshold rho_k | expected spurious |", "|---|---|---|---|---|"]
    for i, lv in enumerate(levels):
        rho = f"{lv['threshold']:.4g}" if lv["threshold_exact"] else f">= {lv['threshold']:.4g}"
        if lv["k"] == 1:
            share = "none (only words users hold)"
        elif spurious is not None:
            share = "—" if spurious[i] is None else f"<= {spurious[i]:.4f} of those released"
        else:
            share = f"<= {lv['spurious_per_previous']:g} per released {lv['k'] - 1}-gram"
        out.append(f"| {lv['k']} | {lv['sigma']:.4g} | {lv['weight_half_width']:.4g} | {rho} | {share} |")
    out += ["", "Probability that an n-gram held by m users is released (given, at k >= 2, that it is a valid "
            "candidate), each holder adding weight w: w = 1 (it is their only n-gram of that length) or w at the "
            "cap (they hold delta0 of them). Thresholds marked >= are the least they can be; the release states the one used.", ""]  # fmt: skip
    key = ("holders", "p_weight_1", "p_weight_cap", "weight_cap")
    for i, lv in enumerate(levels):
        if i and all(lv[x] == levels[i - 1][x] for x in key):
            continue  # the same table as the level before
        last = i
        while last + 1 < len(levels) and all(levels[last + 1][x] == lv[x] for x in key):
            last += 1
        name = f"Level {lv['k']}" if last == i else f"Levels {lv['k']}–{levels[last]['k']}"
        out += [f"{name}:", "", "| m | w = 1 | w = " + f"{lv['weight_cap']:.3g} |", "|---|---|---|"]
        out += [f"| {m} | {a:.3f} | {b:.3f} |" for m, a, b in zip(lv["holders"], lv["p_weight_1"], lv["p_weight_cap"])]
        out.append("")
    return out



# -- top-h selection -----------------------------------------------------------------------------------


def lead_probability(rate_eps: float, sensitivity: int, lead: int, candidates: int) -> float:
    """A lower bound on P[permute-and-flip picks a subspace whose count leads every other by ``lead``]:
    each other is accepted, if visited before it, with probability at most p = exp(−rate · lead), so
    P >= E[(1 − p)^{#visited before}] = (1 − (1 − p)^M) / (M p) over a uniform order of M candidates
    (at p = 1, a lead of 0 with a rate of 0: 1/M)."""
    p = math.exp(-float(noise.rate(rate_eps, sensitivity)) * lead)
    # 1 − (1 − p)^M as −expm1(M·log1p(−p)): the plain form is 1 − 1 = 0 once p is below the float's epsilon
    if p == 0:
        return 1.0
    return 1.0 / candidates if p >= 1 else -math.expm1(candidates * math.log1p(-p)) / (candidates * p)
