"""The statistical privacy auditor (tests/support/auditor.py) on DPNE: neighbouring datasets built to stress
it, the real noise and thresholding code (``dpne.threshold``, ``privrelease.core.noise``) run many times with
fresh seeds, and an empirical lower bound on epsilon that must stay at or below the claimed one.

Finding 1 of the privacy review (the tail sampler's int64 overflow at rho_k = 0) lived in a corner
no test visited. The auditor visits the corners: eta at its bounds, rho_k = 0, the smallest and
largest noise, delta0 = 1 and its maximum, T = 1, one user. The old sampler is kept below as a
test-only variant (``broken_gaussian_tail``), and the auditor's bound on it is far above the claim.

``make audit`` reruns this file with PRIVRELEASE_AUDIT=1: the long sizes, every bound written to
$PRIVRELEASE_AUDIT_REPORT (results in docs/PRIVACY-AUDIT.md); in ``make test`` the short sizes keep
the whole file under a minute.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from privrelease.core import noise
from privrelease.core.mechanisms import dpne
from privrelease.core.mechanisms.dpne.counts import unit_weights
from privrelease.core.privacy import events
from tests.support.auditor import ALPHA, audit, record, runs
from tests.support.helpers import planned_run

# -- the broken sampler, kept as a test-only variant ---------------------------------------------------


def broken_gaussian_tail(rng, sigma, unit, threshold, size):
    """``noise.gaussian_tail`` before the fix: j * j overflows int64 when n0 is far below s (rho_k = 0
    or tiny), so zero-weight candidates get weights around 10^6 sigma."""
    s2 = noise.gaussian_variance_units(sigma, unit)
    n0 = math.floor(threshold / unit) + 1
    out = np.empty(size, dtype=np.int64)
    todo = np.arange(size)
    while todo.size:
        n = todo.size
        j = noise._geometric(rng, n0, s2, n)
        with np.errstate(over="ignore"):
            ok = noise.bernoulli_exp(rng, j * j, np.full(n, 2 * s2))
        out[todo[ok]] = n0 + j[ok]
        todo = todo[~ok]
    return out.astype(float) * unit


# -- one level of DPNE, one candidate per run ----------------------------------------------------------


def level_outputs(params: dpne.Params, k: int, rho: float, base: int, m: int, n: int, seed: int):
    """Outputs (noisy weight / sigma_k, nan when not released) of one level-k candidate over n runs
    each on D and D'. On D' one extra user holds the candidate among m distinct k-grams (weight
    w(m) grid units, w(1) the largest any user can add); on D the others give it ``base`` units. With
    base = 0 the candidate is a zero-weight member of V_k on D (k >= 2: simulated; k = 1: absent)."""
    acc = dpne.accounting(params)
    leaf, unit = events.each(dpne.plan(params).cost.event, dpne.LEVEL)[k - 1], acc.units[k - 1]  # the level's declared noise
    sigma = leaf.sigma
    w = int(unit_weights(m, unit)[m])
    rng = noise.generator(seed)

    def held(units: int) -> np.ndarray:
        noisy, _ = dpne.threshold(rng, leaf, unit, rho, np.full(n, units, np.int64), 0)
        return np.where(noisy > rho, noisy, np.nan) / sigma

    d_prime = held(base + w)
    if base:
        d = held(base)
    else:
        d = np.full(n, np.nan)
        if k > 1:  # a zero-weight candidate of V_k: one run's Binomial(1, p) draws, n of them at once
            _, tail = dpne.threshold(rng, leaf, unit, rho, np.empty(0, np.int64), n)
            d[: tail.size] = tail / sigma
            d = d[np.random.default_rng(seed).permutation(n)]  # runs in random order for the halves
    return d, d_prime


def _check(params: dpne.Params, k: int, rho: float, base: int, m: int, n: int, seed: int):
    d, d_prime = level_outputs(params, k, rho, base, m, n, seed)
    result = audit(d, d_prime, params.epsilon, params.delta)
    record(
        f"DPNE level {k}: {_describe(params)}, rho_k = {rho / dpne.accounting(params).sigmas[k - 1]:.3g} sigma_k, "
        f"{'held by others' if base else 'unique n-gram'}, extra user's m = {m}",
        result,
    )
    assert result.epsilon_lb <= params.epsilon, result
    return result


def _describe(params: dpne.Params) -> str:
    fields = ("epsilon", "delta", "T", "delta0", "eta", "split", "c")
    return ", ".join(
        f"{f}={getattr(params, f):.3g}" if isinstance(getattr(params, f), float) else f"{f}={getattr(params, f)}"
        for f in fields
        if getattr(params, f) is not None
    )


def _params(**kw) -> dpne.Params:
    base = dict(user_column="user", text_column="text", epsilon=4.0, delta=1e-6, T=3, delta0=5, eta=0.5)
    return dpne.Params(**(base | kw))


FINDING_1 = _params(publish_weights=True)  # the review's request: rho_3 = 0 at eta = 0.5


def test_auditor_catches_the_broken_tail_sampler(test_mode, monkeypatch):
    """Finding 1: on the old sampler a zero-weight n-gram's weight (~10^6 sigma) tells it apart from
    one a user holds. The auditor's bound is far above the claimed epsilon; after the fix it is not."""
    n = runs(20_000, 1_000_000)
    fixed = _check(FINDING_1, 3, 0.0, 0, 1, n, seed=1)
    monkeypatch.setattr(noise, "gaussian_tail", broken_gaussian_tail)
    d, d_prime = level_outputs(FINDING_1, 3, 0.0, 0, 1, n, seed=1)
    broken = audit(d, d_prime, FINDING_1.epsilon, FINDING_1.delta)
    record("DPNE level 3, the review's request (rho_3 = 0), OLD tail sampler (test-only variant)", broken)
    assert broken.epsilon_lb > FINDING_1.epsilon + 2 > fixed.epsilon_lb + 2, (broken, fixed)
    assert np.nanmax(d) > 1e5  # the weights the review saw


