"""DPNE's counting, piece by piece: the whitespace tokenizer, the size of the user groups, and the
working memory of a release in one process.

Run: PRIVRELEASE_DATA=... .venv/bin/python bench/bench_dpne_counting.py tokenize [--copies 5]
         (the tokenizer against the regular-expression split on \\s+, DuckDB on one thread)
     PRIVRELEASE_DATA=... .venv/bin/python bench/bench_dpne_counting.py groups [--copies 10]
         (``dpne.extract`` in process with users counted in groups of 2^19 ... 2^23 occurrences)
     PRIVRELEASE_DATA=... .venv/bin/python bench/bench_dpne_counting.py memory [--copies 10] [--zipf]
         (peak resident memory of ``dpne.extract`` above the loaded corpus, in a fresh process; with
          --zipf on the synthetic Zipf corpus of ``bench_dpne.py``, as many posts as MSNBC x copies)
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_dpne import PARAMS, synthetic  # noqa: E402
from bench.bench_runner import msnbc_times  # noqa: E402
from core.mechanisms import dpne, dpne_counts  # noqa: E402

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
        released, _ = dpne.extract(frame, params, np.random.default_rng(1))
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
    released, _ = dpne.extract(frame, params, np.random.default_rng(1))
    seconds = time.perf_counter() - t
    name = f"Zipf, {len(frame):,} posts" if zipf else f"MSNBC x{copies}"
    print(f"{name}: {frame['user'].nunique():,} users; resident with the corpus loaded {loaded / 1e9:.2f} GB; "
          f"dpne.extract {seconds:.1f} s, peak {(_status('VmHWM') - loaded) / 1e9:+.2f} GB above that "
          f"({len(released):,} n-grams)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["tokenize", "groups", "memory", "memory-child"])
    ap.add_argument("--copies", type=int, help="MSNBC this many times over (tokenize: 5; groups, memory: 10)")
    ap.add_argument("--zipf", action="store_true", help="memory: the synthetic Zipf corpus instead of MSNBC")
    args = ap.parse_args()
    copies = args.copies or (5 if args.what == "tokenize" else 10)
    {"tokenize": lambda: tokenize(copies), "groups": lambda: groups(copies), "memory": lambda: memory(copies, args.zipf),
     "memory-child": lambda: memory(copies, args.zipf, child=True)}[args.what]()  # fmt: skip


if __name__ == "__main__":
    main()
