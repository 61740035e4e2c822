"""``dpne_counts.distinct_pairs`` packs (user, gram) into one int64 by shifts: at the edge of 63 bits it is still
exact, past it the grams' codes stand for them, and each pair comes back as it went in (``tests/mechanisms/test_dpne.py``
has the common cases)."""

from __future__ import annotations

import numpy as np
import pytest

from privrelease.core.mechanisms.dpne import counts as dpne_counts


@pytest.mark.parametrize(
    ("user_span", "gram_span"),
    [(2, 2**61), (3, 2**61), (1, 2**62), (4, 1), (1000, 2**52), (1025, 2**53)],
)
def test_pairs_at_the_edge_of_63_bits_are_exact(user_span, gram_span):
    rng = np.random.default_rng(user_span)
    users = (rng.integers(0, user_span, 4000) + 7).astype(np.int32)
    grams = rng.integers(0, min(gram_span, 60), 4000) * (gram_span // 60 if gram_span > 60 else 1) - 3
    grams[0], grams[1] = -3, gram_span - 4  # the full span
    u, g = dpne_counts.distinct_pairs(users, grams)
    assert list(zip(u.tolist(), g.tolist())) == sorted(set(zip(users.tolist(), grams.tolist())))
    assert u.dtype == g.dtype == np.int64
