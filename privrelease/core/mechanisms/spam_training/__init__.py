"""Spam-filter training (after Pathak, Sharifi & Raj) as a mechanism: its parameters and its plan.

Training reads no registered table and releases no table, so it is a ``Mechanism`` but not a
``TableMechanism``: its run is the protocol between parties (``privrelease.core.spam.training``), driven round
by round by ``privrelease/flows/spam.py``. Its plan states its cost like every other mechanism's, once. Without
``dp:`` no epsilon: a semi-honest secure computation, recorded as an ``mpc`` entry. With ``dp:`` a
DP charge of the mail corpus (ledger dataset ``spam-mail``) at the spec's (epsilon, delta), its
rounds one distributed discrete Gaussian leaf self-composed (``privrelease.core.spam.dp``), under "replace one message".
"""

from __future__ import annotations

from privrelease.core.mechanisms.base import Plan
from privrelease.core.privacy import events
from privrelease.core.privacy.cost import DPCost, MPCCost
from privrelease.core.spam.dp import ADJACENCY, calibrate
from privrelease.core.spam.spec import SpamSpec
from privrelease.core.spam.terms import MAIL

NAME = "spam-filter-training"
Params = SpamSpec
GUARANTEE = "semi-honest secure computation (Paillier)"
LEDGER_DATASET = "spam-filter"  # runs without dp: (mpc entries)
DP_LEDGER_DATASET = MAIL  # "spam-mail": the mail corpus, charged by dp: runs (a ledger dataset holds one kind of entry)


def ledger_dataset(params: SpamSpec) -> str:
    return LEDGER_DATASET if params.dp is None else DP_LEDGER_DATASET


def users_noise(plan_: Plan) -> events.DistributedDiscreteGaussian | None:
    """The users' noise a charged plan declares, each round's (None: a run without ``dp:``), for the run to draw."""
    if not isinstance(plan_.cost, DPCost):
        return None
    (found,) = {leaf for leaf, _ in events.leaves(plan_.cost.event)}
    if not isinstance(found, events.DistributedDiscreteGaussian):
        raise events.Undeclared("a dp: training's plan declares the users' distributed discrete Gaussian")
    return found


def plan(params: SpamSpec) -> Plan:
    """No budget without ``dp:`` (what the parties learn is bounded by the protocol); with it, the
    spec's (epsilon, delta) of the round sums the server decrypts, per replaced message."""
    if params.dp is None:
        return Plan(cost=MPCCost(GUARANTEE), guarantee=GUARANTEE, detail={"guarantee": GUARANTEE})
    noise = calibrate(params.dp, len(params.users), params.rounds, params.quorum)
    guarantee = (
        f"message-level (epsilon={params.dp.epsilon:g}, delta={params.dp.delta:g})-differential privacy of "
        f"every round sum the server decrypts, with up to {params.dp.colluders} users colluding and as few as "
        f"{params.quorum} users in a round; {GUARANTEE}"
    )
    cost = DPCost(events.charge([noise.event()], params.dp.epsilon, params.dp.delta), ADJACENCY)
    return Plan(cost=cost, guarantee=guarantee, detail={"guarantee": guarantee, "noise": noise.public()})
