"""DPNE's accuracy, from public values only: each level's noise, its threshold and the detection table
(the probability that an n-gram held by m users is released). Before a release, from its plan: the
preview's views of DPNE (``accuracy``, ``accuracy_lines``, ``accuracy_charts``, ``notes``; the
contract's ``base.Declared``). After it, from its DP outputs too: the report's section, the expected
spurious share and the detection chart (``release``). The interval math is ``privrelease.core.privacy.accuracy``'s.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from privrelease.core import noise
from privrelease.core.charts import Chart
from privrelease.core.mechanisms.base import Plan
from privrelease.core.mechanisms.dpne.counts import unit_weights
from privrelease.core.privacy.accuracy import Z95, sampler_std


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


def levels(params, sigmas: list[float], units: list[float], rho_1: float, rho: list[float | None] | None = None) -> list[dict]:
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
        out.append(
            {
                "k": k,
                "noise": "discrete Gaussian",
                "sigma": sigma,
                "grid": unit,
                "weight_half_width": Z95 * sampler_std(sigma, unit),
                "threshold": threshold,
                "threshold_exact": k == 1 or used is not None,
                "spurious_per_previous": 0.0 if k == 1 else params.eta,
                "holders": m,
                "p_weight_1": detection(sigma, unit, threshold, full, m_arr).tolist(),
                "weight_cap": capped * unit,
                "p_weight_cap": detection(sigma, unit, threshold, capped, m_arr).tolist(),
            }
        )
    return out


def spurious(levels: list[dict], released: list[int], candidates: list[int | None]) -> list[float | None]:
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


def release(
    params,
    sigmas: list[float],
    units: list[float],
    rho_1: float,
    rho: list[float | None],
    released: list[int],
    candidates: list[int | None],
) -> tuple[dict, list[str], Chart]:
    """What a DPNE release says of its accuracy (from its parameters and DP outputs): the manifest's
    part, the report's lines and the detection-probability chart."""
    found = levels(params, sigmas, units, rho_1, rho)
    share = spurious(found, released, candidates)
    said = [
        "",
        "### Accuracy",
        "",
        f"Each noisy weight at level k is its users' summed weight plus discrete Gaussian "
        f"noise of std sigma_k: a 95% interval is ± {found[0]['weight_half_width']:.4g} at level 1 (before "
        "selection: a released n-gram was selected for a high noisy weight, so its weight is biased upward). "
        "Expected spurious n-grams at level k: at most |V_k| · P[noise > rho_k] (every zero-weight "
        "candidate passes with that probability), shown as a share of those released.",
        "",
        *lines(found, share),
    ]
    return {"levels": found, "spurious_share": share}, said, detection_chart(found)


def detection_chart(levels: list[dict]) -> Chart:
    """The detection-probability curves of the first two levels, at both weights."""
    points = {f"level {lv['k']}, w = 1": (lv["holders"], lv["p_weight_1"]) for lv in levels[:2]}
    points |= {f"level {lv['k']}, w = {lv['weight_cap']:.3g}": (lv["holders"], lv["p_weight_cap"]) for lv in levels[:2]}
    return Chart(
        "detection.png",
        "Probability that an n-gram held by m users is released",
        [],
        {},
        kind="curve",
        points=points,
        axes=("users holding it (m)", "probability released"),
    )


def lines(levels: list[dict], spurious: list | None = None) -> list[str]:
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
    out += [
        "",
        "Probability that an n-gram held by m users is released (given, at k >= 2, that it is a valid "
        "candidate), each holder adding weight w: w = 1 (it is their only n-gram of that length) or w at the "
        "cap (they hold delta0 of them). Thresholds marked >= are the least they can be; the release states the one used.",
        "",
    ]
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


def nothing_released(params, sigma_1: float, rho_1: float) -> str:
    """Why nothing was released, from public values: a word needs about rho_1 users' full weight."""
    holders = math.ceil(rho_1 * math.sqrt(params.caps[0]))
    return (
        f"\n**Nothing was released.** A word is released only when its users' summed weight, plus noise of "
        f"sigma_1 = {sigma_1:.3g}, passes rho_1 = {rho_1:.4g}. A user adds 1/sqrt(t) to each of their t "
        f"distinct words (at most {params.caps[0]}), so a word needs at least {math.ceil(rho_1)} users who hold "
        f"it alone, or about {holders} users who each hold {params.caps[0]} distinct words. A larger corpus, a "
        "larger epsilon or delta, or a smaller delta0 lowers that bar.\n"
    )


# -- before a release: the preview's views (``base.Declared``) -------------------------------------------------


def accuracy(params, plan: Plan, columns: tuple[str, ...]) -> dict:
    """Each level's noise, the least its threshold can be and its detection table, from the plan."""
    d = plan.detail
    return {"levels": levels(params, d["sigmas"], d["grids"], d["rho_1"])}


def accuracy_lines(figures: dict) -> list[str]:
    return lines(figures["levels"])


def accuracy_charts(figures: dict) -> list[Chart]:
    return [detection_chart(figures["levels"])]


def notes(params, plan: Plan, columns: tuple[str, ...]) -> list[str]:
    """How many users a word needs, from public parameters (the corpus size is not public under
    the user unit, so whether it has them is for the analyst to judge before spending)."""
    d, cap = plan.detail, params.caps[0]
    weights = unit_weights(cap, d["grids"][0])
    full, capped = (holders_needed(d["grids"][0], d["rho_1"], int(weights[t])) for t in (1, cap))
    return [
        f"a word is released with probability 1/2 or more only when at least {full} users hold it as their only "
        f"word, or {capped} users who each hold {cap} distinct words (the detection table below); in a corpus "
        "with fewer users, every word is more likely withheld than released. Its size is not public under the "
        "user unit: judge it before you spend."
    ]
