"""Steward and analyst steps for tests: register a table, write a release request."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from privrelease.core.datasets.registry import Dataset, Registry, Schema, Unit
from privrelease.core.mechanisms import declared
from privrelease.core.privacy.adjacency import Adjacency, ReplaceRecord
from privrelease.core.privacy.cost import DPCost
from privrelease.core.privacy.events import EpsilonDelta
from privrelease.core.sdc.policy import Policy

QI = ["age", "workclass", "education", "marital-status", "relationship", "race", "sex", "native-country", "salary"]


def dp(epsilon: float, delta: float = 0.0, adjacency: Adjacency = ReplaceRecord()) -> DPCost:
    """A test's DP charge: a part known only by its (epsilon, delta), under ``adjacency``."""
    return DPCost(EpsilonDelta(epsilon, delta), adjacency)


def open_policy(
    columns: list[str], keys: list[str], numeric: tuple[str, ...] = (), sensitive: tuple[str, ...] = (), **extra
) -> Policy:
    """A test's disclosure policy: ``keys`` the key variables (those in ``numeric`` numeric), ``sensitive``
    sensitive, every other column publishable, no threshold unless ``extra`` sets them."""
    rest = [c for c in columns if c not in keys and c not in sensitive]
    doc = {
        "keys": {"categorical": [k for k in keys if k not in numeric], "numeric": [k for k in keys if k in numeric]},
        "sensitive": list(sensitive),
        "publishable": rest,
        "thresholds": {"k": None},
    } | extra
    return Policy.model_validate(doc)


def register(
    home: Path,
    frame: pd.DataFrame | str | bytes,
    dataset_id: str = "census",
    unit: str = "record",
    purpose: str = "sdc",
    schema: Schema | None = None,
    suite: str | None = None,
    fmt: str = "csv",
    policy: Policy | None = None,
    keys: list[str] | None = None,
) -> Dataset:
    """Write ``frame`` (or raw file content) under the home's data root and register it, as a steward. An sdc
    table gets ``policy``, else an open one (``open_policy``) keyed on ``keys`` (default: its first column
    among age, x, else its first column), no threshold."""
    root = home / "data"
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{dataset_id}.{fmt}"
    if isinstance(frame, bytes):
        path.write_bytes(frame)
    elif isinstance(frame, str):
        path.write_text(frame)
    elif fmt == "jsonl":
        path.write_text(frame.to_json(orient="records", lines=True))
    else:
        frame.to_csv(path, index=False)
    if purpose == "sdc" and policy is None and isinstance(frame, pd.DataFrame):
        columns = list(frame.columns)
        keys = keys or [next((c for c in ("age", "x") if c in columns), columns[0])]
        policy = open_policy(columns, keys, tuple(k for k in keys if pd.api.types.is_numeric_dtype(frame[k])))
    dataset, _ = Registry(home).add(
        dataset_id, path.name, fmt, Unit.parse(unit), purpose, schema, suite, root=root, policy=policy
    )
    return dataset


def write_request(folder: Path, dataset: str = "census", **overrides) -> Path:
    """An RA request on the census columns; ``a__b=v`` overrides nested keys. Returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    doc: dict = {"dataset": dataset, "mechanism": {"name": "ra", "params": {"qi": QI, "sensitive": "occupation"}}}
    for key, value in overrides.items():
        node = doc
        *path, last = key.split("__")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    path = folder / "request.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def prepared(home: Path, frame: pd.DataFrame, seed: int, dataset_id: str = "census") -> pd.DataFrame:
    """The table an SDC mechanism of a seeded release runs on: the policy's columns, rows shuffled."""
    from privrelease.core import noise
    from privrelease.core.sdc import enforce

    return enforce.prepare(frame, Registry(home).get(dataset_id).policy, noise.generator(seed))


def write_policy(folder: Path, **extra) -> Path:
    """A disclosure policy file for the census tables: the RA request's QI columns are the key,
    occupation sensitive, hours-per-week publishable, no threshold unless ``extra`` sets them."""
    folder.mkdir(parents=True, exist_ok=True)
    doc = {
        "keys": {"categorical": [q for q in QI if q != "age"], "numeric": ["age"]},
        "sensitive": ["occupation"],
        "publishable": ["hours-per-week"],
        "thresholds": {"k": None},
    } | extra
    path = folder / "census.policy.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def typed(home: Path, *args: str, env: dict | None = None):
    """``privrelease ARGS`` with ``$PRIVRELEASE_HOME`` set to ``home``, run in this process: ``privrelease.cli.main.main`` on the
    argument list as typed (the same parsing, paths, messages and exit codes as the command, without its two seconds
    of imports). ``env`` is added to the environment for the call only. Returns a ``CompletedProcess``."""
    import contextlib
    import io
    import os
    import subprocess

    from privrelease.cli.main import main

    out, err, saved = io.StringIO(), io.StringIO(), dict(os.environ)
    os.environ.update({"PRIVRELEASE_HOME": str(home)} | (env or {}))
    for name in [n for n in os.environ if n.startswith("PREFECT_API")]:
        del os.environ[name]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return subprocess.CompletedProcess(["privrelease", *args], code, out.getvalue(), err.getvalue())


def planned_run(mechanism, frame, params, rng):
    """``mechanism``'s run as the release pipeline makes it: its parameters bound as the registry binds them to
    ``frame`` where a test left them empty (the public row count, the columns: ``Declared``), then handed the
    plan of those parameters (the plan charged)."""
    said, filled = declared(mechanism), {}
    if said.ROWS_PARAM and getattr(params, said.ROWS_PARAM) is None:
        filled[said.ROWS_PARAM] = len(frame)
    if said.COLUMNS_PARAM and getattr(params, said.COLUMNS_PARAM) is None and hasattr(frame, "columns"):
        filled[said.COLUMNS_PARAM] = list(frame.columns)
    if filled:
        params = type(params).model_validate({**params.model_dump(), **filled})
    return mechanism.run(frame, params, mechanism.plan(params), rng)
