"""Differential privacy on what the spam server decrypts: the distributed discrete Gaussian.

With ``dp: {epsilon, delta}`` in the spec, every user bounds each message's contribution in
plaintext and adds integer noise to its gradient before masking, so the round sum the server
decrypts is the true sum plus the honest users' noise (Kairouz, Liu & Steinke, "The Distributed
Discrete Gaussian Mechanism for Federated Learning with Secure Aggregation", ICML 2021).

Neighbours: one message replaced by another (each user's message count is public: it is announced).
Bounds, all public (integer units of the decrypted slots, 4·C_w·g with C_w = 2^48):

* each message keeps at most ``max_features`` features (a public, seeded choice of which), so
  ‖x_i‖₂ ≤ √F;
* the server projects w onto the l2 ball of radius R after each step, so |C_w·wᵀx_i| ≤ C_w·R·√F
  (+ F/2 for rounding w to the grid) and |t_i| = |2y_i·C_w − C_w·wᵀx_i| ≤ T = 2·C_w + C_w·R·√F + F/2;
* replacing a message moves the round sum by at most Δ₂ = 2·√F·T in l2 (Δ₁ = 2·F·T in l1).

Noise: the run's (epsilon, delta) fixes, through Gaussian DP (Dong, Roth & Su; Balle & Wang's exact
curve: ``privrelease.core.privacy.budget.gaussian_sigma``), the total std σ with which ``rounds`` compositions of
sensitivity Δ₂ meet it: σ = Δ₂·√rounds·gaussian_sigma(ε, δ). Up to ``colluders`` users may collude
with the server and add nothing, and a round may complete with only the spec's ``threshold`` t of
the users (the others left, ``dropout``), so each user adds N_Z(0, s²) per coordinate with
s² = ⌈σ² / (t − colluders)⌉ (``Noise.leaf``, drawn by ``privrelease.core.privacy.draws.shares``), and the honest users'
noise alone has variance at least σ². By KLS Theorem 1 the sum Z of h such draws satisfies
D_α(Z ‖ Z + Δ) ≤ α·ε̃²/2 with ε̃² = Δ₂²/(h·s²) + τ·d/2, τ = 10·Σ_{k<h} exp(−2π²s²·k/(k+1));
with s² ≥ 2^40 (required) τ < 10·h·exp(−π²·2^40), below any float, so the run is exactly a
Gaussian mechanism of std √(h·s²) ≥ σ per round in the accountant's terms (``events``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from pydantic import Field

from privrelease.core.errors import ParameterError
from privrelease.core.params import StrictParams
from privrelease.core.privacy import events
from privrelease.core.privacy.adjacency import ReplaceMessage
from privrelease.core.privacy.budget import gaussian_sigma
from privrelease.core.spam.aggregation import W_BITS
from privrelease.core.spam.features import _splitmix

ADJACENCY = ReplaceMessage()
MIN_SHARE_VARIANCE = 2**40  # keeps KLS's τ term below any float (module docstring)
TAIL_SIGMAS_BITS = 7  # slot room for |noise| < 2^7·s per coordinate: P[beyond] < 2·exp(−2^13)


class DPParams(StrictParams):
    """``dp:`` of a spam spec: the run's (epsilon, delta) and the public bounds that make it hold."""

    epsilon: float = Field(gt=0, le=50, description="of the whole run (all rounds compose)")
    delta: float = Field(gt=0, lt=1e-2, description="of the whole run")
    colluders: int = Field(1, ge=0, description="users that may collude with the server and add no noise")
    max_features: int = Field(400, ge=1, le=1_000_000, description="features kept per message (a public seeded choice)")
    radius: float = Field(0.5, gt=0, le=1e4, description="l2 ball the server projects the model onto each round")


