"""An aggregate release's noise, from its public parameters alone: the vectors it noises, their
sensitivities, the budget split, each vector's noise and grid, the key-selection threshold and
the privacy event the plan charges.

Vectors. Each is one value per key, noised once: the counts (what ``count`` publishes, the
denominator of every mean, and the statistic keys are selected on), one per ``count_distinct``,
one per ``sum`` (the clipped values), one per ``mean`` (the values clipped and centred on the
bounds' midpoint) and one per ``quantile`` measure (a histogram of B public bins per key, so every
level q is read from the same noisy counts). A sum of the same column and bounds as a mean has no
vector: it is the mean's centred sum C plus the midpoint m times the count N, post-processing of
vectors the mean noises anyway. Alone it would be no better (with a = (U - L)/2 and b = |m|, C + m N
at the best split of a budget has the variance of a sum vector of sensitivity a + b at all of it),
but beside the mean it costs nothing, and the budget a sum vector took goes to the other vectors.

Sensitivities. Under ``user:COLUMN`` (add or remove one user) the contribution bounding keeps at
most G = ``max_groups`` keys and R = ``max_rows`` rows per key of each user, so a cell moves by at most
R c, where c bounds one row's part of the cell (1 for counts, histograms and distinct counts, max(|L|,
|U|) for sums, (U - L)/2 centred): l2 <= sqrt(G) R c, l1 <= G R c. Under the record unit (replace one
record, N public) a record leaves one key and joins one: l2 <= max(sqrt(2) c, r), l1 <= max(2 c, r),
r the most a cell moves when both are the same key (U - L for sums, centred sums; counts do not move).

Split. A measure's ``share`` (default 1) is its part of the budget: a count's pays for the counts, a
distinct count's, a sum's and a quantile's for their own vectors, a mean's for its centred sum, using
the count's counts, or, with no count asked for, half for its centred sum and half toward the counts
(so the parts add up to the shares: every measure an equal part by default, like a Tumult Analytics
session's budget divided evenly between one query per measure). Counts no measure reads (key selection
alone) weigh 1.
A sum read from a mean's vectors takes no part.

Budget. Gaussian noise: the vectors compose as Gaussian DP (mu^2 = sum (Delta_i/sigma_i)^2); an
epsilon is met at delta less key selection's share through ``noise.continuous_budget`` (the exact
sampler's slack over the cells a neighbour changes), mu^2 split by the vectors' weights; a rho is
split as is (sigma_i = Delta_i / sqrt(2 rho_i)) and charged at the epsilon its Gaussian DP curve
gives at delta. Laplace noise: pure epsilon split by weights (a rho as epsilon_i = sqrt(2 rho_i)).

Quantiles. A quantile measure's histogram (``interval_share`` of its weight) gives each level's 95%
interval; each level's estimate is then one exponential-mechanism draw per key over the answer grid's
steps inside that interval (the rest of the weight, split equally between the levels). The score of a
step is minus the distance from q n to the ranks its values span, of sensitivity Delta = max(q, 1 - q) R
under the user unit (adding or removing a user's R rows moves every rank by at most R and q n by q R) and
1 under replace-one-record; a draw at epsilon_c is epsilon_c-DP and epsilon_c-bounded-range, so
epsilon_c^2 / 8 zCDP (the ledger's filter composes it so), and a neighbour touches at most ``groups``
keys, so each level is the ``Exponential`` leaf composed that many times. Its epsilon_c: from a rho
share, sqrt(8 rho_c / groups); from an epsilon, its share of epsilon counted linearly (the Gaussian
vectors are calibrated at the rest), and the charge adds groups x epsilon_c per level.

Keys. With every group_by column's domain declared at registration, the keys are their product,
public, all released. Otherwise the present keys are selected by their noisy count: a key held by
one user alone (at most R rows, and a user holds at most G such keys; one key under replace) passes
the threshold with probability at most delta_select / G, so the release is (epsilon, delta_noise +
delta_select)-DP (the DP partition selection of Gaussian/Laplace thresholding, as DPNE's level 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist

from privrelease.core import noise
from privrelease.core.mechanisms.aggregate.params import Measure, Params
from privrelease.core.privacy import events
from privrelease.core.privacy.budget import gaussian_epsilon, gaussian_sigma

COUNTS = "key counts"
FINE = 2.0**26  # sigma / grid at least this: the grid's rounding of a value costs at most 2^-27 sigma


@dataclass(frozen=True)
class Vector:
    """One noised value per key: what it holds, its sensitivities, the measure it serves and its weight."""

    part: str  # the leaf's name in the plan's event
    kind: str  # counts, distinct, sum, centred, histogram
    measure: int | None  # index in params.measures (None: the counts)
    l2: float
    l1: float
    cells: int  # noised cells a neighbour changes (the sampler's slack counts them)
    weight: float

    @property
    def integral(self) -> bool:
        """Integer true values (counts): the grid must divide 1."""
        return self.kind in ("counts", "distinct", "histogram")


@dataclass(frozen=True)
class Noised:
    """A vector with its noise: the leaf drawn with and its public grid."""

    vector: Vector
    leaf: events.DiscreteGaussian | events.DiscreteLaplace
    unit: float

    @property
    def std(self) -> float:
        """The std actually drawn with (the sampler's, never below the leaf's)."""
        if isinstance(self.leaf, events.DiscreteGaussian):
            return self.unit * math.sqrt(noise.gaussian_variance_units(self.leaf.sigma, self.unit))
        q = math.exp(-1 / self.leaf.scale)
        return self.unit * math.sqrt(2 * q) / (1 - q)

    def half(self, miss: float) -> float:
        """A half-width h with P[|noise| > h] <= ``miss`` (the discrete Gaussian's std at least its
        continuous one's: Gaussian tails; the discrete Laplace's exact tail P[|Y| >= k] = 2 q^k / (1 + q))."""
        if isinstance(self.leaf, events.DiscreteGaussian):
            return NormalDist().inv_cdf(1 - miss / 2) * self.std
        q = math.exp(-1 / self.leaf.scale)
        return math.ceil(math.log(miss * (1 + q) / 2) / math.log(q)) * self.unit


@dataclass(frozen=True)
class Pick:
    """One quantile level's exponential-mechanism draw per key: its leaf (epsilon per draw) and score sensitivity."""

    measure: int
    q: float
    leaf: events.Exponential
    sensitivity: Fraction  # of the score, exactly (the rate epsilon / (2 Delta) is rounded down from it)
    groups: int  # keys a neighbour touches: the leaf's compositions


