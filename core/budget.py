"""A dataset's account, read from its ledger entries: what the steward and the auditor are shown.

Per dataset: the cap; the spend by basic composition (exact sums of the charges); the spend the
admission filter certifies (``core.accountant``); the tight epsilon of the whole history by
dp-accounting's PLD accountant (``core.pld``, reported only); how many more releases like the
last one the filter admits; and, for a refusal, what the request costs, what is left, the largest
epsilon of the same request that would fit, and which releases spent the most. ``replay``
recomputes every recorded admission from the recorded events. Everything here is public: caps,
charges and the events, all from public parameters.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

from core import pld
from core.accountant import CHARGE, EVENTS, Filter, Spend, events_of, exact, fits_more
from core.accounting import Budget
from core.chain import Entry

CAP, RESERVED = "cap", "reserved"
RULE = "filter-1"  # the admission rule recorded with each charge; entries without one were admitted by basic composition


def spend(entry: Entry) -> Spend:
    detail = json.loads(entry.detail)
    mode = (detail.get("admission") or {}).get("mode", CHARGE)  # entries before modes: by their charge
    return Spend(entry.release_id or f"#{entry.seq}", entry.budget, events_of(detail), mode)


def history(entries: list[Entry]) -> list[Spend]:
    """The dp charges among a dataset's entries, in chain order."""
    return [spend(e) for e in entries if e.status == RESERVED and e.kind == "dp"]


@dataclass(frozen=True)
class Account:
    """One dp dataset's figures (epsilons at the cap's delta, except basic's own delta)."""

    filter: Filter
    basic: Budget
    filter_epsilon: float | None  # what the filter's bound certifies for the history at the cap's delta
    pld_epsilon: float | None  # dp-accounting PLD, pessimistic, at the cap's delta
    fits: int | None  # more releases like ``like`` the filter admits
    like: str | None  # the mechanism of the last dp charge
    over_cap: bool

    def as_dict(self) -> dict:
        f = self.filter
        return {
            "filter": None if self.filter_epsilon is None else {
                "epsilon": self.filter_epsilon, "delta": f.cap.delta, "order": f.alpha,
                "renyi_budget": f.k, "delta_for_conversion": float(f.delta_conv)},
            "pld": None if self.pld_epsilon is None else {
                "epsilon": self.pld_epsilon, "delta": f.cap.delta, "discretization": pld.discretization(self.basic.epsilon)},
            "next": None if self.like is None else {"like": self.like, "fits": self.fits},
        }  # fmt: skip


def account(entries: list[Entry], cap: Budget, cache_dir: Path | None = None) -> Account:
    charges = [e for e in entries if e.status == RESERVED and e.kind == "dp"]
    spends = [spend(e) for e in charges]
    f = Filter.of(cap)
    basic = Budget(float(sum((exact(s.budget.epsilon) for s in spends), Fraction(0))),
                   float(sum((exact(s.budget.delta) for s in spends), Fraction(0))))  # fmt: skip
    tight = None
    if spends:
        tight = pld.cached_epsilon([e for s in spends for e in s.curve], cap.delta, cache_dir,
                                   pld.discretization(basic.epsilon))  # fmt: skip
    over = bool(spends) and not f.check(spends).admitted
    return Account(f, basic, f.spent_epsilon(spends), tight, fits_more(f, spends, spends[-1]) if spends else None,
                   charges[-1].mechanism if charges else None, over)  # fmt: skip


# -- refusals ------------------------------------------------------------------------------------------


def _down(x: float) -> str:
    """``x`` to 3 significant digits, rounded down: what is left is never shown as more than it is."""
    if x <= 0:
        return "0"
    step = 10 ** (math.floor(math.log10(x)) - 2)
    return f"{math.floor(x / step * (1 + 1e-12)) * step:.3g}"


def top_spenders(f: Filter, spends: list[Spend], n: int = 3) -> list[tuple[str, Budget, float]]:
    """The releases with the largest filter cost (ties: charged epsilon), as (id, charge, cost)."""
    ranked = sorted(spends, key=lambda s: (f.cost(s) if f.alpha else 0.0, exact(s.budget.epsilon)), reverse=True)
    return [(s.ref, s.budget, f.cost(s) if f.alpha else math.nan) for s in ranked[:n]]


