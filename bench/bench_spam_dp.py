"""AUC against epsilon of dp: spam training on SpamAssassin (docs/REPRODUCTION.md).

The protocol's decrypted sum is exactly the plaintext first-order rule on the users' capped
messages (``tests/spam/test_spam.py`` pins the parity to 10^-12) plus the users' integer noise shares,
and the server then projects the model onto the public ball. So the curve is measured by running
exactly that in the clear: the same split as ``bench_spam.py repro`` (3 users, 20% test, seed 0),
10^4 hashed features, batch mode, each user's shares from ``privrelease.core.privacy.draws.shares`` at the
share variance ``privrelease.core.spam.dp.calibrate`` gives (1 of the 3 users assumed colluding, so each adds
half the variance), in the slot units the server decrypts. Beside it: the no-DP protocol with the
same caps and step, and the plaintext rule without caps (the repro's). Fixed seeds (test mode).
Usage: python bench/bench_spam_dp.py [--reps 2]

``--protocol EPS --rounds K`` checks that parity on the real protocol instead: the same capped
split trained by the protocol (2048-bit Paillier, pairwise masks, packing; parties in this process)
for K rounds at ε = EPS, with the users' shares drawn from the simulation's seeded stream in the
same order (user 1, 2, 3 each round), against the simulation's first K rounds with those draws.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ["PRIVRELEASE_TEST_MODE"] = "1"  # fixed seeds for the noise: a reproducible curve

from privrelease.core import noise
from privrelease.core.privacy import draws
from privrelease.core.spam import dp
from privrelease.core.spam import features as F
from privrelease.core.spam import parties as Q
from privrelease.core.spam import protocol as P
from privrelease.core.spam import wire as W
from privrelease.core.spam.aggregation import W_BITS
from privrelease.core.spam.mail import read_mail, split_corpus
from privrelease.core.spam.run_report import auc
from privrelease.core.spam.training import design, plain_gradient

CORPUS = Path(os.environ.get("PRIVRELEASE_DATA", "data")) / "spamassassin" / "spamassassin.jsonl.gz"
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
USERS, ROUNDS, DELTA, D = 3, 10, 1e-6, 10_000


def train(users, eta: float, params: dp.DPParams | None, seed: int, rounds: int = ROUNDS) -> np.ndarray:
    """The protocol's rule in the clear, the users' shares from one seeded stream (user by user, round by round)."""
    w = np.zeros(D)
    rng = noise.generator(seed)
    calibrated = dp.calibrate(params, USERS, ROUNDS) if params else None
    for _ in range(rounds):
        g = sum(plain_gradient(x, y, w) for x, y in users)
        if calibrated is not None:
            shares = [draws.shares(rng, calibrated.leaf, D) for _ in range(USERS)]
            g = g + np.array([sum(z) for z in zip(*shares)], dtype=float) / 2.0 ** (W_BITS + 2)
        w = w + eta * g
        if params is not None:
            w = dp.project(w, params.radius)
    return w


class SeededUser(P.User):
    """A protocol user whose noise share comes from the simulation's seeded stream (benchmark only:
    a real user draws from the OS), so the protocol and the simulation add the very same integers."""

    stream = None

    def noise_share(self, layout) -> list[int]:
        return draws.shares(SeededUser.stream, self.noise["leaf"], layout.dimension)


def protocol(capped, eta: float, params: dp.DPParams, seed: int, rounds: int, key_bits: int = 2048) -> np.ndarray:
    """``train`` through the real protocol: Paillier, masks, packing, the server's decryption and projection."""
    calibrated = dp.calibrate(params, USERS, ROUNDS)
    SeededUser.stream = noise.generator(seed)
    server = P.Server(key_bits, np.zeros(D), eta, "batch", 1000, 1, params.radius, calibrated.share_variance)
    users = [Q.Local(SeededUser(f"user-{k + 1}", x, y, noise=calibrated.share(0))) for k, (x, y) in enumerate(capped)]
    channel = W.Channel()
    Q.setup(Q.Local(server), users, channel)
    for r in range(rounds):
        t = time.perf_counter()
        Q.train_round(Q.Local(server), users, channel, r)
        print(f"protocol round {r}: {time.perf_counter() - t:.1f} s (load average {os.getloadavg()[0]:.1f})", flush=True)
    return server.model()


