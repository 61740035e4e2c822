"""A whole private training from a spec: parties, rounds, the plaintext twins, evaluation, report.

The server and every user run in their own process (``parties.Remote``); this process only
moves their bytes. The plaintext twin runs the same rule and schedule (same η, rounds, blocks,
w₀ = 0) in floating point, so the private model can be compared with it number for number; a
second twin uses the exact sigmoid, to show what the first-order expansion costs. The twins are
the reproduction's audit: they read the mail files here, and nothing of them reaches a party. The run folder
``$PRIVRELEASE_HOME/spam/<run_id>/`` gets the server's model, ``report.json``, ``report.md``,
``transcript.jsonl`` (message metadata only) and ``roc.png``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix

from core.errors import SpecError
from core.spam import features as F
from core.spam import parties
from core.spam.protocol import Channel, Server, User, block, check_participation
from core.spam.spec import SpamSpec


def read_mail(path: Path) -> tuple[list[str], np.ndarray]:
    """Texts and labels (+1 spam, −1 ham) of a JSON-lines file (optionally gzipped)."""
    if not path.is_file():
        raise SpecError(f"mail file {str(path)!r} does not exist.")
    opener = gzip.open if path.suffix == ".gz" else open
    texts, labels = [], []
    with opener(path, "rt", encoding="utf-8", errors="surrogateescape") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                raise SpecError(f"{path.name} line {number} is not valid JSON.") from None
            if not isinstance(doc, dict) or not isinstance(doc.get("text"), str) or doc.get("label") not in ("spam", "ham"):
                raise SpecError(f"{path.name} line {number}: each line needs 'text' (a string) and 'label' (spam or ham).")
            texts.append(doc["text"])
            labels.append(1 if doc["label"] == "spam" else -1)
    if not texts:
        raise SpecError(f"{path.name} holds no messages.")
    return texts, np.array(labels)


def split_corpus(corpus: Path, out: Path, users: int, test_fraction: float, seed: int) -> list[Path]:
    """A fixed stratified split of one labelled corpus: users-1.jsonl ... users-K.jsonl and test.jsonl."""
    if users < 1 or not 0 < test_fraction < 1:
        raise SpecError("split needs --users >= 1 and 0 < --test-fraction < 1.")
    texts, labels = read_mail(corpus)
    rng = np.random.default_rng(seed)
    part = np.empty(len(labels), dtype=int)
    for value in (1, -1):  # stratified: each class dealt out separately
        idx = rng.permutation(np.flatnonzero(labels == value))
        n_test = int(round(test_fraction * len(idx)))
        part[idx[:n_test]] = -1
        part[idx[n_test:]] = np.arange(len(idx) - n_test) % users
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"user-{k + 1}.jsonl" for k in range(users)] + [out / "test.jsonl"]
    for k, path in enumerate(paths):
        chosen = np.flatnonzero(part == (k if k < users else -1))
        with path.open("w", encoding="utf-8", errors="surrogateescape") as fh:
            for i in chosen:
                fh.write(json.dumps({"text": texts[i], "label": "spam" if labels[i] > 0 else "ham"}) + "\n")
    return paths


def schedule(sizes: list[int], spec: SpamSpec, round_: int) -> list[np.ndarray]:
    """Which of each user's messages take part in a round."""
    return [block(n, spec.mode, spec.block_size, round_) for n in sizes]


def design(x: list[np.ndarray], d: int) -> csr_matrix:
    """Binary messages given as index sets, as a sparse n×d matrix."""
    lengths = np.array([len(xi) for xi in x], dtype=np.int64)
    indices = np.concatenate(x) if x else np.empty(0, dtype=np.int64)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    return csr_matrix((np.ones(len(indices)), indices, indptr), shape=(len(x), d))


def plain_gradient(x: list[np.ndarray], y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The protocol's rule in floating point: Σ_i x_i y_i σ(−z_i) with σ(−z) ≈ 1/2 − z/4, i.e.
    Σ_i x_i (y_i/2 − wᵀx_i/4), for binary x given as index sets."""
    m = design(x, len(w))
    return m.T @ (y / 2 - (m @ w) / 4)


def exact_gradient(x: list[np.ndarray], y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Σ_i y_i x_i / (1 + exp(y_i wᵀx_i)): logistic regression with the exact sigmoid."""
    m = design(x, len(w))
    z = y * (m @ w)
    return m.T @ (y / (1 + np.exp(np.minimum(z, 700.0))))


def load_user(name: str, path: Path, params: dict, keep: np.ndarray | None) -> User:
    """A user party, built inside its own process from its own mail file."""
    texts, labels = read_mail(path)
    reducer = F.Reducer(F.FeatureParams.model_validate(params), keep)
    return User(name, [reducer.apply(F.grams(t, reducer.params.modulus)) for t in texts], labels)


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels > 0, scores))


