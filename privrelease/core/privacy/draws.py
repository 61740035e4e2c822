"""Noise drawn from the leaves a plan declares: the one way a mechanism turns its privacy event into draws.

A DP mechanism's ``run`` is handed the plan that was charged, takes each leaf it draws with from that
plan's event (``events.find``: a leaf it does not declare is refused, never built) and hands it here; each function calls the one exact sampler of ``privrelease.core.noise`` that draws that leaf's
law, with the leaf's own figures. So what is drawn and what is declared (and charged) cannot drift:
there is no second copy of a sigma, a scale or an epsilon. A std that is data (a smooth-sensitivity
count's) is declared as such, with its bounds (``SmoothGaussian``), and drawn only inside them. ``tests/privacy/test_draws.py`` records every call
during each DP mechanism's run and checks the leaves against the plan's, their number against its
compositions, and what each function draws against the leaf's law; ``tests/spam/test_draws_spam.py`` does
the same for the spam users' shares (``shares``) in a ``dp:`` training's rounds.
"""

from __future__ import annotations

import numpy as np

from privrelease.core import noise
from privrelease.core.noise.exponential import exponentials
from privrelease.core.privacy.events import (
    DiscreteGaussian,
    DiscreteLaplace,
    DistributedDiscreteGaussian,
    Exponential,
    PermuteAndFlip,
    SmoothGaussian,
)


def values(rng: np.random.Generator, leaf: DiscreteGaussian | DiscreteLaplace, units: np.ndarray, unit: float) -> np.ndarray:
    """``unit * (units + Z)``: integer true values on the public grid ``unit`` plus one draw of the
    leaf's noise per value: N_Z of std at least ``leaf.sigma`` (``noise.gaussian``), or Lap_Z(t) with
    t = ``leaf.scale`` grid steps (``noise.laplace``)."""
    if isinstance(leaf, DiscreteGaussian):
        return noise.gaussian(rng, leaf.sigma, units, unit)
    if isinstance(leaf, DiscreteLaplace):
        return noise.laplace(rng, leaf.scale * unit, units, unit)
    raise TypeError(f"no exact sampler draws a {type(leaf).__name__} on a grid")


def tail(rng: np.random.Generator, leaf: DiscreteGaussian, unit: float, threshold: float, size: int) -> np.ndarray:
    """``size`` draws of the leaf's noise (as ``values`` draws it on ``unit``) conditioned on exceeding ``threshold``."""
    return noise.gaussian_tail(rng, leaf.sigma, unit, threshold, size)


def tail_probability(leaf: DiscreteGaussian, unit: float, threshold: float) -> float:
    """P[the leaf's noise on ``unit`` exceeds ``threshold``] (``noise.tail_probability``)."""
    return noise.tail_probability(leaf.sigma, unit, threshold)


def smooth(rng: np.random.Generator, leaf: SmoothGaussian, std: float, units: int) -> float:
    """``leaf.unit * (units + Z)``: one integer true value on the leaf's public grid plus Gaussian noise of the
    data-dependent ``std`` (``noise.exact_gaussian``), which must lie in the bounds the leaf declares."""
    if not leaf.low <= std <= leaf.high:
        raise ValueError(f"a std of {std!r} is outside the [{leaf.low!r}, {leaf.high!r}] its leaf declares")
    return noise.exact_gaussian(rng, std, units, leaf.unit)


def select(rng: np.random.Generator, leaf: PermuteAndFlip, quality: np.ndarray, sensitivity: int) -> int:
    """One permute-and-flip draw at the leaf's epsilon over integer qualities of ``sensitivity``."""
    return noise.permute_and_flip(rng, quality, noise.rate(leaf.epsilon, sensitivity))


def shares(rng: np.random.Generator, leaf: DistributedDiscreteGaussian, size: int) -> list[int]:
    """One user's share of the leaf's noise: ``size`` exact N_Z(0, ``leaf.share_variance``), as Python
    integers (``noise.integer_gaussian``; the variance passes the vectorized sampler's int64 range)."""
    return noise.integer_gaussian(rng, leaf.share_variance, size)


def exponential(rng: np.random.Generator, leaf: Exponential, candidates: list[tuple], sensitivity) -> list[tuple[int, int]]:
    """Per key, one exponential-mechanism draw at the leaf's epsilon over its candidates ``(weights, a, b,
    target)``, scored minus the distance from target to [a, b] with that score's ``sensitivity`` (rate
    epsilon / (2 Delta), ``noise.rate``; ``noise.exponential``), then a uniform one of the chosen
    candidate's weight: (candidate, offset) per key."""
    rate = noise.rate(leaf.epsilon, sensitivity)
    if not candidates:
        return []
    ks = exponentials(rng, candidates, rate)
    offsets = noise.below(rng, np.array([c[0][k] for c, k in zip(candidates, ks)], dtype=np.int64))
    return [(int(k), int(o)) for k, o in zip(ks, offsets)]
