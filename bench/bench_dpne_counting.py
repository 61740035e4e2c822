"""DPNE's counting, piece by piece: the whitespace tokenizer, the size of the user groups, and the
working memory of a release in one process.

Run: PRIVRELEASE_DATA=... .venv/bin/python bench/bench_dpne_counting.py tokenize [--copies 5]
         (the tokenizer against the regular-expression split on \\s+, DuckDB on one thread)
     PRIVRELEASE_DATA=... .venv/bin/python bench/bench_dpne_counting.py groups [--copies 10]
         (``dpne.extract`` in process with users counted in groups of 2^19 ... 2^23 occurrences)
     PRIVRELEASE_DATA=... .venv/bin/python bench/bench_dpne_counting.py memory [--copies 10] [--zipf]
         (peak resident memory of ``dpne.extract`` above the loaded corpus, in a fresh process; with
          --zipf on the synthetic Zipf corpus of ``bench_dpne.py``, as many posts as MSNBC x copies)
     PRIVRELEASE_DATA=... .venv/bin/python bench/bench_dpne_counting.py allocator [--copies 10]
         (the two Dask workers' work, both user partitions one after the other in one process on one DuckDB
          thread, in fresh processes with glibc's defaults and with MALLOC_TRIM_THRESHOLD_ set:
          seconds, minor page faults and peak resident memory)
     .venv/bin/python bench/bench_dpne_counting.py steps
         (the cap's keyed choice on 3 M over-cap pairs: DuckDB's row_number() window, its min_by top-n (the
          choice before dpne_cap) and dpne_cap's numpy (the same pairs kept); and
          merging two shares of 80,000 n-grams, numpy against a DuckDB GROUP BY)
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_dpne import PARAMS, synthetic  # noqa: E402
from bench.bench_runner import msnbc_times  # noqa: E402
from privrelease.core.mechanisms import dpne  # noqa: E402
from privrelease.core.mechanisms.dpne import cap as dpne_cap  # noqa: E402
from privrelease.core.mechanisms.dpne import counts as dpne_counts  # noqa: E402

PATTERN = "list_filter(regexp_split_to_array(text, '\\s+'), lambda x: x <> '')"


def tokenize(copies: int) -> None:
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.register("posts", msnbc_times(copies))
    print(f"MSNBC x{copies}: {con.execute('SELECT count(*) FROM posts').fetchone()[0]:,} sessions, DuckDB on one thread")
    counts = {}
    for name, sql in (("tokenizer", dpne_counts.tokens_sql("whitespace", "text")), ("regexp \\s+", PATTERN)):
        best = []
        for _ in range(3):
            t = time.perf_counter()
            counts[name] = con.execute(f"SELECT sum(len({sql})) FROM posts").fetchone()[0]
            best.append(time.perf_counter() - t)
        print(f"{name}: {min(best):.2f} s (best of 3; {counts[name]:,} tokens)", flush=True)
    assert len(set(counts.values())) == 1, counts


def groups(copies: int) -> None:
    frame = msnbc_times(copies)
    params = dpne.Params(**PARAMS, tokenizer="whitespace")
    print(f"MSNBC x{copies}: {len(frame):,} users, in process", flush=True)
    for power in (19, 20, 21, 22, 23):
        dpne_counts.CHUNK = 1 << power
        t = time.perf_counter()
        released, _ = dpne.extract(frame, params, dpne.plan(params), np.random.default_rng(1))
        print(f"groups of 2^{power}: {time.perf_counter() - t:.1f} s ({len(released):,} n-grams)", flush=True)


def _status(field: str) -> int:
    """A field of /proc/self/status in bytes."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1]) * 1024


def memory(copies: int, zipf: bool, child: bool = False) -> None:
    if not child:  # a fresh process: nothing of an earlier run in its peak
        subprocess.run([sys.executable, __file__, "memory-child", "--copies", str(copies)] + ["--zipf"] * zipf, check=True)
        return
    with tempfile.TemporaryDirectory() as tmp:  # the frame as a release loads it: from its Parquet snapshot
        path = str(Path(tmp) / "v1.parquet")
        corpus = synthetic(copies * 989_818) if zipf else msnbc_times(copies)
        duckdb.connect().from_df(corpus).write_parquet(path)
        del corpus
        frame = duckdb.connect().execute("SELECT * FROM read_parquet(?)", [path]).df()
    gc.collect()
    params = dpne.Params(**PARAMS, tokenizer="whitespace")
    loaded = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # resets the peak (VmHWM) to the current resident size
    t = time.perf_counter()
    released, _ = dpne.extract(frame, params, dpne.plan(params), np.random.default_rng(1))
    seconds = time.perf_counter() - t
    name = f"Zipf, {len(frame):,} posts" if zipf else f"MSNBC x{copies}"
    print(
        f"{name}: {frame['user'].nunique():,} users; resident with the corpus loaded {loaded / 1e9:.2f} GB; "
        f"dpne.extract {seconds:.1f} s, peak {(_status('VmHWM') - loaded) / 1e9:+.2f} GB above that "
        f"({len(released):,} n-grams)"
    )


ALLOCATOR = {"glibc's defaults": None, "MALLOC_TRIM_THRESHOLD_=65536 (Dask's default)": "65536",
             "MALLOC_TRIM_THRESHOLD_=4294967295 (never trim)": "4294967295"}  # fmt: skip


