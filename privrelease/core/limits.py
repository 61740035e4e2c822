"""How much of the worker one account may take, and how many runs the worker runs at once: the
operator's settings (``privrelease.core.settings``), with their defaults stated once, here.

The pool and worker limits bound the processes on the worker's host whoever asks (each release
process takes a few hundred MB); the per-account limits, which the gate applies where a run is
created (``privrelease.gate.quotas``), keep one account from taking every slot or filling Prefect's database:
its runs not finished, its runs scheduled for later, the runs it starts in a minute, the runs that
publish it starts in a day, the size of a run's parameters and how far ahead a run may be scheduled; the pool's slots kept for accounts with no
run going (an account with one may start another only while more are free); and the calls the gate answers at once,
in all and per account (``privrelease.gate.fair``). How long one run may take bounds what a run costs the worker whatever its
settings (``privrelease.flows.steps.time_limited``). ``python -m privrelease.core.limits pool`` prints one
(what ``make serve`` passes to Prefect).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields

from privrelease.core import settings
from privrelease.core.errors import UserError


@dataclass(frozen=True)
class Limits:
    pool: int = 4  # flow runs running at once in the privrelease pool, over all its workers
    worker: int = 4  # flow runs one worker runs at once (its processes)
    runs: int = 2  # an account's runs not finished: scheduled, pending, running, paused, cancelling (half the pool:
    # one account cannot take every process of the worker)
    scheduled: int = 1  # of those, the ones scheduled to start later than a minute from now
    per_minute: int = 6  # runs an account starts in a minute
    parameters_kb: int = 16  # a run's parameters, as JSON (a form's: under 2 KB)
    ahead_days: int = 30  # how far ahead a run may be scheduled
    reserved: int = 1  # of the pool's slots, kept for accounts with no run going (0: none kept)
    calls: int = 32  # signed-in calls in the gate at once, of all accounts, shared fairly (privrelease.gate.fair)
    account_calls: int = 16  # of those, one account's (a browser opens at most 6 connections to a host)
    releases: int = 24  # runs an account starts in a day that publish (every run but a preview: an SDC release spends no
    # budget, yet keeps a few MB on the worker's disk and lengthens the catalogue)
    run_seconds: int = 3600  # how long a run the worker runs may take (a 10-round spam training: up to 45 min)
    preview_seconds: int = 120  # how long a form's preview may take (DPNE's costliest settings: 49 s on a loaded host)


VARIABLES = {
    "pool": settings.POOL_LIMIT, "worker": settings.WORKER_LIMIT, "runs": settings.ACCOUNT_RUNS,
    "scheduled": settings.ACCOUNT_SCHEDULED, "per_minute": settings.ACCOUNT_PER_MINUTE,
    "parameters_kb": settings.PARAMETERS_KB, "ahead_days": settings.SCHEDULE_AHEAD_DAYS,
    "reserved": settings.POOL_RESERVED, "calls": settings.GATE_CALLS, "account_calls": settings.ACCOUNT_CALLS,
    "releases": settings.ACCOUNT_RELEASES, "run_seconds": settings.RUN_SECONDS,
    "preview_seconds": settings.PREVIEW_SECONDS,
}  # fmt: skip


def configured() -> Limits:
    """The limits the environment sets; each unset one its default. A limit is a whole number, 1 or more (the
    slots reserved, 0 or more)."""
    values = {}
    for f in fields(Limits):
        name, least = VARIABLES[f.name], 0 if f.name == "reserved" else 1
        value = settings.get(name, str(f.default))
        if not value.isdigit() or int(value) < least:
            raise UserError(f"${name} is a whole number, {least} or more; got {settings.get(name)}")
        values[f.name] = int(value)
    return Limits(**values)


if __name__ == "__main__":
    try:
        print(getattr(configured(), sys.argv[1]))
    except UserError as error:
        sys.exit(f"privrelease: {error}")
