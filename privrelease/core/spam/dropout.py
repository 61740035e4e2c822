"""A party may leave: Bonawitz et al.'s double masking with Shamir-shared seeds (semi-honest server).

"Practical Secure Aggregation for Privacy-Preserving Machine Learning" (CCS 2017), on top of the
pairwise masks of ``aggregation.Agreement``, one aggregation instance per round. Each user holds an
X25519 key pair c_u (``Sealer``) for the run, only to encrypt shares for other users (AES-GCM under
a key derived by HKDF from the pairwise exchange of c keys); every share crosses the server sealed
for its recipient (``RECORD`` bytes each); the server only relays.

* Each round: each participant draws a fresh 16-byte self-mask seed b_u,r and a fresh 16-byte
  mask secret s_u,r (its X25519 key pair for the round's pairwise masks), Shamir-shares both with
  the public threshold t (pycryptodome's Shamir over GF(2^128); a user's share has x = its
  directory index + 1) and seals, for each participant, its two shares with its round mask key.
  Only then does it send its gradient masked by its pairwise masks toward the participants whose
  round keys reached it, plus its self-mask ``expand(b_u,r)``.
* Unmasking: the server names the survivors U3 (whose messages it received) among the round's
  participants U2. Each survivor returns per user either its share of b_u,r (u ∈ U3) or its share
  of s_u,r (u ∈ U2 \\ U3), never both for one user in a round, and only when at least t survive
  (``Holder.reveal``), with the round keys it received. The server rebuilds the survivors'
  self-masks and the left users' pairwise masks toward the survivors, and is left with the sum of
  the survivors' gradients only.
* Both secrets are fresh each round: a revealed s_u,r unmasks nothing of round r' ≠ r, in which
  b_u,r' may have been revealed (with one run-long s_u, a user that survived round r and left in a
  later round had its round-r gradient unmasked by b_u,r and s_u: tests/attacks/test_spam_leavers.py).
* A user that left is out for the rest of the run: participant lists only shrink, and an honest
  user refuses a round naming a user outside the last round's participants (``Holder.begin``).

What the server learns beyond the sum: who left when (public). Against a server that lies about who
left to different users (the malicious model, with consistency checks and signatures) this variant
does not defend; nor against t or more users colluding with the server.
"""

from __future__ import annotations

import json
import os

from Crypto.Protocol.SecretSharing import Shamir
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from privrelease.core.errors import ParameterError
from privrelease.core.spam.aggregation import SEED_BYTES, Agreement, derive, self_mask

NONCE = 12
KEY_BYTES = 32  # an X25519 public key
CONTENT = 2 * SEED_BYTES + KEY_BYTES  # per recipient and round: a share of b_u,r, a share of s_u,r, u's round mask key
RECORD = 2 + 2 + NONCE + CONTENT + 16  # sender, recipient, nonce, sealed content, GCM tag
SELF, SECRET = "self", "secret"  # share kinds: of the round's self-mask seed, of the round's pairwise-mask secret
KEYS = "keys"  # in an unmask reply: the round mask keys this user received (the server needs the survivors')


def check_threshold(threshold: int, users: int) -> int:
    if not 2 <= threshold <= users:
        raise ParameterError(
            f"threshold is {threshold}, but it must lie between 2 and the number of users ({users}): a "
            "round completes only if at least threshold users remain; set threshold in that range."
        )
    return threshold


def split(seed: bytes, threshold: int, users: int) -> list[tuple[int, bytes]]:
    """Shares of a 16-byte seed, one per user (x = index + 1); any ``threshold`` of them rebuild it."""
    return Shamir.split(threshold, users, seed)


def combine(shares: list[tuple[int, bytes]], threshold: int, what: str) -> bytes:
    if len(shares) < threshold:
        raise ParameterError(
            f"only {len(shares)} shares of {what} came back, fewer than the threshold {threshold}; it cannot be rebuilt."
        )
    return Shamir.combine(sorted(shares)[:threshold])


# -- sealed shares -----------------------------------------------------------------------------------------


