"""A dataset's account, read from its ledger entries: what the steward and the auditor are shown.

Per dataset: the cap; the spend by basic composition (exact sums of the charges); the spend the
admission filter certifies (``privrelease.core.privacy.accountant``) and the history's share of the cap under the
accountant that admits it (``spent``); the tight epsilon of the whole history by dp-accounting's PLD
accountant (``privrelease.core.privacy.pld``, reported only); how many more releases like the last one the filter
admits. A refusal's words are ``privrelease.core.ledger.refusal``'s. ``replay`` recomputes every recorded
admission from the recorded events. Everything here is public: caps, charges and the events, all
from public parameters.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from datetime import datetime
from fractions import Fraction
from pathlib import Path

from privrelease.core.ledger import approval, legacy
from privrelease.core.ledger.chain import Entry
from privrelease.core.privacy import events, pld
from privrelease.core.privacy.accountant import CHARGE, EVENTS, Filter, Spend, exact, fits_more, gdp_epsilon
from privrelease.core.privacy.adjacency import read
from privrelease.core.privacy.budget import Budget

CAP, RESERVED, PUBLISHED, FAILED = "cap", "reserved", "published", "failed"
LEDGER_WIDE = "*"  # the dataset of an entry about the whole ledger (privrelease.core.ledger.rollback)
RULE = "filter-1"  # the admission rule recorded with each charge; entries without one were admitted by basic composition
APPROVED = "filter-2"  # the same, with the steward's approval rule applied under the charge's lock and recorded
RULES = (RULE, APPROVED)


def recorded(parts: list[dict], budget: Budget) -> events.Calibrated:
    """``events.stored``'s inverse, with the entry's charged (epsilon, delta): each part in the tree's form,
    or, written before the tree, in the flat form ``privrelease.core.ledger.legacy`` reads."""
    return events.charge([legacy.read(p) if legacy.is_flat(p) else events.load(p) for p in parts], budget.epsilon, budget.delta)


def spend(entry: Entry) -> Spend:
    """A dp charge as the filter counts it: the privacy event its entry records (``recorded``), or, for an
    entry recorded before events, its (epsilon, delta) alone."""
    detail = json.loads(entry.detail)
    mode = (detail.get("admission") or {}).get("mode", CHARGE)  # entries before modes: by their charge
    ref = entry.release_id or f"#{entry.seq}"
    if detail.get("events") is None:
        return Spend(ref, entry.budget, None, mode)
    return Spend.of(ref, recorded(detail["events"], entry.budget), mode)


def history(entries: list[Entry]) -> list[Spend]:
    """The dp charges among a dataset's entries, in chain order."""
    return [spend(e) for e in entries if e.status == RESERVED and e.kind == "dp"]


@dataclass(frozen=True)
class BudgetAccount:
    """One dp dataset's figures (epsilons at the cap's delta, except basic's own delta)."""

    filter: Filter
    basic: Budget
    filter_epsilon: float | None  # what the filter's bound certifies for the history at the cap's delta
    pld_epsilon: float | None  # dp-accounting PLD, pessimistic, at the cap's delta
    fits: int | None  # more releases like ``like`` the filter admits
    like: str | None  # the mechanism of the last dp charge
    over_cap: bool
    left: tuple[Budget, str]  # what remains and by which rule (``left``)
    spent: tuple[float | None, str]  # the history's share of the cap, and the accountant that admits it (``spent``)

    def as_dict(self) -> dict:
        f = self.filter
        return {
            "filter": None
            if self.filter_epsilon is None
            else {
                "epsilon": self.filter_epsilon,
                "delta": f.cap.delta,
                "order": f.alpha,
                "renyi_budget": f.k,
                "delta_for_conversion": float(f.delta_conv),
            },
            "pld": None
            if self.pld_epsilon is None
            else {"epsilon": self.pld_epsilon, "delta": f.cap.delta, "discretization": pld.discretization(self.basic.epsilon)},
            "next": None if self.like is None else {"like": self.like, "fits": self.fits},
            "spent_share": None if self.spent[0] is None else {"share": self.spent[0], "by": self.spent[1]},
        }


def account(entries: list[Entry], cap: Budget, cache_dir: Path | None = None, tight: bool = True) -> BudgetAccount:
    """The dataset's account under ``cap``; ``tight=False`` leaves out the PLD figure (``pld_epsilon`` None),
    a second of dp-accounting for each new history that what is left does not depend on."""
    charges = [e for e in entries if e.status == RESERVED and e.kind == "dp"]
    spends = [spend(e) for e in charges]
    f = Filter.of(cap)
    basic = Budget(
        float(sum((exact(s.budget.epsilon) for s in spends), Fraction(0))),
        float(sum((exact(s.budget.delta) for s in spends), Fraction(0))),
    )
    pld_epsilon = None
    if spends and tight:
        pld_epsilon = pld.cached_epsilon(
            [e for s in spends for e in s.curve], cap.delta, cache_dir, pld.discretization(basic.epsilon)
        )
    over = bool(spends) and not f.check(spends).admitted
    return BudgetAccount(
        f,
        basic,
        f.spent_epsilon(spends),
        pld_epsilon,
        fits_more(f, spends, spends[-1]) if spends else None,
        charges[-1].mechanism if charges else None,
        over,
        left(f, spends),
        spent(f, spends)[:2],
    )


