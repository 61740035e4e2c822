"""A ledger that lost entries: caught before anything is charged or reported, and accepted only on the record.

``check`` runs at every use of the ledger (under the writers' lock for a write): the highest anchored entry
must be in the ledger, with its hash. A restored older copy of the home or of the database, a truncated dump,
or a database that lost its tail fails it, and so does a ledger whose anchors file is gone; the refusal names
the entry and what to do. Nothing is charged and no budget is reported on a ledger that fails it.

``accept`` is the one way past a rollback: it appends a ``rollback`` entry (who accepted it, the head the
ledger had and the one the anchors had) and then carries every lost entry forward, the lost charges with
their events and the caps and policies the steward set meanwhile, so the lost charges stay spent: the
anchors hold each entry whole (public values only, as the ledger itself), and each is checked against the
chain key before it is carried. A ledger whose anchors are lost can be restarted from its head with
``without_anchors``, also on the record.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from privrelease.core.errors import LedgerCorrupt, RolledBack, UserError
from privrelease.core.ledger.account import LEDGER_WIDE  # the dataset of an entry about the whole ledger
from privrelease.core.ledger.anchors import RETIRED, Anchors
from privrelease.core.ledger.chain import Entry

ROLLBACK = "rollback"
__all__ = ["LEDGER_WIDE", "ROLLBACK", "RolledBack", "check", "lost", "mark"]


def mark(entry: Entry, why: str | None = None) -> dict:
    """An anchor of ``entry``: its place, its hash and the entry whole (what ``accept`` carries forward)."""
    return {"seq": entry.seq, "hash": entry.hash, "why": why or entry.status, "entry": asdict(entry)}


def _head(con) -> tuple[int, str] | None:
    found = con.execute("SELECT seq, hash FROM ledger ORDER BY seq DESC LIMIT 1").fetchall()
    return (found[0][0], found[0][1]) if found else None


def carried(con) -> set[tuple[int, str]]:
    """The anchored entries earlier rollbacks accepted as lost (and carried forward)."""
    out: set[tuple[int, str]] = set()
    for (detail,) in con.execute("SELECT detail FROM ledger WHERE status = ?", [ROLLBACK]).fetchall():
        out |= {(seq, hash_) for seq, hash_ in json.loads(detail).get("lost", [])}
    return out


def retire(found: Anchors, head: tuple[int, str], to: str) -> None:
    """Mark the ledger ``found`` anchors as retired: restored at ``to`` (or a restore drill), where charges go now."""
    found.append([{"seq": head[0], "hash": head[1], "why": RETIRED, "to": to}])


def check(con, found: Anchors, where: str, writing: bool = False) -> None:
    """Refuse a ledger whose highest anchored entry is missing or different, or whose anchors are lost; and a write to
    a retired one (restored elsewhere: its figures stand as they were, its charges go to the restored copy)."""
    latest = found.latest()
    if latest is not None and latest.get("why") == RETIRED and writing:
        raise RolledBack(
            f"the ledger {where} is retired: it was restored at {latest.get('to')} ({latest.get('ts', '?')}), where its "
            "charges go now, so no budget is spent in two places. Nothing was written. Work in that home; to bring "
            "the ledger back here, back it up there and restore it here.",
            latest["seq"],
        )
    head = _head(con)
    if latest is None:
        if head is not None and not found.exist():
            raise RolledBack(
                f"the ledger {where} has {head[0]} entries but its anchors file {found.written} is missing, so a restored "
                "older copy could not be told from the newest. Nothing was charged or read. Put the anchors file back "
                f"(or point $PRIVRELEASE_LEDGER_ANCHORS at it); if this ledger was restored or moved on purpose, restore "
                "it with `privrelease restore DIR --anchors FILE` (the old host's anchors file), or record that its "
                "anchors are lost with `privrelease ledger accept-rollback --without-anchors`.",
                head[0],
            )
        return
    at = con.execute("SELECT hash FROM ledger WHERE seq = ?", [latest["seq"]]).fetchall()
    if at and at[0][0] == latest["hash"]:
        return
    if (latest["seq"], latest["hash"]) in carried(con):
        return
    has = "has no entries" if head is None else f"ends at entry #{head[0]}" if not at else f"holds another entry #{latest['seq']}"
    raise RolledBack(
        f"the ledger {where} was rolled back: its anchors ({found.where()}) record entry #{latest['seq']} "
        f"({latest['hash'][:16]}…, anchored {latest.get('ts', '?')}), but the ledger {has}. An older copy of the ledger "
        "was restored, or its database lost entries. Nothing was charged or read. Restore the newest copy of the "
        "ledger, or accept the rollback with `privrelease ledger accept-rollback`, which records it on the ledger and "
        "carries every lost entry forward, so the lost charges stay spent.",
        latest["seq"],
    )


@dataclass(frozen=True)
class Accepted:
    rollback: Entry
    carried: list[Entry]


def lost(entries: list[Entry], marks: list[dict], key: bytes, carried_before: set[tuple[int, str]]) -> list[Entry]:
    """The anchored entries the ledger does not hold (and no earlier rollback carried), in chain order, each checked
    against the chain key; refused if one cannot be carried (anchored before entries were kept whole, or changed)."""
    held = {(e.seq, e.hash) for e in entries}
    out: dict[tuple[int, str], Entry] = {}
    for m in marks:
        ref = (m["seq"], m["hash"])
        if ref in held or ref in carried_before or ref in out:
            continue
        if "entry" not in m:
            raise UserError(
                f"the anchors record entry #{m['seq']} ({m['hash'][:16]}…) without its contents (anchored by an earlier "
                "privrelease, or by an auditor's line), so its charge cannot be carried forward. Restore a copy of the "
                "ledger that holds it; nothing was changed."
            )
        entry = Entry(**m["entry"])
        if (entry.seq, entry.hash) != ref or not hmac.compare_digest(entry.computed_hash(key), entry.hash):
            raise LedgerCorrupt(f"the anchored copy of entry #{m['seq']} does not check out under the ledger key", m["seq"])
        out[ref] = entry
    return sorted(out.values(), key=lambda e: (e.seq, e.ts))


def carried_fields(entry: Entry) -> dict:
    """What a lost entry is appended again as: its fields, its detail noting where it was first written."""
    detail = json.loads(entry.detail) | {"carried": {"seq": entry.seq, "hash": entry.hash, "ts": entry.ts}}
    return {
        "dataset": entry.dataset,
        "status": entry.status,
        "release_id": entry.release_id,
        "flow_run_id": entry.flow_run_id,
        "kind": entry.kind,
        "adjacency": entry.adjacency,
        "mechanism": entry.mechanism,
        "params": json.loads(entry.params),
        "epsilon": entry.epsilon,
        "delta": entry.delta,
        "detail": detail,
        "holder": entry.holder,
        "requested_by": entry.requested_by,
        "ts": datetime.fromisoformat(entry.ts) if entry.ts else datetime.now(UTC),
    }
