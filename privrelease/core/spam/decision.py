"""The decision threshold of ``spam classify``, chosen on the evaluation mail, and what it gives there.

A logistic model's score is not calibrated at 0: trained with the first-order rule from w = 0 for a
few rounds, every score can be negative, and the sign calls every message ham (issue #42: 0 of 379
spam flagged at AUC 0.93). The threshold is part of the model: the cutoff T is the least integer score
at which at most ``max_false_positive_rate`` of the evaluation mail's ham would be called spam (spam iff
S > T, S = Σ_{j∈x} W_j as the protocol sums it, ``privrelease.core.spam.classify``); the recall there is the largest
any cutoff gives at that false-positive rate. Precision, recall and the confusion matrix at T are
measured on the same mail (so they are in-sample figures, like the AUC beside them).

What T is computed from, and why it may be published, is the AUC's argument (docs/SPAM.md): the model
and the server operator's own evaluation mail, nothing of a user's.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from privrelease.core.spam.classify import SCALE_BITS, integer_weights

DEFAULT_MAX_FPR = 0.01


def scores(weights: np.ndarray, messages: list[np.ndarray]) -> list[int]:
    """Each message's integer score S = Σ_{j∈x} W_j, exactly as the private protocol sums it."""
    w = integer_weights(weights)
    return [sum(w[j] for j in np.asarray(x, dtype=np.int64)) for x in messages]


def cutoff(values: list[int], labels: np.ndarray, max_fpr: float) -> int:
    """The least T with #{ham: S > T} ≤ ⌊max_fpr · #ham⌋: the (m+1)-th largest ham score, m that floor."""
    ham = sorted((s for s, y in zip(values, labels) if y < 0), reverse=True)
    if not ham:
        raise ValueError("the evaluation mail holds no ham: no false-positive rate can be measured")
    allowed = math.floor(Fraction(str(max_fpr)) * len(ham))
    return ham[min(allowed, len(ham) - 1)]


def confusion(values: list[int], labels: np.ndarray, at: int) -> dict:
    """The confusion matrix of "spam iff S > at" on labelled mail, with precision, recall and the
    false-positive rate (None where undefined: nothing called spam, no spam, no ham)."""
    called = np.array([s > at for s in values], dtype=bool)
    spam = np.asarray(labels) > 0
    tp, fp = int((called & spam).sum()), int((called & ~spam).sum())
    fn, tn = int((~called & spam).sum()), int((~called & ~spam).sum())
    return {
        "true_positives": tp,
        "false_positives": fp,
        "false_negatives": fn,
        "true_negatives": tn,
        "precision": tp / (tp + fp) if tp + fp else None,
        "recall": tp / (tp + fn) if tp + fn else None,
        "false_positive_rate": fp / (fp + tn) if fp + tn else None,
    }


def decide(weights: np.ndarray, messages: list[np.ndarray], labels: np.ndarray, max_fpr: float) -> dict:
    """The cutoff for ``weights`` on the evaluation mail and its figures there (report.json's ``decision``);
    ``at_sign``: the figures the bare sign (T = 0) would give, for comparison."""
    values = scores(weights, messages)
    t = cutoff(values, labels, max_fpr)
    return {
        "max_false_positive_rate": max_fpr,
        "cutoff_units": t,
        "cutoff": math.ldexp(t, -SCALE_BITS),
        **confusion(values, labels, t),
        "at_sign": confusion(values, labels, 0),
    }


def label(weights: np.ndarray, x: np.ndarray, t: int) -> str:
    """The label the private protocol gives ``x``, computed in the clear (tests and the plaintext twin)."""
    return "spam" if scores(weights, [x])[0] > t else "ham"