def left(f: Filter, spends: list[Spend]) -> tuple[Budget, str]:
    """What remains of the cap after ``spends``, and by which rule: basic composition (the cap less the
    charges, exactly) while no charge has Gaussian noise; once one has, the basic region is closed to the
    history and what remains is the filter's (the cap's epsilon less what the filter certifies as spent,
    and the delta room of (epsilon, delta)-only parts)."""
    d = f.check(spends)
    if any(s.gaussian for s in spends) and f.alpha is not None:
        spent = f.spent_epsilon(spends) or 0.0
        return Budget(max(f.cap.epsilon - spent, 0.0), float(max(f.delta_room - d.approx_delta, 0))), "filter"
    room = f.delta_room if f.alpha is not None else exact(f.cap.delta)
    return Budget(float(max(exact(f.cap.epsilon) - d.basic_epsilon, 0)), float(max(room - d.basic_delta, 0))), "basic"


@dataclass(frozen=True)
class Totals:
    """One dataset's account. ``spent`` sums its dp charges only; an sdc or mpc dataset has none."""

    dataset: str
    kind: str | None  # dp, sdc or mpc (None: only a cap so far)
    adjacency: str | None
    cap: Budget | None
    spent: Budget | None
    releases: int
    published: int
    failed: int
    pending: int
    gdp_epsilon: float | None = None  # the tighter total when every charge is a Gaussian-DP release
    account: BudgetAccount | None = None  # the filter's and the PLD figures (a dp dataset with a cap)

    @property
    def remaining(self) -> Budget | None:
        """What is left of the cap (``left``): by basic composition, or the filter's once a charge is Gaussian.
        Only a dp dataset with a cap has an account, and so a remaining."""
        return None if self.account is None else self.account.left[0]

    @property
    def remaining_by(self) -> str | None:
        """The rule ``remaining`` follows: "basic" or "filter" (``left``)."""
        return None if self.account is None else self.account.left[1]

    @property
    def over_cap(self) -> bool:
        """Whether the history is already outside the cap's admission filter (after a cap was lowered)."""
        if self.account is not None:
            return self.account.over_cap
        return (
            self.cap is not None
            and self.spent is not None
            and (exact(self.spent.epsilon) > exact(self.cap.epsilon) or exact(self.spent.delta) > exact(self.cap.delta))
        )

    def as_dict(self) -> dict:
        def pair(b: Budget | None) -> dict | None:
            return None if b is None else {"epsilon": b.epsilon, "delta": b.delta}

        return {
            "dataset": self.dataset,
            "kind": self.kind,
            "adjacency": self.adjacency,
            "cap": pair(self.cap),
            "spent": pair(self.spent),
            "remaining": pair(self.remaining),
            "remaining_by": self.remaining_by,
            "releases": self.releases,
            "published": self.published,
            "failed": self.failed,
            "pending": self.pending,
            "gdp": None
            if self.gdp_epsilon is None or self.spent is None
            else {"epsilon": self.gdp_epsilon, "delta": self.spent.delta},
            **(
                self.account.as_dict()
                if self.account is not None
                else {"filter": None, "pld": None, "next": None, "spent_share": None}
            ),
        }


def totals(entries: list[Entry], cache_dir: Path | None = None, tight: bool = True) -> list[Totals]:
    """Per dataset: its kind, cap, dp spend (basic composition), and release counts by status (``tight``:
    as ``account``)."""
    out = []
    for dataset in sorted({e.dataset for e in entries} - {LEDGER_WIDE}):  # a rollback or an upgrade is in no account
        mine = [e for e in entries if e.dataset == dataset]
        caps = [e.budget for e in mine if e.status == CAP]
        charges = [e for e in mine if e.status == RESERVED]
        rows = [json.loads(e.detail) for e in mine if e.status in ("registered", "refreshed")]
        kind = charges[0].kind if charges else ("dp" if caps else rows[-1].get("purpose") if rows else None)
        dp = [e for e in charges if e.kind == "dp"]
        spent = (
            Budget(float(sum((exact(e.epsilon) for e in dp), Fraction(0))), float(sum((exact(e.delta) for e in dp), Fraction(0))))
            if kind == "dp"
            else None
        )
        latest: dict[str, str] = {}
        for e in mine:
            if e.release_id is not None:
                latest[e.release_id] = e.status
        states = list(latest.values())
        out.append(
            Totals(
                dataset,
                kind,
                read(dp[0].adjacency).sentence if dp else None,
                caps[-1] if caps else None,
                spent,
                len(states),
                states.count(PUBLISHED),
                states.count(FAILED),
                states.count(RESERVED),
                gdp_epsilon(history(dp)),
                account(mine, caps[-1], cache_dir, tight) if kind == "dp" and caps else None,
            )
        )
    return out


