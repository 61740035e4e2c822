"""The quickstart's install (docs/quickstart.md, the README's first commands), as printed, in a fresh clone
and a fresh home: `git clone`, `make demo`, `make test`.

In ``make test`` the two make commands run as ``make -n``: what they would run in the fresh clone, with
nothing installed (the real install reaches the package registry and takes minutes). ``make audit``
(PRIVRELEASE_AUDIT=1) runs them for real: the pinned lock into the clone's own ``.venv`` (never the
checkout's), the demo, then the clone's ``make test`` narrowed to one test by PYTEST_ADDOPTS (the whole
suite is what ``make test`` runs here)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import REPO
from tests.support.auditor import AUDIT_ENV
from tests.support.pages import commands, sh_block

ONE_TEST = "tests/system/test_docs.py::test_the_readme_is_a_short_door_into_the_site"


def install() -> str:
    return sh_block("quickstart.md", "git clone")


def test_the_readmes_make_commands_are_the_quickstarts():
    """The README's two commands are the quickstart's, so the test below runs them too."""
    readme = commands(sh_block("README.md", "make demo"))
    assert readme == [c for c in commands(install()) if c.startswith("make ")] == ["make demo", "make test"]


def test_the_quickstarts_install_commands_run_in_a_fresh_clone(tmp_path: Path):
    real = os.environ.get(AUDIT_ENV) == "1"
    script = install().replace("<this repository>", str(REPO))  # the page's one placeholder
    home = tmp_path / "home"
    home.mkdir()
    venv = str(REPO / ".venv")  # the reader's shell: not this checkout's venv, nor its settings
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PRIVRELEASE_", "VIRTUAL_ENV", "PYTHON"))}
    env |= {"HOME": str(home), "PATH": ":".join(p for p in env["PATH"].split(":") if not p.startswith(venv))}
    if real:
        env["PYTEST_ADDOPTS"] = ONE_TEST
    dry = "" if real else 'make() { command make -n "$@"; }\n'  # make's own dry run: each recipe printed, none run
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    r = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", dry + script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600 if real else 300,
    )
    assert r.returncode == 0, f"{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    clone = tmp_path / "privrelease"
    cloned = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout
    assert cloned == head and head, (cloned, head)  # the checkout's commit, cloned
    if real:
        assert (clone / ".venv" / ".installed").is_file() and (clone / ".venv" / "bin" / "privrelease").is_file()
        releases = home / ".local" / "share" / "privrelease" / "releases" / "census-demo"  # the demo, in the fresh home
        assert len(list(releases.glob("*/manifest.json"))) == 1, r.stdout[-3000:]
        assert "1 passed" in r.stdout, r.stdout[-3000:]
        return
    assert not (clone / ".venv").exists() and not (home / ".local").exists()  # nothing installed, nothing run
    demo, test = r.stdout.split(".venv/bin/privrelease demo\n")
    for out in (demo, test):  # each target first sets up the clone's own .venv from the lock, then installs the clone
        steps = [
            "python3 -m venv .venv",
            "uv pip install --python .venv/bin/python -r requirements.lock.txt",
            "pip install -q --disable-pip-version-check --no-deps -e .",
            "touch .venv/.installed",
        ]
        at = [out.find(step) for step in steps]
        assert -1 not in at and at == sorted(at), (steps, out)
    assert test.index("bash scripts/system-deps.sh") < test.index('.venv/bin/python -m pytest -n 2 --dist load -m "not system"')
