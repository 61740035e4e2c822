"""A command line that answers at once (#57): ``privrelease --help``, ``--version`` and each subcommand's ``--help``
import none of the heavy libraries (pandas, DuckDB, numpy, scipy, Prefect); each command imports what it uses when
it runs. Checked in a fresh interpreter, as a person's command starts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

HEAVY = ("pandas", "duckdb", "numpy", "scipy", "prefect", "pyarrow", "matplotlib", "pydantic")
PROBE = """
import json, sys
from cli.main import main
try:
    main({argv!r})
except SystemExit:
    pass
{extra}
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)), file=sys.stderr)
"""


def heavy_after(argv: list[str], extra: str = "") -> list[str]:
    code = PROBE.format(argv=argv, heavy=HEAVY, extra=extra)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["--version"], ["ledger", "--help"], ["dataset", "--help"], ["backup", "--help"], ["user", "--help"]],
)
def test_help_and_version_import_nothing_heavy(argv):
    assert heavy_after(argv) == []


def test_the_check_sees_a_heavy_import():
    """The weakened variant: a command module importing the demo data at its top would load pandas."""
    assert "pandas" in heavy_after(["--version"], "import core.datasets.demo")
