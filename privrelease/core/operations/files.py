"""What lies on disk, checked: every published release's files against its manifest, sealed draws waiting to be
published, and files whose mode lets others read what only the home's owner should."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from privrelease.core.datasets.snapshots import sha256

MANIFEST = "manifest.json"


def releases(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/*") if p.is_dir()) if root.is_dir() else []


def count(root: Path) -> int:
    return len(releases(root))


def check_release(folder: Path) -> list[str]:
    """What is wrong with one release folder: its manifest missing or unreadable, a file it lists missing or changed, a
    file it does not list."""
    name = f"{folder.parent.name}/{folder.name}"
    try:
        listed = json.loads((folder / MANIFEST).read_text())["files"]
    except FileNotFoundError:
        return [f"{name}: its {MANIFEST} is missing"]
    except (ValueError, KeyError, TypeError):
        return [f"{name}: its {MANIFEST} cannot be read (not the JSON a release writes)"]
    out = []
    for file, digest in listed.items():
        path = folder / file
        if not path.is_file():
            out.append(f"{name}: {file} is missing")
        elif sha256(path) != digest:
            out.append(f"{name}: {file} was changed (its SHA-256 is not the manifest's)")
    extra = sorted(p.name for p in folder.iterdir() if p.name != MANIFEST and p.name not in listed)
    out += [f"{name}: {file} is not listed in its manifest" for file in extra]
    return out


def check_releases(root: Path) -> list[str]:
    return [line for folder in releases(root) for line in check_release(folder)]


def sealed(staging: Path) -> list[Path]:
    """Complete staged folders: drawn releases whose publishing failed, waiting for ``release --resume``."""
    return sorted(p for p in staging.glob("*/*") if (p / MANIFEST).is_file()) if staging.is_dir() else []


def loose(paths: list[Path]) -> list[str]:
    """Of ``paths`` (and what folders among them hold), those others may read or enter: each a line naming its mode. A
    private folder (no access for others) hides what it holds, so nothing under it is named."""
    out: list[str] = []

    def walk(path: Path) -> None:
        if len(out) >= 10 or path.is_symlink() or not path.exists():
            return
        mode = stat.S_IMODE(path.lstat().st_mode)
        if not mode & 0o077:
            return
        out.append(f"{path} is mode {mode:o}; others can {'enter' if path.is_dir() else 'read'} it (chmod go-rwx)")
        if path.is_dir():
            for child in sorted(path.iterdir()):
                walk(child)

    for top in paths:
        walk(top)
    return out[:10]
