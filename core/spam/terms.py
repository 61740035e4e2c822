"""The data steward's terms for the users' mail, set with the cap of the ledger dataset ``spam-mail``.

A ``dp:`` run's guarantee rests on trust assumptions its spec states: how many users may collude
with the server (``dp.colluders``) and how few users a round may complete with (``threshold``).
The spec is the operator's, and the operator runs the server DP protects the users from, so the
steward sets the least of each with the cap (``ledger set-budget spam-mail … --min-colluders C
--min-threshold T``) and a spec below them is refused.

Mail under a DP cap is read only by ``dp:`` runs: once ``spam-mail`` has a cap, a run without
``dp:`` (whose round sums the server decrypts exactly) is refused, unless the steward allows exact
runs (``--allow-exact-runs``), and even then not on mail a ``dp:`` run has read. Each run is bound
to the mail it reads (``fingerprints``: each user file's device and inode, and its digest keyed with
the ledger's key, so the ledger's readers learn nothing of the mail), recorded with its charge.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from pathlib import Path

from core.errors import SpecError

MAIL = "spam-mail"  # the ledger dataset of the users' mail: dp: runs charge it, its cap carries these terms


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
        t = ({} if min_colluders is None else {"min_colluders": min_colluders}) | (
            {} if min_threshold is None else {"min_threshold": min_threshold}) | ({"exact_runs": True} if exact_runs else {})
        return {"spam": t} if t else {}

    def words(self) -> str:
        return (f"at least {self.min_colluders} colluding users and a threshold of at least {self.min_threshold} "
                f"assumed; runs without dp: {'allowed on mail no dp: run has read' if self.exact_runs else 'refused'}")  # fmt: skip


def fingerprints(users: list[Path], key: bytes) -> list[dict]:
    """Each user file as the run reads it: device and inode, and its digest keyed with the ledger's key."""
    out = []
    for path in users:
        st = path.stat()
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        out.append({"file": [st.st_dev, st.st_ino], "mac": hmac.new(key, digest.digest(), hashlib.sha256).hexdigest()})
    return out


def read_by_dp(params_of_dp_charges: list[str], mine: list[dict]) -> bool:
    """Whether any of this run's files (``fingerprints``) was read by a dp: run (their charges' ``params``)."""
    seen_files, seen_macs = set(), set()
    for params in params_of_dp_charges:
        for f in json.loads(params).get("mail", []):
            seen_files.add(tuple(f["file"]))
            seen_macs.add(f["mac"])
    return any(tuple(f["file"]) in seen_files or f["mac"] in seen_macs for f in mine)


def check(terms: Terms, dp: bool, colluders: int | None, quorum: int, read_before: bool) -> None:
    """Refuse a run the steward's terms do not allow, saying what to change."""
    if not dp:
        if terms.capped and not terms.exact_runs:
            raise SpecError(f"the users' mail is under a DP cap (ledger dataset {MAIL!r}), and a run without dp: lets the "
                            "server decrypt exact round sums; add dp: to the spec, or ask the data steward to allow "
                            f"exact runs (privrelease ledger set-budget {MAIL} ... --allow-exact-runs).")  # fmt: skip
        if read_before:
            raise SpecError(f"a mail file of this spec was read by a dp: run charged to {MAIL!r}; a run without dp: on "
                            "it would decrypt exact round sums of mail the cap protects. Add dp: to the spec.")  # fmt: skip
        return
    if colluders is not None and colluders < terms.min_colluders:
        raise SpecError(f"dp.colluders is {colluders}, but the data steward assumes at least {terms.min_colluders} users "
                        f"may collude with the server (the {MAIL!r} cap); set dp.colluders to {terms.min_colluders} or more.")  # fmt: skip
    if quorum < terms.min_threshold:
        raise SpecError(f"the spec's threshold is {quorum}, but the data steward requires rounds of at least "
                        f"{terms.min_threshold} users (the {MAIL!r} cap); set threshold to {terms.min_threshold} or more.")  # fmt: skip
