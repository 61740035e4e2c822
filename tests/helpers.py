"""Steward and analyst steps for tests: register a table, write a release request."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from core.registry import Dataset, Registry, Schema, Unit

QI = ["age", "workclass", "education", "marital-status", "relationship", "race", "sex", "native-country", "salary"]


def register(
    home: Path, frame: pd.DataFrame | str | bytes, dataset_id: str = "census", unit: str = "record",
    purpose: str = "sdc", schema: Schema | None = None, suite: str | None = None, fmt: str = "csv",
) -> Dataset:  # fmt: skip
    """Write ``frame`` (or raw file content) under the home's data root and register it, as a steward."""
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
    dataset, _ = Registry(home).add(dataset_id, path.name, fmt, Unit.parse(unit), purpose, schema, suite, root=root)
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
