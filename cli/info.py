"""``privrelease info``: where this installation keeps its state, and what it serves."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cli.launch import prefect_api_url
from core import __version__, paths, settings


def cmd_info(args: argparse.Namespace, root: Path) -> int:
    from core.datasets import snapshots
    from core.datasets.registry import Registry
    from core.ledger.ledger import Ledger
    from core.tables.readers import data_root

    ledger = Ledger(paths.database(root))
    entries = ledger.entries() if ledger.store.exists() else []
    info = {
        "version": __version__,
        "home": str(root),
        "home_from": args.home_from,
        "data_root": str(data_root(root)),
        "data_root_from": f"${settings.DATA_ROOT}" if settings.get(settings.DATA_ROOT) else "default (<home>/data)",
        "snapshot_store": snapshots.describe(root),
        "ledger_store": ledger.store.describe(),
        "ledger_head": {"seq": entries[-1].seq, "hash": entries[-1].hash} if entries else None,
        "datasets": [d.id for d in Registry(root).list()],
        "prefect_api_url": prefect_api_url(),
    }
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    for key, value in info.items():
        print(f"{key:<15} {value if value not in (None, []) else '-'}")
    return 0
