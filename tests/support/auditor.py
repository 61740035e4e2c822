"""A statistical privacy auditor: empirical lower bounds on epsilon from distinguishing tests.

The approach of DP auditing (Ding et al., "Detecting Violations of Differential Privacy"; Bichsel
et al., "DP-Sniper"; Lokna et al., "Group and Attack: Auditing Differential Privacy" (Delta Siege)):
run the real mechanism many times on neighbouring datasets D and D', search for an output event E
whose frequencies differ most, and turn the frequencies into a lower bound on epsilon that holds
with a stated confidence. An (epsilon, delta)-DP mechanism has P[M(D) in E] <= e^eps P[M(D') in E]
+ delta for every E, both ways round, so

    eps >= ln((P[M(D) in E] - delta) / P[M(D') in E]).

Each run's output is reduced to one float (``nan`` when the watched item is not released); events
are half-open intervals of that float and "not released". The event is *searched* on one half of the
runs and its frequencies *estimated* on the other (held out), so the search needs no multiple-testing
correction: with Clopper-Pearson bounds at level alpha/2 each, the reported bound is below the true
epsilon of that event with probability at least 1 - alpha. A mechanism whose auditor bound exceeds
its claimed epsilon is therefore not (epsilon, delta)-DP, up to that false-alarm rate.

Pure test support: numpy and scipy, no pytest. The harnesses that feed it real mechanism outputs
live in tests/audits/; ``make audit`` runs them with more runs (PRIVRELEASE_AUDIT=1).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

ALPHA = 1e-3  # the reported bound exceeds the truth with probability at most this (per audit)
AUDIT_ENV = "PRIVRELEASE_AUDIT"  # 1: the long sizes (make audit)
REPORT_ENV = "PRIVRELEASE_AUDIT_REPORT"  # a file each audit's result row is appended to


def runs(short: int, long: int) -> int:
    """Runs per dataset: ``short`` in ``make test``, ``long`` with PRIVRELEASE_AUDIT=1 (``make audit``)."""
    return long if os.environ.get(AUDIT_ENV) == "1" else short


def record(name: str, result: Audit) -> None:
    """Append the result as a markdown table row to $PRIVRELEASE_AUDIT_REPORT, when set."""
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a") as f:
            f.write(result.row(name) + "\n")


def clopper_pearson(hits: int, n: int, alpha: float) -> tuple[float, float]:
    """Exact two-sided (1 - alpha) interval for a binomial proportion (each side alpha/2)."""
    low = 0.0 if hits == 0 else float(beta.ppf(alpha / 2, hits, n - hits + 1))
    high = 1.0 if hits == n else float(beta.ppf(1 - alpha / 2, hits + 1, n - hits))
    return low, high


@dataclass(frozen=True)
class Event:
    """``not released`` (nan) when ``missing``, else a value in (low, high]."""

    low: float
    high: float
    missing: bool = False

    def hits(self, x: np.ndarray) -> np.ndarray:
        if self.missing:
            return np.isnan(x)
        return (x > self.low) & (x <= self.high)

    def __str__(self) -> str:
        return "not released" if self.missing else f"value in ({self.low:.4g}, {self.high:.4g}]"


@dataclass(frozen=True)
class Audit:
    claimed_epsilon: float
    delta: float
    epsilon_lb: float  # -inf when no event separates the two
    event: str
    direction: str  # "D over D'" or "D' over D"
    p_high: float  # the more likely side's lower bound (held-out half)
    p_low: float  # the other side's upper bound
    runs: int  # per dataset, search and held-out halves together
    confidence: float

    def row(self, name: str) -> str:
        lb = "−∞" if self.epsilon_lb == -math.inf else f"{self.epsilon_lb:.3f}"
        return (
            f"| {name} | {self.claimed_epsilon:g} | {self.delta:.3g} | {lb} | {self.event} ({self.direction}) "
            f"| {self.runs:,} | {self.confidence:.3%} |"
        )


def events(a: np.ndarray, b: np.ndarray, grid: int = 48) -> list[Event]:
    """Candidate events: not released, released, and intervals between quantiles of the pooled
    released values (each one-sided tail too), so the search adapts to the outputs' scale."""
    pooled = np.concatenate([a[~np.isnan(a)], b[~np.isnan(b)]])
    out = [Event(0, 0, missing=True), Event(-math.inf, math.inf)]
    if pooled.size:
        cuts = np.unique(np.quantile(pooled, np.linspace(0, 1, grid + 1)))
        cuts = np.concatenate([[-math.inf], cuts, [math.inf]])
        out += [Event(float(lo), float(hi)) for i, lo in enumerate(cuts) for hi in cuts[i + 1 :]]
    return out


def _bound(hits_big: int, hits_small: int, n_big: int, n_small: int, delta: float, alpha: float):
    high_low, _ = clopper_pearson(hits_big, n_big, alpha)
    _, small_high = clopper_pearson(hits_small, n_small, alpha)
    if high_low - delta <= 0:
        return -math.inf, high_low, small_high
    return math.log((high_low - delta) / small_high), high_low, small_high


def _point(hits_big: int, hits_small: int, n_big: int, n_small: int, delta: float) -> float:
    """A search score: the bound at a loose level (counts pushed half a hit toward each other)."""
    p, q = (hits_big + 0.5) / (n_big + 1), (hits_small + 0.5) / (n_small + 1)
    return math.log(max(p - delta, 1e-300) / q)


def _count(ev: Event, released: np.ndarray, n: int) -> int:
    """Hits of ``ev`` among n runs whose released values are ``released`` (sorted), by bisection."""
    if ev.missing:
        return n - released.size
    return int(np.searchsorted(released, ev.high, "right") - np.searchsorted(released, ev.low, "right"))


def audit(d: np.ndarray, d_prime: np.ndarray, epsilon: float, delta: float, alpha: float = ALPHA) -> Audit:
    """The empirical lower bound on epsilon from outputs on D and D' (one float per run, nan = none):
    the best event on the first half of the runs, its frequencies on the second half."""
    d, d_prime = np.asarray(d, dtype=float), np.asarray(d_prime, dtype=float)
    hd, hp = len(d) // 2, len(d_prime) // 2
    search_d, hold_d = d[:hd], d[hd:]
    search_p, hold_p = d_prime[:hp], d_prime[hp:]
    best, best_score, best_dir = None, -math.inf, ""
    sd, sp = np.sort(search_d[~np.isnan(search_d)]), np.sort(search_p[~np.isnan(search_p)])
    for ev in events(search_d, search_p):
        x, y = _count(ev, sd, hd), _count(ev, sp, hp)
        for score, direction in ((_point(x, y, hd, hp, delta), "D over D'"), (_point(y, x, hp, hd, delta), "D' over D")):
            if score > best_score:
                best, best_score, best_dir = ev, score, direction
    assert best is not None
    x, y = int(best.hits(hold_d).sum()), int(best.hits(hold_p).sum())
    if best_dir == "D over D'":
        lb, p_high, p_low = _bound(x, y, len(hold_d), len(hold_p), delta, alpha)
    else:
        lb, p_high, p_low = _bound(y, x, len(hold_p), len(hold_d), delta, alpha)
    return Audit(epsilon, delta, lb, str(best), best_dir, p_high, p_low, len(d), 1 - alpha)
