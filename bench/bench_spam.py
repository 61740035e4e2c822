"""Private spam-filter training: SpamAssassin reproduction and per-message cost at 2048 bits.

Run: .venv/bin/python bench/bench_spam.py repro [--key-bits 2048] [--rounds 10] [--users 3]
     .venv/bin/python bench/bench_spam.py timing [--messages 1000] [--users 2] [--leave]
     .venv/bin/python bench/bench_spam.py shares
``repro`` splits the SpamAssassin corpus (fixed stratified split, 3 users, 20% test), trains
privately (every party in its own process) and in plaintext, and prints the AUCs; ``timing``
runs one 2048-bit round on real messages with 10^4 features, first in process (per-step times),
then with every party in its own process (wall clock), and compares it with the Paillier
operations the round must do, each timed on its own. With ``--leave`` the last user's process is
killed before the steady-state round: the others' round then includes rebuilding its masks.
``shares`` times, per round and in CPU seconds, what dropout tolerance adds at 2048 bits and 10^4
features: every user's self-mask seed shared (Shamir, sealed, relayed, opened), the unmask
request answered, the server's rebuilding of every self-mask and of one left user's masks.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path

import gmpy2
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from privrelease.core.spam import features as F  # noqa: E402
from privrelease.core.spam import parties as Q  # noqa: E402
from privrelease.core.spam import protocol as P  # noqa: E402
from privrelease.core.spam import wire as W  # noqa: E402
from privrelease.core.spam.mail import read_mail, split_corpus  # noqa: E402
from privrelease.core.spam.paillier import KeyPair  # noqa: E402
from privrelease.core.spam.run_report import auc  # noqa: E402
from privrelease.core.spam.spec import Inputs  # noqa: E402
from privrelease.core.spam.training import SpamSpec, Training, design, exact_gradient  # noqa: E402

CORPUS = Path(os.environ.get("PRIVRELEASE_DATA", "data")) / "spamassassin" / "spamassassin.jsonl.gz"


def repro(key_bits: int, rounds: int, users: int, eta: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        split_corpus(CORPUS, out, users, 0.2, 0)
        spec = SpamSpec(
            run_id="bench",
            users=[f"user-{k + 1}.jsonl" for k in range(users)],
            test="test.jsonl",
            features=F.FeatureParams(modulus=1_000_000, reduction="hash", dimension=10_000),
            key_bits=key_bits,
            learning_rate=eta,
            rounds=rounds,
            mode="batch",
        )
        t = time.perf_counter()
        users = [out / name for name in spec.users]
        inputs = Inputs(spec, out / "spec.yaml", users, out / spec.test, [len(read_mail(p)[1]) for p in users], out)
        os.environ["PRIVRELEASE_TEST_MODE"] = "1"  # the plaintext twins (pooled mail) are reproduction tooling only
        training = Training.setup(inputs)
        try:
            print(f"setup (features, keys, processes): {time.perf_counter() - t:.1f} s; users hold {training.sizes}")
            for _ in range(rounds):
                r = training.run_round()
                print(
                    f"round {r.round}: {r.seconds:.1f} s, {r.training_messages} messages, {r.ciphertexts} ciphertexts, "
                    f"{r.bytes / 1e6:.1f} MB, max gradient gap {r.max_gradient_gap:.2e}",
                    flush=True,
                )
            report = training.write(out / "run")
        finally:
            training.close()
        print(
            json.dumps(
                {k: report[k] for k in ("auc_private", "auc_plain", "auc_plain_exact_sigmoid", "max_weight_gap")}, indent=2
            )
        )
        for name in ("decision", "decision_plain"):  # spam classify's cutoff on the test mail, and the bare sign's
            d = report[name]
            print(
                f"{name}: cutoff {d['cutoff']:.4g} for FPR <= {d['max_false_positive_rate']:g}: TP {d['true_positives']} "
                f"FN {d['false_negatives']} FP {d['false_positives']} TN {d['true_negatives']}, precision {d['precision']}, "
                f"recall {d['recall']}; at the sign: TP {d['at_sign']['true_positives']} FP {d['at_sign']['false_positives']}"
            )
        # the previous protocol's setting: exact sigmoid at η = 0.001, for comparison
        xs = [x for ux in training.twins.user_x for x in ux]
        ys = np.concatenate(training.twins.user_y)
        w = np.zeros(spec.features.size)
        for _ in range(rounds):
            w = w + 0.001 * exact_gradient(xs, ys, w)
        print(f"plaintext, exact sigmoid, η = 0.001: AUC {auc(training.test_y, design(training.test_x, len(w)) @ w):.6f}")


def _cpu() -> float:
    """CPU seconds of this process and of its children that ended (the server's forked r^n processes)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timing(messages: int, users: int, epsilon: float | None = None, leave: bool = False) -> None:
    """Per-message cost of one round; with ``epsilon``, of a dp: round (each user's noise share,
    wider slots; 10 rounds, delta 1e-6, 1 colluder)."""
    from privrelease.core.spam import dp

    noise = dp.calibrate(dp.DPParams(epsilon=epsilon, delta=1e-6), users, 10) if epsilon else None
    extra = {"radius": noise.params.radius, "share_variance": noise.share_variance} if noise else {}
    share = noise.share(0) if noise else None
    texts, labels = read_mail(CORPUS)
    pick = np.random.default_rng(0).choice(len(texts), messages, replace=False)
    reducer = F.Reducer(F.FeatureParams(modulus=1_000_000, reduction="hash", dimension=10_000))
    x = [reducer.apply(F.grams(texts[i], 1_000_000)) for i in pick]
    y = labels[pick]
    nnz = sum(len(v) for v in x)
    d = 10_000
    w0 = np.random.default_rng(0).normal(0, 1e-4, d)
    what = f" with dp (epsilon {epsilon:g})" if epsilon else ""
    print(f"2048-bit round{what}: {users} users, {messages} messages in all, d {d:,}, {nnz:,} non-zero features")

    # in process: the steps one after the other, users' sub-steps timed inside
    server = P.Server(2048, w0, 1.5e-6, **extra)
    members = [P.User(f"user-{k + 1}", x[k::users], y[k::users], noise=share) for k in range(users)]
    channel = W.Channel()
    Q.setup(Q.Local(server), [Q.Local(u) for u in members], channel)
    t, cpu = time.perf_counter(), _cpu()
    server.precompute()
    offline, offline_cpu = time.perf_counter() - t, _cpu() - cpu
    t, cpu = time.perf_counter(), _cpu()
    times, _, _ = Q.train_round(Q.Local(server), [Q.Local(u) for u in members], channel, 0)
    total, total_cpu = time.perf_counter() - t, _cpu() - cpu
    print(
        f"in process (the round on one core; the server's offline r^n on every core, in processes it forks): server "
        f"offline (d CRT r^n) {offline:.1f} s ({offline_cpu:.1f} s CPU); round {total:.1f} s "
        f"({total_cpu:.1f} s CPU); together {(offline + total) / messages:.4f} s per message "
        f"({(offline_cpu + total_cpu) / messages:.4f} s CPU)"
    )
    for step, seconds in times.seconds.items():
        print(f"  {step}: {seconds:.2f} s")
    for step in members[0].times.seconds:
        print(f"    {step}: {sum(u.times.seconds[step] for u in members):.2f} s (all users)")
    layout = server.layout

    # every party in its own process: the users compute concurrently
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for k in range(users):
            paths.append(Path(tmp) / f"user-{k + 1}.jsonl")
            paths[-1].write_text(
                "".join(
                    json.dumps({"text": texts[i], "label": "spam" if labels[i] > 0 else "ham"}) + "\n" for i in pick[k::users]
                )
            )
        remote = Q.Remote(
            "server",
            P.Server,
            2048,
            w0,
            1.5e-6,
            "batch",
            1000,
            1,
            extra.get("radius"),
            extra.get("share_variance", 0),
            users // 2 + 1,
        )  # the spec's default threshold
        group = [Q.Remote(f"user-{k + 1}", _user, f"user-{k + 1}", p, share) for k, p in enumerate(paths)]
        try:
            Q.setup(remote, group, W.Channel())
            remote.call("precompute")  # round 0's r^n; the steady state overlaps it with the users' work
            Q.train_round(remote, group, W.Channel(), 0, precompute=True)
            if leave:  # the last user's process dies between rounds: it leaves, the others' masks toward it are rebuilt
                os.kill(group[-1]._process.pid, signal.SIGKILL)
                group[-1]._process.join()
            t = time.perf_counter()
            times, _, _ = Q.train_round(remote, group, W.Channel(), 1, precompute=True)
            wall = time.perf_counter() - t
        finally:
            for party in [remote, *group]:
                party.close()
    print(
        f"parties in their own processes (2 cores), a steady-state round (the server precomputes the next round's "
        f"r^n while the users work){' after the last user left' if leave else ''}: {wall:.1f} s = "
        f"{wall / messages:.4f} s per message"
    )
    for step, seconds in times.seconds.items():
        print(f"  {step}: {seconds:.2f} s")

    # the floor: the Paillier operations the round must do, each timed on its own
    keys = KeyPair(2048)
    key, n2 = keys.public, keys.public.nsquare
    c = key.encrypt(12345, "x")
    reps = 200
    crt = _per(lambda: keys.obfuscator(), reps)
    full = _per(lambda: key.obfuscator(), reps)
    dec = _per(lambda: keys.raw_decrypt(c), reps)
    mul = _per(lambda: c * c % n2, reps * 50)
    inv = _per(lambda: gmpy2.invert(c, n2), reps)
    shift = 1 << layout.slot_bits
    pack = _per(lambda: gmpy2.powmod(c, shift, n2), reps)
    m = layout.ciphertexts
    parts = {
        "server: d CRT obfuscators": d * crt,
        "users: 2·nnz ciphertext products": 2 * nnz * mul,
        "users: one inversion per message": messages * inv,
        "users: (d − m) packing powers c^(2^slot_bits) per user": users * (d - m) * pack,
        "users: m fresh r^n per user": users * m * full,
        "server: m CRT decryptions": m * dec,
    }
    floor = sum(parts.values())
    print(
        f"one CRT r^n {crt * 1e3:.2f} ms, one r^n {full * 1e3:.2f} ms, one CRT decryption {dec * 1e3:.2f} ms, "
        f"one product {mul * 1e6:.2f} µs, one inversion {inv * 1e6:.1f} µs, one packing power {pack * 1e6:.0f} µs; "
        f"{layout.slots} slots of {layout.slot_bits} bits, m = {m}"
    )
    for name, seconds in parts.items():
        print(f"  floor, {name}: {seconds:.2f} s")
    print(f"floor (one core, CPU): {floor:.1f} s = {floor / messages:.4f} s per message")


def shares(counts: tuple[int, ...] = (3, 10, 30, 100), m: int = 417) -> None:
    from privrelease.core.spam import dropout as R
    from privrelease.core.spam.aggregation import Agreement, new_seed, self_mask

    n = int(gmpy2.next_prime(2**2047))
    for users in counts:
        t_, names = users // 2 + 1, [f"user-{k + 1}" for k in range(users)]
        sealers, agreements = [R.Sealer() for _ in range(users)], [Agreement() for _ in range(users)]
        for k, s in enumerate(sealers):
            s.agree(k, [x.public_key() for x in sealers], b"bench")
        holders = [R.Holder(k, names, t_) for k in range(users)]
        cpu = time.process_time()  # per round: fresh b_u,r and s_u,r shared, the round's pairwise seeds agreed
        for h in holders:
            h.begin(0, names)
        seeds = [new_seed() for _ in range(users)]
        bundles = [
            s.seal(
                R.SELF,
                0,
                {x - 1: v + w + a.public_key() for (x, v), (_, w) in zip(R.split(seed, t_, users), R.split(a.seed, t_, users))},
            )
            for s, seed, a in zip(sealers, seeds, agreements)
        ]
        relayed = R.relay(bundles, users)
        for k, (h, s, a, payload) in enumerate(zip(holders, sealers, agreements, relayed)):
            a.agree_with(k, h.hold(0, s.open(R.SELF, 0, payload)), b"bench")
        share_cpu = time.process_time() - cpu
        cpu = time.process_time()
        left = names[-1:]
        replies = [h.reveal({"round": 0, R.SELF: names[:-1], R.SECRET: left}) for h in holders[:-1]]
        found = R.gather(replies, names, R.SELF)
        for u in range(users - 1):
            self_mask(R.combine(found[u], t_, "b"), 0, n, m)
        unmask_cpu = time.process_time() - cpu
        cpu = time.process_time()
        Agreement(agreements[-1].seed).agree_with(users - 1, dict(enumerate(x.public_key() for x in agreements)), b"bench")
        agreements[-1].mask(n, 0, m, among=list(range(users - 1)))  # one left user's masks toward the survivors
        left_cpu = time.process_time() - cpu
        cpu = time.process_time()
        agreements[0].mask(n, 0, m)
        pairwise_cpu = time.process_time() - cpu
        print(
            f"{users} users (t = {t_}), m = {m} ciphertexts: self-mask shares {share_cpu:.3f} s (all users, "
            f"{users * users} sealed shares, {sum(len(b) for b in bundles) / 1e3:.0f} kB), unmask answers and "
            f"{users - 1} self-masks rebuilt {unmask_cpu:.3f} s, one left user's masks rebuilt {left_cpu:.3f} s; "
            f"for scale, one user's pairwise masks {pairwise_cpu:.3f} s"
        )


def _user(name: str, path: Path, share: dict | None = None) -> P.User:
    from privrelease.core.spam.training import load_user

    return load_user(
        name,
        path,
        path.parent,
        F.FeatureParams(modulus=1_000_000, reduction="hash", dimension=10_000).model_dump(),
        None,
        1,
        share,
    )


def _per(fn, reps: int) -> float:
    """CPU seconds per call (CPU, not wall clock: the machine may be shared)."""
    t = time.process_time()
    for _ in range(reps):
        fn()
    return (time.process_time() - t) / reps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["repro", "timing", "shares"])
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--users", type=int, help="default: 3 for repro, 2 for timing")
    ap.add_argument("--eta", type=float, default=1.5e-6)
    ap.add_argument("--messages", type=int, default=1000)
    ap.add_argument("--dp-epsilon", type=float, help="timing: a dp: round at this epsilon")
    ap.add_argument("--leave", action="store_true", help="timing: the last user leaves before the steady-state round")
    args = ap.parse_args()
    if args.what == "repro":
        repro(args.key_bits, args.rounds, args.users or 3, args.eta)
    elif args.what == "shares":
        shares()
    else:
        timing(args.messages, args.users or 2, args.dp_epsilon, args.leave)


if __name__ == "__main__":
    main()
