"""The tight reported spend: a history's privacy-loss distribution (PLD) by Google's dp-accounting.

Every event becomes its PLD (``dp_accounting.pld.privacy_loss_distribution``) from its leaf's
dp-accounting event (``to_dp_event``, ``privrelease.core.privacy.events``): the Gaussians together as the one
Gaussian they compose to, a Laplace mechanism's own, a discrete Laplace's; a leaf dp-accounting
has no event for as the worst pair with its guarantee: an eps-DP selection's as the worst eps-DP
pair (``from_privacy_parameters(eps, 0)``), and an approx part's as the worst (eps, delta) pair. Equal
events are grouped and self-composed, the groups composed, and epsilon read at the dataset's delta.
All PLDs are pessimistic estimates on a grid in the privacy loss (``DISCRETIZATION`` = 1e-4, coarser
in proportion for histories beyond a basic epsilon of 50: ``discretization``), so the epsilon
reported is never below the true one (up to dp-accounting's own tail truncation).

This figure is *reported*, never used to admit: a filter that admits by composing PLDs is not valid
when requests adapt to earlier outputs (docs/ACCOUNTING.md). A result is cached by the events'
multiset, the delta and the discretization, in a JSON file beside the ledger, so totals stay quick.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections import Counter
from dataclasses import replace
from pathlib import Path

from privrelease.core.privacy.accountant import Part
from privrelease.core.privacy.events import EpsilonDelta, Gaussian, NoDpEvent, dump

DISCRETIZATION = 1e-4  # value_discretization_interval of a PLD, for histories of up to 50 in basic epsilon


def discretization(basic_epsilon: float) -> float:
    """The interval for a history whose charges sum to ``basic_epsilon``: 1e-4, coarser in proportion
    beyond a basic epsilon of 50 (the loss's range grows with it, and so would the time)."""
    return DISCRETIZATION * max(1.0, basic_epsilon / 50)


CACHE_NAME = "pld-cache.json"
_MAX_CACHED = 512


def _pld(leaf, count: int, d: float):
    """The PLD of ``count`` compositions of ``leaf``, from its dp-accounting event where there is one."""
    from dp_accounting import dp_event  # seconds to import: only this report needs it
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pl

    try:
        dp = leaf.to_dp_event()
    except NoDpEvent:  # a selection, or a part known only by (eps, delta): the worst pair with that guarantee
        dp = None
    if isinstance(dp, dp_event.GaussianDpEvent):
        one = pl.from_gaussian_mechanism(dp.noise_multiplier, value_discretization_interval=d)
    elif isinstance(dp, dp_event.LaplaceDpEvent):
        one = pl.from_laplace_mechanism(dp.noise_multiplier, value_discretization_interval=d)
    elif isinstance(dp, dp_event.DiscreteLaplaceDpEvent):
        one = pl.from_discrete_laplace_mechanism(dp.noise_parameter, sensitivity=dp.sensitivity, value_discretization_interval=d)
    else:
        eps, delta = (leaf.epsilon, leaf.delta) if isinstance(leaf, EpsilonDelta) else (leaf.pure_epsilon(), 0.0)
        one = pl.from_privacy_parameters(common.DifferentialPrivacyParameters(eps, delta), value_discretization_interval=d)
    return one.self_compose(count) if count > 1 else one


def groups(parts: list[Part]) -> list[Part]:
    """Equal leaves (``part`` ignored) merged, with their total count; all Gaussians merged into one of
    sensitivity 1 and 1/sigma^2 = sum count Delta^2 / sigma^2, which is exact (their composition is that
    one Gaussian: Dong, Roth & Su's GDP composition)."""
    total: Counter = Counter()
    gaussians = [(leaf, n) for leaf, n in parts if isinstance(leaf, Gaussian)]
    if gaussians:
        mu2 = sum(n * (leaf.sensitivity / leaf.sigma) ** 2 for leaf, n in gaussians)
        parts = [(leaf, n) for leaf, n in parts if not isinstance(leaf, Gaussian)] + [(Gaussian(1 / math.sqrt(mu2), 1.0), 1)]
    for leaf, n in parts:
        total[replace(leaf, part="")] += n
    return sorted(total.items(), key=lambda g: json.dumps(dump(g[0]), sort_keys=True))


def epsilon(parts: list[Part], delta: float, interval: float = DISCRETIZATION) -> float:
    """The PLD epsilon of all parts composed, at ``delta`` (inf when none fits), on a grid of ``interval``."""
    if not parts:
        return 0.0
    composed = None
    for leaf, count in groups(parts):
        one = _pld(leaf, count, interval)
        composed = one if composed is None else composed.compose(one)
    eps = composed.get_epsilon_for_delta(delta)
    return float(eps) if math.isfinite(eps) else math.inf


def cached_epsilon(parts: list[Part], delta: float, cache_dir: Path | None, interval: float = DISCRETIZATION) -> float:
    """``epsilon``, read from and written to the cache file in ``cache_dir`` when given."""
    if cache_dir is None:
        return epsilon(parts, delta, interval)
    key = hashlib.sha256(
        json.dumps([[dump(leaf), n] for leaf, n in groups(parts)] + [delta, interval], sort_keys=True).encode()
    ).hexdigest()
    path = cache_dir / CACHE_NAME
    try:
        cache = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        return float(cache[key])
    value = epsilon(parts, delta, interval)
    cache = dict(list(cache.items())[-(_MAX_CACHED - 1) :]) | {key: value}
    try:
        tmp = path.with_suffix(".tmp")
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:  # the home's owner's only
            out.write(json.dumps(cache))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home still gets its figures, only slower
    return value
