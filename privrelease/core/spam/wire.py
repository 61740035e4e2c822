"""The messages of the spam protocol on the wire: how payloads are tagged and read, what a payload
holds (read from its bytes, ``inspect``), and the ``Channel`` that delivers bytes between parties and
records each message (never its content)."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field

import gmpy2

from privrelease.core.errors import ParameterError
from privrelease.core.spam import dropout as R
from privrelease.core.spam.paillier import PublicKey


def ciphertext_message(values: list, key: PublicKey) -> bytes:
    return b"C" + key.pack(values)


def public_message(value: dict) -> bytes:
    return b"J" + json.dumps(value, sort_keys=True).encode()


def read_ciphertexts(payload: bytes, key: PublicKey, count: int, what: str) -> list[gmpy2.mpz]:
    values = key.unpack(payload[1:]) if payload[:1] == b"C" else []
    if len(values) != count:
        raise ParameterError(f"{what}: expected {count} ciphertexts.")
    return values


def read_public(payload: bytes, what: str) -> dict:
    if payload[:1] != b"J":
        raise ParameterError(f"{what}: expected public parameters.")
    return json.loads(payload[1:])


def inspect(payload: bytes, key: PublicKey | None) -> tuple[str, int]:
    """What a payload holds, read from its bytes: ``ciphertext`` when every element is a
    re-randomized ciphertext (in Z*_{n²}, and c mod n ≠ 1: c ≡ 1 mod n means r = 1, i.e. the
    plaintext is readable as (c − 1)/n), ``sealed`` for AES-GCM records of shares (``dropout.RECORD``
    bytes each), ``shares`` for the Shamir shares survivors return for unmasking, ``public`` for
    parameters, ``plaintext`` for anything else."""
    tag, body = payload[:1], payload[1:]
    if tag == b"J":
        return "public", len(json.loads(body))
    if tag == b"S" and len(body) % R.RECORD == 0:
        return "sealed", len(body) // R.RECORD
    if tag == b"K":
        return "shares", sum(len(v) for v in R.read_shares(payload).values())
    if tag != b"C" or key is None or len(body) % key.ciphertext_bytes:
        return "plaintext", len(body)
    values = key.unpack(body)
    n = gmpy2.mpz(key.n)
    ok = all(0 < c < key.nsquare and c % n != 1 and gmpy2.gcd(c, n) == 1 for c in values)
    return ("ciphertext" if ok and values else "plaintext"), len(values)


@dataclass
class Message:
    round: int
    sender: str
    receiver: str
    kind: str
    payload: str  # from ``inspect``: ciphertext, public or plaintext
    count: int
    bytes: int
    digest: str


@dataclass
class Channel:
    """Delivers bytes between parties and records each message (never its content)."""

    key: PublicKey | None = None  # the server's public key, once published: lets ``inspect`` check ciphertexts
    log: list[Message] = field(default_factory=list)
    round: int = 0

    def deliver(self, sender: str, receiver: str, kind: str, payload: bytes) -> bytes:
        label, count = inspect(payload, self.key)
        self.log.append(
            Message(self.round, sender, receiver, kind, label, count, len(payload), hashlib.sha256(payload).hexdigest())
        )
        return payload

    def ciphertexts(self, sender: str, receiver: str, kind: str, values: list, key: PublicKey) -> list:
        self.key = key
        return key.unpack(self.deliver(sender, receiver, kind, ciphertext_message(values, key))[1:])

    def public(self, sender: str, receiver: str, kind: str, value: dict) -> dict:
        return read_public(self.deliver(sender, receiver, kind, public_message(value)), kind)


@dataclass
class StepTimes:
    """Seconds per protocol step in one round."""

    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, step: str, started: float) -> None:
        self.seconds[step] = self.seconds.get(step, 0.0) + time.perf_counter() - started
