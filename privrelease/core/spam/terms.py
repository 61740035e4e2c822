"""The data steward's terms for the users' mail, set with the cap of the ledger dataset ``spam-mail``.

A ``dp:`` run's guarantee rests on trust assumptions its spec states: how many users may collude
with the server (``dp.colluders``) and how few users a round may complete with (``threshold``).
The spec is the operator's, and the operator runs the server DP protects the users from, so the
steward sets the least of each with the cap (``ledger set-budget spam-mail … --min-colluders C
--min-threshold T``) and a spec below them is refused.

Mail under a DP cap is read only by ``dp:`` runs: once ``spam-mail`` has a cap, a run without
``dp:`` (whose round sums the server decrypts exactly) is refused, unless the steward allows exact
runs (``--allow-exact-runs``), and even then not on a message a ``dp:`` run has read; nor does a
``dp:`` run read a message an exact run read before (its sums were decrypted exactly). Runs are bound
to the messages they read (``messages``: keyed digests of each message's text, in the operator's
``Index``), so a copy, a reordered or reformatted file, or a file split between users is the same
mail. The index stays with the operator (0600): the ledger, which others read, holds nothing of the
mail, not even a keyed digest, whose value would differ between neighbouring corpora. Under ``dp:``
every message counts once (``once``).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privrelease.core.db import connect, exclusive
from privrelease.core.errors import SpecError
from privrelease.core.spam import features as F
from privrelease.core.spam import mail

MAIL = "spam-mail"  # the ledger dataset of the users' mail: dp: runs charge it, its cap carries these terms
INDEX = "spam-mail-index.duckdb"  # under the home: which messages each run read (``Index``)


@dataclass(frozen=True)
class Terms:
    """The steward's terms for the mail (from the ``spam-mail`` cap's entry; none without a cap)."""

    capped: bool = False
    min_colluders: int = 0
    min_threshold: int = 2
    exact_runs: bool = False  # runs without dp: allowed, on mail no dp: run has read

    @staticmethod
    def of(cap_detail: dict | None) -> Terms:
        if cap_detail is None:
            return Terms()
        t = cap_detail.get("spam") or {}
        return Terms(True, int(t.get("min_colluders", 0)), int(t.get("min_threshold", 2)), bool(t.get("exact_runs", False)))

    @staticmethod
    def detail(min_colluders: int | None, min_threshold: int | None, exact_runs: bool) -> dict:
        """The cap entry's part for these terms ({} when the steward set none)."""
        if min_colluders is not None and min_colluders < 0:
            raise SpecError(f"--min-colluders is a number of users, 0 or more; got {min_colluders}.")
        if min_threshold is not None and min_threshold < 2:
            raise SpecError(f"--min-threshold is the least users a round completes with, 2 or more; got {min_threshold}.")
        t = (
            ({} if min_colluders is None else {"min_colluders": min_colluders})
            | ({} if min_threshold is None else {"min_threshold": min_threshold})
            | ({"exact_runs": True} if exact_runs else {})
        )
        return {"spam": t} if t else {}

    def words(self) -> str:
        return (
            f"at least {self.min_colluders} colluding users and a threshold of at least {self.min_threshold} "
            f"assumed; runs without dp: {'allowed on mail no dp: run has read' if self.exact_runs else 'refused'}"
        )


def subkey(ledger_key: bytes, purpose: str) -> bytes:
    """A key of its own for ``purpose``, derived from the ledger's key (which signs the chain, and only that)."""
    return hmac.new(ledger_key, f"privrelease: {purpose}".encode(), hashlib.sha256).digest()


@dataclass(frozen=True)
class Read:
    """One mail file as a run's check read it: the SHA-256 of its bytes (its party reads them again and
    refuses if they differ) and each message's keyed digests (``read``)."""

    sha256: str
    digests: list[str]


def read(paths: list[Path], root: Path, key: bytes, features: Callable[[str], np.ndarray] | None = None) -> list[Read]:
    """Each file read once: each message as keyed digests (128 bits, hex) of its text with its white space
    normalised (the same whatever its file, its place, its JSON key order or compression), of the set of
    4-byte sequences every feature map reads from it (the same for texts that differ only where no map
    looks, whatever a run's feature settings) and, with ``features``, of the vector this run reads from
    it (its map, capped under dp:); an empty set names no message."""
    out = []
    for path in paths:
        data = mail.read_bytes(path, path.name, root)
        texts, _ = mail.parse_mail(data, path.name, path.suffix == ".gz")
        digests = [_mac(key, b"text:" + " ".join(t.split()).encode("utf-8", "surrogateescape")) for t in texts]
        raw = [F.grams(t, 1 << 32) for t in texts]  # every 4-byte sequence the feature map reads: whatever its settings
        digests += [_mac(key, b"grams:" + g.tobytes()) for g in raw if g.size]
        if features is not None:
            vectors = [np.asarray(features(t), dtype=np.int64) for t in texts]
            digests += [_mac(key, b"features:" + v.tobytes()) for v in vectors if v.size]
        out.append(Read(hashlib.sha256(data).hexdigest(), digests))
    return out


