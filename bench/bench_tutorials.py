"""The peers' own tutorial queries beside privrelease's aggregate (issue #57): OpenDP 0.16's tabular-data tutorials on
the EU Labour Force Survey sample, Tumult Analytics 0.21's tutorials on the library members table.

Each peer runs its tutorial's query as the tutorial writes it (privacy unit, budget, bounds, candidates, keys; where
each query is from: ``bench/tutorial_peers.py``, which runs them in the peers' venv as a subprocess); privrelease
answers the same question through its CLI (``privrelease release request.yaml --json``, each a fresh process, the
datasets registered once, untimed, in a temporary home) at the same budget, bounds and unit:

- LFS (OpenDP): the unit ``unit_of(contributions=36)`` (one row a quarter over 36 quarters) is the user unit over
  PIDENT: ``max_groups 1, max_rows 36`` for a total, ``36, 1`` by YEAR x QUARTER, ``36, 4`` by AGE x ILOSTAT (a
  person is one age for at most four quarters: privrelease bounds keys x rows per key, not rows in all); pure
  epsilon, so ``noise: laplace``. A total is grouped by a constant column (COUNTRY, "FR", which the raw LFS has and
  the tutorial's file dropped): aggregate has no query without ``group_by``. The tutorial's in-query filter
  HWUSUAL != 99 (which drops the blanks too) is the registered table ``lfs_hours``: aggregate has no filter, and
  refuses a nullable measure column. Its median's candidates 20..59 are the answer grid ``bounds [19.5, 59.5],
  bins 40, steps 40`` (the steps' midpoints are the candidates).
- members (Tumult): ``AddOneRow()`` is the user unit over ``id`` (one row per member); the totals are grouped by a
  constant ``library`` column; counts per age 5..17 come from the registered age domain 0..120 (a domain is per
  column: every age is released, each at the same noise, and 5..17 read off).

**The data is generated to the tutorials' shape, not the tutorials' files** (offline: fixed seed 0). LFS: the
tutorial file's columns (PIDENT, YEAR, QUARTER, SEX, AGE, HWUSUAL, HWACTUAL, ILOSTAT) and 3,811,932 rows, 2005-2013,
persons with 1-15 rows in distinct quarters in the numbers opendp/dp-test-datasets ``data/eurostat/README.ipynb``
states for PIDENT; HWUSUAL 0-98, 99 not applicable (ILOSTAT 3, 5, 9), about 2% blank; the volume rising from 2008 to
2010 as the grouping tutorial says. members: 54,217 rows (first-steps.rst's true count) of id, name, age (6-100;
13,733 minors and a mean of 36.4, where the tutorials' noisy figures say 13,817 and 36.8), gender, education_level (the
five levels, their mean ages near groupby-queries.rst's), zip_code, books_borrowed (heavy-tailed, clamped sum 1.18 M
against the tutorial's 1.17 M), favorite_genres, date_joined. Columns no query reads are filler.

Reported per query: each side's noise as it states it (OpenDP's ``summarize()`` scale, Tumult's ``_noise_info``,
privrelease's plan: each vector's Laplace scale), the median over repetitions and cells of |estimate - true value|
(true on the generated data, clipped as the query clips), the ratio privrelease / peer, the median |error| each
side's stated noise gives on this data (``expected``: what a one-cell query's dozen draws estimate roughly), privrelease's CLI release
wall and CPU seconds (median of the warm runs: all but the first), the peer's query wall (median, in its process)
and one process running that query alone (wall, CPU: imports and, for Tumult, Spark's start included).

    PYTHONPATH=. .venv/bin/python bench/bench_tutorials.py --reps 12 --peer-reps 12 --peers-python .peers-venv/bin/python
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

from privrelease.core.datasets.registry import Registry, Unit
from privrelease.core.ledger.ledger import Ledger
from privrelease.core.mechanisms import aggregate as agg
from privrelease.core.mechanisms.aggregate import report as show
from privrelease.core.privacy.budget import Budget
from privrelease.core.tables.schema import Column, Schema

ROOT = Path(__file__).resolve().parent.parent
CLI = "from privrelease.cli.main import command; command()"
EDU = ["up-to-high-school", "high-school-diploma", "bachelors-associate", "masters-degree", "doctorate-professional"]
PER_PERSON = {1: 680705, 2: 412318, 3: 282625, 4: 166072, 5: 82068, 6: 36524, 7: 14323, 8: 5286, 9: 1710, 10: 480,
              11: 149, 12: 35, 13: 9, 14: 1, 15: 1}  # fmt: skip  # PIDENTs by their number of rows (dp-test-datasets)
LIBRARY = "Pierre-Simon Laplace"
COUNT, HOURS = [{"op": "count"}], {"column": "HWUSUAL", "bounds": [0, 80]}
# name: (peer, dataset, group_by, measures, epsilon, delta, (max_groups, max_rows), output column, tutorial)
QUERIES = {
    "lfs count": ("opendp", "lfs", ["COUNTRY"], COUNT, 0.2, 0, (1, 36), "count", "essential-statistics: Count"),
    "lfs hours_sum": ("opendp", "lfs_hours", ["COUNTRY"], [{"op": "sum", **HOURS}], 0.2, 0, (1, 36), "HWUSUAL_sum",
                      "essential-statistics: Sum, HWUSUAL in (0, 80)"),
    "lfs hours_mean": ("opendp", "lfs_hours", ["COUNTRY"], [{"op": "mean", **HOURS}], 0.2, 0, (1, 36), "HWUSUAL_mean",
                       "essential-statistics: Mean (sum and len in one query)"),
    "lfs hours_median": ("opendp", "lfs_hours", ["COUNTRY"], [{"op": "quantile", "column": "HWUSUAL", "bounds": [19.5, 59.5],
                         "q": [0.5], "bins": 40, "steps": 40}], 0.2, 0, (1, 36), "HWUSUAL_q50",
                         "essential-statistics: Median, candidates 20..59"),
    "lfs quarterly_count": ("opendp", "lfs", ["YEAR", "QUARTER"], COUNT, 0.25, 0, (36, 1), "count",
                            "grouping: invariant keys, YEAR x QUARTER"),
    "lfs age_ilostat_count": ("opendp", "lfs", ["AGE", "ILOSTAT"], COUNT, 0.25, 1e-7, (36, 4), "count",
                              "grouping: stable keys, AGE x ILOSTAT"),
    "members count": ("tumult", "members", ["library"], COUNT, 1.0, 0, (1, 1), "count", "first-steps: count"),
    "members age_mean": ("tumult", "members", ["library"], [{"op": "mean", "column": "age", "bounds": [0, 120]}], 1.0, 0,
                         (1, 1), "age_mean", "clamping-bounds: average age [0, 120]"),
    "members books_sum": ("tumult", "members", ["library"], [{"op": "sum", "column": "books_borrowed", "bounds": [0, 200]}],
                          1.0, 0, (1, 1), "books_borrowed_sum", "clamping-bounds: sum books_borrowed [0, 200]"),
    "members age_mean_by_edu": ("tumult", "members", ["education_level"], [{"op": "mean", "column": "age", "bounds": [0, 120]}],
                                1.0, 0, (1, 1), "age_mean", "groupby-queries: average age by education_level"),
    "members young_age_count": ("tumult", "members", ["age"], COUNT, 0.1, 0, (1, 1), "count",
                                "groupby-queries: counts by age 5..17"),
}  # fmt: skip


def lfs(seed: int = 0) -> pd.DataFrame:
    """The LFS tutorial's table, generated: each PIDENT's rows in distinct quarters (Gumbel top-k over the quarters'
    volumes), its age rising a year every four quarters from a random phase, its labour status mostly steady."""
    rng = np.random.default_rng(seed)
    k = np.repeat(np.array(list(PER_PERSON)), list(PER_PERSON.values()))
    persons, year = len(k), np.repeat(np.arange(2005, 2014), 4)
    volume = np.interp(year + np.tile(np.arange(4) / 4, 9), [2005, 2008.5, 2010.5, 2014], [85, 85, 125, 125])
    order = np.argsort(k, kind="stable")  # persons by their number of rows; each one's rows are consecutive here
    at = np.concatenate([[0], np.cumsum(k[order])])
    quarters = np.empty(at[-1], dtype=np.int64)
    for n in np.unique(k):
        held = np.flatnonzero(k[order] == n)
        top = np.argsort(-(np.log(volume) + rng.gumbel(size=(len(held), 36))), axis=1)[:, :n]
        quarters[(at[held][:, None] + np.arange(n)).ravel()] = np.sort(top, axis=1).ravel()
    who = np.repeat(order, k[order])
    first = np.repeat(quarters[at[:-1]], k[order])
    age0 = np.where(rng.random(persons) < 0.12, rng.integers(0, 15, persons),
                    np.clip(rng.gamma(4.5, 9.5, persons) + 15, 15, 95).astype(np.int64))  # fmt: skip
    age = age0[who] + (quarters - first + rng.integers(0, 4, persons)[who]) // 4
    labour = {"a": [1, 2, 3, 5], "p": [0.62, 0.03, 0.05, 0.30]}
    status = np.where(age0 < 15, 9, rng.choice(**labour, size=persons))[who]
    status = np.where(rng.random(len(who)) < 0.1, rng.choice(**labour, size=len(who)), status)  # a row's own status
    status = np.where(age < 15, 9, np.where(status == 9, 5, status))
    status = np.where((age >= 65) & (rng.random(len(who)) < 0.9), 5, status)
    working = np.isin(status, [1, 2])
    u, hours = rng.random(len(who)), np.clip(np.rint(rng.normal(38, 10, len(who))), 1, 98)
    hours = np.select([u < 0.25, u < 0.35, u < 0.50, u < 0.53, u < 0.54], [35, 39, 40, 0, rng.integers(81, 99, len(who))], hours)
    hw = pd.array(np.where(working, hours, 99).astype(np.int64), dtype="Int64")
    hw[working & (rng.random(len(who)) < 0.02)] = pd.NA  # "blank: No answer"
    act = pd.array(np.where(working, np.clip(hours + rng.integers(-8, 9, len(who)), 0, 98), 99).astype(np.int64), dtype="Int64")
    frame = pd.DataFrame({"PIDENT": (rng.permutation(persons) + 1)[who], "YEAR": year[quarters],
                          "QUARTER": np.tile(np.arange(1, 5), 9)[quarters], "SEX": rng.choice([1, 2], persons, p=[0.48, 0.52])[who],
                          "AGE": age, "HWUSUAL": hw, "HWACTUAL": act, "ILOSTAT": status, "COUNTRY": "FR"})  # fmt: skip
    return frame.sample(frac=1, random_state=seed).reset_index(drop=True)


def members(seed: int = 0, rows: int = 54_217) -> pd.DataFrame:
    """The library members table, generated (ages and education levels near what the tutorials print)."""
    rng = np.random.default_rng(seed)
    minor = rng.random(rows) < 13_817 / rows
    edu = np.where(minor, 0, rng.choice(5, rows, p=[0.13, 0.38, 0.37, 0.095, 0.025]))
    adult = np.clip(
        np.rint(rng.normal(np.array([35.0, 43.7, 46.3, 49.7, 51.7])[edu], 16)), np.array([18, 18, 20, 23, 26])[edu], 100
    )
    age = np.where(minor, rng.integers(6, 18, rows), adult).astype(np.int64)
    edu = np.where(minor & (age == 17) & (rng.random(rows) < 0.1), 1, edu)
    books = np.rint(rng.lognormal(2.55, 1.0, rows)).astype(np.int64)
    outlier = rng.random(rows) < 0.005
    books[outlier] = rng.integers(1000, 3000, outlier.sum())
    syllables = np.array(["an", "bel", "car", "da", "el", "fa", "gi", "ha", "is", "jo", "ka", "li", "ma", "no", "ri", "sa"])
    names = np.array(["".join(syllables[rng.integers(0, 16, 3)]).capitalize() for _ in range(7_200)])
    weight = 1 / (np.arange(7_200) + 100.0)
    genres = np.array(["Mystery", "Romance", "Science fiction", "Fantasy", "History", "Biography", "Poetry", "Travel"])
    g1, g2 = rng.integers(0, 8, rows), rng.integers(0, 8, rows)
    return pd.DataFrame({
        "id": rng.permutation(rows) + 1, "name": names[rng.choice(7_200, rows, p=weight / weight.sum())], "age": age,
        "gender": rng.choice(["female", "male", "nonbinary", "unspecified"], rows, p=[0.52, 0.44, 0.02, 0.02]),
        "education_level": np.array(EDU)[edu], "zip_code": rng.choice([f"277{i:02d}" for i in range(1, 14)], rows),
        "books_borrowed": books,
        "favorite_genres": np.where(g1 == g2, genres[g1], pd.Series(genres[g1]).str.cat(pd.Series(genres[g2]), sep=";")),
        "date_joined": (pd.Timestamp("2010-01-01") + pd.to_timedelta(rng.integers(0, 5000, rows), unit="D")).date,
        "library": LIBRARY})  # fmt: skip


def register(home: Path, folder: Path, lfs_frame: pd.DataFrame, members_frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The three tables written to Parquet and registered as a steward would (untimed); each dataset's frame."""
    hours = lfs_frame[lfs_frame["HWUSUAL"].notna() & (lfs_frame["HWUSUAL"] != 99)].astype({"HWUSUAL": "int64"})
    frames = {"lfs": lfs_frame, "lfs_hours": hours.reset_index(drop=True), "members": members_frame}
    i, s = (lambda **k: Column(type="integer", **k)), (lambda **k: Column(type="string", **k))
    lfs_cols = {"PIDENT": i(), "YEAR": i(domain=list(range(2005, 2014))), "QUARTER": i(domain=[1, 2, 3, 4]),
                "SEX": i(domain=[1, 2]), "AGE": i(), "HWUSUAL": i(nullable=True), "HWACTUAL": i(nullable=True),
                "ILOSTAT": i(), "COUNTRY": s(domain=["FR"])}  # fmt: skip  # AGE undeclared: its keys are selected
    member_cols = {"id": i(), "name": s(), "age": i(domain=list(range(121))), "gender": s(), "education_level": s(domain=EDU),
                   "zip_code": s(), "books_borrowed": i(), "favorite_genres": s(), "date_joined": Column(type="date"),
                   "library": s(domain=[LIBRARY])}  # fmt: skip
    schemas = {"lfs": (lfs_cols, "PIDENT"), "lfs_hours": ({**lfs_cols, "HWUSUAL": i()}, "PIDENT"), "members": (member_cols, "id")}
    ledger = Ledger(home / "privrelease.duckdb")
    for name, frame in frames.items():
        frame.to_parquet(folder / f"{name}.parquet", index=False)
        cols, user = schemas[name]
        Registry(home).add(
            name, f"{name}.parquet", "parquet", Unit.parse(f"user:{user}"), "dp", Schema(columns=cols), root=folder
        )
        ledger.set_budget(name, Budget(5000.0, 1e-3))
    return frames


