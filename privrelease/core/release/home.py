"""The home: the state folder of one privrelease installation (``$PRIVRELEASE_HOME``).

It holds the database (the registry and the ledger, unless the ledger is on PostgreSQL), the
snapshots, the release folders and their staging. A home is never a request's choice: a process
opens the one it was configured with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from privrelease.core import paths
from privrelease.core.datasets.registry import Registry
from privrelease.core.ledger.ledger import Ledger


@dataclass(frozen=True)
class Home:
    """The state folder: the DuckDB database (registry and ledger), snapshots and releases."""

    root: Path

    @classmethod
    def open(cls) -> Home:
        """The home configured for this process (``$PRIVRELEASE_HOME``): never a request's choice."""
        return cls(paths.home())

    @property
    def db(self) -> Path:
        return paths.database(self.root)

    @property
    def releases(self) -> Path:
        return paths.releases(self.root)

    @property
    def staging(self) -> Path:
        return paths.staging(self.root)

    @property
    def ledger(self) -> Ledger:
        return Ledger(self.db)

    @property
    def registry(self) -> Registry:
        return Registry(self.root)