def parity(capped, ty, test, args) -> None:
    params = dp.DPParams(epsilon=args.protocol, delta=DELTA, max_features=args.max_features, radius=args.radius)
    seed = int(args.protocol * 10)  # the curve's first repetition's seed at this ε
    t = time.perf_counter()
    w_protocol = protocol(capped, args.eta, params, seed, args.rounds, args.key_bits)
    seconds = time.perf_counter() - t
    w_sim = train(capped, args.eta, params, seed, args.rounds)
    print(
        f"ε = {args.protocol:g}, {args.rounds} of {ROUNDS} rounds, {args.key_bits} bits, {seconds:.0f} s: "
        f"AUC protocol {auc(ty, test @ w_protocol):.6f}, simulation {auc(ty, test @ w_sim):.6f}; "
        f"largest weight difference {np.abs(w_protocol - w_sim).max():.2e} (weights up to {np.abs(w_sim).max():.2e}), "
        f"‖w‖₂ {np.linalg.norm(w_protocol):.6f} / {np.linalg.norm(w_sim):.6f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--eta", type=float, default=1e-5)
    ap.add_argument("--max-features", type=int, default=400)
    ap.add_argument("--radius", type=float, default=0.5)
    ap.add_argument("--protocol", type=float, help="check the protocol's parity with the simulation at this epsilon")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help="with --protocol: the first rounds only")
    ap.add_argument("--key-bits", type=int, default=2048, help="with --protocol")
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp())
    split_corpus(CORPUS, out, USERS, 0.2, 0)
    reducer = F.Reducer(F.FeatureParams(dimension=D))

    def load(path: Path, cap: int | None):
        texts, y = read_mail(path)
        x = [reducer.apply(F.grams(t, 1_000_000)) for t in texts]
        return [dp.cap(v, cap, 0) for v in x] if cap else x, y

    raw = [load(out / f"user-{k + 1}.jsonl", None) for k in range(USERS)]
    capped = [load(out / f"user-{k + 1}.jsonl", args.max_features) for k in range(USERS)]
    tx, ty = load(out / "test.jsonl", args.max_features)
    test = design(tx, D)
    if args.protocol is not None:
        return parity(capped, ty, test, args)
    print(
        f"| model (SpamAssassin, {sum(len(y) for _, y in raw)} training messages, {len(ty)} test, 10^4 hashed "
        f"features, {ROUNDS} rounds, delta {DELTA:g}) | AUC | noise std per coordinate and round (g units) |"
    )
    print("|---|---|---|")
    plain = train(raw, 1.5e-6, None, 0)
    print(
        f"| plaintext rule, no caps, η = 1.5·10⁻⁶ (bench_spam.py repro) | {auc(ty, design(load(out / 'test.jsonl', None)[0], D) @ plain):.4f} | 0 |"
    )
    no_dp = dp.DPParams(epsilon=1.0, delta=DELTA, max_features=args.max_features, radius=args.radius)
    w = train(capped, args.eta, None, 0)
    w = dp.project(w, args.radius)
    print(
        f"| no dp: caps (F = {args.max_features}) and ball (R = {args.radius}), η = {args.eta:g} | {auc(ty, test @ w):.4f} | 0 |"
    )
    for eps in EPSILONS:
        params = no_dp.model_copy(update={"epsilon": eps})
        sigma = dp.calibrate(params, USERS, ROUNDS).public()["sigma_of_g"] * np.sqrt(USERS / (USERS - 1))
        aucs = [auc(ty, test @ train(capped, args.eta, params, 1000 * rep + int(eps * 10))) for rep in range(args.reps)]
        print(f"| dp ε = {eps:g} | {np.mean(aucs):.4f} ({', '.join(f'{a:.4f}' for a in aucs)}) | {sigma:.1f} |", flush=True)


if __name__ == "__main__":
    main()
