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

from privrelease.core import noise
from privrelease.core.errors import QuorumLost, SpecError
from privrelease.core.privacy import events
from privrelease.core.spam import decision, dp, floors, parties, run_report
from privrelease.core.spam import features as F
from privrelease.core.spam.mail import read_mail
from privrelease.core.spam.protocol import Server, User, block, clamp_l1
from privrelease.core.spam.run_report import auc
from privrelease.core.spam.spec import Inputs, SpamSpec
from privrelease.core.spam.wire import Channel


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


def load_user(
    name: str,
    path: Path,
    root: Path,
    params: dict,
    keep: np.ndarray | None,
    floor: int = 1,
    noise: dict | None = None,
    threshold: int | None = None,
    protected: bool = False,
    expected: str | None = None,
) -> User:
    """A user party, built inside its own process from its own mail file (which must lie in ``root``). Mail
    under a DP cap (``protected``) takes part only in rounds with noise: the party refuses before it reads it; a
    file whose bytes are not those the run was checked on (``expected``, their SHA-256) is refused too."""
    if protected and noise is None:
        raise SpecError(
            f"{name}: this user's mail is under a DP cap, and the run adds no noise to the round sums the "
            "server decrypts; the user's party refuses to take part."
        )
    texts, labels = read_mail(path, root=root, expected=expected)
    reducer = F.Reducer(F.FeatureParams.model_validate(params), keep)
    return User(name, [reducer.apply(F.grams(t, reducer.params.modulus)) for t in texts], labels, floor, noise, threshold)


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
    noise: dp.Noise | None = None  # with dp:, the noise the charged plan declares (its leaf), which the users draw

    def __post_init__(self) -> None:
        self.active = self.active or list(self.users)

    @classmethod
    def setup(cls, inputs: Inputs, leaf: events.DistributedDiscreteGaussian | None) -> Training:
        """The parties, started; with ``dp:``, each user draws its share of ``leaf``, the charged plan's (never
        calibrated again here)."""
        t = time.perf_counter()
        spec = inputs.spec
        if (spec.dp is None) != (leaf is None):
            raise SpecError("a dp: run draws the users' noise its charged plan declares, and only a dp: run does")
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
        calibrated = dp.Noise.of(spec.dp, len(inputs.users), spec.rounds, spec.quorum, leaf) if leaf else None
        share = calibrated.share(spec.features.seed) if calibrated else None
        server = parties.Remote(
            "server",
            Server,
            spec.key_bits,
            np.zeros(d),
            spec.learning_rate,
            spec.mode,
            spec.block_size,
            least,
            spec.dp.radius if spec.dp else None,
            calibrated.share_variance if calibrated else 0,
            spec.quorum,
        )
        users: list[parties.Local] = []
        try:
            for k, path in enumerate(inputs.users):
                users.append(
                    parties.Remote(
                        f"user-{k + 1}",
                        load_user,
                        f"user-{k + 1}",
                        path,
                        inputs.root,
                        spec.features.model_dump(),
                        reducer.keep,
                        least,
                        share,
                        spec.quorum,
                        inputs.protected,
                        inputs.expected and inputs.expected[k],
                        timeout=spec.timeout,
                    )
                )
            channel = Channel()
            parties.setup(server, users, channel)
            server.call("precompute")  # the first round's r^n: offline, counted in the setup time
        except BaseException as exc:
            for party in [server, *users]:
                party.close()
            if isinstance(exc, parties.Dropped):  # setup has no threshold: every user's keys and shares are needed
                raise QuorumLost(
                    f"setup: {exc}. Every user must take part in setup (its keys and the shares of its "
                    "mask secret); nothing was trained or published. Start the run again with a new "
                    "run_id once every user's process can run."
                ) from None
            raise
        return cls(
            spec,
            server,
            users,
            list(inputs.sizes),
            test_x,
            test_y,
            reducer,
            channel,
            twins,
            setup_seconds=time.perf_counter() - t,
            noise=calibrated,
        )

    def run_round(self) -> RoundReport:
        t = time.perf_counter()
        number = len(self.rounds)
        before, began = len(self.channel.log), [u.name for u in self.active]
        times, gradient, self.active = parties.train_round(
            self.server, self.active, self.channel, number, number + 1 < self.spec.rounds
        )
        seconds = time.perf_counter() - t
        survivors = {
            k: b for k, (u, b) in enumerate(zip(self.users, schedule(self.sizes, self.spec, number))) if u in self.active
        }
        gap = None
        if self.twins is not None:
            gap = float(np.abs(gradient - self.twins.step(survivors, self.spec.learning_rate)).max())
        sent = self.channel.log[before:]
        report = RoundReport(
            number,
            seconds,
            times.seconds,
            len(sent),
            sum(m.count for m in sent),
            sum(m.bytes for m in sent),
            sum(len(b) for b in survivors.values()),
            began,
            [n for n in began if n not in {u.name for u in self.active}],
            gap,
        )
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
            "dp": self.noise.public() if self.noise else None,
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
        }
        report["decision"] = decision.decide(model, self.test_x, self.test_y, self.spec.max_false_positive_rate)
        curves = {"private": private}
        if self.twins is not None:  # test mode: the pooled-plaintext comparisons
            curves["plaintext (test mode)"] = self.scores(self.twins.plain_w)
            report["auc_plain"] = auc(self.test_y, curves["plaintext (test mode)"])
            report["auc_plain_exact_sigmoid"] = auc(self.test_y, self.scores(self.twins.exact_w))
            report["max_weight_gap"] = float(np.abs(model - self.twins.plain_w).max())
            report["decision_plain"] = decision.decide(
                self.twins.plain_w, self.test_x, self.test_y, self.spec.max_false_positive_rate
            )
            np.save(folder / "twin.npy", self.twins.plain_w)  # the plaintext twin's model, for tests against it
        (folder / "report.json").write_text(json.dumps(report, indent=2))
        run_report.roc(self.test_y, curves, folder / "roc.png")
        (folder / "report.md").write_text(run_report.markdown(report))
        return report