@dataclass(frozen=True)
class Accounting:
    noised: list[Noised]
    delta_select: float  # 0 with public keys
    threshold: int | None  # keys kept when the noisy count's grid units reach it (None: public keys)
    epsilon: float  # the charge
    delta: float
    coordinates: int  # the sampler's slack's (Gaussian)
    picks: tuple[Pick, ...] = ()

    def of(self, kind: str, measure: int | None) -> Noised:
        return next(n for n in self.noised if n.vector.kind == kind and n.vector.measure == measure)

    @property
    def counts(self) -> Noised | None:
        return next((n for n in self.noised if n.vector.kind == "counts"), None)


def _sensitivities(params: Params, c: float, same: float) -> tuple[float, float]:
    if params.user_column:
        g, r = params.max_groups, params.max_rows
        return math.sqrt(g) * r * c, g * r * c
    return max(math.sqrt(2) * c, same), max(2 * c, same)


def vectors(params: Params) -> list[Vector]:
    """The vectors a release noises, in a fixed order (the counts first)."""
    out = []
    count_share = [m.share for m in params.measures if m.op == "count"]
    means = [m.share for m in params.measures if m.op == "mean"]
    if count_share or params.selects or means:  # paid by the count, else by the means (half of each's share), else 1
        weight = count_share[0] if count_share else sum(means) / 2 if means else 1.0
        out.append(Vector(COUNTS, "counts", None, *_sensitivities(params, 1.0, 0.0), params.groups, weight))
    for i, m in enumerate(params.measures):
        if m.op == "count" or params.mean_of(i) is not None:  # a sum a mean's vectors give has none of its own
            continue
        kind, c, same = _kind(m)
        cells = params.groups * (min(params.max_rows, m.bins) if kind == "histogram" else 1)
        weight = m.share / 2 if m.op == "mean" and not count_share else m.share
        out.append(Vector(f"{m.names[0] if m.op != 'quantile' else m.column + ' quantiles'}: {kind}", kind, i,
                          *_sensitivities(params, c, same), cells, weight))  # fmt: skip
    return out


