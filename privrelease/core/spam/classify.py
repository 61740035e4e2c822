"""Private classification: the client learns whether its score passes the model's cutoff; the server, that a query happened.

Once per model the server publishes its public keys (Paillier, DGK) and E[W_j], W_j = round(2^48·w_j).
The cutoff T (``privrelease.core.spam.decision``: chosen on the evaluation mail, kept in the run's report.json with the
model) stays with the server, which subtracts it from what it decrypts, so S below reads as S − T and the
client learns [S > T]. Per message:

1. client → server  E[d], d = z + r with z = 2^ℓ + S − 1 ∈ [0, 2^{ℓ+1}) for S = Σ_{j∈x} W_j, and r
   uniform on [0, 2^{ℓ+1+κ}) from the OS. The server decrypts d: for any two scores the
   distributions of d differ by at most 2^{ℓ+1}/2^{ℓ+1+κ} = 2^{−κ} in total variation.
2. server → client  DGK encryptions of the ℓ low bits of d (d̂ = d mod 2^ℓ).
3. client → server  the DGK comparison's ℓ + 1 blinded, shuffled terms (``compare``) for d̂ vs
   r̂ = r mod 2^ℓ with the client's uniform bit δ_A. The server learns only δ_B, and
   δ_A ⊕ δ_B = t = [d̂ < r̂] (the carry of ẑ + r̂ into bit ℓ), so δ_B alone is a uniform bit.
4. server → client  β = ⌊d/2^ℓ⌋ ⊕ δ_B (mod 2), one bit. Since ⌊d/2^ℓ⌋ = z_ℓ + ⌊r/2^ℓ⌋ + t, the
   client reads z_ℓ = [S ≥ 1] = β ⊕ ⌊r/2^ℓ⌋ ⊕ δ_A (mod 2): spam iff z_ℓ = 1.

The client's view is the public keys, semantically secure ciphertexts and β, which is its own
answer XOR its own random bits. The server's view is d (2^{−κ}-close to a value independent of the
score), DGK terms that are 0 at most once and otherwise uniform non-zero in Z_u, and δ_B (uniform).
Semi-honest parties; the functionality itself is a sign oracle on the client's chosen x.

Parties share no objects: each holds its own secrets and they exchange bytes through a ``Wire``,
which records every message in the run's ``Channel`` labelled by inspecting the bytes.
"""

from __future__ import annotations

import hashlib
import json
import secrets

import gmpy2
import numpy as np
from phe import paillier

from privrelease.core import noise
from privrelease.core.errors import ParameterError
from privrelease.core.spam import compare as C
from privrelease.core.spam.paillier import PublicKey
from privrelease.core.spam.parties import Local
from privrelease.core.spam.wire import Channel, Message

SCALE_BITS = 48  # W_j = round(2^48·w_j), as in training
SCORE_BITS = 72  # ℓ: |S − 1| < 2^72, i.e. |wᵀx| < 2^24
KAPPA = 80  # statistical hiding of the score in what the server decrypts
PRODUCTION_BITS = 2048


def nth_power(r: int, p: gmpy2.mpz, q: gmpy2.mpz) -> gmpy2.mpz:
    """r^n mod p² for n = pq, as ((r^q mod p)^p mod p²: x^p mod p² depends only on x mod p and is
    multiplicative, so r^n = (r^p)^q ≡ ((r mod p)^q mod p)^p. Two exponents of |p| bits, one modulo p,
    instead of one of 2|p| bits modulo p²: 1.5× faster (bench/RESULTS.md), the same value."""
    return gmpy2.powmod(gmpy2.powmod(r % p, q % (p - 1), p), p, p * p)


def integer_weights(weights: np.ndarray) -> list[int]:
    """W_j = round(2^48·w_j): the integers the protocol's score S = Σ_{j∈x} W_j sums."""
    return [int(v) for v in np.rint(np.ldexp(np.asarray(weights, dtype=float), SCALE_BITS))]


# -- bytes on the wire -------------------------------------------------------------------------------


def pack_json(value: dict) -> bytes:
    return b"J" + json.dumps(value, sort_keys=True).encode()


def pack_ints(group: bytes, values: list[int], width: int) -> bytes:
    """``group`` names the ring the integers live in: P (Paillier, mod n²) or D (DGK, mod n)."""
    return b"I" + group + width.to_bytes(2, "big") + b"".join(int(v).to_bytes(width, "big") for v in values)


def pack_bit(bit: int) -> bytes:
    return b"B" + bytes([bit & 1])


def unpack(data: bytes) -> dict | list[int] | int:
    if data[:1] == b"J":
        return json.loads(data[1:])
    if data[:1] == b"B":
        return data[1]
    width = int.from_bytes(data[2:4], "big")
    return [int.from_bytes(data[i : i + width], "big") for i in range(4, len(data), width)]


