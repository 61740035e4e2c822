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
from privrelease.cli.main import main
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
    assert "pandas" in heavy_after(["--version"], "import privrelease.core.datasets.demo")


MECHANISM_MODULES = ("scipy.optimize", "privrelease.core.mechanisms.aggregate", "privrelease.core.mechanisms.dpne", "privrelease.core.mechanisms.sdc_table",
                     "privrelease.core.mechanisms.outliers", "privrelease.core.mechanisms.spam_training", "privrelease.core.release.spec")  # fmt: skip


def loaded_after(argv: list[str], names: tuple[str, ...], extra: str = "") -> list[str]:
    code = PROBE.format(argv=argv, heavy=names, extra=extra)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [["ledger", "totals"], ["ledger", "history"], ["dataset", "list"], ["release", "list"]])
def test_a_command_that_runs_no_mechanism_loads_none(argv, tmp_path, monkeypatch):
    """The mechanisms are loaded by name when a command runs one (``privrelease.core.mechanisms.Registry``): reading the ledger or
    the catalogue loads none of them (each cost every command 2.6 s, scipy's optimizers included)."""
    monkeypatch.setenv("PRIVRELEASE_HOME", str(tmp_path / "home"))
    assert loaded_after(argv, MECHANISM_MODULES) == []


def test_the_registry_check_sees_an_eager_import():
    """The weakened variant: asking the registry for every mechanism (as an eager registry did) loads them."""
    extra = "from privrelease.core import mechanisms; [mechanisms.MECHANISMS[n] for n in mechanisms.MECHANISMS]"
    assert set(loaded_after(["--version"], MECHANISM_MODULES, extra)) == set(MECHANISM_MODULES) - {
        "privrelease.core.release.spec"
    }


def test_the_registry_loads_each_mechanism_checked_and_refuses_an_unknown_name():
    from privrelease.core import mechanisms
    from privrelease.core.errors import SpecError

    assert {n: mechanisms.MECHANISMS[n].NAME for n in mechanisms.MECHANISMS} == {n: n for n in mechanisms.MECHANISMS}
    assert set(mechanisms.REGISTRY) == set(mechanisms.MECHANISMS) - {"spam-filter-training"}
    with pytest.raises(SpecError, match="unknown mechanism 'nope'; available: aggregate, dpne, eds, meds, mews"):
        mechanisms.get("nope")
    broken = mechanisms.Registry({"dpne": ("outliers", None)}, mechanisms.TableMechanism)
    with pytest.raises(TypeError, match="mechanism 'outliers' is registered as 'dpne'"):
        broken["dpne"]
