"""The exact exponential-mechanism sampler (``privrelease.core.noise.exponential``) and an aggregate quantile's use of it.

- Law: draws against the exact probabilities w_k exp(-r d_k) / Z (chi-square at a false-alarm rate of
  10^-3, fixed seeds), for the whole sampler and for its exact (MPFR) pass alone; zero-weight candidates
  are never drawn; a rate twice the claimed one is caught by the same test.
- The float pass decides only away from the cumulative sums: a uniform landing on a boundary is handed to
  the exact pass, which decides it as exact inversion does.
- Candidates (``aggregate_quantile.candidates``) against a brute force over every step: the weights expand
  to exactly the steps of [lo, hi), each with the ranks its values span.
- The score's sensitivity, by brute force over neighbours: adding or removing a user with up to R rows of
  a key moves every step's score by at most max(q, 1 - q) R, replacing one record by at most 1, and both
  bounds are reached (half of them is not a bound).
- The preview's 95% rank bound holds for the drawn steps (and a tenth of it does not).
"""

from __future__ import annotations

from fractions import Fraction

import gmpy2
import numpy as np
import pytest
from scipy import stats

from privrelease.core import noise
from privrelease.core.mechanisms.aggregate import quantile as aq
from privrelease.core.mechanisms.aggregate.budget import Pick
from privrelease.core.noise import exponential as em
from privrelease.core.privacy import events

W = np.array([3, 1, 0, 5, 2, 40])
A = np.array([0, 4, 5, 6, 9, 30])
B = np.array([3, 4, 5, 8, 12, 30])
T, RATE = Fraction(11, 2), Fraction(1, 2)
N = 12_000


def exact_law(w, a, b, t: Fraction, rate: Fraction) -> np.ndarray:
    d = np.maximum(0, np.maximum(a - float(t), float(t) - b))
    p = w * np.exp(-float(rate) * (d - d.min()))
    return p / p.sum()


def chi_square_p(picks: list[int], w, a, b, t, rate) -> float:
    counts = np.bincount(picks, minlength=len(w))
    p = exact_law(w, a, b, t, rate)
    assert counts[w == 0].sum() == 0  # a candidate of no weight is never drawn
    return stats.chisquare(counts[w > 0], p[w > 0] * len(picks)).pvalue


def test_draws_follow_the_exponential_mechanisms_exact_law():
    rng = noise.Randomness(20261127)
    picks = [em.exponential(rng, W, A, B, T, RATE) for _ in range(N)]
    assert chi_square_p(picks, W, A, B, T, RATE) > 1e-3
    assert chi_square_p(picks, W, A, B, T, RATE * 2) < 1e-3  # the weakened claim: twice the rate is caught


def test_the_exact_pass_alone_follows_the_same_law():
    rng = noise.Randomness(7)
    picks = [em._exact_pass(rng, W, A, B, T, RATE, int(noise.words(rng, 1)[0])) for _ in range(3000)]
    assert chi_square_p(picks, W, A, B, T, RATE) > 1e-3


def test_a_uniform_on_a_boundary_is_decided_by_the_exact_pass():
    w, a, b = np.array([1, 1]), np.array([0, 0]), np.array([0, 0])  # two candidates of weight 1: cumulative sums 1, 2
    word = 2**63  # U Z = 1: exactly the first candidate's cumulative sum
    assert em._float_pass(w, a, b, Fraction(0), Fraction(1), word) is None
    assert em._exact_pass(noise.Randomness(1), w, a, b, Fraction(0), Fraction(1), word) == 1  # S_0 <= U Z < S_1
    assert em._float_pass(w, a, b, Fraction(0), Fraction(1), 2**62) == 0  # away from the boundary the floats decide


def _first_of_two(gap: Fraction, rate: Fraction) -> gmpy2.mpfr:
    """P[k = 0] for two candidates of weight 1 whose distances differ by ``gap`` (d_1 - d_0), at 256 bits."""
    with gmpy2.context(gmpy2.get_context(), precision=256):
        return 1 / (1 + gmpy2.exp(-gmpy2.mpq(gap.numerator, gap.denominator) * gmpy2.mpq(rate.numerator, rate.denominator)))