class Wire:
    """Delivers bytes between the parties and records each message, labelled from its content.

    An integer payload is "ciphertext" only if every integer is a unit of the named ring with the
    bit length of a uniformly random element (a plaintext score or bit would be far shorter) and
    is not an encoding without randomness (Paillier's 1 + mn ≡ 1 mod n, DGK's g^m); anything else
    is "plaintext", key messages are "public"."""

    def __init__(self, channel: Channel):
        self.channel = channel
        self._rings: dict[bytes, tuple[int, int, set[int]]] = {}  # group → (modulus, n, encodings without randomness)

    def send(self, sender: str, receiver: str, kind: str, data: bytes) -> bytes:
        label, count = self.inspect(data)
        self.channel.log.append(
            Message(self.channel.round, sender, receiver, kind, label, count, len(data), hashlib.sha256(data).hexdigest())
        )
        return bytes(data)

    def inspect(self, data: bytes) -> tuple[str, int]:
        value = unpack(data)
        if isinstance(value, dict):
            if {"paillier_n", "dgk_n"} <= set(value):
                n, g = value["dgk_n"], value["dgk_g"]
                self._rings = {
                    b"P": (value["paillier_n"] ** 2, value["paillier_n"], set()),
                    b"D": (n, n, {int(gmpy2.powmod(g, m, n)) for m in range(value["dgk_u"])}),
                }
            return "public", len(value)
        if isinstance(value, int):
            return "plaintext", 1
        modulus, n, bare = self._rings.get(data[1:2], (0, 1, set()))
        random_looking = all(
            modulus.bit_length() - 64 <= v.bit_length() and v < modulus and gmpy2.gcd(v, n) == 1 and v % n != 1 and v not in bare
            for v in value
        )
        return ("ciphertext" if modulus and random_looking else "plaintext"), len(value)


# -- the parties ---------------------------------------------------------------------------------------


