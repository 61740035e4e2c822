"""Cost of the ledger's bookkeeping: a charge and its outcome (HMAC, anchor fsync, exact sums),
recovery with nothing to settle, ``verify`` over a long ledger, and concurrent charges from several
processes, on the home's DuckDB file or on PostgreSQL.

Run: .venv/bin/python bench/bench_ledger.py [--releases 500] [--store duckdb|postgresql] [--url URL]
     [--processes 4 --charges 50] [--approve-above SHARE]
With ``--store postgresql`` and no ``--url``, a throw-away local PostgreSQL 15 is started (as in the tests).
Results are recorded by hand in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from privrelease.core.ledger.ledger import PUBLISHED, ChargeRequest  # noqa: E402
from privrelease.core.privacy.adjacency import ReplaceRecord  # noqa: E402
from privrelease.core.privacy.budget import Budget  # noqa: E402
from privrelease.core.privacy.cost import DPCost  # noqa: E402
from privrelease.core.privacy.events import EpsilonDelta  # noqa: E402
from privrelease.core.release import charged  # noqa: E402
from privrelease.core.release.home import Home  # noqa: E402

CHARGER = """
import sys, time
from pathlib import Path
from privrelease.core.privacy.adjacency import ReplaceRecord
from privrelease.core.privacy.cost import DPCost
from privrelease.core.privacy.events import EpsilonDelta
from privrelease.core.ledger.ledger import ChargeRequest, Ledger
db, worker, n, start = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
ledger = Ledger(db)
ledger.entries()  # connect before the clock starts
while not start.exists():
    time.sleep(0.001)
for i in range(n):
    began = time.perf_counter()
    ledger.reserve(ChargeRequest("shared", f"{worker}-{i}", "dp", DPCost(EpsilonDelta(0.001, 0.0), ReplaceRecord()), "m", {}, {}))
    print(time.perf_counter() - began)
"""


def sequential(root: Path, n: int, approve_above: float | None = None) -> list[str]:
    store = Home(root)
    ledger = store.ledger
    ledger.set_budget("d", Budget(float(n), 1e-3), approve_above)  # with a share, every charge is looked at under the lock
    latencies = []
    for i in range(n):
        began = time.perf_counter()
        ledger.reserve(ChargeRequest("d", f"r{i}", "dp", DPCost(EpsilonDelta(0.5, 1e-9), ReplaceRecord()), "m", {"i": i}, {}))
        ledger.settle(f"r{i}", PUBLISHED, {})
        latencies.append(time.perf_counter() - began)
    started = time.perf_counter()
    charged.recover(store)
    recovered = time.perf_counter() - started
    started = time.perf_counter()
    entries = ledger.verify(store.releases)
    verified = time.perf_counter() - started
    return [
        f"| charge + outcome over {n} releases (the last on a {2 * n}-entry ledger"
        + ("" if approve_above is None else f"; --approve-above {approve_above:g}, taken under the lock")
        + "): mean, median, p95 | "
        f"{statistics.mean(latencies) * 1e3:.1f} ms, {statistics.median(latencies) * 1e3:.1f} ms, "
        f"{statistics.quantiles(latencies, n=20)[-1] * 1e3:.1f} ms |",
        f"| recover, nothing to settle ({entries} entries) | {recovered * 1e3:.1f} ms |",
        f"| verify ({entries} entries, {entries} anchors) | {verified * 1e3:.1f} ms |",
    ]


def concurrent(root: Path, processes: int, charges: int) -> list[str]:
    """``processes`` processes charge one dataset ``charges`` times each, all at once."""
    Home(root).ledger.set_budget("shared", Budget(float(processes * charges), 0.0))
    start = root / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHARGER, str(Home(root).db), f"w{w}", str(charges), str(start)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        for w in range(processes)
    ]
    time.sleep(3)  # every process imported and connected
    began = time.perf_counter()
    start.touch()
    latencies = [float(x) for p in procs for x in p.communicate()[0].split()]
    wall = time.perf_counter() - began
    assert len(latencies) == processes * charges and all(p.returncode == 0 for p in procs)
    return [
        f"| {processes} processes x {charges} charges on one dataset: throughput; latency median, p95 | "
        f"{len(latencies) / wall:.0f} charges/s; {statistics.median(latencies) * 1e3:.1f} ms, "
        f"{statistics.quantiles(latencies, n=20)[-1] * 1e3:.1f} ms |"
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--releases", type=int, default=500)
    parser.add_argument("--store", choices=["duckdb", "postgresql"], default="duckdb")
    parser.add_argument("--url", help="an empty PostgreSQL database (default: a throw-away local server)")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--charges", type=int, default=50)
    parser.add_argument("--approve-above", type=float, help="the cap's approval share (each charge's look is then taken)")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        if args.store == "postgresql":
            if args.url is None:
                from tests.support.pg import cluster

                args.url = stack.enter_context(cluster())
            os.environ["PRIVRELEASE_LEDGER_URL"] = args.url
        else:
            os.environ.pop("PRIVRELEASE_LEDGER_URL", None)
        rows = sequential(Path(stack.enter_context(tempfile.TemporaryDirectory())), args.releases, args.approve_above)
        if args.store == "postgresql":  # a fresh schema for the concurrent run
            import psycopg

            from privrelease.core import store

            store.close(args.url)
            with psycopg.connect(args.url, autocommit=True) as con:
                con.execute("DROP SCHEMA privrelease CASCADE")
        rows += concurrent(Path(stack.enter_context(tempfile.TemporaryDirectory())), args.processes, args.charges)
    print(f"store: {args.store}\n| what | time |\n|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
