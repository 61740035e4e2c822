"""How much one account may ask of the worker: the gate's limits where a run is created.

Each run an account starts through the gate (``create_flow_run``, after its body is rewritten) is
checked before it is passed on:

- its shape: its parameters at most ``parameters_kb`` KB of JSON and ``bounds.MAX_FORM_VALUES`` values (413), and a scheduled start at
  most ``ahead_days`` days ahead and at most an hour past (422);
- the runs the account asked this gate to start in the last minute, at most ``per_minute``
  (cancelled ones too: starting and cancelling in a loop fills Prefect's database as well; and those
  Prefect refused or failed on, 4xx or 5xx, whose parameters it checked and whose errors it logged all the same); Prefect's
  records cannot be filtered by when a run was created, so this gate keeps the times itself;
- the account's runs, counted from Prefect's own records by the requester tag the gate puts on
  every run it creates (``requested-by:<account>``), one count query each: runs not finished
  (scheduled, pending, running, paused or suspended for a steward, cancelling) at most ``runs``;
  for a run scheduled to start later than a minute from now, those already scheduled so at
  most ``scheduled``; and, for a run that publishes (every run but a preview, tagged ``publishes`` by the
  gate: an SDC release spends no budget, yet keeps a few MB on the worker's disk), those due in the last day or
  later, completed or not finished (failed and cancelled ones are not counted), at most ``releases`` (429 each);
- the pool's last ``reserved`` slots (``$PRIVRELEASE_POOL_RESERVED``), kept for accounts with no run
  going: an account with a run not finished may start another to run now only while fewer than
  ``pool - reserved`` runs (of anyone's, the operator's too) are running or due and waiting for the
  pool (429 otherwise). So ``pool / runs`` accounts cannot fill the pool between them: once it is
  nearly full only accounts with no run going add to it, and one of them waits at most for one run to
  end (checked under each account's lock: two accounts asking at the same instant may both pass).

The checks and the creation happen under the account's own lock in this gate, so requests sent at
once are counted one after the other (two gates in front of one server could each let one more
through, and each keeps its own minute). The limits are the operator's settings (``privrelease.core.limits``). Runs the operator starts on
Prefect's server directly, or its deployments' schedules make, carry no requester tag and are not
counted.
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import anyio
from pydantic import ValidationError
from starlette.responses import Response

from privrelease.core.limits import Limits
from privrelease.core.people import PUBLISHES, REQUESTED_BY
from privrelease.gate import bounds

Refusal = tuple[int, str]  # HTTP status, message
UNFINISHED = ["SCHEDULED", "PENDING", "RUNNING", "PAUSED", "CANCELLING"]
POOL_STATES = ["SCHEDULED", "PENDING", "RUNNING", "CANCELLING"]  # a run due now holds, or waits for, a slot of the pool
SOON = timedelta(minutes=1)  # a run due within this is started now; later, it is scheduled ahead
PAST = timedelta(hours=1)  # a start further back than this is refused (a clock a little behind is welcome)
MINUTE = 60.0
DAY = timedelta(days=1)


class Quotas:
    def __init__(self, limits: Limits, count: Callable[[dict], Awaitable[int | None]]):
        self.limits = limits
        self.count = count  # how many of Prefect's flow runs match a filter (None: the server did not say)
        self._locks: dict[str, anyio.Lock] = {}
        self._started: dict[str, deque[float]] = {}  # when each account's last runs were created (monotonic)

    async def start(self, account: str, body: dict, create: Callable[[], Awaitable[Response]]) -> Response | Refusal:
        """``create()`` the run ``body`` asks for, or why not (a status and a message)."""
        now = datetime.now(UTC)
        refusal, later = self.shape(body, now)
        if refusal is not None:
            return refusal
        async with self._locks.setdefault(account, anyio.Lock()):
            started = self._started.setdefault(account, deque())
            while started and started[0] <= time.monotonic() - MINUTE:
                started.popleft()
            if len(started) >= self.limits.per_minute:
                wait = math.ceil(started[0] + MINUTE - time.monotonic())
                return 429, (
                    f"you started {len(started)} runs in the last minute; the limit is {self.limits.per_minute} "
                    f"a minute per account: start it again in {wait} s"
                )
            refusal = await self.counted(account, now, later, PUBLISHES in body.get("tags", []))
            if refusal is not None:
                return refusal
            response = await create()
            started.append(time.monotonic())  # refused or failed by Prefect too: it took its time all the same
            return response

    def shape(self, body: dict, now: datetime) -> tuple[Refusal | None, bool]:
        """Why the run ``body`` asks for is refused whoever asks (None: it is not), and whether it is scheduled
        to start later than a minute from now."""
        limits = self.limits
        size = len(json.dumps(body.get("parameters", {})).encode())
        many = bounds.nodes(body.get("parameters", {}))
        if size > limits.parameters_kb * 1024 or many > bounds.MAX_FORM_VALUES:
            return (
                413,
                f"the run's parameters take {size / 1024:.0f} KB of JSON in {many} values; the limit is "
                f"{limits.parameters_kb} KB and {bounds.MAX_FORM_VALUES} values: a form's parameters name a "
                "registered dataset and its settings, never data",
            ), False
        when = ((body.get("state") or {}).get("state_details") or {}).get("scheduled_time")
        if when is None:
            return None, False
        try:
            start = bounds.TIME.validate_python(when)  # as Prefect's server parses it
        except (ValidationError, ValueError):
            return (
                422,
                f"the run's scheduled time {str(when)[:40]!r} is not a time: send an ISO 8601 time, e.g. 2030-01-31T06:00:00Z",
            ), False
        start = start if start.tzinfo else start.replace(tzinfo=UTC)
        if start - now > timedelta(days=limits.ahead_days):
            return (
                422,
                f"the run is scheduled {(start - now).days} days ahead; the limit is {limits.ahead_days} days: "
                f"schedule it at most {limits.ahead_days} days from now",
            ), True
        if now - start > PAST:  # started "years late": every dashboard's lateness would read so
            return (
                422,
                f"the run is scheduled {str(when)[:40]!r}, in the past: leave the time out to start it now, or schedule it ahead",
            ), False
        return None, start - now > SOON

    async def counted(self, account: str, now: datetime, later: bool, publishes: bool = False) -> Refusal | None:
        """Why the account may not start another run (``later``: one scheduled for later; ``publishes``: one that
        publishes), counted from Prefect's records; None: it may."""
        limits, tag = self.limits, {"tags": {"all_": [f"{REQUESTED_BY}{account}"]}}
        checks = [
            (
                tag | {"state": {"type": {"any_": UNFINISHED}}},
                limits.runs,
                "you have {n} runs not finished; the limit is {limit} per account: wait for one to finish or cancel one",
            )
        ]
        if later:
            checks.append(
                (
                    tag
                    | {"state": {"type": {"any_": ["SCHEDULED"]}}, "expected_start_time": {"after_": (now + SOON).isoformat()}},
                    limits.scheduled,
                    "you have {n} runs scheduled for later; the limit is {limit} per account: cancel one, or start this one now",
                )
            )
        if publishes:
            checks.append(
                (
                    {
                        "tags": {"all_": [f"{REQUESTED_BY}{account}", PUBLISHES]},
                        "state": {"type": {"any_": ["COMPLETED", *UNFINISHED]}},
                        "expected_start_time": {"after_": (now - DAY).isoformat()},
                    },
                    limits.releases,
                    "you have started {n} runs that publish in the last 24 hours (previews are not counted); the limit is "
                    "{limit} a day per account: preview it instead, or publish it once the first of them is a day old",
                )
            )
        counted = []
        for flow_runs, limit, says in checks:
            n = await self.count(flow_runs)
            if n is None:
                return 503, "Prefect's server did not say how many runs you have: try again in a moment"
            if n >= limit:
                return 429, says.format(n=n, limit=limit)
            counted.append(n)
        unfinished = counted[0]
        return None if later or not unfinished else await self.reserved(unfinished, now)

    async def reserved(self, mine: int, now: datetime) -> Refusal | None:
        """Why an account with ``mine`` runs not finished may not start one more now: the pool's last free slots
        are kept for accounts with none (the next slot goes to them); None: it may."""
        limits = self.limits
        if not limits.reserved:
            return None
        due = {"state": {"type": {"any_": POOL_STATES}}, "expected_start_time": {"before_": (now + SOON).isoformat()}}
        taken = await self.count(due)
        if taken is None:
            return 503, "Prefect's server did not say how many runs wait for the worker: try again in a moment"
        if taken < limits.pool - limits.reserved:
            return None
        return 429, (
            f"{taken} runs are running or waiting for the worker, which runs {limits.pool} at once; {limits.reserved} "
            f"of its slots are kept for accounts with no run going, and you have {mine} not finished: start this one "
            "when one of yours has finished"
        )