def allocator(copies: int, snapshot: str | None = None) -> None:
    if snapshot is None:  # this process writes the snapshot; a fresh child per setting counts it
        with tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "v1.parquet")
            duckdb.connect().from_df(msnbc_times(copies)).write_parquet(path)
            for name, value in ALLOCATOR.items():
                env = {k: v for k, v in os.environ.items() if k != "MALLOC_TRIM_THRESHOLD_"}
                env |= {"MALLOC_TRIM_THRESHOLD_": value} if value else {}
                out = subprocess.run(
                    [sys.executable, __file__, "allocator-child", path], env=env, check=True, capture_output=True, text=True
                ).stdout.strip()
                print(f"{name}: {out}", flush=True)
        return
    from privrelease.core import parallel

    parallel.workers = lambda: 2  # two user partitions, opened and counted in this process one after the other
    parallel.worker_threads = lambda: 1  # DuckDB and Arrow on one thread, as in a single-threaded Dask worker
    t = time.perf_counter()
    params = dpne.Params(**PARAMS, tokenizer="whitespace")
    released, _ = dpne.extract(None, params, dpne.plan(params), np.random.default_rng(1), snapshot=snapshot)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        f"{time.perf_counter() - t:.1f} s, {usage.ru_minflt:,} minor page faults, peak RSS {usage.ru_maxrss / 1e6:.2f} GB "
        f"({len(released):,} n-grams)"
    )


def steps() -> None:
    rng = np.random.default_rng(0)
    con = duckdb.connect()
    con.execute("SET threads = 1")
    m = rng.integers(11, 30, 150_000)  # users over a cap of 10
    users = np.repeat(np.arange(len(m)), m)
    grams = rng.integers(0, 10**7, len(users))
    window = (
        "SELECT u, g FROM (SELECT u, g, row_number() OVER (PARTITION BY u ORDER BY hash(h, x, $key::UBIGINT), x) AS rk "
        "FROM over) WHERE rk <= $cap"
    )
    top_n = "SELECT u, unnest(min_by(g, (hash(h, x, $key::UBIGINT), x), $cap)) AS g FROM over GROUP BY u"
    user_hash = rng.integers(0, 2**63, len(m)).astype(np.uint64)
    con.register("over", pd.DataFrame({"u": users, "h": user_hash[users], "g": grams, "x": grams}))

    def numpy_choice() -> dict:
        kept = dpne_cap.smallest(users, dpne_cap.keyed(user_hash[users], dpne_cap.murmur(grams), 7), grams, 10)
        return {"u": users[kept], "g": grams[kept]}

    kept, best = {}, {}
    choices = {
        "row_number() window": lambda: con.execute(window, {"key": 7, "cap": 10}).fetchnumpy(),
        "min_by top-n": lambda: con.execute(top_n, {"key": 7, "cap": 10}).fetchnumpy(),
        "numpy (dpne_cap)": numpy_choice,
    }
    for name, choose in choices.items():
        times = []
        for _ in range(3):
            t = time.perf_counter()
            kept[name] = choose()
            times.append(time.perf_counter() - t)
        best[name] = min(times)
    same = len({tuple(sorted(zip(k["u"].tolist(), k["g"].tolist()))) for k in kept.values()}) == 1
    print(
        f"the cap's keyed choice on {len(users):,} over-cap pairs, one thread, best of 3: "
        + ", ".join(f"{n} {s:.2f} s" for n, s in best.items())
        + f"; the same kept pairs: {same}"
    )
    shares = [
        pd.DataFrame({"gram": np.sort(rng.choice(10**8, 80_000, replace=False)), "units": rng.integers(1, 10**6, 80_000)})
        for _ in range(2)
    ]
    for name, merge in (("numpy (dpne_counts.merge)", dpne_counts.merge), ("DuckDB GROUP BY", _merge_duckdb)):
        t = time.perf_counter()
        for _ in range(10):
            merged = merge(shares)
        print(f"merging two shares of 80,000 n-grams, {name}: {(time.perf_counter() - t) * 100:.1f} ms ({len(merged):,} n-grams)")


def _merge_duckdb(parts: list[pd.DataFrame]) -> pd.DataFrame:
    con = duckdb.connect()
    con.register("parts", pd.concat(parts, ignore_index=True))
    return con.execute("SELECT gram, CAST(sum(units) AS BIGINT) AS units FROM parts GROUP BY gram ORDER BY gram").df()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["tokenize", "groups", "memory", "memory-child", "allocator", "allocator-child", "steps"])
    ap.add_argument("path", nargs="?", help=argparse.SUPPRESS)  # allocator-child: the snapshot
    ap.add_argument("--copies", type=int, help="MSNBC this many times over (tokenize: 5; groups, memory: 10)")
    ap.add_argument("--zipf", action="store_true", help="memory: the synthetic Zipf corpus instead of MSNBC")
    args = ap.parse_args()
    copies = args.copies or (5 if args.what == "tokenize" else 10)
    {
        "tokenize": lambda: tokenize(copies),
        "groups": lambda: groups(copies),
        "memory": lambda: memory(copies, args.zipf),
        "memory-child": lambda: memory(copies, args.zipf, child=True),
        "allocator": lambda: allocator(copies),
        "allocator-child": lambda: allocator(copies, args.path),
        "steps": steps,
    }[args.what]()


if __name__ == "__main__":
    main()
