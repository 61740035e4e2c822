"""The fifth attack on the served gate (issue #39, M2): several accounts, each at its own limit of calls in
progress, held every slot of Prefect's and slowed everyone's reads 100-200x. The gate shares a total
(``privrelease.gate.fair``) fairly: each active account at most its share, and an account with nothing in progress is
let in at once. Shown on a gate in this process in front of the served Prefect (calls of the flood held
in it until the victim's has been answered), and on weakened gates: without a total, and with a total
served first come first served."""

from __future__ import annotations

import threading
import time

import anyio
import pytest
from starlette.requests import Request

from privrelease.core import settings
from privrelease.gate import bounds
from privrelease.gate.app import Gate
from privrelease.gate.fair import Slots
from tests.conftest import PASSWORD
from tests.system.test_gate_abuse import refused, weakened

FLOOD = ("alice", "vera", "ada")  # the flooding accounts (tests/conftest.py `people`)
EACH = 12  # calls each sends at once
TOTAL = 8  # the gate's total in these tests
VICTIM = "sam"
COUNT = "/flow_runs/count"


class Holding(Gate):
    """The gate, holding the flood's calls (header ``x-flood``) at Prefect's door until released, and counting
    the calls passed on to Prefect at once; ``seen``: how many, the victim's included, when the victim's went."""

    def __init__(self, *args):
        super().__init__(*args)
        self.now, self.seen, self.release = 0, None, threading.Event()

    async def forward(self, request: Request, path: str, body: bytes, reads: bool):
        self.now += 1
        try:
            if request.headers.get("x-flood"):
                while not self.release.is_set():
                    await anyio.sleep(0.01)
            else:
                self.seen = self.now
            return await super().forward(request, path, body, reads)
        finally:
            self.now -= 1


class FirstCome(Slots):
    """The weakened total: first come, first served (no share, no room kept for an account without calls)."""

    def take(self, account: str) -> str | None:
        if self.held() >= self.total:
            return "full"
        self._held[account] = self.held(account) + 1
        return None


def _flooded(env: dict, slots: type[Slots]) -> tuple:
    """The flood sent and held, then the victim's one read: (its answer, the calls in Prefect when it went, the
    flood's answers)."""
    with weakened(env, gate_class=Holding) as person:
        client = person(VICTIM)
        gate = client.app.state.gate
        gate.slots = slots(gate.slots.total, gate.slots.per_account)
        for name in (*FLOOD, VICTIM):  # signed in: no hash in the burst
            assert client.post(COUNT, json={}, auth=(name, PASSWORD)).status_code == 200
        answers: list = []

        def flood(name: str) -> None:
            answers.append(client.post(COUNT, json={}, auth=(name, PASSWORD), headers={"x-flood": "1"}))

        threads = [threading.Thread(target=flood, args=(name,)) for name in FLOOD for _ in range(EACH)]
        for t in threads:
            t.start()
        try:
            for _ in range(6000):  # every call of the flood either held in the gate or answered
                if len(answers) + gate.now == len(threads):
                    break
                time.sleep(0.01)
            victim = client.post(COUNT, json={}, auth=(VICTIM, PASSWORD))
        finally:
            gate.release.set()
            for t in threads:
                t.join()
    return victim, gate.seen, answers


def test_a_flood_of_accounts_leaves_room_for_anothers_read(served, people, monkeypatch):
    env, _ = served
    monkeypatch.setenv(settings.GATE_CALLS, str(TOTAL))
    victim, seen, answers = _flooded(env, Slots)
    assert victim.status_code == 200 and not refused(victim), victim.text
    # Prefect had at most the total (the first account's), the floor of each other account let in past it, and
    # the victim's
    most = TOTAL + bounds.MIN_SHARE * (len(FLOOD) - 1)
    assert seen <= most + 1, seen
    refusals = [a for a in answers if a.status_code == 429]
    assert len(refusals) >= len(FLOOD) * EACH - most, [a.status_code for a in answers]
    assert all(a.headers["retry-after"] == "1" and "try again when" in a.text for a in refusals), refusals[0].text
    # the weakened gates: without a total the flood's calls all reach Prefect; with one served first come,
    # the flood holds it and the victim is refused
    victim, seen, _ = _flooded(env, lambda total, per_account: Slots(10**6, per_account))
    assert victim.status_code == 200 and seen == len(FLOOD) * EACH + 1, seen
    victim, _, _ = _flooded(env, FirstCome)
    assert victim.status_code == 429, victim.text


@pytest.mark.parametrize(
    ("held", "asker", "said"),
    [
        ({}, "a", None),
        ({"a": 16}, "a", "16 of your calls are in progress already"),
        ({"a": 15, "b": 1, "c": 1}, "a", "15 of your calls are in progress already: your share while 3 accounts call"),
        ({"a": 15, "b": 1, "c": 1}, "b", None),  # within its share of 11
        ({"a": 16, "b": 16}, "b", "16 of your calls are in progress already"),
        ({"a": 16, "b": 16}, "c", None),  # nothing in progress: let in past the total
        ({"a": 16, "b": 13, "c": 3}, "c", None),  # under the floor of 4: let in past the total
        ({"a": 16, "b": 12, "c": 4}, "c", "32 calls are in progress, the most at once for everyone"),
        ({f"p{i}": 4 for i in range(8)}, "p0", "4 of your calls are in progress already: your share while 8 accounts"),
        ({f"p{i}": 4 for i in range(20)}, "p0", "4 of your calls are in progress already: your share while 20 accounts"),
        ({f"p{i}": 3 for i in range(20)}, "p0", None),  # the floor of 4, past the total
    ],
)
def test_an_accounts_share_of_the_total(held: dict, asker: str, said: str | None):
    slots = Slots(32, 16)
    for name, n in held.items():
        for _ in range(n):
            slots._held[name] = slots.held(name) + 1
    refusal = slots.take(asker)
    assert (refusal is None) if said is None else (refusal is not None and refusal.startswith(said)), refusal
    if refusal is None:
        slots.give(asker)
    assert slots.held() == sum(held.values())
