"""Unique-feature exposure on SpamAssassin: the measurements behind the spam participation floor.

A message that holds a feature no other message of the same sum holds shows its label (round 0)
or its margin (later rounds) on that coordinate of what the server decrypts. For each measured
feature map (hashed byte 4-grams mod 10^6, then ``dimension`` buckets) and each round size, this
draws ``DRAWS`` random rounds of SpamAssassin messages and prints the largest fraction of a round's
messages that were exposed. The floors in ``privrelease.core.spam.floors.MEASURED`` are the smallest measured
sizes at which no draw exposed any message. Usage: python bench/bench_spam_exposure.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from privrelease.core.spam import features as F
from privrelease.core.spam.mail import read_mail

DRAWS = 5
SIZES = (50, 100, 200, 500, 1000, 2000)
DIMENSIONS = (500, 1000, 2000, 5000, 10_000, 100_000, 512, 4096)


def exposure(x: list[np.ndarray], dimension: int) -> float:
    """The fraction of messages holding a feature no other message of the sum holds."""
    counts = np.bincount(np.concatenate(x), minlength=dimension)
    return float(np.mean([bool((counts[xi] == 1).any()) for xi in x]))


def main() -> None:
    texts, _ = read_mail(Path(os.environ["PRIVRELEASE_DATA"]) / "spamassassin/spamassassin.jsonl.gz")
    raw = [F.grams(t, 1_000_000) for t in texts]
    print("| dimension | " + " | ".join(f"{s} messages" for s in SIZES) + " |")
    print("|---|" + "---|" * len(SIZES))
    for d in DIMENSIONS:
        reducer = F.Reducer(F.FeatureParams(reduction="hash", dimension=d))
        x = [reducer.apply(g) for g in raw]
        rng = np.random.default_rng(d)
        cells = []
        for size in SIZES:
            worst = max(exposure([x[i] for i in rng.choice(len(x), size, replace=False)], d) for _ in range(DRAWS))
            cells.append(f"{100 * worst:.1f}%")
        print(f"| {d} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
