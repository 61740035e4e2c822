"""What a dataset's budget still admits, in the analyst's terms: the largest epsilon of a release like this one.

One figure an analyst can act on, the same wherever it is shown (a preview, a refusal, ``dataset list``, the
catalogue, ``ledger totals``): "the next release like this can take epsilon <= X", beside the cap. It is found
by planning the same release (same mechanism, delta and other parameters) at other epsilons and asking the
dataset's admission filter whether it would admit each after the history (``refusal.largest_epsilon``), so it
is what the next request would be admitted at, whichever accountant admits it. The cap less what was spent is
not that figure once a charge has Gaussian noise: the Rényi filter then admits more over several releases than
the cap less its own certified spend (the conversion term is paid once), and a basic sum of the charges can pass
the cap (issue #54: after 1 of a cap of 4, "2 left" while 2.99 fitted, and the charges then summed to 4.99).

What was spent is said under the accountant that admits, as a share of the cap (``account.spent``: the charges
over the cap while no charge has Gaussian noise, else the Rényi filter's costs over its budget), never above
100% for an admitted history; the charges' sum is said beside it, and why when it passes the cap. Public values
only: the cap, the charges' events and the release's own public parameters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from privrelease.core import mechanisms
from privrelease.core.ledger import account, refusal
from privrelease.core.ledger.chain import Entry
from privrelease.core.ledger.ledger import Ledger
from privrelease.core.params import StrictParams
from privrelease.core.privacy.accountant import Filter, Spend
from privrelease.core.privacy.budget import Budget

HIGH = 50.0  # the search's top: no mechanism's epsilon is bounded above it


@dataclass(frozen=True)
class Room:
    """What a dataset's budget still admits of one release."""

    like: str  # the mechanism of the release it is for
    epsilon: float | None  # the largest epsilon of that release the filter admits (3 significant digits, down); None: none
    delta: float  # that release's delta, kept
    cap: Budget
    spent: float | None  # the history's share of the cap under the accountant that admits it (None: nothing charged)
    spent_by: str  # that accountant: "basic" (composition) or "filter" (the Rényi filter)
    charged: float  # the charges' epsilons added up (basic composition)

    def take(self, this: str = "like this") -> str:
        """ "the next release like this can take epsilon <= X" (or that none can), with its delta."""
        if self.epsilon is None:
            return f"no release {this} fits any more (at delta={self.delta:.3g})"
        return f"the next release {this} can take epsilon ≤ {self.epsilon:.3g} (at delta={self.delta:.3g})"

    def cap_words(self) -> str:
        return f"cap epsilon={self.cap.epsilon:g}, delta={self.cap.delta:g}"

    def spent_words(self) -> str:
        """What was spent, under the accountant that admits (``refusal.spent_words``)."""
        return refusal.spent_words(self.spent, self.spent_by, self.charged, self.cap.epsilon)

    def words(self, this: str = "like this") -> str:
        """The figure beside the cap and what was spent: what every place shows."""
        return f"{self.take(this)}; {self.cap_words()}; {self.spent_words()}"

    def as_dict(self) -> dict:
        return {
            "like": self.like,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "spent": self.spent,
            "spent_by": self.spent_by,
            "charged": self.charged,
            "says": self.take(),
        }


def room(ledger: Ledger, dataset: str, mechanism: str, params: StrictParams, also: Spend | None = None) -> Room | None:
    """What the dataset's budget admits of the release ``mechanism`` with ``params`` (after ``also``, a charge counted
    first: the release a preview is of); None without a cap, or for a mechanism without an epsilon parameter."""
    f, spends = ledger.admission(dataset)
    if f is None or "epsilon" not in type(params).model_fields:
        return None
    return _room(f, spends + ([also] if also is not None else []), mechanism, params)


def after_last(entries: list[Entry], dataset: str) -> Room | None:
    """What the dataset's budget admits of a release like its last dp charge (same mechanism and parameters but
    epsilon), from the ledger's ``entries`` (read once by the caller); None without a cap or a dp charge, or when that
    release cannot be planned again."""
    mine = [e for e in entries if e.dataset == dataset]
    caps = [e for e in mine if e.status == account.CAP]
    charges = [e for e in mine if e.status == account.RESERVED and e.kind == "dp"]
    if not caps or not charges:
        return None
    last = charges[-1]
    module = mechanisms.MECHANISMS.get(last.mechanism)
    try:
        params = module.Params.model_validate(json.loads(last.params)["mechanism"])
    except (AttributeError, KeyError, TypeError, ValueError):  # no such mechanism now, or its parameters changed shape
        return None
    if "epsilon" not in type(params).model_fields:
        return None
    return _room(Filter.of(caps[-1].budget), account.history(charges), last.mechanism, params)


def _room(f: Filter, spends: list[Spend], mechanism: str, params: StrictParams) -> Room:
    module = mechanisms.MECHANISMS[mechanism]
    fields = {"epsilon": None, **({"rho": None} if "rho" in type(params).model_fields else {})}

    def make(eps: float) -> Spend | None:
        try:
            p = module.plan(type(params).model_validate(params.model_dump(mode="json") | fields | {"epsilon": eps}))
        except ValueError:  # pydantic's ValidationError too: no such request at this epsilon
            return None
        return Spend.of("next", p.cost.event)

    figure, by, basic = account.spent(f, spends)
    delta = float(getattr(params, "delta", 0.0) or 0.0)
    return Room(mechanism, refusal.largest_epsilon(f, spends, make, HIGH), delta, f.cap, figure, by, basic)