class Sealer:
    """c_u: this user's X25519 key pair for sealing shares to the other users (never for masks)."""

    def __init__(self) -> None:
        self._secret = X25519PrivateKey.generate()
        self._aead: dict[int, AESGCM] = {}
        self.me = -1

    def public_key(self) -> bytes:
        return self._secret.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def agree(self, me: int, keys: list[bytes], context: bytes) -> None:
        if len(set(keys)) != len(keys) or keys[me] != self.public_key():
            raise ParameterError("the user directory must list every user's sealing key once, this user's at its own index.")
        self.me = me
        for v, key in enumerate(keys):
            lo, hi = sorted((me, v))
            shared = self._secret.exchange(X25519PublicKey.from_public_bytes(key))
            self._aead[v] = AESGCM(derive(shared, b"seal|" + context + b"|%d|%d" % (lo, hi)))

    @staticmethod
    def _aad(kind: str, round_: int, sender: int, recipient: int) -> bytes:
        return b"%s|%d|%d|%d" % (kind.encode(), round_, sender, recipient)

    def seal(self, kind: str, round_: int, shares: dict[int, bytes]) -> bytes:
        """One sealed record per recipient (its index → its 16-byte share)."""
        out = [b"S"]
        for v, share in shares.items():
            nonce = os.urandom(NONCE)
            sealed = self._aead[v].encrypt(nonce, share, self._aad(kind, round_, self.me, v))
            out.append(self.me.to_bytes(2, "big") + v.to_bytes(2, "big") + nonce + sealed)
        return b"".join(out)

    def open(self, kind: str, round_: int, payload: bytes) -> dict[int, bytes]:
        """The shares sealed for this user: sender index → share. A record that does not open (not for
        this user, this kind or this round) is refused."""
        out = {}
        for sender, recipient, body in records(payload):
            if recipient != self.me or sender not in self._aead:
                raise ParameterError("a relayed share is addressed to another user; refusing it.")
            try:
                out[sender] = self._aead[sender].decrypt(body[:NONCE], body[NONCE:], self._aad(kind, round_, sender, recipient))
            except Exception:  # noqa: BLE001 - InvalidTag: altered, replayed from another round, or of another kind
                raise ParameterError(f"a relayed {kind} share of round {round_} does not authenticate; refusing it.") from None
        return out


def records(payload: bytes) -> list[tuple[int, int, bytes]]:
    """(sender, recipient, nonce ‖ ciphertext ‖ tag) of each record of a sealed payload."""
    body = payload[1:]
    if payload[:1] != b"S" or len(body) % RECORD:
        raise ParameterError("expected sealed shares.")
    return [
        (int.from_bytes(body[i : i + 2], "big"), int.from_bytes(body[i + 2 : i + 4], "big"), body[i + 4 : i + RECORD])
        for i in range(0, len(body), RECORD)
    ]


def relay(bundles: list[bytes], users: int) -> list[bytes]:
    """The server's part: each user's records regrouped by recipient (directory order)."""
    out = [[b"S"] for _ in range(users)]
    for bundle in bundles:
        for sender, recipient, body in records(bundle):
            if recipient >= users:
                raise ParameterError("a sealed share names no user of the directory.")
            out[recipient].append(sender.to_bytes(2, "big") + recipient.to_bytes(2, "big") + body)
    return [b"".join(parts) for parts in out]


# -- what a user holds and reveals ---------------------------------------------------------------------------


def shares_message(value: dict) -> bytes:
    """A user's answer to an unmask request: Shamir shares the server is meant to combine."""
    return b"K" + json.dumps(value, sort_keys=True).encode()


def read_shares(payload: bytes) -> dict:
    if payload[:1] != b"K":
        raise ParameterError("expected mask shares.")
    return json.loads(payload[1:])