def derived_sum(acc: Accounting, params: Params, i: int) -> tuple[Noised, Noised, float]:
    """Sum measure i read from a mean's vectors: (the centred sum's, the counts', the bounds' midpoint m); S = C + m N."""
    low, high = params.measures[i].bounds
    return acc.of("centred", params.mean_of(i)), acc.counts, (low + high) / 2


def _weight(params: Params, v: Vector) -> float:
    """A vector's weight in the split: a quantile's histogram takes its interval share of the measure's."""
    return v.weight * (params.measures[v.measure].interval_share if v.kind == "histogram" else 1.0)


def _picks(params: Params) -> list[tuple[int, float, float, Fraction]]:
    """(measure, q, weight, score sensitivity) of each quantile level's draws."""
    out = []
    for i, m in enumerate(params.measures):
        for q in m.q if m.op == "quantile" else ():
            exact_q = events.exact(q)  # the level as written: the sensitivity exactly, never a float a hair below it
            delta = max(exact_q, 1 - exact_q) * params.max_rows if params.user_column else Fraction(1)
            out.append((i, q, m.share * (1 - m.interval_share) / len(m.q), delta))
    return out


def _pick(params: Params, i: int, q: float, delta: Fraction, epsilon_c: float) -> Pick:
    part = f"{params.measures[i].names[params.measures[i].q.index(q)]}: exponential mechanism"
    return Pick(i, q, events.Exponential(epsilon_c, part=part), delta, params.groups)


def _kind(m: Measure) -> tuple[str, float, float]:
    if m.op == "count_distinct":
        return "distinct", 1.0, 0.0
    if m.op == "quantile":
        return "histogram", 1.0, 0.0
    low, high = m.bounds
    if m.op == "sum":
        return "sum", max(abs(low), abs(high)), high - low
    return "centred", (high - low) / 2, high - low


def grid(scale: float, integral: bool) -> float:
    """The public grid of a vector with noise ``scale``: a power of two with scale/grid in [2^26, 2^27),
    at most 1 for integer values (whose grid must divide 1; the noise must then stay below 2^27)."""
    unit = 2.0 ** math.floor(math.log2(scale / FINE))
    if integral and unit > 1:
        raise ValueError(f"a count's noise std {scale:.3g} is past the exact sampler's range: raise epsilon (or rho)")
    return min(unit, 1.0) if integral else unit


def accounting(params: Params) -> Accounting:
    vs = vectors(params)
    raw_picks = _picks(params)
    total = sum(_weight(params, v) for v in vs) + sum(w for _, _, w, _ in raw_picks)
    if params.rho is None:
        picks = [_pick(params, i, q, d, params.epsilon * w / total / params.groups) for i, q, w, d in raw_picks]
    else:
        picks = [_pick(params, i, q, d, math.sqrt(8 * params.rho * w / total / params.groups)) for i, q, w, d in raw_picks]
    linear = sum(p.groups * events.exact(p.leaf.epsilon) for p in picks)  # the picks' epsilon, counted linearly
    delta_select = (params.delta * (params.selection_share if params.noise == "gaussian" else 1.0)) if params.selects else 0.0
    if params.noise == "gaussian":
        return _gaussian(params, vs, total, delta_select, tuple(picks), float(linear))
    share = [_weight(params, v) / total for v in vs]
    eps = [params.epsilon * s if params.rho is None else math.sqrt(2 * params.rho * s) for s in share]
    noised = []
    for v, e in zip(vs, eps):
        unit = grid(v.l1 / e, v.integral)
        sens = math.ceil(v.l1 / unit)
        noised.append(Noised(v, events.DiscreteLaplace(math.ceil(sens / e), sens, part=v.part), unit))
    charged = params.epsilon if params.rho is None else float(sum(events.exact(e) for e in eps) + linear)
    acc = Accounting(noised, delta_select, None, charged, delta_select, 0, tuple(picks))
    return _with_threshold(params, acc)


