"""Runs on a Dask cluster (2 worker processes) give exactly what in-process runs give, and the
workers read their users from the stored snapshot: no rows travel from the flow."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import dask
import duckdb
import numpy as np
import pandas as pd
import pytest
import yaml

from privrelease.core import parallel, settings
from privrelease.core.mechanisms import dpne
from privrelease.core.mechanisms import outliers as o
from tests.conftest import REPO
from tests.flows.test_release_flow import cli
from tests.mechanisms.test_dpne import params, phrase_corpus
from tests.mechanisms.test_outliers import planted
from tests.support.helpers import planned_run, register


@pytest.fixture(scope="module")
def cluster():
    with parallel.local_cluster(2) as c:  # as the Dask runner starts one
        yield c.scheduler_address


class Counter:
    """A partition's state: where it lives and how often it was stepped."""

    def __init__(self, start: int):
        self.value, self.pid = start, os.getpid()

    def close(self) -> None:
        self.value = None


def bump(state: Counter, by: int) -> tuple[int, int]:
    state.value += by
    return state.value, state.pid


def held() -> int:
    return len(parallel._held)


def test_partitions_keep_state_on_their_worker_in_order(cluster):
    from distributed import Client

    with parallel.using("dask", cluster), parallel.partitioned(Counter, [0, 100, 200]) as parts:
        assert parallel.workers() == 2
        parts.map(bump, 1)
        second = parts.map(bump, 10)  # the state opened on a worker stayed there
        assert [v for v, _ in second] == [11, 111, 211]
        pids = [p for _, p in second]
        assert pids[0] == pids[2] != pids[1] != os.getpid()  # round-robin over the two worker processes
    with Client(cluster) as client:
        assert sum(client.run(held).values()) == 0  # closed and forgotten when the block ended
        assert set(lean(client).values()) == {LEAN}
    with parallel.partitioned(Counter, [5]) as parts:  # no cluster: in this process
        assert parts.map(bump, 1) == [(6, os.getpid())] and parallel.workers() == 1
    assert held() == 0


LEAN = (False, None, 0)  # no stack-sampling profiler, glibc's own allocator, no Dask memory limit that could pause or restart one


def lean(client) -> dict[str, tuple[bool, str | None, int]]:
    """Per worker (by name): whether Dask samples its stacks, the MALLOC_TRIM_THRESHOLD_ it started
    with, and its Dask memory limit."""
    workers = client.scheduler_info()["workers"]
    settings = client.run(
        lambda: (dask.config.get("distributed.worker.profile.enabled"), os.environ.get("MALLOC_TRIM_THRESHOLD_"))
    )
    return {workers[a]["name"]: (*v, workers[a]["memory_limit"]) for a, v in settings.items()}


def test_workers_started_with_deploy_dask_yaml_are_as_lean_as_the_local_cluster(caplog):
    """Workers an operator starts on other hosts, as docs/guides/hosts.md says (``DASK_CONFIG=/path/to/deploy/dask.yaml
    dask worker ADDRESS --nthreads 1 --memory-limit 0``), get ``parallel.WORKER_CONFIG``; a worker
    started without the file gets Dask's defaults (the stack sampler, and MALLOC_TRIM_THRESHOLD_=65536,
    which made DPNE's counting 19% slower: bench/RESULTS.md), and the runner warns of it."""
    import subprocess
    import sys

    from distributed import Client, LocalCluster

    collected = dask.config.collect(paths=[str(REPO / "deploy" / "dask.yaml")], env={})
    assert {k: dask.config.get(k, config=collected) for k in parallel.WORKER_CONFIG} == parallel.WORKER_CONFIG
    command = [str(Path(sys.executable).parent / "dask"), "worker", "--nthreads", "1", "--memory-limit", "0", "--no-dashboard"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASK_", "MALLOC_"))}
    with LocalCluster(n_workers=0, processes=False, protocol="tcp://", dashboard_address=None) as cluster:
        procs = [
            subprocess.Popen(
                [*command, cluster.scheduler_address, "--name", name],
                env=extra | env,
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for name, extra in (("configured", {"DASK_CONFIG": str(REPO / "deploy" / "dask.yaml")}), ("plain", {}))
        ]
        try:
            with Client(cluster.scheduler_address) as client:
                client.wait_for_workers(2, timeout=60)
                assert lean(client) == {"configured": LEAN, "plain": (True, "65536", 0)}
            with caplog.at_level(logging.WARNING, logger="privrelease"), parallel.using("dask", cluster.scheduler_address):
                pass  # the runner names what it found when it starts
            assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
                "1 of 2 Dask workers started with MALLOC_TRIM_THRESHOLD_=65536, which makes DPNE's counting about a fifth "
                "slower there; start them with DASK_CONFIG set to privrelease's deploy/dask.yaml and without that variable "
                "in their environment (docs/guides/hosts.md, step 6)."
            ]
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=30)