def params(name: str) -> dict:
    _, _, by, measures, eps, delta, (groups, rows), _, _ = QUERIES[name]
    return {"group_by": by, "measures": measures, "epsilon": eps, "delta": delta, "noise": "laplace",
            "max_groups": groups, "max_rows": rows}  # fmt: skip


def key(values) -> str:
    return "|".join(str(int(v)) if isinstance(v, (int, np.integer, float, np.floating)) else str(v) for v in values)


def truth(name: str, frame: pd.DataFrame) -> dict[str, float]:
    """Per key ("*" for a total), the true answer on the generated data, clipped as the query clips."""
    _, _, by, measures, *_ = QUERIES[name]
    m = measures[0]
    total = by in (["COUNTRY"], ["library"])
    out = {}
    for k, part in frame.groupby(by):
        if m["op"] == "count":
            value = float(len(part))
        else:
            x = np.clip(part[m["column"]].to_numpy(float), *m["bounds"])
            value = (
                {"sum": x.sum(), "mean": x.mean()}.get(m["op"])
                if m["op"] != "quantile"
                else show.true_quantile(x, 0.5, m["bounds"])
            )
        out["*" if total else key(k if isinstance(k, tuple) else (k,))] = float(value)
    if name == "members young_age_count":
        out = {str(a): out.get(str(a), 0.0) for a in range(5, 18)}  # the tutorial's keys: age 5 holds no member
    return out


