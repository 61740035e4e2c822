"""A whole private training from a checked spec (``spec.check``): parties, rounds, evaluation, report.

The server and every user run in their own process (``parties.Remote``); this process only
moves their bytes and scores the server's model on the evaluation mail. In test mode only, the
plaintext twin runs the same rule and schedule (same η, rounds, blocks, w₀ = 0) in floating point
on the pooled mail, so the private model can be compared with it number for number; a second twin
uses the exact sigmoid. Outside test mode nothing is trained on pooled plaintext: the comparison
is the reproduction's (bench/bench_spam.py, docs/REPRODUCTION.md). The run folder
``$PRIVRELEASE_HOME/spam/<run_id>/`` gets the server's model, ``report.json``, ``report.md``,
``transcript.jsonl`` (message metadata only) and ``roc.png``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix

from core import noise
from core.errors import QuorumLost, SpecError
from core.spam import dp, floors, parties
from core.spam import features as F
from core.spam.mail import read_mail
from core.spam.protocol import Server, User, block, clamp_l1
from core.spam.spec import Inputs, SpamSpec
from core.spam.wire import Channel

# with dp: why the AUC the report and the ledger hold is itself DP (README, "What the server still learns")
EVALUATION = ("The AUC is measured on the evaluation mail (`test:`), the server operator's own mail, not a user's: "
              "the model is DP with respect to the users' messages, so its AUC on the operator's mail is "
              "post-processing of a DP output with the operator's data, and DP with respect to the users' mail. That "
              "holds only when the evaluation mail is the operator's own: `privrelease spam split` carves its "
              "test.jsonl out of the corpus it splits among the users, a way to try the protocol, and the people "
              "whose messages went to that file are not protected by the model's DP: their messages set the AUC "
              "directly.")  # fmt: skip

WITHHELD = ("withheld: without dp: the model is not a DP output of the users' mail, so its AUC stays in the run "
            "folder's report.json and report.md, for the server's operator")


def public_auc(report: dict) -> float | str:
    """The model's AUC where others read it (the ledger, Prefect's log and artifacts): a DP output with
    ``dp:``, otherwise withheld."""
    return report["auc_private"] if report.get("dp") else WITHHELD


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


def load_user(name: str, path: Path, root: Path, params: dict, keep: np.ndarray | None, floor: int = 1,
              noise: dict | None = None, threshold: int | None = None, protected: bool = False,
              expected: str | None = None) -> User:  # fmt: skip
    """A user party, built inside its own process from its own mail file (which must lie in ``root``). Mail
    under a DP cap (``protected``) takes part only in rounds with noise: the party refuses before it reads it; a
    file whose bytes are not those the run was checked on (``expected``, their SHA-256) is refused too."""
    if protected and noise is None:
        raise SpecError(f"{name}: this user's mail is under a DP cap, and the run adds no noise to the round sums the "
                        "server decrypts; the user's party refuses to take part.")  # fmt: skip
    texts, labels = read_mail(path, root=root, expected=expected)
    reducer = F.Reducer(F.FeatureParams.model_validate(params), keep)
    return User(name, [reducer.apply(F.grams(t, reducer.params.modulus)) for t in texts], labels, floor, noise, threshold)


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
    participants: list[str] = field(default_factory=list)  # the users the round began with (public names)
    left: list[str] = field(default_factory=list)  # those that left during it: out for the rest of the run
    max_gradient_gap: float | None = None  # test mode: |private − plaintext twin| over the gradient's components


@dataclass
class Twins:
    """Test mode only: the plaintext twins, trained on all users' pooled mail in this process, to
    compare the private model with number for number. Outside test mode nothing is trained on
    pooled plaintext (the flow refuses to build twins); bench/bench_spam.py reproduces them."""

    user_x: list[list[np.ndarray]]
    user_y: list[np.ndarray]
    plain_w: np.ndarray
    exact_w: np.ndarray

    @classmethod
    def read(cls, inputs: Inputs, reducer: F.Reducer) -> Twins:
        if not noise.test_mode():
            raise SpecError("plaintext twins train on pooled mail: test mode only.")
        mails = [read_mail(p, root=inputs.root) for p in inputs.users]
        x = [[reducer.apply(F.grams(t, inputs.spec.features.modulus)) for t in texts] for texts, _ in mails]
        d = inputs.spec.features.size
        return cls(x, [y for _, y in mails], np.zeros(d), np.zeros(d))

    def step(self, blocks: dict[int, np.ndarray], eta: float) -> np.ndarray:
        """One step of the rule on the blocks of the users ``blocks`` names (the round's survivors)."""
        xs = [x for k, b in blocks.items() for x in (self.user_x[k][i] for i in b)]
        ys = np.concatenate([self.user_y[k][b] for k, b in blocks.items()])
        plain = plain_gradient(xs, ys, self.plain_w)
        self.plain_w = clamp_l1(self.plain_w + eta * plain)  # as the server does
        self.exact_w = self.exact_w + eta * exact_gradient(xs, ys, self.exact_w)
        return plain


@dataclass
class Training:
    """The parties of one run (each in its own process), advanced a round at a time. This process
    reads only the evaluation mail (``test``, the server operator's own) and public counts; in test
    mode also the plaintext ``twins``."""

    spec: SpamSpec
    server: parties.Local
    users: list[parties.Local]
    sizes: list[int]
    test_x: list[np.ndarray]
    test_y: np.ndarray
    reducer: F.Reducer
    channel: Channel = field(default_factory=Channel)
    twins: Twins | None = None
    rounds: list[RoundReport] = field(default_factory=list)
    setup_seconds: float = 0.0
    active: list[parties.Local] = field(default_factory=list)  # the users that have not left

    def __post_init__(self) -> None:
        self.active = self.active or list(self.users)

    @classmethod
    def setup(cls, inputs: Inputs) -> Training:
        t = time.perf_counter()
        spec = inputs.spec
        least = floors.floor(spec.features)
        if spec.features.reduction in F.DATA_DEPENDENT:  # test mode only (``spec.check`` refuses it otherwise)
            pooled = [F.grams(text, spec.features.modulus) for p in inputs.users for text in read_mail(p, root=inputs.root)[0]]
            reducer = F.fit(spec.features, pooled) if noise.test_mode() else None
            if reducer is None:
                raise SpecError(f"reduction {spec.features.reduction!r} needs pooled plaintext mail: test mode only.")
        else:
            reducer = F.fit(spec.features)
        test_texts, test_y = read_mail(inputs.test, root=inputs.root, expected=inputs.expected_test)
        test_x = [reducer.apply(F.grams(text, spec.features.modulus)) for text in test_texts]
        if spec.dp is not None:  # scored as the users' messages are bounded
            test_x = [dp.cap(x, spec.dp.max_features, spec.features.seed) for x in test_x]
        twins = Twins.read(inputs, reducer) if noise.test_mode() else None
        d = spec.features.size
        calibrated = dp.calibrate(spec.dp, len(inputs.users), spec.rounds, spec.quorum) if spec.dp else None
        share = calibrated.share(spec.features.seed) if calibrated else None
        server = parties.Remote("server", Server, spec.key_bits, np.zeros(d), spec.learning_rate, spec.mode, spec.block_size,
                                least, spec.dp.radius if spec.dp else None, calibrated.share_variance if calibrated else 0,
                                spec.quorum)  # fmt: skip
        users: list[parties.Local] = []
        try:
            for k, path in enumerate(inputs.users):
                users.append(parties.Remote(f"user-{k + 1}", load_user, f"user-{k + 1}", path, inputs.root,
                                            spec.features.model_dump(), reducer.keep, least, share, spec.quorum,
                                            inputs.protected, inputs.expected and inputs.expected[k],
                                            timeout=spec.timeout))  # fmt: skip
            channel = Channel()
            parties.setup(server, users, channel)
            server.call("precompute")  # the first round's r^n: offline, counted in the setup time
        except BaseException as exc:
            for party in [server, *users]:
                party.close()
            if isinstance(exc, parties.Dropped):  # setup has no threshold: every user's keys and shares are needed
                raise QuorumLost(f"setup: {exc}. Every user must take part in setup (its keys and the shares of its "
                                 "mask secret); nothing was trained or published. Start the run again with a new "
                                 "run_id once every user's process can run.") from None  # fmt: skip
            raise
        return cls(spec, server, users, list(inputs.sizes), test_x, test_y, reducer, channel, twins,
                   setup_seconds=time.perf_counter() - t)  # fmt: skip

    def run_round(self) -> RoundReport:
        t = time.perf_counter()
        number = len(self.rounds)
        before, began = len(self.channel.log), [u.name for u in self.active]
        times, gradient, self.active = parties.train_round(self.server, self.active, self.channel, number, number + 1 < self.spec.rounds)
        seconds = time.perf_counter() - t
        survivors = {k: b for k, (u, b) in enumerate(zip(self.users, schedule(self.sizes, self.spec, number))) if u in self.active}
        gap = None
        if self.twins is not None:
            gap = float(np.abs(gradient - self.twins.step(survivors, self.spec.learning_rate)).max())
        sent = self.channel.log[before:]
        report = RoundReport(number, seconds, times.seconds, len(sent), sum(m.count for m in sent), sum(m.bytes for m in sent),
                             sum(len(b) for b in survivors.values()), began, [n for n in began if n not in {u.name for u in self.active}],
                             gap)  # fmt: skip
        self.rounds.append(report)
        return report

    def close(self) -> None:
        """Stop the party processes."""
        for party in [self.server, *self.users]:
            party.close()

    def scores(self, w: np.ndarray) -> np.ndarray:
        return design(self.test_x, len(w)) @ w

    def write(self, final: Path) -> dict:
        """Model (the server's), report, transcript and ROC plot; returns report.json's content. Written
        into a staging folder beside ``final`` and renamed to it whole: a write that fails part-way
        leaves no run folder."""
        folder = final.with_name(f".{final.name}.staging")
        shutil.rmtree(folder, ignore_errors=True)  # a stale one from a run killed while writing
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(mode=0o700)  # the server operator's: without dp: its report and plot hold the withheld AUC
        os.chmod(folder, 0o700)  # whatever the umask
        try:
            report = self._write(folder)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        folder.rename(final)  # fails if the run folder exists: run ids are used once
        return report

    def _write(self, folder: Path) -> dict:
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
        private = self.scores(model)
        directory = next(m for m in self.channel.log if m.kind == "directory")
        sizes = [len(b) for b in schedule(self.sizes, self.spec, 0)]
        report = {
            "run_id": self.spec.run_id,
            "auc_private": auc(self.test_y, private),
            "test_mode": self.twins is not None,
            "rounds": len(self.rounds),
            "seconds_per_round": [r.seconds for r in self.rounds],
            "setup_seconds": self.setup_seconds,
            "key_bits": self.spec.key_bits,
            "features": {**self.spec.features.model_dump(), "data_dependent": self.spec.features.reduction in F.DATA_DEPENDENT},
            "floor": floors.floor(self.spec.features),
            "dp": dp.calibrate(self.spec.dp, len(self.sizes), self.spec.rounds, self.spec.quorum).public() if self.spec.dp else None,
            "threshold": self.spec.quorum,
            "left": [{"round": r.round, "user": name} for r in self.rounds for name in r.left],
            "learning_rate": self.spec.learning_rate,
            "rule": "first-order sigmoid: σ(−z) ≈ 1/2 − z/4",
            "mode": self.spec.mode,
            "block_size": self.spec.block_size,
            "users": list(self.sizes),
            "test_messages": len(self.test_y),
            "server_learns": f"per round, only the sum of the gradient over the round's surviving users' messages (all "
                             f"{len(sizes)} users' {sum(sizes)} while no user leaves; at least {self.spec.quorum} users) "
                             + ("plus their discrete Gaussian noise (a DP output) " if self.spec.dp else "")
                             + "(and so the model), and who left when; each user's message decrypts to a value uniform on "
                             "Z_n, and a user that left has its masks removed from the others', never its own message unmasked",
            "directory_digest": directory.digest,
            "per_round": [asdict(r) for r in self.rounds],
            "transcript_sha256": hashlib.sha256(transcript.read_bytes()).hexdigest(),
        }  # fmt: skip
        curves = {"private": private}
        if self.twins is not None:  # test mode: the pooled-plaintext comparisons
            curves["plaintext (test mode)"] = self.scores(self.twins.plain_w)
            report["auc_plain"] = auc(self.test_y, curves["plaintext (test mode)"])
            report["auc_plain_exact_sigmoid"] = auc(self.test_y, self.scores(self.twins.exact_w))
            report["max_weight_gap"] = float(np.abs(model - self.twins.plain_w).max())
        (folder / "report.json").write_text(json.dumps(report, indent=2))
        _roc(self.test_y, curves, folder / "roc.png")
        (folder / "report.md").write_text(markdown(report))
        return report


def _roc(labels: np.ndarray, curves: dict[str, np.ndarray], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import roc_curve

    fig, ax = plt.subplots(figsize=(5, 5))
    for (name, scores), style in zip(curves.items(), ("-", "--")):
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


def markdown(report: dict, public: bool = False) -> str:
    """report.md (the run folder's, the operator's); ``public``: the version for Prefect's artifact, where
    a model without dp: has its AUC withheld (``public_auc``)."""
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
        (f"AUC on {report['test_messages']} test messages: {WITHHELD} "
         f"(η = {report['learning_rate']}, {report['rounds']} rounds, {report['mode']} mode)."
         if public and not report.get("dp") else
         f"AUC on {report['test_messages']} test messages: private **{report['auc_private']:.6f}** "
         f"(η = {report['learning_rate']}, {report['rounds']} rounds, {report['mode']} mode)."
         + (f" Test mode: plaintext twin on the pooled mail {report['auc_plain']:.6f} (same rule), largest weight "
            f"difference {report['max_weight_gap']:.2e}; with the exact sigmoid {report['auc_plain_exact_sigmoid']:.6f}."
            if report["test_mode"] else "")),
        "",
        f"{len(report['users'])} users holding {', '.join(map(str, report['users']))} messages (at least "
        f"{report['floor']} per user and round); {report['key_bits']}-bit "
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
        f"Threshold: a round completes if at least {report['threshold']} users remain. "
        + ("; ".join(f"{e['user']} left in round {e['round'] + 1}" for e in report["left"]) + " (out for the rest of the run)."
           if report["left"] else "No user left."),
        *(["", f"Differential privacy: (ε = {report['dp']['epsilon']:g}, δ = {report['dp']['delta']:g}) for the whole run, "
            f"per replaced message, with up to {report['dp']['colluders']} colluding users adding nothing: "
            f"{report['dp']['mechanism']}, noise std {report['dp']['sigma_of_g']:.4g} per gradient coordinate and round; "
            f"at most {report['dp']['max_features']} features per message, model kept in the l2 ball of radius "
            f"{report['dp']['radius']:g}. " + EVALUATION] if report.get("dp") else []),
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
    if report.get("dp"):  # the model was trained on messages of at most max_features features
        x = dp.cap(x, report["dp"]["max_features"], params.seed)
    server = Remote("server", ServerParty, folder, key_bits or report["key_bits"])  # the model and keys stay there
    try:
        keys, weights = server.call("publication")
        wire = Wire(Channel())
        client = ClassifyClient(wire.send(server.name, "client", "public-keys", keys),
                                wire.send(server.name, "client", "encrypted-weights", weights))  # fmt: skip
        return classify(server, client, wire, x), wire.channel
    finally:
        server.close()
