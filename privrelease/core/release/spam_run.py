"""A spam-filter training run as a charged run (``privrelease.core.release.charged``): check → admit → approval → reserve →
setup → one step per protocol round → report → settle, the path every release takes too.

The spec and every mail file are checked completely (``privrelease.core.spam.spec.check``, which reads no ledger)
and against the steward's terms for the mail (``privrelease.core.spam.terms``) before anything is reserved. The
run is charged at the cost its plan states: without ``dp:`` an ``mpc`` entry (the protocol's guarantee
is cryptographic), with it a DP charge of the mail (``spam-mail``), which a steward's approval rule
can hold back like any release's. Which messages it reads goes into the operator's index (``terms.Index``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from privrelease.core.errors import SpecError
from privrelease.core.ledger import anchors
from privrelease.core.ledger.ledger import Charge
from privrelease.core.mechanisms import spam_training
from privrelease.core.mechanisms.base import Plan
from privrelease.core.release.charged import Claim, Log
from privrelease.core.release.home import Home
from privrelease.core.spam import features as F
from privrelease.core.spam import terms as T
from privrelease.core.spam.dp import cap
from privrelease.core.spam.run_report import public_auc
from privrelease.core.spam.spec import Inputs, check
from privrelease.core.spam.training import RoundReport, Training


def setup(inputs: Inputs, plan: Plan) -> Training:
    """The parties, started to draw the noise of the charged ``plan`` (with ``dp:``)."""
    return Training.setup(inputs, spam_training.users_noise(plan))


def run_round(training: Training, number: int) -> RoundReport:
    return training.run_round()


def write(training: Training, folder: Path) -> dict:
    return training.write(folder)


@dataclass(frozen=True)
class Steps:
    """The steps of a training run that touch mail (``privrelease/flows/steps.py`` runs each as a Prefect task)."""

    setup: Callable[[Inputs, Plan], Training] = setup
    run_round: Callable[[Training, int], RoundReport] = run_round
    write: Callable[[Training, Path], dict] = write


def _terms(home: Home) -> T.Terms:
    """The steward's terms for the mail, from the ``spam-mail`` cap in force (none without a cap)."""
    cap = home.ledger.cap_entry(T.MAIL)
    return T.Terms.of(None if cap is None else json.loads(cap.detail))


def _features(spec) -> Callable[[str], np.ndarray] | None:
    """The feature vector the run reads from a message (its public map; under dp: capped as each user caps it),
    or None for a map fitted on pooled mail (test mode only)."""
    if spec.features.reduction in F.DATA_DEPENDENT:
        return None
    reducer = F.fit(spec.features)

    def vector(text: str) -> np.ndarray:
        idx = reducer.apply(F.grams(text, spec.features.modulus))
        return idx if spec.dp is None else cap(idx, spec.dp.max_features, spec.features.seed)

    return vector


