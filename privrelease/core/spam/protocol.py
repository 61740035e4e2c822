"""The parties of private logistic-regression training and classification, and their messages.

The server owns w and the only secret key; users own their mail. Parties exchange bytes through a
``Channel``, which records who sent what to whom, how many bytes, a digest, and what the payload
is, read from the bytes themselves (``inspect``). Training uses the sigmoid's first-order
expansion σ(−z) ≈ 1/2 − z/4 at z = 0, so a user's gradient contribution
Σ_i x_i y_i σ(−y_i wᵀx_i) ≈ Σ_i x_i (2y_i − wᵀx_i)/4 is linear in w and computable from E[w] with
ciphertext–plaintext operations only. One round:

0. server → users  the round's participants; each shares a fresh self-mask seed and a fresh mask
                   secret (its round key for the pairwise masks), sealed for each participant with
                   that round key, through the server (``dropout``).
1. server → users  E[C_w·w] (d ciphertexts, fresh randomness), C_w = 2^48.
2. each user       E[t_i] = E[2y_i·C_w]·E[C_w·wᵀx_i]^(−1) per message, E[v_j] = Π_{i∋j} E[t_i]
                   (= E[4·C_w·g_j]), packs ``Layout.slots`` coordinates per plaintext, adds its
                   pairwise masks toward the participants and its self-mask (each uniform over
                   Z_n) and fresh randomness.
3. users → server  d / slots ciphertexts each.
4. server → users  who sent (the survivors); each survivor returns its shares of the survivors'
                   self-mask seeds and of the left users' mask secrets.
5. server          multiplies the survivors' ciphertexts, decrypts the sums only, removes the
                   rebuilt self-masks and the left users' masks, unpacks, and steps w += η·g.

With ``dp`` (``privrelease.core.spam.dp``) each user keeps at most a public number of features per message,
adds its integer noise share to every coordinate in step 2 (inside the plaintext it masks), and
the server projects w onto a public l2 ball after step 4.

Setup: each user announces its X25519 key and message count; the server answers with the
directory (the public key, layout, schedule, threshold, every user's keys), from which each user
checks the participation floor (``floors``: every user's block, for the public feature map),
and agrees on the sealing keys; the pairwise seeds are the round's (step 0).
"""

from __future__ import annotations

import time

import gmpy2
import numpy as np

from privrelease.core import noise
from privrelease.core.errors import ParameterError, QuorumLost
from privrelease.core.privacy import draws
from privrelease.core.spam import dp
from privrelease.core.spam import dropout as R
from privrelease.core.spam.aggregation import L1_BITS, W_BITS, Agreement, Layout, new_seed, self_mask
from privrelease.core.spam.floors import check_participation
from privrelease.core.spam.paillier import KeyPair, PublicKey
from privrelease.core.spam.wire import StepTimes, ciphertext_message, public_message, read_ciphertexts, read_public

PAD = -1  # with dp: the feature index a message is padded with: w's and v's extra last entry, an encryption of 0


def clamp_l1(w: np.ndarray) -> np.ndarray:
    """w scaled just inside the public L1 bound 2^L1_BITS (which the slot width needs), if it passed it.
    A step that would pass the bound is clamped, never refused: whether and when training diverges
    follows from the mail, and a run that stopped on it would publish that (FAILED, its round)."""
    l1 = float(np.abs(w).sum())
    return w if l1 < 2.0**L1_BITS * (1 - 2.0**-20) else w * (2.0**L1_BITS * (1 - 2.0**-20) / l1)


