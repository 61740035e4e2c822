"""The fifth attack on the served gate (issue #39, M3): two accounts, each keeping its two runs going, filled
the worker's pool of four, and everyone else's run waited behind theirs. Through a real proxy and gate
(``python -m privrelease.gate``, the limits set as the operator sets them) in front of the session's Prefect server, the
pool's last slot is kept for an account with no run going; on the same gate with no slot kept
(``$PRIVRELEASE_POOL_RESERVED=0``, the weakened variant) the two accounts fill it."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import anyio

from privrelease.core import limits, settings
from privrelease.gate.accounts import Accounts
from privrelease.gate.quotas import POOL_STATES, SOON, Quotas
from tests.conftest import PASSWORD
from tests.system.test_gate import refused
from tests.system.test_server import deployment, gate, operator, person, proxy

HOGS, LATE = ("fern", "gil"), "hana"  # accounts of this test's own: other tests' runs are not theirs
RUNS = 2  # each account's runs not finished, as by default


def _taken(api) -> int:
    """Runs of anyone's running or due and waiting for the pool (other tests leave runs no worker took)."""
    due = (datetime.now(UTC) + SOON).isoformat()
    body = {"flow_runs": {"state": {"type": {"any_": POOL_STATES}}, "expected_start_time": {"before_": due}}}
    return api.post("/flow_runs/count", json=body).json()


def _hogged(env: dict, root: Path, reserved: int) -> tuple[list[int], object]:
    """The two accounts ask for two runs each, then another account for one, through a gate whose pool holds
    four runs more than the session's server has going: the statuses, and the refused answer if any."""
    api = operator(env)
    limits = {
        settings.ACCOUNT_RUNS: str(RUNS),
        settings.POOL_LIMIT: str(_taken(api) + 2 * RUNS),
        settings.POOL_RESERVED: str(reserved),
    }
    form = f"/deployments/{deployment(api, 'dpne')['id']}/create_flow_run"
    with (
        gate(env | limits, root / f"gate-pool-{reserved}.log") as bare,
        proxy(env | {settings.HOME: str(root / f"proxy-pool-{reserved}")}, bare, root / f"proxy-pool-{reserved}.log") as url,
    ):
        answers = [
            person(url, name, PASSWORD).post(form, json={"parameters": {"preview": True}}) for name in (*HOGS, *HOGS, LATE)
        ]
    tags = [f"requested-by:{name}" for name in (*HOGS, LATE)]
    for run in api.post("/flow_runs/filter", json={"flow_runs": {"tags": {"any_": tags}}, "limit": 200}).json():
        api.delete(f"/flow_runs/{run['id']}")  # no worker of a later test runs them
    return [a.status_code for a in answers], next((a for a in answers if a.status_code != 201), None)


def test_two_accounts_cannot_fill_the_pool(served, people):
    env, root = served
    accounts = Accounts(Path(env["PRIVRELEASE_HOME"]) / "privrelease.duckdb")
    known = {a.name for a in accounts.all()}
    for name in (*HOGS, LATE):
        if name not in known:
            accounts.add(name, "analyst", PASSWORD)
    statuses, no = _hogged(env, root, 1)
    # the first account's second run, then the second account's first: three of four slots; its second would
    # take the last, kept for an account with none, which gets it
    assert statuses == [201, 201, 201, 429, 201], statuses
    said = re.fullmatch(
        r"privrelease gate: (\d+) runs are running or waiting for the worker, which runs (\d+) at once; 1 of its slots "
        r"are kept for accounts with no run going, and you have 1 not finished: start this one when one of yours has finished",
        no.json()["exception_message"],
    )
    assert refused(no) and said and int(said[1]) == int(said[2]) - 1, no.text  # refused with one slot free
    # the weakened gate: the two accounts take all four slots (the other account's run queues behind them)
    assert _hogged(env, root, 0)[0] == [201] * 5


def test_when_prefect_does_not_say_how_many_runs_wait_for_the_worker_the_run_is_not_started():
    async def count(flow_runs: dict) -> int | None:
        return None if "expected_start_time" in flow_runs else 1  # the account's one run; the pool's unknown

    async def create():
        raise AssertionError("a run was created without the pool's runs counted")

    answer = anyio.run(Quotas(limits.Limits(), count).start, "nora", {"parameters": {}}, create)
    assert answer == (503, "Prefect's server did not say how many runs wait for the worker: try again in a moment")