@dataclass
class SpamJob:
    """One training run (``privrelease.core.release.charged.Job``): the spec's path under the data root, and what each step found."""

    source: str
    steps: Steps = field(default_factory=Steps)
    inputs: Inputs | None = None
    plan: Plan | None = None  # what ``check`` planned and the charge is of: the run draws its noise
    digests: list[str] = field(default_factory=list)  # the users' messages as keyed digests (``terms.read``)
    evaluation: list[str] = field(default_factory=list)  # the evaluation mail's
    rounds: list[dict] = field(default_factory=list)  # who took part in each round, who left: public names
    report: dict | None = None

    def check(self, home: Home) -> Claim:
        inputs = check(self.source, home.root)
        spec = inputs.spec
        ledger = home.ledger
        kept = ledger.store.exists()
        if (home.root / "spam" / spec.run_id).exists() or (kept and ledger.status(spec.run_id) is not None):
            raise SpecError(f"spam run {spec.run_id!r} already exists; choose a new run_id.")
        terms = _terms(home)
        key = T.subkey(anchors.key(ledger.home, create=not kept or not ledger.entries()), "spam mail index")
        dp = spec.dp is not None
        users = T.read(inputs.users, inputs.root, key, _features(spec))
        self.digests = [d for u in users for d in u.digests]
        (test,) = T.read([inputs.test], inputs.root, key, _features(spec))
        if dp:
            T.once([u.digests for u in users], test.digests, spec.users, spec.test)
        self.evaluation = test.digests
        index = T.Index(home.root / T.INDEX)
        T.check(
            terms,
            dp,
            spec.dp.colluders if dp else None,
            spec.quorum,
            index.crossed(self.digests, dp),
            index.crossed(self.evaluation, False),
        )
        self.inputs = replace(
            inputs, protected=terms.capped and not terms.exact_runs, expected=[u.sha256 for u in users], expected_test=test.sha256
        )
        self.plan = spam_training.plan(spec)  # calibrates the noise: refuses colluders >= users
        return Claim(
            spam_training.ledger_dataset(spec),
            spec.run_id,
            spam_training.NAME,
            self.plan,
            spec.model_dump(mode="json", exclude={"seed"}),
        )

    def admit_hint(self, home: Home) -> str:
        return ""

    def room(self, home: Home) -> tuple[Path, Path, float]:
        """A run's folder is staged beside where it lands (``privrelease.core.spam.training``): its report, model and transcript."""
        spam = home.root / "spam"
        return spam, spam, 16.0

    def load(self, home: Home) -> None:
        """Before the charge, after any approval: the messages this run reads are looked up and recorded in the
        index in one step (a run refused after this only makes the index stricter). Each party reads its own
        mail in its own process, after the charge, and refuses bytes other than those checked here."""
        spec = self.inputs.spec
        dp = spec.dp is not None

        def again() -> None:  # the steward's terms as they stand now: they may have changed while the run waited
            terms = _terms(home)
            T.check(terms, dp, spec.dp.colluders if dp else None, spec.quorum, 0)
            self.inputs = replace(self.inputs, protected=terms.capped and not terms.exact_runs)

        T.Index(home.root / T.INDEX).claim(spec.run_id, dp, self.digests, self.evaluation, again)

    def work(self, home: Home, charge: Charge, log: Log) -> tuple[dict, dict]:
        spec = self.inputs.spec
        folder = home.root / "spam" / spec.run_id
        training = self.steps.setup(self.inputs, self.plan)
        try:
            log.info(
                "setup: %d users (one process each), %d features, %d-bit key",
                len(training.users),
                spec.features.size,
                spec.key_bits,
            )
            for number in range(1, spec.rounds + 1):
                r = self.steps.run_round(training, number)
                log.info(
                    "round %d: %.2f s, %d messages, %d ciphertexts, %.1f MB",
                    number,
                    r.seconds,
                    r.messages,
                    r.ciphertexts,
                    r.bytes / 1e6,
                )
                self.rounds.append({"round": number, "participants": r.participants, "left": r.left})
                for name in r.left:
                    log.warning(
                        "round %d: %s left (its process ended or did not answer); %d users remain, threshold %d",
                        number,
                        name,
                        len(r.participants) - len(r.left),
                        spec.quorum,
                    )
            self.report = self.steps.write(training, folder)
        finally:
            training.close()
        auc = public_auc(self.report)  # a DP output with dp:, else withheld (the run folder keeps it)
        headline = {**{k: self.report[k] for k in ("transcript_sha256", "threshold")}, "auc_private": auc, "rounds": self.rounds}
        return {
            "run_id": spec.run_id,
            "folder": str(folder),
            "auc_private": auc,
            **({"auc_plain": self.report["auc_plain"]} if self.report["test_mode"] else {}),
        }, headline

    def progress(self) -> dict:
        return {"rounds": self.rounds}

    def earlier(self, home: Home, charge: Charge) -> dict:  # a run id is used once: check refuses it before
        raise SpecError(f"spam run {charge.entry.release_id!r} already exists; choose a new run_id.")
