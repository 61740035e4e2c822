"""A release's preview: what it would cost, what would be left, whether it would run, and how
accurate its answer would be; charging nothing, writing nothing and reading no row.

The request is checked by the release's own code (``pipeline.check``, then ``pipeline.admit``), so
a request a release refuses for its form is refused here with the same message; one the budget
refuses is previewed with the refusal as its verdict. Only registration facts are used, so a
dataset whose rows were dropped can be previewed. The figures are public values: the plan, the
ledger's history (its readers see it anyway) and what the mechanism says of itself, its views of the
contract (``privrelease.core.mechanisms.base.Declared``: its expected accuracy, warnings and notes), which the
preview asks for without knowing any mechanism by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from privrelease.core import mechanisms
from privrelease.core.charts import Chart
from privrelease.core.errors import BudgetError, UserError
from privrelease.core.ledger.account import left as budget_left
from privrelease.core.ledger.ledger import PUBLISHED
from privrelease.core.ledger.refusal import spent_words
from privrelease.core.mechanisms.base import Declared, Plan
from privrelease.core.privacy.accountant import Spend
from privrelease.core.privacy.budget import charge_phrase
from privrelease.core.privacy.cost import DPCost
from privrelease.core.release import charged, headroom, pipeline
from privrelease.core.release.home import Home
from privrelease.core.release.spec import Release
from privrelease.core.sdc import enforce

if TYPE_CHECKING:
    from privrelease.core.release.spec import ReleaseRequest

ADMITTED, APPROVAL, REFUSED, PUBLISHED_ALREADY = "admitted", "needs approval", "refused", "already published"


def preview(home: Home, request: ReleaseRequest) -> dict:
    """The preview of ``request`` (a user error for a request a release would refuse before its charge,
    except for the budget, which is the verdict, and dropped rows, whose figures are still shown)."""
    try:
        release, plan_ = pipeline.check(home, request)
        stopped = used(home, request)
    except UserError as exc:  # the release's own refusal; raised again below unless it is the dropped rows
        release, plan_ = pipeline.check(home, request, dropped=True)
        stopped = _verdict(REFUSED, str(exc))
    expected = accuracy_of(release, plan_)
    return {
        "dataset": release.dataset.id,
        "mechanism": release.mechanism,
        "guarantee": plan_.guarantee,
        **(stopped or budget(home, release, plan_)),
        "accuracy": expected,
        "warnings": pipeline.warnings(release, plan_),
        "notes": notes(release, plan_),
    }


def used(home: Home, request: ReleaseRequest) -> dict | None:
    """What a release of an id the ledger already holds would do before any charge: return the
    published release without charging, or refuse an id charged before that did not publish."""
    status = home.ledger.status(request.release_id) if request.release_id else None
    if status == PUBLISHED:
        return _verdict(
            PUBLISHED_ALREADY,
            f"release {request.release_id!r} is already published; running it again charges nothing and returns that release.",
        )
    if status is not None:
        return _verdict(
            REFUSED,
            f"release {request.release_id!r} was charged before and did not publish (its ledger "
            f"status is {status}); release again under a new release_id.",
        )
    return None


def _verdict(verdict: str, reason: str) -> dict:
    return {"kind": None, "charge": None, "left_after": None, "verdict": verdict, "reason": reason}


def budget(home: Home, release: Release, plan_: Plan) -> dict:
    """The charge, what would be left after it, and the verdict: admitted, waits for approval, refused."""
    cost = plan_.cost
    if not isinstance(cost, DPCost):
        return {"kind": cost.kind, "charge": None, "left_after": None, "verdict": ADMITTED, "reason": charge_phrase(cost.kind)}
    out = {"kind": "dp", "charge": {"epsilon": cost.budget.epsilon, "delta": cost.budget.delta}, "left_after": None}
    try:
        pipeline.admit(home, release, plan_)
    except BudgetError as exc:  # the accounting behind a refusal by the admission filter: --verbose
        return out | {"verdict": REFUSED, "reason": getattr(exc, "plain", str(exc)), "detail": getattr(exc, "detail", "")}
    f, spends = home.ledger.admission(release.dataset.id)
    after, counted = f.admit(spends, Spend.of("this release", cost.event))
    left, by = budget_left(f, spends + [counted])
    now, then = (headroom.room(home.ledger, release.dataset.id, release.mechanism, release.params, x) for x in (None, counted))
    out["room"] = None if now is None else now.as_dict() | {"after": None if then is None else then.as_dict()}
    out["left_after"] = {
        "epsilon": left.epsilon,
        "delta": left.delta,
        "cap": {"epsilon": f.cap.epsilon, "delta": f.cap.delta},
        "held_back": float(f.delta_conv),
        "by": by,
        "region": after.region,
        "counted_by": counted.mode,
        **(
            {"renyi": {"order": f.alpha, "cost": f.cost(counted), "left": max(0.0, f.k - after.renyi_used), "of": f.k}}
            if f.alpha is not None
            else {}
        ),
    }
    held = charged.look(home, pipeline.claim(release, plan_), charged.Caller())
    return out | (
        {"verdict": APPROVAL, "reason": held.words(release.dataset.id)} if held else {"verdict": ADMITTED, "reason": None}
    )


def accuracy_of(release: Release, plan_: Plan) -> dict | None:
    """Each DP output's noise and expected accuracy, as its mechanism states them."""
    return _views(release.mechanism).accuracy(*_public(release, plan_))


