"""Aggregate releases through the command line and the release flow, under Prefect's test harness:
public keys declared at registration, the published table (CSV and Parquet, one row per key, each
measure with its interval), the report's chart per measure, the ledger's charge, the preview's
figures before it, and bad requests refused before the charge with nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from privrelease.core import noise
from privrelease.core.datasets.snapshots import SnapshotChanged
from privrelease.core.ledger.ledger import RESERVED, Ledger
from privrelease.core.mechanisms import aggregate as agg
from privrelease.core.mechanisms.base import Snapshot
from privrelease.core.privacy.budget import Budget
from privrelease.core.release import pipeline, spec
from privrelease.core.release.home import Home
from privrelease.core.tables.schema import Column, Schema
from tests.conftest import REPO
from tests.flows.test_release_flow import cli
from tests.support.helpers import planned_run, register

DOMAINS = {"region": ["north", "south", "east", "west"], "grade": [1, 2, 3]}


def payroll(n: int = 900, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "person": rng.integers(0, 300, n),
            "region": rng.choice(["north", "south", "east"], n),  # no row in the west: an empty public key
            "grade": rng.choice([1, 2, 3], n),
            "salary": rng.normal(40_000, 9_000, n).round(2),
            "note": "x",
        }
    )


def schema(domains: bool = True) -> Schema:
    cols = {"person": Column(type="integer"), "region": Column(type="string"), "grade": Column(type="integer"),
            "salary": Column(type="float"), "note": Column(type="string")}  # fmt: skip
    if domains:
        cols |= {c: Column(type=cols[c].type, domain=d) for c, d in DOMAINS.items()}
    return Schema(columns=cols)


REQUEST = {
    "group_by": ["region", "grade"],
    "measures": [
        {"op": "count"},
        {"op": "sum", "column": "salary", "bounds": [0, 100_000]},  # read from the mean's vectors
        {"op": "mean", "column": "salary", "bounds": [0, 100_000]},
        {"op": "quantile", "column": "salary", "bounds": [0, 100_000], "q": [0.5]},
    ],
    "epsilon": 1.0,
    "delta": 1e-6,
}


def write(home: Path, folder: Path, unit: str = "user:person", domains: bool = True, seed: int | None = 5, **params) -> Path:
    register(home, payroll(), "payroll", unit, "dp", schema=schema(domains))
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"dataset": "payroll", "mechanism": {"name": "aggregate", "params": {**REQUEST, **params}}}
    (folder / "request.yaml").write_text(yaml.safe_dump(doc if seed is None else {**doc, "seed": seed}))
    return folder / "request.yaml"


def test_a_release_publishes_every_public_key_with_intervals(prefect_server, home, test_mode, tmp_path, capsys):
    spec = write(home, tmp_path / "a", max_groups=2, max_rows=2)
    assert cli(capsys, "ledger", "set-budget", "payroll", "--epsilon", "3", "--delta", "1e-4")[0] == 0
    code, out, err = cli(capsys, "release", "--preview", str(spec))
    assert code == 0 and "key counts" in out and "95% half-width" in out, out + err
    code, out, err = cli(capsys, "release", str(spec))
    assert code == 0, err
    folder = Path(out.split("folder ")[1].split()[0])
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(["aggregate.csv", "aggregate.parquet", "count.png", "manifest.json", "report.md",
                            "salary_mean.png", "salary_q50.png", "salary_sum.png"])  # fmt: skip
    table = pd.read_csv(folder / "aggregate.csv")
    assert pd.read_parquet(folder / "aggregate.parquet").shape == table.shape
    assert len(table) == 12 and set(table["region"]) == set(DOMAINS["region"])  # every key, the empty west too
    for name in ("count", "salary_sum", "salary_mean", "salary_q50"):
        assert ((table[f"{name}_lo"] <= table[name]) & (table[name] <= table[f"{name}_hi"])).all()
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["privacy"]["epsilon"] == 1.0 and manifest["privacy"]["adjacency"].startswith("add or remove one user")
    assert manifest["input"]["schema"]["region"]["domain"] == DOMAINS["region"]
    report = (folder / "report.md").read_text()
    assert "keys public (the declared domains)" in report and "at most 2 keys and 2 rows per key" in report
    assert [e.epsilon for e in Ledger(home / "privrelease.duckdb").entries() if e.status == RESERVED] == [1.0]


@pytest.mark.parametrize(
    "unit,domains,params,message",
    [
        ("user:person", True, {"measures": [{"op": "mean", "column": "note", "bounds": [0, 1]}]},
         "column 'note' of dataset 'payroll' is registered as string; this mechanism needs a numeric column"),
        ("user:person", True, {"group_by": ["region", "city"]}, "dataset 'payroll' has no column 'city'"),
        ("user:person", True, {"measures": [{"op": "mean", "column": "salary"}]}, "mean needs public bounds [low, high]"),
        ("user:person", False, {"delta": 0.0, "noise": "laplace"},
         "keys of region, grade are not declared at registration, so they are selected privately"),
        ("record", True, {"max_groups": 2}, "under the record unit each record is in one key: drop them"),
        ("user:person", True, {"group_by": ["person"]}, "cannot be a group_by column: it would publish users"),
        ("user:person", True, {"epsilon": 1e-9, "delta": 1e-12}, "too small for the exact sampler"),
        ("user:person", True, {"measures": [{"op": "sum", "column": "salary", "bounds": [0, 9], "share": 2},
                                            {"op": "mean", "column": "salary", "bounds": [0, 9]}]},
         "so it has no budget share of its own: drop its share, or set the mean's"),
    ],
    ids=["non-numeric", "missing-column", "no-bounds", "selection-without-delta", "caps-under-record", "user-key", "tiny-budget",
         "sum-share-beside-mean"],
)  # fmt: skip
def test_bad_request_is_refused_before_the_charge(prefect_server, home, tmp_path, capsys, unit, domains, params, message):
    spec = write(home, tmp_path / "bad", unit, domains, None, **params)
    assert cli(capsys, "ledger", "set-budget", "payroll", "--epsilon", "3", "--delta", "1e-4")[0] == 0
    code, _, err = cli(capsys, "release", str(spec))
    assert code == 2 and message in err.strip().splitlines()[-1], err
    assert not (home / "releases" / "payroll").exists()
    assert [e for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id] == []


def test_a_domain_is_checked_against_its_column_type():
    with pytest.raises(ValueError, match="a domain lists values of an integer, string or boolean column"):
        Column(type="integer", domain=["1"])
    with pytest.raises(ValueError, match="a domain lists a value twice"):
        Column(type="string", domain=["a", "a"])
    assert "domain" not in Column(type="string").model_dump()  # a column without one dumps as before


@pytest.mark.parametrize("unit,domains", [("user:person", True), ("record", False)])
def test_a_release_reads_the_checked_snapshot_file_and_gets_what_the_rows_give(home, test_mode, tmp_path, unit, domains):
    """The pipeline hands aggregate the registered snapshot's file (DuckDB reads it; no pandas copy of the rows),
    and the table is the one the same run gives on the rows themselves, key for key and draw for draw."""
    bound, store = _bound(home, tmp_path, unit, domains)
    rows = pipeline.load(store, bound)
    assert isinstance(rows, Snapshot) and Path(rows.path).is_file()
    frame = store.registry.load(bound.dataset)
    assert "west" not in set(frame["region"])
    by_file = planned_run(agg, rows, bound.params, noise.generator(11)).data
    by_rows = planned_run(agg, frame, bound.params, noise.generator(11)).data
    pd.testing.assert_frame_equal(by_file, by_rows)
    assert len(by_file) == (12 if domains else len(by_file)) and len(by_file) > 0


def test_a_changed_snapshot_is_refused_before_aggregate_reads_it(home, tmp_path):
    """The file aggregate reads is hashed in full at every release: changed bytes (the same size, mtime put
    back) are refused before the charge; a digest kept by the file's size and mtime would have let it through."""
    bound, store = _bound(home, tmp_path, "user:person", True)
    path = Path(pipeline.load(store, bound).path)
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    with pytest.raises(SnapshotChanged, match="changed since registration"):
        pipeline.load(store, bound)