class Holder:
    """One user's view of who takes part: the shares it holds, the rules by which it reveals them."""

    def __init__(self, me: int, names: list[str], threshold: int):
        self.me, self.names, self.threshold = me, names, check_threshold(threshold, len(names))
        self.held: dict[tuple[str, int, int], tuple[int, bytes]] = {}  # (kind, round, owner) -> (x, share)
        self.participants = list(range(len(names)))  # the current round's, or everyone before the first
        self.round = -1
        self.given: dict[int, str] = {}  # this round: owner -> the kind of share revealed for it
        self.keys: dict[int, bytes] = {}  # this round: owner -> its round mask key, as relayed to this user

    def hold(self, round_: int, opened: dict[int, bytes]) -> dict[int, bytes]:
        """Keep a round's shares (of each sender's b_u,r and s_u,r); returns the senders' round mask keys."""
        keys = {}
        for owner, content in opened.items():
            self.held[(SELF, round_, owner)] = (self.me + 1, content[:SEED_BYTES])
            self.held[(SECRET, round_, owner)] = (self.me + 1, content[SEED_BYTES : 2 * SEED_BYTES])
            keys[owner] = content[2 * SEED_BYTES :]
        self.keys = keys
        return keys

    def _index(self, names: list[str], what: str) -> list[int]:
        unknown = [n for n in names if n not in self.names]
        if unknown or len(set(names)) != len(names):
            raise ParameterError(f"the server's {what} names unknown or repeated users; refusing.")
        return [self.names.index(n) for n in names]

    def begin(self, round_: int, names: list[str]) -> list[int]:
        """Check the server's participant list for a new round: a later round, a subset of the last
        round's participants (a user that left stays out), this user included, at least t users."""
        if round_ <= self.round:
            raise ParameterError("each round number is used once (its masks must never repeat).")
        who = self._index(names, f"round {round_}")
        new = sorted(set(who) - set(self.participants))
        if new:
            raise ParameterError(
                f"the server's round {round_} names {self.names[new[0]]}, which was not among the last "
                "round's participants (a user that left stays out); participants may only shrink, refusing the round."
            )
        if len(who) < self.threshold:
            raise ParameterError(
                f"the server's round {round_} names {len(who)} participants, fewer than the threshold "
                f"{self.threshold}; refusing the round."
            )
        if self.me not in who:
            raise ParameterError(f"the server's round {round_} does not name this user; refusing the round.")
        self.round, self.participants, self.given, self.keys = round_, sorted(who), {}, {}
        return self.participants

    def reveal(self, request: dict) -> dict:
        """This user's shares for an unmask request {round, self: [names], secret: [names]}: of each
        survivor's self-mask seed, of each left user's mask secret; never both for one user in a round."""
        round_ = int(request["round"])
        if round_ != self.round:
            raise ParameterError(
                f"the unmask request is for round {round_}, but this user's current round is {self.round}; refusing."
            )
        survivors, left = self._index(request["self"], "unmask request"), self._index(request["secret"], "unmask request")
        if self.me in left:  # it is answering, so it did not leave: a server that says so is after its mask secret
            raise ParameterError(
                f"the unmask request for round {round_} says this user left, but it is answering; it "
                "never reveals a share of its own mask secret, refusing."
            )
        for owner in survivors + left:
            kind = SELF if owner in survivors else SECRET
            if owner in survivors and owner in left or self.given.get(owner, kind) != kind:
                raise ParameterError(
                    f"the unmask request for round {round_} asks for both the self-mask share and the mask "
                    f"secret share of {self.names[owner]}; together they unmask its gradient, refusing."
                )
            if owner not in self.participants:
                raise ParameterError(
                    f"the unmask request names {self.names[owner]}, not a participant of round {round_}; refusing."
                )
        if len(survivors) < self.threshold:
            raise ParameterError(
                f"the unmask request for round {round_} names {len(survivors)} survivors, fewer than the "
                f"threshold {self.threshold}: their sum would not be protected; refusing."
            )
        out: dict[str, dict] = {SELF: {}, SECRET: {}, KEYS: {self.names[o]: k.hex() for o, k in self.keys.items()}}
        for kind, owners in ((SELF, survivors), (SECRET, left)):
            for owner in owners:  # both kinds are of this round's secrets only (s_u,r is fresh each round)
                self.given[owner] = kind
                if (kind, round_, owner) in self.held:
                    x, share = self.held[(kind, round_, owner)]
                    out[kind][self.names[owner]] = [x, share.hex()]
        self.participants = [p for p in self.participants if p not in left]  # out for the rest of the run
        return out


def gather(replies: list[dict], names: list[str], kind: str) -> dict[int, list[tuple[int, bytes]]]:
    """The server's part: per owner, the (x, share) pairs the survivors returned of one kind."""
    out: dict[int, list[tuple[int, bytes]]] = {}
    for reply in replies:
        for name, (x, share) in reply.get(kind, {}).items():
            out.setdefault(names.index(name), []).append((int(x), bytes.fromhex(share)))
    return out


def unmask(
    totals: list[int], replies: list[dict], directory: dict, survivors: list[int], left: list[int], round_: int, context: bytes
) -> list[int]:
    """The server's part: the decrypted sums of the survivors' messages, less their self-masks and
    plus the left users' masks toward them (each rebuilt from t shares), mod n: the survivors' sum."""
    names, t, n = directory["users"], directory["threshold"], int(directory["n"])
    keys = {names.index(name): bytes.fromhex(k) for reply in replies for name, k in reply.get(KEYS, {}).items()}
    found = gather(replies, names, SELF)
    for u in survivors:
        seed = combine(found.get(u, []), t, f"{names[u]}'s self-mask seed")
        totals = [a - m for a, m in zip(totals, self_mask(seed, round_, n, len(totals)))]
    found = gather(replies, names, SECRET)
    for u in left:
        if u not in keys and u not in found:  # left before sharing its round secrets: nobody masked toward it
            continue
        agreement = Agreement(combine(found.get(u, []), t, f"{names[u]}'s mask secret"))
        if agreement.public_key() != keys.get(u):
            raise ParameterError(f"the shares of {names[u]}'s mask secret do not rebuild its announced key; the round is void.")
        agreement.agree_with(u, keys, context)
        totals = [a + m for a, m in zip(totals, agreement.mask(n, round_, len(totals), among=survivors))]
    return [a % n for a in totals]