@pytest.mark.parametrize(
    ("low", "target", "rate"),
    [
        ([3 * 2**45 + 1, 3 * 2**45 + 2], Fraction(0), Fraction(1, 3)),  # both far above the target
        ([-(3 * 2**45 + 1), -(3 * 2**45 + 2)], Fraction(0), Fraction(1, 3)),  # both far below it
        ([0, 1], Fraction(2**52) + Fraction(1, 3), Fraction(5, 7)),  # a target with a huge integer part
        ([10**8, 10**8 + 1], Fraction(7, 2), noise.rate(28.0, 1)),  # the largest rate a release draws at, far off
        ([2**61 + 5, 2**61 + 6], Fraction(1, 3), Fraction(1, 3)),  # past int64's safe range: left to the exact pass
        ([-(2**63), -(2**63) + 1], Fraction(1, 3), Fraction(1, 3)),  # int64's least, whose abs overflows
    ],
)
def test_the_float_pass_never_decides_against_exact_inversion(low, target, rate):
    """Far from the target (every distance large, as when the noisy interval misses the quantile) the distances
    are large floats; their difference must still be exact enough: near the true boundary P[k = 0] 2^64 the
    float pass either defers or decides as exact inversion does (its old shift, by the least rounded distance,
    put the boundary 2^53 words off)."""
    w, low = np.array([1, 1]), np.array(low, dtype=np.int64)
    d = [max(Fraction(0), int(x) - target, target - int(x)) for x in low]
    edge = int(gmpy2.floor(_first_of_two(d[1] - d[0], rate) * 2**64))  # U < P[k = 0] draws 0
    for offset in sorted({s * 2**j for j in range(62) for s in (-1, 1)} | {0}):
        word = edge + offset
        if 0 <= word < 2**64:
            k = em._float_pass(w, low, low, target, rate, word)
            assert k is None or (word != edge and k == (0 if word < edge else 1)), (offset, k)  # edge's box holds P[k = 0]


def test_far_candidates_underflow_without_error_and_huge_weights_still_count():
    rng = noise.Randomness(3)
    w, a, b = np.array([1, 10**15]), np.array([0, 5000]), np.array([0, 5000])
    assert {em.exponential(rng, w, a, b, Fraction(0), Fraction(1)) for _ in range(200)} == {0}  # e^-5000 * 1e15 ~ 0
    w = np.array([1, 10**15])
    b = np.array([0, 20])  # e^-20 * 1e15 = 2e6: the far candidate nearly always
    assert sum(em.exponential(rng, w, np.array([0, 20]), b, Fraction(0), Fraction(1)) for _ in range(200)) >= 195


@pytest.mark.parametrize(
    "w,a,b,message",
    [
        ([0, 0], [0, 1], [0, 1], "no candidate has weight"),
        ([1, -1], [0, 1], [0, 1], "weights >= 0"),
        ([1, 1], [0, 2], [0, 1], "low <= high"),
        ([1], [0, 1], [0, 1], "of one length"),
    ],
)
def test_bad_candidates_are_refused(w, a, b, message):
    with pytest.raises(ValueError, match=message):
        em.exponential(noise.Randomness(0), np.array(w), np.array(a), np.array(b), Fraction(0), Fraction(1))


def brute(values_steps: np.ndarray, lo: int, hi: int) -> list[tuple[int, int]]:
    """Per step of [lo, hi): (rows below it, rows up to its end)."""
    return [(int((values_steps < f).sum()), int((values_steps <= f).sum())) for f in range(lo, hi)]


