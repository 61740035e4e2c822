"""A refused charge in words, and the figures behind it: what the request costs, the cap, what was spent under the
accountant that admits (``account.spent``), what to do (``ACTION``), the largest epsilon of the same request that
would fit (``largest_epsilon``, which ``privrelease.core.release.headroom`` says beside the cap everywhere), and the accounting
detail (what binds in which region, the filter's figures, who spent the most). Public values only."""

from __future__ import annotations

import math
from collections.abc import Callable

from privrelease.core.ledger.account import left, spent
from privrelease.core.privacy.accountant import Filter, Spend, exact
from privrelease.core.privacy.budget import Budget


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


ACTION = "Lower the release's epsilon (or delta), or ask the data steward to raise the cap (privrelease ledger set-budget)."


def spent_words(share: float | None, by: str, basic: float, cap: float) -> str:
    """``spent``'s figures in words: the charges' sum said beside the filter's share, and why when it passes the cap."""
    if share is None:
        return "nothing spent yet"
    pct = f"{100 * share:.3g}%"
    if by == "basic":
        return f"spent {pct} of the cap (the charges add up to epsilon={basic:.4g})"
    said = f"spent {pct} of the cap as the Rényi filter counts it (the charges add up to epsilon={basic:.4g}"
    if basic > cap:
        return said + ", more than the cap's: the filter counts Gaussian noise together, tighter than a sum)"
    return said + ")"


def refusal(dataset: str, f: Filter, spends: list[Spend], candidate: Spend) -> tuple[str, str]:
    """Why a charge is refused, in public values: in plain words (its cost, the cap, what was spent under the
    accountant that admits, what to do: ``ACTION`` last, so that what would fit is said before it), and the
    accounting detail (what binds in which region, the filter's figures, who spent the most)."""
    d = f.check(spends)
    cost, (rest, _) = candidate.budget, left(f, spends)
    plain = (
        f"this release needs epsilon={cost.epsilon:.6g}, delta={cost.delta:.6g} but dataset {dataset!r} cannot take "
        f"it (cap epsilon={f.cap.epsilon:g}, delta={f.cap.delta:g}; {spent_words(*spent(f, spends), f.cap.epsilon)}). {ACTION}"
    )
    lines = [
        f"Accounting detail. {_binding(f, d, candidate, spends)} The cap less what was spent: epsilon={rest.epsilon:.4g}, "
        f"delta={rest.delta:.3g} (with Gaussian noise in the history, not what the next release can take: the filter "
        "admits by its own test)."
    ]
    if f.alpha is not None:
        lines.append(
            f"Admission filter (Rényi order {f.alpha:.3g}): it would cost {f.cost(candidate):.4g} of the "
            f"{f.k:.4g} budget, of which {_down(f.k - d.renyi_used)} is left, and delta {float(candidate.approx_delta):.3g} "
            f"of the {float(f.delta_room):.3g} for (epsilon, delta)-only parts, of which "
            f"{_down(float(f.delta_room - d.approx_delta))} is left."
        )
    room_d = f.delta_room if f.alpha is not None else exact(f.cap.delta)
    lines.append(
        f"By basic composition it has only epsilon={float(max(exact(f.cap.epsilon) - d.basic_epsilon, 0)):.6g}, "
        f"delta={float(max(room_d - d.basic_delta, 0)):.6g} left of its cap (epsilon={f.cap.epsilon:.6g}, "
        f"delta={f.cap.delta:.6g})"
        + (" (not open to releases with Gaussian noise)." if candidate.gaussian or any(s.gaussian for s in spends) else ".")
    )
    top = top_spenders(f, spends)
    if top:
        lines.append(
            "Largest spenders so far: "
            + "; ".join(
                f"{ref} (epsilon={b.epsilon:.4g}, delta={b.delta:.3g}" + ("" if math.isnan(c) else f", filter cost {c:.4g}") + ")"
                for ref, b, c in top
            )
            + "."
        )
    return plain, " ".join(lines)


def _binding(f: Filter, d, candidate: Spend, spends: list[Spend]) -> str:
    """Which of epsilon and delta binds, in each region that could have admitted the charge."""

    def say(eps: bool, delta: bool) -> str:
        return (
            "epsilon and delta"
            if eps and delta
            else "epsilon (delta has room)"
            if eps
            else "delta (epsilon has room)"
            if delta
            else "neither alone"
        )

    said = []
    if f.alpha is not None:
        said.append(
            "under the admission filter, "
            + say(f.cost(candidate) > f.k - d.renyi_used, candidate.approx_delta > f.delta_room - d.approx_delta)
        )
    if candidate.gaussian or any(s.gaussian for s in spends):
        said.append("basic composition does not take Gaussian noise")
    else:
        room_d = f.delta_room if f.alpha is not None else exact(f.cap.delta)
        said.append(
            "by basic composition, "
            + say(
                exact(candidate.budget.epsilon) > exact(f.cap.epsilon) - d.basic_epsilon,
                exact(candidate.budget.delta) > room_d - d.basic_delta,
            )
        )
    return "What binds: " + "; ".join(said) + "."


def largest_epsilon(f: Filter, spends: list[Spend], make: Callable[[float], Spend | None], high: float) -> float | None:
    """The largest epsilon (to 3 significant digits, rounded down) at which ``make(epsilon)``, the same
    request at another epsilon, is admitted; None if none from high / 10^6 up fits."""

    before = f.sums(spends)  # the history's totals, read once for the 41 candidates

    def ok(eps: float) -> bool:
        s = make(eps)
        return s is not None and f.admit(before, s)[0].admitted

    lo = high / 1e6
    if not ok(lo):
        return None
    hi = high
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    digits = 10 ** (math.floor(math.log10(lo)) - 2)
    return math.floor(lo / digits) * digits
