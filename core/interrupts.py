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


class Interrupted(Exception):
    """The user stopped a run (Ctrl-C); ``words`` say what became of its charge."""

    def __init__(self, words: str):
        super().__init__(words)
        self.words = words


def _handler(signum: int, frame: object) -> None:
    _seen.set()
    raise KeyboardInterrupt


def install() -> None:
    """Record every SIGINT before raising ``KeyboardInterrupt`` as Python's own handler does (signals reach the
    main thread only: elsewhere, as when a test calls the command line from a thread, nothing changes)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _handler)


def caused(exc: BaseException) -> bool:
    """Whether ``exc`` is, or followed, an interrupt by the user."""
    return isinstance(exc, (KeyboardInterrupt, Interrupted)) or _seen.is_set()
