"""``privrelease info``: where this installation keeps its state, and what it serves."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from privrelease import __version__
from privrelease.cli.launch import prefect_api_url
from privrelease.core import paths, settings
from privrelease.core.errors import LedgerCorrupt


def cmd_info(args: argparse.Namespace, root: Path) -> int:
    from privrelease.core.datasets import snapshots
    from privrelease.core.datasets.registry import Registry
    from privrelease.core.ledger.ledger import Ledger
    from privrelease.core.tables.readers import data_root

    ledger = Ledger(paths.database(root))
    try:
        entries = ledger.entries() if ledger.store.exists() else []
        problem = None
    except LedgerCorrupt as exc:  # info still says where everything is; the ledger's commands refuse and say why
        entries, problem = [], str(exc)
    info = {
        "version": __version__,
        "home": str(root),
        "home_from": args.home_from,
        "data_root": str(data_root(root)),
        "data_root_from": f"${settings.DATA_ROOT}" if settings.get(settings.DATA_ROOT) else "default (<home>/data)",
        "snapshot_store": snapshots.describe(root),
        "ledger_store": ledger.store.describe(),
        "ledger_head": {"seq": entries[-1].seq, "hash": entries[-1].hash} if entries else None,
        "ledger_anchors": ledger.anchors.where(),
        "datasets": [d.id for d in Registry(root).list()],
        "prefect_api_url": prefect_api_url(),
    }
    info["warnings"] = ([problem] if problem else []) + warnings(root, ledger)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    for key, value in info.items():
        if key != "warnings":
            print(f"{key:<15} {value if value not in (None, []) else '-'}")
    for line in info["warnings"]:
        print(f"warning: {line}", file=sys.stderr)
    return 0


def warnings(root: Path, ledger) -> list[str]:
    """What the operator should fix: anchors a copy of the home would carry, private files others can read."""
    from privrelease.core.operations import files
    from privrelease.core.operations.upgrade import PRIVATE

    out = [
        f"the ledger's anchors {path} lie inside the home, so every copy of the home carries them and a restored older "
        f"copy would bring its own: point ${settings.LEDGER_ANCHORS} outside it"
        for path in ledger.anchors.files
        if path.resolve().is_relative_to(root.resolve())
    ]
    return out + files.loose([root / name for name in PRIVATE] + [p.parent for p in ledger.anchors.files])
