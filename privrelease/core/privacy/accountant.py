"""The admission filter: whether a cap can take a DP release, from the release's privacy event.

A release is a typed privacy event (``privrelease.core.privacy.events``); the filter walks its tree as the ledger
records it (``events.accounted``) and counts each leaf with its compositions (``parts``), by its class:
a Gaussian (noise ``sigma``, l2 ``sensitivity``; the discrete Gaussian has the same rho, a distributed
one is accounted as its sum's), a pure epsilon-DP leaf (a Laplace or discrete Laplace, a
permute-and-flip or exponential-mechanism draw: ``pure_epsilon()``), or a part known only by its
(epsilon, delta) (an ``EpsilonDelta``: DPNE's new-item event, a smooth-sensitivity count, the exact
sampler's slack, and every charge written before events were recorded). A charge (``Spend``) is its
(epsilon, delta), derived from its event, and that event; the ledger reads both from its entries
(old flat ones through ``privrelease.core.ledger.legacy``), so every admission can be replayed from the ledger alone.

Admission (docs/ACCOUNTING.md gives the argument and its sources) is a privacy *filter*, valid
when every request is chosen after seeing earlier releases. From the cap (epsilon_c, delta_c) it
fixes, before any release, a conversion share ``delta_conv`` = delta_c / 10 and one Rényi order
``alpha``. Each charge is counted by its events, or (its mode, fixed when it is admitted from its
own parameters: ``Filter.mode``) as one (epsilon, delta) part at its charged (epsilon, delta). A
history is admitted if it lies in one of two regions:

* the Rényi region: sum of (epsilon, delta)-only parts' deltas <= delta_c - delta_conv, and
  sum over parts of cost_alpha <= K = epsilon_c - (ln(1/delta_conv) + ln c_alpha) / (alpha - 1),
  where cost_alpha is alpha * rho for a Gaussian (rho = count * Delta^2 / (2 sigma^2), which the
  discrete Gaussian satisfies too), min(eps, alpha * rho) for a pure eps-DP part (rho = eps^2 / 2;
  eps^2 / 8 for the exponential mechanism, a bounded-range one) and eps for an (epsilon, delta) part
  (its delta above); c_alpha = (1 - 1/alpha)^(alpha - 1) / alpha is Canonne, Kamath & Steinke's
  conversion constant;
* the basic region, for histories with no part counted as a Gaussian: the charges' epsilons sum to at most
  epsilon_c and their deltas to at most delta_c - delta_conv, summed exactly (``Fraction``).

With delta_c = 0 only the basic region exists, with all of the cap. Floats are rounded towards
more spend: every cost is scaled up and K down by ``SLACK``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction

from privrelease.core.privacy import events
from privrelease.core.privacy.budget import Budget, gaussian_epsilon
from privrelease.core.privacy.events import EpsilonDelta, Gaussian, Leaf, exact

CONVERSION_SHARE = Fraction(1, 10)  # of the cap's delta, for the Rényi region's conversion
SLACK = 1e-9  # relative rounding towards more spend on every float figure
EVENTS, CHARGE = "events", "charge"  # a charge's mode: counted by its events, or by its (epsilon, delta)

Part = tuple[Leaf, int]  # a leaf of an event and the number of times it composes


def parts(event: events.Event) -> tuple[Part, ...]:
    """What the filter counts of a privacy event: each leaf as the ledger records it (``events.accounted``)
    with its compositions, in the tree's order."""
    return tuple(events.leaves(events.accounted(event)))


def part_cost(leaf: Leaf, count: int, alpha: float) -> float:
    """``count`` compositions of ``leaf`` in the Rényi region at order alpha, by its class."""
    if isinstance(leaf, EpsilonDelta):
        return count * leaf.epsilon
    if isinstance(leaf, Gaussian):
        return alpha * leaf.rho(count)
    return min(count * leaf.pure_epsilon(), alpha * leaf.rho(count))


# -- a release as the accountant sees it ------------------------------------------------------------


