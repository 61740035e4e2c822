"""The schema-validation stall of issue #39, measured: Prefect's server validating a caller's backtracking
pattern (``^(a+)+$`` against N a's and a '!') straight, with the health check's latency meanwhile, and the same
request through the gate (refused before Prefect sees it).

Run: ``.venv/bin/python bench/bench_gate_abuse.py [N ...]`` (default 20 22 24); starts its own server and gate."""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from privrelease.gate.accounts import Accounts
from tests.system.test_server import gate, operator, running_server

PASSWORD = "correct horse battery"


def evil(n: int) -> dict:
    return {
        "schema": {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a+)+$"}}},
        "values": {"x": "a" * n + "!"},
    }


def timed(client: httpx.Client, method: str, path: str, body: dict | None = None) -> tuple[float, httpx.Response]:
    start = time.perf_counter()
    response = client.request(method, path, json=body, timeout=600)
    return time.perf_counter() - start, response


def main(sizes: list[int]) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-gate-"))
    with running_server(root) as env, gate(env, root / "gate.log") as gate_url:
        Accounts(Path(env["PRIVRELEASE_HOME"]) / "privrelease.duckdb").add("alice", "analyst", PASSWORD)
        api = operator(env)
        person = httpx.Client(base_url=f"{gate_url}/api", auth=("alice", PASSWORD), timeout=600)
        person.get("/admin/version")  # the sign-in's hash, once
        print("| a's | straight to Prefect | health check meanwhile | through the gate |")
        print("|---|---|---|---|")
        for n in sizes:
            straight: list[float] = []
            runner = threading.Thread(
                target=lambda body=evil(n), out=straight: out.append(timed(api, "POST", "/ui/schemas/validate", body)[0])
            )
            runner.start()
            time.sleep(0.2)  # the validation has begun
            health, _ = timed(api, "GET", "/health")
            runner.join()
            refused, answer = timed(person, "POST", "/ui/schemas/validate", evil(n))
            assert answer.status_code == 403, answer.text
            print(f"| {n} | {straight[0]:.2f} s | {health:.2f} s | {refused * 1000:.0f} ms (403) |")


if __name__ == "__main__":
    main([int(x) for x in sys.argv[1:]] or [20, 22, 24])
