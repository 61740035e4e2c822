"""The whole release surface on neighbouring datasets.

For each DP mechanism, the real release flow runs on D and on a neighbour D' under the dataset's
unit (one record replaced; one user's posts removed), with the same test seed, each in its own
home. Every byte an analyst or auditor can read must then be the same, except the mechanism's DP
outputs: the release folder (file names; manifest and report with the DP outputs masked), the
ledger, and Prefect's flow-run parameters, names of tasks, logs and artifacts.

Masking is by value, not by position: a token of the report or an artifact may differ only where
both runs print one of their own DP outputs (to the printed precision). Anything else that
differs (a count, a size, a fingerprint, a simulated number) fails the test.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from privrelease.core import mechanisms
from privrelease.core.datasets.demo import census
from privrelease.core.ledger.ledger import Ledger
from privrelease.core.privacy.budget import Budget
from privrelease.core.release.home import Home
from privrelease.core.release.spec import over_every, parse
from privrelease.core.sdc import report as sdc_report
from privrelease.core.sdc.report import SECTION
from privrelease.flows.artifacts import data_uri, readable
from tests.mechanisms.test_aggregate import payroll
from tests.mechanisms.test_dpne import phrase_corpus
from tests.mechanisms.test_outliers import planted
from tests.mechanisms.test_swapping import binormal
from tests.support.helpers import open_policy, planned_run, register

PUBLIC_SCALES = {c: {"mean": 0.0, "std": 1.0} for c in "abcde"}


def _neighbours_posts() -> tuple[pd.DataFrame, pd.DataFrame]:
    corpus = phrase_corpus(600, seed=3)
    loud = pd.DataFrame({"user": [10_000] * 3, "text": ["my secret phrase here"] * 3})
    return pd.concat([corpus, loud], ignore_index=True), corpus


def _neighbours_records() -> tuple[pd.DataFrame, pd.DataFrame]:
    d = planted(300, seed=4)
    d_prime = d.copy()
    d_prime.iloc[0] = [0.1, -0.2, 0.3, 0.0, 0.5]  # an outlier replaced by an ordinary record
    return d, d_prime


def _neighbours_payroll() -> tuple[pd.DataFrame, pd.DataFrame]:
    d = payroll(600, 80, seed=4)
    loud = pd.DataFrame({"user": 9999, "g": ["a", "b", "c"] * 4, "h": [1, 2] * 6, "item": 0, "x": 1e6})  # in every key
    return pd.concat([d, loud], ignore_index=True), d


CASES = {
    "aggregate": (_neighbours_payroll, "user:user",
                  {"name": "aggregate", "params": {"group_by": ["g", "h"], "max_groups": 6, "max_rows": 2,
                                                   "epsilon": 1.0, "delta": 1e-6, "measures": [
                                                       {"op": "count"}, {"op": "mean", "column": "x", "bounds": [0, 50]},
                                                       {"op": "quantile", "column": "x", "bounds": [0, 60], "q": [0.5]}]}},
                  [("keys",), ("privacy", "keys")]),
    "dpne": (_neighbours_posts, "user:user",
             {"name": "dpne", "params": {"text_column": "text", "epsilon": 2.0, "delta": 1e-6, "T": 3, "delta0": 10,
                                         "tokenizer": "words", "publish_weights": True}},
             [("counts_by_length",), ("privacy", "rho"), ("privacy", "valid_candidates"),
              ("privacy", "accuracy")]),
    "outliers-count": (_neighbours_records, "record",
                       {"name": "outliers", "params": {"query": "count", "columns": ["a", "b"], "k": 3, "r": 0.5,
                                                       "epsilon": 1.0, "delta": 1e-4, "standardize": PUBLIC_SCALES,
                                                       "noise": "smooth"}},
                       [("result",), ("noise_std",)]),
    "outliers-top": (_neighbours_records, "record",
                     {"name": "outliers", "params": {"query": "top_subspaces", "c": 1, "h": 2, "k": 3, "r": 0.5,
                                                     "epsilon": 2.0, "delta": 1e-4, "standardize": PUBLIC_SCALES,
                                                     "release_counts": True}},
                     [("result",), ("noise_std",)]),
}  # fmt: skip


def _pop(doc: dict, path: tuple[str, ...]) -> object:
    node = doc
    for key in path[:-1]:
        node = node[key]
    return node.pop(path[-1])


def _numbers(value: object) -> list[float]:
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers(v)]
    if isinstance(value, list):
        return [x for v in value for x in _numbers(v)]
    return []


_TOKEN = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def _printed(token: str, outputs: list) -> bool:
    """Whether ``token`` prints one of ``outputs`` at the token's own precision (a string output, such
    as a published file's digest or the run's timestamp, may be shortened with an ellipsis)."""
    texts = [o for o in outputs if isinstance(o, str)]
    if any(len(token) >= 17 and o.startswith(token.rstrip("…")) or token == o for o in texts):
        return True
    outputs = [o for o in outputs if not isinstance(o, str)]
    token = token.removesuffix(".")  # a number that ends a sentence
    if not _TOKEN.fullmatch(token):
        return False
    decimals = len(token.split(".")[1].split("e")[0]) if "." in token else 0
    value = float(token)
    return any(abs(value - v) <= 0.5 * 10**-decimals * (1 + 1e-9) + 1e-12 * abs(v) for v in outputs)


_DATA_URI = re.compile(r"data:image/png;base64,([A-Za-z0-9+/]+=*)")


def _charts_as_digests(text: str) -> str:
    """An artifact inlines each published chart as a ``data:`` URI; its bytes are those of a published
    file, so the URI is replaced by that file's digest (which the manifest lists)."""
    return _DATA_URI.sub(lambda m: hashlib.sha256(base64.b64decode(m.group(1))).hexdigest(), text)


