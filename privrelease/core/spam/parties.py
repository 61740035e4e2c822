"""Parties as parties: each in its own process with only its own secrets, talking in bytes.

``Remote`` starts a party in a fresh (spawned) process from a picklable factory; the orchestrator
(the flow) holds only the pipe and moves bytes between parties through the recording ``Channel``.
``Local`` runs a party in this process with the same interface (unit tests, benchmarks). The
orchestrator never sees a secret: the server's key and every user's mail and X25519 secret are
created inside their own process.

A user whose process died (its pipe closed or broken, the process gone) or that did not answer
within the public ``timeout`` has left (``Dropped``): it is out for the rest of the run, and the
round goes on with the others if at least the threshold remain (``privrelease.core.spam.dropout``). The server
leaving fails the run.
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from privrelease.core.errors import InternalError, UserError
from privrelease.core.spam.paillier import PublicKey
from privrelease.core.spam.wire import Channel, StepTimes, read_public


class Dropped(Exception):
    """A party left: its process died, its pipe broke, or it did not answer in time."""


GONE = (EOFError, BrokenPipeError, ConnectionResetError)


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

    def __init__(self, name: str, factory: Callable[..., Any], *args: Any, timeout: float | None = None):
        context = mp.get_context("spawn")
        self.timeout = timeout  # seconds a reply may take before the party counts as left (None: no limit)
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, factory, args), name=f"spam-{name}", daemon=True)
        self._process.start()
        child.close()
        self.name = name
        self.receive()  # the party is built (or its error is raised here)

    def send(self, method: str, *args: Any) -> None:
        if not self._process.is_alive():
            raise Dropped(f"the {self.name} process is gone")
        try:
            self._conn.send((method, args))
        except GONE:
            raise Dropped(f"the {self.name} process is gone") from None

    def receive(self) -> Any:
        try:
            if self.timeout is not None and not self._conn.poll(self.timeout):
                self._process.kill()  # a hung party is out for good: it must not come back mid-run
                self._process.join(10)
                raise Dropped(f"the {self.name} process did not answer within {self.timeout:g} s")
            status, value = self._conn.recv()
        except GONE:
            raise Dropped(f"the {self.name} process is gone") from None
        if status == "user-error":
            raise UserError(value)
        if status == "error":
            raise InternalError(f"the {self.name} process failed: {value}")
        return value

    def close(self) -> None:
        if self._process.is_alive():
            try:
                self._conn.send(None)
            except GONE:
                pass
            self._process.join(timeout=10)
            if self._process.is_alive():
                self._process.kill()
        self._conn.close()


def _serve(conn: Any, factory: Callable[..., Any], args: tuple) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a party that crashes leaves no core file of its keys or mail
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


def post(users: list[Local], method: str, args: Callable[[Local], tuple]) -> list[Local]:
    """Send ``method`` to every user; returns those still there."""
    sent = []
    for u in users:
        try:
            u.send(method, *args(u))
            sent.append(u)
        except Dropped:
            pass
    return sent


def collect(users: list[Local]) -> list[tuple[Local, Any]]:
    """Every user's reply; users that left meanwhile are left out."""
    out = []
    for u in users:
        try:
            out.append((u, u.receive()))
        except Dropped:
            pass
    return out


def each(users: list[Local], method: str, args: Callable[[Local], tuple]) -> list[tuple[Local, Any]]:
    """``method`` on every user concurrently (all sends, then all replies); users that left are left out."""
    return collect(post(users, method, args))


def share(server: Local, bundles: list[tuple[Local, bytes]], channel: Channel, kind: str) -> list[Local]:
    """Sealed shares from users, relayed by the server to every user that is still there."""
    relayed = server.call("relay", *[channel.deliver(u.name, server.name, kind, b) for u, b in bundles])
    return [
        u
        for u, _ in each(
            [u for u, _ in bundles], "hold", lambda u: (channel.deliver(server.name, u.name, kind, relayed[u.name]),)
        )
    ]


def setup(server: Local, users: list[Local], channel: Channel) -> None:
    """Key agreement over the server: announcements in, one directory out to every user (each agrees
    on its sealing keys; the mask secrets are each round's, ``train_round``). Every user must be there."""
    announcements = [channel.deliver(u.name, server.name, "announcement", u.call("announce")) for u in users]
    directory = server.call("directory", *announcements)
    channel.key = PublicKey(int(read_public(directory, "directory")["n"]))
    for u in users:
        u.send("setup", channel.deliver(server.name, u.name, "directory", directory))
    for u in users:
        u.receive()  # a user lost here stops the run (``training.Training.setup``)


def train_round(
    server: Local, users: list[Local], channel: Channel, round_: int, precompute: bool = False
) -> tuple[StepTimes, np.ndarray, list[Local]]:
    """One round among ``users`` (those that have not left): participants out and self-mask shares
    relayed, E[w] to every user, the users' masked gradients (computed concurrently when the
    parties are processes) back to the server, which asks the survivors for the shares that unmask
    the sum, decrypts only that sum and steps. Returns the survivors with the gradient: a user that
    left during the round is out for the rest of the run.
    ``precompute``: meanwhile the server prepares the next round's r^n (its offline phase)."""
    times = StepTimes()
    channel.round = round_
    t = time.perf_counter()
    message = server.call("round_message", round_)
    bundles = each(users, "begin", lambda u: (channel.deliver(server.name, u.name, "round", message),))
    ready = share(server, bundles, channel, "self-mask-shares")
    times.add("0 users: self-mask seeds, shared", t)
    t = time.perf_counter()
    weights = server.call("weights_message")
    times.add("1 server: encrypt w", t)
    t = time.perf_counter()
    sent = post(ready, "gradient", lambda u: (channel.deliver(server.name, u.name, "encrypted-weights", weights), round_))
    if precompute:
        server.send("precompute")
    replies = collect(sent)
    if precompute:
        server.receive()
    times.add("2-3 users: gradient, pack, mask (concurrent)" + (" | server: next r^n" if precompute else ""), t)
    t = time.perf_counter()
    received = {u.name: channel.deliver(u.name, server.name, "masked-gradient", g) for u, g in replies}
    request = server.call("unmask_request", received)
    survivors = [u for u, _ in replies]
    answers = each(survivors, "unmask", lambda u: (channel.deliver(server.name, u.name, "unmask-request", request),))
    gradient = server.call("aggregate", *[channel.deliver(u.name, server.name, "mask-shares", a) for u, a in answers])
    times.add("4-5 unmask: shares, rebuild masks, sum, decrypt, update", t)
    return times, gradient, survivors
