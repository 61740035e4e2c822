"""Ctrl-C: a run its user stopped, told apart from a failure.

A SIGINT raises ``KeyboardInterrupt`` in Python code, but inside a DuckDB query DuckDB stops the
query and raises its own ``RuntimeError('Query interrupted')`` instead, which would read as a bug.
``install`` (the command line's) records that an interrupt arrived, so ``caused`` can tell either
exception apart from a real failure. A charged run stopped after its charge raises ``Interrupted``,
which says what became of the charge.
"""

from __future__ import annotations

import signal
import threading

_seen = threading.Event()

BEFORE = "stopped (Ctrl-C) before its charge: nothing was charged and nothing published."


class Interrupted(Exception):
    """The user stopped a run (Ctrl-C); ``words`` say what became of its charge."""

    def __init__(self, words: str):
        super().__init__(words)
        self.words = words


def published(release_id: str, seq: int, phrase: str) -> str:
    """The words for a run stopped once its release was in place: its charge (``phrase``) recorded as published."""
    return (
        f"stopped (Ctrl-C) after publishing: release {release_id} is in place, ledger entry #{seq} ({phrase}) "
        "records it as published."
    )


def _handler(signum: int, frame: object) -> None:
    _seen.set()
    raise KeyboardInterrupt


def install() -> None:
    """Record every SIGINT before raising ``KeyboardInterrupt`` as Python's own handler does (signals reach the
    main thread only: elsewhere, as when a test calls the command line from a thread, nothing changes)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _handler)


def seen() -> bool:
    """Whether the user interrupted this process (what a Prefect task logs after that is a consequence of it)."""
    return _seen.is_set()


def caused(exc: BaseException) -> bool:
    """Whether ``exc`` is, or followed, an interrupt by the user."""
    return isinstance(exc, (KeyboardInterrupt, Interrupted)) or seen()
