"""The ``privrelease`` command as a user runs it: a real process, real stdout/stderr, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import duckdb
import numpy as np
import pytest

from privrelease.core.datasets.demo import census, mail
from privrelease.core.spam import decision as D
from privrelease.core.spam import features as F
from tests.conftest import REPO
from tests.support.helpers import write_policy, write_request
from tests.support.pages import DOCS, blocks, sh_block

EXE = str(Path(os.sys.executable).parent / "privrelease")


def run(home: Path, *args: str, env: dict | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    environ.update({"PRIVRELEASE_HOME": str(home)}, **(env or {}))
    return subprocess.run([EXE, *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=300)


def test_dataset_and_ledger_commands(tmp_path: Path):
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    census(300).to_csv(home / "data" / "census.csv", index=False)
    r = run(home, "dataset", "add", "census", "--source", "census.csv", "--format", "csv", "--unit", "record", "--purpose", "dp")
    assert r.returncode == 2 and r.stderr == (  # a relative path is relative to the current folder, not the data root
        f"error: --source 'census.csv' is not a file in the current folder {str(REPO)!r} (a relative path is relative "
        f"to the current folder); the data root has one: pass --source {home / 'data' / 'census.csv'}\n"
    )
    r = run(
        home,
        "dataset",
        "add",
        "census",
        "--source",
        "census.csv",
        "--format",
        "csv",
        "--unit",
        "record",
        "--purpose",
        "dp",
        cwd=home / "data",
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "dataset census: registration 1, unit record, purpose dp, 11 columns, 300 rows (public)"
    assert "schema (inferred from the file, now public" in r.stdout and "  age:\n    type: integer" in r.stdout
    (tmp_path / "schema.yaml").write_text(r.stdout.split("--schema next time):\n", 1)[1])
    r = run(
        home,
        "dataset",
        "add",
        "census2",
        "--source",
        str(home / "data" / "census.csv"),
        "--format",
        "csv",
        "--unit",
        "record",
        "--purpose",
        "dp",
        "--schema",
        str(tmp_path / "schema.yaml"),
    )
    assert r.returncode == 2 and r.stderr.startswith("error: this source is already registered as dataset 'census'")
    r = run(home, "dataset", "list")
    assert r.returncode == 0 and r.stdout.splitlines()[0].startswith("dataset census: registration 1")
    shown = json.loads(run(home, "dataset", "show", "census").stdout)
    assert set(shown) == {
        "id",
        "version",
        "unit",
        "purpose",
        "adjacency",
        "rows",
        "registered",
        "schema",
        "budget",
        "published_releases",
    }
    assert "source" not in json.dumps(shown) and "digest" not in json.dumps(shown)
    r = run(home, "dataset", "refresh", "census")
    assert r.returncode == 0 and r.stdout.startswith("dataset census: registration 2")

    r = run(home, "ledger", "set-budget", "census", "--epsilon", "2", "--delta", "1e-6")
    assert r.returncode == 0 and "epsilon=2 delta=1e-06" in r.stdout
    r = run(home, "ledger", "set-budget", "census", "--epsilon", "-1", "--delta", "0")
    assert r.returncode == 2 and r.stderr.startswith("error: invalid budget: epsilon must be finite and >= 0")
    assert "Traceback" not in r.stderr
    for bad_id in ("../x", "nope", ""):
        r = run(home, "ledger", "set-budget", bad_id, "--epsilon", "1", "--delta", "0")
        assert r.returncode == 2 and r.stderr.startswith("error: dataset"), r.stderr
    history = json.loads(run(home, "ledger", "history", "--json").stdout)
    assert [(e["seq"], e["status"]) for e in history] == [(1, "registered"), (2, "refreshed"), (3, "cap")]
    assert history[2]["epsilon"] == 2.0 and history[1]["detail"] == {"version": 2, "unit": "record", "purpose": "dp",
                                                                     "columns": 11, "rows": 300}  # fmt: skip
    totals = json.loads(run(home, "ledger", "totals", "--json").stdout)
    assert totals == [
        {
            "dataset": "census",
            "kind": "dp",
            "adjacency": None,
            "cap": {"epsilon": 2.0, "delta": 1e-6},
            "spent": {"epsilon": 0.0, "delta": 0.0},
            "remaining": {"epsilon": 2.0, "delta": 9e-7},
            "remaining_by": "basic",
            "releases": 0,
            "published": 0,
            "failed": 0,
            "pending": 0,
            "gdp": None,
            "filter": None,
            "pld": None,
            "next": None,
            "spent_share": None,
            "room": None,
        }
    ]
    assert run(home, "ledger", "totals").stdout.splitlines()[1].startswith("census           dp")
    assert "cap" in run(home, "ledger", "history", "--dataset", "census").stdout
    ok = run(home, "ledger", "verify")
    assert ok.returncode == 0 and "3 entries" in ok.stdout
    r = run(home, "ledger", "recover")
    assert r.returncode == 0 and r.stdout.splitlines()[0] == "no interrupted release to settle"
    r = run(home, "dataset", "drop", "census")
    assert r.returncode == 0 and r.stdout.startswith("dataset census: stored rows deleted")
    assert run(home, "dataset", "list").stdout.startswith("no datasets registered")
    con = duckdb.connect(str(home / "privrelease.duckdb"))
    con.execute("UPDATE ledger SET epsilon = 200 WHERE seq = 3")
    con.close()
    bad = run(home, "ledger", "verify")
    assert bad.returncode == 3 and "FAILED at entry 3" in bad.stderr


def typed(
    home: Path, command: str, cwd: Path, path: str = "/usr/bin:/bin", env: dict | None = None
) -> subprocess.CompletedProcess:
    """``command`` as a user types it into a shell whose PATH is ``path`` (without the venv: after make demo)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    environ.update(PRIVRELEASE_HOME=str(home), PATH=path, **(env or {}))
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=environ, capture_output=True, text=True, timeout=300)


