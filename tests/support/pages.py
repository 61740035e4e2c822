"""The documentation's fenced blocks, as the tests read them. A block's language says who runs it:

- ``bash``: run as printed by tests/system/test_docs.py, the page's blocks in order in one shell, in a fresh home
  (the pages of ``test_docs.GUIDED``);
- ``sh``: commands that need an install, a server that keeps running, root, PostgreSQL or another host:
  run as printed by the test ``ELSEWHERE`` names, which reads the block from the page with ``sh_block``
  (so a stale page fails that test);
- ``text``: not a command: output, a diagram, a usage synopsis with placeholders (a line that reads as a
  command, ``privrelease …`` or ``make …``, is a synopsis or one a ``bash`` block runs);
- ``yaml``, ``json``: files and requests (tests/system/test_docs.py parses the release requests);
- ``console`` (README.md only): ``$ command`` lines with what they print; each command is one the
  quickstart runs.

A block without a language, or with another one, fails tests/system/test_docs.py: a new page cannot add a
command no test runs.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

DOCS = REPO / "docs"
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<language>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M)

# Each page's `sh` blocks, by how the block starts: the test file that runs it as printed (it calls
# sh_block(page, start) with these very words)
ELSEWHERE = {
    ("quickstart.md", "git clone"): "tests/project/test_install.py",
    ("guides/operator.md", "make serve"): "tests/system/test_serve.py",
    ("guides/hosts.md", "privrelease ledger migrate"): "tests/ledger/test_pg.py",
    ("guides/hosts.md", "createdb privrelease"): "tests/project/test_serve_network.py",
    ("guides/hosts.md", "prefect worker start"): "tests/system/test_server_pg.py",
    ("guides/hosts.md", "privrelease ledger verify"): "tests/system/test_server_pg.py",
    ("guides/hosts.md", "DASK_CONFIG="): "tests/project/test_hosts.py",
    ("README.md", "make demo"): "tests/project/test_install.py",
    ("mechanisms/spam-training.md", "privrelease spam split"): "tests/cli/test_cli.py",
    ("OPERATING.md", "PRIVRELEASE_HOST=0.0.0.0"): "tests/project/test_serve_network.py",
    ("guides/operator.md", "export PREFECT_API_URL"): "tests/project/test_serve_network.py",
}


def fences(text: str) -> list[tuple[str, str]]:
    """Every fenced block of a page: (language, body), the body without the fence's indent."""
    found = []
    for m in FENCE.finditer(text):
        indent = len(m["indent"])
        body = "".join(line[indent:] for line in m["body"].splitlines(keepends=True))
        found.append((m["language"].strip(), body))
    return found


def blocks(text: str, language: str) -> list[str]:
    return [body for lang, body in fences(text) if lang == language]


def sh_block(page: str, start: str) -> str:
    """The one ``sh`` block of ``page`` (under docs/, or README.md) whose first line starts with ``start``."""
    assert (page, start) in ELSEWHERE, f"({page!r}, {start!r}) is not in tests/support/pages.py's ELSEWHERE"
    path = REPO / page if page == "README.md" else DOCS / page
    found = [b for b in blocks(path.read_text(), "sh") if starts(b, start)]
    assert len(found) == 1, f"{page}: {len(found)} sh blocks start with {start!r} (the test runs that block as printed)"
    return found[0]


def starts(block: str, start: str) -> bool:
    """Whether the block's first words are ``start`` (``make serve`` is not how ``make serve-pg`` starts)."""
    return re.match(rf"{re.escape(start)}(?![\w-])", block) is not None


def commands(block: str) -> list[str]:
    """A block's commands, one per entry: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", "", block)
    return [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
