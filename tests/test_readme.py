"""The README's command examples, run as a newcomer copies them.

A newcomer's first commands come from the README. This test reads its ``bash`` and ``yaml`` blocks
from the steward, analyst, auditing and people sections and runs every ``privrelease`` line as
printed, in a fresh home, through bash: optional ``[--flag ...]`` parts are left out, ``a | b``
alternatives are each run, and placeholders (ID) name the dataset the block is about. The only
steps not taken from the README are writing the source files it assumes exist.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from core.datasets.demo import CENSUS_POLICY, census, posts
from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def block(section: str, language: str) -> str:
    """The first fenced ``language`` block under the ``## section`` heading."""
    body = README.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(rf"```{language}\n(.*?)```", body, re.S).group(1)


def commands(text: str, ident: str) -> list[str]:
    """The block's privrelease lines as a user types them: comments dropped, continuations joined,
    [optional] parts left out, each of ``cmd a | b ARG`` run, ID replaced by ``ident``."""
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if not line.startswith("privrelease "):
            continue
        line = re.sub(r"\s*\[[^\]]*\]", "", line).replace(" ID", f" {ident}")
        first, *rest = [part.strip() for part in line.split(" | ")]
        if rest and not rest[0].startswith(("head", "jq", "grep")):
            stem = first.rsplit(" ", 1)[0]
            out += [first, *(f"{stem} {alt}" for alt in rest)]
        else:
            out.append(line)
    return out


@pytest.fixture
def shell(tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "work"
    (home / "data").mkdir(parents=True)
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env.update(PRIVRELEASE_HOME=str(home), PATH=f"{Path(os.sys.executable).parent}:{env['PATH']}")

    def sh(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=300)

    return home, work, sh


def test_the_readmes_commands_run_as_printed(shell):
    home, work, sh = shell
    census(600).to_csv(work / "census.csv", index=False)  # the files the README assumes, in the current folder
    posts(300).to_csv(work / "posts.csv", index=False)
    (work / "request.yaml").write_text(block("The analyst: a release request", "yaml"))
    policy = block("The steward: registering a dataset", "yaml")
    assert yaml.safe_load(policy) == yaml.safe_load(CENSUS_POLICY)  # the README's policy is the demo's
    (work / "census.policy.yaml").write_text(policy)
    (work / "alice.txt").write_text("correct horse battery staple\n")
    ran = []
    for command in commands(block("The steward: registering a dataset", "bash"), "census") + commands(
        block("The analyst: a release request", "bash"), "census"
    ):
        if " drop " in command:
            continue  # run last: the release below needs the rows
        r = sh(command)
        assert r.returncode == 0, f"{command}\n{r.stderr}"
        ran.append(command)
    assert any(c.startswith("privrelease release request.yaml") for c in ran)
    assert sh("privrelease ledger history").stdout.count("census") >= 1
    # the auditing block is about a DP dataset; the steward registers it as the steward block shows
    assert sh("privrelease dataset add posts --source posts.csv --format csv --unit user:user --purpose dp").returncode == 0
    for command in commands(block("Auditing the ledger", "bash"), "posts"):
        r = sh(command)
        assert r.returncode == 0, f"{command}\n{r.stderr}"
        ran.append(command)
    for command in commands(block("People, roles and the gate", "bash"), "alice"):
        r = sh(command)
        assert r.returncode == 0, f"{command}\n{r.stderr}"
        ran.append(command)
    r = sh("privrelease dataset drop census")
    assert r.returncode == 0, r.stderr
    assert len(ran) >= 14, ran