def _tree(folder: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path under ``folder``, with its mode and (for files) its bytes."""
    return {str(p.relative_to(folder)): (p.stat().st_mode, p.read_bytes() if p.is_file() else None) for p in folder.rglob("*")}


def _people(folder: Path, rows: int = 60) -> Path:
    """A steward's source with an identifier, zip codes with leading zeros, an age with a few '?' and 'NA'."""
    lines = ["patient_id,zip,age,score,ward"]
    for i in range(rows):
        age = "NA" if i == 5 else "?" if i in (7, 9) else str(20 + i % 50)
        lines.append(f"P{1000 + i},0{2100 + i % 7},{age},{i % 9 / 10},{'ABC'[i % 3]}")
    (folder / "people.csv").write_text("\n".join(lines) + "\n")
    return folder / "people.csv"


def test_registration_as_a_steward_types_it_from_their_own_folder(tmp_path: Path):
    """check (a dry run) → add with --na → the identifier warning's advice (drop the column, refresh) as written →
    refresh --schema; every path relative to the folder the steward works in, none under the data root."""
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    _people(work)
    (work / "other.csv").write_text("a,b\n1,x\n2,y\n")
    assert (
        run(
            home, "dataset", "add", "other", *"--source other.csv --format csv --unit record --purpose dp".split(), cwd=work
        ).returncode
        == 0
    )
    before = _tree(home)
    args = "--source people.csv --format csv --unit record --purpose sdc".split()
    r = run(home, "dataset", "check", "people", *args, cwd=work)
    assert r.returncode == 0, r.stderr
    said = r.stdout.splitlines()
    assert said[0] == "dataset people: a dry run, not registered, unit record, purpose sdc, 5 columns, 60 rows (public)"
    assert said[1] == (
        "warning: column 'age' is read as text because 2 of its 59 values are not numbers (for example '?'); if they "
        'mean a missing value, declare them with --na "NA,?", else fix them in the source.'
    )
    assert "  zip:\n    type: string" in r.stdout and "  age:\n    type: string" in r.stdout  # 02100 is a code
    assert "warning: column 'patient_id' holds a different value in every row" in r.stdout
    assert said[-1].startswith("nothing was registered or written")
    assert _tree(home) == before  # byte for byte: no snapshot, no row, no lock file, no folder
    r = run(home, "dataset", "add", "people", *args, "--na", "NA,?", cwd=work)
    assert r.returncode == 0, r.stderr
    assert "  age:\n    type: integer\n    nullable: true" in r.stdout and "is read as text" not in r.stdout
    warning = next(line for line in r.stdout.splitlines() if "'patient_id'" in line)
    advice = warning.split("drop it from the source and run ", 1)[1].split(" (the column leaves the schema)")[0]
    assert advice.split()[1:] == ["dataset", "refresh", "people"] and advice.split()[0] in ("privrelease", EXE)
    (work / "people.csv").write_text(
        "".join(line.split(",", 1)[1] + "\n" for line in (work / "people.csv").read_text().splitlines())
    )
    r = typed(home, advice, cwd=work)  # the advice, as written
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "dataset people: registration 2, unit record, purpose sdc, 4 columns, 60 rows (public)",
        "warning: columns ['patient_id'] are no longer in the source: they leave the registered schema (public).",
    ]
    schema = json.loads(run(home, "dataset", "show", "people").stdout)["schema"]
    assert list(schema) == ["zip", "age", "score", "ward"] and schema["age"] == {"type": "integer", "nullable": True}
    (work / "new.yaml").write_text("columns:\n  zip: {type: string}\n  age: {type: float, nullable: true}\n"
                                   "  score: {type: float}\n  ward: {type: string}\n")  # fmt: skip
    r = run(home, "dataset", "refresh", "people", "--schema", "new.yaml", cwd=work)
    assert r.returncode == 0 and r.stdout.startswith("dataset people: registration 3"), r.stderr
    assert json.loads(run(home, "dataset", "show", "people").stdout)["schema"]["age"] == {"type": "float", "nullable": True}
    r = run(home, "dataset", "refresh", "people", "--schema", "missing.yaml", cwd=work)
    assert r.returncode == 2 and r.stderr == f"error: --schema {str(work / 'missing.yaml')!r} is not a file.\n"


