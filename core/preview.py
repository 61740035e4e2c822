"""A release's preview: what it would cost, what would be left, whether it would run, and how
accurate its answer would be; charging nothing, writing nothing and reading no row.

The request is checked by the release's own code (``pipeline.check``, then ``pipeline.admit``), so
a request a release refuses for its form is refused here with the same message; one the budget
refuses is previewed with the refusal as its verdict. Only registration facts are used, so a
dataset whose rows were dropped can be previewed. The figures are public values: the plan, the
ledger's history (its readers see it anyway) and ``core.accuracy``'s closed forms.
"""

from __future__ import annotations

import math

from core import accuracy, mechanisms, noise, pipeline
from core.accountant import Spend, events_of
from core.accounting import charge_phrase
from core.errors import BudgetError, UserError
from core.ledger import PUBLISHED
from core.mechanisms import outliers
from core.mechanisms.base import DPCost, Plan
from core.mechanisms.dpne_counts import unit_weights
from core.mechanisms.outliers_sensitivity import alpha, beta, global_noise, global_std, smooth_floor
from core.sdc import enforce
from core.spec import Release, ReleaseRequest

ADMITTED, APPROVAL, REFUSED, PUBLISHED_ALREADY = "admitted", "needs approval", "refused", "already published"


def preview(store: pipeline.Store, request: ReleaseRequest) -> dict:
    """The preview of ``request`` (a user error for a request a release would refuse before its charge,
    except for the budget, which is the verdict, and dropped rows, whose figures are still shown)."""
    try:
        release, plan_ = pipeline.check(store, request)
        stopped = used(store, request)
    except UserError as exc:  # the release's own refusal; raised again below unless it is the dropped rows
        release, plan_ = pipeline.check(store, request, dropped=True)
        stopped = _verdict(REFUSED, str(exc))
    expected = accuracy_of(release, plan_)
    return {
        "dataset": release.dataset.id,
        "mechanism": release.mechanism,
        "guarantee": plan_.guarantee,
        **(stopped or budget(store, release, plan_)),
        "accuracy": expected,
        "warnings": warnings(release, plan_, expected),
        "notes": notes(release, plan_),
    }


def used(store: pipeline.Store, request: ReleaseRequest) -> dict | None:
    """What a release of an id the ledger already holds would do before any charge: return the
    published release without charging, or refuse an id charged before that did not publish."""
    status = store.ledger.status(request.release_id) if request.release_id else None
    if status == PUBLISHED:
        return _verdict(PUBLISHED_ALREADY, f"release {request.release_id!r} is already published; running it again "
                                           "charges nothing and returns that release.")  # fmt: skip
    if status is not None:
        return _verdict(REFUSED, f"release {request.release_id!r} was charged before and did not publish (its ledger "
                                 f"status is {status}); release again under a new release_id.")  # fmt: skip
    return None


def _verdict(verdict: str, reason: str) -> dict:
    return {"kind": None, "charge": None, "left_after": None, "verdict": verdict, "reason": reason}


def budget(store: pipeline.Store, release: Release, plan_: Plan) -> dict:
    """The charge, what would be left after it, and the verdict: admitted, waits for approval, refused."""
    cost = plan_.cost
    if not isinstance(cost, DPCost):
        return {"kind": cost.kind, "charge": None, "left_after": None, "verdict": ADMITTED,
                "reason": charge_phrase(cost.kind)}  # fmt: skip
    out = {"kind": "dp", "charge": {"epsilon": cost.budget.epsilon, "delta": cost.budget.delta}, "left_after": None}
    try:
        pipeline.admit(store, release, plan_)
    except BudgetError as exc:
        return out | {"verdict": REFUSED, "reason": str(exc)}
    f, spends = store.ledger.admission(release.dataset.id)
    after, counted = f.admit(spends, Spend("this release", cost.budget, events_of(plan_.detail)))
    room = f.delta_room if f.alpha is not None else f.cap.delta
    out["left_after"] = {
        "epsilon": max(0.0, f.cap.epsilon - float(after.basic_epsilon)),
        "delta": max(0.0, float(room) - float(after.basic_delta)),
        "region": after.region,
        "counted_by": counted.mode,
        **({"renyi": {"order": f.alpha, "cost": f.cost(counted), "left": max(0.0, f.k - after.renyi_used), "of": f.k}}
           if f.alpha is not None else {}),
    }  # fmt: skip
    why = pipeline.needs_approval(store, release, plan_)
    return out | ({"verdict": APPROVAL, "reason": why} if why else {"verdict": ADMITTED, "reason": None})


