"""A command-line release with no Prefect server does not import Prefect (a second of its time), and
still finds a server that Prefect's own settings name: the environment or a profile."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

ASK = (
    "import sys\n"
    "from privrelease.cli import launch\n"
    "if len(sys.argv) > 1: launch._maybe_configured = lambda cwd: False\n"  # the weakened variant: no file is read
    "print(launch.prefect_api_url(), 'prefect' in sys.modules)\n"
)


def ask(tmp: Path, weakened: bool = False, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    base |= {"PYTHONPATH": str(REPO), "PRIVRELEASE_HOME": str(tmp / "home"), "PREFECT_HOME": str(tmp / "prefect")}
    argv = [sys.executable, "-c", ASK, *(["weakened"] if weakened else [])]
    done = subprocess.run(argv, cwd=tmp, env=base | env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_no_server_configured_means_no_prefect_import(tmp_path: Path):
    (tmp_path / "prefect").mkdir()
    assert ask(tmp_path) == "None False"
    assert ask(tmp_path, PREFECT_API_URL="http://127.0.0.1:9/api") == "http://127.0.0.1:9/api False"


def test_a_server_named_in_a_profile_is_still_found(tmp_path: Path):
    (tmp_path / "prefect").mkdir()
    (tmp_path / "prefect" / "profiles.toml").write_text(
        'active = "ours"\n\n[profiles.ours]\nPREFECT_API_URL = "http://127.0.0.1:9/api"\n'
    )
    assert ask(tmp_path) == "http://127.0.0.1:9/api True"
    # without reading Prefect's files the profile's server would be missed, and the release run directly
    assert ask(tmp_path, weakened=True) == "None False"


def test_a_server_named_in_the_working_folder_is_still_found(tmp_path: Path):
    (tmp_path / "prefect").mkdir()
    (tmp_path / "prefect.toml").write_text('[api]\nurl = "http://127.0.0.1:9/api"\n')
    assert ask(tmp_path) == "http://127.0.0.1:9/api True"
    assert ask(tmp_path, weakened=True) == "None False"
