"""What a user typed: paths relative to their current folder, and the command as they can type it again.

Every path argument of the command line follows one rule, as every Unix tool does: a relative path is
relative to the current folder. The command line makes it absolute before anything reads it, so a
command run from another folder, or the next command a previous one printed, names the same file. The
data root bounds what a run started through Prefect's worker or the gate may name (``privrelease.core.tables.readers.bound``),
never what a user types.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def path(text: str | None) -> str | None:
    """``text`` as an absolute path, relative to the current folder (symbolic links kept as written)."""
    return None if text is None else os.path.abspath(os.path.expanduser(text))


def command() -> str:
    """How to run privrelease again from here: ``privrelease`` when that name on the PATH is this program,
    else the path it was started by (``.venv/bin/privrelease`` from ``make demo``)."""
    ran = sys.argv[0] if sys.argv and Path(sys.argv[0]).name == "privrelease" else None
    found = shutil.which("privrelease")
    if ran is None or (found and os.path.realpath(found) == os.path.realpath(ran)):
        return "privrelease"
    return ran


def activate_hint() -> str | None:
    """When privrelease is not on the PATH: how to put it there (the virtual environment's activate script)."""
    ran = command()
    activate = Path(ran).parent / "activate"
    return f"(or `source {activate}` first, then type privrelease)" if ran != "privrelease" and activate.is_file() else None
