"""Parties as parties: each in its own process with only its own secrets, talking in bytes.

``Remote`` starts a party in a fresh (spawned) process from a picklable factory; the orchestrator
(the flow) holds only the pipe and moves bytes between parties through the recording ``Channel``.
``Local`` runs a party in this process with the same interface (unit tests, benchmarks). The
orchestrator never sees a secret: the server's key and every user's mail and X25519 secret are
created inside their own process.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from core.errors import InternalError, UserError
from core.spam.paillier import PublicKey
from core.spam.protocol import Channel, StepTimes, read_public


class Local:
    """A party object in this process, behind the same send/receive interface as ``Remote``."""

    def __init__(self, party: Any):
        self.party = party
        self.name: str = party.name
        self._result: Any = None

    def send(self, method: str, *args: Any) -> None:
        self._result = getattr(self.party, method)(*args)

    def receive(self) -> Any:
        return self._result

    def call(self, method: str, *args: Any) -> Any:
        self.send(method, *args)
        return self.receive()

    def close(self) -> None:
        pass


class Remote(Local):
    """A party in its own spawned process; arguments and replies cross a pipe."""

    def __init__(self, name: str, factory: Callable[..., Any], *args: Any):
        context = mp.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, factory, args), name=f"spam-{name}", daemon=True)
        self._process.start()
        child.close()
        self.name = name
        self.receive()  # the party is built (or its error is raised here)

    def send(self, method: str, *args: Any) -> None:
        self._conn.send((method, args))

    def receive(self) -> Any:
        status, value = self._conn.recv()
        if status == "user-error":
            raise UserError(value)
        if status == "error":
            raise InternalError(f"the {self.name} process failed: {value}")
        return value

    def close(self) -> None:
        if self._process.is_alive():
            self._conn.send(None)
            self._process.join(timeout=10)
        self._conn.close()


def _serve(conn: Any, factory: Callable[..., Any], args: tuple) -> None:
    try:
        party = factory(*args)
        conn.send(("ok", None))
    except UserError as exc:
        conn.send(("user-error", str(exc)))
        return
    while (request := conn.recv()) is not None:
        method, payload = request
        try:
            conn.send(("ok", getattr(party, method)(*payload)))
        except UserError as exc:
            conn.send(("user-error", str(exc)))
        except Exception as exc:  # noqa: BLE001 - the orchestrator reports it; the party's state is not sent
            conn.send(("error", type(exc).__name__))


def setup(server: Local, users: list[Local], channel: Channel) -> None:
    """Key agreement over the server: announcements in, one directory out to every user."""
    announcements = [channel.deliver(u.name, server.name, "announcement", u.call("announce")) for u in users]
    directory = server.call("directory", *announcements)
    channel.key = PublicKey(int(read_public(directory, "directory")["n"]))
    for u in users:
        u.send("setup", channel.deliver(server.name, u.name, "directory", directory))
    for u in users:
        u.receive()


def train_round(server: Local, users: list[Local], channel: Channel, round_: int,
                precompute: bool = False) -> tuple[StepTimes, np.ndarray]:  # fmt: skip
    """One round: E[w] to every user, the users' masked gradients (computed concurrently when the
    parties are processes) back to the server, which decrypts only their sum and steps.
    ``precompute``: meanwhile the server prepares the next round's r^n (its offline phase)."""
    times = StepTimes()
    channel.round = round_
    t = time.perf_counter()
    weights = server.call("weights_message")
    times.add("1 server: encrypt w", t)
    t = time.perf_counter()
    for u in users:
        u.send("gradient", channel.deliver(server.name, u.name, "encrypted-weights", weights), round_)
    if precompute:
        server.send("precompute")
    replies = [channel.deliver(u.name, server.name, "masked-gradient", u.receive()) for u in users]
    if precompute:
        server.receive()
    times.add("2-3 users: gradient, pack, mask (concurrent)" + (" | server: next r^n" if precompute else ""), t)
    t = time.perf_counter()
    gradient = server.call("aggregate", *replies)
    times.add("4 server: sum, decrypt, update", t)
    return times, gradient
