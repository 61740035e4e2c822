"""A curious analyst against the registered-dataset release surface: findings of a review, fixed.

Each test states the property docs/SECURITY.md's "Guarantees of the release surface" promise and
replays an attack that broke it when these tests were written (each failed then, against the
code it names); each now guards its fix.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privrelease.cli.main import main
from privrelease.core import parallel
from privrelease.core.ledger.ledger import Ledger
from privrelease.core.mechanisms import outliers as o
from privrelease.core.mechanisms.outliers import geometry as geo
from privrelease.core.mechanisms.outliers import sensitivity as sens
from privrelease.core.privacy.budget import Budget
from privrelease.core.release import pipeline
from privrelease.core.release.home import Home
from privrelease.core.release.spec import parse
from tests.conftest import REPO
from tests.support.helpers import register


def _store(home: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    monkeypatch.setenv("PRIVRELEASE_HOME", str(home))
    return Home.open()


def _outcome(opened: Home, request: dict) -> tuple[str, str]:
    """What the analyst sees of a release: its outcome and the ledger's recorded reason."""
    try:
        pipeline.release(opened, parse(request))
    except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
        return "failed", type(exc).__name__
    return "published", ""


# -- finding 1: the flow's dask_address sends raw rows to a cluster the requester names ----------------


def test_a_requested_dask_cluster_receives_no_rows(home, tmp_path, monkeypatch):
    """The release flow took ``runner``/``dask_address`` as flow-run parameters (deployment Run
    form). An analyst started a scheduler and a worker of their own and named it: DPNE's user
    shards, (uid, token) rows, were scattered to that worker's memory. Now the flow's only
    parameter is the request, which names no cluster; the control below shows what naming one did."""
    from distributed import LocalCluster

    from privrelease.core.release.spec import ReleaseRequest
    from privrelease.flows.release import release as release_flow

    assert list(inspect.signature(release_flow.fn).parameters) == ["request"]
    assert not {"runner", "dask_address", "dask_workers"} & set(ReleaseRequest.model_json_schema()["properties"])
    seen: list = []

    class Spy(dict):  # the attacker's worker stores every piece of data it is sent
        def __setitem__(self, key, value):
            seen.append(value)
            super().__setitem__(key, value)

    rows = [{"user": i % 40, "text": "the cat sat on the mat"} for i in range(200)]
    rows.append({"user": 999, "text": "canary xq7 secret"})
    register(home, pd.DataFrame(rows), "posts", "user:user", "dp")
    opened = _store(home, monkeypatch)
    Ledger(opened.db).set_budget("posts", Budget(10, 1e-3))
    request = parse(
        {
            "dataset": "posts",
            "mechanism": {"name": "dpne", "params": {"text_column": "text", "epsilon": 1.0, "delta": 1e-6, "T": 2}},
        }
    )
    attacker = LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None, data=Spy)
    with attacker, parallel.using("dask", attacker.scheduler_address):  # what the old flow did with the parameter
        pipeline.release(opened, request)
    leaked = [v for v in seen if isinstance(v, pd.DataFrame) and v.astype(str).apply(lambda s: s.str.contains("xq7")).any().any()]
    assert leaked, "control: a cluster that the run is pointed at receives the rows"


# -- finding 2: public standardization overflows on some rows only -----------------------------------


def _ages(last: int) -> pd.DataFrame:
    ages = np.random.default_rng(1).integers(20, 81, 50)
    ages[-1] = last
    return pd.DataFrame({"age": ages, "income": np.arange(50) * 100})


def test_public_standardization_is_no_threshold_oracle(tmp_path, monkeypatch):
    """``standardize: {age: {mean: 0, std: 90.5 / DBL_MAX}}`` maps age > 90.5 to inf. cKDTree then
    refuses the matrix (ValueError) after the charge: the release fails, exit code 1, and the ledger
    records ``failed: ValueError``, exactly when some record has age > 90.5. Neighbours (one record
    replaced: 60 -> 95) must give the analyst the same outcome."""
    std = 90.5 / np.finfo(float).max
    outcomes = []
    for last in (60, 95):
        home = tmp_path / f"h{last}"
        register(home, _ages(last), "people", "record", "dp")
        opened = _store(home, monkeypatch)
        Ledger(opened.db).set_budget("people", Budget(10, 1e-3))
        request = {
            "dataset": "people",
            "mechanism": {
                "name": "outliers",
                "params": {
                    "query": "count",
                    "columns": ["age"],
                    "k": 1,
                    "r": 1.0,
                    "epsilon": 1.0,
                    "delta": 1e-5,
                    "noise": "global",
                    "standardize": {"age": {"mean": 0.0, "std": std}},
                },
            },
        }
        outcomes.append(_outcome(opened, request))
    assert outcomes[0] == outcomes[1], outcomes


