"""Issue #53's sign-in flood, measured: 200 source addresses (127.0.60.1-200, all this host's loopback) hammer
sign-in through the proxy in front of a gate (as `make serve` runs them) before a real Prefect server, for
``--seconds`` (default 60), while real accounts that never signed in make their first sign-in, one every
``--every`` seconds, each from a fresh address, and a person who signed in before calls every half second; the
gate's and nginx's peak RSS over the flood.

The flood (a child process, asyncio, ``--callers`` at once per address, again at once after any answer:
Retry-After is ignored) signs in with names no account has, and, one call in four, with wrong passwords for the
accounts it targets (``--target``: ``others``, five accounts that are not the measured ones; ``measured``: the
measured accounts themselves, each attacked before it signs in; ``strangers``: none).

Run: .venv/bin/python bench/bench_signin_flood.py [--seconds 60] [--target others] [--checkout DIR]
(``--checkout``: run the gate and the proxy from another checkout of privrelease, e.g. the code before issue #53.)
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402  (the flood's child imports nothing more: it starts at once)

ADDRESSES = [f"127.0.60.{i}" for i in range(1, 201)]
OTHERS = [f"target{i}" for i in range(5)]
ROUTE = "/api/admin/version"  # answered by the gate: a sign-in and nothing more
PASSWORD = "correct horse battery"


async def _flood(url: str, seconds: float, callers: int, targets: list[str], seed: int) -> dict:
    """The flood itself (in the child process): its answers counted by status, and by whose refusal a 429 was."""
    counts: collections.Counter = collections.Counter()
    rng = random.Random(seed)

    async def caller(client: httpx.AsyncClient, address: str, k: int, stop: float) -> None:
        n = 0
        while time.monotonic() < stop:
            n += 1
            if targets and rng.random() < 0.25:
                auth = (rng.choice(targets), f"guess-{address}-{k}-{n}")
            else:
                auth = (f"nobody-{address}-{k}-{n}", "guess")
            try:
                answer = await client.get(ROUTE, auth=auth)
                whose = "gate" if answer.headers.get("x-privrelease-gate-refused") else "nginx"
                counts[f"{answer.status_code} {whose}" if answer.status_code == 429 else str(answer.status_code)] += 1
            except httpx.HTTPError as error:
                counts[type(error).__name__] += 1
                await asyncio.sleep(0.1)

    clients = [  # one per address (no TLS: nothing to load per client), made before the clock starts
        (httpx.AsyncClient(base_url=url, timeout=30, transport=httpx.AsyncHTTPTransport(local_address=a, verify=False)), a)
        for a in ADDRESSES
    ]
    print("flooding", flush=True)  # the parent's clock starts now
    stop = time.monotonic() + seconds
    await asyncio.gather(*(caller(client, a, k, stop) for client, a in clients for k in range(callers)))
    for client, _ in clients:
        await client.aclose()
    return dict(counts)


def first_sign_in(url: str, name: str, address: str) -> tuple[float, int, str]:
    """``name``'s first sign-in from ``address``: seconds, status, and who refused it and why (if refused)."""
    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(base_url=url, timeout=120, transport=transport) as client:
        started = time.perf_counter()
        answer = client.get(ROUTE, auth=(name, PASSWORD))
        why = (
            ""
            if answer.status_code == 200
            else f": {answer.text[:120]}" + ("" if answer.headers.get("x-privrelease-gate-refused") else " (nginx)")
        )
        return time.perf_counter() - started, answer.status_code, why


