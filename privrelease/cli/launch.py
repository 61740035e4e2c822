"""How a command starts Prefect: its settings under our home, a temporary server started once under a
lock when none is configured, and a console that shows the flow's own lines (a user error without
its traceback)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from privrelease.core import paths, settings
from privrelease.core.errors import UserError


def prefect_env(root: Path) -> None:
    """Prefect reads its settings at import: keep its state under our home unless told otherwise."""
    os.environ.setdefault("PREFECT_HOME", str(root / "prefect"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")


def start_prefect() -> None:
    """With no server configured, Prefect starts a temporary one that migrates its SQLite database;
    processes starting together in a fresh home would race on those migrations. Start it under a
    lock, so the database is created once and the others find it ready."""
    import prefect.settings

    if prefect.settings.PREFECT_API_URL.value():
        return
    from prefect.client.orchestration import get_client

    from privrelease.core.db import exclusive

    with exclusive(Path(prefect.settings.PREFECT_HOME.value()) / "privrelease-start.lock"):
        with get_client(sync_client=True) as client:  # starts this process's temporary server
            client.api_healthcheck()


class _NoUserErrorTraceback(logging.Formatter):
    """Console formatter: a user error is shown as its message, without a traceback."""

    def __init__(self, inner: logging.Formatter | None):
        super().__init__()
        self.inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info and isinstance(record.exc_info[1], UserError):
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        return self.inner.format(record)


def quiet_console() -> None:
    """One line per pipeline step on the console: the flow's own lines, not a line per task state
    (the run's page in the UI shows those), and a user error without its traceback."""
    from prefect.logging.handlers import PrefectConsoleHandler

    logging.getLogger("prefect.task_runs").setLevel(logging.WARNING)
    loggers = [logging.getLogger(), *(v for v in logging.root.manager.loggerDict.values() if isinstance(v, logging.Logger))]
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, PrefectConsoleHandler) and not isinstance(handler.formatter, _NoUserErrorTraceback):
                handler.setFormatter(_NoUserErrorTraceback(handler.formatter))


def prefect_api_url() -> str | None:
    """The Prefect server releases report to, if one is configured; else they run directly.

    Importing Prefect to ask takes about a second, most of a small release's command: it is asked only
    when it is loaded already (its settings may have been changed in this process, as a test harness
    does) or when a file it reads its settings from could name a server (``_maybe_configured``)."""
    prefect_env(paths.home())
    url = settings.get(settings.PREFECT_API)
    if url or ("prefect.settings" not in sys.modules and not _maybe_configured(Path.cwd())):
        return url
    import prefect.settings

    return prefect.settings.PREFECT_API_URL.value() or None


def _maybe_configured(cwd: Path) -> bool:
    """Whether a file Prefect reads its settings from (besides the environment) may set its API URL: the
    profiles file, and ``.env``, ``prefect.toml`` or ``pyproject.toml``'s ``[tool.prefect]`` in the
    working folder. Conservative: a mention is enough, Prefect itself then says what holds."""
    profiles = Path(settings.get(settings.PREFECT_PROFILES) or Path(settings.get(settings.PREFECT_HOME, "")) / "profiles.toml")
    found = [
        (profiles, "PREFECT_API_URL"),
        (cwd / ".env", "PREFECT_API_URL"),
        (cwd / "prefect.toml", "url"),
        (cwd / "pyproject.toml", "tool.prefect"),
    ]
    return any(path.is_file() and word in path.read_text(errors="replace") for path, word in found)
