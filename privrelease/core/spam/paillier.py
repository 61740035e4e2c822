"""Paillier on raw gmpy2 integers (g = n + 1), with the key holder's CRT shortcuts and checked ranges.

Plaintexts are integers mod n, read as signed in (−n/2, n/2) where a caller wants that. Every
value a party encrypts and every decryption is checked against the bound the caller states, so a
scale that would wrap around raises ``Overflow`` instead of silently corrupting the model.
All randomness comes from ``secrets`` (the OS). Ciphertexts travel as fixed-width big-endian bytes.

The key holder encrypts and decrypts modulo p² and q² separately. A fresh r^n mod n², r uniform
in Z*_n, is a uniform element of the n-th residues; its CRT halves are uniform elements of the
order-(p−1) subgroup mod p² and of the order-(q−1) subgroup mod q², which the key holder samples as
u^p mod p² and v^q mod q² (exponents of half the size, moduli of half the size: about 8× cheaper)
with the same distribution. Keys are checked against ``phe`` in the tests.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from functools import cached_property

import gmpy2

from privrelease.core import noise, parallel, settings
from privrelease.core.errors import InternalError, ParameterError

MIN_BITS = 2048  # outside test mode
TEST_MIN_BITS = 512
BATCH = 256  # fresh r^n a forked process draws at least (``KeyPair.obfuscators``): fewer are drawn here alone


class Overflow(ParameterError):
    """A fixed-point value left the plaintext range: the key is too small for the scales."""


def check_bits(bits: int) -> int:
    """Key sizes: 2048 and up; smaller (down to 512) only in test mode."""
    floor = TEST_MIN_BITS if noise.test_mode() else MIN_BITS
    if bits < floor or bits % 8:
        raise ParameterError(
            f"key_bits must be a multiple of 8 and at least {MIN_BITS} (3072 recommended past 2030); "
            f"smaller keys (down to {TEST_MIN_BITS}) are for test runs only ({settings.TEST_MODE}=1)."
        )
    return bits


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
        """Signed plaintexts are integers of magnitude below this."""
        return self.n // 2

    def check(self, value: int, what: str) -> int:
        if abs(value) >= self.half:
            raise Overflow(
                f"{what} needs {abs(value).bit_length()} bits but a {self.bits}-bit key holds {self.half.bit_length()}; "
                "use larger key_bits or smaller scales."
            )
        return value

    def obfuscator(self) -> gmpy2.mpz:
        """A fresh r^n mod n², r uniform in Z*_n."""
        return gmpy2.powmod(secrets.randbelow(self.n - 1) + 1, self.n, self.nsquare)

    def trivial(self, value: int) -> gmpy2.mpz:
        """1 + n·value: an encryption of value with r = 1, only ever multiplied into a fresh one."""
        return (1 + gmpy2.mpz(self.n) * (value % self.n)) % self.nsquare

    def encrypt(self, value: int, what: str, obfuscator: gmpy2.mpz | None = None) -> gmpy2.mpz:
        self.check(value, what)
        return self.trivial(value) * (obfuscator or self.obfuscator()) % self.nsquare

    def add(self, a: gmpy2.mpz, b: gmpy2.mpz) -> gmpy2.mpz:
        return a * b % self.nsquare

    def add_plain(self, c: gmpy2.mpz, value: int, what: str) -> gmpy2.mpz:
        """E[m + value] without fresh randomness (the caller re-randomizes before sending)."""
        self.check(value, what)
        return c * self.trivial(value) % self.nsquare

    def scale(self, c: gmpy2.mpz, k: int) -> gmpy2.mpz:
        """E[k·m] for a signed integer k."""
        if k < 0:
            return gmpy2.powmod(gmpy2.invert(c, self.nsquare), -k, self.nsquare)
        return gmpy2.powmod(c, k, self.nsquare)

    def negate(self, c: gmpy2.mpz) -> gmpy2.mpz:
        return gmpy2.invert(c, self.nsquare)

    def rerandomize(self, c: gmpy2.mpz, obfuscator: gmpy2.mpz | None = None) -> gmpy2.mpz:
        return c * (obfuscator or self.obfuscator()) % self.nsquare

    def pack(self, values: list) -> bytes:
        width = self.ciphertext_bytes
        return b"".join(int(v).to_bytes(width, "big") for v in values)

    def unpack(self, raw: bytes) -> list[gmpy2.mpz]:
        width = self.ciphertext_bytes
        if len(raw) % width:
            raise ParameterError(f"a ciphertext vector must be a multiple of {width} bytes long.")
        return [gmpy2.mpz(int.from_bytes(raw[i : i + width], "big")) for i in range(0, len(raw), width)]


def _prime(bits: int) -> gmpy2.mpz:
    """A random prime of exactly ``bits`` bits (the top two bits set, so p·q has 2·bits bits)."""
    start = gmpy2.mpz(secrets.randbits(bits)) | (3 << (bits - 2))
    return gmpy2.next_prime(start)


class KeyPair:
    """The server's keys. Only the server's process ever holds one."""

    def __init__(self, bits: int):
        check_bits(bits)
        while True:
            p, q = _prime(bits // 2), _prime(bits // 2)
            # gcd(n, φ(n)) = 1 makes x → x^n a bijection on the n-th residues' CRT halves (see the module docstring)
            if p != q and (p * q).bit_length() == bits and gmpy2.gcd(p * q, (p - 1) * (q - 1)) == 1:
                break
        self._p, self._q = p, q
        self._p2, self._q2 = p * p, q * q
        n = p * q
        self.public = PublicKey(int(n))
        self._hp = gmpy2.invert(self._l(gmpy2.powmod(n + 1, p - 1, self._p2), p), p)
        self._hq = gmpy2.invert(self._l(gmpy2.powmod(n + 1, q - 1, self._q2), q), q)
        self._q_inv_p = gmpy2.invert(q, p)
        self._q2_inv_p2 = gmpy2.invert(self._q2, self._p2)

    @staticmethod
    def _l(x: gmpy2.mpz, m: gmpy2.mpz) -> gmpy2.mpz:
        return (x - 1) // m

    def obfuscator(self) -> gmpy2.mpz:
        """A fresh r^n mod n² with the CRT: u^p mod p² and v^q mod q², recombined."""
        a = gmpy2.powmod(secrets.randbelow(int(self._p2) - 1) + 1, self._p, self._p2)
        b = gmpy2.powmod(secrets.randbelow(int(self._q2) - 1) + 1, self._q, self._q2)
        return b + self._q2 * ((a - b) * self._q2_inv_p2 % self._p2)

    def obfuscators(self, count: int) -> list[gmpy2.mpz]:
        """``count`` fresh r^n mod n² (``obfuscator``), on every core of this host: a batch of ``BATCH`` or more
        per core is drawn in processes forked from this one (the server's own: they hold the key as it does, draw
        from the OS each, and end with their batch)."""
        ways = max(1, min(len(os.sched_getaffinity(0)), count // BATCH))
        sizes = [count // ways + (i < count % ways) for i in range(ways)]
        drawn = parallel.forked(lambda size: self.public.pack([self.obfuscator() for _ in range(size)]), sizes)
        if any(status or len(raw) != size * self.public.ciphertext_bytes for (raw, status), size in zip(drawn, sizes)):
            raise InternalError("a process drawing the server's encryption randomness failed; nothing was encrypted with it")
        return [r for raw, _ in drawn for r in self.public.unpack(raw)]

    def encrypt(self, value: int, what: str) -> gmpy2.mpz:
        return self.public.encrypt(value, what, self.obfuscator())

    def raw_decrypt(self, c: gmpy2.mpz) -> gmpy2.mpz:
        """The plaintext in [0, n), by the CRT."""
        p, q = self._p, self._q
        mp = self._l(gmpy2.powmod(c, p - 1, self._p2), p) * self._hp % p
        mq = self._l(gmpy2.powmod(c, q - 1, self._q2), q) * self._hq % q
        return mq + q * ((mp - mq) * self._q_inv_p % p)

    def decrypt(self, c: gmpy2.mpz, bound: int, what: str) -> int:
        """The signed plaintext, checked to lie below ``bound`` in magnitude."""
        m = int(self.raw_decrypt(gmpy2.mpz(c)))
        value = m - self.public.n if m > self.public.half else m
        if abs(value) >= bound:
            raise Overflow(
                f"{what} decrypted outside its range (|value| >= 2^{bound.bit_length() - 1}); the scales do not fit the key."
            )
        return value