def spent(f: Filter, spends: list[Spend]) -> tuple[float | None, str, float]:
    """What a history spent under the accountant that admits it: its share of the cap (basic composition: the
    charges' epsilon and delta over the cap's, while no charge has Gaussian noise; the Rényi filter: its costs over
    its budget K and its (epsilon, delta)-only deltas over their room), which accountant that is ("basic" or
    "filter"), and the charges' epsilons added up. None: nothing charged. A share, not an epsilon: the filter's
    certified epsilon holds for the whole history (it pays its conversion once), so it does not add to a next
    release's epsilon, which ``privrelease.core.release.headroom`` finds by the filter's own test."""
    basic = float(sum((exact(s.budget.epsilon) for s in spends), Fraction(0)))
    if not spends:
        return None, "basic", basic
    d = f.check(spends)
    room = f.delta_room if f.alpha is not None else exact(f.cap.delta)
    if d.region == "basic" or f.alpha is None:
        share = max(d.basic_epsilon / exact(f.cap.epsilon), d.basic_delta / room if room else Fraction(0))
        return float(share), "basic", basic
    share = max(d.renyi_used / f.k if f.k > 0 else math.inf, float(d.approx_delta / f.delta_room) if f.delta_room else 0.0)
    return float(share), "filter", basic


# -- replay ----------------------------------------------------------------------------------------------


def replay(entries: list[Entry]) -> list[str]:
    """Recompute every dp admission from the recorded caps and events; one line per entry that does not follow.

    A charge recorded with ``admission`` was admitted by the filter: the filter of the cap then in
    force must admit the history up to it, in the region recorded. One recorded without was admitted
    by basic composition against the whole cap (the rule before events were recorded). A charge made
    while the cap carried a steward's approval rule has that rule applied again: one it holds back
    must record an approval that covers it (``privrelease.core.ledger.approval``): an approval that is not on the ledger
    cannot be audited, so a charge from before approvals were recorded fails here too.
    """
    problems = []
    by_dataset: dict[str, list[Entry]] = {}
    for e in entries:
        by_dataset.setdefault(e.dataset, []).append(e)
    for dataset, mine in by_dataset.items():
        cap, spends, charges = None, [], []
        for e in mine:
            if e.status == CAP:
                cap = e
            if e.status != RESERVED or e.kind != "dp":
                continue
            recorded = json.loads(e.detail).get("admission")
            if cap is None:
                problems.append(f"entry {e.seq} ({dataset}): a dp charge with no cap in force")
            elif recorded is None:
                upto = spends + [spend(e)]
                if sum((exact(s.budget.epsilon) for s in upto), Fraction(0)) > exact(cap.epsilon) or sum(
                    (exact(s.budget.delta) for s in upto), Fraction(0)
                ) > exact(cap.delta):
                    problems.append(f"entry {e.seq} ({dataset}): basic composition exceeds the cap then in force")
            else:
                f = Filter.of(cap.budget)
                d, counted = f.admit(spends, replace(spend(e), mode=EVENTS))
                if (
                    not d.admitted
                    or recorded.get("rule") not in RULES
                    or recorded.get("region") != d.region
                    or recorded.get("mode") != counted.mode
                ):
                    problems.append(
                        f"entry {e.seq} ({dataset}): recorded as admitted ({recorded.get('region')}, by its "
                        f"{recorded.get('mode')}) but the filter of the cap then in force gives "
                        f"{d.region or 'refused'} (by its {counted.mode})"
                    )
                problems += _approval(e, dataset, cap, f, spends, counted, charges)
            spends.append(spend(e))
            charges.append(e)
    return problems


def _approval(
    e: Entry, dataset: str, cap: Entry, f: Filter, spends: list[Spend], counted: Spend, charges: list[Entry]
) -> list[str]:
    """The steward's approval rule of ``cap`` applied again to charge ``e``: one it holds back needs a recorded approval."""
    rule = approval.ApprovalRule.of(json.loads(cap.detail))
    record = json.loads(e.detail).get("approval")
    if not rule.any:
        return [] if record is None else [f"entry {e.seq} ({dataset}): records an approval, but no rule was in force"]
    mine = [(c.ts, c.epsilon) for c in charges if c.requested_by == e.requested_by]
    seen = approval.look(rule, f, spends, counted, mine, datetime.fromisoformat(e.ts))
    given = None if record is None else approval.Approval.recorded(record)
    if seen.needed and (given is None or not given.covers(seen)):
        return [f"entry {e.seq} ({dataset}): {seen.words(dataset)}, and the charge records no approval that covers it"]
    return []
