"""Who holds a charge: the process that reserved it, and whether it can still settle it.

A holder is public bookkeeping (host name, process id, process start time), never data. On its own
host a holder is alive while a process with its id and start time exists, so a reused pid does not
keep a dead charge open; a holder on another host is trusted until its lease runs out.

With one ledger shared by workers with different homes (PostgreSQL), a dead holder's charge is
settled by a command run in its own home, which holds its release folders; another home settles it
only once its lease ran out (as failed, since it cannot see the other home's folders).
"""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

from privrelease.core import settings

DEFAULT_LEASE_S = 6 * 3600


def _start_time(pid: int) -> str | None:
    """The process's start (boot id and clock ticks since boot), or None where /proc is missing;
    "exited" for a killed process its parent has not reaped yet (a zombie cannot settle anything)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    return "exited" if fields[0] in ("Z", "X") else f"{boot}:{fields[19]}"


def lease_seconds() -> float:
    return settings.number(settings.LEASE_SECONDS, DEFAULT_LEASE_S)


def me(home: Path) -> str:
    """This process, working in ``home``, as a holder (canonical JSON, as stored in the ledger)."""
    pid = os.getpid()
    doc = {"host": socket.gethostname(), "pid": pid, "start": _start_time(pid), "lease_s": lease_seconds(), "home": str(home)}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def _expired(since: str, lease_s: float, now: datetime | None) -> bool:
    return ((now or datetime.now(UTC)) - datetime.fromisoformat(since)).total_seconds() >= lease_s


def ours(holder: str | None, since: str, home: Path, now: datetime | None = None) -> bool:
    """Whether a command in ``home`` may settle this dead holder's charge: its own, or one whose lease ran out."""
    doc = json.loads(holder) if holder else {}
    return doc.get("home", str(home)) == str(home) or _expired(since, doc["lease_s"], now)


def alive(holder: str | None, since: str, now: datetime | None = None) -> bool:
    """Whether the holder of a charge made at ``since`` (ISO time) may still settle it."""
    if holder is None:  # a charge from before holders were recorded: its lease alone decides
        return not _expired(since, DEFAULT_LEASE_S, now)
    doc = json.loads(holder)
    if doc["host"] != socket.gethostname():
        return not _expired(since, doc["lease_s"], now)
    try:
        os.kill(doc["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process with that id exists
    return doc["start"] is None or _start_time(doc["pid"]) == doc["start"]
