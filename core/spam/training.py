"""A whole private training from a spec: parties, rounds, the plaintext twin, evaluation, report.

The plaintext twin runs the same schedule (same η, rounds, blocks, w₀ = 0) in floating point, so
the private model can be compared with it number for number. The run folder
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
from typing import Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from scipy.sparse import csr_matrix

from core import noise
from core.errors import SpecError
from core.spam import features as F
from core.spam.paillier import PublicKey
from core.spam.protocol import Channel, Server, StepTimes, User, train_round
from core.spec import ID_PATTERN


class SpamSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str = Field(pattern=ID_PATTERN, description="names the run folder and its ledger entry")
    users: list[str] = Field(min_length=1, max_length=1000, description="one JSON-lines file per user: text, label (spam | ham)")
    test: str = Field(description="JSON-lines file for evaluation only")
    features: F.FeatureParams = Field(default_factory=F.FeatureParams)
    key_bits: int = Field(2048, ge=512, le=8192, description="Paillier modulus size (2048 unless testing)")
    learning_rate: float = Field(0.001, gt=0, le=10, description="η")
    rounds: int = Field(10, ge=1, le=10_000, description="gradient steps")
    mode: Literal["batch", "online"] = Field("batch", description="batch: every message each round; online: each user's next block")
    block_size: int = Field(1000, ge=1, le=1_000_000, description="online mode: messages per user per round")
    mask_range: int | None = Field(None, ge=1, le=10_000, description="R of the additive mask; default: the largest the key allows")
    seed: int | None = Field(None, ge=0, description="test mode only: fixes the masks (PRIVRELEASE_TEST_MODE=1)")


def load_spec(path: str | Path) -> tuple[SpamSpec, Path]:
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"spam spec {str(path)!r} is not a file.")
    try:
        doc = yaml.safe_load(path.read_text())
        spec = SpamSpec.model_validate(doc if isinstance(doc, dict) else {})
    except yaml.YAMLError:
        raise SpecError(f"spam spec {path.name!r} is not valid YAML.") from None
    except ValidationError as exc:
        parts = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors())
        raise SpecError(f"the spam spec is invalid: {parts}.") from None
    noise.check_seed(spec.seed)
    return spec, path.parent.resolve()


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
    if spec.mode == "batch":
        return [np.arange(n) for n in sizes]
    out = []
    for n in sizes:
        take = min(spec.block_size, n)
        start = (round_ * take) % n
        out.append((start + np.arange(take)) % n)
    return out


def design(x: list[np.ndarray], d: int) -> csr_matrix:
    """Binary messages given as index sets, as a sparse n×d matrix."""
    lengths = np.array([len(xi) for xi in x], dtype=np.int64)
    indices = np.concatenate(x) if x else np.empty(0, dtype=np.int64)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    return csr_matrix((np.ones(len(indices)), indices, indptr), shape=(len(x), d))


def plain_gradient(x: list[np.ndarray], y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Σ_i y_i x_i / (1 + exp(y_i wᵀx_i)) for binary x given as index sets."""
    m = design(x, len(w))
    z = y * (m @ w)
    return m.T @ (y / (1 + np.exp(np.minimum(z, 700.0))))


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
    """The parties and both models of one run, advanced a round at a time."""

    spec: SpamSpec
    server: Server
    users: list[User]
    user_x: list[list[np.ndarray]]  # for the plaintext twin only (it stands in for the users' own computation)
    user_y: list[np.ndarray]
    test_x: list[np.ndarray]
    test_y: np.ndarray
    reducer: F.Reducer
    channel: Channel = field(default_factory=Channel)
    plain_w: np.ndarray | None = None
    rounds: list[RoundReport] = field(default_factory=list)
    setup_seconds: float = 0.0

    @classmethod
    def setup(cls, spec: SpamSpec, base: Path) -> Training:
        t = time.perf_counter()
        mails = [read_mail((base / p).resolve()) for p in spec.users]
        test_texts, test_y = read_mail((base / spec.test).resolve())
        raw = [[F.grams(text, spec.features.modulus) for text in texts] for texts, _ in mails]
        reducer = F.fit(spec.features, [g for user in raw for g in user] if spec.features.reduction in F.DATA_DEPENDENT else None)
        user_x = [[reducer.apply(g) for g in user] for user in raw]
        test_x = [reducer.apply(F.grams(text, spec.features.modulus)) for text in test_texts]
        d = spec.features.size
        server = Server(spec.key_bits, np.zeros(d), spec.learning_rate, spec.mask_range)
        channel = Channel()
        users = []
        for k, (x, (_, y)) in enumerate(zip(user_x, mails)):
            name = f"user-{k + 1}"
            got = channel.public(server.name, name, "public-key-and-parameters",
                                 {"n": server.public_key.n, **server.scales.public(), **spec.features.model_dump()})  # fmt: skip
            users.append(User(name, x, y, PublicKey(got["n"]), server.scales, noise.generator(_seed(spec.seed, k))))
        return cls(spec, server, users, user_x, [y for _, y in mails], test_x, test_y, reducer, channel,
                   np.zeros(d), setup_seconds=time.perf_counter() - t)  # fmt: skip

    def run_round(self) -> RoundReport:
        t = time.perf_counter()
        number = len(self.rounds)
        self.channel.round = number
        blocks = schedule([len(u) for u in self.users], self.spec, number)
        before = len(self.channel.log)
        times, gradient = train_round(self.server, self.users, blocks, self.channel)
        seconds = time.perf_counter() - t
        xs = [x for ux, b in zip(self.user_x, blocks) for x in (ux[i] for i in b)]
        ys = np.concatenate([uy[b] for uy, b in zip(self.user_y, blocks)])
        plain = plain_gradient(xs, ys, self.plain_w)
        self.plain_w = self.plain_w + self.spec.learning_rate * plain
        sent = self.channel.log[before:]
        report = RoundReport(number, seconds, times.seconds, len(sent), sum(m.count for m in sent), sum(m.bytes for m in sent),
                             len(ys), float(np.abs(gradient - plain).max()))  # fmt: skip
        self.rounds.append(report)
        return report

    def scores(self, w: np.ndarray) -> np.ndarray:
        return design(self.test_x, len(w)) @ w

    def write(self, folder: Path) -> dict:
        """Model (the server's), report, transcript and ROC plot; returns report.json's content."""
        folder.mkdir(parents=True, exist_ok=False)
        np.save(folder / "model.npy", self.server.w)
        os.chmod(folder / "model.npy", 0o600)  # the server's; users never receive it
        if self.reducer.keep is not None:
            np.save(folder / "feature_map.npy", self.reducer.keep)
        transcript = folder / "transcript.jsonl"
        with transcript.open("w") as fh:
            for m in self.channel.log:
                fh.write(json.dumps(asdict(m)) + "\n")
        private, plain = self.scores(self.server.w), self.scores(self.plain_w)
        s = self.server.scales
        report = {
            "run_id": self.spec.run_id,
            "auc_private": auc(self.test_y, private),
            "auc_plain": auc(self.test_y, plain),
            "max_weight_gap": float(np.abs(self.server.w - self.plain_w).max()),
            "rounds": len(self.rounds),
            "seconds_per_round": [r.seconds for r in self.rounds],
            "setup_seconds": self.setup_seconds,
            "key_bits": self.spec.key_bits,
            "features": {**self.spec.features.model_dump(), "data_dependent": self.spec.features.reduction in F.DATA_DEPENDENT},
            "learning_rate": self.spec.learning_rate,
            "mode": self.spec.mode,
            "block_size": self.spec.block_size,
            "users": [len(u) for u in self.users],
            "test_messages": len(self.test_y),
            "scales": s.public(),
            "hiding": {
                "additive": f"the server sees z − r with r uniform on [−{s.mask_range}, {s.mask_range}]: total variation "
                            f"|z − z'|/{2 * s.mask_range} between any two scores",
                "multiplicative": f"the server sees q(1 + e^z) with ln q uniform on [0, {s.q_bits} ln 2]: total variation "
                                  f"|Δ ln(1 + e^z)|/({s.q_bits} ln 2)",
            },  # fmt: skip
            "per_round": [asdict(r) for r in self.rounds],
            "transcript_sha256": hashlib.sha256(transcript.read_bytes()).hexdigest(),
        }
        (folder / "report.json").write_text(json.dumps(report, indent=2))
        _roc(self.test_y, private, plain, folder / "roc.png")
        (folder / "report.md").write_text(markdown(report))
        return report


