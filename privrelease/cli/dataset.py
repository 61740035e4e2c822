"""The data steward's ``privrelease dataset`` commands: register, list, show, refresh and drop datasets."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from privrelease.cli import typed


def cmd_dataset_add(args: argparse.Namespace, root: Path) -> int:
    return _register(args, root, dry_run=False)


def cmd_dataset_check(args: argparse.Namespace, root: Path) -> int:
    return _register(args, root, dry_run=True)


def _register(args: argparse.Namespace, root: Path, dry_run: bool) -> int:
    """``dataset add``, or its dry run ``dataset check``: the same reading and checks, the same warnings;
    the dry run writes nothing."""
    from privrelease.core.datasets.infer import Reading
    from privrelease.core.datasets.ingest import read_schema
    from privrelease.core.datasets.registry import Registry, Unit
    from privrelease.core.people import requester
    from privrelease.core.sdc import policy

    schema = read_schema(typed.path(args.schema)) if args.schema else None
    rules = policy.read(typed.path(args.policy)) if args.policy else None
    registry, warnings = Registry(root), []
    dataset, inferred = registry.add(
        args.id,
        _source(args.source, root),
        args.format,
        Unit.parse(args.unit),
        args.purpose,
        schema,
        typed.path(args.suite),
        args.delimiter,
        policy=rules,
        requested_by=requester(),
        reading=Reading.parse(args.na, args.decimal, args.delimiter, args.format, args.normalise),
        warn=warnings.append,
        dry_run=dry_run,
    )
    _show(dataset, "a dry run, not registered" if dry_run else None)
    for line in warnings:
        print(f"warning: {line}")
    if dataset.purpose == "sdc":
        _policy_notes(registry, dataset, registered=not dry_run)
    if dry_run:
        said = "inferred from the file" if inferred else "as declared"
        print(f"\nschema ({said}; it becomes public when registered):")
        print(dataset.schema.yaml(), end="")
        print("nothing was registered or written; register it with the same arguments: privrelease dataset add ...")
    elif inferred:
        print("\nschema (inferred from the file, now public; keep it and pass it with --schema next time):")
        print(dataset.schema.yaml(), end="")
    return 0


def _source(text: str, root: Path) -> str:
    """``--source`` as typed, relative to the current folder; a name found only in the data root (where
    sources were read from before) is refused saying where it is."""
    from privrelease.core.errors import SpecError
    from privrelease.core.tables.readers import data_root

    path = typed.path(text)
    there = data_root(root) / text
    if not Path(path).exists() and not Path(text).is_absolute() and there.is_file():
        raise SpecError(
            f"--source {text!r} is not a file in the current folder {str(Path.cwd())!r} (a relative path is relative "
            f"to the current folder); the data root has one: pass --source {there}"
        )
    return path


def _policy_notes(registry, dataset, registered: bool = True) -> None:
    """What the steward should know of an sdc dataset's policy: unset, identifier-like columns it publishes,
    columns it never publishes, thresholds."""
    rules = dataset.policy
    if rules is None:
        print(
            f"warning: no disclosure policy: no SDC release of {dataset.id!r} is possible until you set one with "
            + (f"{typed.command()} dataset policy {dataset.id} --policy FILE" if registered else "--policy FILE")
            + " (identifiers, key variables, sensitive and publishable columns, thresholds)."
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
            drop = (
                f"drop it from the source and run {typed.command()} dataset refresh {dataset.id} (the column leaves the schema)"
                if registered
                else "drop it from the source before registering"
            )
            print(
                f"warning: column {column!r} holds a different value in every row (an identifier?); {fate}. "
                f"If it identifies people, {drop}, or name it under identifiers: in the disclosure policy "
                + (f"({typed.command()} dataset policy {dataset.id} --policy FILE)." if registered else "(--policy FILE).")
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
    import dataclasses

    from privrelease.core.datasets.registry import Registry
    from privrelease.core.people import requester
    from privrelease.core.sdc import policy

    registry, rules = Registry(root), policy.read(typed.path(args.policy))
    if args.check:  # the dry run: the same checks against the registered rows, what the steward should know, nothing recorded
        advice = registry.check_policy(args.id, rules)
        dataset = dataclasses.replace(registry.get(args.id), policy=rules)
        print(f"dataset {dataset.id}: the disclosure policy fits the registered rows (registration {dataset.version})")
        for line in advice:
            print(f"{'note' if line.startswith('on the registered rows') else 'warning'}: {line}")
        _policy_notes(registry, dataset, registered=True)
        print(f"nothing was recorded (a dry run); record it with: privrelease dataset policy {args.id} --policy {args.policy}")
        return 0
    _policy_recorded(registry, registry.set_policy(args.id, rules, requester()))
    return 0


def _policy_recorded(registry, dataset) -> None:
    """A new disclosure policy, recorded: its ledger entry, and what the steward should know of it."""
    print(f"dataset {dataset.id}: disclosure policy recorded as ledger entry #{dataset.policy_entry}")
    _policy_notes(registry, dataset)


def _show(dataset, status: str | None = None, budget: str = "") -> None:
    rows = "" if dataset.rows is None else f", {dataset.rows} rows (public)"
    print(
        f"dataset {dataset.id}: {status or f'registration {dataset.version}'}, unit {dataset.unit}, purpose {dataset.purpose}, "
        f"{len(dataset.schema.columns)} columns{rows}{budget}"
    )


def cmd_dataset_list(args: argparse.Namespace, root: Path) -> int:
    from privrelease.cli.catalogue import budget_words
    from privrelease.core.datasets.registry import Registry
    from privrelease.core.release.catalogue import Catalogue
    from privrelease.core.release.home import Home

    datasets = Registry(root).list()
    entries = {e["id"]: e for e in Catalogue(Home(root)).datasets()}  # public facts, budget, what fits next
    if args.json:
        print(json.dumps([entries[d.id] for d in datasets], indent=2))
        return 0
    for dataset in datasets:
        _show(dataset, budget=budget_words(entries[dataset.id]))
    if not datasets:
        print("no datasets registered; register one with privrelease dataset add")
    return 0


def cmd_dataset_show(args: argparse.Namespace, root: Path) -> int:
    from privrelease.core.release.catalogue import Catalogue
    from privrelease.core.release.home import Home

    print(json.dumps(Catalogue(Home(root)).dataset(args.id), indent=2))  # public facts, budget, what fits next
    return 0


def cmd_dataset_refresh(args: argparse.Namespace, root: Path) -> int:
    from privrelease.core.datasets.ingest import read_schema
    from privrelease.core.datasets.registry import Registry
    from privrelease.core.people import requester
    from privrelease.core.sdc import policy

    warnings = []
    schema = read_schema(typed.path(args.schema)) if args.schema else None
    rules = policy.read(typed.path(args.policy)) if args.policy else None  # a bad file is refused before any row is read
    registry = Registry(root)
    dataset = registry.refresh(
        args.id, schema=schema, warn=warnings.append, policy=rules, requested_by=requester(), delimiter=args.delimiter
    )
    _show(dataset)
    for line in warnings:
        print(f"warning: {line}")
    if rules is not None:
        _policy_recorded(registry, dataset)
    return 0


def cmd_dataset_drop(args: argparse.Namespace, root: Path) -> int:
    from privrelease.core.datasets.registry import Registry

    Registry(root).drop(args.id)
    print(f"dataset {args.id}: stored rows deleted; its registration history and ledger entries remain")
    return 0


def _registration(p: argparse.ArgumentParser) -> None:
    """The arguments of ``dataset add`` and of its dry run ``dataset check``."""
    p.add_argument("id")
    p.add_argument("--source", required=True, help="the source file (a relative path is relative to the current folder)")
    p.add_argument("--format", required=True, choices=["csv", "parquet", "jsonl"])
    p.add_argument("--unit", required=True, help="privacy unit: record, or user:COLUMN")
    p.add_argument(
        "--purpose",
        required=True,
        choices=["dp", "sdc"],
        help="dp: differentially private releases; sdc: statistical disclosure control (RA, swapping, recoding, "
        "suppression, ...) under a disclosure policy",
    )
    p.add_argument(
        "--policy",
        help="sdc: the disclosure policy (YAML): identifiers, key variables, sensitive and "
        "publishable columns, weight, cluster, risk thresholds, recoding hierarchies",
    )
    p.add_argument("--schema", help="declared schema (YAML/JSON); without it the inferred one is printed")
    p.add_argument("--suite", help="Great Expectations suite (JSON) checked at registration and refresh")
    p.add_argument("--delimiter", default=",", help="CSV delimiter")
    p.add_argument(
        "--na",
        help='values meaning "missing" in text columns, comma-separated (default: empty and NA), e.g. --na "NA,?"',
    )
    p.add_argument("--decimal", default=".", choices=[".", ","], help="decimal separator of numbers in text (1,5: --decimal ,)")
    p.add_argument(
        "--normalise",
        action="store_true",
        help="read text values without invisible characters (zero-width spaces, BOM), no-break spaces as spaces, "
        "trimmed and in Unicode NFC (kept for refresh); registration warns of such values without it",
    )


def add_parsers(sub) -> None:
    ds = sub.add_parser("dataset", help="the data steward's dataset registry")
    dsub = ds.add_subparsers(dest="dataset_command", required=True)
    p = dsub.add_parser("add", help="ingest a source once, check it, and register it")
    _registration(p)
    p.set_defaults(func=cmd_dataset_add)
    p = dsub.add_parser("check", help="a dry run of add (same arguments): the inferred schema and the warnings; writes nothing")
    _registration(p)
    p.set_defaults(func=cmd_dataset_check)
    p = dsub.add_parser("list", help="registered datasets (public facts)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_dataset_list)
    p = dsub.add_parser("show", help="one dataset's public facts: unit, purpose, schema, disclosure policy")
    p.add_argument("id")
    p.set_defaults(func=cmd_dataset_show)
    p = dsub.add_parser("policy", help="set an sdc dataset's disclosure policy (recorded on the ledger)")
    p.add_argument("id")
    p.add_argument("--policy", required=True, help="the disclosure policy (YAML)")
    p.add_argument(
        "--check",
        action="store_true",
        help="a dry run: check the policy against the registered rows and say what to know of it (identifiers, "
        "near-unique columns, records in key cells under k); records nothing",
    )
    p.set_defaults(func=cmd_dataset_policy)
    p = dsub.add_parser("refresh", help="re-ingest and re-check from the registered source")
    p.add_argument("id")
    p.add_argument(
        "--schema",
        help="a new schema (YAML/JSON) for the source as it is now; without it the registered one, less the "
        "columns the source no longer has",
    )
    p.add_argument(
        "--policy",
        help="sdc: a new disclosure policy (YAML) for the source as it is now, checked as at registration and "
        "recorded on the ledger; without it the registered one, which must still fit",
    )
    p.add_argument("--delimiter", help="a CSV source's delimiter as it is now (kept for the next refresh)")
    p.set_defaults(func=cmd_dataset_refresh)
    p = dsub.add_parser("drop", help="delete the stored rows (the ledger keeps its entries)")
    p.add_argument("id")
    p.set_defaults(func=cmd_dataset_drop)
