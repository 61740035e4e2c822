"""Issue #42's benchmark: reading the release catalogue as the number of published releases grows.

Run: .venv/bin/python bench/bench_catalogue.py [--releases 10 100 500]

A home with the demo datasets and one real SDC release of the census (2,000 rows); copies of its
folder are then published as further releases (each charged and settled on the ledger, its manifest
citing its own charge, as a run publishes it). For each size: the index (every release's summary,
each manifest read and its own sha256 computed), one release looked up by id (what every file
download does first), the dataset catalogue (the ledger's totals and every release), and a file
served through a gate in this process (its 190 KB CSV), each the median of 5.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from privrelease.core.datasets.demo import write_demo  # noqa: E402
from privrelease.core.ledger.ledger import ChargeRequest  # noqa: E402
from privrelease.core.release import pipeline, spec  # noqa: E402
from privrelease.core.release.catalogue import Catalogue  # noqa: E402
from privrelease.core.release.home import Home  # noqa: E402


def median_ms(fn, times: int = 5) -> float:
    seen = []
    for _ in range(times):
        start = time.perf_counter()
        fn()
        seen.append((time.perf_counter() - start) * 1000)
    return statistics.median(seen)


def publish_copies(home: Home, first, upto: int, have: int) -> None:
    """Publish copies of ``first`` until the home holds ``upto`` releases."""
    ledger = home.ledger
    params = first.manifest["mechanism"]["params"]
    for i in range(have, upto):
        rid = f"bench-{i:05d}"
        charge = ledger.reserve(ChargeRequest("census-demo", rid, "sdc", None, "sdc", params)).entry
        folder = first.folder.parent / rid
        shutil.copytree(first.folder, folder)
        manifest = dict(first.manifest, release_id=rid, ledger={"seq": charge.seq, "hash": charge.hash})
        (folder / "manifest.json").write_text(json.dumps(manifest))
        ledger.settle(rid, "published")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--releases", type=int, nargs="+", default=[10, 100, 500])
    args = parser.parse_args()
    from starlette.testclient import TestClient

    from privrelease.gate.accounts import Accounts
    from privrelease.gate.app import create_app

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "home"
        os.environ["PRIVRELEASE_HOME"] = str(root)
        home = Home(root)
        census = write_demo(root, rows=2000)
        pipeline.release(home, spec.load(census), log=logging.getLogger("bench"))
        catalogue = Catalogue(home)
        (first,) = catalogue.releases()
        Accounts(home.db).add("alice", "analyst", "correct horse battery")
        client = TestClient(create_app(root, "http://127.0.0.1:9", "x:y"))
        client.auth = ("alice", "correct horse battery")
        print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} cores")
        print("| published releases | index | one release by id | dataset catalogue | a 190 KB file through the gate |")
        print("|---|---|---|---|---|")
        have, url = 1, f"/privrelease/api/releases/{first.id}/files/data.csv"
        assert client.get(url).status_code == 200
        for n in args.releases:
            publish_copies(home, first, n, have)
            have = n
            assert len(catalogue.releases()) == n
            print(
                f"| {n} | {median_ms(catalogue.index):.0f} ms | {median_ms(lambda: catalogue.get(first.id)):.0f} ms "
                f"| {median_ms(catalogue.datasets):.0f} ms | {median_ms(lambda: client.get(url)):.0f} ms |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
