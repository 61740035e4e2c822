"""Privacy events: what a DP release is, as a small immutable tree (in the spirit of dp-accounting's DpEvent).

Leaves, each with the figures its noise is drawn with and a ``part`` (what it is, in words):

* ``Gaussian(sigma, sensitivity)``: the Gaussian mechanism's curve, l2 ``sensitivity``; what other
  leaves are accounted as, and what old entries recorded; never drawn;
* ``DistributedDiscreteGaussian(share_variance, parties, sensitivity)``: the spam users' shares, exact
  N_Z(0, share_variance) each, summed (Kairouz, Liu & Steinke 2021; ``privrelease.core.spam.dp``); accounted as the
  Gaussian of sigma = sqrt(parties * share_variance) (``accounted``);
* ``DiscreteGaussian(sigma, sensitivity)``: ``privrelease.core.noise.gaussian``'s exact N_Z on the public grid
  ``noise.grid(sigma)``, std at least ``sigma``; accounted as the Gaussian of the same sigma (the
  same zCDP rho: Canonne, Kamath & Steinke 2020) with the sampler's slack as its own
  ``EpsilonDelta`` part (``sampler_slack``: the grid lemma of ``privrelease.core.noise``);
* ``Laplace(scale, sensitivity)``, l1; ``DiscreteLaplace(scale, sensitivity)``: ``privrelease.core.noise.laplace``'s
  Lap_Z(t) on a public grid, ``scale`` t and ``sensitivity`` in grid units;
* ``PermuteAndFlip(epsilon)``: one eps-DP selection (McKenna & Sheldon 2020); ``Exponential(epsilon)``:
  one exponential-mechanism draw (bounded range, eps^2/8; kept for entries that record it);
* ``EpsilonDelta(epsilon, delta)``: a part known only by its (epsilon, delta);
* ``SmoothGaussian(epsilon, delta, low, high, unit)``: Gaussian noise of a data-dependent std, declared
  with its bounds; (epsilon, delta)-DP by its mechanism's proof, accounted as that ``EpsilonDelta``.

Every leaf is a ``Leaf``: its ``rho(count)`` (zCDP; None for one known only by an (epsilon, delta)),
``pure_epsilon()`` (None unless pure epsilon-DP) and ``to_dp_event()`` (dp-accounting's event where it
has the class: ``GaussianDpEvent`` with noise_multiplier sigma / Delta, ``LaplaceDpEvent``,
``DiscreteLaplaceDpEvent``; else ``NoDpEvent``, and ``privrelease.core.privacy.pld`` takes the worst pair with its
guarantee). The admission filter and the reports walk the tree and ask the leaves, by class.

Combinators: ``SelfComposed(event, count)`` and ``Composed(events)``; ``Calibrated(event, epsilon,
delta)`` is the guarantee a mechanism's proof gives the composition it wraps, from its calibration
(``tests/mechanisms/test_contract.py`` checks every plan's against its leaves). A DP cost's (epsilon, delta) is
``epsilon_delta(event)``: a ``Calibrated`` node's, or the basic composition of pure and (epsilon, delta)
leaves; a Gaussian leaf outside a ``Calibrated`` node has no single pair.

``dump`` and ``load`` are the JSON form (``{"type": ..., figures}``, nested). A ledger entry records its
event as ``accounted`` (``stored``): a distributed discrete Gaussian as its Gaussian (the share variance,
an integer past 2^64, stays in the run's report), a smooth-sensitivity Gaussian as its (epsilon, delta).
Entries written before this tree recorded flat parts: ``privrelease.core.ledger.legacy`` reads them.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields
from fractions import Fraction
from typing import ClassVar

from privrelease.core.noise import ETA, TAIL
from privrelease.core.privacy.budget import Budget


class NoDpEvent(ValueError):
    """A leaf dp-accounting has no event class for."""


def _dp():
    """dp-accounting's event classes, imported when first asked for: the package takes seconds to import,
    and only the reported PLD figure needs it (not a release, nor the admission filter)."""
    from dp_accounting import dp_event

    return dp_event


def exact(amount: float) -> Fraction:
    """An amount as the decimal it was given as (its shortest repr), so sums of splits have no residue."""
    return Fraction(repr(float(amount)))


class Leaf:
    """What every leaf has (the module docstring): ``rho``, ``pure_epsilon``, ``to_dp_event``."""

    part: str
    type: ClassVar[str]

    def rho(self, count: int = 1) -> float | None:
        pure = self.pure_epsilon()
        return None if pure is None else count * pure**2 / 2

    def pure_epsilon(self) -> float | None:
        return None

    def to_dp_event(self) -> object:
        raise NoDpEvent(f"dp-accounting has no {self.type} event")


def _positive(leaf: object, *names: str) -> None:
    for name in names:
        value = getattr(leaf, name)
        strict = name in ("sigma", "scale")
        if not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0 or (strict and value == 0):
            raise ValueError(f"a {type(leaf).__name__} event needs a finite {name} >= 0 (sigma, scale > 0), got {value}")


@dataclass(frozen=True)
class Gaussian(Leaf):
    sigma: float
    sensitivity: float = 1.0
    part: str = ""
    type: ClassVar[str] = "gaussian"

    def __post_init__(self) -> None:
        _positive(self, "sigma", "sensitivity")

    def rho(self, count: int = 1) -> float:
        return count * self.sensitivity**2 / (2 * self.sigma**2)

    def to_dp_event(self) -> object:
        return _dp().GaussianDpEvent(noise_multiplier=self.sigma / self.sensitivity)


@dataclass(frozen=True)
class DiscreteGaussian(Gaussian):
    type: ClassVar[str] = "discrete_gaussian"


@dataclass(frozen=True)
class Laplace(Leaf):
    scale: float
    sensitivity: float = 1.0
    part: str = ""
    type: ClassVar[str] = "laplace"

    def __post_init__(self) -> None:
        _positive(self, "scale", "sensitivity")

    def pure_epsilon(self) -> float:
        return self.sensitivity / self.scale

    def to_dp_event(self) -> object:
        return _dp().LaplaceDpEvent(noise_multiplier=self.scale / self.sensitivity)


@dataclass(frozen=True)
class DiscreteLaplace(Laplace):
    type: ClassVar[str] = "discrete_laplace"

    def to_dp_event(self) -> object:
        if not float(self.sensitivity).is_integer():
            raise NoDpEvent(f"a discrete Laplace of sensitivity {self.sensitivity} (not whole grid units)")
        return _dp().DiscreteLaplaceDpEvent(noise_parameter=1 / self.scale, sensitivity=int(self.sensitivity))


@dataclass(frozen=True)
class _Selection(Leaf):
    epsilon: float  # of one draw
    part: str = ""

    def __post_init__(self) -> None:
        _positive(self, "epsilon")

    def pure_epsilon(self) -> float:
        return self.epsilon


@dataclass(frozen=True)
class PermuteAndFlip(_Selection):
    type: ClassVar[str] = "permute_and_flip"


@dataclass(frozen=True)
class Exponential(_Selection):
    """One exponential-mechanism draw: bounded range, so its rho is eps^2 / 8 (Cesar & Rogers)."""

    type: ClassVar[str] = "exponential"

    def rho(self, count: int = 1) -> float:
        return count * self.epsilon**2 / 8


@dataclass(frozen=True)
class EpsilonDelta(Leaf):
    epsilon: float
    delta: float
    part: str = ""
    type: ClassVar[str] = "epsilon_delta"

    def __post_init__(self) -> None:
        _positive(self, "epsilon", "delta")


@dataclass(frozen=True)
class DistributedDiscreteGaussian(Leaf):
    """Each of at least ``parties`` honest users adds N_Z(0, ``share_variance``) per coordinate to a sum
    of l2 ``sensitivity``; accounted as the Gaussian of sigma = sqrt(parties * share_variance)."""

    share_variance: int  # s^2 of one user's share, in the sum's integer units
    parties: int  # the least number of users whose shares are in the sum
    sensitivity: float = 1.0
    part: str = ""
    type: ClassVar[str] = "distributed_discrete_gaussian"

    def __post_init__(self) -> None:
        for name in ("share_variance", "parties"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
                raise ValueError(f"a DistributedDiscreteGaussian event needs an integer {name} >= 1, got {value!r}")
        _positive(self, "sensitivity")

    @property
    def sigma(self) -> float:
        """The std of the honest users' summed noise per coordinate."""
        return math.sqrt(self.parties * self.share_variance)

    def gaussian(self) -> Gaussian:
        """The Gaussian it is accounted as (``accounted``)."""
        return Gaussian(self.sigma, self.sensitivity, part=self.part)

    def rho(self, count: int = 1) -> float:
        return self.gaussian().rho(count)

    def to_dp_event(self) -> object:
        return self.gaussian().to_dp_event()


