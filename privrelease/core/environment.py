"""Faults of the machine, not of the request: a full disk, a folder that cannot be written, another filesystem,
a read-only database. Each is the operator's to fix, so it is said as such (``Unwritable``: the path, the cause,
the fix; exit 2), never as a bug; ``preflight`` finds them before a charge, so none costs budget.

``preflight`` checks what publishing needs, from public facts only: that the staging and release folders can be
written and lie on one filesystem (a release is renamed from one into the other), and that the disk has room
for the release's files (a public estimate with a margin, never a figure read from the rows), which ``hold``
then sets aside until the release's files are written. Its refusal never says how much is free: free space
moves with the size of other datasets' snapshots on that disk, which are not all public.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from pathlib import Path

from privrelease.core import settings
from privrelease.core.errors import UserError

CAUSES = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EACCES: "permission denied",
    errno.EPERM: "the operation is not permitted",
    errno.EROFS: "the filesystem is read-only",
    errno.EXDEV: "it lies on another filesystem than the folder it is moved from",
}
FIXES = {
    errno.ENOSPC: "free space on that disk",
    errno.EDQUOT: "raise the quota or free space",
    errno.EACCES: "give the user running privrelease write access to it",
    errno.EPERM: "give the user running privrelease write access to it",
    errno.EROFS: "mount it read-write",
    errno.EXDEV: "keep staging/ and releases/ on one filesystem (both under the home)",
}
DEFAULT_ROOM_MB = 64.0  # free space kept beyond a release's estimate ($PRIVRELEASE_MIN_FREE_MB)


class Unwritable(UserError):
    """The machine refused a write privrelease needs (a full disk, a permission, a read-only filesystem or database,
    another filesystem): the operator's to fix; the message names the path, the cause and what became of a charge."""


def cause(exc: BaseException) -> tuple[str, str, str] | None:
    """(path, cause, fix) of an environment fault, or None for anything else (a bug stays a bug)."""
    if isinstance(exc, OSError) and exc.errno in CAUSES:
        return str(exc.filename or "?"), CAUSES[exc.errno], FIXES[exc.errno]
    text = str(exc)
    if type(exc).__module__.startswith("duckdb"):
        lowered = text.lower()
        if "read-only" in lowered or "read only" in lowered:
            return "the home's database", "it is attached read-only (a read-only file or filesystem)", "make it writable"
        if "no space left" in lowered or "disk is full" in lowered:
            return "the home's database", CAUSES[errno.ENOSPC], FIXES[errno.ENOSPC]
    return None


def unwritable(exc: BaseException, charge: str = "", where: Path | None = None) -> Unwritable | None:
    """The ``Unwritable`` an environment fault reads as (``charge``: what became of a charge, said after it; ``where``:
    the folder to name instead of the file the call failed on)."""
    found = cause(exc)
    if found is None:
        return None
    path, why, fix = found
    return Unwritable(f"could not write {where or path}: {why}; {fix}, then run the command again. {charge}".strip())


def room_mb() -> float:
    return settings.number(settings.MIN_FREE_MB, DEFAULT_ROOM_MB)


def _probe(folder: Path) -> None:
    """Create and remove a file in ``folder``: the one test of write access that a permission, an ACL, a read-only
    mount or a full inode table all answer truly."""
    probe = folder / f".probe-{secrets.token_hex(4)}"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    probe.unlink()


def hold(path: Path, mb: float, charge: str = "Nothing was charged.") -> None:
    """Set ``mb`` of the disk aside in ``path`` (allocated, not just counted) from before a charge until its output is
    written (``free``), so a disk others fill meanwhile cannot stop a drawn release from being kept."""
    try:
        for attempt in (1, 2):  # a run that frees its own room removes the folder once empty: made again if so
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                break
            except FileNotFoundError:
                if attempt == 2:
                    raise
        try:
            if mb > 0:
                os.posix_fallocate(fd, 0, int(mb * 2**20))
        finally:
            os.close(fd)
    except OSError as exc:
        free(path)
        raise unwritable(exc, charge) or exc from None


def free(path: Path) -> None:
    """Give back what ``hold`` set aside, and its folder once empty (nothing of a run is left where people look)."""
    path.unlink(missing_ok=True)
    try:
        path.parent.rmdir()
    except OSError:  # other runs' rooms or files in it, or gone already
        pass


def preflight(staging: Path, releases: Path, needed_mb: float | None, charge: str = "Nothing was charged.") -> None:
    """Refuse, before a charge, a release its folders cannot take: not writable, not on one filesystem, or without
    ``needed_mb`` (a public estimate) plus the room kept free (None: a rename only, which needs no room)."""
    for folder in (staging, releases):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            _probe(folder)
        except OSError as exc:
            raise unwritable(exc, charge, folder) or exc from None
    if os.stat(staging).st_dev != os.stat(releases).st_dev:
        raise Unwritable(
            f"{staging} and {releases} lie on different filesystems, so a release cannot be renamed into place whole; "
            f"{FIXES[errno.EXDEV]}. {charge}"
        )
    free = shutil.disk_usage(releases).free / 2**20
    if needed_mb is not None and free < needed_mb + room_mb():  # how much is free is not said: it moves with others' data
        raise Unwritable(
            f"the disk holding {releases} has less free space than a release like this may need ({needed_mb:.0f} MB) and "
            f"the {room_mb():g} MB kept free (${settings.MIN_FREE_MB}). Free space on that disk, then run it again. {charge}"
        )
