"""The participation floor of spam training, derived from the feature map and checked per user.

What the server decrypts each round is Σ_i x_i·t_i over the round's messages. A message holding a
feature that no other message of that sum holds shows its t_i on that coordinate: its label in
round 0, its margin later. How many messages a sum needs so that none stands alone depends on the
feature map, so the floor is a measured property of (reduction, dimension), not one number:
``bench/bench_spam_exposure.py`` draws random rounds of SpamAssassin mail for each map and size,
and ``MEASURED`` keeps, per map, the smallest measured size at which no draw exposed any message
(the stated bound: 0 exposed messages in 5 draws; README "What the server learns").

The floor holds for each user's block on its own, not only for the round's sum: with a server
colluding with one user, the sum minus the colluder's own gradient is the other users' gradient,
so every user's block must itself meet the floor (with two users it is the victim's whole
gradient). Outside test mode a map that was not measured is refused; in test mode (small corpora,
small keys) the floor is 1 unless a test sets one.
"""

from __future__ import annotations

from core import noise
from core.errors import ParameterError

MIN_USERS = 2
DRAWS = 5  # random SpamAssassin rounds per (map, size) in the measurement
MODULUS = 1_000_000  # every measured map hashes byte 4-grams mod 10^6 first: another modulus is another map

# (reduction, dimension) of 4-grams mod MODULUS -> smallest measured round size at which no message of
# any draw held a feature of its own; bench/bench_spam_exposure.py prints the table behind these numbers.
# Made non-decreasing in the dimension (5000 measured clean from 100, 2000 only from 200). Maps
# with no clean measured size (hash to 4096 or to 10^5: exposed messages even at 2000) are absent.
MEASURED: dict[tuple[str, int], int] = {
    ("hash", 500): 50,
    ("hash", 512): 2000,
    ("hash", 1000): 50,
    ("hash", 2000): 200,
    ("hash", 5000): 200,
    ("hash", 10_000): 1000,
}


def floor(reduction: str, dimension: int, modulus: int = MODULUS) -> int:
    """The least number of messages each user must sum per round for this feature map (4-grams mod
    ``modulus``, then the reduction: x mod 2^14 mod 10^4 keeps mostly the last two bytes, and is not
    the measured x mod 10^6 mod 10^4)."""
    if noise.test_mode():
        return 1
    if (reduction, dimension) not in MEASURED or modulus != MODULUS:
        maps = ", ".join(f"{r} to {d} ({f} messages per user)" for (r, d), f in sorted(MEASURED.items()))
        raise ParameterError(
            f"no participation floor was measured for reduction {reduction!r} to {dimension} features of 4-grams mod "
            f"{modulus}, so the messages whose features no other message shares cannot be bounded; use a measured "
            f"feature map (modulus {MODULUS}): {maps}."
        )
    return MEASURED[(reduction, dimension)]


def check_participation(blocks: list[int], least: int) -> None:
    """The floor users insist on before taking part: at least two users, and each user's round block
    at least ``least`` messages (so the round's sum holds at least that many, too)."""
    if len(blocks) < MIN_USERS:
        raise ParameterError(f"secure aggregation needs at least {MIN_USERS} users (with one, the sum is that user's "
                             "gradient); add users.")  # fmt: skip
    small = [k + 1 for k, b in enumerate(blocks) if b < least]
    if small:
        raise ParameterError(
            f"user {small[0]} sums {blocks[small[0] - 1]} messages per round; each user needs at least {least} for this "
            "feature map, so that no message's features stand alone in what the server decrypts even if the server "
            "learns the other users' gradients; give each user more mail, raise block_size or use batch mode."
        )