def snapshot(tmp_path: Path, frame: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """``frame`` stored as Parquet and read back, as the registry hands it to a release."""
    path = str(tmp_path / "v1.parquet")
    duckdb.connect().from_df(frame).write_parquet(path)
    stored = duckdb.connect().execute("SELECT * FROM read_parquet(?)", [path]).df()
    return stored, path


def test_dpne_on_dask_reads_its_partitions_from_the_snapshot_and_matches_in_process(cluster, tmp_path):
    frame, path = snapshot(tmp_path, phrase_corpus(1200))
    assert frame.groupby("user").size().max() > 1  # users with several posts: the per-user cap spans posts
    p = params(pruning="both", delta0=[7, 5, 3, 2])
    local, levels = dpne.extract(frame, p, dpne.plan(p), np.random.default_rng(21))
    with parallel.using("dask", cluster):
        spread, spread_levels = dpne.extract(frame.iloc[:0], p, dpne.plan(p), np.random.default_rng(21), snapshot=path)
        unstored = dpne.extract(frame.iloc[:0], p, dpne.plan(p), np.random.default_rng(21))[0]
    assert len(local) > 20 and local.equals(spread) and levels == spread_levels
    # the workers read the file (the frame they were not sent is empty); without one, in process
    assert unstored.empty and dpne.extract(frame.iloc[:0], p, dpne.plan(p), np.random.default_rng(21), snapshot=path)[0].empty


def transitions(address: str) -> int:
    """How many task state transitions the cluster's scheduler has seen."""
    from distributed import Client

    with Client(address) as client:
        return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter)


def test_release_on_the_dask_runner_matches_in_process(prefect_server, home, test_mode, tmp_path, capsys, cluster, monkeypatch):
    for name in (settings.RUNNER, settings.DASK_ADDRESS, settings.DASK_WORKERS):  # the CLI sets them; restored after
        monkeypatch.setenv(name, "")
    register(home, phrase_corpus(600), "posts", "user:user", "dp")
    assert cli(capsys, "ledger", "set-budget", "posts", "--epsilon", "10", "--delta", "1e-5")[0] == 0
    mechanism = {
        "name": "dpne",
        "params": {"text_column": "text", "epsilon": 4.0, "delta": 1e-7, "T": 3, "delta0": 5, "publish_weights": True},
    }
    manifests, used = [], []
    for runner in ("local", "dask"):
        before = transitions(cluster)
        spec = tmp_path / f"{runner}.yaml"
        spec.write_text(yaml.safe_dump({"dataset": "posts", "seed": 9, "release_id": f"r-{runner}", "mechanism": mechanism}))
        code, out, err = cli(capsys, "release", str(spec), *(["--dask-address", cluster] if runner == "dask" else []))
        assert code == 0, err
        used.append(transitions(cluster) > before)
        folder = Path(out.split("folder ")[1].split()[0])
        manifests.append(
            (json.loads((folder / "manifest.json").read_text()), duckdb.read_parquet(str(folder / "ngrams.parquet")).df())
        )
    (local, local_table), (spread, spread_table) = manifests
    assert used == [False, True]  # the partitions ran on the cluster only when the CLI named it
    assert sum(local["counts_by_length"].values()) > 5 and local["counts_by_length"] == spread["counts_by_length"]
    assert local_table.equals(spread_table)


def test_other_mechanisms_ignore_the_cluster_and_say_so(cluster, caplog):
    frame = planted(400, seed=2)
    p = o.Params(query="top_subspaces", c=2, h=3, k=3, r=0.1, epsilon=3.0, delta=1e-4, standardize=False, noise="smooth")
    before = transitions(cluster)
    with caplog.at_level(logging.INFO, logger="privrelease"), parallel.using("dask", cluster):
        spread = planned_run(o, frame, p, np.random.default_rng(11))
    assert transitions(cluster) == before  # no task reached the cluster
    assert "every other mechanism runs in this process" in caplog.text
    assert planned_run(o, frame, p, np.random.default_rng(11)).data.equals(spread.data)
