"""A data steward's approval: when a charge must wait for one, and whether the one it got covers it.

With a dataset's cap the steward may set two thresholds (``ApprovalRule``, kept in the cap's ledger entry):

* ``approve_above`` (a share, 0 to 1): a charge whose share of what remains is larger waits. The
  share is said in the steward's own terms and the filter's: the larger of the charge's epsilon
  over the epsilon the cap has left by the charges' epsilons (the cap less their sum; none left:
  every charge waits), and its share of the room the admission filter leaves in the region it
  would be admitted in (``Filter.share``);
* ``approve_account`` (epsilon, hours): a charge that brings its requester's dp epsilon charged on
  the dataset in the last ``hours`` above ``epsilon`` waits, so one account cannot spend a cap
  in many releases each under the share.

The decision (``look``) is taken again inside the charge's locked transaction, where the history
cannot change under it (``Ledger.reserve``): an approval given on an earlier look covers the charge
only if the charge takes no larger a share and brings its account no further than the steward saw
(``Approval.covers``). What was decided is recorded in the charge's entry under the hash chain
(``Look.record``), and ``ledger verify`` recomputes it from the ledger alone (``privrelease.core.ledger.account.replay``).
Everything here is public: caps, charges, who asked and when.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction

from privrelease.core.privacy.accountant import Filter, Spend, exact

TOLERANCE = 1e-9  # an approval covers a recomputed share equal to the one shown, up to float rounding


@dataclass(frozen=True)
class ApprovalRule:
    """The steward's thresholds for one dataset (None: that one does not apply)."""

    share: float | None = None
    account_epsilon: float | None = None
    window_hours: float | None = None

    def __post_init__(self) -> None:
        if self.share is not None and not 0 <= self.share <= 1:
            raise ValueError(f"approve_above is a share of the remaining budget, from 0 to 1; got {self.share}")
        if (self.account_epsilon is None) != (self.window_hours is None):
            raise ValueError("an account's limit needs both its epsilon and its window in hours")
        if self.account_epsilon is not None and not (self.account_epsilon >= 0 and 0 < self.window_hours <= 24 * 366):
            raise ValueError(
                f"an account's limit is an epsilon >= 0 over a window of 0 to 8784 hours; got "
                f"{self.account_epsilon} over {self.window_hours}"
            )

    @property
    def any(self) -> bool:
        return self.share is not None or self.account_epsilon is not None

    @staticmethod
    def of(cap_detail: dict) -> ApprovalRule:
        account = cap_detail.get("approve_account") or {}
        return ApprovalRule(cap_detail.get("approve_above"), account.get("epsilon"), account.get("hours"))

    def as_detail(self) -> dict:
        return ({} if self.share is None else {"approve_above": float(self.share)}) | (
            {}
            if self.account_epsilon is None
            else {"approve_account": {"epsilon": float(self.account_epsilon), "hours": float(self.window_hours)}}
        )

    def words(self) -> str:
        said = [f"a release taking over {self.share:.0%} of what remains"] if self.share is not None else []
        if self.account_epsilon is not None:
            said.append(f"one bringing its requester past epsilon={self.account_epsilon:g} in {self.window_hours:g} hours")
        return " or ".join(said) + " waits for a steward"