def test_one_type_rule_for_every_format_missing_values_and_decimal_commas(tmp_path: Path):
    """The same table as CSV, Parquet and JSON lines gets the same schema (zip codes stay text); --na and --decimal
    read missing values and decimal commas in every one; a failed registration leaves no folder behind."""
    import pandas as pd

    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    table = pd.read_csv(_people(work), dtype=str, keep_default_na=False)
    table.to_parquet(work / "people.parquet")
    table.to_json(work / "people.jsonl", orient="records", lines=True)
    schemas = []
    for fmt in ("csv", "parquet", "jsonl"):
        r = run(
            home,
            "dataset",
            "check",
            "p",
            "--source",
            f"people.{fmt}",
            "--format",
            fmt,
            *"--unit record --purpose dp --na NA,?".split(),
            cwd=work,
        )
        assert r.returncode == 0, r.stderr
        schemas.append(r.stdout.split("registered):\n", 1)[1])
    assert schemas[0] == schemas[1] == schemas[2] and "  zip:\n    type: string" in schemas[0]
    assert "  age:\n    type: integer\n    nullable: true" in schemas[0] and "  score:\n    type: float" in schemas[0]
    (work / "eu.csv").write_text("amount;label\n1,5;a\n2,25;b\n-3;c\n")
    eu = "--source eu.csv --format csv --unit record --purpose dp --delimiter ;".split()
    r = run(home, "dataset", "check", "eu", *eu, cwd=work)
    assert (
        "warning: column 'amount' is read as text: 2 of its 3 values use the decimal separator ',' (for example '1,5', "
        "'2,25'); pass --decimal , if they are numbers."
    ) in r.stdout
    (work / "bad.yaml").write_text("columns:\n  amount: {type: integer}\n  label: {type: string}\n")
    r = run(home, "dataset", "add", "bad", *eu, "--decimal", ",", "--schema", "bad.yaml", cwd=work)
    assert r.returncode == 2 and "values not of type integer" in r.stderr
    assert not (home / "datasets").exists()  # a failed registration leaves no folder behind
    # a declared domain (the public keys of a DP table) is checked against the file: a value outside it is refused
    (work / "domain.yaml").write_text("columns:\n  amount: {type: float}\n  label: {type: string, domain: [a, b]}\n")
    r = run(home, "dataset", "add", "eu", *eu, "--decimal", ",", "--schema", "domain.yaml", cwd=work)
    assert r.returncode == 2 and "column 'label': 1 values outside its declared domain (first at lines [4])" in r.stderr
    assert not (home / "datasets").exists()
    r = run(home, "dataset", "add", "eu", *eu, "--decimal", ",", cwd=work)
    assert r.returncode == 0 and "  amount:\n    type: float" in r.stdout, r.stderr
    assert run(home, "dataset", "refresh", "eu").returncode == 0  # read again with the registered separator
    r = run(
        home,
        "dataset",
        "add",
        "bad",
        *eu[:1],
        "eu.csv",
        "--format",
        "csv",
        *"--unit record --purpose dp --decimal ,".split(),
        cwd=work,
    )
    assert r.returncode == 2 and r.stderr.startswith("error: --decimal ',' is also the CSV delimiter")
    assert [p.name for p in (home / "datasets").iterdir()] == ["eu"]