def _seed(seed: int | None, k: int) -> int | None:
    return None if seed is None else seed * 1000 + k


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
        f"{report['auc_plain']:.6f} (same η = {report['learning_rate']}, {report['rounds']} rounds, {report['mode']} mode); "
        f"largest weight difference {report['max_weight_gap']:.2e}.",
        "",
        f"{len(report['users'])} users holding {', '.join(map(str, report['users']))} messages; {report['key_bits']}-bit "
        f"Paillier keys; features: {report['features']['reduction']} to {report['features']['dimension']} "
        f"(4-grams mod {report['features']['modulus']})"
        + (" — **data-dependent reduction**: its feature list reveals document frequencies" if report["features"]["data_dependent"] else "")
        + ".",
        "",
        "Seconds per protocol step (as the paper's Table 4), and traffic:",
        "",
        head,
        "|" + "---|" * (len(steps) + 5),
        *rows,
        "",
        "What the server sees: " + report["hiding"]["additive"] + "; " + report["hiding"]["multiplicative"] + ".",
        "",
        "![ROC](roc.png)",
        "",
    ])  # fmt: skip


def classify_message(folder: Path, text: str, key_bits: int | None = None) -> tuple[str, Channel]:
    """Run the private classification protocol (``classify``) for one message against a trained run's model."""
    from core.spam.classify import ClassifyClient, Wire, classify, service

    report = json.loads((folder / "report.json").read_text())
    params = F.FeatureParams.model_validate({k: v for k, v in report["features"].items() if k != "data_dependent"})
    keep = np.load(folder / "feature_map.npy") if (folder / "feature_map.npy").exists() else None
    x = F.Reducer(params, keep).apply(F.grams(text, params.modulus))
    server, keys, weights = service(folder, np.load(folder / "model.npy"), key_bits or report["key_bits"])
    wire = Wire(Channel())
    client = ClassifyClient(wire.send(server.name, "client", "public-keys", keys),
                            wire.send(server.name, "client", "encrypted-weights", weights))  # fmt: skip
    return classify(server, client, wire, x), wire.channel
