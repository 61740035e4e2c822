"""The snapshot store: where registered snapshots live, written once and checked before every read.

A registration writes its snapshot (Parquet, mode 600, in a folder of mode 700) into the store and
records, privately, its path relative to the store, its SHA-256 and the registering host. The
store is ``$PRIVRELEASE_SNAPSHOT_STORE``, a folder every worker mounts (a shared filesystem), else
``<home>/datasets`` (one host). A worker reading a snapshot tells apart the two ways that can fail:

- the snapshot cannot be reached from this worker (``SnapshotUnreachable``): the message names the
  store it looked in and the host the dataset was registered from, so the operator can point this
  worker at the store that host wrote;
- the bytes are there but differ from the registration (``SnapshotChanged``): the steward checks it.

Both are raised before anything is charged. The store's path and the host's name are the
operator's configuration, public values; the digest stays private.
"""

from __future__ import annotations

import glob
import hashlib
import os
import secrets
import socket
from pathlib import Path

from privrelease.core import paths, settings
from privrelease.core.errors import InternalError, UserError


class SnapshotUnreachable(UserError):
    """The registered snapshot is not readable from this worker's store (a configuration problem)."""


class SnapshotChanged(UserError):
    """The snapshot read differs from the one registered (or the dataset was registered again)."""


def root(home: Path) -> Path:
    """The store's folder: ``$PRIVRELEASE_SNAPSHOT_STORE``, else ``<home>/datasets``."""
    if settings.get(settings.SNAPSHOT_DIR) and not settings.get(settings.SNAPSHOT_STORE):
        raise UserError(
            f"${settings.SNAPSHOT_DIR} was renamed ${settings.SNAPSHOT_STORE}; set {settings.SNAPSHOT_STORE} to the same folder (and unset "
            f"{settings.SNAPSHOT_DIR})."
        )
    return Path(settings.get(settings.SNAPSHOT_STORE) or home / "datasets").resolve()


def describe(home: Path) -> str:
    """The store, as messages name it: its folder and where that setting came from."""
    where = (
        f"${settings.SNAPSHOT_STORE}"
        if settings.get(settings.SNAPSHOT_STORE)
        else f"${settings.SNAPSHOT_STORE} unset: this worker's home"
    )
    return f"{root(home)} ({where})"


def host() -> str:
    """This host's name, recorded with a registration so a worker that cannot read it can say where it came from."""
    return socket.gethostname()


def sha256(path: Path) -> str:
    """SHA-256 of a file, read in 1 MiB chunks (snapshots and sources can be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def folder(home: Path, dataset_id: str) -> Path:
    """The dataset's folder in the store, created with mode 700 (the store's root too, if new)."""
    store = root(home)
    if not store.exists():
        store.mkdir(parents=True, mode=0o700, exist_ok=True)  # two processes may make it at once
    path = store / dataset_id
    path.mkdir(exist_ok=True, mode=0o700)
    return path


SECRET = "cellkey.secret"  # a dataset's record-key secret (``privrelease.core.noise.keys``), beside its snapshots


def record_key_secret(home: Path, dataset_id: str, test_seed: int | None = None) -> bytes:
    """The dataset's record-key secret, made the first time it is asked for: written whole (mode 600) beside it,
    then linked into place, which fails if another release made it first (then that one is read). Kept beside the
    dataset's snapshots and not per registration, so the same records registered again get the same keys (keys are
    of what a record holds, ``keys.record_keys``); a backup holds it with the store. Never published. A test run's
    secret (``test_seed``: test mode only) comes from its seed and is never stored: a secret from a seed kept here
    would key every later release of the dataset, and one published cell with its truth finds the seed."""
    from privrelease.core.noise import keys  # only a cell key release asks for it

    if test_seed is not None:
        return keys.secret(test_seed)
    path = folder(home, dataset_id) / SECRET
    if not path.exists():
        tmp = path.with_name(f"{SECRET}.{secrets.token_hex(8)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(keys.secret(test_seed))
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another release made it first: that one it is
        finally:
            tmp.unlink(missing_ok=True)
    key = path.read_bytes()
    if len(key) != keys.BYTES:
        raise InternalError(f"{path} is not a record-key secret ({len(key)} bytes); restore it from a backup")
    return key


def write(con, table: str, target: Path) -> str:
    """Write ``table`` of DuckDB connection ``con`` to ``target`` (mode 600, atomically); returns its SHA-256."""
    tmp = target.with_suffix(".tmp")
    con.execute(f"COPY (SELECT * FROM {table}) TO '{tmp}' (FORMAT parquet)")
    os.chmod(tmp, 0o600)
    os.replace(tmp, target)
    return sha256(target)


def prune(target: Path) -> None:
    """Remove the dataset's earlier versions, once ``target`` is the registered one, and the files computed from
    them (``paths.derived``: caches and their temporary files, also one a release wrote after its version went)."""
    for old in [*target.parent.glob("v*.parquet"), *target.parent.glob(f"v*{paths.DERIVED}*")]:
        if old.name.partition(".")[0] != target.stem:
            old.unlink(missing_ok=True)


def remove(snapshot: Path) -> None:
    """Delete a snapshot's file and the files computed from it (``paths.derived``): they hold its rows too."""
    for path in [snapshot, *snapshot.parent.glob(f"{glob.escape(snapshot.stem)}{paths.DERIVED}*")]:
        path.unlink(missing_ok=True)


def checked(home: Path, dataset_id: str, relative: str, digest: str, registered_from: str | None) -> Path:
    """The snapshot's file in this worker's store, after checking it is the one registered.

    ``relative`` is the path recorded at registration (an absolute one, from before snapshots were
    recorded relative to the store, stays as it is)."""
    path = root(home) / relative
    try:
        found = sha256(path)
    except OSError as exc:
        why = "does not exist" if isinstance(exc, FileNotFoundError) else f"cannot be read ({exc.strerror})"
        missing = "" if root(home).is_dir() else ", a folder missing on this worker"
        origin = f"host {registered_from!r}" if registered_from else "a host not recorded (before hosts were recorded)"
        raise SnapshotUnreachable(
            f"dataset {dataset_id!r} cannot be read on this worker: its snapshot {relative} {why} in the snapshot "
            f"store {describe(home)}{missing}. It was registered from {origin}; set ${settings.SNAPSHOT_STORE} on this worker to "
            "the store that host wrote to (a folder every worker mounts). Nothing was charged."
        ) from None
    if found != digest:
        raise SnapshotChanged(f"dataset {dataset_id!r} changed since registration; ask the data steward to check it.")
    return path