@dataclass(frozen=True)
class SmoothGaussian(Leaf):
    """Gaussian noise whose std is data: S / alpha with S a beta-smooth upper bound on the local sensitivity,
    which its mechanism's proof makes (``epsilon``, ``delta``)-DP (accounted as that ``EpsilonDelta``). Declared
    with the bounds any table's std lies in, [``low``, ``high``] (public), and the public grid ``unit`` it is
    drawn on (``privrelease.core.privacy.draws.smooth``: ``privrelease.core.noise.exact_gaussian``, which refuses a grid too coarse)."""

    epsilon: float
    delta: float
    low: float  # the least std any table of the declared size can give
    high: float  # the largest
    unit: float  # the public grid (from ``low``)
    part: str = ""
    type: ClassVar[str] = "smooth_gaussian"

    def __post_init__(self) -> None:
        _positive(self, "epsilon", "delta", "low", "high", "unit")
        if not 0 < self.low <= self.high:
            raise ValueError(f"a SmoothGaussian event needs 0 < low <= high, got [{self.low}, {self.high}]")

    def approx(self) -> EpsilonDelta:
        """The (epsilon, delta) part it is accounted as."""
        return EpsilonDelta(self.epsilon, self.delta, part=self.part)


LEAVES = {c.type: c for c in (Gaussian, DiscreteGaussian, DistributedDiscreteGaussian, Laplace, DiscreteLaplace)}
LEAVES |= {c.type: c for c in (PermuteAndFlip, Exponential, EpsilonDelta, SmoothGaussian)}


