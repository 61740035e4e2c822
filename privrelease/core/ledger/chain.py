"""The ledger's rows and their hash chain: the row format (``Entry``), how a row is read and
written, and the check that the chain, its anchors and every published manifest agree.

Each row's hash is an HMAC-SHA256, under the home's key (``privrelease.core.ledger.anchors``), of its canonical JSON
content, which includes the previous row's hash: a changed, removed or reordered row breaks the
chain and cannot be re-chained without the key. Both ledger stores hold these rows unchanged.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from privrelease.core import settings
from privrelease.core.errors import LedgerCorrupt, RolledBack
from privrelease.core.ledger import anchors
from privrelease.core.privacy.budget import Budget

GENESIS = "0" * 64
COLUMNS = (
    "seq", "ts", "dataset", "release_id", "flow_run_id", "kind", "adjacency", "mechanism", "params",
    "epsilon", "delta", "detail", "holder", "status", "prev_hash", "hash", "requested_by",
)  # fmt: skip


def canonical(value: object) -> str:
    """The one JSON form hashed and stored: sorted keys, no spaces, no NaN."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class Entry:
    """One ledger row. ``params`` and ``detail`` are canonical JSON strings."""

    seq: int
    ts: str
    dataset: str
    release_id: str | None
    flow_run_id: str | None
    kind: str | None  # dp, sdc or mpc for a charge; None for a cap
    adjacency: str | None  # a dp charge's neighbouring relation
    mechanism: str | None
    params: str
    epsilon: float
    delta: float
    detail: str
    holder: str | None  # a charge's process (host, pid, start time: public), so a dead one is recognised
    status: str
    prev_hash: str
    hash: str
    requested_by: str | None = None  # who asked: the gate's account, or the operating-system user of a command

    def computed_hash(self, key: bytes) -> str:
        # a row without a requester (written before requesters were recorded) hashes as it did then
        body = {k: v for k, v in asdict(self).items() if k != "hash" and not (k == "requested_by" and v is None)}
        return hmac.new(key, canonical(body).encode(), hashlib.sha256).hexdigest()

    @property
    def budget(self) -> Budget:
        return Budget(self.epsilon, self.delta)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["params"] = json.loads(self.params)
        out["detail"] = json.loads(self.detail)
        if self.kind in ("sdc", "mpc"):  # no epsilon is claimed for them: none is shown, not 0
            out["epsilon"] = out["delta"] = None
        return out


def rows(con, where: str, args: list) -> list[Entry]:
    """The ledger rows a ``where`` (and ``order``) clause selects, on either store's connection."""
    return [Entry(*row) for row in con.execute(f"SELECT {', '.join(COLUMNS)} FROM ledger {where}", args).fetchall()]


def insert(con, entries: list[Entry]) -> None:
    """Append rows as they are (their hashes already computed)."""
    con.executemany(
        f"INSERT INTO ledger ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
        [[getattr(e, c) for c in COLUMNS] for e in entries],
    )


def check_links(entries: list[Entry], key: bytes) -> None:
    """The entries in order, each chained to the one before and carrying its own HMAC under ``key``."""
    prev = GENESIS
    for expected_seq, entry in enumerate(entries, start=1):
        if entry.seq != expected_seq:
            raise LedgerCorrupt(
                f"entry {entry.seq} stands where entry {expected_seq} should: an entry was removed or reordered",
                expected_seq,
            )
        if entry.prev_hash != prev:
            raise LedgerCorrupt(f"entry {entry.seq} does not chain to entry {entry.seq - 1}", entry.seq)
        if not hmac.compare_digest(entry.computed_hash(key), entry.hash):
            raise LedgerCorrupt(f"entry {entry.seq} was changed after it was written", entry.seq)
        prev = entry.hash


def check_chain(entries: list[Entry], home: Path, marks: list[dict], releases_root: Path | None = None) -> int:
    """``verify`` of the given entries, with the key configured for ``home`` and the anchors ``marks``: every anchor
    is in the chain, or among the entries a recorded rollback carried forward."""
    if not entries and not marks:
        return 0
    check_links(entries, anchors.key(home, create=False))
    known = {(e.seq, e.hash) for e in entries}
    accepted = {(seq, h) for e in entries if e.status == "rollback" for seq, h in json.loads(e.detail).get("lost", [])}
    for mark in marks:
        if (mark["seq"], mark["hash"]) not in known | accepted:
            raise RolledBack(
                f"entry {mark['seq']}, anchored at {mark.get('ts', '?')}, is missing or different: the ledger was cut "
                "short, rolled back to an older copy or rewritten. Restore the newest copy of the ledger, or accept the "
                "rollback with `privrelease ledger accept-rollback` (recorded on the ledger; the lost charges stay spent)",
                mark["seq"],
            )
    if releases_root is not None and releases_root.is_dir():
        for manifest in sorted(releases_root.glob("*/*/manifest.json")):
            ref = json.loads(manifest.read_text()).get("ledger", {})
            if (ref.get("seq"), ref.get("hash")) not in known | accepted:
                raise LedgerCorrupt(
                    f"release {manifest.parent.name!r} cites ledger entry {ref.get('seq')} which is "
                    "missing or different: entries were removed or rewritten",
                    ref.get("seq"),
                )
    return len(entries)


def link(
    last: Entry | None,
    key: bytes,
    key_path: Path,
    ts: datetime,
    *,
    dataset: str,
    status: str,
    release_id: str | None = None,
    flow_run_id: str | None = None,
    kind: str | None = None,
    adjacency: str | None = None,
    mechanism: str | None = None,
    params: dict | None = None,
    epsilon: float = 0.0,
    delta: float = 0.0,
    detail: dict | None = None,
    holder: str | None = None,
    requested_by: str | None = None,
) -> Entry:
    """The entry after ``last`` (the chain's head; None for the first), its hash under ``key``: refused if the
    head does not check out under that key (another key file, or a changed head), so nothing is chained to it."""
    if last is not None and not hmac.compare_digest(last.computed_hash(key), last.hash):
        raise LedgerCorrupt(
            f"entry {last.seq}, the chain's head, does not check out under this process's ledger key "
            f"({key_path}): every worker needs the same key file (${settings.LEDGER_KEY_FILE}), "
            "or the entry was changed; nothing was written. Run privrelease ledger verify.",
            last.seq,
        )
    draft = Entry(
        seq=last.seq + 1 if last else 1,
        ts=ts.isoformat(timespec="microseconds"),
        dataset=dataset,
        release_id=release_id,
        flow_run_id=flow_run_id,
        kind=kind,
        adjacency=adjacency,
        mechanism=mechanism,
        params=canonical(params or {}),
        epsilon=float(epsilon),
        delta=float(delta),
        detail=canonical(detail or {}),
        holder=holder,
        status=status,
        prev_hash=last.hash if last else GENESIS,
        hash="",
        requested_by=requested_by,
    )
    return Entry(**{**asdict(draft), "hash": draft.computed_hash(key)})
