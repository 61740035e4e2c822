"""Who holds a charge: the process that reserved it, and whether it can still settle it.

A holder is public bookkeeping (host name, process id, process start time), never data. On its own
host a holder is alive while a process with its id and start time exists, so a reused pid does not
keep a dead charge open; a holder on another host is trusted until its lease runs out.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

LEASE_ENV = "PRIVRELEASE_LEASE_SECONDS"
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
    return float(os.environ.get(LEASE_ENV, DEFAULT_LEASE_S))


def me() -> str:
    """This process as a holder (canonical JSON, as stored in the ledger)."""
    pid = os.getpid()
    doc = {"host": socket.gethostname(), "pid": pid, "start": _start_time(pid), "lease_s": lease_seconds()}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def alive(holder: str | None, since: str, now: datetime | None = None) -> bool:
    """Whether the holder of a charge made at ``since`` (ISO time) may still settle it."""
    now = now or datetime.now(UTC)
    if holder is None:  # a charge from before holders were recorded: its lease alone decides
        return (now - datetime.fromisoformat(since)).total_seconds() < DEFAULT_LEASE_S
    doc = json.loads(holder)
    if doc["host"] != socket.gethostname():
        return (now - datetime.fromisoformat(since)).total_seconds() < doc["lease_s"]
    try:
        os.kill(doc["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process with that id exists
    return doc["start"] is None or _start_time(doc["pid"]) == doc["start"]
