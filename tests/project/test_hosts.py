"""Workers on several hosts: one PostgreSQL ledger, one shared snapshot store and data root, a home
per worker. The operator's trial: the steward registers a DPNE corpus from home A with a cap for
five releases at epsilon 1; eight releases at once, four from each home. The same across two
network namespaces, through Prefect's server and workers: tests/system/test_server_pg.py."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from privrelease.core import parallel, settings
from privrelease.core.datasets import snapshots
from privrelease.core.datasets.registry import Registry, Unit
from privrelease.core.errors import BudgetError
from privrelease.core.ledger.ledger import ChargeRequest, Ledger
from privrelease.core.mechanisms import dpne
from privrelease.core.operations.upgrade import upgrade
from privrelease.core.privacy.budget import Budget
from privrelease.core.release.home import Home
from privrelease.core.release.pipeline import release
from privrelease.core.release.spec import ReleaseRequest
from tests.conftest import REPO
from tests.mechanisms.test_dpne import phrase_corpus
from tests.support.helpers import register
from tests.support.pages import commands, sh_block
from tests.system.test_server import _stop

# DPNE at epsilon 1 on a small corpus. The cap's admission filter composes DPNE's Gaussian steps more
# tightly than a sum of epsilons: the cap that admits exactly five of them is (2.5, 1e-6), checked
# below against the same charges made one after another.
DPNE = {"dataset": "conc", "mechanism": {"name": "dpne", "params": {
    "text_column": "text", "epsilon": 1.0, "delta": 1e-7, "T": 3, "delta0": 10, "tokenizer": "words"}}}  # fmt: skip
CAP = Budget(2.5, 1e-6)
WORKER = commands(sh_block("guides/hosts.md", "DASK_CONFIG="))[0]  # how the page starts a Dask worker on a host


def dask_worker(address: str) -> tuple[dict, list[str]]:
    """The page's worker command as printed, for a scheduler at ``address`` and this checkout: its environment and words."""
    setting, *words = shlex.split(WORKER)
    name, value = setting.split("=", 1)
    fill = {"dask": str(Path(sys.executable).parent / "dask"), "tcp://A:8786": address}
    return {name: value.replace("/path/to/privrelease", str(REPO))}, [fill.get(w, w) for w in words]


def admitted_in_turn(cap: Budget, folder: Path) -> int:
    """How many of the DPNE charges a cap admits made one at a time, in a ledger of its own (the oracle)."""
    plan = dpne.plan(dpne.Params.model_validate({**DPNE["mechanism"]["params"], "user_column": "user"}))
    ledger = Ledger(folder / "oracle.duckdb")
    ledger.set_budget("conc", cap)
    for n in range(20):
        try:
            ledger.reserve(ChargeRequest("conc", f"r{n}", "dp", plan.cost, "dpne", {}, plan.detail))
        except BudgetError:
            return n
    return 20


def shared_setup(root: Path, monkeypatch: pytest.MonkeyPatch, url: str) -> dict[str, str]:
    """What every host shares: the ledger's database and key, the snapshot store and the data root."""
    shared = {
        "PRIVRELEASE_LEDGER_URL": url,
        "PRIVRELEASE_LEDGER_KEY_FILE": str(root / "secrets" / "ledger.key"),
        settings.SNAPSHOT_STORE: str(root / "shared" / "snapshots"),
        "PRIVRELEASE_DATA_ROOT": str(root / "shared" / "data"),
    }
    for name, value in shared.items():
        monkeypatch.setenv(name, value)
    return shared


def register_corpus(home: Path, data_root: Path) -> None:
    """The steward, from ``home``: the corpus into the shared data root, registered and capped."""
    data_root.mkdir(parents=True, exist_ok=True)
    phrase_corpus(400).to_csv(data_root / "conc.csv", index=False)
    Registry(home).add("conc", "conc.csv", "csv", Unit.parse("user:user"), "dp")
    Ledger(home / "privrelease.duckdb").set_budget("conc", CAP)