def test_bad_request_exits_2_with_one_paragraph_and_no_traceback(tmp_path: Path):
    spec = write_request(tmp_path / "case", mechanism__params__p=[0.5] * 9)
    r = run(tmp_path / "home", "release", str(spec))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(
        "error: the release request is invalid: mechanism.ra.params: p must sum to 1"
    )
    r = run(tmp_path / "home", "release", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "is not a file" in r.stderr


def test_release_in_a_real_process(prefect_server, tmp_path: Path):
    """Against the session's Prefect server, after the steward registered the table."""
    import prefect.settings

    env = {"PREFECT_API_URL": prefect.settings.PREFECT_API_URL.value()}
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    census(500).to_csv(home / "data" / "census.csv", index=False)
    assert (
        run(
            home,
            "dataset",
            "add",
            "census",
            "--source",
            str(home / "data" / "census.csv"),
            "--format",
            "csv",
            "--unit",
            "record",
            "--purpose",
            "sdc",
            "--policy",
            str(write_policy(tmp_path)),
        ).returncode
        == 0
    )
    r = run(home, "release", str(write_request(tmp_path / "good")), env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("release census-") and lines[1].startswith("folder ")
    assert (Path(lines[1].split(" ", 1)[1]) / "manifest.json").is_file()
    r = run(home, "release", str(write_request(tmp_path / "bad", mechanism__params__qi=["age", "no-such-column"])), env=env)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: dataset 'census' has no column 'no-such-column'; its columns are "
        "['age', 'workclass', 'education', 'marital-status', 'occupation', "
        "'relationship', 'race', 'sex', 'native-country', 'hours-per-week', 'salary']."
    ]
    r = run(home, "ledger", "set-budget", "census", "--epsilon", "1", "--delta", "0")
    assert r.returncode == 2 and "registered for statistical disclosure control" in r.stderr


def test_internal_error_exits_1_without_details(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "privrelease.duckdb").write_text("this is not a database")
    r = run(home, "ledger", "history")
    assert r.returncode == 1 and r.stderr.startswith("internal error (") and "Traceback" not in r.stderr
    r = run(home, "dataset", "list")
    assert r.returncode == 1 and r.stderr.startswith("internal error (") and "Traceback" not in r.stderr


@pytest.mark.system
def test_demo_in_a_fresh_home(tmp_path: Path):
    """The quickstart's first command (``make demo``), as a newcomer runs it: a fresh home, its own temporary Prefect server."""
    home = tmp_path / "home"
    r = run(home, "demo", "--rows", "2000", env={"PREFECT_HOME": str(tmp_path / "prefect"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    folder = Path(next(line for line in r.stdout.splitlines() if line.startswith("release folder:")).split(":", 1)[1].strip())
    assert (folder / "manifest.json").is_file() and (folder / "report.md").is_file()
    # it says what it did as the steward, where the examples are, and what to type next
    said = r.stdout.splitlines()
    assert said[0] == "As the data steward, the demo registered:"
    assert said[1].split() == ["census-demo", "sdc", "unit", "record", "2000", "rows", "no", "budget", "(SDC)"]
    per_user = "dp unit {} rows not public budget epsilon=20 delta=1e-05".format
    assert said[2].split() == ["posts-demo", *per_user("user:user").split()]
    assert said[4].split() == ["payroll-demo", *per_user("user:person").split()]
    assert said[5] == f"Example release requests, an analyst's: {home / 'requests'}/"
    assert "(sdc: recorded on the ledger, not DP, no budget spent)" in r.stdout
    assert "chain:          recode → ra → suppress" in r.stdout
    assert "risk:           k = 3 on the steward's key (the policy asks k >= 3); rows shuffled" in r.stdout
    # privrelease is not on the PATH (make demo runs .venv/bin/privrelease): the next commands say how they run
    printed = said[said.index("Next:") + 1].split("#")[0].strip()
    assert printed.split() == [EXE, "--home", str(home), "release", str(home / "requests" / "posts-dpne.yaml")]
    assert said[said.index("Next:") + 4] == f"  (or `source {Path(EXE).parent / 'activate'}` first, then type privrelease)"
    r = typed(home, printed, cwd=tmp_path)  # the next command, as printed, in a shell without the venv on its PATH
    assert r.returncode == 0 and "charged epsilon=" in r.stdout, r.stderr[-2000:]
    r = typed(home, f"source {Path(EXE).parent / 'activate'} && privrelease --home {home} ledger totals", cwd=tmp_path)
    assert r.returncode == 0 and "posts-demo" in r.stdout, r.stderr[-2000:]
    r = typed(home, f"{EXE} demo --prepare-only --rows 2000", cwd=tmp_path, path=f"{Path(EXE).parent}:/usr/bin:/bin")
    assert r.stdout.splitlines()[-1] == f"Next: privrelease --home {home} release {home / 'requests' / 'census-ra.yaml'}"
    r = run(home, "dataset", "list")
    assert r.returncode == 0 and [line.split(":")[0] for line in r.stdout.splitlines()] == [
        "dataset census-demo",
        "dataset logins-demo",
        "dataset payroll-demo",
        "dataset posts-demo",
    ]


def test_help_version_info_and_a_closed_pipe(tmp_path: Path):
    home = tmp_path / "home"
    r = run(home, "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: privrelease")
    for command in ("release", "demo", "info", "dataset", "ledger", "spam"):
        assert command in r.stdout
    r = run(home, "--version")
    assert r.returncode == 0 and r.stdout.strip() == "privrelease 0.1.0"
    r = run(home, "info")
    assert r.returncode == 0 and r.stdout.splitlines()[:3] == [
        "version         0.1.0",
        f"home            {home}",
        "home_from       $PRIVRELEASE_HOME",
    ]
    info = json.loads(run(home, "info", "--json").stdout)
    assert info["data_root"] == str(home / "data") and info["datasets"] == [] and info["ledger_head"] is None
    assert info["snapshot_store"] == f"{home / 'datasets'} ($PRIVRELEASE_SNAPSHOT_STORE unset: this worker's home)"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "PRIVRELEASE_HOME"))}
    environ["HOME"] = str(tmp_path / "user")
    r = subprocess.run([EXE, "info", "--json"], cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=120)
    assert json.loads(r.stdout)["home"] == str(tmp_path / "user" / ".local" / "share" / "privrelease")  # not ./.privrelease
    r = subprocess.run(
        f"{EXE} --home {home} dataset list --json | head -1", shell=True, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and r.stdout == "[]\n" and r.stderr == ""


def test_release_summary_json_and_quiet(tmp_path: Path):
    """Without a Prefect server configured, a release runs directly: no temporary server."""
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    census(400).to_csv(home / "data" / "census.csv", index=False)
    assert (
        run(
            home,
            "dataset",
            "add",
            "census",
            "--source",
            str(home / "data" / "census.csv"),
            "--format",
            "csv",
            "--unit",
            "record",
            "--purpose",
            "sdc",
            "--policy",
            str(write_policy(tmp_path)),
        ).returncode
        == 0
    )
    r = run(home, "release", str(write_request(tmp_path / "a")))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("release census-") and lines[1].startswith("folder ")
    assert lines[2] == "mechanism ra; sdc: recorded on the ledger, not DP, no budget spent" and lines[3].startswith("result pa=")
    assert lines[4] == f"home {home}" and "Starting temporary server" not in r.stderr
    r = run(home, "release", str(write_request(tmp_path / "b")), "--quiet")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 2
    summary = json.loads(run(home, "release", str(write_request(tmp_path / "c")), "--json").stdout)
    assert summary["mechanism"] == "ra" and summary["privacy"]["kind"] == "sdc" and summary["budget_next"] is None
    assert set(summary["headline"]) == {"pa", "pa_max", "k"}  # k: the smallest key cell of the released table


@pytest.mark.system
def test_spam_commands_as_typed(tmp_path: Path):
    """The spam training page's commands as printed (docs/mechanisms/spam-training.md): split → train (its flow, on
    Prefect's temporary server) → classify, each a real process, typed one after the other from the user's own
    folder with the paths the previous command wrote (relative to that folder). The spec is the page's, saved
    where it says (its run id and its mail files, relative to its folder), with test-sized keys and rounds."""
    import yaml

    home, work = tmp_path / "home", tmp_path / "work"  # the user's own folder, outside the data root
    (work / "mail").mkdir(parents=True)
    (work / "corpus.jsonl").write_text("".join(json.dumps(m) + "\n" for m in mail(240, 5)))
    page = (DOCS / "mechanisms" / "spam-training.md").read_text()
    (saved,) = [b for b in blocks(page, "yaml") if b.startswith("# file: mail/spam.yaml")]
    doc = yaml.safe_load(saved) | {
        "features": {"modulus": 100_000, "reduction": "hash", "dimension": 256, "seed": 0},
        "key_bits": 512,
        "learning_rate": 1e-4,
        "rounds": 2,
        "mode": "batch",
        "dp": None,
    }
    (work / "mail" / "spam.yaml").write_text(yaml.safe_dump(doc))
    (work / "message.eml").write_text("Subject: x\n\nfree money, click here now, winner claim your prize")
    env = {"PRIVRELEASE_TEST_MODE": "1", "PREFECT_HOME": str(tmp_path / "prefect")}  # 512-bit keys need test mode
    run_id, folder = doc["run_id"], work / "mail"
    page_block = sh_block("mechanisms/spam-training.md", "privrelease spam split")
    r = typed(home, "set -e\n" + page_block, work, f"{Path(EXE).parent}:/usr/bin:/bin", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[0] == str(folder / "user-1.jsonl") and (folder / "user-3.jsonl").is_file(), r.stdout
    assert f"run {run_id}: AUC private " in r.stdout and f"folder {home / 'spam' / run_id}" in r.stdout
    assert r.stdout.splitlines()[-1] == "spam", r.stdout  # the message, classified with the run's model
    assert f"preparing run {run_id}'s classifier (once per model): 256 of 256 weights encrypted" in r.stderr
    # against the plaintext twin (the same mail pooled, the same rule, its cutoff chosen the same way): 10 held-out
    # spam and 10 ham, as a user types them, in one command
    run_folder, held_out = home / "spam" / run_id, mail(400, 9)[200:]
    report = json.loads((run_folder / "report.json").read_text())
    chosen = [m for m in held_out if m["label"] == "spam"][:10] + [m for m in held_out if m["label"] == "ham"][:10]
    for i, message in enumerate(chosen):
        (folder / f"held-{i}.eml").write_text(message["text"])
    r = run(home, "spam", "classify", run_id, *(str(folder / f"held-{i}.eml") for i in range(20)), env=env)
    assert r.returncode == 0 and "preparing" not in r.stderr, r.stderr[-2000:]
    said = [line.split("\t") for line in r.stdout.splitlines()]
    assert [name for _, name in said] == [str(folder / f"held-{i}.eml") for i in range(20)]
    params = F.FeatureParams(**{k: v for k, v in report["features"].items() if k != "data_dependent"})
    xs = [F.Reducer(params).apply(F.grams(m["text"], params.modulus)) for m in chosen]
    twin = [D.label(np.load(run_folder / "twin.npy"), x, report["decision_plain"]["cutoff_units"]) for x in xs]
    assert [label for label, _ in said] == twin
    assert [label for label, _ in said] == [
        D.label(np.load(run_folder / "model.npy"), x, report["decision"]["cutoff_units"]) for x in xs
    ]
    flagged = [label == "spam" for label, _ in said]
    sign = [D.label(np.load(run_folder / "model.npy"), x, 0) == "spam" for x in xs]  # what the bare sign would say
    assert (sum(sign[:10]), sum(flagged[:10]) > sum(sign[:10]), sum(flagged[10:]) <= 1) == (0, True, True), (sign, said)
    r = run(home, "spam", "classify", "nope", str(work / "message.eml"), env=env)
    assert r.returncode == 2 and r.stderr.startswith("error: no trained spam run 'nope'")
    r = run(home, "spam", "classify", f"../spam/{run_id}", str(work / "message.eml"), env=env)  # a path, not a run id
    assert r.returncode == 2 and r.stderr.startswith("error: the run id must be 1-80 characters of letters, digits")


@pytest.mark.system
def test_concurrent_first_start_of_prefect_in_a_fresh_home(tmp_path: Path):
    """Eight processes start Prefect's temporary server on one new database at once (without the lock,
    2 and 4 of 8 printed migration tracebacks in two trials here): the first
    migrates it under the lock, the others find it ready; each runs a flow, none shows a traceback."""
    code = (
        "from privrelease.cli.launch import prefect_env as _prefect_env, start_prefect as _start_prefect; from pathlib import Path; import sys; "
        "_prefect_env(Path(sys.argv[1])); _start_prefect(); from prefect import flow; "
        "print(flow(name='probe')(lambda: 41)() + 1)"
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    procs = [
        subprocess.Popen(
            [os.sys.executable, "-c", code, str(tmp_path)],
            cwd=REPO,
            env=environ,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(8)
    ]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [err[-1500:] for _, err in results]
    assert all(out.strip().endswith("42") and "Traceback" not in err for out, err in results)
