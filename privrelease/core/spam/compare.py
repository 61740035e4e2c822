"""DGK encryption and the DGK comparison of two private integers, with Veugen's improvements.

Damgård, Geisler and Krøigaard, "Efficient and Secure Comparison for On-Line Auctions": n = pq
with u | p − 1, q − 1 (u a small prime, the plaintext space Z_u) and t-bit primes v_p | p − 1,
v_q | q − 1; g has order u·v_p·v_q and h order v_p·v_q; E(m) = g^m·h^r mod n. Only whether m ≡ 0
(mod u) matters here, which the key holder tests as E(m)^{v_p} ≡ 1 (mod p). Hiding rests on the
hardness of factoring n and on the subgroup assumption (h^r, r of 2.5t bits, cannot be told from
a random element of Z_n^*).

Parameters: n of 2048 bits and t = 224 (the subgroup size NIST SP 800-57 pairs with 2048-bit
moduli, about 112-bit security; the paper's t = 160 gives about 80 bits against a generic
discrete-log search in <h>). Test mode accepts smaller keys.

The comparison (Veugen, "Improving the DGK comparison protocol"): B holds ℓ-bit d̂ and the secret
key, A holds ℓ-bit r̂ and a uniform bit δ_A. B sends E(d̂_i) for every bit; A computes, for each i,
c_i = d̂_i − r̂_i + s + 3·Σ_{j>i} (d̂_j ⊕ r̂_j) with s = 1 − 2δ_A, and the equality term
c_{−1} = (1 − δ_A) + Σ_j (d̂_j ⊕ r̂_j); it multiplies each by a random non-zero ρ_i ∈ Z_u,
re-randomizes and shuffles. Exactly one of them is 0 iff δ_A ⊕ [d̂ < r̂] = 1, so B's bit
δ_B = [some c is 0] and A's δ_A are XOR shares of [d̂ < r̂]: each alone is a uniform bit.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from functools import cached_property

import gmpy2

from privrelease.core import noise
from privrelease.core.errors import ParameterError

PRODUCTION_BITS, PRODUCTION_T = 2048, 224
WINDOW = 8  # fixed-base tables: one multiplication per 8 bits of an exponent
_shuffler = secrets.SystemRandom()


class FixedBase:
    """base^e mod m for e below 2^bits, from a table of base^(k·2^(WINDOW·i)): one product per window."""

    def __init__(self, base: int, modulus: int, bits: int):
        self.modulus, b, self._rows = gmpy2.mpz(modulus), gmpy2.mpz(base), []
        for _ in range(-(-bits // WINDOW)):
            row = [gmpy2.mpz(1)]
            for _ in range((1 << WINDOW) - 1):
                row.append(row[-1] * b % self.modulus)
            self._rows.append(row)
            b = row[-1] * b % self.modulus

    def power(self, e: int) -> gmpy2.mpz:
        out, m, mask = gmpy2.mpz(1), self.modulus, (1 << WINDOW) - 1
        for row in self._rows:
            out = out * row[e & mask] % m
            e >>= WINDOW
        return out


@dataclass(frozen=True)
class DGKPublic:
    n: int
    g: int
    h: int
    u: int
    t: int

    @property
    def bits(self) -> int:
        return self.n.bit_length()

    @cached_property
    def _h(self) -> FixedBase:
        return FixedBase(self.h, self.n, self.random_bits)

    @property
    def random_bits(self) -> int:
        """r of 2.5t bits makes h^r statistically close to uniform in <h> (the paper's choice)."""
        return 5 * self.t // 2

    def constant(self, m: int) -> gmpy2.mpz:
        """g^m without randomness, for m a small signed integer (combined, then re-randomized)."""
        n = self._h.modulus
        c = gmpy2.powmod(self.g, abs(m), n)
        return gmpy2.invert(c, n) if m < 0 else c

    def rerandomize(self, c: gmpy2.mpz) -> gmpy2.mpz:
        """c·h^r with fresh r of 2.5t bits from the OS."""
        return c * self._h.power(secrets.randbits(self.random_bits)) % self._h.modulus


class DGKKey:
    """The key holder's side: encryption by CRT with exactly uniform randomness, and the zero test."""

    def __init__(self, p: int, q: int, vp: int, vq: int, public: DGKPublic):
        self.p, self.q, self.vp, self.vq = gmpy2.mpz(p), gmpy2.mpz(q), gmpy2.mpz(vp), gmpy2.mpz(vq)
        self.public = public
        self._hp = FixedBase(gmpy2.mpz(public.h) % self.p, self.p, self.vp.bit_length())
        self._hq = FixedBase(gmpy2.mpz(public.h) % self.q, self.q, self.vq.bit_length())
        self._q_inv = gmpy2.invert(self.q, self.p)

    @classmethod
    def generate(cls, bits: int = PRODUCTION_BITS, t: int = PRODUCTION_T, u: int = 223) -> DGKKey:
        if (bits < PRODUCTION_BITS or t < PRODUCTION_T) and not noise.test_mode():
            raise ParameterError(f"DGK keys need at least {PRODUCTION_BITS} bits and t = {PRODUCTION_T} outside test mode.")
        if not gmpy2.is_prime(u) or u < 5 or bits // 2 < t + u.bit_length() + 64:
            raise ParameterError("DGK needs a prime u >= 5 and a modulus of more than 2·(t + 64 + log2 u) bits.")
        (p, vp, gp, hp), (q, vq, gq, hq) = _prime(bits // 2, t, u), _prime(bits - bits // 2, t, u)
        n = p * q
        crt = lambda a, b: int((b + q * ((a - b) * gmpy2.invert(q, p) % p)) % n)  # noqa: E731
        return cls(p, q, vp, vq, DGKPublic(int(n), crt(gp, gq), crt(hp, hq), u, t))

    def to_dict(self) -> dict:
        pub = self.public
        return {
            "p": int(self.p),
            "q": int(self.q),
            "vp": int(self.vp),
            "vq": int(self.vq),
            "g": pub.g,
            "h": pub.h,
            "u": pub.u,
            "t": pub.t,
        }

    @classmethod
    def from_dict(cls, d: dict) -> DGKKey:
        return cls(d["p"], d["q"], d["vp"], d["vq"], DGKPublic(d["p"] * d["q"], d["g"], d["h"], d["u"], d["t"]))

    def encrypt_bit(self, b: int) -> gmpy2.mpz:
        """g^b·h^r with r uniform modulo the order of h, computed modulo p and q separately."""
        xp = self._hp.power(secrets.randbelow(int(self.vp)))
        xq = self._hq.power(secrets.randbelow(int(self.vq)))
        hr = xq + self.q * ((xp - xq) * self._q_inv % self.p)
        return hr * self.public.g % self.public.n if b else hr

    def is_zero(self, c: int) -> bool:
        """m ≡ 0 (mod u): h^{v_p} ≡ 1 (mod p), so c^{v_p} ≡ (g^{v_p})^m, of order u unless m ≡ 0."""
        return gmpy2.powmod(c, self.vp, self.p) == 1


def _prime(bits: int, t: int, u: int) -> tuple[gmpy2.mpz, gmpy2.mpz, gmpy2.mpz, gmpy2.mpz]:
    """p = 2·u·v·a + 1 of ``bits`` bits with v a t-bit prime, and g_p of order u·v, h_p of order v."""
    v = gmpy2.next_prime(secrets.randbits(t - 1) | (1 << (t - 1)))
    step = 2 * u * v
    low = -(-(1 << (bits - 1)) // step)
    while True:
        p = step * (low + secrets.randbelow(int((1 << bits) // step - low))) + 1  # exactly ``bits`` bits
        if gmpy2.is_prime(p, 64):
            break
    while True:
        gp = gmpy2.powmod(secrets.randbelow(int(p) - 2) + 2, (p - 1) // (u * v), p)
        if gmpy2.powmod(gp, u, p) != 1 and gmpy2.powmod(gp, v, p) != 1:
            break
    while True:
        hp = gmpy2.powmod(secrets.randbelow(int(p) - 2) + 2, (p - 1) // v, p)
        if hp != 1:
            return p, v, gp, hp


def bit_ciphertexts(key: DGKKey, value: int, bits: int) -> list[gmpy2.mpz]:
    """B's first message: E(d̂_i) for i = 0 … bits − 1 (least significant first)."""
    return [key.encrypt_bit((value >> i) & 1) for i in range(bits)]


def blinded_terms(pub: DGKPublic, encrypted_bits: list[int], r: int, delta_a: int) -> list[gmpy2.mpz]:
    """A's message: the ℓ + 1 values c_i and c_{−1}, each times a random non-zero ρ, re-randomized, shuffled."""
    n, ell = gmpy2.mpz(pub.n), len(encrypted_bits)
    if 3 * ell + 3 >= pub.u:
        raise ParameterError(f"DGK's u = {pub.u} is too small for {ell}-bit comparisons; it must exceed 3ℓ + 3.")
    one, s = pub.constant(1), 1 - 2 * delta_a
    shift = {k: pub.constant(k) for k in (-2, -1, 0, 1)}
    suffix, out = gmpy2.mpz(1), []  # suffix = E(Σ_{j>i} d̂_j ⊕ r̂_j)
    for i in reversed(range(ell)):
        e, r_i = gmpy2.mpz(encrypted_bits[i]), (r >> i) & 1
        out.append(e * shift[s - r_i] % n * gmpy2.powmod(suffix, 3, n) % n)
        suffix = suffix * (one * gmpy2.invert(e, n) % n if r_i else e) % n
    out.append(pub.constant(1 - delta_a) * suffix % n)  # c_{−1}: 0 iff δ_A = 1 and d̂ = r̂
    out = [pub.rerandomize(gmpy2.powmod(c, 1 + secrets.randbelow(pub.u - 1), n)) for c in out]
    _shuffler.shuffle(out)
    return out


def share(key: DGKKey, terms: list[int]) -> int:
    """B's share δ_B: whether any term is an encryption of 0."""
    return int(any(key.is_zero(c) for c in terms))
