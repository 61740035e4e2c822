"""What the ledger is checked against, kept outside its database and outside the home: the chain key and
the anchors.

Threat model: an operator who can write the database file (edit, delete, reorder rows, restore an
old copy of the home or of the database) but not the key file nor the anchors file. The key makes each
row's hash an HMAC, so a row cannot be rewritten and re-chained without it; the anchors, an append-only
list of the entries written (each line the whole entry: public values only, as the ledger itself), pin
how far the chain reached, so a cut tail or a restored older copy no longer matches them, and they hold
what a restore lost, so a rollback that is accepted keeps the lost charges spent
(``privrelease.core.ledger.rollback``).

The anchors live outside the home by default (``default_file``: the user's state folder, one file per
ledger, named after where the ledger lives), so a copy of the home never carries them and restoring one
cannot bring its own anchors back. ``$PRIVRELEASE_LEDGER_ANCHORS`` may name other files, separated by
``:``: entries are anchored in the first and all are checked, so an auditor of a ledger shared by several
workers (each with its own anchors) can check against all of them at once. Deploy them where the
database's writer cannot write: another user's files, an append-only (``chattr +a``) or remote
filesystem.

``line`` exports the head as one line signed with Ed25519 (its key derived from the chain key), for an
auditor to keep: ``verify --anchor LINE`` then catches a rollback even if every anchors file was lost.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import platformdirs

from privrelease.core import settings
from privrelease.core.errors import LedgerCorrupt, UserError

TAIL_BYTES = 1 << 16  # the head check reads this much of each file's end: the latest lines are there
LINE_PREFIX = "privrelease-anchor"
RETIRED = "retired"  # the mark of a ledger restored elsewhere: charges go there (``privrelease.core.ledger.rollback``)


def key_path(home: Path) -> Path:
    return Path(settings.get(settings.LEDGER_KEY_FILE) or home / "keys" / "ledger.key")


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


def fingerprint(home: Path) -> str:
    """The key's SHA-256 (what a backup records instead of the key)."""
    return hashlib.sha256(key(home, create=False)).hexdigest()


def legacy_file(home: Path) -> Path:
    """Where homes of schema 1 kept their anchors: inside the home, so a copy of the home carried them."""
    return home / "anchors" / "ledger.anchors"


def default_file(location: str) -> Path:
    """The anchors of the ledger at ``location`` (its DuckDB file's path, or its PostgreSQL database without the
    password) when none is configured: in the user's state folder, outside every home."""
    digest = hashlib.sha256(location.encode()).hexdigest()[:16]
    label = re.sub(r"[^A-Za-z0-9_.-]+", "-", location.rstrip("/").rsplit("/", 2)[-2 if location.endswith(".duckdb") else -1])
    return Path(platformdirs.user_state_dir("privrelease")) / "anchors" / f"{label.strip('-.')[:40] or 'ledger'}-{digest}.anchors"


def configured() -> list[Path]:
    return [Path(p) for p in settings.get(settings.LEDGER_ANCHORS, "").split(os.pathsep) if p]


@dataclass(frozen=True)
class Anchors:
    """The anchors files of one ledger: the first is written, all are checked."""

    files: tuple[Path, ...]

    @classmethod
    def of(cls, location: str) -> Anchors:
        return cls(tuple(configured() or [default_file(location)]))

    @property
    def written(self) -> Path:
        return self.files[0]

    def exist(self) -> bool:
        return any(path.exists() for path in self.files)

    def start(self) -> None:
        """Create the written file (empty, 0600 in a 0700 folder) before the ledger's first entry, so a ledger with
        entries and no anchors file is one whose anchors were lost."""
        self.written.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(os.open(self.written, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))

    def append(self, marks: list[dict]) -> None:
        """Record entries the chain reached (each a dict: seq, hash, why and the entry itself), appended and synced,
        never rewritten; one write per call, so lines of concurrent writers never interleave."""
        if not marks:
            return
        self.start()
        ts = datetime.now(UTC).isoformat(timespec="seconds")
        text = "".join(json.dumps({"ts": ts, **mark}, sort_keys=True, separators=(",", ":")) + "\n" for mark in marks)
        fd = os.open(self.written, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, text.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self) -> list[dict]:
        """Every anchor written, file by file, oldest first (a torn last line, from a crash while writing it, is
        skipped)."""
        return [mark for path in self.files if path.exists() for mark in _parse(path.read_text())]

    def latest(self) -> dict | None:
        """The anchor of the highest entry, read from each file's end only (the head check runs at every use)."""
        best = None
        for path in self.files:
            if not path.exists():
                continue
            with path.open("rb") as handle:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(0, size - TAIL_BYTES))
                tail = handle.read().decode(errors="replace")
            marks = _parse(tail.split("\n", 1)[1] if size > TAIL_BYTES else tail)
            if not marks and size > TAIL_BYTES:  # one line longer than the tail: read the file whole
                marks = _parse(path.read_text())
            for mark in marks:  # a retirement, written after its head's own anchor, stands for that head
                if best is None or mark["seq"] > best["seq"] or (mark["seq"] == best["seq"] and mark.get("why") == RETIRED):
                    best = mark
        return best

    def where(self) -> str:
        return ", ".join(str(p) for p in self.files)


def _parse(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        try:
            mark = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(mark, dict) and isinstance(mark.get("seq"), int) and isinstance(mark.get("hash"), str):
            out.append(mark)
    return out


# -- the signed line an auditor keeps ------------------------------------------------------------


def _signing_key(chain_key: bytes):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.hashes import SHA256
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    seed = HKDF(SHA256(), 32, salt=None, info=b"privrelease anchor signing key").derive(chain_key)
    return Ed25519PrivateKey.from_private_bytes(seed)


def public_key(chain_key: bytes) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    raw = _signing_key(chain_key).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def line(chain_key: bytes, seq: int, hash_: str, ts: str) -> str:
    """``privrelease-anchor seq=N hash=H ts=T key=PUB sig=S``: the head at ``ts``, signed."""
    body = f"{LINE_PREFIX} seq={seq} hash={hash_} ts={ts} key={public_key(chain_key)}"
    return f"{body} sig={base64.b64encode(_signing_key(chain_key).sign(body.encode())).decode()}"


def parse_line(text: str, chain_key: bytes) -> dict:
    """An auditor's line, its signature checked against this ledger's key: {seq, hash, ts}; a user error otherwise."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    found = re.fullmatch(rf"({LINE_PREFIX} seq=(\d+) hash=([0-9a-f]{{64}}) ts=(\S+) key=(\S+)) sig=(\S+)", text.strip())
    if not found:
        raise UserError(
            f"--anchor takes the line `privrelease ledger anchor --print` printed ({LINE_PREFIX} seq=… hash=… ts=… key=… "
            "sig=…), whole and on one line."
        )
    body, seq, hash_, ts, pub, sig = found.groups()
    if pub != public_key(chain_key):
        raise UserError("the anchor line was signed by another ledger's key (its key= differs from this ledger's public key).")
    try:
        Ed25519PublicKey.from_public_bytes(base64.b64decode(pub)).verify(base64.b64decode(sig), body.encode())
    except (InvalidSignature, ValueError):
        raise UserError("the anchor line's signature does not check out: it was changed after it was printed.") from None
    return {"seq": int(seq), "hash": hash_, "ts": ts, "why": "auditor's line"}