@dataclass(frozen=True)
class SelfComposed:
    event: Event
    count: int
    type: ClassVar[str] = "self_composed"

    def __post_init__(self) -> None:
        if not isinstance(self.count, numbers.Integral) or self.count < 1:
            raise ValueError(f"a self-composition needs a count >= 1, got {self.count!r}")

    def to_dp_event(self) -> object:
        return _dp().SelfComposedDpEvent(self.event.to_dp_event(), self.count)


@dataclass(frozen=True)
class Composed:
    events: tuple[Event, ...]
    type: ClassVar[str] = "composed"

    def __post_init__(self) -> None:
        object.__setattr__(self, "events", tuple(self.events))

    def to_dp_event(self) -> object:
        return _dp().ComposedDpEvent([e.to_dp_event() for e in self.events])


@dataclass(frozen=True)
class Calibrated:
    """``event``, which its mechanism's proof makes (epsilon, delta)-DP: the pair its calibration gives."""

    event: Event
    epsilon: float
    delta: float
    type: ClassVar[str] = "calibrated"

    def __post_init__(self) -> None:
        Budget(self.epsilon, self.delta)  # checks the pair

    def to_dp_event(self) -> object:
        return self.event.to_dp_event()


Event = Leaf | SelfComposed | Composed | Calibrated


def leaves(event: Event, count: int = 1) -> list[tuple[Leaf, int]]:
    """Every leaf with the number of times it composes, in the tree's order (a calibration unwrapped)."""
    if isinstance(event, SelfComposed):
        return leaves(event.event, count * event.count)
    if isinstance(event, Composed):
        return [pair for e in event.events for pair in leaves(e, count)]
    if isinstance(event, Calibrated):
        return leaves(event.event, count)
    return [(event, count)]


def accounted(event: Event) -> Event:
    """``event`` as the filter counts it and the ledger records it: each distributed discrete Gaussian as
    the Gaussian it is accounted as (the same curve), a smooth-sensitivity Gaussian as its (epsilon, delta)
    part, every other node as it is."""
    if isinstance(event, DistributedDiscreteGaussian):
        return event.gaussian()
    if isinstance(event, SmoothGaussian):
        return event.approx()
    if isinstance(event, SelfComposed):
        return SelfComposed(accounted(event.event), event.count)
    if isinstance(event, Composed):
        return Composed(tuple(accounted(e) for e in event.events))
    if isinstance(event, Calibrated):
        return Calibrated(accounted(event.event), event.epsilon, event.delta)
    return event


