"""The parties of private logistic-regression training and classification, and their protocol.

The server owns w and the only secret key; users own their mail. Parties hold private state and
exchange messages only through a ``Channel``, which records who sent what kind of message of how
many bytes, and whether its payload is ciphertext or public. One training round (per user, on a
block of the user's messages; Pathak et al. §4.2, with the changes the README lists):

1. server → user   E[w] at scale C_w, encrypted afresh each round              (d ciphertexts)
2–3. user → server E[z_i − r_i], z_i = y_i wᵀx_i, r_i uniform on [−R, R]       (n)
4–5. server → user E[exp(u_i)] at scale C_e, u_i = z_i − r_i clipped to ±(R + 40)   (n)
6–7. user → server E[q_i(1 + e^{z_i})] at scale C_e·C_r, q_i bounded power law on [1, Q]  (n)
8.   server → user E[1/(q_i(1 + e^{z_i}))] at scale C_s                       (n)
9–10. user → server E[Σ_i y_i x_i σ(−z_i)] at scale C_s, after removing q_i    (d)
11.  server: sums the users' encrypted gradients, decrypts only the sum, w += η·gradient.

Every ciphertext a party derives from the other's ciphertexts is re-randomized before it is sent:
otherwise the server, who can recover a ciphertext's randomness with its key, could test which
of its own ciphertexts a user multiplied together (that is, the user's features).
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field

import gmpy2
import numpy as np

from core.spam.paillier import KeyPair, Overflow, PublicKey

LOG2E = math.log2(math.e)
CLIP = 40  # σ(−z) for |z| > 40 is below 5e-18: u is clipped to ±(R + 40) before exponentiating
PRECISION_BITS = 60  # relative precision kept by every fixed-point encoding
W_BITS = 48  # C_w = 2^48: the scale of w and of z


@dataclass(frozen=True)
class Scales:
    """Public fixed-point scales and mask bounds, sized together against the key."""

    key_bits: int
    mask_range: int  # R: r_i uniform on [−R, R]
    e_bits: int  # C_e = 2^e_bits, so e^{−U} keeps PRECISION_BITS bits
    r_bits: int  # C_r = 2^r_bits, for e^{r}
    q_bits: int  # q_i <= Q = 2^q_bits
    s_bits: int  # C_s = 2^s_bits, for 1/(q(1 + e^z))

    @property
    def clip(self) -> float:
        return self.mask_range + CLIP

    def public(self) -> dict:
        return {"key_bits": self.key_bits, "mask_range": self.mask_range, "w_bits": W_BITS, "e_bits": self.e_bits,
                "r_bits": self.r_bits, "q_bits": self.q_bits, "s_bits": self.s_bits, "clip": self.clip}  # fmt: skip

    @classmethod
    def plan(cls, key_bits: int, mask_range: int | None = None, min_q_bits: int = 128) -> Scales:
        """The scales for a key; ``mask_range`` None takes the largest R leaving q at least ``min_q_bits``."""

        def build(r: int) -> Scales:
            u = r + CLIP
            e_bits = math.ceil(u * LOG2E) + PRECISION_BITS
            r_bits = math.ceil(r * LOG2E) + PRECISION_BITS
            used = e_bits + math.ceil(u * LOG2E) + r_bits + math.ceil(r * LOG2E) + 2  # step 6's plaintext
            q_bits = key_bits - 2 - used - 8
            return cls(key_bits, r, e_bits, r_bits, q_bits, q_bits + PRECISION_BITS)

        if mask_range is None:
            r = 1
            while build(r + 1).q_bits >= min_q_bits:
                r += 1
            mask_range = r
        scales = build(mask_range)
        if scales.q_bits < 16:
            raise Overflow(f"a {key_bits}-bit key cannot hold mask range R={mask_range} with room for the multiplicative mask; use larger key_bits or a smaller R.")
        return scales


@dataclass
class Message:
    round: int
    sender: str
    receiver: str
    kind: str
    payload: str  # "ciphertext" or "public"
    count: int
    bytes: int
    digest: str


@dataclass
class Channel:
    """Delivers messages between parties and records each one (never its content)."""

    log: list[Message] = field(default_factory=list)
    round: int = 0

    def ciphertexts(self, sender: str, receiver: str, kind: str, values: list, key: PublicKey) -> list:
        digest = hashlib.sha256(b"".join(int(v).to_bytes(key.ciphertext_bytes, "big") for v in values)).hexdigest()
        self.log.append(Message(self.round, sender, receiver, kind, "ciphertext", len(values), len(values) * key.ciphertext_bytes, digest))
        return list(values)

    def public(self, sender: str, receiver: str, kind: str, value: dict) -> dict:
        text = repr(sorted(value.items())).encode()
        self.log.append(Message(self.round, sender, receiver, kind, "public", len(value), len(text), hashlib.sha256(text).hexdigest()))
        return dict(value)


@dataclass
class StepTimes:
    """Seconds per protocol step in one round, summed over users (the paper's Table 4 rows)."""

    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, step: str, started: float) -> None:
        self.seconds[step] = self.seconds.get(step, 0.0) + time.perf_counter() - started