class ClassifyServer:
    """Owns the model, the Paillier and the DGK secret keys; sees one masked value and one bit per query."""

    name = "server"

    def __init__(self, weights: np.ndarray, p: int, q: int, dgk: C.DGKKey, cutoff: int = 0):
        self._w = integer_weights(weights)
        if sum(abs(v) for v in self._w) + abs(cutoff) + 1 >= 1 << SCORE_BITS:
            raise ParameterError(
                f"the model's weights sum to more than 2^{SCORE_BITS - SCALE_BITS} in magnitude; scores "
                "that large cannot be compared privately: retrain with a smaller learning rate."
            )
        self._cutoff = cutoff  # T: spam iff S > T (the client's comparison is [S − T ≥ 1])
        self._p, self._q, self._dgk = gmpy2.mpz(p), gmpy2.mpz(q), dgk
        self.public_key = PublicKey(int(p * q))
        self.public_key.check(1 << (SCORE_BITS + 2 + KAPPA), "the masked score")
        self._secret = paillier.PaillierPrivateKey(paillier.PaillierPublicKey(int(p * q)), int(p), int(q))
        self._high = 0

    @classmethod
    def generate(cls, weights: np.ndarray, key_bits: int = PRODUCTION_BITS, cutoff: int = 0) -> ClassifyServer:
        if key_bits < PRODUCTION_BITS and not noise.test_mode():
            raise ParameterError(
                f"classification keys need at least {PRODUCTION_BITS} bits outside test mode; "
                f"train the run with key_bits: {PRODUCTION_BITS} or more."
            )
        _, secret = paillier.generate_paillier_keypair(n_length=key_bits)
        t = C.PRODUCTION_T if key_bits >= C.PRODUCTION_BITS else 80
        dgk = C.DGKKey.generate(max(key_bits, 512), t, int(gmpy2.next_prime(3 * SCORE_BITS + 3)))
        return cls(weights, secret.p, secret.q, dgk, cutoff)

    def state(self) -> dict:
        """Everything needed to restore this server (its own secret, never sent)."""
        return {"paillier": {"p": int(self._p), "q": int(self._q)}, "dgk": self._dgk.to_dict()}

    @classmethod
    def restore(cls, weights: np.ndarray, state: dict, cutoff: int = 0) -> ClassifyServer:
        return cls(weights, state["paillier"]["p"], state["paillier"]["q"], C.DGKKey.from_dict(state["dgk"]), cutoff)

    def public_keys(self) -> bytes:
        dgk = self._dgk.public
        return pack_json(
            {
                "paillier_n": self.public_key.n,
                "dgk_n": dgk.n,
                "dgk_g": dgk.g,
                "dgk_h": dgk.h,
                "dgk_u": dgk.u,
                "dgk_t": dgk.t,
                "scale_bits": SCALE_BITS,
                "score_bits": SCORE_BITS,
                "kappa": KAPPA,
            }
        )

    @property
    def features(self) -> int:
        return len(self._w)

    def encrypt_weights(self, start: int, stop: int) -> list[int]:
        """E[W_j] for features start..stop−1, with r^n computed modulo p² and q² (the key holder's shortcut,
        ``nth_power``); the slow part of making a model's classifier (``privrelease.core.spam.service``)."""
        key, p, q = self.public_key, self._p, self._q
        p2, q2 = p * p, q * q
        q2_inv = gmpy2.invert(q2, p2)
        out = []
        for v in self._w[start:stop]:
            r = secrets.randbelow(key.n - 1) + 1
            rp, rq = nth_power(r, p, q), nth_power(r, q, p)
            out.append(int(key.encrypt(v, "w", rq + q2 * ((rp - rq) * q2_inv % p2))))
        return out

    def encrypted_weights(self) -> bytes:
        """E[W_j] for every feature, packed as published."""
        return pack_ints(b"P", self.encrypt_weights(0, self.features), self.public_key.ciphertext_bytes)

    def comparison_bits(self, data: bytes) -> bytes:
        """Step 2: decrypt d and subtract the cutoff T (d − T = z' + r for the score S − T, so the client
        reads [S > T]), keep ⌊d/2^ℓ⌋, send the DGK encryptions of d mod 2^ℓ bit by bit."""
        (c,) = unpack(data)
        d = int(self._secret.raw_decrypt(c)) - self._cutoff
        if d < 0 or d >> (SCORE_BITS + 2 + KAPPA):
            raise ParameterError("the masked score is out of range: the client must use the published parameters.")
        self._high = d >> SCORE_BITS
        return pack_ints(b"D", C.bit_ciphertexts(self._dgk, d, SCORE_BITS), (self._dgk.public.bits + 7) // 8)

    def masked_result(self, data: bytes) -> bytes:
        """Step 4: δ_B from the zero test, and β = ⌊d/2^ℓ⌋ ⊕ δ_B; then forget the query."""
        terms = unpack(data)
        if len(terms) != SCORE_BITS + 1:
            raise ParameterError(f"the comparison needs {SCORE_BITS + 1} terms: the client must use the published ones.")
        beta, self._high = (self._high ^ C.share(self._dgk, terms)) & 1, 0
        return pack_bit(beta)


class ClassifyClient:
    """Holds the published keys and E[W], and one message at a time; learns only each message's label."""

    name = "client"

    def __init__(self, keys: bytes, weights: bytes):
        k = unpack(keys)
        if (k["scale_bits"], k["score_bits"], k["kappa"]) != (SCALE_BITS, SCORE_BITS, KAPPA):
            raise ParameterError("the server published other classification parameters than this client implements.")
        self.public_key = PublicKey(k["paillier_n"])
        self.dgk = C.DGKPublic(k["dgk_n"], k["dgk_g"], k["dgk_h"], k["dgk_u"], k["dgk_t"])
        self._weights = [gmpy2.mpz(c) for c in unpack(weights)]
        self._r = self._delta = 0

    def _mask(self) -> int:
        return secrets.randbits(SCORE_BITS + 1 + KAPPA)

    def masked_score(self, features: np.ndarray) -> bytes:
        """Step 1: E[S + 2^ℓ − 1 + r]; the fresh encryption of 2^ℓ − 1 + r re-randomizes the product."""
        key, score = self.public_key, gmpy2.mpz(1)
        for j in np.asarray(features, dtype=np.int64):
            score = score * self._weights[j] % key.nsquare
        self._r = self._mask()
        out = key.add(score, key.encrypt((1 << SCORE_BITS) - 1 + self._r, "2^ℓ − 1 + r"))
        return pack_ints(b"P", [out], key.ciphertext_bytes)

    def comparison_terms(self, data: bytes) -> bytes:
        """Step 3: the DGK terms for d̂ < r mod 2^ℓ, with a fresh uniform δ_A."""
        self._delta = secrets.randbits(1)
        terms = C.blinded_terms(self.dgk, unpack(data), self._r & ((1 << SCORE_BITS) - 1), self._delta)
        return pack_ints(b"D", terms, (self.dgk.bits + 7) // 8)

    def label(self, data: bytes) -> str:
        """z_ℓ = β ⊕ ⌊r/2^ℓ⌋ ⊕ δ_A = [S ≥ 1]."""
        return "spam" if (unpack(data) ^ (self._r >> SCORE_BITS) ^ self._delta) & 1 else "ham"


def classify(server: Local, client: ClassifyClient, wire: Wire, features: np.ndarray) -> str:
    """One query (steps 1–4) for a message's features; the client was built from the server's published
    bytes. ``server`` is the server party: in its own process (``parties.Remote``) or, in tests, ``Local``."""
    score = wire.send(client.name, server.name, "masked-score", client.masked_score(features))
    bits = wire.send(server.name, client.name, "comparison-bits", server.call("comparison_bits", score))
    terms = wire.send(client.name, server.name, "comparison-terms", client.comparison_terms(bits))
    return client.label(wire.send(server.name, client.name, "masked-result", server.call("masked_result", terms)))
