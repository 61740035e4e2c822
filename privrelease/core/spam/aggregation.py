"""Secure aggregation of the users' encrypted gradients: pairwise zero-sum masks over Z_n.

As in Bonawitz et al., "Practical Secure Aggregation for Privacy-Preserving Machine Learning"
(semi-honest server; users that leave: ``dropout``): every pair of users (u, v) agrees on a secret by X25519 over
the server, which only relays the public keys. From it each round's masks are expanded with
SHAKE-256 into integers uniform mod n (up to 2^-128 statistical distance); u adds them and v
subtracts them. One user's masked plaintext is then uniform on Z_n as long as one other user's
secret is unknown to the server, and the masks cancel in the sum of all users' messages. Each
round's masks run among that round's participants only.

Several fixed-point gradient coordinates are packed into one plaintext (``Layout``), each slot
offset to be non-negative and wide enough that the sum over all users cannot carry into the next
slot, so the server decrypts d / slots plaintexts instead of d.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from privrelease.core.errors import ParameterError

SEED_BYTES = 16  # a user's mask secret and each round's self-mask seed: one Shamir secret each (``dropout``)
W_BITS = 48  # C_w = 2^48: the scale of w, of a score wᵀx and of t = 2y − wᵀx
L1_BITS = 20  # public cap on ‖w‖₁ (2^20): bounds every score, and so the slot width


@dataclass(frozen=True)
class Layout:
    """How a user's d gradient coordinates (each 4·C_w·g_j, an integer) fill plaintexts mod n."""

    key_bits: int
    dimension: int
    users: int
    max_block: int  # the most messages any user sums in one round (public)
    noise_bits: int = 0  # with dp: a user's noise share stays below 2^noise_bits in magnitude (``dp.Noise``)

    @property
    def value_bits(self) -> int:
        """|4·C_w·g_j| < 2^value_bits for one user: max_block terms, each |t| < (2 + 2^20)·C_w, plus its
        noise share if any (|data + noise| < 2^max(data, noise) · 2)."""
        data = W_BITS + L1_BITS + 1 + math.ceil(math.log2(self.max_block + 1))
        return max(data, self.noise_bits) + (1 if self.noise_bits else 0)

    @property
    def slot_bits(self) -> int:
        """Room for the sum over all users of (value + 2^value_bits) ∈ [0, 2^(value_bits + 1))."""
        return self.value_bits + 1 + math.ceil(math.log2(self.users))

    @property
    def slots(self) -> int:
        return (self.key_bits - 2) // self.slot_bits  # the sum stays below 2^(key_bits − 2) < n

    @property
    def ciphertexts(self) -> int:
        return -(-self.dimension // self.slots)

    @property
    def offset(self) -> int:
        return 1 << self.value_bits

    def check(self) -> Layout:
        if self.slots < 1:
            raise ParameterError(
                f"a {self.key_bits}-bit key cannot hold one gradient slot of {self.slot_bits} bits; use larger key_bits."
            )
        return self

    def public(self) -> dict:
        return {
            "key_bits": self.key_bits,
            "dimension": self.dimension,
            "users": self.users,
            "max_block": self.max_block,
            "noise_bits": self.noise_bits,
            "w_bits": W_BITS,
            "l1_bits": L1_BITS,
            "slot_bits": self.slot_bits,
            "slots": self.slots,
        }

    def unpack(self, totals: list[int], contributors: int | None = None) -> list[int]:
        """The d summed slot values 4·C_w·Σ_users g_j from the decrypted sums of the plaintexts of
        ``contributors`` users (default: all)."""
        users = self.users if contributors is None else contributors
        mask, shift, k, b = (1 << self.slot_bits) - 1, users * self.offset, self.slots, self.slot_bits
        return [((totals[j // k] >> ((j % k) * b)) & mask) - shift for j in range(self.dimension)]


def new_seed() -> bytes:
    return os.urandom(SEED_BYTES)


def derive(seed: bytes, label: bytes, length: int = 32) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=b"privrelease-spam|" + label).derive(seed)


def expand(seed: bytes, round_: int, n: int, count: int) -> list[int]:
    """``count`` values uniform mod n (up to 2^-128) from a seed and a round: SHAKE-256."""
    width = (n.bit_length() + 128 + 7) // 8
    stream = hashlib.shake_256(seed + round_.to_bytes(8, "big")).digest(width * count)
    return [int.from_bytes(stream[i * width : (i + 1) * width], "big") % n for i in range(count)]


def self_mask(seed: bytes, round_: int, n: int, count: int) -> list[int]:
    return expand(derive(seed, b"self-mask"), round_, n, count)


class Agreement:
    """s_u: one user's X25519 key pair for the run, derived from a fresh 16-byte seed (the secret the
    user Shamir-shares, ``dropout``), and its pairwise seeds. The server rebuilds a left user's
    ``Agreement`` from the seed's shares to remove that user's masks toward the survivors."""

    def __init__(self, seed: bytes | None = None) -> None:
        self.seed = seed if seed is not None else new_seed()
        self._secret = X25519PrivateKey.from_private_bytes(derive(self.seed, b"x25519-s"))
        self._seeds: dict[int, tuple[int, bytes]] = {}

    def public_key(self) -> bytes:
        return self._secret.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def agree(self, me: int, keys: list[bytes], context: bytes) -> None:
        """Seeds with every other user; ``me`` is this user's index in ``keys`` (the public order)."""
        if len(set(keys)) != len(keys) or keys[me] != self.public_key():
            raise ParameterError("the user directory must list every user's key once, this user's at its own index.")
        self.agree_with(me, dict(enumerate(keys)), context)

    def agree_with(self, me: int, keys: dict[int, bytes], context: bytes) -> None:
        """Seeds with the users of ``keys`` (index → public key; this user's own at ``me``): a round's keys."""
        if len(set(keys.values())) != len(keys) or keys.get(me) != self.public_key():
            raise ParameterError("the round's mask keys must list every user's key once, this user's at its own index.")
        self._seeds = {}
        for v, key in keys.items():
            if v != me:
                shared = self._secret.exchange(X25519PublicKey.from_public_bytes(key))
                lo, hi = sorted((me, v))
                seed = hashlib.sha256(b"privrelease-spam-mask|" + context + b"|%d|%d|" % (lo, hi) + shared).digest()
                self._seeds[v] = (1 if me < v else -1, seed)

    def mask(self, n: int, round_: int, count: int, among: list[int] | None = None) -> list[int]:
        """This user's ``count`` mask values mod n for a round: Σ_v ±PRG(seed_uv) over the users v of
        ``among`` (default: all); zero-sum over any set of users that all mask among that set."""
        out = [0] * count
        for v, (sign, seed) in self._seeds.items():
            if among is None or v in among:
                for i, value in enumerate(expand(seed, round_, n, count)):
                    out[i] += sign * value
        return [v % n for v in out]

    @property
    def peers(self) -> int:
        return len(self._seeds)