@dataclass
class RoundReport:
    round: int
    seconds: float
    steps: dict[str, float]
    messages: int
    ciphertexts: int
    bytes: int
    training_messages: int
    max_gradient_gap: float  # |private − plaintext| over the gradient's components


@dataclass
class Training:
    """The parties (each in its own process) and both twins of one run, advanced a round at a time."""

    spec: SpamSpec
    server: parties.Local
    users: list[parties.Local]
    user_x: list[list[np.ndarray]]  # for the plaintext twins only
    user_y: list[np.ndarray]
    test_x: list[np.ndarray]
    test_y: np.ndarray
    reducer: F.Reducer
    channel: Channel = field(default_factory=Channel)
    plain_w: np.ndarray | None = None
    exact_w: np.ndarray | None = None
    rounds: list[RoundReport] = field(default_factory=list)
    setup_seconds: float = 0.0

    @classmethod
    def setup(cls, spec: SpamSpec, base: Path) -> Training:
        t = time.perf_counter()
        paths = [(base / p).resolve() for p in spec.users]
        mails = [read_mail(p) for p in paths]
        check_participation(len(mails), sum(len(b) for b in schedule([len(y) for _, y in mails], spec, 0)))
        test_texts, test_y = read_mail((base / spec.test).resolve())
        raw = [[F.grams(text, spec.features.modulus) for text in texts] for texts, _ in mails]
        reducer = F.fit(spec.features, [g for user in raw for g in user] if spec.features.reduction in F.DATA_DEPENDENT else None)
        user_x = [[reducer.apply(g) for g in user] for user in raw]
        test_x = [reducer.apply(F.grams(text, spec.features.modulus)) for text in test_texts]
        d = spec.features.size
        server = parties.Remote("server", Server, spec.key_bits, np.zeros(d), spec.learning_rate, spec.mode, spec.block_size)
        users: list[parties.Local] = []
        try:
            for k, path in enumerate(paths):
                users.append(parties.Remote(f"user-{k + 1}", load_user, f"user-{k + 1}", path, spec.features.model_dump(), reducer.keep))
            channel = Channel()
            parties.setup(server, users, channel)
            server.call("precompute")  # the first round's r^n: offline, counted in the setup time
        except BaseException:
            for party in [server, *users]:
                party.close()
            raise
        return cls(spec, server, users, user_x, [y for _, y in mails], test_x, test_y, reducer, channel,
                   np.zeros(d), np.zeros(d), setup_seconds=time.perf_counter() - t)  # fmt: skip

    def run_round(self) -> RoundReport:
        t = time.perf_counter()
        number = len(self.rounds)
        blocks = schedule([len(y) for y in self.user_y], self.spec, number)
        before = len(self.channel.log)
        times, gradient = parties.train_round(self.server, self.users, self.channel, number, number + 1 < self.spec.rounds)
        seconds = time.perf_counter() - t
        xs = [x for ux, b in zip(self.user_x, blocks) for x in (ux[i] for i in b)]
        ys = np.concatenate([uy[b] for uy, b in zip(self.user_y, blocks)])
        plain = plain_gradient(xs, ys, self.plain_w)
        self.plain_w = self.plain_w + self.spec.learning_rate * plain
        self.exact_w = self.exact_w + self.spec.learning_rate * exact_gradient(xs, ys, self.exact_w)
        sent = self.channel.log[before:]
        report = RoundReport(number, seconds, times.seconds, len(sent), sum(m.count for m in sent), sum(m.bytes for m in sent),
                             len(ys), float(np.abs(gradient - plain).max()))  # fmt: skip
        self.rounds.append(report)
        return report

    def close(self) -> None:
        """Stop the party processes."""
        for party in [self.server, *self.users]:
            party.close()

    def scores(self, w: np.ndarray) -> np.ndarray:
        return design(self.test_x, len(w)) @ w

    def write(self, folder: Path) -> dict:
        """Model (the server's), report, transcript and ROC plot; returns report.json's content."""
        folder.mkdir(parents=True, exist_ok=False)
        model = self.server.call("model")
        # the server's own output: owner-only from its first byte
        with os.fdopen(os.open(folder / "model.npy", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as fh:
            np.save(fh, model)
        if self.reducer.keep is not None:
            np.save(folder / "feature_map.npy", self.reducer.keep)
        transcript = folder / "transcript.jsonl"
        with transcript.open("w") as fh:
            for m in self.channel.log:
                fh.write(json.dumps(asdict(m)) + "\n")
        private, plain = self.scores(model), self.scores(self.plain_w)
        directory = next(m for m in self.channel.log if m.kind == "directory")
        sizes = [len(b) for b in schedule([len(y) for y in self.user_y], self.spec, 0)]
        report = {
            "run_id": self.spec.run_id,
            "auc_private": auc(self.test_y, private),
            "auc_plain": auc(self.test_y, plain),
            "auc_plain_exact_sigmoid": auc(self.test_y, self.scores(self.exact_w)),
            "max_weight_gap": float(np.abs(model - self.plain_w).max()),
            "rounds": len(self.rounds),
            "seconds_per_round": [r.seconds for r in self.rounds],
            "setup_seconds": self.setup_seconds,
            "key_bits": self.spec.key_bits,
            "features": {**self.spec.features.model_dump(), "data_dependent": self.spec.features.reduction in F.DATA_DEPENDENT},
            "learning_rate": self.spec.learning_rate,
            "rule": "first-order sigmoid: σ(−z) ≈ 1/2 − z/4",
            "mode": self.spec.mode,
            "block_size": self.spec.block_size,
            "users": [len(y) for y in self.user_y],
            "test_messages": len(self.test_y),
            "server_learns": f"per round, only the sum of the gradient over all {len(sizes)} users' {sum(sizes)} messages "
                             "(and so the model); each user's message decrypts to a value uniform on Z_n",
            "directory_digest": directory.digest,
            "per_round": [asdict(r) for r in self.rounds],
            "transcript_sha256": hashlib.sha256(transcript.read_bytes()).hexdigest(),
        }  # fmt: skip
        (folder / "report.json").write_text(json.dumps(report, indent=2))
        _roc(self.test_y, private, plain, folder / "roc.png")
        (folder / "report.md").write_text(markdown(report))
        return report


def _roc(labels: np.ndarray, private: np.ndarray, plain: np.ndarray, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import roc_curve

    fig, ax = plt.subplots(figsize=(5, 5))
    for name, scores, style in (("private", private, "-"), ("plaintext", plain, "--")):
        fpr, tpr, _ = roc_curve(labels > 0, scores)
        ax.plot(fpr, tpr, style, label=f"{name} (AUC {auc(labels, scores):.5f})")
    ax.plot([0, 1], [0, 1], ":", color="grey")
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title("ROC on the test mail", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def markdown(report: dict) -> str:
    steps = sorted({s for r in report["per_round"] for s in r["steps"]})
    head = "| round | total s | " + " | ".join(steps) + " | messages | ciphertexts | MB |"
    rows = [
        f"| {r['round']} | {r['seconds']:.2f} | " + " | ".join(f"{r['steps'].get(s, 0):.2f}" for s in steps)
        + f" | {r['messages']} | {r['ciphertexts']} | {r['bytes'] / 1e6:.1f} |"
        for r in report["per_round"]
    ]  # fmt: skip
    return "\n".join([
        f"# Private spam-filter training `{report['run_id']}`",
        "",
        f"AUC on {report['test_messages']} test messages: private **{report['auc_private']:.6f}**, plaintext "
        f"{report['auc_plain']:.6f} (same rule, η = {report['learning_rate']}, {report['rounds']} rounds, {report['mode']} mode); "
        f"largest weight difference {report['max_weight_gap']:.2e}. Plaintext with the exact sigmoid: "
        f"{report['auc_plain_exact_sigmoid']:.6f}.",
        "",
        f"{len(report['users'])} users holding {', '.join(map(str, report['users']))} messages; {report['key_bits']}-bit "
        f"Paillier keys; features: {report['features']['reduction']} to {report['features']['dimension']} "
        f"(4-grams mod {report['features']['modulus']})"
        + (" — **data-dependent reduction**: its feature list reveals document frequencies" if report["features"]["data_dependent"] else "")
        + ".",
        "",
        "Seconds per protocol step, and traffic:",
        "",
        head,
        "|" + "---|" * (len(steps) + 5),
        *rows,
        "",
        "What the server learns: " + report["server_learns"] + ".",
        "",
        "![ROC](roc.png)",
        "",
    ])  # fmt: skip


def classify_message(folder: Path, text: str, key_bits: int | None = None) -> tuple[str, Channel]:
    """Run the private classification protocol (``classify``) for one message against a trained run's model."""
    from core.spam.classify import ClassifyClient, ServerParty, Wire, classify
    from core.spam.parties import Remote

    report = json.loads((folder / "report.json").read_text())
    params = F.FeatureParams.model_validate({k: v for k, v in report["features"].items() if k != "data_dependent"})
    keep = np.load(folder / "feature_map.npy") if (folder / "feature_map.npy").exists() else None
    x = F.Reducer(params, keep).apply(F.grams(text, params.modulus))
    server = Remote("server", ServerParty, folder, key_bits or report["key_bits"])  # the model and keys stay there
    try:
        keys, weights = server.call("publication")
        wire = Wire(Channel())
        client = ClassifyClient(wire.send(server.name, "client", "public-keys", keys),
                                wire.send(server.name, "client", "encrypted-weights", weights))  # fmt: skip
        return classify(server, client, wire, x), wire.channel
    finally:
        server.close()