@dataclass(frozen=True)
class Spend:
    """One dp charge: its (epsilon, delta) as charged, and its event (None: recorded before events)."""

    ref: str  # the release id
    budget: Budget
    event: events.Event | None
    mode: str = EVENTS  # how the filter counts it: by its events, or as one (epsilon, delta) part (CHARGE)
    recorded: tuple[Part, ...] = field(init=False, repr=False, compare=False)  # its event's parts (none: before events)

    def __post_init__(self) -> None:
        object.__setattr__(self, "recorded", () if self.event is None else parts(self.event))

    @staticmethod
    def of(ref: str, event: events.Event, mode: str = EVENTS) -> Spend:
        """A charge of ``event``: its (epsilon, delta) derived from it, its event as the ledger records it (one
        known only by its (epsilon, delta), a bare ``EpsilonDelta``, has none: it is its charge)."""
        counted = None if isinstance(event, EpsilonDelta) else events.accounted(event)
        return Spend(ref, events.epsilon_delta(event), counted, mode)

    @property
    def parts(self) -> tuple[Part, ...]:
        """What the filter counts: its events, or one part known only by its (epsilon, delta) as charged."""
        if self.event is None or self.mode == CHARGE:
            return ((EpsilonDelta(self.budget.epsilon, self.budget.delta, part="charge"), 1),)
        return self.recorded

    @property
    def approx_delta(self) -> Fraction:
        """The delta of its (epsilon, delta)-only parts, exactly: what the filter's delta room counts."""
        return sum((exact(leaf.delta) * n for leaf, n in self.parts if isinstance(leaf, EpsilonDelta)), Fraction(0))

    @property
    def curve(self) -> tuple[Part, ...]:
        """Its events when recorded (the reported PLD always uses the mechanism's own curve)."""
        return self.recorded if self.event is not None else self.parts

    @property
    def gaussian(self) -> bool:
        return any(isinstance(leaf, Gaussian) for leaf, _ in self.parts)


# -- the filter ---------------------------------------------------------------------------------------


def log_c(alpha: float) -> float:
    """ln of Canonne-Kamath-Steinke's constant (1 - 1/alpha)^(alpha - 1) / alpha."""
    return (alpha - 1) * math.log1p(-1 / alpha) - math.log(alpha)