def _same_but_outputs(a: str, b: str, out_a: list[float], out_b: list[float], what: str) -> None:
    ta, tb = re.split(r"(\s+|\||`|,|\(|\)|=)", a), re.split(r"(\s+|\||`|,|\(|\)|=)", b)
    assert len(ta) == len(tb), f"{what}: different shapes"
    for x, y in zip(ta, tb):
        if x != y:
            assert _printed(x, out_a) and _printed(y, out_b), f"{what}: {x!r} vs {y!r} is not a DP output"


async def _prefect_surface(flow_run_id: str) -> dict:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        LogFilter,
        LogFilterFlowRunId,
        TaskRunFilter,
        TaskRunFilterFlowRunId,
    )

    async with get_client() as client:
        run = await client.read_flow_run(flow_run_id)
        logs = await client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])))
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
        )
        tasks = await client.read_task_runs(task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(any_=[run.id])))
    return {
        "parameters": run.parameters,
        "state": run.state.message if run.state else None,
        "logs": sorted(log.message.replace(run.name, "<run>") for log in logs),
        "artifacts": sorted((a.key, a.type, a.description, a.data) for a in artifacts),
        "tasks": sorted(re.sub(r"-[0-9a-f]{3}$", "", t.name) for t in tasks),
    }


def _release(home: Path, frame: pd.DataFrame, unit: str, mechanism: dict, monkeypatch, purpose: str = "dp") -> dict:
    """Register ``frame`` and release it with a fixed id and seed; returns everything readable."""
    from privrelease.flows.release import release

    monkeypatch.setenv("PRIVRELEASE_HOME", str(home))
    register(home, frame, "ds", unit, purpose, policy=_sdc_policy(frame, mechanism) if purpose == "sdc" else None)
    if purpose == "dp":
        Ledger(home / "privrelease.duckdb").set_budget("ds", Budget(10.0, 1e-3))
    outcome = release(request=over_every(parse({"release_id": "r1", "dataset": "ds", "mechanism": mechanism, "seed": 11})))
    folder = Path(outcome["folder"])
    entries = [e.as_dict() for e in Ledger(home / "privrelease.duckdb").entries()]
    entries = json.loads(json.dumps(entries).replace(json.dumps(str(home))[1:-1], "<home>"))  # a holder names its home
    return {
        "files": sorted(p.name for p in folder.iterdir()),
        "manifest": json.loads((folder / "manifest.json").read_text()),
        "report": (folder / "report.md").read_text(),
        "ledger": entries,
        "home": str(home),
        "folder": folder,
    }


