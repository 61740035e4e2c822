"""The documentation site, held to the code: its commands run as printed, its generated parts are fresh,
its worked requests parse, and the README stays a short door into it.

Every ``bash`` block of the quickstart and of each guide (docs/guides/) runs as printed, the page's
blocks in order in one shell, in a fresh home (a fresh ``$HOME``, so ``~/privrelease`` and the default
home are new). The only steps not taken from a page are writing the source files it says it assumes
(``SOURCES``) and the ``yaml`` blocks whose first line is ``# file: NAME`` (written to NAME, as the reader
saves them). ``sh`` blocks (installing, servers that keep running, PostgreSQL, several hosts) are run as
printed by the tests tests/support/pages.py's ``ELSEWHERE`` names, which read them from the page. Every other
block is marked as what it is (``text``: output, a diagram, a synopsis); a block that is none of these
fails ``test_every_command_block_is_run_or_marked``."""

from __future__ import annotations

import json
import os
import re
import runpy
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from privrelease.core.datasets.demo import CENSUS_POLICY, census, posts
from privrelease.core.mechanisms import MECHANISMS, REGISTRY
from privrelease.core.release import describe, spec
from tests.conftest import REPO
from tests.support.pages import DOCS, ELSEWHERE, blocks, commands, fences, sh_block, starts

EXE = Path(sys.executable).parent / "privrelease"
GUIDED = ("quickstart.md", "guides/steward.md", "guides/analyst.md", "guides/auditor.md", "guides/operator.md", "DATASETS.md")
SOURCES = {  # the files each page says it assumes, in the folder its commands run in
    "quickstart.md": {"people.csv": lambda: census(600)},
    "guides/steward.md": {"census.csv": lambda: census(600), "posts.csv": lambda: posts(300)},
    "DATASETS.md": {"census.csv": lambda: census(600), "census.policy.yaml": lambda: CENSUS_POLICY},
}
gendocs = runpy.run_path(str(REPO / "scripts" / "gendocs.py"))


def saved_files(text: str) -> dict[str, str]:
    """The page's ``yaml`` blocks that name the file a reader saves them as."""
    return {b.split("\n", 1)[0].removeprefix("# file: ").strip(): b for b in blocks(text, "yaml") if b.startswith("# file: ")}