def _bound(home: Path, tmp_path: Path, unit: str, domains: bool):
    request = write(home, tmp_path / "req", unit=unit, domains=domains, seed=None, delta=1e-3)
    store = Home.open()
    Ledger(home / "privrelease.duckdb").set_budget("payroll", Budget(10.0, 1e-2))
    bound, _ = pipeline.prepare(store, spec.load(request))
    return bound, store


def _release_in_a_process(home: Path, tmp_path: Path, code: str, weakened: bool) -> tuple[list[str], str]:
    """The demo payroll's aggregate released by ``code`` (a script given the request, and "weakened" for the weakened
    variant) in a process of its own with no Prefect server configured: the words it printed, its stderr's end."""
    request = write(home, tmp_path / "req", seed=None)
    Ledger(home / "privrelease.duckdb").set_budget("payroll", Budget(10.0, 1e-2))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {"PYTHONPATH": str(REPO), "PRIVRELEASE_HOME": str(home)}
    argv = [sys.executable, "-c", code, str(request), *(["weakened"] if weakened else [])]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    return done.stdout.split(), done.stderr[-2000:]


RELEASE_ALONE = (
    "import sys\n"
    "if len(sys.argv) > 2: import privrelease.flows.release\n"  # the weakened variant: the command loads the flow anyway
    "from privrelease.cli.main import main\n"
    "code = main(['release', sys.argv[1]])\n"
    "print(code, any(m == 'prefect' or m.startswith('prefect.') for m in sys.modules))\n"
)


@pytest.mark.parametrize("weakened", [False, True])
def test_a_release_with_no_server_neither_imports_nor_starts_prefect(home, tmp_path, weakened):
    """A command-line aggregate release with no Prefect server configured runs directly: Prefect is never
    imported (about a second) and no temporary server's database is created under the home."""
    said, stderr = _release_in_a_process(home, tmp_path, RELEASE_ALONE, weakened)
    assert said[-2:] == ["0", str(weakened)], stderr
    assert not list(home.rglob("*.db"))  # no Prefect server's SQLite database


RELEASE_ONE = (
    "import sys\n"
    "from privrelease.core.release import spec\n"
    "if len(sys.argv) > 2: spec._one = lambda name: spec._every()\n"  # the weakened variant: the request over every mechanism
    "from privrelease.cli.main import main\n"
    "code = main(['release', sys.argv[1]])\n"
    "others = sorted(m for m in sys.modules if m.startswith('privrelease.core.mechanisms.')\n"
    "                and m.split('.')[3] not in ('base', 'aggregate'))\n"
    "print(code, bool(others), 'scipy.optimize' in sys.modules)\n"
)


@pytest.mark.parametrize("weakened", [False, True])
def test_a_release_loads_only_its_own_mechanism(home, tmp_path, weakened):
    """A command-line aggregate release parses its request with the aggregate's model alone: no other mechanism's
    module is imported, nor scipy's optimizers the SDC tables' audit needs (about half a second of every release,
    issue #57); the request built over every mechanism, as Prefect's form needs it, imports them all."""
    said, stderr = _release_in_a_process(home, tmp_path, RELEASE_ONE, weakened)
    assert said[-3:] == ["0", str(weakened), str(weakened)], stderr
