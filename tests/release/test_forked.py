"""``parallel.forked``, the one way work is spread over forked processes (the charts' drawing, the spam server's
r^n): a child never returns into its caller's code whatever interrupts it, and a caller interrupted while its children
run kills and reaps them. Each runs in a fresh interpreter, so a child that escaped would show as a second line of
output instead of running on inside pytest."""

from __future__ import annotations

import subprocess
import sys

CHILD_INTERRUPTED = """
import os
from privrelease.core import parallel
parent, close = os.getpid(), os.close

def interrupted_close(fd):
    if os.getpid() != parent:
        raise KeyboardInterrupt  # a Ctrl-C landing in a child just after the fork
    close(fd)

parallel.os.close = interrupted_close
try:
    said = parallel.forked(lambda n: b"done", [0, 1, 2])
    print(os.getpid() == parent, [status != 0 for _, status in said], said[0][0].decode(), flush=True)
except BaseException as exc:  # what a caller that goes on after an error (the spam server's loop) would see
    print("raised in", "the caller" if os.getpid() == parent else "a child", type(exc).__name__, flush=True)
"""

PARENT_INTERRUPTED = """
import os, time
from privrelease.core import parallel
parent = os.getpid()

def job(n):
    if os.getpid() == parent:
        raise KeyboardInterrupt  # Ctrl-C while the children work
    time.sleep(60)
    return b"late"

started = time.monotonic()
try:
    parallel.forked(job, [0, 1, 2])
except KeyboardInterrupt:
    try:
        os.waitpid(-1, os.WNOHANG)
        left = "a child left"
    except ChildProcessError:
        left = "no child left"
    print(left, time.monotonic() - started < 10)
"""


def run(script: str) -> list[str]:
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()


def test_a_child_interrupted_as_it_starts_ends_there_and_never_returns_into_its_caller():
    assert run(CHILD_INTERRUPTED) == ["True [False, True, True] done"]


def test_a_caller_interrupted_while_its_children_work_kills_and_reaps_them():
    assert run(PARENT_INTERRUPTED) == ["no child left True"]