def _gaussian(
    params: Params, vs: list[Vector], total: float, delta_select: float, picks: tuple[Pick, ...], linear: float
) -> Accounting:
    """The vectors share mu^2 by weight: at the epsilon left after the picks', or 2 rho times their share of the weight."""
    cells = sum(v.cells for v in vs)
    delta_noise = params.delta - delta_select
    weights = [_weight(params, v) for v in vs]
    if params.rho is None:
        try:
            eps, dlt = noise.continuous_budget(params.epsilon - linear, delta_noise, cells)
        except ValueError as exc:
            if not linear:
                raise
            raise ValueError(f"{exc} (the quantile draws take {linear:.3g} of epsilon {params.epsilon:g} first)") from None
        mu2 = 1 / gaussian_sigma(eps, dlt) ** 2
        charged = params.epsilon
    else:
        mu2 = 2 * params.rho * sum(weights) / total
        dlt = (delta_noise - 2 * cells * noise.TAIL) * math.exp(-cells * noise.ETA)
        if dlt <= 0:
            raise ValueError("delta is too small for the exact sampler; raise it")
        charged = gaussian_epsilon(1 / math.sqrt(mu2), dlt) + 2 * cells * noise.ETA + linear
    noised = []
    for v, w in zip(vs, weights):
        sigma = v.l2 / math.sqrt(mu2 * w / sum(weights)) * (1 + 1e-12)  # float rounding to the safe side
        noise.check_shift(v.l2, sigma)
        noised.append(Noised(v, events.DiscreteGaussian(sigma, v.l2, part=v.part), grid(sigma, v.integral)))
    return _with_threshold(params, Accounting(noised, delta_select, None, charged, params.delta, cells, picks))


def _with_threshold(params: Params, acc: Accounting) -> Accounting:
    """The key-selection threshold in the counts' grid units: a key one user holds alone (at most R rows)
    reaches it with probability at most delta_select / G (Gaussian: P[Z >= n] <= P[N(0, s^2) >= n - 1]
    for the discrete law of std s; Laplace: P[Y >= k] = q^k / (1 + q))."""
    if not params.selects:
        return acc
    counts = acc.counts
    own = params.max_rows / counts.unit  # a lone user's count in grid units (1/unit is an integer)
    each = acc.delta_select / (params.max_groups if params.user_column else 1)
    if isinstance(counts.leaf, events.DiscreteGaussian):
        s = counts.std / counts.unit
        beyond = math.ceil(s * -NormalDist().inv_cdf(each)) + 1
    else:
        q = math.exp(-1 / counts.leaf.scale)
        beyond = math.ceil(counts.leaf.scale * math.log(1 / (each * (1 + q))))
    return Accounting(acc.noised, acc.delta_select, int(own) + max(beyond, 1), acc.epsilon, acc.delta, acc.coordinates, acc.picks)


def event(params: Params, acc: Accounting) -> events.Calibrated:
    """The plan's event: each vector's leaf once, key selection's delta, the Gaussian sampler's slack."""
    parts: list[events.Event] = [n.leaf for n in acc.noised] + [events.times(p.leaf, p.groups) for p in acc.picks]
    if acc.delta_select:
        parts.append(events.EpsilonDelta(0.0, acc.delta_select, part="key selection (noisy count threshold)"))
    if acc.coordinates:
        parts.append(events.sampler_slack(acc.coordinates))
    return events.charge(parts, acc.epsilon, acc.delta)