def accuracy_of(release: Release, plan_: Plan) -> dict | None:
    """Each DP output's noise and expected accuracy, from the parameters and registration facts."""
    if release.mechanism == "dpne":
        d = plan_.detail
        return {"levels": accuracy.dpne_levels(release.params, d["sigmas"], d["grids"], d["rho_1"])}
    if release.mechanism == "outliers":
        return outlier_accuracy(release.params, tuple(release.dataset.schema.columns))
    return None


def outlier_accuracy(params: outliers.Params, schema: tuple[str, ...]) -> dict:
    """Before a release: each count's noise (global: exact; smooth: its range S_UB/α in [least, N/α])
    and 95% interval half-width, and the top-h selection's odds. N is public under the record unit."""
    a = outliers.allocate(params)
    _, subspaces = outliers.resolve(params, schema)
    n, c = params.rows, len(subspaces[0])
    out: dict = {"counts": None, "selection": None}
    if a.counts:
        whole = a.whole
        if outliers.uses_global(params, a, n, c):
            gs, _ = global_noise(n, params.k, c, a)  # the std the draw uses
            std = accuracy.sampler_std(gs, min(1.0, noise.grid(gs)))
            out["counts"] = {"noise": "global", "family": "discrete Gaussian", "std": std, "std_least": std,
                             "half_width": math.ceil(accuracy.Z95 * std), "smooth_bound": None}  # fmt: skip
        else:
            al = alpha(a.count.epsilon, a.count.delta)
            least = smooth_floor(n, beta(a.count.epsilon, a.count.delta)) / al
            out["counts"] = {"noise": "smooth", "family": "discrete Gaussian", "std": None, "std_least": least,
                             "std_most": n / al, "half_width": math.ceil(accuracy.Z95 * least),
                             "smooth_bound": {"alpha": al, "S_UB_least": least * al, "S_UB_most": n,
                                              "global_std": global_std(n, params.k, c, whole)}}  # fmt: skip
        out["counts"] |= {"per_release": a.counts, "range": [0, n]}
    if a.select:
        sens = outliers.gs_upper(n, params.k, params.c)
        leads = sorted({max(1, round(sens * x)) for x in (0.5, 1, 2, 4, 8, 16, 32, 64)})
        out["selection"] = {"family": "permute-and-flip (exact)", "epsilon_per_draw": a.select / params.h,
                            "candidates": len(subspaces), "sensitivity": sens, "leads": leads,
                            "p_first": [accuracy.lead_probability(a.select / params.h, sens, d, len(subspaces))
                                        for d in leads]}  # fmt: skip
    return out


def warnings(release: Release, plan_: Plan, expected: dict | None = None) -> list[str]:
    """Requests that would spend budget and return mostly noise (public values only)."""
    if release.mechanism != "outliers":
        return []
    expected = expected or accuracy_of(release, plan_)
    if not expected["counts"]:
        return []
    counts, n = expected["counts"], release.params.rows
    if counts["std_least"] <= n / 2:
        return []
    least = "at least " if counts["noise"] == "smooth" else ""
    return [f"an outlier count's noise std is {least}{counts['std_least']:.4g}, more than half of its public range "
            f"[0, {n}]: the released count would say little about the true one. Raise epsilon (or lower k, or "
            "ask about fewer dimensions) before you spend the budget."]  # fmt: skip