@dataclass(frozen=True)
class Filter:
    """The admission rule a cap fixes before any release (see the module docstring)."""

    cap: Budget
    alpha: float | None  # None: delta_c = 0, only the basic region
    k: float  # the Rényi region's budget K (rounded down)
    delta_conv: Fraction
    delta_room: Fraction  # what approx deltas (and basic deltas) may sum to: delta_c - delta_conv

    @staticmethod
    def of(cap: Budget) -> Filter:
        d = exact(cap.delta)
        if d == 0:
            return Filter(cap, None, 0.0, Fraction(0), Fraction(0))
        conv = d * CONVERSION_SHARE
        alpha = best_order(cap.epsilon, float(conv))
        return Filter(cap, alpha, renyi_budget(cap.epsilon, float(conv), alpha), conv, d - conv)

    def cost(self, spend: Spend) -> float:
        """A charge's cost in the Rényi region at this filter's order (rounded up)."""
        return sum(part_cost(leaf, n, self.alpha) for leaf, n in spend.parts) * (1 + SLACK) if self.alpha else math.inf

    def mode(self, candidate: Spend) -> str:
        """How a new charge is counted, fixed when it is admitted from its own parameters alone: by its
        events when that takes a smaller share of the Rényi budget than its epsilon takes of the cap's
        (a Gaussian release cheap in zCDP), else by its (epsilon, delta), which keeps the exact basic
        region open to the history (a release whose curve gains little, or with no Gaussian part)."""
        if candidate.event is None:
            return CHARGE
        if self.alpha is None or not candidate.gaussian:
            return EVENTS  # without a Gaussian, its events never cost more than its charge
        by_events = self.cost(candidate) / self.k if self.k > 0 else math.inf
        return EVENTS if by_events < candidate.budget.epsilon / self.cap.epsilon else CHARGE

    def admit(self, history: list[Spend] | Sums, candidate: Spend) -> tuple[Decision, Spend]:
        """The decision on ``candidate`` after ``history`` (or its ``sums``, read once for many candidates), and
        the candidate in the mode it is counted in."""
        counted = replace(candidate, mode=self.mode(candidate))
        before = history if isinstance(history, Sums) else self.sums(history)
        return self.decide(before.plus(self, counted)), counted

    def sums(self, history: list[Spend]) -> Sums:
        """A history's running totals, its charges added in order."""
        totals = Sums()
        for spend in history:
            totals = totals.plus(self, spend)
        return totals

    def check(self, history: list[Spend]) -> Decision:
        """Whether a history (the candidate last) lies in the filter's admissible set."""
        return self.decide(self.sums(history))

    def decide(self, totals: Sums) -> Decision:
        """Whether a history with these totals lies in the filter's admissible set."""
        used = totals.used if self.alpha else math.inf
        renyi = self.alpha is not None and totals.approx_delta <= self.delta_room and used <= self.k
        basic = (
            not totals.gaussian
            and totals.basic_epsilon <= exact(self.cap.epsilon)
            and totals.basic_delta <= (self.delta_room if self.alpha else exact(self.cap.delta))
        )
        return Decision(
            renyi or basic,
            "basic" if basic else "renyi" if renyi else None,
            used,
            totals.approx_delta,
            totals.basic_epsilon,
            totals.basic_delta,
        )

    def share(self, history: list[Spend], candidate: Spend) -> float:
        """How much of what remains under this filter ``candidate`` would take: the larger of its shares of
        the budgets of the region it would be admitted in (inf: it would be refused)."""
        before = self.check(history)
        after, _ = self.admit(history, candidate)
        if not after.admitted:
            return math.inf

        def part(used, room, added) -> float:
            left = float(room) - float(used)
            return 0.0 if float(added) <= 0 else (math.inf if left <= 0 else float(added) / left)

        if after.region == "basic":
            room = self.delta_room if self.alpha else exact(self.cap.delta)
            return max(
                part(before.basic_epsilon, exact(self.cap.epsilon), after.basic_epsilon - before.basic_epsilon),
                part(before.basic_delta, room, after.basic_delta - before.basic_delta),
            )
        return max(
            part(before.renyi_used, self.k, after.renyi_used - before.renyi_used),
            part(before.approx_delta, self.delta_room, after.approx_delta - before.approx_delta),
        )

    def spent_epsilon(self, history: list[Spend]) -> float | None:
        """The epsilon the filter's own bound certifies for a history at the cap's delta (None: empty)."""
        if not history:
            return None
        d = self.check(history)
        basic = float(d.basic_epsilon) if not any(s.gaussian for s in history) else math.inf
        if self.alpha is None:
            return basic
        renyi = d.renyi_used + (math.log(1 / float(self.delta_conv)) + log_c(self.alpha)) / (self.alpha - 1)
        return min(basic, renyi * (1 + SLACK))


@dataclass(frozen=True)
class Sums:
    """A history's totals as the filter adds them, charge after charge (floats in the history's order, so a
    candidate added to a history's sums gives the very figures of the history with it): its Rényi costs, its
    (epsilon, delta)-only parts' delta, its charges' epsilon and delta, exactly, and whether any is Gaussian."""

    used: float = 0.0
    approx_delta: Fraction = Fraction(0)
    basic_epsilon: Fraction = Fraction(0)
    basic_delta: Fraction = Fraction(0)
    gaussian: bool = False

    def plus(self, f: Filter, spend: Spend) -> Sums:
        return Sums(
            self.used + f.cost(spend) if f.alpha else math.inf,
            self.approx_delta + spend.approx_delta,
            self.basic_epsilon + exact(spend.budget.epsilon),
            self.basic_delta + exact(spend.budget.delta),
            self.gaussian or spend.gaussian,
        )