class Server:
    """Owns the model and the only secret key."""

    name = "server"

    def __init__(self, key_bits: int, weights: np.ndarray, learning_rate: float = 0.0, mask_range: int | None = None):
        self._keys = KeyPair(key_bits)
        self.public_key = self._keys.public
        self.scales = Scales.plan(self.public_key.bits, mask_range)
        self.w = np.asarray(weights, dtype=float)
        self.eta = learning_rate

    def encrypted_weights(self, times: StepTimes) -> list[int]:
        """Step 1: E[round(C_w·w)], afresh every round (the server owns w, so scales never grow)."""
        t = time.perf_counter()
        key = self.public_key
        w = [int(v) for v in np.rint(np.ldexp(self.w, W_BITS)).astype(object)]
        key.check(sum(abs(v) for v in w) + (self.scales.mask_range << W_BITS), "|z| + R at scale C_w")
        out = [key.encrypt(v, "w", o) for v, o in zip(w, key.obfuscators(len(w)))]
        times.add("1 encrypt w", t)
        return out

    def exponentials(self, masked: list[int], times: StepTimes) -> list[int]:
        """Steps 4–5: decrypt u_i = z_i − r_i and return E[round(C_e·exp(u_i))]."""
        t = time.perf_counter()
        s, key = self.scales, self.public_key
        bound = (int(sum(np.abs(self.w)) + s.mask_range + 2) << W_BITS) + 1
        u = np.array([self._keys.decrypt(c, bound, "z − r") for c in masked], dtype=float) / 2.0**W_BITS
        u = np.clip(u, -s.clip, s.clip)
        out = [key.encrypt(_fixed(math.exp(v), s.e_bits), "exp(z − r)") for v in u]
        times.add("4-5 decrypt, exp, encrypt", t)
        return out

    def reciprocals(self, masked: list[int], times: StepTimes) -> list[int]:
        """Step 8: decrypt q_i(1 + e^{z_i}) and return E[round(C_s / (q_i(1 + e^{z_i})))]."""
        t = time.perf_counter()
        s, key = self.scales, self.public_key
        unit = 1 << (s.e_bits + s.r_bits)
        out = []
        for c in masked:
            v = self._keys.decrypt(c, key.half, "q(1 + e^z)")
            if v < unit:
                raise Overflow("q(1 + e^z) decrypted below its least value: the scales do not fit the key.")
            out.append(key.encrypt(((unit << s.s_bits) + v // 2) // v, "1/(q(1 + e^z))"))
        times.add("8 decrypt, reciprocal, encrypt", t)
        return out

    def update(self, gradients: list[list[int]], count: int, times: StepTimes) -> np.ndarray:
        """Step 11: sum the users' encrypted gradients, decrypt only the sum, take the step."""
        t = time.perf_counter()
        key = self.public_key
        total = gradients[0]
        for g in gradients[1:]:
            total = [key.add(a, b) for a, b in zip(total, g)]
        bound = (count + 1) << (self.scales.s_bits + 1)
        g = np.array([self._keys.decrypt(c, bound, "gradient") for c in total], dtype=float) / 2.0**self.scales.s_bits
        self.w = self.w + self.eta * g
        times.add("11 decrypt sum, update w", t)
        return g

    def sign(self, masked: int) -> int:
        """Classification: the sign of a masked score (all the server learns is that sign)."""
        return 1 if self._keys.decrypt(masked, self.public_key.half, "masked score") > 0 else -1


class User:
    """Holds mail (feature sets and labels) and only the public key."""

    def __init__(self, name: str, features: list[np.ndarray], labels: np.ndarray, public_key: PublicKey, scales: Scales,
                 rng: np.random.Generator):  # fmt: skip
        self.name = name
        self._x = features
        self._y = labels.astype(int)
        self.public_key = public_key
        self.scales = scales
        self._rng = rng
        self._block: np.ndarray = np.empty(0, dtype=int)
        self._r: list[int] = []
        self._q: list[int] = []

    def __len__(self) -> int:
        return len(self._y)

    def masked_scores(self, weights: list[int], block: np.ndarray, times: StepTimes) -> list[int]:
        """Steps 2–3: E[C_w(y_i wᵀx_i − r_i)] for the block's messages."""
        t = time.perf_counter()
        key, s = self.public_key, self.scales
        self._block = block
        limit = s.mask_range << W_BITS
        self._r = [int(v) for v in self._rng.integers(-limit, limit, size=len(block), endpoint=True)]
        out = []
        for i, r in zip(block, self._r):
            score = gmpy2.mpz(1)  # E[0] without randomness; the fresh encryption of −r re-randomizes it
            for j in self._x[i]:
                score = key.add(score, weights[j])
            if self._y[i] < 0:
                score = key.negate(score)
            out.append(key.add(score, key.encrypt(-r, "r")))
        times.add("2-3 scores, additive mask", t)
        return out

    def masked_denominators(self, exponentials: list[int], times: StepTimes) -> list[int]:
        """Steps 6–7: E[q_i·C_e·C_r·(1 + e^{z_i})] with q_i from the bounded power law."""
        t = time.perf_counter()
        key, s = self.public_key, self.scales
        one = 1 << (s.e_bits + s.r_bits)
        # q = floor(Q^U), U uniform: density ∝ 1/q on [1, Q] (Pathak et al., footnote 3)
        self._q = [max(1, int(2.0 ** (s.q_bits * u))) for u in self._rng.random(len(exponentials))]
        out = []
        for c, r, q in zip(exponentials, self._r, self._q):
            grown = key.add_plain(key.scale(c, _fixed(math.exp(r / 2.0**W_BITS), s.r_bits)), one, "C_e·C_r")
            out.append(key.rerandomize(key.scale(grown, q)))
        times.add("6-7 unmask exp, multiplicative mask", t)
        return out

    def encrypted_gradient(self, reciprocals: list[int], dimension: int, times: StepTimes) -> list[int]:
        """Steps 9–10: remove q_i, then E[Σ_i y_i x_ij σ(−z_i)] for every feature j (all d, so the
        server cannot tell which features the block holds)."""
        t = time.perf_counter()
        key = self.public_key
        weights = [key.scale(c, q) for c, q in zip(reciprocals, self._q)]
        signed = [w if self._y[i] > 0 else key.negate(w) for w, i in zip(weights, self._block)]
        grad = [gmpy2.mpz(1)] * dimension
        for w, i in zip(signed, self._block):
            for j in self._x[i]:
                grad[j] = key.add(grad[j], w)
        out = [key.rerandomize(g, o) for g, o in zip(grad, key.obfuscators(dimension))]
        times.add("9-10 unmask, gradient", t)
        return out


class Client:
    """Holds one message and the public key; learns its label, reveals neither label nor score."""

    def __init__(self, features: np.ndarray, public_key: PublicKey, rng: np.random.Generator):
        self._x = features
        self.public_key = public_key
        self._rng = rng
        self._sign = 1

    def masked_score(self, weights: list[int]) -> int:
        """E[s·m·(2·C_w·wᵀx − 1)]: a random sign s and a random positive factor m hide the score;
        2S − 1 is never 0 and has the sign of S = C_w·wᵀx, with S = 0 counting as ham."""
        key = self.public_key
        score = gmpy2.mpz(1)
        for j in self._x:
            score = key.add(score, weights[j])
        self._sign = 1 if self._rng.random() < 0.5 else -1
        m = int(self._rng.integers(1 << 32, 1 << 33))
        return key.rerandomize(key.scale(key.add_plain(key.scale(score, 2), -1, "1"), self._sign * m))

    def label(self, server_sign: int) -> str:
        return "spam" if server_sign * self._sign > 0 else "ham"


def _fixed(value: float, bits: int) -> int:
    """round(value · 2^bits) exactly, for a float value."""
    mantissa, exponent = math.frexp(value)
    m = int(mantissa * 2**53)
    shift = exponent - 53 + bits
    return m << shift if shift >= 0 else (m + (1 << (-shift - 1))) >> -shift


def train_round(server: Server, users: list[User], blocks: list[np.ndarray], channel: Channel) -> tuple[StepTimes, np.ndarray]:
    """One protocol round: every user with a non-empty block takes part; one update of w."""
    times = StepTimes()
    key = server.public_key
    d = len(server.w)
    weights = server.encrypted_weights(times)
    gradients = []
    active = [(u, b) for u, b in zip(users, blocks) if len(b)]
    for user, block in active:
        got = channel.ciphertexts(server.name, user.name, "encrypted-weights", weights, key)
        masked = channel.ciphertexts(user.name, server.name, "masked-scores", user.masked_scores(got, block, times), key)
        exps = channel.ciphertexts(server.name, user.name, "masked-exponentials", server.exponentials(masked, times), key)
        denominators = channel.ciphertexts(user.name, server.name, "masked-denominators", user.masked_denominators(exps, times), key)
        recips = channel.ciphertexts(server.name, user.name, "masked-reciprocals", server.reciprocals(denominators, times), key)
        gradients.append(channel.ciphertexts(user.name, server.name, "encrypted-gradient", user.encrypted_gradient(recips, d, times), key))
    gradient = server.update(gradients, sum(len(b) for _, b in active), times)
    return times, gradient


def classify(server: Server, client: Client, channel: Channel) -> str:
    """The private classification protocol: the client learns the label."""
    key = server.public_key
    weights = channel.ciphertexts(server.name, "client", "encrypted-weights", server.encrypted_weights(StepTimes()), key)
    masked = channel.ciphertexts("client", server.name, "masked-score", [client.masked_score(weights)], key)
    sign = channel.public(server.name, "client", "masked-sign", {"sign": server.sign(masked[0])})
    return client.label(sign["sign"])
