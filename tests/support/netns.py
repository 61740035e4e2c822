"""Two hosts on separate network stacks for the test suite: Linux network namespaces joined by a veth pair.

``two_hosts()`` makes namespaces A and B (loopback up in each), a veth pair between them with
``A_ADDR`` in A and ``B_ADDR`` in B, and nothing in the caller's own namespace (no address or
route there, so other users of the machine are not disturbed). ``inside(ns)`` moves the calling
thread into a namespace until the block ends: what it starts (subprocesses, the threads of a
connection pool) stays there. ``exec_in(ns)`` is the command prefix for a process on the other host.
Everything is removed when the block ends, also on failure. Needs root (``ip netns add``); where
namespaces cannot be created the test is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import subprocess
from collections.abc import Iterator

import pytest

A_ADDR, B_ADDR = "10.28.0.1", "10.28.0.2"  # inside the namespaces only
_CLONE_NEWNET = 0x40000000


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr.strip()}"


def exec_in(ns: str) -> list[str]:
    """The prefix that runs a command in namespace ``ns``."""
    return ["ip", "netns", "exec", ns]


def _setns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
    finally:
        os.close(fd)


@contextlib.contextmanager
def inside(ns: str) -> Iterator[None]:
    """Run the block's thread (and what it starts) in namespace ``ns``; back to its own namespace after."""
    back = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        _setns(f"/run/netns/{ns}")
        try:
            yield
        finally:
            if ctypes.CDLL(None, use_errno=True).setns(back, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the test's own network namespace")
    finally:
        os.close(back)


@contextlib.contextmanager
def two_hosts() -> Iterator[tuple[str, str]]:
    """Namespaces (A, B) joined by a veth pair; yields their names."""
    if os.geteuid() != 0:
        pytest.skip("two hosts on separate network stacks need root to create network namespaces (ip netns add)")
    tag = secrets.token_hex(3)  # tests of several worktrees may run at once
    a, b = f"privrelease-{tag}-a", f"privrelease-{tag}-b"
    made: list[str] = []
    try:
        for ns in (a, b):
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("link", "add", f"pr{tag}a", "netns", a, "type", "veth", "peer", "name", f"pr{tag}b", "netns", b)
        for ns, dev, addr in ((a, f"pr{tag}a", A_ADDR), (b, f"pr{tag}b", B_ADDR)):
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
        yield a, b
    finally:
        for ns in made:  # removes the veth pair with them
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