EXTREMES = [  # (params, level k, rho (None: the level's own), base units, m)
    pytest.param(_params(), 3, 0.0, 0, 1, id="eta=0.5,rho=0,unique-ngram"),
    pytest.param(_params(eta=1e-300), 2, None, 0, 1, id="eta-tiny,rho-largest"),
    pytest.param(_params(), 2, 1e-12, 0, 1, id="rho-tiny"),
    pytest.param(_params(epsilon=50, delta=0.5), 2, 0.0, 0, 1, id="smallest-sigma"),
    pytest.param(_params(epsilon=1e-3, delta=1e-12, T=50), 50, 0.0, 0, 1, id="largest-sigma,T=50"),
    pytest.param(_params(delta0=1), 2, 0.0, 0, 1, id="delta0=1"),
    pytest.param(_params(delta0=dpne.MAX_DELTA0), 2, 0.0, 0, dpne.MAX_DELTA0, id="delta0-max,user-at-cap"),
    pytest.param(_params(T=1), 1, None, 0, 1, id="T=1,one-user"),
    pytest.param(_params(T=1, epsilon=50, delta=0.5), 1, None, 0, 1, id="T=1,one-user,largest-budget"),
    pytest.param(_params(), 2, None, -1, 1, id="held-by-others,at-the-threshold"),
    pytest.param(_params(split="geometric", c=1e-3, T=3), 3, 0.0, 0, 1, id="geometric-c-small"),
]


@pytest.mark.parametrize(("params", "k", "rho", "base", "m"), EXTREMES)
def test_auditor_bound_stays_below_the_claim_at_the_extremes(test_mode, params, k, rho, base, m):
    acc = dpne.accounting(params)
    sigma, unit = acc.sigmas[k - 1], acc.units[k - 1]
    if rho is None:
        rho = acc.rho_1 if k == 1 else dpne.level_threshold(sigma, params.eta, 1, 10**6)
    if base < 0:  # others hold it at just about the threshold: a shift where it matters most
        base = max(1, round(rho / unit))
    _check(params, k, rho, base, m, runs(10_000, 1_000_000), seed=k)


