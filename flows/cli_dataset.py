"""The data steward's ``privrelease dataset`` commands: register, list, show, refresh and drop datasets."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def cmd_dataset_add(args: argparse.Namespace, root: Path) -> int:
    from core.registry import Registry, Unit, read_schema

    schema = read_schema(args.schema) if args.schema else None
    dataset, inferred = Registry(root).add(
        args.id, args.source, args.format, Unit.parse(args.unit), args.purpose, schema,
        str(Path(args.suite).resolve()) if args.suite else None, args.delimiter,
    )  # fmt: skip
    _show(dataset)
    if dataset.purpose == "sdc":
        for column in Registry(root).identifiers(dataset):
            print(f"warning: column {column!r} holds a different value in every row (an identifier?); an sdc "
                  "release publishes it as it is. Drop it from the source and refresh, unless it is meant to be public.")
    if inferred:
        print("\nschema (inferred from the file, now public; keep it and pass it with --schema next time):")
        print(dataset.schema.yaml(), end="")
    return 0


def _show(dataset) -> None:
    rows = "" if dataset.rows is None else f", {dataset.rows} rows (public)"
    print(f"dataset {dataset.id}: registration {dataset.version}, unit {dataset.unit}, purpose {dataset.purpose}, "
          f"{len(dataset.schema.columns)} columns{rows}")  # fmt: skip


def cmd_dataset_list(args: argparse.Namespace, root: Path) -> int:
    from core.registry import Registry

    datasets = Registry(root).list()
    if args.json:
        print(json.dumps([d.public() for d in datasets], indent=2))
        return 0
    for dataset in datasets:
        _show(dataset)
    if not datasets:
        print("no datasets registered; register one with privrelease dataset add")
    return 0


def cmd_dataset_show(args: argparse.Namespace, root: Path) -> int:
    from core.registry import Registry

    print(json.dumps(Registry(root).get(args.id).public(), indent=2))
    return 0


def cmd_dataset_refresh(args: argparse.Namespace, root: Path) -> int:
    from core.registry import Registry

    _show(Registry(root).refresh(args.id))
    return 0


def cmd_dataset_drop(args: argparse.Namespace, root: Path) -> int:
    from core.registry import Registry

    Registry(root).drop(args.id)
    print(f"dataset {args.id}: stored rows deleted; its registration history and ledger entries remain")
    return 0
