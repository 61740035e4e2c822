"""Paillier (phe with gmpy2) on signed fixed-point integers, with explicit range checks.

Plaintexts are integers in (−n/2, n/2), stored mod n. Every value a party encrypts, every
homomorphic product and every decryption is checked against the bound the caller states, so a
scale or mask that would wrap around raises ``Overflow`` instead of silently corrupting the
model. Ciphertexts are plain integers mod n²; ``rerandomize`` multiplies by a fresh r^n, which
every party applies before sending a ciphertext it derived from someone else's.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from functools import cached_property, partial

import gmpy2
from phe import paillier

from core import parallel
from core.errors import ParameterError


class Overflow(ParameterError):
    """A fixed-point value left the plaintext range: the key is too small for the scales."""


@dataclass(frozen=True)
class PublicKey:
    n: int

    @cached_property
    def nsquare(self) -> gmpy2.mpz:
        return gmpy2.mpz(self.n) * self.n

    @property
    def bits(self) -> int:
        return self.n.bit_length()

    @property
    def ciphertext_bytes(self) -> int:
        return (2 * self.bits + 7) // 8

    @property
    def half(self) -> int:
        """Plaintexts are signed integers of magnitude below this."""
        return self.n // 2

    def check(self, value: int, what: str) -> int:
        if abs(value) >= self.half:
            raise Overflow(
                f"{what} needs {abs(value).bit_length()} bits but a {self.bits}-bit key holds {self.half.bit_length()}; "
                "use larger key_bits or a smaller mask range."
            )
        return value

    def obfuscator(self) -> gmpy2.mpz:
        """A fresh r^n mod n²."""
        return gmpy2.powmod(secrets.randbelow(self.n - 1) + 1, self.n, self.nsquare)

    def obfuscators(self, count: int) -> list[gmpy2.mpz]:
        """``count`` fresh r^n (the costly part), fanned out in blocks over the current cluster.

        Only the public key travels; the cluster must be the party's own, since r^n is its secret."""
        pieces = 4 * parallel.workers() if count >= 256 else 1
        sizes = [count // pieces + (i < count % pieces) for i in range(pieces)]
        return [x for part in parallel.fan_out(partial(_obfuscators, self.n), sizes) for x in part]

    def encrypt(self, value: int, what: str, obfuscator: gmpy2.mpz | None = None) -> gmpy2.mpz:
        self.check(value, what)
        nude = (1 + gmpy2.mpz(self.n) * (value % self.n)) % self.nsquare  # g = n + 1
        return nude * (obfuscator or self.obfuscator()) % self.nsquare

    def add(self, a: gmpy2.mpz, b: gmpy2.mpz) -> gmpy2.mpz:
        return a * b % self.nsquare

    def add_plain(self, c: gmpy2.mpz, value: int, what: str) -> gmpy2.mpz:
        """E[m + value] without fresh randomness (the caller re-randomizes before sending)."""
        self.check(value, what)
        return c * ((1 + gmpy2.mpz(self.n) * (value % self.n)) % self.nsquare) % self.nsquare

    def scale(self, c: gmpy2.mpz, k: int) -> gmpy2.mpz:
        """E[k·m] for a signed integer k."""
        if k < 0:
            return gmpy2.powmod(gmpy2.invert(c, self.nsquare), -k, self.nsquare)
        return gmpy2.powmod(c, k, self.nsquare)

    def negate(self, c: gmpy2.mpz) -> gmpy2.mpz:
        return gmpy2.invert(c, self.nsquare)

    def rerandomize(self, c: gmpy2.mpz, obfuscator: gmpy2.mpz | None = None) -> gmpy2.mpz:
        return c * (obfuscator or self.obfuscator()) % self.nsquare


def _obfuscators(n: int, count: int) -> list[gmpy2.mpz]:
    key = PublicKey(n)
    return [key.obfuscator() for _ in range(count)]


class KeyPair:
    """The server's keys. Only the server object ever holds one."""

    def __init__(self, bits: int):
        if bits < 512:
            raise ParameterError("key_bits must be at least 512 (and 2048 outside tests).")
        pk, self._secret = paillier.generate_paillier_keypair(n_length=bits)
        self.public = PublicKey(int(pk.n))

    def decrypt(self, c: gmpy2.mpz, bound: int, what: str) -> int:
        """The signed plaintext, checked to lie below ``bound`` in magnitude."""
        m = int(self._secret.raw_decrypt(int(c)))
        value = m - self.public.n if m > self.public.half else m
        if abs(value) >= bound:
            raise Overflow(f"{what} decrypted outside its range (|value| >= 2^{bound.bit_length() - 1}); the scales do not fit the key.")
        return value