def notes(release: Release, plan_: Plan) -> list[str]:
    """What the analyst should judge before spending: the mechanism's notes (DPNE: how many users a word
    needs, as the corpus size is not public), after the disclosure policy's for an SDC release of microdata (a
    table, which assesses itself, says its own)."""
    own = _views(release.mechanism).notes(*_public(release, plan_))
    if release.dataset.purpose != "sdc" or _views(release.mechanism).assess is not None:  # a table says its own
        return own
    return enforce.notes(release.dataset, mechanisms.get(release.mechanism), release.params) + own


def _public(release: Release, plan_: Plan) -> tuple:
    """What a mechanism's views are given: its parameters, its plan and the registered column names."""
    return release.params, plan_, tuple(release.dataset.schema.columns)


def text(p: dict, verbose: bool = False) -> str:
    """The preview as an analyst reads it (markdown: the command line prints it, the UI shows it); ``verbose``
    adds the accounting behind what would be left."""
    lines = [f"# Preview: {p['mechanism']} on dataset `{p['dataset']}` (nothing charged)", "", f"- guarantee: {p['guarantee']}"]
    if p["charge"]:
        lines.append(f"- cost: epsilon={p['charge']['epsilon']:g} delta={p['charge']['delta']:g}, from the dataset's budget")
    elif p["kind"] is not None:
        lines.append(f"- cost: none ({p['reason']})")
    if p.get("room"):
        lines += _room_lines(p["room"], p["left_after"])
    if p["left_after"] and verbose:
        lines += _left_lines(p["left_after"])
    verdict = p["verdict"] + (f": {p['reason']}" if p["reason"] and (p["charge"] or p["kind"] is None) else "")
    lines += (
        [f"- verdict: **{verdict}**"]
        + ([f"- accounting: {p['detail'].removeprefix('Accounting detail. ')}"] if verbose and p.get("detail") else [])
        + [""]
    )
    lines += [f"> warning: {w}" for w in p["warnings"]] + ([""] if p["warnings"] else [])
    lines += [f"> note: {n}" for n in p["notes"]] + ([""] if p["notes"] else [])
    if p["accuracy"]:
        lines += _views(p["mechanism"]).accuracy_lines(p["accuracy"])
    return "\n".join(lines).rstrip() + "\n"


def _room_lines(room: dict, left: dict | None) -> list[str]:
    """The one budget figure an analyst acts on (``privrelease.core.release.headroom``), now and after this release, beside the cap
    and what was spent under the accountant that admits."""
    cap = left["cap"] if left else None
    lines = [f"- budget: {room['says']}" + (f"; cap epsilon={cap['epsilon']:g}, delta={cap['delta']:g}" if cap else "")]
    if cap:
        lines.append(f"  ({spent_words(room['spent'], room['spent_by'], room['charged'], cap['epsilon'])})")
    after = room.get("after")
    if after is not None:
        lines.append(f"- after it: {after['says']}")
    return lines


def _left_lines(left: dict) -> list[str]:
    """The accounting behind the figure (``--verbose``): the cap less what would be spent, the delta set aside, the
    Rényi filter's own figures."""
    cap, held = left["cap"], left["held_back"]
    lines = [
        f"- the cap less what would be spent after it: epsilon={left['epsilon']:.4g} of {cap['epsilon']:g}, "
        f"delta={left['delta']:.3g} of {cap['delta']:g}"
        + (
            " (with Gaussian noise in the history, not what a release can take: the filter admits by its own test)"
            if left["by"] != "basic"
            else ""
        )
    ]
    if held:
        lines.append(
            f"  ({held:.3g} of the cap's delta is set aside to state the total spent as one (epsilon, delta); "
            "releases share the rest)"
        )
    if "renyi" in left:
        r, counted = left["renyi"], {"events": "its noise events", "charge": "its (epsilon, delta) charge"}
        region = "basic composition (the charges add up)" if left["region"] == "basic" else "the Rényi filter"
        lines.append(
            f"- accounting: admitted by {region}; the Rényi filter (order {r['order']:.3g}, budget {r['of']:.4g}) "
            f"counts this release by {counted.get(left['counted_by'], left['counted_by'])} as {r['cost']:.4g}, "
            f"leaving {r['left']:.4g} of that budget"
        )
    return lines


def charts(p: dict) -> list[Chart]:
    """The preview's charts (DPNE's detection curves), as its mechanism draws its expected accuracy."""
    return _views(p["mechanism"]).accuracy_charts(p["accuracy"]) if p["accuracy"] else []


def _views(name: str) -> Declared:
    """What the mechanism called ``name`` declares (``privrelease.core.mechanisms.declared``): its views."""
    return mechanisms.declared(mechanisms.get(name))