@dataclass(frozen=True)
class Look:
    """A charge against its dataset's rule: the shares it takes and where it brings its requester."""

    rule: ApprovalRule
    epsilon: float  # the charge's
    epsilon_left: float  # the cap's epsilon less the charges' epsilons so far (0: none left)
    cap_epsilon: float
    filter_share: float  # of the admission filter's room in its region (inf: it would be refused)
    account_epsilon: float  # the requester's dp epsilon in the window, this charge included (0: no such rule)

    @property
    def epsilon_share(self) -> float:
        return 0.0 if self.epsilon == 0 else (self.epsilon / self.epsilon_left if self.epsilon_left > 0 else math.inf)

    @property
    def share(self) -> float:
        return max(self.epsilon_share, self.filter_share)

    @property
    def over_share(self) -> bool:
        return self.rule.share is not None and self.share > self.rule.share

    @property
    def over_account(self) -> bool:
        return self.rule.account_epsilon is not None and self.account_epsilon > self.rule.account_epsilon * (1 + TOLERANCE)

    @property
    def needed(self) -> bool:
        return self.over_share or self.over_account

    def words(self, dataset: str) -> str:
        """Why this charge waits for a steward, in the terms the steward set the rule in (public values)."""
        said = []
        if self.over_share:
            left = f"{self.epsilon_left:.4g} left" if self.epsilon_left > 0 else "none left"
            said.append(
                f"this release charges epsilon={self.epsilon:g} of the cap's epsilon={self.cap_epsilon:g} "
                f"({left} by the charges' epsilons: {_pct(self.epsilon_share)}) and takes "
                f"{_pct(self.filter_share)} of what the admission filter leaves; its data steward lets a "
                f"release of dataset {dataset!r} take at most {self.rule.share:.1%} without approval"
            )
        if self.over_account:
            said.append(
                f"it brings its requester's epsilon on dataset {dataset!r} in the last "
                f"{self.rule.window_hours:g} hours to {self.account_epsilon:.4g}, past the "
                f"{self.rule.account_epsilon:g} its data steward lets one account spend without approval"
            )
        return "; ".join(said)

    def record(self, approval: Approval | None) -> dict:
        """What the charge's ledger entry keeps of this decision (``detail["approval"]``)."""
        return {
            "rule": self.rule.as_detail(),
            "share": _finite(self.share),
            "account_epsilon": self.account_epsilon,
            "needed": self.needed,
        } | (
            {}
            if approval is None
            else {
                "approved_by": approval.by,
                "approved_at": approval.at,
                "approved_share": _finite(approval.share),
                "approved_account_epsilon": approval.account_epsilon,
            }
        )


@dataclass(frozen=True)
class Approval:
    """A steward's yes to a charge, given on a look at it: who, when, and what they were shown."""

    by: str
    at: str  # ISO time
    share: float
    account_epsilon: float

    @staticmethod
    def given(look: Look, by: str, at: datetime) -> Approval:
        return Approval(by, at.isoformat(timespec="seconds"), look.share, look.account_epsilon)

    def covers(self, look: Look) -> bool:
        """Whether this approval still covers ``look`` (taken again under the charge's lock)."""
        return look.share <= self.share * (1 + TOLERANCE) and look.account_epsilon <= self.account_epsilon * (1 + TOLERANCE)

    @staticmethod
    def recorded(record: dict) -> Approval | None:
        if "approved_by" not in record:
            return None
        share = record["approved_share"]
        return Approval(
            record["approved_by"], record["approved_at"], math.inf if share is None else share, record["approved_account_epsilon"]
        )


def look(
    rule: ApprovalRule, f: Filter, history: list[Spend], candidate: Spend, account: list[tuple[str, float]], now: datetime
) -> Look:
    """The charge ``candidate`` after ``history`` under the cap's filter ``f``; ``account``: the requester's
    earlier dp charges on the dataset as (ISO time, epsilon)."""
    charged = sum((exact(s.budget.epsilon) for s in history), Fraction(0))
    left = float(max(exact(f.cap.epsilon) - charged, 0))
    in_window = 0.0
    if rule.account_epsilon is not None:
        since = now - timedelta(hours=rule.window_hours)
        in_window = float(
            sum((exact(e) for ts, e in account if datetime.fromisoformat(ts) > since), Fraction(0))
            + exact(candidate.budget.epsilon)
        )
    return Look(rule, candidate.budget.epsilon, left, f.cap.epsilon, f.share(history, candidate), in_window)


def _pct(share: float) -> str:
    return "all of it" if math.isinf(share) else f"{share:.1%}"


def _finite(x: float) -> float | None:
    return None if math.isinf(x) else x