def ours_noise(name: str, frame: pd.DataFrame) -> tuple[str, dict]:
    """privrelease's noise as its plan states it: each vector's Laplace scale (leaf scale x grid), each quantile
    draw's epsilon and score sensitivity, the selection threshold; and the scales ``expected`` reads."""
    p = {**params(name), "user_column": "PIDENT" if "HWUSUAL" in frame or "AGE" in frame else "id"}
    p["domains"] = {c: sorted(frame[c].unique().tolist()) for c in p["group_by"] if c not in ("AGE",)}
    acc = agg.accounting(agg.Params.model_validate(p))
    parts = [f"{n.vector.part} Laplace {n.leaf.scale * n.unit:,.6g}" for n in acc.noised]
    parts += [f"{k.leaf.part.split(':')[0]} exp. mech. ε {k.leaf.epsilon:g}, score Δ {float(k.sensitivity):g}" for k in acc.picks]
    if acc.threshold is not None and p["group_by"] == ["AGE", "ILOSTAT"]:
        parts.append(f"threshold {acc.threshold * acc.counts.unit:,.0f}")
    scales = {"centred": any(n.vector.kind == "centred" for n in acc.noised)}
    for n in acc.noised:
        scales["count" if n.vector.kind == "counts" else "sum"] = n.leaf.scale * n.unit
    return "; ".join(parts), scales


