"""Private spam-filter training: SpamAssassin reproduction and per-message cost at 2048 bits.

Run: .venv/bin/python bench/bench_spam.py repro [--key-bits 1024] [--rounds 5]
     .venv/bin/python bench/bench_spam.py timing [--block 200] [--workers 2]
``repro`` splits the SpamAssassin corpus (fixed stratified split, 3 users, 20% test), trains
privately and in plaintext, and prints both AUCs; ``timing`` runs one 2048-bit round on a block
of real messages with 10^4 features and compares it with the Paillier operations it must do.
"""

from __future__ import annotations

import argparse
import os
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from core import parallel  # noqa: E402
from core.spam import features as F  # noqa: E402
from core.spam import protocol as P  # noqa: E402
from core.spam.paillier import KeyPair  # noqa: E402
from core.spam.training import SpamSpec, Training, read_mail, split_corpus  # noqa: E402

CORPUS = Path(os.environ.get("PRIVRELEASE_DATA", "data")) / "spamassassin" / "spamassassin.jsonl.gz"


def repro(key_bits: int, rounds: int, users: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, parallel.using("dask", n_workers=2):
        out = Path(tmp)
        split_corpus(CORPUS, out, users, 0.2, 0)
        spec = SpamSpec(run_id="bench", users=[f"user-{k + 1}.jsonl" for k in range(users)], test="test.jsonl",
                        features=F.FeatureParams(modulus=1_000_000, reduction="hash", dimension=10_000),
                        key_bits=key_bits, learning_rate=0.001, rounds=rounds, mode="batch")  # fmt: skip
        t = time.perf_counter()
        training = Training.setup(spec, out)
        print(f"setup (features, keys): {time.perf_counter() - t:.1f} s; users hold {[len(u) for u in training.users]}")
        for _ in range(rounds):
            r = training.run_round()
            print(f"round {r.round}: {r.seconds:.1f} s, {r.training_messages} messages, {r.ciphertexts} ciphertexts, "
                  f"{r.bytes / 1e6:.1f} MB, max gradient gap {r.max_gradient_gap:.2e}", flush=True)  # fmt: skip
        report = training.write(out / "run")
        print(json.dumps({k: report[k] for k in ("auc_private", "auc_plain", "max_weight_gap", "scales")}, indent=2))
        print(json.dumps([r["steps"] for r in report["per_round"]], indent=1))


def timing(block: int, workers: int) -> None:
    texts, labels = read_mail(CORPUS)
    rng = np.random.default_rng(0)
    pick = rng.choice(len(texts), block, replace=False)
    reducer = F.Reducer(F.FeatureParams(modulus=1_000_000, reduction="hash", dimension=10_000))
    x = [reducer.apply(F.grams(texts[i], 1_000_000)) for i in pick]
    nnz = sum(len(v) for v in x)
    server = P.Server(2048, rng.normal(0, 0.01, 10_000), 0.001, None)
    user = P.User("user-1", x, labels[pick], server.public_key, server.scales, np.random.default_rng(1))
    with parallel.using("dask" if workers > 1 else "local", n_workers=workers):
        t = time.perf_counter()
        times, _ = P.train_round(server, [user], [np.arange(block)], P.Channel())
        total = time.perf_counter() - t
    print(f"2048-bit round, block {block}, d 10,000, {nnz:,} non-zero features, workers {workers}: {total:.1f} s "
          f"= {total / block:.3f} s per message")  # fmt: skip
    for step, seconds in times.seconds.items():
        print(f"  {step}: {seconds:.2f} s")
    # the Paillier operations the round must do, timed one by one
    keys = KeyPair(2048)
    key = keys.public
    c = key.encrypt(12345, "x")
    reps = 200
    t = time.perf_counter()
    for _ in range(reps):
        key.obfuscator()
    enc = (time.perf_counter() - t) / reps
    t = time.perf_counter()
    for _ in range(reps):
        keys.decrypt(c, key.half, "x")
    dec = (time.perf_counter() - t) / reps
    t = time.perf_counter()
    for _ in range(reps * 50):
        key.add(c, c)
    mul = (time.perf_counter() - t) / (reps * 50)
    d = 10_000
    floor = (2 * d + 4 * block) * enc / max(workers, 1) + (2 * block + d) * dec + 2 * nnz * mul
    print(f"one r^n: {enc * 1e3:.2f} ms, one decryption: {dec * 1e3:.2f} ms, one ciphertext product: {mul * 1e6:.1f} µs")
    print(f"floor: (2d + 4n) r^n + (2n + d) decryptions + 2·nnz products = {floor:.1f} s ({floor / block:.3f} s per message)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["repro", "timing"])
    ap.add_argument("--key-bits", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--users", type=int, default=3)
    ap.add_argument("--block", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    if args.what == "repro":
        repro(args.key_bits, args.rounds, args.users)
    else:
        timing(args.block, args.workers)


if __name__ == "__main__":
    main()