@pytest.mark.parametrize("seed", range(6))
def test_candidates_expand_to_every_step_with_its_ranks(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 40, rng.integers(0, 30))
    lo, hi = sorted(rng.choice(np.arange(0, 41), 2, replace=False))
    inside = x[(x >= lo) & (x < hi)]
    steps, counts = np.unique(inside, return_counts=True)
    w, a, b, first = aq.candidates(steps, counts, lo, hi, int((x < lo).sum()))
    expanded = [(f, int(ak), int(bk)) for wk, ak, bk, fk in zip(w, a, b, first) for f in range(fk, fk + wk)]
    assert [f for f, _, _ in expanded] == list(range(lo, hi))
    assert [(ak, bk) for _, ak, bk in expanded] == brute(x, lo, hi)
    t = aq.target(0.5, len(x))
    if len(x) and lo <= np.sort(x)[max(int(np.ceil(len(x) / 2)), 1) - 1] < hi:  # the true median's step is the best
        assert first[aq.best(w, a, b, t)] == np.sort(x)[max(int(np.ceil(len(x) / 2)), 1) - 1]


def scores(x: np.ndarray, q: float, steps: int = 12) -> list[Fraction]:
    t = aq.target(q, len(x))
    return [max(Fraction(0), a - t, t - b) for a, b in brute(x, 0, steps)]


def moved(x: np.ndarray, y: np.ndarray, q: float) -> Fraction:
    """The most any step's score moves between x and y (exactly)."""
    return max(abs(u - v) for u, v in zip(scores(x, q), scores(y, q)))


@pytest.mark.parametrize("q", [0.1, 0.5, 0.75])
def test_the_scores_sensitivity_is_max_q_one_minus_q_times_the_users_rows(q):
    rng = np.random.default_rng(5)
    r, worst_user, worst_record = 3, Fraction(0), Fraction(0)
    for _ in range(400):
        x = rng.integers(0, 12, rng.integers(1, 15))
        added = rng.integers(0, 12, rng.integers(1, r + 1))  # a user's rows in this key
        worst_user = max(worst_user, moved(np.concatenate([x, added]), x, q))
        y = x.copy()
        y[0] = rng.integers(0, 12)  # one record replaced
        worst_record = max(worst_record, moved(y, x, q))
    bound = max(Fraction(str(q)), 1 - Fraction(str(q))) * r
    assert worst_user <= bound and worst_record <= 1
    assert worst_user > bound / 2 and worst_record > Fraction(1, 2)  # half the bound is not one


def test_drawn_steps_fall_within_the_previews_rank_bound():
    rng = np.random.default_rng(0)
    x = np.sort(rng.integers(0, 4096, 2000))
    steps, counts = np.unique(x, return_counts=True)
    pick = Pick(0, 0.5, events.Exponential(0.2), Fraction(1), 2)
    bound = 2 * 1.0 / 0.2 * (np.log(4096) + np.log(20))
    drawn = aq.steps(noise.Randomness(11), pick, [(steps, counts)] * 400, np.zeros(400, int), np.full(400, 4096),
                     np.zeros(400, int), np.full(400, len(x)))  # fmt: skip
    rank_error = np.abs(np.searchsorted(x, drawn) - 1000)
    assert (rank_error <= bound).mean() >= 0.95
    assert (rank_error <= bound / 10).mean() < 0.9  # the weakened claim: a tenth of the bound is not one


def test_rows_drawn_together_decide_as_each_alone():
    """The float pass over a batch (rows of many lengths padded into matrices) decides each row exactly as it
    does alone; the batch's draws follow each row's law."""
    rng = np.random.default_rng(9)
    rows, words = [], []
    for _ in range(300):
        k = int(rng.integers(1, 300))
        low = np.sort(rng.integers(-50, 50, k))
        rows.append(
            (
                rng.integers(0, 5, k) + (np.arange(k) == 0),
                low,
                low + rng.integers(0, 3, k),
                Fraction(int(rng.integers(-60, 60)), 7),
            )
        )
        words.append(int(rng.integers(0, 2**63)) * 2 + int(rng.integers(0, 2)))
    together = em._float_rows(rows, RATE, words)
    assert together == [em._float_rows([r], RATE, [wd])[0] for r, wd in zip(rows, words)]
    assert sum(k is not None for k in together) >= 295  # the floats decide nearly every row
    picks = em.exponentials(noise.Randomness(5), [(W, A, B, T)] * N, RATE)
    assert chi_square_p(list(picks), W, A, B, T, RATE) > 1e-3
