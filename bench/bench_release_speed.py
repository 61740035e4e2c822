"""Wall time of small releases from the command line, warm (issues #42, #57): RA on UCI Adult (with the policy's
publishable columns, and with every numeric column published: the steward's internal report then measures them
all) and DPNE on MSNBC at Table 4's settings, each `privrelease release request.yaml` in a fresh process with no Prefect
server configured, as an analyst types it (full output, with the budget line).

The steward registers both once in a temporary home (Adult with privrelease/schemas/policies/adult.policy.yaml, its
k threshold lifted so that RA alone publishes; MSNBC per user, a cap of ε = 100 for the runs); one
release of each warms the caches, then ``--runs`` timed releases of each alternate. Each run's report
and charts are checked to be there. ``--checkout`` times another checkout's code (PYTHONPATH) in the same
way, for a before/after on one machine; ``--against`` a second checkout, its releases interleaved with the
first's in the same home (each round: every request by one checkout, then by the other), so both see the
same load. CPU seconds (user + system of the command and its children) are given beside the wall time
since other tenants may share the cores.

Run: PRIVRELEASE_DATA=… .venv/bin/python bench/bench_release_speed.py [--runs 5] [--checkout /path] [--against /path]
(results recorded by hand in bench/RESULTS.md)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dpne import PARAMS, msnbc
from bench_machine import compute
from bench_ra import adult

REPO = Path(__file__).resolve().parent.parent
NUMERIC_RUN = "RA on Adult, every numeric column published"  # the same request, the steward's policy publishing them
NUMERIC = ["hours-per-week", "fnlwgt", "education-num", "capital-gain", "capital-loss"]  # Adult's numeric columns but age (a key)
RA_REQUEST = """dataset: adult
mechanism:
  name: ra
  params:
    qi: [workclass, education, marital-status, occupation, race, sex, native-country, age, relationship]
    sensitive: Salary
"""


def setup(home: Path, env: dict) -> dict[str, Path]:
    data = home / "data"
    data.mkdir(parents=True)
    adult().to_csv(data / "adult.csv", index=False)
    duckdb.connect().from_df(msnbc()).write_parquet(str(data / "msnbc.parquet"))
    policy = (
        (REPO / "privrelease" / "schemas" / "policies" / "adult.policy.yaml").read_text().replace("\n  k: 3\n", "\n  k: null\n")
    )
    (home / "adult.policy.yaml").write_text(policy)
    every = policy.replace("publishable: [relationship, hours-per-week]", f"publishable: [relationship, {', '.join(NUMERIC)}]")
    (home / "adult-numeric.policy.yaml").write_text(every)  # issue #57: the internal report over every numeric column
    exe = str(Path(sys.executable).parent / "privrelease")
    for args in (
        ["dataset", "add", "adult", "--source", "adult.csv", "--format", "csv", "--unit", "record", "--purpose", "sdc"],
        ["dataset", "policy", "adult", "--policy", str(home / "adult.policy.yaml")],
        ["dataset", "add", "msnbc", "--source", "msnbc.parquet", "--format", "parquet", "--unit", "user:user", "--purpose", "dp"],
        ["ledger", "set-budget", "msnbc", "--epsilon", "100", "--delta", "1e-3"],
    ):
        subprocess.run([exe, *args], env=env, check=True, capture_output=True, cwd=data)  # typed paths: from the folder
    (home / "ra.yaml").write_text(RA_REQUEST)
    params = ", ".join(f"{k}: {v}" for k, v in PARAMS.items() if k != "user_column")
    (home / "dpne.yaml").write_text(f"dataset: msnbc\nmechanism: {{name: dpne, params: {{{params}}}}}\n")
    return {"RA on Adult": home / "ra.yaml", NUMERIC_RUN: home / "ra.yaml", "DPNE on MSNBC": home / "dpne.yaml"}


def policy(name: str, env: dict) -> None:
    """Adult's policy for the run ``name`` (not timed): every numeric column published, or the policy's own."""
    home = Path(env["PRIVRELEASE_HOME"])
    chosen = home / ("adult-numeric.policy.yaml" if name == NUMERIC_RUN else "adult.policy.yaml")
    exe = str(Path(sys.executable).parent / "privrelease")
    subprocess.run([exe, "dataset", "policy", "adult", "--policy", str(chosen)], env=env, check=True, capture_output=True)


def release(request: Path, env: dict, name: str = "") -> tuple[float, float]:
    """One `privrelease release`: its wall and CPU seconds; checks its report and charts are complete."""
    if name.startswith("RA"):
        policy(name, env)
    exe = str(Path(sys.executable).parent / "privrelease")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run([exe, "release", str(request)], env=env, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    folder = Path(next(line.split(" ", 1)[1] for line in done.stdout.splitlines() if line.startswith("folder ")))
    manifest = json.loads((folder / "manifest.json").read_text())
    charts = [name for name in manifest["files"] if name.endswith(".png")]
    report = (folder / "report.md").read_text()
    assert charts and all((folder / c).stat().st_size > 1000 and c in report for c in charts), folder
    assert "\nbudget " in done.stdout or "sdc" in done.stdout, done.stdout  # the budget line, or an SDC release
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def machine_pace() -> float:
    """The seconds one core takes for bench_machine.py's compute-bound loop (the best of three): this machine's cores
    run at different speeds at different hours (the same release 0.8 s in one hour, 1.2 s in another), so a
    before/after is only read interleaved, and each table says the pace it ran at."""
    return min(compute() for _ in range(3))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--checkout", default=str(REPO), help="the checkout whose code runs (PYTHONPATH)")
    parser.add_argument("--against", help="a second checkout, its runs interleaved with the first's")
    args = parser.parse_args()
    checkouts = [args.checkout] + ([args.against] if args.against else [])
    with tempfile.TemporaryDirectory() as tmp:
        base = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
        base["PRIVRELEASE_HOME"] = str(Path(tmp) / "home")
        envs = {c: base | {"PYTHONPATH": c} for c in checkouts}
        requests = setup(Path(tmp) / "home", envs[args.checkout])
        for env in envs.values():
            for name, request in requests.items():
                release(request, env, name)  # warm: page cache, bytecode, the ledger's first entries
        times: dict[tuple[str, str], list[tuple[float, float]]] = {(c, n): [] for c in checkouts for n in requests}
        load, pace = os.getloadavg()[0], machine_pace()
        for i in range(args.runs):
            for c in checkouts if i % 2 == 0 else checkouts[::-1]:  # alternate which goes first
                for name, request in requests.items():
                    times[c, name].append(release(request, envs[c], name))
        print(f"load average {load:.1f} before, {os.getloadavg()[0]:.1f} after")
        print(
            f"machine pace (bench_machine.py's compute-bound loop, 20 M steps): {pace:.2f} s before, {machine_pace():.2f} s after"
        )
        print("| checkout | release | wall, median (min–max) | CPU s, median (min–max) |")
        print("|---|---|---|---|")
        for (checkout, name), runs in times.items():
            walls, cpus = [w for w, _ in runs], [c for _, c in runs]
            print(
                f"| {checkout} | {name} | {statistics.median(walls):.2f} s ({min(walls):.2f}–{max(walls):.2f}) "
                f"| {statistics.median(cpus):.2f} ({min(cpus):.2f}–{max(cpus):.2f}) |"
            )


if __name__ == "__main__":
    main()
