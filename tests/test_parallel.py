"""Runs on a Dask cluster (2 worker processes) give exactly what in-process runs give."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core import parallel
from core.mechanisms import outliers as o
from tests.test_outliers import planted
from tests.test_outliers_flow import PUBLIC, write
from tests.test_release_flow import cli


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        yield c.scheduler_address


def test_fan_out_keeps_order_and_uses_the_workers(cluster):
    with parallel.using("dask", cluster):
        assert parallel.workers() == 2
        assert parallel.fan_out(abs, range(-50, 0)) == list(range(50, 0, -1))
    assert parallel.workers() == 1 and parallel.fan_out(abs, [-1]) == [1]


def test_outlier_counts_on_dask_match_in_process(cluster):
    frame = planted(400, seed=2)
    params = o.Params(query="top_subspaces", c=2, h=3, k=3, r=0.1, epsilon=3.0, delta=1e-4, standardize=False, noise="smooth")
    local = o.run(frame, params, np.random.default_rng(11))
    with parallel.using("dask", cluster):
        spread = o.run(frame, params, np.random.default_rng(11))
    assert local.data.equals(spread.data) and local.manifest == spread.manifest


def test_release_flow_with_the_dask_runner(prefect_server, home, test_mode, tmp_path, capsys, cluster):
    import yaml

    from core import spec as spec_module
    from flows.release import release

    spec = write(home, tmp_path / "a", planted(300), seed=5, columns=["a", "b", "c"], query="top_subspaces", h=2, k=3,
                 r=0.1, epsilon=2.0, delta=1e-4, standardize=PUBLIC)  # fmt: skip
    assert cli(capsys, "ledger", "set-budget", "sessions", "--epsilon", "10", "--delta", "1e-3")[0] == 0
    manifests = []
    for runner in ("local", "dask"):
        doc = yaml.safe_load(spec.read_text())
        spec.write_text(yaml.safe_dump({**doc, "release_id": f"r-{runner}"}))
        if runner == "local":
            folder = release(request=spec_module.load(spec))["folder"]
        else:  # through the command line, as an operator would
            code, out, err = cli(capsys, "release", str(spec), "--dask-address", cluster)
            assert code == 0, err
            folder = out.split("folder ")[1].split()[0]
        manifests.append(json.loads((Path(folder) / "manifest.json").read_text()))
    assert manifests[0]["result"] == manifests[1]["result"] and manifests[0]["noise_std"] == manifests[1]["noise_std"]


def test_dpne_histograms_sharded_on_dask_match_in_process(cluster):
    from core.mechanisms import dpne
    from tests.test_dpne import params, phrase_corpus

    frame = phrase_corpus(1200)
    p = params(pruning="both", delta0=[7, 5, 3, 2])
    local, levels = dpne.extract(frame, p, np.random.default_rng(21))
    with parallel.using("dask", cluster):
        spread, spread_levels = dpne.extract(frame, p, np.random.default_rng(21))
    assert len(local) > 20 and local.equals(spread) and levels == spread_levels
