"""Cost of the ledger's bookkeeping: a charge and its outcome (HMAC, anchor fsync, exact sums),
recovery with nothing to settle, and ``verify`` over a long ledger.

Run: .venv/bin/python bench/bench_ledger.py [--releases 500]
Results are recorded by hand in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from core import pipeline  # noqa: E402
from core.accounting import Budget  # noqa: E402
from core.ledger import PUBLISHED  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--releases", type=int, default=500)
    n = parser.parse_args().releases
    with tempfile.TemporaryDirectory() as tmp:
        store = pipeline.Store(Path(tmp))
        ledger = store.ledger
        ledger.set_budget("d", Budget(float(n), 1e-3))
        started = time.perf_counter()
        for i in range(n):
            ledger.reserve("d", f"r{i}", "dp", Budget(0.5, 1e-9), "replace one record", "m", {"i": i}, {})
            ledger.settle(f"r{i}", PUBLISHED, {})
        charged = time.perf_counter() - started
        started = time.perf_counter()
        pipeline.recover(store)
        recovered = time.perf_counter() - started
        started = time.perf_counter()
        entries = ledger.verify(store.releases)
        verified = time.perf_counter() - started
    print("| what | time |\n|---|---|")
    print(f"| charge + outcome, mean over {n} releases (the last on a {2 * n}-entry ledger) | {charged / n * 1e3:.1f} ms |")
    print(f"| recover, nothing to settle ({entries} entries) | {recovered * 1e3:.1f} ms |")
    print(f"| verify ({entries} entries, {entries} anchors) | {verified * 1e3:.1f} ms |")


if __name__ == "__main__":
    main()
