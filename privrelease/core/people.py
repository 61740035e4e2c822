"""Who asks: the three roles a person may hold, and how a run or a command names the one who asked.

The accounts that hold these roles, with their passwords, are the gate's (``privrelease/gate/accounts.py``); the
ledger records the name ``requester`` gives, on every charge.
"""

from __future__ import annotations

import os
import pwd

ANALYST, AUDITOR, STEWARD = "analyst", "auditor", "steward"
ROLES = (ANALYST, AUDITOR, STEWARD)
REQUESTED_BY = "requested-by:"  # the tag the gate puts on every flow run it creates: who asked
PUBLISHES = "publishes"  # and on each that publishes (every run but a preview): counted per day (privrelease.gate.quotas)


def requester(tags=()) -> str:
    """Who asked for a run: the account the gate tagged it with, else this process's operating-system user
    (a command the operator typed, or a run the operator started without the gate), by its real uid:
    not ``$USER`` or ``$LOGNAME``, which whoever runs the command sets (an account's window would not hold)."""
    named = [t.removeprefix(REQUESTED_BY) for t in tags if t.startswith(REQUESTED_BY)]
    if len(named) == 1:
        return named[0]
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid with no passwd entry (a container's): the number is who it is
        return f"uid:{os.getuid()}"
