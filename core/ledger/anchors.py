"""What the ledger is checked against, kept outside its database: the chain key and the anchors.

Threat model: an operator who can write the database file (edit, delete, reorder rows, restore an
old copy) but not the key file nor the anchors file. The key makes each row's hash an HMAC, so a
row cannot be rewritten and re-chained without it; the anchors, an append-only list of chain heads
(one per entry written, and one per audit), pin how far the chain reached, so a cut tail or a
restored older copy no longer matches them. Deploy both where the database's writer cannot write:
another user's files, an append-only (``chattr +a``) or remote filesystem.

``$PRIVRELEASE_LEDGER_ANCHORS`` may name several files separated by ``:``: entries are anchored in
the first, and all are checked, so an auditor of a ledger shared by several workers (each with its
own anchors) can check against all of them at once.
"""

from __future__ import annotations

import json
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path

from core import settings
from core.errors import LedgerCorrupt


def key_path(home: Path) -> Path:
    return Path(settings.get(settings.LEDGER_KEY_FILE) or home / "keys" / "ledger.key")


def anchors_paths(home: Path) -> list[Path]:
    """The anchors files: the first is written, all are checked."""
    configured = [Path(p) for p in settings.get(settings.LEDGER_ANCHORS, "").split(os.pathsep) if p]
    return configured or [home / "anchors" / "ledger.anchors"]


def anchors_path(home: Path) -> Path:
    return anchors_paths(home)[0]


def key(home: Path, create: bool) -> bytes:
    """The chain key; made (0600) only for a ledger that has no entries yet, else it must exist."""
    path = key_path(home)
    if not path.exists():
        if not create:
            raise LedgerCorrupt(
                f"the ledger key {path} is missing, so no entry can be checked; restore it "
                f"(or point ${settings.LEDGER_KEY_FILE} at it).",
                None,
            )
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
    return bytes.fromhex(path.read_text().strip())


def append(home: Path, seq: int, hash_: str, why: str) -> None:
    """Record that the chain reached entry ``seq`` with ``hash_`` (appended and synced, never rewritten)."""
    path = anchors_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"seq": seq, "hash": hash_, "ts": datetime.now(UTC).isoformat(timespec="seconds"), "why": why})
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read(home: Path) -> list[dict]:
    """Every anchor written, file by file, oldest first (a torn last line, from a crash while writing
    it, is skipped)."""
    out = []
    for path in anchors_paths(home):
        for line in path.read_text().splitlines() if path.exists() else []:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out
