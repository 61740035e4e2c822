"""What a run costs, as a value: a DP charge (``DPCost``: a privacy event under an adjacency, its (epsilon, delta)
derived from the event), ``NoDP`` (statistical disclosure control) or ``MPCCost`` (a secure computation). The one
module that states a cost's types.

A mechanism's plan states it (``privrelease.core.mechanisms.base``), the ledger charges it (``privrelease.core.ledger``), the
manifest and the report show it: one value, so the figures charged, shown and drawn with are the
event's own (``privrelease.core.privacy.events``), and the adjacency is typed (``privrelease.core.privacy.adjacency``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from privrelease.core.privacy import events
from privrelease.core.privacy.adjacency import Adjacency
from privrelease.core.privacy.budget import Budget


@dataclass(frozen=True)
class DPCost:
    """A charge of the privacy event ``event`` under ``adjacency``: its (epsilon, delta) is derived from
    the event (``events.epsilon_delta``: the pair its mechanism calibrated it to), never stated beside it."""

    event: events.Event
    adjacency: Adjacency
    kind: Literal["dp"] = "dp"

    def __post_init__(self) -> None:
        if not isinstance(self.event, events.Event):
            raise TypeError(f"a DP cost needs a privacy event (privrelease.core.privacy.events), got {self.event!r}")
        events.epsilon_delta(self.event)  # an event without a single (epsilon, delta) is refused here

    @property
    def budget(self) -> Budget:
        return events.epsilon_delta(self.event)

    @property
    def unit(self) -> str:
        """The privacy unit the guarantee is about (a registered dataset's unit must be the same)."""
        return self.adjacency.unit

    @property
    def model(self) -> str:
        return ("user-level " if self.unit == "user" else "") + "(epsilon, delta)-differential privacy"


@dataclass(frozen=True)
class NoDP:
    """No differential privacy: statistical disclosure control under ``model``, whose risk figures the release states."""

    model: str
    kind: Literal["sdc"] = "sdc"


@dataclass(frozen=True)
class MPCCost:
    """No epsilon: a secure computation whose guarantee (``model``) is cryptographic."""

    model: str
    kind: Literal["mpc"] = "mpc"


Cost = DPCost | NoDP | MPCCost
