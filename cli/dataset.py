"""The data steward's ``privrelease dataset`` commands: register, list, show, refresh and drop datasets."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def cmd_dataset_add(args: argparse.Namespace, root: Path) -> int:
    from core.datasets.ingest import read_schema
    from core.datasets.registry import Registry, Unit
    from core.people import requester
    from core.sdc import policy

    schema = read_schema(args.schema) if args.schema else None
    rules = policy.read(args.policy) if args.policy else None
    dataset, inferred = Registry(root).add(
        args.id,
        args.source,
        args.format,
        Unit.parse(args.unit),
        args.purpose,
        schema,
        str(Path(args.suite).resolve()) if args.suite else None,
        args.delimiter,
        policy=rules,
        requested_by=requester(),
    )
    _show(dataset)
    if dataset.purpose == "sdc":
        _policy_notes(Registry(root), dataset)
    if inferred:
        print("\nschema (inferred from the file, now public; keep it and pass it with --schema next time):")
        print(dataset.schema.yaml(), end="")
    return 0


def _policy_notes(registry, dataset) -> None:
    """What the steward should know of an sdc dataset's policy: unset, identifier-like columns it publishes,
    columns it never publishes, thresholds."""
    rules = dataset.policy
    if rules is None:
        print(
            f"warning: no disclosure policy: no SDC release of {dataset.id!r} is possible until you set one with "
            f"privrelease dataset policy {dataset.id} --policy FILE (identifiers, key variables, sensitive and "
            "publishable columns, thresholds)."
        )
    for column in registry.identifiers(dataset):
        if rules is None or column not in rules.identifiers:
            role = next((r for r, cs in rules.roles().items() if column in cs), None) if rules else None
            fate = (
                f"the policy names it {role}, so a release publishes it"
                if role
                else "the policy does not name it, so no release publishes it"
                if rules
                else "set the policy"
            )
            print(
                f"warning: column {column!r} holds a different value in every row (an identifier?); {fate}. "
                "Name it under identifiers: in the disclosure policy (privrelease dataset policy) if it identifies "
                "people."
            )
    if rules is not None:
        unnamed = rules.unnamed(dataset.schema)
        if unnamed:
            print(f"note: the disclosure policy does not name {unnamed}; no release publishes them.")
        named = rules.thresholds.named()
        print(
            "thresholds every release must meet: "
            + ("; ".join(named) if named else "none (any table the methods produce is published)")
        )


def cmd_dataset_policy(args: argparse.Namespace, root: Path) -> int:
    from core.datasets.registry import Registry
    from core.people import requester
    from core.sdc import policy

    registry = Registry(root)
    dataset = registry.set_policy(args.id, policy.read(args.policy), requester())
    print(f"dataset {dataset.id}: disclosure policy recorded as ledger entry #{dataset.policy_entry}")
    _policy_notes(registry, dataset)
    return 0


def _show(dataset, budget: str = "") -> None:
    rows = "" if dataset.rows is None else f", {dataset.rows} rows (public)"
    print(
        f"dataset {dataset.id}: registration {dataset.version}, unit {dataset.unit}, purpose {dataset.purpose}, "
        f"{len(dataset.schema.columns)} columns{rows}{budget}"
    )


def cmd_dataset_list(args: argparse.Namespace, root: Path) -> int:
    from cli.catalogue import budget_words
    from core.datasets.registry import Registry
    from core.release.catalogue import Catalogue
    from core.release.home import Home

    datasets = Registry(root).list()
    entries = {e["id"]: e for e in Catalogue(Home(root)).datasets()}  # public facts, budget, what fits next
    if args.json:
        print(json.dumps([entries[d.id] for d in datasets], indent=2))
        return 0
    for dataset in datasets:
        _show(dataset, budget_words(entries[dataset.id]))
    if not datasets:
        print("no datasets registered; register one with privrelease dataset add")
    return 0


def cmd_dataset_show(args: argparse.Namespace, root: Path) -> int:
    from core.release.catalogue import Catalogue
    from core.release.home import Home

    print(json.dumps(Catalogue(Home(root)).dataset(args.id), indent=2))  # public facts, budget, what fits next
    return 0


def cmd_dataset_refresh(args: argparse.Namespace, root: Path) -> int:
    from core.datasets.registry import Registry

    _show(Registry(root).refresh(args.id))
    return 0


def cmd_dataset_drop(args: argparse.Namespace, root: Path) -> int:
    from core.datasets.registry import Registry

    Registry(root).drop(args.id)
    print(f"dataset {args.id}: stored rows deleted; its registration history and ledger entries remain")
    return 0