def _read_prefect(run: dict) -> None:
    """Prefect's copy of the run, once its log lines have been shipped to the server."""
    surface = asyncio.run(_prefect_surface(run["ledger"][-1]["flow_run_id"]))
    run["prefect"] = json.loads(json.dumps(surface).replace(run.pop("home"), "<home>"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_only_dp_outputs_differ_between_neighbours(prefect_server, test_mode, tmp_path, monkeypatch, case):
    make, unit, mechanism, output_paths = CASES[case]
    d, d_prime = make()
    from prefect.logging.handlers import APILogHandler

    runs = [_release(tmp_path / name, frame, unit, mechanism, monkeypatch) for name, frame in (("d", d), ("dp", d_prime))]
    APILogHandler().flush()
    time.sleep(2.5)
    for run in runs:
        _read_prefect(run)
    outputs = []
    for run in runs:
        manifest = run["manifest"]
        found = [_pop(manifest, p) for p in output_paths]
        # public but run-specific: digests of the published files (which hold DP outputs only), the
        # time of the run, and the ledger hash that covers it
        varying = [*manifest.pop("files").values(), manifest.pop("created"), manifest["ledger"].pop("hash")]
        manifest["input"].pop("registered")
        outputs.append(_numbers(found) + varying)
        for entry in run["ledger"]:
            for key in ("ts", "hash", "prev_hash", "flow_run_id"):
                entry.pop(key)
            for key in ("counts_by_length", "rho", "valid_candidates", "keys"):
                entry["detail"].pop(key, None)
        run["prefect"]["artifacts"] = [list(a) for a in run["prefect"]["artifacts"]]
    a, b = runs
    assert a["files"] == b["files"]
    assert a["manifest"] == b["manifest"]
    assert a["ledger"] == b["ledger"]
    assert a["prefect"]["parameters"] == b["prefect"]["parameters"]
    assert a["prefect"]["tasks"] == b["prefect"]["tasks"]
    assert a["prefect"]["logs"] == b["prefect"]["logs"]
    assert a["prefect"]["state"] == b["prefect"]["state"]
    _same_but_outputs(a["report"], b["report"], *outputs, "report.md")
    assert len(a["prefect"]["artifacts"]) == len(b["prefect"]["artifacts"]) == 1
    (art_a,), (art_b,) = a["prefect"]["artifacts"], b["prefect"]["artifacts"]
    assert art_a[:3] == art_b[:3]
    assert _DATA_URI.search(art_a[3]), "the release artifact shows its chart"
    _same_but_outputs(_charts_as_digests(art_a[3]), _charts_as_digests(art_b[3]), *outputs, "release artifact")
    assert outputs[0] != outputs[1] or case == "dpne"  # control: the neighbours do differ in what is released


def test_the_harness_catches_a_published_exact_size(prefect_server, test_mode, tmp_path, monkeypatch):
    """Control: a count measured on the input, printed in the report, is caught as a difference."""
    d, d_prime = _neighbours_posts()
    report_a = f"| released | 12 |\n| posts | {len(d)} |"
    report_b = f"| released | 11 |\n| posts | {len(d_prime)} |"
    _same_but_outputs(report_a.replace(f"{len(d)}", "0"), report_b.replace(f"{len(d_prime)}", "0"), [12.0], [11.0], "ok")
    with pytest.raises(AssertionError, match="is not a DP output"):
        _same_but_outputs(report_a, report_b, [12.0], [11.0], "report")


def test_dpne_on_neighbouring_corpora_keeps_a_user_unique_phrase_private():
    """Statistical check over 100 runs per corpus: an n-gram only the removed user holds is never
    released (P <= delta = 1e-6 per run, so seeing it even once in 100 runs has probability
    <= 1e-4), and a shared phrase is released about as often with and without that user (an exact
    binomial test at level 1e-3 per word)."""
    from scipy.stats import binomtest

    from privrelease.core.mechanisms import dpne

    d, d_prime = _neighbours_posts()
    params = dpne.Params(user_column="user", text_column="text", epsilon=1.0, delta=1e-6, T=1, delta0=10, tokenizer="words")
    runs = 100

    def released(frame: pd.DataFrame, p: dpne.Params, seed: int) -> set[str]:
        return set(dpne.extract(frame, p, dpne.plan(p), np.random.Generator(np.random.PCG64(seed)))[0]["ngram"])

    seen_d = [released(d, params, s) for s in range(runs)]
    seen_dp = [released(d_prime, params, 10_000 + s) for s in range(runs)]
    assert not any("secret" in s for s in seen_d) and not any("secret" in s for s in seen_dp)
    for word in ("cat", "privacy"):
        hits_d, hits_dp = sum(word in s for s in seen_d), sum(word in s for s in seen_dp)
        # two-sided exact test at 1e-3: the one-user difference moves no frequency detectably
        assert binomtest(hits_d, runs, max(min(hits_dp / runs, 1 - 1e-9), 1e-9)).pvalue > 1e-3 or hits_d == hits_dp
    # control: the event is observable; once 150 users hold the phrase it is released in most runs
    many = pd.concat([d_prime, pd.DataFrame({"user": range(20_000, 20_150), "text": "my secret phrase here"})])
    assert sum("secret" in released(many, params, s) for s in range(20)) >= 18


def _sdc_policy(frame: pd.DataFrame, mechanism: dict):
    """The steward's policy in these cases: the request's protected columns are the key (RA's sensitive column sensitive)."""
    p = mechanism["params"]
    keys = list(p.get("qi") or p["swap_set"])
    numeric = tuple(k for k in keys if pd.api.types.is_numeric_dtype(frame[k]))
    return open_policy(list(frame.columns), keys, numeric, (p["sensitive"],) if "sensitive" in p else ())


def _role(frame: pd.DataFrame, mechanism: dict, released: pd.DataFrame) -> sdc_report.Roles:
    module = mechanisms.get(mechanism["name"])
    params = module.Params.model_validate(mechanism["params"])
    return sdc_report.roles(mechanism["name"], _sdc_policy(frame, mechanism), module.protects(params), {}, frame, released)


def _neighbours_census() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Record 0 replaced by a copy of another record: the first whose copy moves the external
    figures of the release (seed 11, as ``_release``: rows shuffled, then RA), so the test's masking is exercised."""
    from privrelease.core import noise
    from privrelease.core.mechanisms import ra
    from privrelease.core.sdc import enforce

    d = census(600)
    mechanism = SDC_CASES["ra"][1]
    params = ra.Params.model_validate(mechanism["params"])
    policy = _sdc_policy(d, mechanism)

    def figures(frame: pd.DataFrame) -> dict:
        released = planned_run(ra, enforce.prepare(frame, policy, noise.generator(11)), params, noise.generator(11)).data
        return sdc_report.external(released, _role(frame, mechanism, released))

    for j in range(1, 600):
        d_prime = d.copy()
        d_prime.iloc[0] = d.iloc[j]
        if figures(d_prime) != figures(d):
            return d, d_prime
    raise AssertionError("no neighbour moves the figures")


def _neighbours_binormal() -> tuple[pd.DataFrame, pd.DataFrame]:
    d = binormal(600)
    d_prime = d.copy()
    d_prime.loc[0, ["x", "y"]] = [1.9, -1.9]  # one record's swapped values replaced
    return d, d_prime


SDC_CASES = {
    "ra": (_neighbours_census, {"name": "ra", "params": {"qi": ["age", "sex", "race", "education"],
                                                         "sensitive": "occupation"}}),
    "mews": (_neighbours_binormal, {"name": "mews", "params": {"swap_set": ["x", "y"], "widths": 0.5}}),
    # the third privacy review: MEWS suppressing lone tuples (widths in sd units), RA with p: entropy
    "mews-suppress": (_neighbours_binormal, {"name": "mews", "params": {"swap_set": ["x", "y"], "widths": 1.5,
                                                                        "singletons": "suppress"}}),
    "ra-entropy": (_neighbours_census, {"name": "ra", "params": {"qi": ["age", "sex", "race", "education"],
                                                                "sensitive": "occupation", "p": "entropy"}}),
}  # fmt: skip
INTERNAL_ONLY = ("For the data steward only", "Internal SDC report", "sdc-reports", "pMSE = ", "record linkage in rank")


def _section(text: str) -> str:
    """The external SDC section of a report or an artifact: from its heading to the next one."""
    start = text.index(SECTION)
    end = text.find("\n#", start + len(SECTION))
    return text[start : end if end >= 0 else None]


@pytest.mark.parametrize("case", sorted(SDC_CASES))
def test_external_sdc_report_differs_only_through_the_released_table(prefect_server, test_mode, tmp_path, monkeypatch, case):
    """An SDC release on D and on D' (one record replaced), same seed: its external report (report
    section, manifest figures, chart in the artifact) is recomputed from each published table
    alone, and the two differ only where each prints a figure of its own released table. The
    internal report stays under the home: none of its words or figures reach Prefect."""
    from prefect.logging.handlers import APILogHandler

    make, mechanism = SDC_CASES[case]
    runs = [_release(tmp_path / name, frame, "record", mechanism, monkeypatch, "sdc") for name, frame in zip(("d", "dp"), make())]
    APILogHandler().flush()
    time.sleep(2.5)
    outputs, sections = [], []
    for run in runs:
        internal = json.loads((sdc_report.folder(Path(run["home"]), "ds", "r1") / "internal.json").read_text())
        _read_prefect(run)
        folder = run.pop("folder")
        released = duckdb.connect().execute("SELECT * FROM read_parquet(?)", [str(folder / "data.parquet")]).df()
        figures = json.loads(json.dumps(sdc_report.external(released, _role(released, mechanism, released))))
        assert run["manifest"]["sdc_report"] == figures
        assert _section(run["report"]).startswith(sdc_report.external_section(figures, mechanism["name"]))  # then the charts
        (artifact,) = run["prefect"]["artifacts"]
        assert _section(artifact[3]).startswith(readable(sdc_report.external_section(figures, mechanism["name"])))
        assert data_uri(folder / sdc_report.EXTERNAL_CHART) in artifact[3], "the artifact shows the external chart"
        surface = json.dumps(run["prefect"])
        assert not [w for w in INTERNAL_ONLY if w in surface]
        assert f"pMSE = {internal['pmse']['pmse']:.3g}" not in surface
        outputs.append(_numbers(figures))
        sections.append(_section(run["report"]))
    a, b = runs
    _same_but_outputs(*sections, *outputs, "external SDC report")
    assert a["prefect"]["logs"] == b["prefect"]["logs"] and any("assess:" in line for line in a["prefect"]["logs"])
    assert a["prefect"]["tasks"] == b["prefect"]["tasks"] and "assess" in a["prefect"]["tasks"]
    assert a["manifest"]["files"]["data.parquet"] != b["manifest"]["files"]["data.parquet"], "the released tables differ"
    # control: on RA's few discrete keys the neighbours move the figures (so the masking is exercised);
    # MEWS's keys are continuous, unique on both tables: the same figures
    if case in ("ra", "mews"):
        assert (outputs[0] != outputs[1]) == (case == "ra")


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_preview_is_the_same_on_neighbours(tmp_path, monkeypatch, case):
    """The preview reads no row: on a dataset and its neighbour it says the same, byte for byte."""
    from privrelease.core.release import preview

    make, unit, mechanism, _ = CASES[case]
    seen = []
    for name, frame in zip(("d", "dp"), make()):
        home = tmp_path / name
        monkeypatch.setenv("PRIVRELEASE_HOME", str(home))
        register(home, frame, "ds", unit, "dp")
        Ledger(home / "privrelease.duckdb").set_budget("ds", Budget(10.0, 1e-3))
        found = preview.preview(Home(home), parse({"dataset": "ds", "mechanism": mechanism}))
        seen.append(json.dumps(found) + preview.text(found))
    assert seen[0] == seen[1]