def refusal(dataset: str, f: Filter, spends: list[Spend], candidate: Spend) -> str:
    """Why a charge is refused, in public values: its cost, what is left, who spent the most."""
    d = f.check(spends)
    cost = candidate.budget
    lines = [f"this release needs epsilon={cost.epsilon:.6g}, delta={cost.delta:.6g} but dataset {dataset!r} cannot take "
             f"it. {_binding(f, d, candidate, spends)}"]  # fmt: skip
    if f.alpha is not None:
        lines.append(
            f"Admission filter (Rényi order {f.alpha:.3g}): it would cost {f.cost(candidate):.4g} of the "
            f"{f.k:.4g} budget, of which {_down(f.k - d.renyi_used)} is left, and delta {float(candidate.approx_delta):.3g} "
            f"of the {float(f.delta_room):.3g} for (epsilon, delta)-only parts, of which "
            f"{_down(float(f.delta_room - d.approx_delta))} is left."
        )
    room_d = f.delta_room if f.alpha is not None else exact(f.cap.delta)
    lines.append(f"By basic composition it has only epsilon={float(max(exact(f.cap.epsilon) - d.basic_epsilon, 0)):.6g}, "
                 f"delta={float(max(room_d - d.basic_delta, 0)):.6g} left of its cap (epsilon={f.cap.epsilon:.6g}, "
                 f"delta={f.cap.delta:.6g})"
                 + (" (not open to releases with Gaussian noise)." if candidate.gaussian or
                    any(s.gaussian for s in spends) else "."))  # fmt: skip
    top = top_spenders(f, spends)
    if top:
        lines.append("Largest spenders so far: " + "; ".join(
            f"{ref} (epsilon={b.epsilon:.4g}, delta={b.delta:.3g}" + ("" if math.isnan(c) else f", filter cost {c:.4g}")
            + ")" for ref, b, c in top) + ".")  # fmt: skip
    lines.append("Lower the release's cost or raise the cap with privrelease ledger set-budget.")
    return " ".join(lines)


def _binding(f: Filter, d, candidate: Spend, spends: list[Spend]) -> str:
    """Which of epsilon and delta binds, in each region that could have admitted the charge."""

    def say(eps: bool, delta: bool) -> str:
        return ("epsilon and delta" if eps and delta else "epsilon (delta has room)" if eps
                else "delta (epsilon has room)" if delta else "neither alone")  # fmt: skip

    said = []
    if f.alpha is not None:
        said.append("under the admission filter, " + say(f.cost(candidate) > f.k - d.renyi_used,
                                                         candidate.approx_delta > f.delta_room - d.approx_delta))  # fmt: skip
    if candidate.gaussian or any(s.gaussian for s in spends):
        said.append("basic composition does not take Gaussian noise")
    else:
        room_d = f.delta_room if f.alpha is not None else exact(f.cap.delta)
        said.append("by basic composition, " + say(
            exact(candidate.budget.epsilon) > exact(f.cap.epsilon) - d.basic_epsilon,
            exact(candidate.budget.delta) > room_d - d.basic_delta))  # fmt: skip
    return "What binds: " + "; ".join(said) + "."


def largest_epsilon(f: Filter, spends: list[Spend], make: Callable[[float], Spend | None], high: float) -> float | None:
    """The largest epsilon (to 3 significant digits, rounded down) at which ``make(epsilon)``, the same
    request at another epsilon, is admitted; None if none from high / 10^6 up fits."""

    def ok(eps: float) -> bool:
        s = make(eps)
        return s is not None and f.admit(spends, s)[0].admitted

    lo = high / 1e6
    if not ok(lo):
        return None
    hi = high
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    digits = 10 ** (math.floor(math.log10(lo)) - 2)
    return math.floor(lo / digits) * digits


# -- replay ----------------------------------------------------------------------------------------------


def replay(entries: list[Entry]) -> list[str]:
    """Recompute every dp admission from the recorded caps and events; one line per entry that does not follow.

    A charge recorded with ``admission`` was admitted by the filter: the filter of the cap then in
    force must admit the history up to it, in the region recorded. One recorded without was admitted
    by basic composition against the whole cap (the rule before events were recorded).
    """
    problems = []
    by_dataset: dict[str, list[Entry]] = {}
    for e in entries:
        by_dataset.setdefault(e.dataset, []).append(e)
    for dataset, mine in by_dataset.items():
        cap, spends = None, []
        for e in mine:
            if e.status == CAP:
                cap = e.budget
            if e.status != RESERVED or e.kind != "dp":
                continue
            recorded = json.loads(e.detail).get("admission")
            if cap is None:
                problems.append(f"entry {e.seq} ({dataset}): a dp charge with no cap in force")
                spends.append(spend(e))
            elif recorded is None:
                spends.append(spend(e))
                if sum((exact(s.budget.epsilon) for s in spends), Fraction(0)) > exact(cap.epsilon) or sum(
                        (exact(s.budget.delta) for s in spends), Fraction(0)) > exact(cap.delta):  # fmt: skip
                    problems.append(f"entry {e.seq} ({dataset}): basic composition exceeds the cap then in force")
            else:
                d, counted = Filter.of(cap).admit(spends, replace(spend(e), mode=EVENTS))
                spends.append(spend(e))
                if (not d.admitted or recorded.get("rule") != RULE or recorded.get("region") != d.region
                        or recorded.get("mode") != counted.mode):  # fmt: skip
                    problems.append(f"entry {e.seq} ({dataset}): recorded as admitted ({recorded.get('region')}, by its "
                                    f"{recorded.get('mode')}) but the filter of the cap then in force gives "
                                    f"{d.region or 'refused'} (by its {counted.mode})")  # fmt: skip
    return problems