def _mac(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()[:32]


def once(users: list[list[str]], test: list[str], names: list[str], test_name: str) -> None:
    """Under dp: every message counts once: one message in two places (two users' files, one file twice, a
    user's file and the evaluation mail), by its text or by the features the run reads from it, would be
    summed twice a round, twice the sensitivity the noise is for."""
    where: dict[str, int] = {}
    for k, digests in enumerate(users):
        for d in digests:  # a message's digests never meet each other (each kind has its own prefix)
            if d in where:
                other = names[where[d]]
                raise SpecError(
                    f"the users' mail holds one message twice ({other!r} and {names[k]!r}"
                    + ("" if where[d] != k else ", within the file")
                    + "): under dp: each message is "
                    "counted once, for the sensitivity the noise is calibrated to; remove the copies."
                )
            where[d] = k
    if any(d in where for d in test):
        raise SpecError(
            f"the evaluation mail {test_name!r} holds messages of the users' mail; evaluation mail must be separate from theirs."
        )


@dataclass(frozen=True)
class Index:
    """Which messages each run read (their keyed digests; ``messages``), by whether it was a dp: run: a
    DuckDB file of the operator's, under the home (0600)."""

    path: Path

    def crossed(self, digests: list[str], dp: bool) -> int:
        """How many of ``digests`` a run of the other kind read (a dp: run if ``dp`` is False, else an exact run);
        for the operator's own eyes only (the index is theirs): a refusal says whether, never how many."""
        if not self.path.exists():
            return 0
        with connect(self.path) as con:
            return con.execute(
                "SELECT count(DISTINCT mac) FROM mail JOIN (SELECT unnest(?::VARCHAR[]) AS mac) USING (mac) WHERE dp = ?",
                [digests, not dp],
            ).fetchone()[0]

    def claim(self, run_id: str, dp: bool, digests: list[str], evaluation: list[str], again: Callable[[], None]) -> None:
        """Record this run's messages, refusing as ``check`` would if a run of the other kind read one (or a dp:
        run read one of its evaluation mail), after ``again`` has applied the steward's terms as they stand now
        (they may have changed while the run waited): the look and the record in one step under the index's
        lock, so two runs cannot both pass the look. The evaluation mail is read in plain text: recorded as an
        exact read, in the same transaction."""
        with exclusive(self.path.with_suffix(".lock")):
            again()
            if self.crossed(digests, dp) or self.crossed(evaluation, False):
                why = _crossed(dp) if self.crossed(digests, dp) else EVALUATION_READ
                raise SpecError(why + " (found as this run was about to be charged; nothing was charged)")
            self.add(run_id, [(dp, digests), (False, evaluation)])

    def add(self, run_id: str, reads: list[tuple[bool, list[str]]]) -> None:
        """Record ``reads`` (whether by a dp: run, the digests) of run ``run_id``, in one transaction."""
        with connect(self.path) as con:
            con.execute("CREATE TABLE IF NOT EXISTS mail (run_id VARCHAR NOT NULL, dp BOOLEAN NOT NULL, mac VARCHAR NOT NULL)")
            con.execute("BEGIN TRANSACTION")
            for dp, digests in reads:
                con.execute("INSERT INTO mail SELECT ?, ?, unnest(?::VARCHAR[])", [run_id, dp, digests])
            con.execute("COMMIT")
        os.chmod(self.path, 0o600)


EVALUATION_READ = (
    "the evaluation mail holds messages a dp: run read; they would be scored in plain text, outside "
    "the charge. Evaluate on the operator's own mail"
)


def check(terms: Terms, dp: bool, colluders: int | None, quorum: int, crossed: int, evaluation: int = 0) -> None:
    """Refuse a run the steward's terms do not allow, saying what to change; ``crossed``: how many of its
    messages a run of the other kind read, ``evaluation``: how many of its evaluation mail's a dp: run read
    (``Index.crossed``)."""
    if not dp and terms.capped and not terms.exact_runs:
        raise SpecError(
            f"the users' mail is under a DP cap (ledger dataset {MAIL!r}), and a run without dp: lets the "
            "server decrypt exact round sums; add dp: to the spec, or ask the data steward to allow "
            f"exact runs (privrelease ledger set-budget {MAIL} ... --allow-exact-runs)."
        )
    if crossed:
        raise SpecError(_crossed(dp) + ".")
    if evaluation:
        raise SpecError(EVALUATION_READ + ".")
    if not dp:
        return
    if colluders is not None and colluders < terms.min_colluders:
        raise SpecError(
            f"dp.colluders is {colluders}, but the data steward assumes at least {terms.min_colluders} users "
            f"may collude with the server (the {MAIL!r} cap); set dp.colluders to {terms.min_colluders} or more."
        )
    if quorum < terms.min_threshold:
        raise SpecError(
            f"the spec's threshold is {quorum}, but the data steward requires rounds of at least "
            f"{terms.min_threshold} users (the {MAIL!r} cap); set threshold to {terms.min_threshold} or more."
        )


def _crossed(dp: bool) -> str:
    if dp:
        return (
            "messages of this spec's users were read by an earlier run without dp:, whose round sums the server "
            "decrypted exactly; a DP charge of them would state a guarantee the server's earlier view does not "
            "have. Train with dp: on other mail"
        )
    return (
        f"messages of this spec's users were read by a dp: run charged to {MAIL!r}; a run without dp: on them "
        "would decrypt exact round sums of mail the cap protects. Add dp: to the spec"
    )