def test_eight_releases_from_two_homes_against_a_cap_for_five(tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch):
    assert admitted_in_turn(CAP, tmp_path) == 5
    shared = shared_setup(tmp_path, monkeypatch, pg_url)
    homes = [tmp_path / "home-a", tmp_path / "home-b"]
    register_corpus(homes[0], Path(shared["PRIVRELEASE_DATA_ROOT"]))
    assert not (homes[0] / "datasets").exists()  # the snapshot went to the shared store, not A's home
    request = ReleaseRequest.model_validate(DPNE)
    start = threading.Barrier(8)
    outcomes: dict[int, str] = {}

    def worker(i: int) -> None:
        store = Home(homes[i % 2])
        start.wait()
        try:
            outcomes[i] = release(store, request)["folder"]
        except BudgetError as exc:
            outcomes[i] = f"refused: {exc}"

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    published = {i: folder for i, folder in outcomes.items() if not folder.startswith("refused")}
    refused = [m for m in outcomes.values() if m.startswith("refused")]
    assert len(published) == 5 and len(refused) == 3, outcomes
    assert {i % 2 for i in published} == {0, 1}  # both homes published
    for i, folder in published.items():
        assert Path(folder).is_relative_to(homes[i % 2] / "releases") and (Path(folder) / "manifest.json").is_file()
    for message in refused:
        assert "dataset 'conc' cannot take it" in message and "of its cap (epsilon=2.5, delta=1e-06)" in message
    for home in homes:
        (t,) = Ledger(home / "privrelease.duckdb").totals()
        assert (t.spent.epsilon, t.published, t.failed, t.pending) == (5.0, 5, 0, 0)
        assert Ledger(home / "privrelease.duckdb").verify(home / "releases") == 12  # registration, cap, 5 charges, 5 outcomes


def test_a_postgresql_store_from_before_hosts_were_recorded_gains_the_column(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
):
    import psycopg

    from privrelease.core import store

    monkeypatch.setenv("PRIVRELEASE_LEDGER_URL", pg_url)
    register(tmp_path / "home", phrase_corpus(20), "old", "user:user", "dp")
    with psycopg.connect(pg_url, autocommit=True) as con:  # as the store was before hosts were recorded (schema 1)
        con.execute("ALTER TABLE privrelease.datasets DROP COLUMN reading")
        con.execute("ALTER TABLE privrelease.datasets DROP COLUMN host")
        con.execute("DROP TABLE privrelease.meta")
    store.close(pg_url)  # a worker of the new version starts: it writes nothing until the store is upgraded
    with pytest.raises(store.SchemaMismatch, match="privrelease upgrade"):
        register(tmp_path / "home", phrase_corpus(30, seed=1), "new", "user:user", "dp")
    upgrade(tmp_path / "home", tmp_path / "backup", "operator")
    dataset = register(tmp_path / "home", phrase_corpus(30, seed=1), "new", "user:user", "dp")
    with psycopg.connect(pg_url) as con:
        hosts = con.execute("SELECT id, host FROM privrelease.datasets ORDER BY id").fetchall()
    assert hosts == [("new", socket.gethostname()), ("old", None)]
    assert len(Registry(tmp_path / "home").load(dataset)) == len(phrase_corpus(30, seed=1))


def test_dask_workers_that_cannot_read_the_snapshot_are_named_before_any_charge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Two Dask workers on a host that did not mount the snapshot store (their own mount namespace, an
    empty folder over the store): a DPNE release is refused at load, naming them, and charges nothing.
    (Workers that can read it: tests/release/test_parallel.py, through the command line.)"""
    if os.geteuid() != 0:
        pytest.skip("Dask workers with their own view of the filesystem need root (unshare --mount)")
    from distributed import Client, LocalCluster

    store = tmp_path / "store"
    monkeypatch.setenv(settings.SNAPSHOT_STORE, str(store))
    home = tmp_path / "home"
    register(home, phrase_corpus(100), "posts", "user:user", "dp")
    Ledger(home / "privrelease.duckdb").set_budget("posts", CAP)
    request = ReleaseRequest.model_validate({**DPNE, "dataset": "posts"})
    with LocalCluster(n_workers=0, processes=False, protocol="tcp://", dashboard_address=None) as cluster:
        environment, words = dask_worker(cluster.scheduler_address)
        workers = subprocess.Popen(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                f"mount -t tmpfs none '{store}' && exec "
                f"{shlex.join(words)} --nworkers 2 --no-dashboard",  # two of them, as two hosts
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **environment},
        )
        try:
            with Client(cluster.scheduler_address) as client:
                client.wait_for_workers(2, timeout=60)
            with parallel.using("dask", cluster.scheduler_address), pytest.raises(snapshots.SnapshotUnreachable) as caught:
                release(Home(home), request)
        finally:
            _stop(workers)
    message = str(caught.value)
    assert message.startswith("dataset 'posts' cannot be read on the Dask workers tcp://") and message.count("tcp://") == 2
    assert message.endswith(
        f"its snapshot {store / 'posts' / 'v1.parquet'} is not readable there. Mount the snapshot "
        "store at the same path on every Dask worker's host, or run without Dask. Nothing was charged."
    )
    assert [e.status for e in Ledger(home / "privrelease.duckdb").entries()] == ["registered", "cap"]