def expected(name: str, frame: pd.DataFrame, scales: dict) -> float | None:
    """The median |error| a side's stated Laplace scales give on this data (a count's or a sum's: scale x ln 2; a
    mean's, noisy sum over noisy count, centred on the bounds' midpoint or not, by simulation): what the 12-odd
    draws of a one-cell query estimate only roughly. None for a median and for selected keys."""
    by, m = QUERIES[name][2], QUERIES[name][3][0]
    if m["op"] == "quantile" or name == "lfs age_ilostat_count":
        return None
    if m["op"] in ("count", "sum"):
        return float(scales[m["op"]] * np.log(2))
    rng = np.random.default_rng(1)  # the expectation, simulated: any seed gives it to three digits
    low, high = m["bounds"]
    mid, gaps = (low + high) / 2, []
    for _, part in frame.groupby(by):
        x = np.clip(part[m["column"]].to_numpy(float), low, high)
        n, total = len(x), x.sum()
        e, f = rng.laplace(0, scales["sum"], 20_000), rng.laplace(0, scales["count"], 20_000)
        est = mid + (total - mid * n + e) / (n + f) if scales["centred"] else (total + e) / (n + f)
        gaps.append(np.abs(np.clip(est, low, high) - total / n))
    return float(np.median(np.concatenate(gaps)))


