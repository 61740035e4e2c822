"""Private spam classification: latency per message at 2048-bit Paillier and DGK, d = 10^4 hashed features.

Run: .venv/bin/python bench/bench_spam_classify.py [--messages 40]
Builds the server once (keys and the precomputed E[w], timed apart), then classifies real
SpamAssassin messages one at a time, timing each protocol step, and compares the total with the
raw-operation floor: the same count of each cryptographic operation, timed alone.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from pathlib import Path

import gmpy2
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from privrelease.core.spam import classify as K  # noqa: E402
from privrelease.core.spam import features as F  # noqa: E402
from privrelease.core.spam.training import read_mail  # noqa: E402
from privrelease.core.spam.wire import Channel  # noqa: E402

CORPUS = Path(os.environ.get("PRIVRELEASE_DATA", "data")) / "spamassassin" / "spamassassin.jsonl.gz"


def per_op(f, repeat: int = 200) -> float:
    t = time.perf_counter()
    for _ in range(repeat):
        f()
    return (time.perf_counter() - t) / repeat


def main(messages: int) -> None:
    texts, _ = read_mail(CORPUS)
    rng = np.random.default_rng(0)
    params = F.FeatureParams(modulus=1_000_000, reduction="hash", dimension=10_000)
    reducer = F.Reducer(params)
    xs = [reducer.apply(F.grams(texts[i], params.modulus)) for i in rng.choice(len(texts), messages, replace=False)]
    w = rng.normal(0, 0.01, params.dimension)

    t = time.perf_counter()
    server = K.ClassifyServer.generate(w, 2048)
    keygen = time.perf_counter() - t
    t = time.perf_counter()
    keys, weights = server.public_keys(), server.encrypted_weights()
    precompute = time.perf_counter() - t
    t = time.perf_counter()
    wire = K.Wire(Channel())
    client = K.ClassifyClient(
        wire.send("server", "client", "public-keys", keys), wire.send("server", "client", "encrypted-weights", weights)
    )
    client.dgk.rerandomize(gmpy2.mpz(1))  # builds the client's fixed-base table once per key
    client_setup = time.perf_counter() - t
    print(
        f"one-time: keys {keygen:.2f} s, E[w] for {params.dimension} features {precompute:.1f} s "
        f"({len(weights) / 1e6:.1f} MB), client setup {client_setup:.2f} s",
        flush=True,
    )

    steps = {
        k: []
        for k in (
            "1 client: score + mask",
            "2 server: decrypt, DGK bits",
            "3 client: DGK terms",
            "4 server: zero test, bit",
            "total",
        )
    }
    W = np.rint(np.ldexp(w, K.SCALE_BITS)).astype(object)
    wrong = 0
    for x in xs:
        t0 = time.perf_counter()
        q = wire.send("client", "server", "masked-score", client.masked_score(x))
        t1 = time.perf_counter()
        b = wire.send("server", "client", "comparison-bits", server.comparison_bits(q))
        t2 = time.perf_counter()
        terms = wire.send("client", "server", "comparison-terms", client.comparison_terms(b))
        t3 = time.perf_counter()
        label = client.label(wire.send("server", "client", "masked-result", server.masked_result(terms)))
        t4 = time.perf_counter()
        for k, v in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0)):
            steps[k].append(v)
        wrong += label != ("spam" if sum(W[x]) > 0 else "ham")
    nnz = float(np.mean([len(x) for x in xs]))
    print(f"{messages} messages, {nnz:.0f} non-zero features on average, {wrong} labels differ from the plaintext sign")
    for k, v in steps.items():
        print(f"  {k}: mean {np.mean(v) * 1e3:.1f} ms, median {np.median(v) * 1e3:.1f} ms")

    # the floor: each operation the protocol cannot avoid, timed alone, times its count
    key, dgk, pub = client.public_key, server._dgk, client.dgk
    c, n2, ell = client._weights[0], client.public_key.nsquare, K.SCORE_BITS
    ops = {
        "mulmod n² (score)": (per_op(lambda: c * c % n2, 20000), nnz),
        "r^n mod n² (client's encryption)": (per_op(lambda: key.obfuscator(), 50), 1),
        "CRT decryption": (per_op(lambda: server._secret.raw_decrypt(int(c)), 100), 1),
        "DGK encryption by CRT (fixed base)": (per_op(lambda: dgk.encrypt_bit(1)), ell),
        "DGK re-randomization (fixed base)": (per_op(lambda: pub.rerandomize(gmpy2.mpz(3))), ell + 1),
        "DGK zero test": (per_op(lambda: dgk.is_zero(secrets.randbelow(pub.n))), ell + 1),
    }
    floor = 0.0
    for k, (seconds, count) in ops.items():
        floor += seconds * count
        print(f"  floor {k}: {seconds * 1e3:.3f} ms × {count:.0f} = {seconds * count * 1e3:.1f} ms")
    print(
        f"raw-operation floor {floor * 1e3:.1f} ms; measured mean {np.mean(steps['total']) * 1e3:.1f} ms; "
        f"traffic per message {sum(m.bytes for m in wire.channel.log[2:]) / messages / 1e3:.1f} kB"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=40)
    main(parser.parse_args().messages)