@dataclass(frozen=True)
class Noise:
    """The calibrated noise of a run: public, known before any mail is read."""

    params: DPParams
    users: int
    rounds: int
    share_variance: int  # s²: each user's per-coordinate N_Z(0, s²), integer slot units
    threshold: int | None = None  # least users a round completes with (None: every user)

    @staticmethod
    def of(params: DPParams, users: int, rounds: int, threshold: int | None, leaf: events.DistributedDiscreteGaussian) -> Noise:
        """The noise whose leaf a charged plan declares, for the run that draws it (no second calibration)."""
        found = Noise(params, users, rounds, leaf.share_variance, threshold)
        if found.leaf != leaf:
            raise ParameterError("the plan's noise is not this run's: its users, threshold or bounds differ")
        return found

    @property
    def honest(self) -> int:
        """Users that surely add noise to a round's sum: as few as ``threshold`` users may take part."""
        return (self.threshold or self.users) - self.params.colluders

    @property
    def term_bound(self) -> int:
        """T: the largest |t_i| = |2y_i·C_w − C_w·wᵀx_i| a bounded message can have."""
        f = self.params.max_features
        root = Fraction(math.sqrt(f)) * Fraction(1 + 1e-12)  # ≥ √F: sqrt is correctly rounded
        return (2 << W_BITS) + math.ceil(Fraction(self.params.radius) * root * (1 << W_BITS)) + -(-f // 2)

    @property
    def l2(self) -> float:
        return 2 * math.sqrt(self.params.max_features) * self.term_bound * (1 + 1e-12)

    @property
    def l1(self) -> int:
        return 2 * self.params.max_features * self.term_bound

    @property
    def leaf(self) -> events.DistributedDiscreteGaussian:
        """What a round's noise is: each honest user's N_Z(0, s²) per coordinate, summed (the plan's leaf)."""
        return events.DistributedDiscreteGaussian(
            self.share_variance,
            self.honest,
            self.l2,
            part=f"round sums, distributed discrete Gaussian (at least {self.honest} of {self.users} users add noise)",
        )

    @property
    def sigma(self) -> float:
        """The std of the honest users' summed noise per coordinate (at least the calibrated σ)."""
        return self.leaf.sigma

    def share(self, seed: int) -> dict:
        """What each user needs to add its share (``protocol.User``'s ``noise``): the leaf it draws with."""
        return {"leaf": self.leaf, "max_features": self.params.max_features, "seed": seed}

    def tau(self) -> float:
        """KLS's τ for the honest users' sum (0.0 in floating point for every admitted share variance)."""
        return 10 * sum(math.exp(-2 * math.pi**2 * self.share_variance * k / (k + 1)) for k in range(1, min(self.honest, 50)))

    def event(self) -> events.Event:
        """The run's privacy event: ``rounds`` distributed discrete Gaussians (``leaf``), each accounted as the
        Gaussian of std sqrt(h s^2) and l2 sensitivity Delta_2."""
        return events.times(self.leaf, self.rounds)

    def public(self) -> dict:
        return {
            "mechanism": "distributed discrete Gaussian (Kairouz, Liu & Steinke 2021)",
            "adjacency": ADJACENCY.sentence,
            "epsilon": self.params.epsilon,
            "delta": self.params.delta,
            "users": self.users,
            "threshold": self.threshold or self.users,
            "colluders": self.params.colluders,
            "rounds": self.rounds,
            "share_variance": str(self.share_variance),
            "sigma": self.sigma,
            "l2_sensitivity": self.l2,
            "max_features": self.params.max_features,
            "radius": self.params.radius,
            "sigma_of_g": self.sigma / 2.0 ** (W_BITS + 2),
        }


def calibrate(params: DPParams, users: int, rounds: int, threshold: int | None = None) -> Noise:
    """The share variance s² for rounds of at least ``threshold`` (default: all) of ``users`` users of
    which ``colluders`` add nothing, ``rounds`` rounds."""
    if threshold is not None and params.colluders >= threshold:
        raise ParameterError(
            f"dp.colluders is {params.colluders}, but a round may complete with only the threshold of "
            f"{threshold} users: at least one of them must add noise; lower colluders or raise threshold."
        )
    if params.colluders >= users:
        raise ParameterError(
            f"dp.colluders is {params.colluders}, but the run has {users} users: at least one user "
            "must add noise; lower colluders or add users."
        )
    probe = Noise(params, users, rounds, MIN_SHARE_VARIANCE, threshold)
    sigma = Fraction(probe.l2) * Fraction(math.sqrt(rounds)) * Fraction(gaussian_sigma(params.epsilon, params.delta))
    share = max(MIN_SHARE_VARIANCE, math.ceil(sigma * sigma * Fraction(1 + 1e-9) / probe.honest))
    return Noise(params, users, rounds, share, threshold)


def noise_bits(share_variance: int) -> int:
    """Slot room a user's noise share needs: |N_Z(0, s²)| < 2^noise_bits = 2^7·(⌊s⌋ + 1) rounded up to a power of 2."""
    return (math.isqrt(share_variance) + 1).bit_length() + TAIL_SIGMAS_BITS


def cap(idx: np.ndarray, max_features: int, seed: int) -> np.ndarray:
    """At most ``max_features`` of a message's features: those with the smallest public seeded hash."""
    if idx.size <= max_features:
        return idx
    rank = _splitmix(idx.astype(np.uint64) ^ (np.uint64(seed) << np.uint64(40)) ^ np.uint64(0x5EED))
    return np.sort(idx[np.argsort(rank, kind="stable")[:max_features]])


def project(w: np.ndarray, radius: float) -> np.ndarray:
    """w scaled into the l2 ball of ``radius`` (the server's step after each update)."""
    norm = float(np.linalg.norm(w))
    return w if norm <= radius else w * (radius / norm) * (1 - 1e-12)
