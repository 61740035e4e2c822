"""Aggregate tables side by side: privrelease, OpenDP 0.16 (Polars context) and Tumult Analytics 0.21.

Two cases, the same query at the same budget in each library, every key public (declared domains
here; OpenDP's margin ``invariant="keys"``; Tumult's KeySet):

- Adult (UCI, 30,162 complete records): count and mean hours_per_week (bounds [0, 100]) by
  education x sex, epsilon = 1, delta = 1e-6, one record per individual;
- payroll (synthetic, ``--rows`` rows, default 10 million: persons with 5 monthly rows each, all in one
  region x grade key): count, and sum, mean and median of salary (bounds [0, 200000]) by region x grade,
  rho = 0.25 zCDP split evenly over the four, the person as the privacy unit (at most 1 key and 5 rows per
  person).

Each peer is specified as its own docs specify such a query (``aggregate_peers.py`` says how), and the noise
scale it states for each measure is printed beside its figures, so a mis-specified peer shows: OpenDP in its
one-query form (every measure in one ``release()``) and one query per measure (``opendp-each``), Tumult one query
per measure.

Accuracy: the median over cells and repetitions of |estimate - true value| (the true value of the
clipped data), per measure, and privrelease's ratio to each peer's; the share of privrelease's 95%
intervals that hold the true value. Speed: privrelease's whole CLI release on payroll, warm (the median
of ``--warm`` runs after the first in one home; registration is done before, not timed), its CPU seconds
(user + sys) and peak RSS (``/usr/bin/time -v``), against one query's wall time in each peer; with
``--cli-only --opendp-each``, OpenDP's query in its own process after each warm release (interleaved, under
the same load): its CPU seconds and the query's wall time, and the ratios to privrelease's medians.

The peers run in their own venv (``bench/requirements-peers.txt``; ``make peers-venv``) as a
subprocess on the same Parquet files: ``bench/aggregate_peers.py``.

    PYTHONPATH=. PRIVRELEASE_DATA=/work/shared/data .venv/bin/python bench/bench_aggregate.py \\
        --peers-python .peers-venv/bin/python   (make peers-venv; or: make bench-aggregate)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from privrelease.core import noise
from privrelease.core.datasets.registry import Registry, Unit
from privrelease.core.ledger.ledger import Ledger
from privrelease.core.mechanisms import aggregate as agg
from privrelease.core.mechanisms.aggregate import report as show
from privrelease.core.privacy.budget import Budget
from privrelease.core.tables.schema import Column, Schema

ADULT = Path(os.environ.get("PRIVRELEASE_DATA", "data")) / "uci" / "adult.data.gz"
ROOT = Path(__file__).resolve().parent.parent
CLI = "from privrelease.cli.main import command; command()"  # the privrelease command (sys.argv: its arguments)
BOUNDS = (0.0, 200_000.0)
CASES = {
    "adult": {"by": ["education", "sex"], "budget": {"epsilon": 1.0, "delta": 1e-6},
              "measures": [{"op": "count"}, {"op": "mean", "column": "hours_per_week", "bounds": [0, 100]}],
              "peer": {"count": "count", "hours_per_week_mean": "hours_per_week_mean"}},
    "payroll": {"by": ["region", "grade"], "budget": {"rho": 0.25, "delta": 1e-6}, "unit": {"max_groups": 1, "max_rows": 5},
                "measures": [{"op": "count"}, {"op": "sum", "column": "salary", "bounds": list(BOUNDS)},
                             {"op": "mean", "column": "salary", "bounds": list(BOUNDS)},
                             {"op": "quantile", "column": "salary", "bounds": list(BOUNDS), "q": [0.5], "bins": 128}],
                "peer": {"count": "count", "salary_sum": "salary_sum", "salary_mean": "salary_mean",
                         "salary_q50": "salary_median"}},
}  # fmt: skip


def adult(folder: Path) -> Path:
    frame = pd.read_csv(ADULT, skipinitialspace=True, na_values="?").dropna()
    frame.columns = [c.replace("-", "_") for c in frame.columns]
    path = folder / "adult.parquet"
    frame[["education", "sex", "hours_per_week"]].to_parquet(path, index=False)
    return path


def payroll(folder: Path, rows: int) -> Path:
    rng = np.random.default_rng(0)
    persons = rows // 5
    region, grade = rng.integers(0, 8, persons), rng.integers(1, 11, persons)
    base = rng.lognormal(10.4 + 0.05 * grade, 0.35)
    who = np.repeat(np.arange(persons), 5)
    frame = pd.DataFrame({"person": who, "region": np.array([f"r{i}" for i in range(8)])[region[who]], "grade": grade[who],
                          "salary": (base[who] * rng.normal(1, 0.05, len(who))).round(2)})  # fmt: skip
    path = folder / "payroll.parquet"
    frame.to_parquet(path, index=False)
    return path


def truth(frame: pd.DataFrame, case: dict) -> dict[str, dict[str, float]]:
    """Per output column, per key ("a|b"), the true value of the clipped data."""
    out: dict[str, dict[str, float]] = {}
    for key, part in frame.groupby(case["by"]):
        k = "|".join(map(str, key))
        for m in case["measures"]:
            if m["op"] == "count":
                out.setdefault("count", {})[k] = len(part)
                continue
            x = np.clip(part[m["column"]].to_numpy(float), *m["bounds"])
            if m["op"] == "sum":
                out.setdefault(f"{m['column']}_sum", {})[k] = float(x.sum())
            elif m["op"] == "mean":
                out.setdefault(f"{m['column']}_mean", {})[k] = float(x.mean())
            else:
                out.setdefault(f"{m['column']}_q50", {})[k] = show.true_quantile(x, 0.5, m["bounds"])
    return out


def params(frame: pd.DataFrame, case: dict, user: str | None) -> dict:
    domains = {c: sorted(frame[c].unique().tolist()) for c in case["by"]}
    domains = {c: [int(v) if isinstance(v, np.integer) else v for v in vs] for c, vs in domains.items()}
    return {"group_by": case["by"], "measures": case["measures"], **case["budget"], **case.get("unit", {}),
            **({"user_column": user} if user else {}), "domains": domains}  # fmt: skip


# privrelease's record unit is replace-one-record; the peers' default is add/remove one row, which privrelease
# gives as the user unit over a row id (at most 1 key and 1 row per "user"): compared here too, with Laplace
VARIANTS = {"adult": [("laplace, add/remove one record (unit user:rid)", {"noise": "laplace"}, "rid")]}


def ours(frame: pd.DataFrame, case: dict, user: str | None, reps: int, extra: dict | None = None) -> tuple[dict, dict, float]:
    """Per output: |errors| over reps and cells; per output: coverage; one run's seconds (in process)."""
    if user == "rid":
        frame = frame.assign(rid=np.arange(len(frame)))
    p = agg.Params.model_validate({**params(frame, case, user), **(extra or {})})
    t = truth(frame, case)
    errors: dict[str, list] = {}
    covered: dict[str, list] = {}
    seconds = []
    for _ in range(reps):
        start = time.perf_counter()
        table = agg.run(frame, p, agg.plan(p), noise.generator(None)).data  # any draw: the production path's draws, timed
        seconds.append(time.perf_counter() - start)
        keys = ["|".join(map(str, r)) for r in table[case["by"]].itertuples(index=False)]
        for name, true in t.items():
            tv = np.array([true[k] for k in keys])
            errors.setdefault(name, []).extend(np.abs(table[name].to_numpy() - tv))
            covered.setdefault(name, []).extend((table[f"{name}_lo"] <= tv + 1e-9) & (tv <= table[f"{name}_hi"] + 1e-9))
    return errors, {k: float(np.mean(v)) for k, v in covered.items()}, float(np.median(seconds))


