"""The participation floor of spam training, derived from the feature map and checked per user.

What the server decrypts each round is Σ_i x_i·t_i over the round's messages. A message holding a
feature that no other message of that sum holds shows its t_i on that coordinate: its label in
round 0, its margin later. How many messages a sum needs so that none stands alone depends on the
feature map, so the floor is a measured property of (4-gram modulus, reduction, dimension), not one number:
``bench/bench_spam_exposure.py`` draws random rounds of SpamAssassin mail for each map and size,
and ``MEASURED`` keeps, per map, the smallest measured size at which no draw exposed any message
(the stated bound: 0 exposed messages in 5 draws; docs/mechanisms/spam-training.md, "What the server still learns").

The floor holds for each user's block on its own, not only for the round's sum: with a server
colluding with one user, the sum minus the colluder's own gradient is the other users' gradient,
so every user's block must itself meet the floor (with two users it is the victim's whole
gradient). Outside test mode a map that was not measured is refused; in test mode (small corpora,
small keys) the floor is 1 unless a test sets one.
"""

from __future__ import annotations

from privrelease.core import noise
from privrelease.core.errors import ParameterError
from privrelease.core.spam.features import FeatureParams

MIN_USERS = 2
DRAWS = 5  # random SpamAssassin rounds per (map, size) in the measurement
# (4-gram modulus, reduction, dimension) -> smallest measured round size at which no message of any
# draw held a feature of its own; bench/bench_spam_exposure.py prints the table behind these numbers.
# Another modulus is another map (x mod 2^14 mod 10^4 keeps mostly a 4-gram's last two bytes; the
# measured x mod 10^6 mod 10^4 = x mod 10^4 does not). Made non-decreasing in the dimension (5000
# measured clean from 100, 2000 only from 200). Maps with no clean measured size (hash to 4096 or to
# 10^5: exposed messages even at 2000) are absent.
MEASURED: dict[tuple[int, str, int], int] = {
    (1_000_000, "hash", 500): 50,
    (1_000_000, "hash", 512): 2000,
    (1_000_000, "hash", 1000): 50,
    (1_000_000, "hash", 2000): 200,
    (1_000_000, "hash", 5000): 200,
    (1_000_000, "hash", 10_000): 1000,
}


def floor(features: FeatureParams) -> int:
    """The least number of messages each user must sum per round for this feature map."""
    if noise.test_mode():
        return 1
    key = (features.modulus, features.reduction, features.dimension)
    if key not in MEASURED:
        maps = ", ".join(f"{r} to {d} of 4-grams mod {m} ({f} messages per user)" for (m, r, d), f in sorted(MEASURED.items()))
        raise ParameterError(
            f"no participation floor was measured for reduction {features.reduction!r} to {features.dimension} features "
            f"of 4-grams mod {features.modulus}, so the messages whose features no other message shares cannot be "
            f"bounded; use a measured feature map: {maps}."
        )
    return MEASURED[key]


def check_participation(blocks: list[int], least: int) -> None:
    """The floor users insist on before taking part: at least two users, and each user's round block
    at least ``least`` messages (so the round's sum holds at least that many, too)."""
    if len(blocks) < MIN_USERS:
        raise ParameterError(
            f"secure aggregation needs at least {MIN_USERS} users (with one, the sum is that user's gradient); add users."
        )
    small = [k + 1 for k, b in enumerate(blocks) if b < least]
    if small:
        raise ParameterError(
            f"user {small[0]} sums {blocks[small[0] - 1]} messages per round; each user needs at least {least} for this "
            "feature map, so that no message's features stand alone in what the server decrypts even if the server "
            "learns the other users' gradients; give each user more mail, raise block_size or use batch mode."
        )
