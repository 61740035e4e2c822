"""privrelease as a package people install (#55): ``uv build`` makes a wheel whose one import namespace is
``privrelease`` (with the schemas, suites and pages it reads as package data); installed into a clean venv, from
the lock, its ``privrelease`` command runs the demo in another folder, with no checkout anywhere on its path,
and nothing named ``core``, ``cli``, ``flows`` or ``gate`` can be imported there.

The wheel is built from a copy of the tracked files (the checkout's own build folders untouched); the install takes
the lock's packages from uv's cache, which ``make`` filled."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import REPO

UV = REPO / ".venv" / "bin" / "uv"


def run(argv: list, cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, argv))}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def top_level(wheel: Path) -> set[str]:
    """The names a wheel puts at the top of site-packages, its dist-info folder left out."""
    tops = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    return {n for n in tops if not n.endswith(".dist-info")}


def test_the_wheel_installs_into_a_clean_venv_and_runs_the_demo_elsewhere(tmp_path):
    source = tmp_path / "source"
    tracked = run(["git", "ls-files", "-z"], REPO).stdout.split("\0")
    for name in filter(None, tracked):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    run([UV, "build", "--wheel", "--out-dir", tmp_path / "dist", source], tmp_path)
    (wheel,) = (tmp_path / "dist").glob("privrelease-*.whl")
    assert top_level(wheel) == {"privrelease"}
    assert {"privrelease/schemas/suites/census_demo.json", "privrelease/gate/static/catalogue.html"} <= set(
        zipfile.ZipFile(wheel).namelist()
    )

    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    run([UV, "venv", "-q", "--python", base, venv], tmp_path)
    run([UV, "pip", "install", "-q", "--python", venv / "bin" / "python", "-r", REPO / "requirements.lock.txt", wheel], tmp_path)

    elsewhere, home = tmp_path / "elsewhere", tmp_path / "home"
    elsewhere.mkdir()
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path / "user"), "LANG": "C.UTF-8"}
    assert not any(k.startswith(("PYTHONPATH", "PRIVRELEASE_")) for k in env)
    version = run(["privrelease", "--version"], elsewhere, env).stdout.strip()
    assert version.startswith("privrelease ") and version.split()[1] in wheel.name

    demo = run(["privrelease", "--home", home, "demo"], elsewhere, env)
    assert "release folder:" in demo.stdout and "k = 3 on the steward's key" in demo.stdout, demo.stdout[-2000:]
    assert len(list((home / "releases" / "census-demo").glob("*/manifest.json"))) == 1
    totals = json.loads(run(["privrelease", "--home", home, "ledger", "totals", "--json"], elsewhere, env).stdout)
    assert {t["dataset"] for t in totals} >= {"census-demo", "posts-demo"}

    where = run(["python", "-c", "import privrelease; print(privrelease.__file__)"], elsewhere, env).stdout.strip()
    assert Path(where).is_relative_to(venv) and not Path(where).is_relative_to(REPO), where
    for other in ("core", "cli", "flows", "gate"):
        refused = subprocess.run(["python", "-c", f"import {other}"], cwd=elsewhere, env=env, capture_output=True, text=True)
        assert refused.returncode != 0 and f"No module named '{other}'" in refused.stderr, (other, refused.stderr)


def test_the_check_sees_a_top_level_package(tmp_path):
    """The weakened variant: a pyproject that installs ``core`` beside ``privrelease`` (as ours did) puts a second
    top-level name in the wheel, which the test above refuses."""
    source = tmp_path / "source"
    (source / "privrelease").mkdir(parents=True)
    (source / "core").mkdir()
    (source / "privrelease" / "__init__.py").write_text('__version__ = "0"\n')
    (source / "core" / "__init__.py").write_text("")
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "privrelease"\nversion = "0"\n'
        '[tool.setuptools.packages.find]\ninclude = ["privrelease*", "core*"]\n'
    )
    run([UV, "build", "--wheel", "--out-dir", tmp_path / "dist", source], tmp_path)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    assert top_level(wheel) == {"privrelease", "core"}  # what the real check refuses