def ours_scales(frame: pd.DataFrame, case: dict, user: str | None) -> dict:
    """privrelease's noise per vector as its plan states it (the accuracy view's std per cell), beside the peers'."""
    p = agg.Params.model_validate(params(frame, case, user))
    return {c["vector"]: c["noise_std"] for c in agg.accuracy(p, agg.plan(p), ())["cells"]}


def peers(python: str, name: str, path: Path, reps: int, folder: Path, libs: str) -> dict:
    out = folder / f"peers_{name}.json"
    env = {**os.environ, "PYTHONPATH": os.environ.get("PEERS_PYTHONPATH", "")}
    subprocess.run([python, str(ROOT / "bench" / "aggregate_peers.py"), name, str(path), str(reps), str(out), libs], check=True,
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    return json.loads(out.read_text())


def peer_errors(found: dict, case: dict, t: dict) -> dict[str, list]:
    errors: dict[str, list] = {}
    for ours_name, col in case["peer"].items():
        index = list(case["peer"].values()).index(col)
        for run in found["runs"]:
            for k, v in run.items():
                if k in t[ours_name] and v[index] is not None:
                    errors.setdefault(ours_name, []).append(abs(float(v[index]) - t[ours_name][k]))
    return errors


def _timed(stderr: str, name: str) -> float:
    """One figure of ``/usr/bin/time -v``'s report."""
    return float(re.search(rf"{re.escape(name)} \([a-z]+\): ([0-9.]+)", stderr).group(1))


def _time_v(command: list[str], env: dict) -> dict:
    """One command under ``/usr/bin/time -v``: its wall and CPU seconds (user + sys, children included), peak RSS
    and the load average when it started."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *command], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    user, system, rss = (_timed(done.stderr, name) for name in ("User time", "System time", "Maximum resident set size"))
    return {"wall_s": wall, "cpu_s": user + system, "peak_rss_kib": int(rss), "load": load}


def opendp_query(python: str, path: Path, folder: Path) -> dict:
    """OpenDP's payroll query once, in its own process (``aggregate_peers.py``): the process's figures, and
    ``query_s``, the query's own wall time (reading the file to the collected result)."""
    out = folder / "opendp_once.json"
    env = {**os.environ, "PYTHONPATH": os.environ.get("PEERS_PYTHONPATH", "")}
    run = _time_v([python, str(ROOT / "bench" / "aggregate_peers.py"), "payroll", str(path), "1", str(out), "opendp"], env)
    return {**run, "query_s": float(json.loads(out.read_text())["opendp"]["seconds"][0])}


def cli_release(folder: Path, path: Path, frame: pd.DataFrame, case: dict, warm: int = 3, opendp: str | None = None) -> dict:
    """privrelease's whole release of payroll through the CLI: the first run, then ``warm`` runs in the same home
    (their median wall and CPU seconds, user + sys of the command), the warm runs' peak RSS and the load average;
    with ``opendp`` (the peers' python), OpenDP's query once after each warm run, interleaved, and the ratios."""
    home = folder / "home"
    env = {**os.environ, "PRIVRELEASE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    os.environ["PRIVRELEASE_HOME"] = str(home)
    cols = {"person": Column(type="integer"), "region": Column(type="string", domain=sorted(frame["region"].unique())),
            "grade": Column(type="integer", domain=sorted(int(g) for g in frame["grade"].unique())),
            "salary": Column(type="float")}  # fmt: skip
    Registry(home).add("payroll", path.name, "parquet", Unit.parse("user:person"), "dp", Schema(columns=cols), root=path.parent)
    Ledger(home / "privrelease.duckdb").set_budget("payroll", Budget(100.0, 1e-3))
    request = folder / "payroll.yaml"
    p = {k: v for k, v in params(frame, case, None).items() if k != "domains"}
    request.write_text(yaml.safe_dump({"dataset": "payroll", "mechanism": {"name": "aggregate", "params": p}}))
    runs, peers = [], []
    command = [sys.executable, "-c", CLI, "release", str(request)]
    for i in range(1 + warm):
        runs.append(_time_v(command, env))
        if opendp and i:
            peers.append(opendp_query(opendp, path, folder))
    later = runs[1:]
    out = {
        "first_s": runs[0]["wall_s"],
        "warm_median_s": float(np.median([r["wall_s"] for r in later])),
        "warm_cpu_median_s": float(np.median([r["cpu_s"] for r in later])),
        "peak_rss_kib": max(r["peak_rss_kib"] for r in later),
        "runs": runs,
    }
    if peers:
        cpu, wall = float(np.median([p["cpu_s"] for p in peers])), float(np.median([p["query_s"] for p in peers]))
        whole = float(np.median([p["wall_s"] for p in peers]))  # OpenDP's process: its imports and the query
        out |= {"opendp": peers, "opendp_cpu_median_s": cpu, "opendp_query_median_s": wall, "opendp_process_median_s": whole,
                "cpu_ratio": cpu / out["warm_cpu_median_s"], "wall_ratio": wall / out["warm_median_s"],
                "process_wall_ratio": whole / out["warm_median_s"]}  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--reps", type=int, default=20, help="privrelease repetitions per case")
    ap.add_argument("--peer-reps", type=int, default=3, help="repetitions per peer and case")
    ap.add_argument("--peers-python", default=str(ROOT / ".peers-venv" / "bin" / "python"))
    ap.add_argument("--cases", default="adult,payroll")
    ap.add_argument("--peer-libs", default="opendp,opendp-each,tumult")
    ap.add_argument("--cli-only", action="store_true", help="only time privrelease's CLI release of payroll")
    ap.add_argument("--warm", type=int, default=3, help="warm CLI releases of payroll timed (their median is reported)")
    ap.add_argument("--opendp-each", action="store_true", help="with --cli-only: OpenDP's query after each warm release")
    ap.add_argument("--no-cli", action="store_true", help="skip payroll's CLI release (accuracy only)")
    ap.add_argument("--payroll", help="an earlier run's payroll.parquet (the table is made with a fixed seed: the same rows)")
    ap.add_argument("--peers-from", help="an earlier run's peers_<case>.json: its repetitions instead of running the peers again")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-aggregate-"))
    results = {}
    for name in args.cases.split(","):
        case = CASES[name]
        path = adult(folder) if name == "adult" else Path(args.payroll) if args.payroll else payroll(folder, args.rows)
        frame = pd.read_parquet(path)
        if (
            name == "payroll" and not args.no_cli
        ):  # the whole release through the CLI first (a fresh home; registration not timed)
            cli = cli_release(folder, path, frame, case, args.warm, args.peers_python if args.opendp_each else None)
            print(json.dumps({"payroll cli": cli}), flush=True)
            results["payroll cli"] = cli
            if args.cli_only:
                continue
        errors, coverage, seconds = ours(frame, case, "person" if name == "payroll" else None, args.reps)
        t = truth(frame, case)
        for label, extra, user in VARIANTS.get(name, []):
            e, c, _ = ours(frame, case, user, args.reps, extra)
            results[f"{name}: privrelease {label}"] = {"errors": {k: float(np.median(v)) for k, v in e.items()}, "coverage": c}
            print(json.dumps({label: results[f"{name}: privrelease {label}"]}), flush=True)
        if args.peers_from:
            found = json.loads(Path(args.peers_from).read_text())
        else:
            found = peers(args.peers_python, name, path, args.peer_reps, folder, args.peer_libs)
        row = {
            "privrelease": {k: float(np.median(v)) for k, v in errors.items()},
            "coverage": coverage,
            "seconds": {"privrelease core": seconds},
        }
        for lib, got in found.items():
            row[lib] = {k: float(np.median(v)) for k, v in peer_errors(got, case, t).items()}
            row["seconds"][lib] = float(np.min(got["seconds"]))
            row.setdefault("scales", {})[lib] = got.get("scales", {})
        row.setdefault("scales", {})["privrelease"] = ours_scales(frame, case, "person" if name == "payroll" else None)
        results[name] = row
        print(json.dumps({name: row}, indent=1), flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
