"""The ``privrelease`` command as a user runs it: a real process, real stdout/stderr, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import duckdb
import numpy as np

from core.datasets.demo import census, mail
from core.spam import decision as D
from core.spam import features as F
from tests.conftest import REPO
from tests.helpers import write_policy, write_request

EXE = str(Path(os.sys.executable).parent / "privrelease")


def run(home: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    environ.update({"PRIVRELEASE_HOME": str(home)}, **(env or {}))
    return subprocess.run([EXE, *args], cwd=REPO, env=environ, capture_output=True, text=True, timeout=300)


def test_dataset_and_ledger_commands(tmp_path: Path):
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    census(300).to_csv(home / "data" / "census.csv", index=False)
    r = run(home, "dataset", "add", "census", "--source", "census.csv", "--format", "csv", "--unit", "record", "--purpose", "dp")
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
        "census.csv",
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
    r = run(home, "dataset", "add", "x", "--source", "/etc/passwd", "--format", "csv", "--unit", "record", "--purpose", "sdc")
    assert r.returncode == 2 and "must lie inside the data root" in r.stderr and "Traceback" not in r.stderr
    r = run(home, "dataset", "list")
    assert r.returncode == 0 and r.stdout.splitlines()[0].startswith("dataset census: registration 1")
    shown = json.loads(run(home, "dataset", "show", "census").stdout)
    assert set(shown) == {"id", "version", "unit", "purpose", "adjacency", "rows", "registered", "schema"}
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
    assert [(e["seq"], e["status"], e["epsilon"]) for e in history] == [(1, "cap", 2.0)]
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
        }
    ]
    assert run(home, "ledger", "totals").stdout.splitlines()[1].startswith("census           dp")
    assert "cap" in run(home, "ledger", "history", "--dataset", "census").stdout
    ok = run(home, "ledger", "verify")
    assert ok.returncode == 0 and "1 entries" in ok.stdout
    r = run(home, "ledger", "recover")
    assert r.returncode == 0 and r.stdout.splitlines()[0] == "no interrupted release to settle"
    r = run(home, "dataset", "drop", "census")
    assert r.returncode == 0 and r.stdout.startswith("dataset census: stored rows deleted")
    assert run(home, "dataset", "list").stdout.startswith("no datasets registered")
    con = duckdb.connect(str(home / "privrelease.duckdb"))
    con.execute("UPDATE ledger SET epsilon = 200 WHERE seq = 1")
    con.close()
    bad = run(home, "ledger", "verify")
    assert bad.returncode == 3 and "FAILED at entry 1" in bad.stderr


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
            "census.csv",
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


def test_demo_in_a_fresh_home(tmp_path: Path):
    """The README's first command, as a newcomer runs it: a fresh home, its own temporary Prefect server."""
    home = tmp_path / "home"
    r = run(home, "demo", "--rows", "2000", env={"PREFECT_HOME": str(tmp_path / "prefect")})
    assert r.returncode == 0, r.stderr[-2000:]
    folder = Path(next(line for line in r.stdout.splitlines() if line.startswith("release folder:")).split(":", 1)[1].strip())
    assert (folder / "manifest.json").is_file() and (folder / "report.md").is_file()
    # it says what it did as the steward, where the examples are, and what to type next
    said = r.stdout.splitlines()
    assert said[0] == "As the data steward, the demo registered:"
    assert said[1].split() == ["census-demo", "sdc", "unit", "record", "2000", "rows", "no", "budget", "(SDC)"]
    assert said[2].split() == [
        "posts-demo",
        "dp",
        "unit",
        "user:user",
        "rows",
        "not",
        "public",
        "budget",
        "epsilon=20",
        "delta=1e-05",
    ]
    assert said[4] == f"Example release requests, an analyst's: {home / 'requests'}/"
    assert "(sdc: recorded on the ledger, not DP, no budget spent)" in r.stdout
    assert "chain:          recode → ra → suppress" in r.stdout
    assert "risk:           k = 3 on the steward's key (the policy asks k >= 3); rows shuffled" in r.stdout
    nxt = said[said.index("Next:") + 1].split("#")[0].split()
    assert nxt == ["privrelease", "--home", str(home), "release", str(home / "requests" / "posts-dpne.yaml")]
    r = run(home, *nxt[3:])  # the next command, as printed
    assert r.returncode == 0 and "charged epsilon=" in r.stdout, r.stderr[-2000:]
    r = run(home, "dataset", "list")
    assert r.returncode == 0 and [line.split(":")[0] for line in r.stdout.splitlines()] == [
        "dataset census-demo",
        "dataset logins-demo",
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
            "census.csv",
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
    assert summary["mechanism"] == "ra" and summary["privacy"]["kind"] == "sdc" and summary["budget_left"] is None
    assert set(summary["headline"]) == {"pa", "pa_max", "k"}  # k: the smallest key cell of the released table


def test_spam_commands_as_typed(tmp_path: Path):
    """split → train (its flow, on Prefect's temporary server) → classify, each a real process."""
    import yaml

    home = tmp_path / "home"
    folder = home / "data" / "mail"  # the spec and its mail files live under the data root
    folder.mkdir(parents=True)
    (folder / "all.jsonl").write_text("".join(json.dumps(m) + "\n" for m in mail(200, 5)))
    env = {"PRIVRELEASE_TEST_MODE": "1", "PREFECT_HOME": str(tmp_path / "prefect")}  # 512-bit keys need test mode
    r = run(home, "spam", "split", str(folder / "all.jsonl"), "--out", str(folder), "--users", "2", env=env)
    assert r.returncode == 0 and r.stdout.splitlines()[0] == str(folder / "user-1.jsonl")
    doc = {
        "run_id": "cli",
        "users": ["user-1.jsonl", "user-2.jsonl"],
        "test": "test.jsonl",
        "features": {"modulus": 100_000, "reduction": "hash", "dimension": 256, "seed": 0},
        "key_bits": 512,
        "learning_rate": 1e-4,
        "rounds": 2,
        "mode": "batch",
        "block_size": 1000,
    }
    (folder / "spam.yaml").write_text(yaml.safe_dump(doc))
    r = run(home, "spam", "train", "mail/spam.yaml", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("run cli: AUC private ") and f"folder {home / 'spam' / 'cli'}" in r.stdout
    (folder / "msg.eml").write_text("Subject: x\n\nfree money, click here now, winner claim your prize")
    r = run(home, "spam", "classify", "cli", str(folder / "msg.eml"), env=env)
    assert r.returncode == 0 and r.stdout.strip() == "spam", r.stderr[-2000:]
    assert "preparing run cli's classifier (once per model): 256 of 256 weights encrypted" in r.stderr
    # against the plaintext twin (the same mail pooled, the same rule, its cutoff chosen the same way): 10 held-out
    # spam and 10 ham, as a user types them, in one command
    run_folder, held_out = home / "spam" / "cli", mail(400, 9)[200:]
    report = json.loads((run_folder / "report.json").read_text())
    chosen = [m for m in held_out if m["label"] == "spam"][:10] + [m for m in held_out if m["label"] == "ham"][:10]
    for i, message in enumerate(chosen):
        (folder / f"held-{i}.eml").write_text(message["text"])
    r = run(home, "spam", "classify", "cli", *(str(folder / f"held-{i}.eml") for i in range(20)), env=env)
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
    r = run(home, "spam", "classify", "nope", str(folder / "msg.eml"), env=env)
    assert r.returncode == 2 and r.stderr.startswith("error: no trained spam run 'nope'")
    r = run(home, "spam", "classify", "../spam/cli", str(folder / "msg.eml"), env=env)  # a path, not a run id
    assert r.returncode == 2 and r.stderr.startswith("error: the run id must be 1-80 characters of letters, digits")


def test_concurrent_first_start_of_prefect_in_a_fresh_home(tmp_path: Path):
    """Eight processes start Prefect's temporary server on one new database at once (without the lock,
    2 and 4 of 8 printed migration tracebacks in two trials here): the first
    migrates it under the lock, the others find it ready; each runs a flow, none shows a traceback."""
    code = (
        "from cli.launch import prefect_env as _prefect_env, start_prefect as _start_prefect; from pathlib import Path; import sys; "
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
