"""The spam-filter training spec: its parties' mail files, features, key and schedule, read from YAML.

It is the parameter object of the ``spam-filter-training`` mechanism (``privrelease.core.mechanisms.spam_training``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, ValidationInfo, field_validator

from privrelease.core import noise
from privrelease.core.errors import ParameterError, SpecError, UserError, yaml_where
from privrelease.core.params import ID_PATTERN, StrictParams
from privrelease.core.spam import features as F
from privrelease.core.spam import mail
from privrelease.core.spam.dp import DPParams
from privrelease.core.spam.floors import check_participation, floor
from privrelease.core.spam.paillier import check_bits
from privrelease.core.spam.protocol import block
from privrelease.core.tables.readers import ANYWHERE, bound, resolve_source


class SpamSpec(StrictParams):
    """A training run: its parties' mail files, the features, the key and the schedule (public values)."""

    run_id: str = Field(pattern=ID_PATTERN, description="names the run folder and its ledger entry")
    users: list[str] = Field(
        min_length=2, max_length=1000, description="one JSON-lines file per user (at least 2): text, label (spam | ham)"
    )
    test: str = Field(description="JSON-lines file for evaluation only")
    features: F.FeatureParams = Field(default_factory=F.FeatureParams)
    key_bits: int = Field(
        2048, ge=512, le=8192, description="Paillier modulus size: 2048 or more (3072 past 2030); less only in test mode"
    )
    learning_rate: float = Field(
        1.5e-6, gt=0, le=10, description="η of the first-order-sigmoid rule (1.5e-6 for 10^4 hashed 4-grams)"
    )
    rounds: int = Field(10, ge=1, le=10_000, description="gradient steps")
    mode: Literal["batch", "online"] = Field(
        "batch", description="batch: every message each round; online: each user's mail in whole blocks, one per round in turn"
    )
    block_size: int = Field(1000, ge=1, le=1_000_000, description="online mode: messages per user per round")
    dp: DPParams | None = Field(None, description="differential privacy of what the server decrypts (privrelease.core.spam.dp)")
    threshold: int | None = Field(None, ge=2, description="least users a round needs to complete; default a majority")
    max_false_positive_rate: float = Field(
        0.01,
        ge=0,
        lt=1,
        description="spam classify's cutoff: the least score at which at most this share of the evaluation mail's ham is "
        "called spam (privrelease.core.spam.decision)",
    )
    timeout: float = Field(3600, gt=0, le=86_400, description="seconds a party may take to answer before it counts as left")

    @field_validator("threshold")
    @classmethod
    def _threshold(cls, threshold: int | None, info: ValidationInfo) -> int | None:
        users = len(info.data.get("users") or [])
        if threshold is not None and users and threshold > users:
            raise ValueError(f"threshold is {threshold}, but the spec lists {users} users; a round needs at most every user")
        return threshold

    @property
    def quorum(self) -> int:
        """The public threshold t: a round completes if at least t users remain (default: a majority)."""
        return self.threshold if self.threshold is not None else len(self.users) // 2 + 1

    @field_validator("key_bits")
    @classmethod
    def _key(cls, bits: int) -> int:
        try:
            return check_bits(bits)
        except ParameterError as exc:
            raise ValueError(str(exc)) from None


Resolver = Callable[[str, Path, str], Path]


@dataclass(frozen=True)
class Inputs:
    """A checked spec and its files, all under the data root; ``sizes`` are the users' message counts
    (public: each user announces its count to the server)."""

    spec: SpamSpec
    path: Path
    users: list[Path]
    test: Path
    sizes: list[int]
    root: Path  # the data root: each reader checks that the file it opened lies inside it
    protected: bool = False  # the mail is under a DP cap: each user's party refuses rounds without noise
    expected: list[str] | None = None  # each user file's SHA-256 as checked: its party refuses other bytes
    expected_test: str | None = None  # the evaluation file's, as checked: it is read again for scoring


def load_spec(source: str, root: Path, resolve: Resolver = resolve_source) -> tuple[SpamSpec, Path]:
    """The spec at ``source`` (relative to the data root ``root``, or absolute inside it) and its path."""
    path = resolve(source, root, "the spam spec")
    try:
        doc = yaml.safe_load(path.read_text())
        spec = SpamSpec.model_validate(doc if isinstance(doc, dict) else {})
    except yaml.YAMLError as exc:
        raise SpecError(f"spam spec {source!r} is not valid YAML{yaml_where(exc)}.") from None
    except ValidationError as exc:
        parts = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors())
        raise SpecError(f"the spam spec is invalid: {parts}.") from None
    return spec, path


def mail_file(spec_path: Path, name: str, root: Path, resolve: Resolver = resolve_source) -> Path:
    """A mail file named in the spec, relative to the spec's folder; it too must lie under ``root`` (the data root
    of a run started through Prefect's worker or the gate)."""
    written = spec_path.parent / name
    try:
        return resolve(str(written) if root == ANYWHERE else os.path.relpath(written, root), root, "the mail file")
    except UserError as exc:
        raise type(exc)(f"user or test file {name!r}: {exc}") from None


def distinct(users: list[Path], test: Path, shown: str) -> None:
    """Each user holds its own file and the evaluation mail is none of them, compared as files (device and
    inode), not names: ``./a.jsonl``, a symbolic or a hard link to a user's file is that file, and a file
    listed twice has each of its messages summed twice a round (twice the sensitivity ``dp:`` is made for)."""
    files = [(s.st_dev, s.st_ino) for s in (p.stat() for p in users)]
    if len(set(files)) != len(files):
        raise SpecError("the spam spec lists a user's mail file twice; each user holds its own file.")
    if (test.stat().st_dev, test.stat().st_ino) in files:
        raise SpecError(f"the test file {shown!r} is also a user's mail file; evaluation mail must be separate.")


def check(source: str, home: Path, resolve: Resolver = resolve_source) -> Inputs:
    """Everything a training run needs from its files, checked before anything starts or is charged: the
    spec and every mail file exist under the data root and parse, the users are distinct, each user's and
    the round's message counts meet the floor of the feature map, and the key size fits the mode. It reads
    no ledger: the run id, the steward's terms and the budget are the charged run's (``privrelease.core.release.spam_run``)."""
    root = bound(home)  # the data root, for a run started through Prefect's worker or the gate
    spec, path = load_spec(source, root, resolve)
    if spec.features.reduction in F.DATA_DEPENDENT and not noise.test_mode():
        raise SpecError(
            f"reduction {spec.features.reduction!r} builds the feature map from all users' pooled plaintext "
            "mail, which no party may see; outside test mode use reduction: hash (a public choice)."
        )
    users = [mail_file(path, name, root, resolve) for name in spec.users]
    test = mail_file(path, spec.test, root, resolve)
    distinct(users, test, spec.test)
    sizes = [len(mail.read_mail(p, name, root)[1]) for p, name in zip(users, spec.users)]
    if len(set(mail.read_mail(test, spec.test, root)[1])) < 2:
        raise SpecError(
            f"the test file {spec.test!r} must hold both spam and ham: the AUC and spam classify's cutoff are measured on it."
        )
    check_participation([len(block(n, spec.mode, spec.block_size, 0)) for n in sizes], floor(spec.features))
    return Inputs(spec, path, users, test, sizes, root)