def measure(args: argparse.Namespace) -> None:
    from bench.bench_flood import rss_mb
    from privrelease.gate.accounts import Accounts
    from tests.system.test_server import gate, proxy, running_server

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    rounds = int(args.seconds // args.every)
    measured = [f"real{i}" for i in range(rounds + 1)]
    targets = {"others": OTHERS, "measured": measured, "strangers": []}[args.target]
    checkout = Path(args.checkout).resolve() if args.checkout else REPO
    folder = contextlib.nullcontext(tempfile.mkdtemp(prefix="bench-signin-")) if args.keep else tempfile.TemporaryDirectory()
    with folder as tmp, running_server(Path(tmp)) as env:
        print(f"logs in {tmp}" if args.keep else "", end="")
        home = Path(env["PRIVRELEASE_HOME"])
        home.mkdir(parents=True, exist_ok=True)
        accounts = Accounts(home / "privrelease.duckdb")
        for name in OTHERS + measured:
            accounts.add(name, "analyst", PASSWORD)
        with (
            gate(env, Path(tmp) / "gate.log", checkout=checkout) as gate_url,
            proxy(env, gate_url, Path(tmp) / "proxy.log", checkout=checkout) as url,
        ):
            ports = {"gate": int(gate_url.rsplit(":", 1)[1]), "nginx": int(url.rsplit(":", 1)[1])}
            at_rest = {k: rss_mb(p) for k, p in ports.items()}
            rest_latency, rest_status, _ = first_sign_in(url, measured[0], "127.0.61.1")
            print(f"checkout {checkout}; flood: {len(ADDRESSES)} addresses x {args.callers} callers, "
                  f"{args.seconds:.0f} s, targets: {args.target}", flush=True)  # fmt: skip
            print(f"at rest: first sign-in {rest_latency:.2f} s ({rest_status}); RSS gate {at_rest['gate']:.0f} MB, "
                  f"nginx {at_rest['nginx']:.0f} MB", flush=True)  # fmt: skip
            child = subprocess.Popen(
                [sys.executable, __file__, "--flood", url, "--seconds", str(args.seconds), "--callers", str(args.callers),
                 "--targets", json.dumps(targets)],
                stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            assert child.stdout.readline().strip() == "flooding"
            peak, done, bystander = dict(at_rest), threading.Event(), []
            signed_in = httpx.Client(base_url=url, auth=(measured[0], PASSWORD), timeout=120,
                                     transport=httpx.HTTPTransport(local_address="127.0.61.1"))  # fmt: skip
            signed_in.get(ROUTE)  # signed in before the flood (its proof kept in the client, as a browser keeps it)

            def watch() -> None:
                while not done.is_set():
                    for k, p in ports.items():
                        peak[k] = max(peak[k], rss_mb(p))
                    started = time.perf_counter()
                    bystander.append((signed_in.get(ROUTE).status_code, time.perf_counter() - started))
                    time.sleep(0.5)

            watcher = threading.Thread(target=watch)
            watcher.start()
            started, signed = time.monotonic(), []
            for i in range(1, rounds + 1):
                time.sleep(max(0.0, started + i * args.every - 2 - time.monotonic()))
                latency, status, why = first_sign_in(url, measured[i], f"127.0.61.{i + 1}")
                signed.append((time.monotonic() - started, latency, status))
                print(f"  t={signed[-1][0]:5.1f} s: {measured[i]}'s first sign-in {latency:.2f} s ({status}{why})", flush=True)
            counts = json.loads(child.communicate()[0].strip().splitlines()[-1])
            done.set()
            watcher.join()
            total = sum(counts.values())
            latencies = [s[1] for s in signed]
            print(f"flood: {total} calls ({total / args.seconds:.0f} a second): {counts}")
            print(f"first sign-ins during the flood: {sum(s[2] == 200 for s in signed)}/{len(signed)} answered 200; "
                  f"latency median {sorted(latencies)[len(latencies) // 2]:.2f} s, max {max(latencies):.2f} s")  # fmt: skip
            print(f"a signed-in person's calls during the flood: {sum(b[0] == 200 for b in bystander)}/{len(bystander)} "
                  f"answered 200 ({sorted({b[0] for b in bystander})}); max {max(b[1] for b in bystander):.2f} s")  # fmt: skip
            print(f"peak RSS during the flood: gate {peak['gate']:.0f} MB, nginx {peak['nginx']:.0f} MB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between the measured first sign-ins")
    parser.add_argument("--callers", type=int, default=2, help="callers at once per address")
    parser.add_argument("--target", choices=("others", "measured", "strangers"), default="others")
    parser.add_argument("--checkout", help="run the gate and the proxy from this checkout")
    parser.add_argument("--keep", action="store_true", help="keep the logs (their folder is printed)")
    parser.add_argument("--flood", help=argparse.SUPPRESS)  # the child: flood this URL, print its counts
    parser.add_argument("--targets", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood:
        print(json.dumps(asyncio.run(_flood(args.flood, args.seconds, args.callers, json.loads(args.targets), 53))))
    else:
        measure(args)


if __name__ == "__main__":
    main()
