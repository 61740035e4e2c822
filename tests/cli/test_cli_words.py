"""What the command line says, as a user types it (#42): ledger history in readable lines, clear errors for a
dataset that is not there or a file in another format, and --home after the subcommand."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from privrelease.core.datasets.demo import census, posts
from privrelease.core.ledger.ledger import Ledger
from privrelease.core.privacy.budget import Budget
from tests.cli.test_cli import run
from tests.support.helpers import register

DPNE = {"text_column": "text", "epsilon": 1.0, "delta": 1e-7, "T": 4, "delta0": 10, "tokenizer": "words"}


def test_history_lines_are_short_and_say_what_happened(tmp_path: Path):
    home = tmp_path / "home"
    register(home, posts(300), "posts", unit="user:user", purpose="dp")
    Ledger(home / "privrelease.duckdb").set_budget("posts", Budget(10.0, 1e-5))
    request = tmp_path / "posts.yaml"
    request.write_text(yaml.safe_dump({"dataset": "posts", "mechanism": {"name": "dpne", "params": DPNE}}))
    r = run(home, "release", str(request))
    assert r.returncode == 0, r.stderr
    release = r.stdout.split()[1]
    # what the next release like it can take, beside the cap, and what was spent under the accountant that admits
    assert "\nbudget the next release like this can take epsilon ≤ " in r.stdout
    assert "(at delta=1e-07); cap epsilon=10, delta=1e-05; spent " in r.stdout

    request.write_text(yaml.safe_dump({"dataset": "posts", "mechanism": {"name": "dpne", "params": DPNE | {"epsilon": 30}}}))
    r = run(home, "release", str(request))  # refused by the cap: plain words; the accounting with --verbose
    assert r.returncode == 2 and r.stderr.startswith(
        "error: this release needs epsilon=30, delta=1e-07 but dataset 'posts' cannot take it (cap epsilon=10, delta=1e-05; spent "
    )
    assert r.stderr.endswith(" (--verbose adds the accounting behind it)\n") and "Accounting detail" not in r.stderr
    assert "as the Rényi filter counts it" in r.stderr and "The next release like this can take epsilon ≤ " in r.stderr
    r = run(home, "release", str(request), "--verbose")
    assert r.returncode == 2 and "Accounting detail. What binds: under the admission filter, epsilon" in r.stderr

    lines = run(home, "ledger", "history").stdout.splitlines()
    assert len(lines) == 5 and max(map(len, lines)) <= 120, lines  # a DPNE charge's detail was 681 characters
    assert lines[1].endswith(" posts          registered: version 1 (user:user, dp, 2 columns)")  # rows not public
    assert lines[3].endswith(f"posts          {release} dpne: charged epsilon=1 delta=1e-07 (by {lines[3].split('(by ')[1]}")
    assert lines[4].endswith(f"{release}: published")
    verbose = run(home, "ledger", "history", "--verbose").stdout
    assert "      detail: admission={'mode': 'events'" in verbose and "events=3 parts" in verbose
    shown = json.loads(run(home, "ledger", "show", "3").stdout)
    assert shown["seq"] == 3 and shown["release_id"] == release and len(shown["detail"]["events"]) == 3
    r = run(home, "ledger", "show", "9")
    assert r.returncode == 2 and r.stderr == f"error: the ledger of home {home} has no entry #9; it has entries #1 to #4.\n"


def test_a_dataset_that_is_not_there_is_an_error_naming_the_home(tmp_path: Path):
    home = tmp_path / "home"
    register(home, census(100), "census", keys=["age"])
    r = run(home, "ledger", "history", "--dataset", "nosuch")
    assert r.returncode == 2 and r.stdout == ""  # it printed a header and exited 0
    assert (
        r.stderr == f"error: no dataset 'nosuch' in the ledger or the registry of home {home}; the datasets there are census.\n"
    )
    assert run(home, "ledger", "history", "--dataset", "census").returncode == 0
    r = run(home, "dataset", "show", "x")
    assert r.returncode == 2 and r.stderr.startswith("error: dataset 'x' is not registered; the data steward registers it")
    assert r.stderr.endswith(f"; the home searched is {home} (from $PRIVRELEASE_HOME).\n")


def test_home_after_the_subcommand(tmp_path: Path):
    home, other = tmp_path / "home", tmp_path / "other"
    register(home, census(100), "census", keys=["age"])
    for args in (["ledger", "history", "--home", str(home)], ["ledger", "--home", str(home), "history"]):
        r = run(other, *args)  # $PRIVRELEASE_HOME names another home: --home wins, wherever it is
        assert r.returncode == 0 and "disclosure policy set" in r.stdout, r.stderr
    r = run(other, "dataset", "list", "--home", str(home))
    assert r.returncode == 0 and r.stdout.startswith("dataset census: registration 1")
    assert run(other, "--home", str(home), "info", "--home", str(home)).stdout.splitlines()[2] == "home_from       --home"


def test_a_parquet_file_given_as_csv_is_called_parquet(tmp_path: Path):
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    census(50).to_parquet(home / "data" / "census.csv")
    source = str(home / "data" / "census.csv")
    r = run(home, "dataset", "add", "c", "--source", source, "--format", "csv", "--unit", "record", "--purpose", "dp")
    assert r.returncode == 2 and "UTF-8" not in r.stderr
    assert (
        r.stderr
        == "error: could not read 'census.csv' as CSV: it looks like a Parquet file (--format parquet); check --format.\n"
    )
