"""Issue 39's flood, measured: 1,000 sockets that send nothing or part of a header and 200 unread downloads of
the UI's largest script (tests/system/test_proxy.py's ``flood``, the downloads first), against the proxy in front of a
gate (as `make serve` runs them) and against a bare gate, both before a real Prefect server.

Run: .venv/bin/python bench/bench_flood.py [--calls 10] [--watch 120]

For each: a signed-in analyst's calls (latency and answers) at rest and during the flood, and the peak RSS of
the gate process and of nginx (master and worker) over ``--watch`` seconds of the flood.
"""

from __future__ import annotations

import argparse
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from privrelease.gate.accounts import Accounts  # noqa: E402
from tests.conftest import PASSWORD  # noqa: E402
from tests.system.test_proxy import analyst_call, flood  # noqa: E402
from tests.system.test_server import gate, proxy, running_server  # noqa: E402


def rss_mb(port: int) -> float:
    """The resident memory of the processes listening on ``port`` (nginx: its master and its worker), in MB."""
    listening = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    total_kb = 0
    for pid in set(re.findall(r"pid=(\d+)", listening)):
        status = Path(f"/proc/{pid}/status").read_text()
        total_kb += int(re.search(r"VmRSS:\s+(\d+)", status)[1])
    return total_kb / 1024


def calls(url: str, n: int) -> str:
    latencies, answers = [], []
    for _ in range(n):
        started = time.perf_counter()
        answers.append(analyst_call(url).status_code)
        latencies.append(time.perf_counter() - started)
    return (
        f"median {statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms, "
        f"answers {sorted(set(answers))} ({answers.count(200)}/{n} succeeded)"
    )


def measure(name: str, url: str, gate_port: int, proxy_port: int | None, n: int, watch: float) -> None:
    port = int(url.rsplit(":", 1)[1])
    ports = {"gate": gate_port} | ({"nginx": proxy_port} if proxy_port else {})
    print(f"== {name}: at rest: {calls(url, n)}; " + ", ".join(f"{k} {rss_mb(p):.0f} MB" for k, p in ports.items()), flush=True)
    with flood(port, downloads_first=True):
        during = calls(url, n)
        peak = dict.fromkeys(ports, 0.0)
        deadline = time.monotonic() + watch
        while time.monotonic() < deadline:
            peak = {k: max(peak[k], rss_mb(p)) for k, p in ports.items()}
            time.sleep(0.5)
    print(
        f"   during the flood: {during}; peak RSS over {watch:.0f} s: " + ", ".join(f"{k} {v:.0f} MB" for k, v in peak.items()),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--watch", type=float, default=120.0)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    with tempfile.TemporaryDirectory() as tmp, running_server(Path(tmp)) as env:
        home = Path(env["PRIVRELEASE_HOME"])
        home.mkdir(parents=True, exist_ok=True)
        Accounts(home / "privrelease.duckdb").add("alice", "analyst", PASSWORD)
        with gate(env, Path(tmp) / "gate.log") as gate_url, proxy(env, gate_url, Path(tmp) / "proxy.log") as url:
            measure("through the proxy", url, int(gate_url.rsplit(":", 1)[1]), int(url.rsplit(":", 1)[1]), args.calls, args.watch)
        with gate(env, Path(tmp) / "bare.log") as bare:
            measure("the bare gate", bare, int(bare.rsplit(":", 1)[1]), None, args.calls, args.watch)


if __name__ == "__main__":
    main()