@dataclass(frozen=True)
class Decision:
    admitted: bool
    region: str | None  # "renyi", "basic" or None (refused)
    renyi_used: float  # sum of costs at the filter's order
    approx_delta: Fraction
    basic_epsilon: Fraction
    basic_delta: Fraction


def renyi_budget(epsilon: float, delta_conv: float, alpha: float) -> float:
    """K: what the costs at order alpha may sum to for (epsilon, delta_conv) (rounded down)."""
    return (epsilon - (math.log(1 / delta_conv) + log_c(alpha)) / (alpha - 1)) * (1 - SLACK)


def best_order(epsilon: float, delta_conv: float) -> float:
    """The order in [1.01, 10^4] (a fixed grid, from the cap alone) that lets the most zCDP rho in."""
    grid = [1 + 10 ** (i / 200 - 2) for i in range(0, 1201)]  # 1.01 .. 10001, 0.5% steps in alpha - 1
    return max(grid, key=lambda a: renyi_budget(epsilon, delta_conv, a) / a)


def fits_more(f: Filter, history: list[Spend], like: Spend, limit: int = 100_000) -> int:
    """How many more charges like ``like`` the filter admits after ``history`` (sums are additive)."""
    d = f.check(history)
    if not d.admitted and history:
        return 0
    best = 0
    if f.alpha is not None:
        cost = f.cost(like)
        dl = like.approx_delta
        n = limit if cost == 0 else math.floor(max(f.k - d.renyi_used, 0) / cost)
        if dl > 0:
            n = min(n, math.floor(max(f.delta_room - d.approx_delta, 0) / dl))
        best = n if d.approx_delta <= f.delta_room and d.renyi_used <= f.k else 0
    if not like.gaussian and not any(s.gaussian for s in history):
        room_d = f.delta_room if f.alpha is not None else exact(f.cap.delta)
        e, dl = exact(like.budget.epsilon), exact(like.budget.delta)
        n = limit if e == 0 else math.floor(max(exact(f.cap.epsilon) - d.basic_epsilon, 0) / e)
        if dl > 0:
            n = min(n, math.floor(max(room_d - d.basic_delta, 0) / dl))
        best = max(best, n)
    return min(best, limit)


# -- closed forms for all-Gaussian histories (reports and tests) -------------------------------------


def gdp_mu(gaussians: list[Part]) -> float | None:
    """mu of the Gaussian-DP composition (mu^2 = sum count * Delta^2 / sigma^2), None unless all are Gaussian."""
    if not gaussians or not all(isinstance(leaf, Gaussian) for leaf, _ in gaussians):
        return None
    return math.sqrt(sum(2 * leaf.rho(n) for leaf, n in gaussians))


def gdp_epsilon(history: list[Spend]) -> float | None:
    """The epsilon of a history of Gaussian-DP releases (each charge's events Gaussians and (epsilon,
    delta)-only parts, with a Gaussian; else None): all the Gaussians composed as one (GDP, exact) and
    converted at the charges' delta less their (epsilon, delta)-only parts' delta. A comparison of the
    Gaussian noise with basic composition, read from the events alone: the (epsilon, delta)-only parts'
    epsilon (the exact sampler's slack, below 10^-6 a charge) is not added to it."""
    kinds = [{Gaussian if isinstance(leaf, Gaussian) else type(leaf) for leaf, _ in s.recorded} for s in history]
    if not history or any(Gaussian not in k or k - {Gaussian, EpsilonDelta} for k in kinds):
        return None
    mu = gdp_mu([(leaf, n) for s in history for leaf, n in s.recorded if isinstance(leaf, Gaussian)])
    left = sum((exact(s.budget.delta) for s in history), Fraction(0)) - sum(
        (exact(leaf.delta) * n for s in history for leaf, n in s.recorded if isinstance(leaf, EpsilonDelta)), Fraction(0)
    )
    return gaussian_epsilon(1 / mu, float(left)) if left > 0 else None