class Undeclared(ValueError):
    """A run asked its plan's event for a draw it does not declare (there is no fallback: it draws nothing)."""


def find(event: Event, part: str) -> Leaf:
    """The leaf of ``event`` named ``part``, for a run to draw with what its plan declares; ``Undeclared`` if
    there is none (a run never builds a leaf of its own)."""
    found = {leaf for leaf, _ in leaves(event) if leaf.part == part}
    if len(found) > 1:
        raise ValueError(f"the event has {len(found)} different leaves named {part!r}")
    if not found:
        raise Undeclared(f"the plan declares no draw named {part!r}; a run draws only what its plan declares")
    return found.pop()


def each(event: Event, part: str) -> list[Leaf]:
    """The leaves of ``event`` named ``part``, each repeated as often as it composes, in the tree's order."""
    return [leaf for leaf, n in leaves(event) if leaf.part == part for _ in range(n)]


def epsilon_delta(event: Event) -> Budget:
    """The (epsilon, delta) of ``event``: a calibration's, else its leaves' by basic composition (exact
    decimal sums); a Gaussian outside a calibration has none."""
    if isinstance(event, Calibrated):
        return Budget(event.epsilon, event.delta)
    eps = delta = Fraction(0)
    for leaf, n in leaves(accounted(event)):
        if isinstance(leaf, Gaussian):
            raise ValueError(
                "a Gaussian part has no single (epsilon, delta): its mechanism states the pair it is "
                "calibrated to with Calibrated(event, epsilon, delta)"
            )
        eps += n * exact(leaf.epsilon if isinstance(leaf, EpsilonDelta) else leaf.pure_epsilon())
        delta += n * (exact(leaf.delta) if isinstance(leaf, EpsilonDelta) else 0)
    return Budget(float(eps), float(delta))


def sampler_slack(coordinates: int) -> EpsilonDelta:
    """``privrelease.core.noise``'s exact discrete Gaussian on a grid, against the continuous Gaussian its leaf is
    accounted as: pmf within e^{+-ETA} per coordinate and a tail of TAIL (``noise.continuous_budget``)."""
    return EpsilonDelta(2 * coordinates * ETA, 2 * coordinates * TAIL, part=f"exact sampler slack ({coordinates} coordinates)")


# -- the ledger's form --------------------------------------------------------------------------------


def dump(event: Event) -> dict:
    """The JSON form of ``event`` (``type`` and its fields, nested)."""
    out: dict = {"type": event.type}
    for f in fields(event):
        value = getattr(event, f.name)
        if isinstance(value, tuple):
            out[f.name] = [dump(e) for e in value]
        elif f.name == "event":
            out[f.name] = dump(value)
        elif not (f.name == "part" and value == ""):
            out[f.name] = value
    return out


def load(doc: dict) -> Event:
    """``dump``'s inverse (a flat part recorded before this tree is read by ``privrelease.core.ledger.legacy``)."""
    kind, rest = doc.get("type"), {k: v for k, v in doc.items() if k != "type"}
    if kind == "self_composed":
        return SelfComposed(load(rest["event"]), rest["count"])
    if kind == "composed":
        return Composed(tuple(load(e) for e in rest["events"]))
    if kind == "calibrated":
        return Calibrated(load(rest["event"]), rest["epsilon"], rest["delta"])
    if kind not in LEAVES:
        raise ValueError(f"not a privacy event: {doc!r}")
    return LEAVES[kind](**rest)


def times(event: Event, count: int) -> Event:
    """``event`` composed ``count`` times: itself for one."""
    return event if count == 1 else SelfComposed(event, count)


def charge(parts: list[Event], epsilon: float, delta: float) -> Calibrated:
    """A release's event: its parts composed, at the (epsilon, delta) its mechanism calibrated them to."""
    return Calibrated(Composed(tuple(parts)), epsilon, delta)


def stored(event: Event) -> list[dict] | None:
    """What a ledger entry records of a charge's event beside its (epsilon, delta): its parts, as
    ``accounted``; nothing for an event known only by that pair (a bare ``EpsilonDelta``), which is
    counted as its charge."""
    if isinstance(event, EpsilonDelta):
        return None
    inner = accounted(event.event if isinstance(event, Calibrated) else event)
    return [dump(e) for e in (inner.events if isinstance(inner, Composed) else (inner,))]
