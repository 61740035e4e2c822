"""Ctrl-C: a run its user stopped, told apart from a failure.

A SIGINT raises ``KeyboardInterrupt`` in Python code, but inside a DuckDB query DuckDB stops the
query and raises its own ``RuntimeError('Query interrupted')`` instead, which would read as a bug.
``install`` (the command line's) records that an interrupt arrived, so ``caused`` can tell either
exception apart from a real failure. A charged run stopped after its charge raises ``Interrupted``,
which says what became of the charge.

A run that goes on past the operator's time limit is stopped the same way, by a signal: ``limited``
raises ``TimeLimit`` in it once its time is up (and whatever it raises after that reads as the limit).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from privrelease.core.errors import TimeLimit

_seen = threading.Event()

BEFORE = "stopped (Ctrl-C) before its charge: nothing was charged and nothing published."


class Interrupted(Exception):
    """The user stopped a run (Ctrl-C); ``words`` say what became of its charge."""

    def __init__(self, words: str):
        super().__init__(words)
        self.words = words


def after_publishing(release_id: str, seq: int, phrase: str) -> str:
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


@contextmanager
def limited(seconds: int, words: str) -> Iterator[None]:
    """Stop what runs inside once ``seconds`` have passed: a SIGALRM raises ``TimeLimit(words)`` where it is, and
    any exception that comes out after it (a DuckDB query stopped by it raises its own) is that ``TimeLimit``;
    then the run's cleanup (its charge settled as failed, its processes ended) runs as after any failure. In the
    main thread only (signals reach no other): elsewhere, or inside another alarm, nothing is limited."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGALRM) not in (
        signal.SIG_DFL,
        None,
    ):
        yield
        return
    fired = threading.Event()

    def ring(signum: int, frame: object) -> None:
        fired.set()
        raise TimeLimit(words)

    signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except BaseException as exc:
        if fired.is_set() and not isinstance(exc, TimeLimit):
            raise TimeLimit(words) from None
        raise
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
