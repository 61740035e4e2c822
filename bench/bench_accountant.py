"""The mechanism-aware ledger: how many releases one cap admits by basic composition and by the
admission filter, the tight PLD epsilon of what the filter admitted, and the time of ``ledger totals``.

Run: .venv/bin/python bench/bench_accountant.py [--sizes 10 100 1000]
Results are recorded by hand in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from itertools import cycle
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from privrelease.core.ledger.ledger import ChargeRequest, Ledger  # noqa: E402
from privrelease.core.mechanisms import dpne, outliers  # noqa: E402
from privrelease.core.privacy import accountant as acc  # noqa: E402
from privrelease.core.privacy import events, pld  # noqa: E402
from privrelease.core.privacy.budget import Budget  # noqa: E402

CAP = Budget(5.0, 1e-5)


def dpne_plan(**kw):
    return dpne.plan(dpne.Params(user_column="u", text_column="t", **kw))


def spend(plan, name: str) -> acc.Spend:
    return acc.Spend.of(name, plan.cost.event)


def histories() -> dict[str, list[acc.Spend]]:
    """Each workload as an endless cycle of releases (first 400 taken). The outlier requests are planned
    as a release binds them, with N declared (10,000 records), so their noise is decided: global."""
    bound = {"k": 5, "r": 1.0, "delta": 1e-6, "rows": 10_000}
    count = outliers.plan(outliers.Params(epsilon=0.5, columns=["a", "b"], standardize=False, **bound))
    top = outliers.plan(outliers.Params(query="top_subspaces", epsilon=1.0, h=3, c=1, standardize=False, **bound))
    private = outliers.plan(
        outliers.Params(epsilon=1.0, columns=["a", "b"], **bound, standardize={"bounds": {"a": [0, 1], "b": [0, 1]}})
    )
    table4 = dpne_plan(epsilon=1.0, delta=1e-7, T=6, delta0=10)
    workloads = {
        "DPNE at Table 4's settings (eps 1, delta 1e-7, T 6, Delta0 10)": [spend(table4, "dpne")],
        "DPNE, defaults, (1, 1e-6)": [spend(dpne_plan(epsilon=1.0, delta=1e-6), "dpne")],
        "DPNE, defaults, (0.5, 1e-7)": [spend(dpne_plan(epsilon=0.5, delta=1e-7), "dpne")],
        "outlier count (0.5, 1e-6), public scales": [spend(count, "count")],
        "outlier count (1, 1e-6), private standardization": [spend(private, "count+std")],
        "top-3 subspaces with counts (1, 1e-6)": [spend(top, "top")],
        "mixed: count (0.5) / top-3 (1) / private count (1)": [spend(count, "c"), spend(top, "t"), spend(private, "p")],
        "Gaussian mechanism (1, 1e-6), sensitivity 1": [acc.Spend("g", Budget(1.0, 1e-6), events.Gaussian(acc_sigma(1.0, 1e-6)))],
    }
    return {name: [s for s, _ in zip(cycle(w), range(400))] for name, w in workloads.items()}


def acc_sigma(eps: float, delta: float) -> float:
    from privrelease.core.privacy.budget import gaussian_sigma

    return gaussian_sigma(eps, delta)


def admitted(ok, seq: list[acc.Spend]) -> list[acc.Spend]:
    """The releases of ``seq`` admitted in turn; ``ok(history, candidate)`` gives (admitted, candidate as counted)."""
    history: list[acc.Spend] = []
    for s in seq:
        yes, counted = ok(history, s)
        if not yes:
            break
        history.append(counted)
    return history


def basic_ok(history: list[acc.Spend], candidate: acc.Spend) -> tuple[bool, acc.Spend]:
    """The rule before this change: the charges' exact sums within the whole cap."""
    e = sum(acc.exact(s.budget.epsilon) for s in history + [candidate])
    d = sum(acc.exact(s.budget.delta) for s in history + [candidate])
    return e <= acc.exact(CAP.epsilon) and d <= acc.exact(CAP.delta), candidate


def filter_ok(f: acc.Filter):
    def ok(history: list[acc.Spend], candidate: acc.Spend) -> tuple[bool, acc.Spend]:
        decision, counted = f.admit(history, candidate)
        return decision.admitted, counted

    return ok


def admission_table() -> None:
    f = acc.Filter.of(CAP)
    print(
        f"cap {CAP.epsilon:g} / {CAP.delta:g}; filter: Rényi order {f.alpha:.4g}, budget K = {f.k:.4f}, "
        f"delta for conversion {float(f.delta_conv):g}, room for (eps, delta)-only deltas {float(f.delta_room):g}"
    )
    print("| workload | basic | filter | filter's eps at 1e-5 | PLD eps at 1e-5 (tight) |")
    print("|---|---|---|---|---|")
    for name, seq in histories().items():
        nb = len(admitted(basic_ok, seq))
        kept = admitted(filter_ok(f), seq)
        tight = pld.epsilon([e for s in kept for e in s.curve], CAP.delta) if kept else 0.0
        modes = "/".join(sorted({s.mode for s in kept}))
        print(f"| {name} | {nb} | {len(kept)} ({modes}) | {f.spent_epsilon(kept) or 0:.3f} | {tight:.3f} |")


def fill(home: Path, n: int, distinct: bool) -> Ledger:
    """A ledger of n DPNE charges (all alike, or each at its own epsilon: n distinct PLDs)."""
    ledger = Ledger(home / "privrelease.duckdb")
    ledger.set_budget("posts", Budget(10_000.0, 1e-2))
    plans = {}
    for i in range(n):
        eps = 1.0 + (i * 1e-3 if distinct else 0.0)
        plan = plans.get(eps) or plans.setdefault(eps, dpne_plan(epsilon=eps, delta=1e-6))
        ledger.reserve(ChargeRequest("posts", f"r{i}", "dp", plan.cost, "dpne", {"i": i}, plan.detail))
    return ledger


def timings(sizes: list[int]) -> None:
    exe = str(Path(sys.executable).parent / "privrelease")
    print(
        "| entries | histories | `Ledger.totals()` cold (PLD computed) | warm (PLD cached) | `privrelease ledger totals` (warm, whole process) |"
    )
    print("|---|---|---|---|---|")
    for n in sizes:
        for distinct in (False, True):
            with tempfile.TemporaryDirectory() as tmp:
                home = Path(tmp)
                ledger = fill(home, n, distinct)
                began = time.perf_counter()
                ledger.totals()
                cold = time.perf_counter() - began
                began = time.perf_counter()
                ledger.totals()
                warm = time.perf_counter() - began
                env = {**os.environ, "PRIVRELEASE_HOME": str(home)}
                began = time.perf_counter()
                subprocess.run([exe, "ledger", "totals"], env=env, check=True, capture_output=True)
                cli = time.perf_counter() - began
                kind = "each at its own epsilon" if distinct else "all alike"
                print(f"| {n} | {kind} | {cold:.3f} s | {warm:.3f} s | {cli:.2f} s |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    args = parser.parse_args()
    admission_table()
    print()
    timings(args.sizes)


if __name__ == "__main__":
    main()