def shell(tmp_path: Path) -> tuple[Path, dict]:
    """A fresh $HOME and a folder to work in, ~/work (holding the checkout's .venv, as the quickstart's reader does)."""
    home = tmp_path / "home"
    work = home / "work"
    work.mkdir(parents=True)
    (work / ".venv").symlink_to(REPO / ".venv")
    drop = (
        "PREFECT_API",
        "PRIVRELEASE_HOME",
        "PRIVRELEASE_DATA_ROOT",
        "PRIVRELEASE_SNAPSHOT_STORE",
        "PRIVRELEASE_LEDGER",
        "XDG_",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(HOME=str(home), PATH=f"{EXE.parent}:{env['PATH']}")
    return work, env


def run_page(page: str, tmp_path: Path, text: str | None = None) -> tuple[subprocess.CompletedProcess, Callable]:
    """Run the page's bash blocks; return what they printed and a shell for more commands in the same home."""
    text = (DOCS / page).read_text() if text is None else text
    work, env = shell(tmp_path)
    for name, source in SOURCES.get(page, {}).items():
        content = source()
        (work / name).write_text(content if isinstance(content, str) else content.to_csv(index=False))
    for name, body in saved_files(text).items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(body)

    def sh(script: str, *flags: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", *flags, "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=600)

    r = sh("\n".join(blocks(text, "bash")), "-e", "-o", "pipefail", "-x")
    ran = [line for line in r.stderr.splitlines() if line.startswith("+ ")]
    assert r.returncode == 0, f"{page}: the command `{ran[-1] if ran else '?'}` failed:\n{r.stderr[-3000:]}"
    return r, sh


def listed(sh: Callable, command: str) -> list[dict]:
    r = sh(f"PRIVRELEASE_HOME=~/privrelease {command} --json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("page", GUIDED)
def test_every_command_on_the_page_runs_as_printed(page, tmp_path):
    r, sh = run_page(page, tmp_path)
    commands = [line for line in r.stderr.splitlines() if line.startswith("+ privrelease ")]
    assert len(commands) >= 3, commands  # the page's own commands ran, not an empty script
    releases = Path(sh("echo ~").stdout.strip()) / "privrelease" / "releases"
    if page == "quickstart.md":  # your own CSV registered, released, and its files where the page says
        folder = releases / "people" / "people-first"
        assert {"data.csv", "data.parquet", "manifest.json", "report.md"} <= {p.name for p in folder.iterdir()}
        assert r.stdout.count("age,occupation,race,sex,hours-per-week") == 1  # only the policy's columns, once
    elif page == "guides/steward.md":  # census registered, then dropped; posts capped as the page says
        assert [d["id"] for d in listed(sh, "privrelease dataset list")] == ["posts"]
        totals = {t["dataset"]: t for t in listed(sh, "privrelease ledger totals")}
        assert totals["posts"]["cap"] == {"epsilon": 3.0, "delta": 1e-06} and "census" in totals
    elif page == "guides/analyst.md":  # the SDC request and the demo's DPNE request, each published
        assert (releases / "census-demo" / "census-2026-q4" / "report.md").is_file()
        assert len(list((releases / "posts-demo").iterdir())) == 1
    elif page == "guides/auditor.md":  # the DP release it audits is on the ledger, charged
        totals = {t["dataset"]: t for t in listed(sh, "privrelease ledger totals")}
        assert totals["posts-demo"]["spent"]["epsilon"] == 1.0 and totals["posts-demo"]["published"] == 1
    elif page == "DATASETS.md":  # checked, then registered from the reader's folder into the default home
        assert [d["id"] for d in json.loads(sh("privrelease dataset list --json").stdout)] == ["census"]
    elif page == "guides/operator.md":  # alice added then removed, and the home backed up
        assert [u["name"] for u in listed(sh, "privrelease user list")] == ["sam"]
        backed = releases.parent.parent / "backups" / "before-upgrade"  # the page's own backup, with the ledger's store
        assert "backup of " in r.stdout and {p.name for p in backed.iterdir()} >= {"backup.json", "privrelease.duckdb"}


MARKED = {"text", "yaml", "json"}  # not commands: output, diagrams and synopses; files and requests
SYNOPSIS = re.compile(r"\[|\||…|\b[A-Z][A-Z_]+\b")  # [optional], a | b, …, or a PLACEHOLDER: not typed as it is


def unrun(texts: dict[str, str]) -> list[str]:
    """The command blocks of ``texts`` (page: its text) that no test runs and that are not marked as what else
    they are: a ``bash`` block off the pages run here, an ``sh`` block no test of ``ELSEWHERE`` runs, a block
    without a language or with another one; and a command in a ``text`` block that is neither a synopsis nor
    one a page's ``bash`` block runs."""
    ran = {" ".join(c.split()) for page in GUIDED if page in texts for b in blocks(texts[page], "bash") for c in commands(b)}
    found = []
    for page, text in texts.items():
        for n, (language, body) in enumerate(fences(text), 1):
            if language == "text":
                typed = [line.strip() for line in body.splitlines() if line.strip().startswith(("privrelease ", "make ", "$ "))]
                found += [
                    f"{page}, block {n} (text): {c}" for c in typed if not SYNOPSIS.search(c) and " ".join(c.split()) not in ran
                ]
            ok = (
                language in MARKED
                or (language == "bash" and page in GUIDED)
                or (language == "sh" and any(p == page and starts(body, start) for p, start in ELSEWHERE))
                or (language == "console" and page == "README.md")  # its commands: the quickstart's (below)
            )
            if not ok:
                found.append(f"{page}, block {n} ({language or 'no language'}): {body.splitlines()[0] if body else ''}")
    return found


def page_texts(root: Path = REPO) -> dict[str, str]:
    docs = {str(p.relative_to(root / "docs")): p.read_text() for p in sorted((root / "docs").rglob("*.md"))}
    return {"README.md": (root / "README.md").read_text()} | docs


def test_every_command_block_is_run_or_marked():
    """Each fenced block of the README and the site is run as printed by a test, or marked as not a command
    (tests/support/pages.py says how); each ``sh`` block's test reads it from the page, so a stale page fails it."""
    assert unrun(page_texts()) == [], (
        "run these in a test (tests/support/pages.py), or fence output, diagrams and synopses as text"
    )
    for (page, start), runner in ELSEWHERE.items():
        assert f'sh_block("{page}", "{start}")' in (REPO / runner).read_text(), f"{runner} does not read {page}'s {start!r}"
        assert sh_block(page, start)  # on the page, once


def test_a_new_unrun_command_block_is_caught(tmp_path):
    """The same check on a copy where a page gains a command no test runs: a bash block on a page the
    runner does not run, an sh block no test reads, a block without a language, a command fenced as text."""
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    assert unrun(page_texts(tmp_path)) == []
    (tmp_path / "docs" / "new.md").write_text(
        "# New\n\n```bash\nprivrelease info\n```\n\n```text\nprivrelease dataset drop posts\n```\n"
    )
    operator = tmp_path / "docs" / "guides" / "operator.md"
    n = len(fences(operator.read_text()))
    operator.write_text(operator.read_text() + "\n```sh\nmake serve-pg\n```\n\n```\nprivrelease ledger verify\n```\n")
    assert unrun(page_texts(tmp_path)) == [
        f"guides/operator.md, block {n + 1} (sh): make serve-pg",  # not `make serve`, which test_serve.py runs
        f"guides/operator.md, block {n + 2} (no language): privrelease ledger verify",
        "new.md, block 1 (bash): privrelease info",
        "new.md, block 2 (text): privrelease dataset drop posts",  # a command, fenced as if it were output
    ]


def test_the_steward_guides_policy_is_the_demos():
    policy = saved_files((DOCS / "guides" / "steward.md").read_text())["census.policy.yaml"]
    assert yaml.safe_load(policy) == yaml.safe_load(CENSUS_POLICY)


def test_a_failing_command_fails_the_page(tmp_path):
    """The runner stops at the first command that fails and names it: a page with a wrong option cannot pass."""
    broken = "```bash\nprivrelease --version\nprivrelease dataset list --no-such-option\nprivrelease info\n```\n"
    with pytest.raises(AssertionError, match="dataset list --no-such-option"):
        run_page("broken.md", tmp_path, broken)


def test_every_worked_request_parses():
    """Each release request the pages show (a YAML block with a dataset and a mechanism) is one the
    request schema and the mechanism's Params accept."""
    seen = set()
    for path in sorted(DOCS.rglob("*.md")):
        for body in blocks(path.read_text(), "yaml"):
            doc = yaml.safe_load(body)
            if isinstance(doc, dict) and {"dataset", "mechanism"} <= set(doc):
                seen.add(spec.parse(doc).mechanism.name)
    assert seen == set(REGISTRY) - {"meds", "eds"}, seen  # meds and eds share MEWS's request on its page


def test_every_mechanism_has_a_page_with_its_generated_parameters():
    for name in MECHANISMS:
        page = REPO / describe.page(name)
        assert f"<!-- params: {name} -->" in page.read_text(), f"{page} has no parameter table for {name}"


def test_generated_pages_are_fresh():
    stale = gendocs["stale"]()
    assert stale == [], f"stale: {[str(p.relative_to(REPO)) for p in stale]}; run: python scripts/gendocs.py --write"


def test_a_stale_page_is_caught(tmp_path):
    """The same check on a copy whose DPNE table lost a bound and whose policy table lost a row."""
    shutil.copytree(DOCS, tmp_path / "docs")
    dpne = tmp_path / "docs" / "mechanisms" / "dpne.md"
    dpne.write_text(dpne.read_text().replace("> 0, <= 50", "> 0"))
    security = tmp_path / "docs" / "SECURITY.md"
    head, table = security.read_text().split(
        "| who | method | route | when | body passed on, or answer |\n|---|---|---|---|---|\n"
    )
    security.write_text(head + table.split("\n", 1)[1])  # the policy's first row gone
    assert sorted(p.name for p in gendocs["stale"](tmp_path)) == ["SECURITY.md", "dpne.md"]


def test_every_page_is_in_the_nav():
    """mkdocs only notes a page missing from the nav; here it fails, so no page is built unreachable."""
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]

    def files(entry: object) -> list[str]:
        if isinstance(entry, str):
            return [entry]
        if isinstance(entry, list):
            return [f for e in entry for f in files(e)]
        return [f for v in entry.values() for f in files(v)]

    listed = files(nav)
    assert sorted(listed) == sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert all((DOCS / f).is_file() for f in listed)


def anchors(page: str) -> set[str]:
    """The anchors of a page's headings, as the site's table of contents makes them (or ``{ #id }``)."""
    found = set()
    for heading in re.findall(r"^#+ (.*)$", page, re.M):
        named = re.search(r"\{ #([\w-]+) \}$", heading)
        found.add(named.group(1) if named else re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", heading.lower()).strip()))
    return found


def test_the_readme_is_a_short_door_into_the_site():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    assert "make demo" in readme and "make test" in readme
    links = re.findall(r"\]\((docs/[^)#]+)(#[^)]*)?\)", readme)
    assert {"docs/quickstart.md", "docs/guides/steward.md", "docs/guides/analyst.md"} <= {f for f, _ in links}
    for target, anchor in links:
        assert (REPO / target).is_file(), target
        assert not anchor or anchor[1:] in anchors((REPO / target).read_text()), f"{target}{anchor}"
    # how to register your own CSV and get a release's files: the README says it and links the sections
    assert "docs/quickstart.md#your-first-own-dataset" in readme and "docs/quickstart.md#get-the-releases-files" in readme
    quickstart = (DOCS / "quickstart.md").read_text()
    assert "## Your first own dataset" in quickstart and "## Get the release's files" in quickstart
    # every command the README shows is one the quickstart runs as printed (its transcripts' `$` lines)
    ran = {c for b in blocks(quickstart, "bash") for c in commands(b)}
    shown = [c.removeprefix("$ ") for b in blocks(readme, "console") for c in commands(b) if c.startswith("$ ")]
    assert len(shown) >= 8 and set(shown) <= ran, set(shown) - ran


def test_no_page_refers_to_internal_notes_or_shared_folders():
    for path in [REPO / "README.md", *DOCS.rglob("*.md")]:
        text = path.read_text()
        assert "../shared" not in text and "/work/" not in text, path


def test_mechanisms_command_prints_each_mechanism_with_its_parameters():
    r = subprocess.run([EXE, "mechanisms"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    sections = r.stdout.split("\n\n")
    assert [s.split(":", 1)[0] for s in sections] == list(MECHANISMS)
    for section, (name, mechanism) in zip(sections, MECHANISMS.items(), strict=True):
        assert f"page: {describe.page(name)}" in section
        for field in mechanism.Params.model_fields:
            assert re.search(rf"^  {re.escape(field)} \(", section, re.M), (name, field)
    assert "epsilon (number; required; > 0, <= 50)" in sections[list(MECHANISMS).index("dpne")]
    r = subprocess.run([EXE, "mechanisms", "ra"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("ra: RA and Enhanced RA") and "dpne" not in r.stdout
    r = subprocess.run([EXE, "mechanisms", "rra"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown mechanism 'rra'; available: ra, dpne" in r.stderr


def test_release_help_lists_the_mechanisms_and_their_pages():
    r = subprocess.run([EXE, "release", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    listed = r.stdout.split("each described on its page:\n", 1)[1]
    for name in MECHANISMS:
        assert re.search(rf"^  {re.escape(name)} +{re.escape(describe.page(name))}$", listed, re.M), name
        assert (REPO / describe.page(name)).is_file()
    assert "privrelease mechanisms [NAME]" in listed


def test_key_domains_are_said_not_to_depend_on_the_data_and_the_aggregates_timing_is_stated():
    """The fourth privacy review (findings 5 and 6): a public key domain was described as something the steward edits
    when the data has a new value, which publishes that value's holder outside any noise; docs/SECURITY.md stated the
    timing of the outlier count and DPNE only."""
    for page in ("mechanisms/aggregate.md", "guides/steward.md"):
        text = " ".join((DOCS / page).read_text().split())
        assert "must not depend on the data" in text and "selected privately" in text, page
        assert "never by adding the value seen" in text or "never adding the value seen" in text, page
    security = " ".join((DOCS / "SECURITY.md").read_text().split())
    for said in ("three query plans", "occupied steps of its interval", "exact MPFR pass"):
        assert said in security, said