def block(size: int, mode: str, block_size: int, round_: int) -> np.ndarray:
    """Which of a user's ``size`` messages take part in a round (public: sizes and schedule only). Online: whole
    blocks of min(block_size, size) in turn, a last partial one left out, so two rounds' blocks are equal or disjoint."""
    if mode == "batch":
        return np.arange(size)
    take = min(block_size, size)
    return (round_ % (size // take)) * take + np.arange(take)


# -- the parties -------------------------------------------------------------------------------------------


class Server:
    """Owns the model and the only secret key."""

    name = "server"

    def __init__(
        self,
        key_bits: int,
        weights: np.ndarray,
        learning_rate: float = 0.0,
        mode: str = "batch",
        block_size: int = 1000,
        floor: int = 1,
        radius: float | None = None,
        share_variance: int = 0,
        threshold: int | None = None,
    ):
        self._keys = KeyPair(key_bits)
        self.public_key = self._keys.public
        self.w = np.asarray(weights, dtype=float)
        self.eta = learning_rate
        self.schedule = {"mode": mode, "block_size": block_size}
        self.floor = floor  # least messages per user and round (``floors.floor`` of the feature map)
        self.radius = radius  # with dp: the public l2 ball the model is projected onto after each step
        self.noise_bits = dp.noise_bits(share_variance) if share_variance else 0  # the users' noise, for the layout
        self.threshold = threshold  # least users a round needs (public; default: every user)
        self.layout: Layout | None = None
        self._obfuscators: list[gmpy2.mpz] = []
        self._directory: dict = {}
        self.participants: list[int] = []  # this round's, in directory order; only shrinks
        self._round: dict = {}
        self.sums: list[int] = []  # the last round's decrypted slot sums 4·C_w·Σ g_j (what the server learns)

    def precompute(self) -> None:
        """Offline phase: the next E[w]'s d fresh r^n, which do not depend on w, computed while the
        server would otherwise wait (during setup, and while the users work on a round), on every core of the
        server's host (``KeyPair.obfuscators``): its processes share the cores with the users' while they compute,
        and have them all once the users are done."""
        self._obfuscators = self._keys.obfuscators(len(self.w))

    def encrypted_weights(self, times: StepTimes) -> list[gmpy2.mpz]:
        """E[round(C_w·w)], afresh: precomputed r^n if there are, else CRT encryption now."""
        t = time.perf_counter()
        if np.abs(self.w).sum() >= 2**L1_BITS:
            raise ParameterError(
                f"the model's L1 norm passed the public bound 2^{L1_BITS} (training diverged); use a smaller learning_rate."
            )
        if len(self._obfuscators) < len(self.w):
            self.precompute()
        ready, self._obfuscators = self._obfuscators, []  # each r^n is used once
        key = self.public_key
        out = [key.encrypt(v, "w", r) for v, r in zip(np.rint(np.ldexp(self.w, W_BITS)).astype(np.int64).tolist(), ready)]
        times.add("1 server: encrypt w", t)
        return out

    def directory(self, *announcements: bytes) -> bytes:
        """Setup: from the users' announcements, the public directory every user receives."""
        users = [read_public(a, "announcement") for a in announcements]
        sizes = [int(u["messages"]) for u in users]
        blocks = [len(block(s, self.schedule["mode"], self.schedule["block_size"], 0)) for s in sizes]
        check_participation(blocks, self.floor)
        self.layout = Layout(self.public_key.bits, len(self.w), len(users), max(blocks), self.noise_bits).check()
        self.threshold = R.check_threshold(self.threshold or len(users), len(users))
        self.participants = list(range(len(users)))
        self._directory = {
            "n": self.public_key.n,
            "layout": self.layout.public(),
            **self.schedule,
            "sizes": sizes,
            "threshold": self.threshold,
            "users": [u["user"] for u in users],
            "keys": [u["x25519"] for u in users],
            "seal_keys": [u["seal"] for u in users],
        }
        return public_message(self._directory)

    def relay(self, *bundles: bytes) -> dict[str, bytes]:
        """Sealed shares regrouped by recipient: the server relays what it cannot read."""
        names = self._directory["users"]
        return dict(zip(names, R.relay(list(bundles), len(names))))

    def round_message(self, round_: int) -> bytes:
        """Step 0: the round's participants (the users that have not left)."""
        self._round = {"round": round_, "participants": [self._directory["users"][i] for i in self.participants]}
        return public_message(self._round)

    def unmask_request(self, received: dict[str, bytes]) -> bytes:
        """Step 4: keep the survivors' masked gradients and ask them for the shares that unmask the sum."""
        names, round_ = self._round["participants"], self._round["round"]
        survivors = [n for n in names if n in received]
        if len(survivors) < self.threshold:
            left = [n for n in names if n not in received]
            raise QuorumLost(
                f"round {round_ + 1}: only {len(survivors)} of its {len(names)} users sent their gradient "
                f"({', '.join(left)} left), fewer than the threshold {self.threshold}; the run stops and "
                "nothing is published. Rerun when the users are online, or with a lower threshold."
            )
        self._round.update(
            received={n: received[n] for n in survivors}, survivors=survivors, left=[n for n in names if n not in received]
        )
        return public_message({"round": round_, R.SELF: survivors, R.SECRET: self._round["left"]})

    def weights_message(self, times: StepTimes | None = None) -> bytes:
        return ciphertext_message(self.encrypted_weights(times or StepTimes()), self.public_key)

    def aggregate(self, *replies: bytes) -> np.ndarray:
        """Step 5: multiply the survivors' ciphertexts, decrypt only the sums, remove the rebuilt
        self-masks and the left users' masks, take the step; returns the gradient."""
        layout, key, names = self.layout, self.public_key, self._directory["users"]
        assert layout is not None and self._round.get("survivors"), "unmask_request() comes first"
        round_, count, n = self._round["round"], layout.ciphertexts, key.n
        parts = [read_ciphertexts(m, key, count, "masked gradient") for m in self._round["received"].values()]
        sums = [gmpy2.mpz(1)] * count
        for part in parts:
            sums = [key.add(a, b) for a, b in zip(sums, part)]
        survivors = [names.index(u) for u in self._round["survivors"]]
        totals = R.unmask(
            [int(self._keys.raw_decrypt(c)) for c in sums],
            [R.read_shares(r) for r in replies],
            self._directory,
            survivors,
            [names.index(u) for u in self._round["left"]],
            round_,
            n.to_bytes(key.bits // 8 + 1, "big"),
        )
        self.participants = survivors  # a user that left is out for the rest of the run
        self.sums = layout.unpack(totals, len(survivors))
        g = np.array(self.sums, dtype=float) / 2.0 ** (W_BITS + 2)
        self.w = clamp_l1(self.w + self.eta * g)
        if self.radius is not None:
            self.w = dp.project(self.w, self.radius)
        return g

    def model(self) -> np.ndarray:
        return self.w


class User:
    """Holds mail (feature sets and labels), the public key and its pairwise secrets."""

    def __init__(
        self,
        name: str,
        features: list[np.ndarray],
        labels: np.ndarray,
        floor: int = 1,
        noise: dict | None = None,
        threshold: int | None = None,
    ):
        self.name = name
        self.floor = floor  # this user's own copy of the public floor: it refuses a round below it
        self.threshold = threshold  # its own copy of the public threshold (None: accept the directory's)
        # with dp: {"leaf", "max_features", "seed"} (``dp.Noise.share``); each message keeps at most max_features features
        self.noise = noise
        if noise is not None:  # capped, then padded to exactly max_features with PAD (an encryption of 0):
            # every message costs the same work, so how long a user takes says nothing of its mail's lengths
            features = [dp.cap(np.asarray(v), noise["max_features"], noise["seed"]) for v in features]
            features = [[*np.asarray(v).tolist(), *[PAD] * (noise["max_features"] - len(v))] for v in features]
        self._x = [np.asarray(v).tolist() for v in features]
        self._y = np.asarray(labels).astype(int)
        self._agreement = Agreement()
        self._sealer = R.Sealer()
        self._holder: R.Holder | None = None
        self._self_seed = b""  # the current round's self-mask seed b_u,r (fresh per round)
        self._context = b""
        self.public_key: PublicKey | None = None
        self.layout: Layout | None = None
        self._schedule: dict = {}
        self._rounds_done = -1
        self.times = StepTimes()

    def __len__(self) -> int:
        return len(self._y)

    def announce(self) -> bytes:
        return public_message(
            {
                "user": self.name,
                "x25519": self._agreement.public_key().hex(),
                "seal": self._sealer.public_key().hex(),
                "messages": len(self),
            }
        )

    def setup(self, directory: bytes) -> None:
        """Check the directory (participation floor, threshold, own entry) and agree on the sealing keys.
        Nothing is shared here: each round's mask secret s_u,r is fresh, shared with b_u,r (``begin``)."""
        doc = read_public(directory, "directory")
        self.public_key = PublicKey(int(doc["n"]))
        sizes = doc["sizes"]
        blocks = [len(block(s, doc["mode"], doc["block_size"], 0)) for s in sizes]
        check_participation(blocks, self.floor)
        bits = dp.noise_bits(self.noise["leaf"].share_variance) if self.noise else 0
        self.layout = Layout(self.public_key.bits, int(doc["layout"]["dimension"]), len(sizes), max(blocks), bits).check()
        if self.layout.public() != doc["layout"]:
            raise ParameterError("the server's layout does not follow from the public sizes; refusing to take part.")
        self._schedule = {"mode": doc["mode"], "block_size": doc["block_size"]}
        threshold = R.check_threshold(int(doc["threshold"]), len(sizes))
        if self.threshold is not None and threshold != self.threshold:
            raise ParameterError(f"the server's threshold {threshold} is not the spec's {self.threshold}; refusing to take part.")
        me = doc["users"].index(self.name)
        context = self.public_key.n.to_bytes(self.public_key.bits // 8 + 1, "big")
        self._agreement.agree(me, [bytes.fromhex(k) for k in doc["keys"]], context)
        self._sealer.agree(me, [bytes.fromhex(k) for k in doc["seal_keys"]], context)
        self._holder = R.Holder(me, list(doc["users"]), threshold)
        self._context = context

    def hold(self, sealed: bytes) -> None:
        """Keep the round's shares relayed to this user (of each participant's b_u,r and s_u,r) and
        agree on this round's pairwise seeds with the participants whose round keys came with them."""
        assert self._holder is not None, "setup() comes first"
        keys = self._holder.hold(self._holder.round, self._sealer.open(R.SELF, self._holder.round, sealed))
        self._agreement.agree_with(self._holder.me, keys, self._context)

    def begin(self, message: bytes) -> bytes:
        """Step 0: check the round's participants; draw a fresh self-mask seed and return its shares,
        sealed for each participant."""
        assert self._holder is not None, "setup() comes first"
        doc = read_public(message, "round")
        participants = self._holder.begin(int(doc["round"]), list(doc["participants"]))
        self._self_seed = new_seed()
        self._agreement = Agreement()  # s_u,r: fresh each round, so revealing it says nothing about another round
        t, users, key = self._holder.threshold, len(self._holder.names), self._agreement.public_key()
        b, s = R.split(self._self_seed, t, users), R.split(self._agreement.seed, t, users)
        return self._sealer.seal(
            R.SELF, self._holder.round, {x - 1: bs + ss + key for (x, bs), (_, ss) in zip(b, s) if x - 1 in participants}
        )

    def unmask(self, request: bytes) -> bytes:
        """Step 4: this user's shares for the server's unmask request (``dropout.Holder.reveal``)."""
        assert self._holder is not None, "setup() comes first"
        return R.shares_message(self._holder.reveal(read_public(request, "unmask request")))

    def masks(self, round_: int, count: int) -> list[int]:
        """Pairwise masks toward the round's participants plus this round's self-mask, mod n."""
        assert self.public_key is not None and self._holder is not None
        n = self.public_key.n
        pairwise = self._agreement.mask(n, round_, count, among=self._holder.participants)  # the round's seeds (``hold``)
        return [(a + b) % n for a, b in zip(pairwise, self_mask(self._self_seed, round_, n, count))]

    def gradient(self, weights: bytes, round_: int) -> bytes:
        """Steps 2–3: this user's packed, masked, re-randomized gradient contribution for a round."""
        key, layout = self.public_key, self.layout
        assert key is not None and layout is not None, "setup() comes first"
        if round_ <= self._rounds_done:
            raise ParameterError("each round number is used once (its masks must never repeat).")
        if self._holder is None or self._holder.round != round_:
            raise ParameterError(f"round {round_} was not begun: its participants and self-mask come first.")
        if self._holder.me not in self._holder.keys or len(self._holder.keys) < self._holder.threshold:
            raise ParameterError(f"round {round_}'s mask keys were not relayed to this user: its pairwise masks come first.")
        self._rounds_done = round_
        n2 = key.nsquare
        w = read_ciphertexts(weights, key, layout.dimension, "encrypted weights")
        zero = key.rerandomize(gmpy2.mpz(1)) if self.noise is not None else gmpy2.mpz(1)  # full-size E[0] with dp
        w.append(zero)  # w[PAD]: a padded feature adds 0 to the score
        t0 = time.perf_counter()
        rows = block(len(self), self._schedule["mode"], self._schedule["block_size"], round_)
        # E[2y·C_w] per label; with dp: re-randomized, so spam's (1 + n·2^49, about half the size of n²) and
        # ham's (1 + n·(n − 2^49)) cost the same multiplication, and the label does not show in the time
        label = {y: key.trivial(2 * y << W_BITS) for y in (-1, 1)}
        if self.noise is not None:
            label = {y: key.rerandomize(c) for y, c in label.items()}
        terms = []
        for i in rows.tolist():
            score = gmpy2.mpz(1)
            for j in self._x[i]:
                score = score * w[j] % n2
            terms.append(label[int(self._y[i])] * gmpy2.invert(score, n2) % n2)
        self.times.add("2a user: E[t_i] = E[2y_i − wᵀx_i]", t0)
        t0 = time.perf_counter()
        v = [zero] * (layout.dimension + 1)  # v[PAD] takes the padding's products, and is dropped
        for t, i in zip(terms, rows.tolist()):
            for j in self._x[i]:
                v[j] = v[j] * t % n2
        v.pop()
        self.times.add("2b user: E[v_j] = Π E[t_i]", t0)
        t0 = time.perf_counter()
        k, shift = layout.slots, 1 << layout.slot_bits
        masks = self.masks(round_, layout.ciphertexts)
        shares = self.noise_share(layout)
        self.times.add("2b+ user: noise share (dp)", t0)
        t0 = time.perf_counter()
        out = []
        for c in range(layout.ciphertexts):
            coords = v[c * k : (c + 1) * k]
            acc = coords[-1]
            for value in reversed(coords[:-1]):
                acc = gmpy2.powmod(acc, shift, n2) * value % n2
            offsets = sum((layout.offset + shares[c * k + s]) << (s * layout.slot_bits) for s in range(len(coords)))
            out.append(acc * key.trivial(offsets + masks[c]) % n2)
        self.times.add("2c user: pack, mask", t0)
        t0 = time.perf_counter()
        out = [key.rerandomize(c) for c in out]
        self.times.add("2d user: re-randomize", t0)
        return ciphertext_message(out, key)

    def noise_share(self, layout: Layout) -> list[int]:
        """With dp: this round's fresh N_Z(0, s²) per coordinate, drawn with the plan's leaf (``draws.shares``,
        OS randomness) and added before masking; without: zeros."""
        if self.noise is None:
            return [0] * layout.dimension
        shares = draws.shares(noise.generator(), self.noise["leaf"], layout.dimension)
        if max(abs(z) for z in shares) >= 1 << layout.noise_bits:  # P < 2·exp(−2^13) per coordinate
            raise ParameterError("a noise share left its slot room; this does not happen by chance, refusing the round.")
        return shares