def test_degrees_are_right_or_refused_when_distances_overflow():
    """Squared distances above DBL_MAX make scipy's threaded query_ball_point raise inside its
    worker threads; the exception is printed, not raised, and the result is uninitialised memory.
    The garbage becomes the 'true' count that is then noised with a sensitivity it does not have
    (neighbouring releases moved by 7 with GS = 3). Now coordinates are clipped to a public box
    before the search (a per-record map), and the search refuses anything outside it."""
    from privrelease.core.errors import InternalError

    x = np.arange(50.0)[:, None] * 1e153
    with pytest.raises(InternalError, match="clipping limit"):
        geo.degrees(x, 1.0)
    params = o.Params(
        query="count",
        columns=["a"],
        k=1,
        r=1.0,
        epsilon=1.0,
        delta=1e-5,
        noise="global",
        standardize={"a": {"mean": 0.0, "std": 1e-300}},
    )
    z, _ = o.standardized(pd.DataFrame({"a": x[:, 0]}), ["a"], params, Budget(0.0), None)
    assert np.abs(z).max() == geo.COORD_LIMIT and (geo.degrees(z, 1.0) == [0] + [48] * 49).all()


# -- finding 3: the 2-D exact cover's memory depends on how clustered the data is ----------------------


def test_two_dimensional_cover_work_is_bounded_from_public_values():
    """In 2-D, ``Cover`` builds one candidate centre per point pair within 2r and a dense
    centre x point incidence: ~N^3/2 entries when the data is clustered at scale r, ~N when not.
    At N = 2,000 (a small registered table) that is ~4e9 entries: a MemoryError (or an OOM kill
    leaving the charge 'reserved') after the charge, on clustered data only. cover_plan must
    bound the worst case from N and c, as it does in 3-D with MAX_BALLS / MAX_BLOCK_ENTRIES."""
    rng = np.random.default_rng(0)
    nnz = {n: geo.Cover(rng.uniform(0, 0.5, (n, 2)), 1.0).incidence.nnz for n in (60, 120)}
    spread = geo.Cover(rng.uniform(0, 100, (120, 2)), 1.0).incidence.nnz
    assert nnz[120] / nnz[60] > 6 and spread < 1000  # cubic growth on clustered data only
    n = 2000
    method, steps = sens.cover_plan(n, 2, None)
    worst = (n + n * (n - 1)) * n if method == "centres" and steps else 3**2 * n
    assert worst <= geo.MAX_BLOCK_ENTRIES, f"{method} may build {worst:.2g} incidence entries at N = {n}"


# -- finding 5: public parameters that crash as internal errors (no data involved, exit code 1) -------


@pytest.mark.parametrize(
    "params",
    [
        {
            "name": "outliers",
            "params": {
                "query": "count",
                "columns": ["age"],
                "k": 1,
                "r": 1.0,
                "epsilon": 1.0,
                "delta": 1e-5,
                "standardize": {"age": {"mean": float("inf"), "std": 1.0}},
            },
        },
        {"name": "dpne", "params": {"text_column": "text", "epsilon": 1.0, "delta": 1e-6, "delta0": 10**12}},
        {
            "name": "dpne",
            "params": {"text_column": "text", "epsilon": 1.0, "delta": 1e-6, "T": 50, "split": "geometric", "c": 1e-10},
        },
    ],
    ids=["outliers-inf-mean", "dpne-delta0-1e12", "dpne-geometric-overflow"],
)
def test_out_of_range_public_parameters_are_user_errors(tmp_path, monkeypatch, capsys, params):
    import yaml

    home = tmp_path / "home"
    if params["name"] == "dpne":
        register(home, pd.DataFrame({"user": [1, 2, 3], "text": ["a b", "b c", "c d"]}), "ds", "user:user", "dp")
    else:
        register(home, _ages(60), "ds", "record", "dp")
    monkeypatch.setenv("PRIVRELEASE_HOME", str(home))
    assert main(["--home", str(home), "ledger", "set-budget", "ds", "--epsilon", "10", "--delta", "1e-3"]) == 0
    request = tmp_path / "request.yaml"
    request.write_text(yaml.safe_dump({"dataset": "ds", "mechanism": params}))
    code = main(["--home", str(home), "release", str(request)])
    err = capsys.readouterr().err
    assert code == 2 and "internal error" not in err, err


