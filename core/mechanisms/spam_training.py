"""Spam-filter training (after Pathak, Sharifi & Raj) as a mechanism: its parameters and its plan.

Training reads no registered table and releases no table, so it is a ``Mechanism`` but not a
``TableMechanism``: its run is the protocol between parties (``core.spam.training``), driven round
by round by ``flows/spam.py``. Its plan states its cost like every other mechanism's, once: no
epsilon, a semi-honest secure computation, which the ledger records as an ``mpc`` entry.
"""

from __future__ import annotations

from core.mechanisms.base import MPCCost, Plan
from core.spam.spec import SpamSpec

NAME = "spam-filter-training"
Params = SpamSpec
GUARANTEE = "semi-honest secure computation (Paillier)"


def plan(params: SpamSpec) -> Plan:
    """No privacy budget is charged: what the parties learn is bounded by the protocol, not by noise."""
    return Plan(cost=MPCCost(GUARANTEE), guarantee=GUARANTEE, detail={"guarantee": GUARANTEE})