def notes(release: Release, plan_: Plan) -> list[str]:
    """DPNE: how many users a word needs, from public parameters (the corpus size is not public under
    the user unit, so whether it has them is for the analyst to judge before spending)."""
    if release.dataset.purpose == "sdc":
        return enforce.notes(release.dataset, mechanisms.get(release.mechanism), release.params)
    if release.mechanism != "dpne":
        return []
    d, cap = plan_.detail, release.params.caps[0]
    weights = unit_weights(cap, d["grids"][0])
    full, capped = (accuracy.holders_needed(d["grids"][0], d["rho_1"], int(weights[t])) for t in (1, cap))
    return [f"a word is released with probability 1/2 or more only when at least {full} users hold it as their only "
            f"word, or {capped} users who each hold {cap} distinct words (the detection table below); in a corpus "
            "with fewer users, every word is more likely withheld than released. Its size is not public under the "
            "user unit: judge it before you spend."]  # fmt: skip


def text(p: dict) -> str:
    """The preview as an analyst reads it (markdown: the command line prints it, the UI shows it)."""
    lines = [f"# Preview: {p['mechanism']} on dataset `{p['dataset']}` (nothing charged)", "", f"- guarantee: {p['guarantee']}"]
    if p["charge"]:
        lines.append(f"- cost: epsilon={p['charge']['epsilon']:g} delta={p['charge']['delta']:g}")
    elif p["kind"] is not None:
        lines.append(f"- cost: none ({p['reason']})")
    left = p["left_after"]
    if left:
        lines.append(f"- left after it (basic composition): epsilon={left['epsilon']:.6g} delta={left['delta']:.6g}")
        if "renyi" in left:
            r = left["renyi"]
            lines.append(f"- admission filter (Rényi order {r['order']:.3g}, counted by {left['counted_by']}): costs "
                         f"{r['cost']:.4g}, leaves {r['left']:.4g} of {r['of']:.4g}")  # fmt: skip
    verdict = p["verdict"] + (f": {p['reason']}" if p["reason"] and (p["charge"] or p["kind"] is None) else "")
    lines += [f"- verdict: **{verdict}**", ""]
    lines += [f"> warning: {w}" for w in p["warnings"]] + ([""] if p["warnings"] else [])
    lines += [f"> note: {n}" for n in p["notes"]] + ([""] if p["notes"] else [])
    acc = p["accuracy"]
    if acc and "levels" in acc:
        lines += accuracy.dpne_lines(acc["levels"])
    elif acc:
        lines += outlier_lines(acc)
    return "\n".join(lines).rstrip() + "\n"


def outlier_lines(acc: dict) -> list[str]:
    out = []
    c = acc["counts"]
    if c:
        if c["noise"] == "global":
            out.append(f"- each count: {c['family']} noise (global sensitivity), std {c['std']:.4g}; 95% interval: the "
                       f"released count ± {c['half_width']}, cut to [0, {c['range'][1]}] (counts are clamped to it)")  # fmt: skip
        else:
            sb = c["smooth_bound"]
            out.append(f"- each count: {c['family']} noise of std S_UB/α (smooth sensitivity, α = {sb['alpha']:.4g}); "
                       f"S_UB is data, between {sb['S_UB_least']:.4g} and {sb['S_UB_most']}, so the std is between "
                       f"{c['std_least']:.4g} and {c['std_most']:.4g} (global-sensitivity std: {sb['global_std']:.4g}); "
                       f"95% interval half-width at least {c['half_width']}, stated after the release from its released std")  # fmt: skip
    s = acc["selection"]
    if s:
        out += ["", f"Top-h selection by {s['family']} draws at epsilon {s['epsilon_per_draw']:.4g} each, among "
                f"{s['candidates']} subspaces (count sensitivity {s['sensitivity']}): "
                "probability that a subspace whose count leads every other by Δ is chosen first (at least):", "",
                "| Δ | P |", "|---|---|", *(f"| {d} | {p:.3f} |" for d, p in zip(s["leads"], s["p_first"]))]  # fmt: skip
    return out