# -- finding 6: a seed outside test mode is refused only after the charge on the flow path -------------


def test_a_seed_outside_test_mode_is_refused_before_the_charge(tmp_path, monkeypatch):
    """The command line calls ``spec.parse`` (which checks the seed); the Prefect flow receives the
    request as a validated model and hands it to ``pipeline.release``, whose first seed check is
    ``noise.generator`` inside ``privatize``: the deployment's Run form charges the ledger, then fails."""
    from privrelease.core.errors import SpecError
    from privrelease.core.release.spec import ReleaseRequest

    monkeypatch.delenv("PRIVRELEASE_TEST_MODE", raising=False)
    home = tmp_path / "home"
    register(home, _ages(60), "people", "record", "dp")
    opened = _store(home, monkeypatch)
    Ledger(opened.db).set_budget("people", Budget(10, 1e-3))
    request = ReleaseRequest.model_validate(
        {
            "dataset": "people",
            "seed": 1,
            "mechanism": {
                "name": "outliers",
                "params": {
                    "query": "count",
                    "columns": ["age"],
                    "k": 1,
                    "r": 1.0,
                    "epsilon": 1.0,
                    "delta": 1e-5,
                    "standardize": False,
                },
            },
        }
    )
    with pytest.raises(SpecError, match="test mode"):
        pipeline.release(opened, request)  # what privrelease/flows/release.py runs with its `request` parameter
    assert [e.status for e in Ledger(opened.db).entries()] == ["registered", "cap"], "the refused request was charged"


# -- finding 7: "one source has one budget" holds for one path only ------------------------------------


def test_one_content_has_one_budget(tmp_path):
    """The registry refuses a second id for the same *path*, but not for the same bytes under
    another name (a copy, a hard link), nor for the same path once the first id was dropped: each
    new id starts a fresh cap, so the same rows can be spent twice."""
    from privrelease.core.datasets.registry import Registry, Unit
    from privrelease.core.errors import SpecError

    home = tmp_path / "home"
    frame = _ages(60)
    register(home, frame, "first", "record", "dp")
    root = home / "data"
    (root / "copy.csv").write_bytes((root / "first.csv").read_bytes())
    registry = Registry(home)
    accepted = []

    def add(dataset_id: str, source: str, what: str) -> None:
        try:
            registry.add(dataset_id, source, "csv", Unit.parse("record"), "dp", root=root)
        except SpecError:
            return
        accepted.append(what)

    add("second", "copy.csv", "copy")
    registry.drop("first")
    add("third", "first.csv", "re-add after drop")
    assert accepted == [], f"registered the same rows under a new id (new budget): {accepted}"


# -- finding 0: a flow run may set the worker's environment (test mode, home) or its command -----------


def test_a_flow_run_cannot_set_the_workers_environment():
    """``prefect work-pool create privrelease --type process`` (scripts/serve.sh, docs/guides/operator.md) takes
    Prefect's default process template: ``env``, ``command`` and ``working_dir`` are job variables,
    and a flow run's own ``job_variables`` override the deployment's (prefect/workers/base.py merges
    ``flow_run.job_variables`` last). Whoever may start a deployment run (UI custom run,
    ``prefect deployment run --job-variable``) sets ``PRIVRELEASE_TEST_MODE=1`` and a ``seed`` (noise
    they reproduce offline from the public N, so the exact values), ``PRIVRELEASE_HOME`` (another
    ledger), or the command itself. The pool must fix them in its base job template."""
    import json
    import re

    from prefect.workers.process import ProcessWorker

    serve = (REPO / "scripts" / "serve.sh").read_text()
    (create,) = [line for line in serve.splitlines() if "work-pool create" in line and "printf" not in line]
    given = re.search(r"--base-job-template\s+(\S+)", create)
    template = (
        json.loads((REPO / given.group(1).strip("\"'")).read_text()) if given else ProcessWorker.get_default_base_job_template()
    )
    exposed = {"env", "command", "working_dir"} & set(template["variables"].get("properties", {}))
    assert not exposed, f"every flow run may set {sorted(exposed)}"
    # Prefect merges any `env` a run sends into a dict-valued env of the template, so the server must
    # refuse variables the template does not declare (tests/system/test_server.py sends them: 422)
    assert template["variables"].get("additionalProperties") is False