@st.composite
def requests(draw):
    """A DPNE request from everything Params accepts (hypothesis shrinks toward the bounds), one of its
    levels, a threshold rho_k from its own eta, and the extra user's number of distinct k-grams."""
    kw = dict(
        epsilon=draw(st.floats(0, 50, exclude_min=True)),
        delta=draw(st.floats(0, 1, exclude_min=True, exclude_max=True)),
        T=draw(st.integers(1, 50)),
        delta0=draw(st.integers(1, dpne.MAX_DELTA0)),
        eta=draw(st.just(0.5) | st.floats(0, 0.5, exclude_min=True)),
    )
    if draw(st.booleans()):
        kw |= dict(split="geometric", c=draw(st.floats(0, 1, exclude_min=True, exclude_max=True)))
    try:
        params = _params(**kw)
        acc = dpne.accounting(params)  # what plan() refuses is never run
    except (ValidationError, ValueError):
        assume(False)
    k = draw(st.integers(1, params.T))
    ratio = draw(st.sampled_from([0.0, 1e-9, 0.01, 0.5, 1.0]))  # |S_k-1| / |V_k|; 0 -> the largest rho
    rho = acc.rho_1 if k == 1 else dpne.level_threshold(acc.sigmas[k - 1], params.eta, ratio or 1, 1 if ratio else 10**9)
    m = draw(st.sampled_from([1, params.caps[k - 1]]))
    return params, k, rho, m


@settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(requests())
def test_auditor_bound_stays_below_the_claim_over_the_request_space(test_mode, request_):
    params, k, rho, m = request_
    _check(params, k, rho, 0, m, runs(2_000, 100_000), seed=7)


# -- the whole mechanism, end to end --------------------------------------------------------------------


def _corpus(users: int, extra: str | None) -> pd.DataFrame:
    texts = ["alpha"] * users + ([extra] if extra else [])
    return pd.DataFrame({"user": range(len(texts)), "text": texts})


E2E = _params(epsilon=0.3, T=2, delta0=1, publish_weights=True)  # one word released; V_2 = {alpha alpha}, rho_2 = 0


def e2e_outputs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Real ``dpne.run`` on D (300 users posting "alpha") and D' (one more posting "alpha alpha"),
    n fresh seeds each: the noisy weight of "alpha alpha" in sigma_2 units, nan when not released."""

    def weight(frame: pd.DataFrame, s: int) -> float:
        table = planned_run(dpne, frame, E2E, noise.generator(s)).data
        hit = table.loc[table["ngram"] == "alpha alpha", "noisy_weight"]
        return float(hit.iloc[0]) / dpne.accounting(E2E).sigmas[1] if len(hit) else math.nan

    d, d_prime = _corpus(300, None), _corpus(300, "alpha alpha")
    return (np.array([weight(d, seed + i) for i in range(n)]), np.array([weight(d_prime, seed + n + i) for i in range(n)]))


def test_auditor_end_to_end_on_dpne(test_mode, monkeypatch):
    """The same audit through ``dpne.run`` itself (DuckDB counts, both levels, the simulation)."""
    n = runs(60, 3_000)  # 0.1 s a run (DuckDB): at make-test size the bounds are at 95% confidence, else 99.9%
    alpha = 0.05 if n < 1000 else ALPHA
    fixed = audit(*e2e_outputs(n, seed=100), E2E.epsilon, E2E.delta, alpha)
    record(f"DPNE end to end (dpne.run): {_describe(E2E)}, 300 users vs one more holding a unique bigram", fixed)
    assert fixed.epsilon_lb <= E2E.epsilon, fixed
    monkeypatch.setattr(noise, "gaussian_tail", broken_gaussian_tail)
    broken = audit(*e2e_outputs(min(n, 400), seed=100), E2E.epsilon, E2E.delta, alpha)
    record("DPNE end to end, OLD tail sampler (test-only variant)", broken)
    assert broken.epsilon_lb > E2E.epsilon, broken
