"""Where privrelease keeps its state: everything lives under ``$PRIVRELEASE_HOME``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import platformdirs

from privrelease.core import settings

DEFAULT_HOME = platformdirs.user_data_dir("privrelease")


def repo() -> Path:
    """The checkout whose ``prefect.yaml`` is deployed: ``$PRIVRELEASE_REPO``, else the one holding this code."""
    return Path(settings.get(settings.REPO) or Path(__file__).resolve().parents[2])


def home(explicit: str | os.PathLike | None = None) -> Path:
    """The state folder: ``explicit``, else ``$PRIVRELEASE_HOME``, else the per-user data folder
    (one fixed place, so a command run from another directory still finds the same ledger)."""
    root = Path(explicit or settings.get(settings.HOME) or DEFAULT_HOME).resolve()
    root.mkdir(parents=True, exist_ok=True)
    return root


def database(root: Path) -> Path:
    """The DuckDB file holding ingested tables and the ledger."""
    return root / "privrelease.duckdb"


DERIVED = ".derived-"  # between a snapshot's stem and the name of a file computed from it


def derived(snapshot: Path, name: str) -> Path:
    """A private file computed from a registered snapshot's bytes alone (a mechanism's cache), kept beside it in
    the store's folder (mode 700) and named after its stem, ``v3.derived-<name>``, so that ``snapshots.prune``
    removes it with its version."""
    return snapshot.with_name(f"{snapshot.stem}{DERIVED}{name}")


def releases(root: Path) -> Path:
    return root / "releases"


def staging(root: Path) -> Path:
    """Where a release is written before it is renamed into ``releases/``: same filesystem, never published."""
    return root / "staging"


def sdc_reports(root: Path) -> Path:
    """The data steward's internal SDC reports: never published, readable by the home's owner only."""
    return root / "sdc-reports"


ANYWHERE = Path("/")  # the bound of a path a user typed: their own files, wherever their permissions reach
_TYPED = [False]


@contextlib.contextmanager
def typed_paths() -> Iterator[None]:
    """Within it, this process runs a command a user typed (``privrelease.cli.main``): the paths it names are theirs,
    relative to their current folder (the command line makes them absolute) and bounded by nothing but their
    own permissions. A run started through Prefect's worker or the gate never enters it, so a path its
    parameters name (a person's, through the UI) stays inside the data root."""
    _TYPED[0] = True
    try:
        yield
    finally:
        _TYPED[0] = False


def typed() -> bool:
    """Whether this process runs a command a user typed (inside ``typed_paths``)."""
    return _TYPED[0]