def stated(lib: str, scales: list[dict]) -> dict:
    """A peer's stated scales as ``expected`` reads them (Tumult's average: its centred sum's, then its count's)."""
    if lib == "tumult":
        v = [float(s["noise_parameter"]) for s in scales if "noise_parameter" in s]
        return {"sum": v[0], "count": v[-1], "centred": True} if v else {}
    kinds = {"Frame Length": "count", "Sum": "sum"}
    return {"centred": False, **{kinds[s["aggregate"]]: float(s["scale"]) for s in scales if s["aggregate"] in kinds}}


def _timed(stderr: str, name: str) -> float:
    return float(re.search(rf"{re.escape(name)} \([a-z]+\): ([0-9.]+)", stderr).group(1))


def time_v(command: list[str], env: dict) -> tuple[dict, str]:
    """One command under ``/usr/bin/time -v``: wall, CPU seconds (user + sys, children too), the load average at its
    start; and its stdout."""
    load, start = os.getloadavg()[0], time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *command], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    cpu = _timed(done.stderr, "User time") + _timed(done.stderr, "System time")
    return {"wall_s": wall, "cpu_s": cpu, "load": load}, done.stdout


def ours(name: str, folder: Path, env: dict, reps: int) -> dict:
    """``reps`` + 1 CLI releases of the query (the first not counted in the timings): each one's estimates per key."""
    _, dataset, by, *_ = QUERIES[name]
    request = folder / f"{name.replace(' ', '_')}.yaml"
    request.write_text(yaml.safe_dump({"dataset": dataset, "mechanism": {"name": "aggregate", "params": params(name)}}))
    col, runs, times = QUERIES[name][7], [], []
    total = by in (["COUNTRY"], ["library"])
    for _ in range(reps + 1):
        timing, out = time_v([sys.executable, "-c", CLI, "release", str(request), "--json"], env)
        table = pd.read_parquet(Path(json.loads(out)["folder"]) / "aggregate.parquet")
        runs.append({("*" if total else key(r[:-1])): float(r[-1]) for r in table[[*by, col]].itertuples(index=False)})
        times.append(timing)
    warm = times[1:]
    return {"runs": runs, "times": times, "wall_s": float(np.median([t["wall_s"] for t in warm])),
            "cpu_s": float(np.median([t["cpu_s"] for t in warm]))}  # fmt: skip


def peer_env() -> dict:
    return {**os.environ, "PYTHONPATH": os.environ.get("PEERS_PYTHONPATH", ""), "PYTHONWARNINGS": "ignore"}


def peers(python: str, lib: str, path: Path, reps: int, names: list[str], folder: Path) -> dict:
    out = folder / f"peers_{lib}.json"
    short = [n.split(" ", 1)[1] for n in names]
    subprocess.run([python, str(ROOT / "bench" / "tutorial_peers.py"), lib, str(path), str(reps), str(out), ",".join(short)],
                   check=True, env=peer_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    found = json.loads(out.read_text())
    return {n: found[s] for n, s in zip(names, short)}


def peer_process(python: str, lib: str, path: Path, name: str, folder: Path) -> dict:
    """The peer's query alone in a fresh process (imports, Spark's start for Tumult): wall and CPU seconds."""
    out = folder / "peer_once.json"
    command = [python, str(ROOT / "bench" / "tutorial_peers.py"), lib, str(path), "1", str(out), name.split(" ", 1)[1]]
    return time_v(command, peer_env())[0]


def errors(runs: list[dict], true: dict[str, float]) -> tuple[float, float]:
    """The median |estimate - truth| over repetitions and the keys the tutorial asks for that each released (all of
    them but for selected keys), and the median number of those keys released."""
    gaps, released = [], []
    for run in runs:
        keys = [k for k in run if k in true and run[k] is not None]
        gaps += [abs(run[k] - true[k]) for k in keys]
        released.append(len(keys))
    return float(np.median(gaps)), float(np.median(released))


def peer_noise(lib: str, scales: list[dict]) -> str:
    if lib == "tumult":  # geometric: its parameter is the Laplace scale
        return " + ".join(f"{s.get('noise_mechanism', '?').split('.')[-1].lower()} {float(s['noise_parameter']):,.6g}"
                          if "noise_parameter" in s else str(s) for s in scales)  # fmt: skip
    return "; ".join(f"{s['aggregate']} {s['distribution']} {float(s['scale']):,.6g}"
                     + (f", threshold {int(s['threshold']):,}" if s.get("threshold") else "") for s in scales)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10, help="privrelease's CLI releases per query (after one untimed)")
    ap.add_argument("--peer-reps", type=int, default=10, help="each peer's repetitions per query")
    ap.add_argument("--peers-python", default=str(ROOT / ".peers-venv" / "bin" / "python"))
    ap.add_argument("--queries", default=",".join(QUERIES), help="a comma-separated subset of: " + ", ".join(QUERIES))
    ap.add_argument("--no-process", action="store_true", help="skip timing each peer query in a process of its own")
    ap.add_argument("--out", help="write the results as JSON here too")
    args = ap.parse_args()
    names = args.queries.split(",")
    load_before, started = os.getloadavg(), time.strftime("%H:%M", time.gmtime())
    folder = Path(tempfile.mkdtemp(prefix="bench-tutorials-"))
    home = folder / "home"
    os.environ["PRIVRELEASE_HOME"] = str(home)
    frames = register(home, folder, lfs(), members())
    env = {**os.environ, "PRIVRELEASE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    results = {}
    for name in names:
        frame = frames[QUERIES[name][1]]
        results[name] = {
            "ours": ours(name, folder, env, args.reps),
            "true": truth(name, frame),
            "ours_noise": ours_noise(name, frame),
            "frame": frame,
        }
        print(json.dumps({name: {k: v for k, v in results[name]["ours"].items() if k != "runs"}}), flush=True)
    for lib, table in (("opendp", "lfs"), ("tumult", "members")):
        mine = [n for n in names if QUERIES[n][0] == lib]
        if not mine:
            continue
        found = peers(args.peers_python, lib, folder / f"{table}.parquet", args.peer_reps, mine, folder)
        for name in mine:
            results[name]["peer"] = found[name]
            if not args.no_process:
                results[name]["peer_process"] = peer_process(args.peers_python, lib, folder / f"{table}.parquet", name, folder)
    load_after, ended = os.getloadavg(), time.strftime("%H:%M", time.gmtime())
    lines = ["| query (tutorial) | peer | budget; privrelease unit (max_groups, max_rows) | noise: privrelease | noise: peer "
             "| median abs error: privrelease / peer | ratio | expected from the stated noise: privrelease / peer (ratio) "
             "| privrelease CLI warm wall (CPU) s | peer query wall s | peer process wall (CPU) s |", "|" + "---|" * 11]  # fmt: skip
    for name in names:
        r, (lib, _, _, _, eps, delta, unit, _, tutorial) = results[name], QUERIES[name]
        ours_err, ours_keys = errors(r["ours"]["runs"], r["true"])
        peer_err, peer_keys = errors(r["peer"]["runs"], r["true"])
        r["summary"] = {"ours_error": ours_err, "peer_error": peer_err, "ours_keys": ours_keys, "peer_keys": peer_keys}
        keys = f" (keys released: {ours_keys:g} / {peer_keys:g} of {len(r['true'])})" if name == "lfs age_ilostat_count" else ""
        ratio = f"{ours_err / peer_err:.2f}" if peer_err > 0 else ("— (both 0)" if ours_err == 0 else "— (peer 0)")
        proc = r.get("peer_process", {})
        frame, (text, mine) = r.pop("frame"), r["ours_noise"]
        ours_exp, peer_exp = expected(name, frame, mine), expected(name, frame, stated(lib, r["peer"]["scales"]))
        r["summary"] |= {"ours_expected": ours_exp, "peer_expected": peer_exp}
        exp = "—" if ours_exp is None else f"{ours_exp:,.4g} / {peer_exp:,.4g} ({ours_exp / peer_exp:.2f})"
        lines.append(
            f"| {name}: {tutorial} | {lib} | ε {eps:g}{f', δ {delta:g}' if delta else ''}; {unit} | {text} "
            f"| {peer_noise(lib, r['peer']['scales'])} | {ours_err:,.4g} / {peer_err:,.4g}{keys} | {ratio} | {exp} "
            f"| {r['ours']['wall_s']:.2f} ({r['ours']['cpu_s']:.2f}) | {np.median(r['peer']['seconds']):.2f} "
            f"| {proc.get('wall_s', float('nan')):.1f} ({proc.get('cpu_s', float('nan')):.1f}) |"
        )
    meta = {"utc": f"{started}-{ended}", "load_before": load_before, "load_after": load_after, "reps": args.reps,
            "peer_reps": args.peer_reps, "rows": {k: len(v) for k, v in frames.items()}}  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, default=float))
    print(json.dumps(meta))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
