"""The catalogues on the command line: ``privrelease release list|show ID|get ID [--out DIR]`` (the published
releases and their files) and the budget column of ``privrelease dataset list|show`` (``privrelease.core.release.catalogue``).

``release`` keeps its one positional argument, a request file: the words ``list``, ``show`` and ``get`` in
its place read the catalogue instead (a request file of one of those names is given as ``./list``)."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from privrelease.core.errors import UserError

if TYPE_CHECKING:
    from privrelease.core.release.catalogue import Catalogue, Published

ACTIONS = ("list", "show", "get")


def cmd_release_catalogue(args: argparse.Namespace, root: Path) -> int:
    """``release list``, ``release show ID``, ``release get ID``: what was published."""
    from privrelease.core.release.catalogue import LIST_RELEASES, Catalogue
    from privrelease.core.release.home import Home

    action, release_id = args.request, args.release_id
    if action == "list":
        if release_id is not None:
            raise UserError(f"privrelease release list takes no id; show one release with privrelease release show {release_id}.")
        return _list(Catalogue(Home(root)), args)
    if release_id is None:
        raise UserError(f"privrelease release {action} needs a release id; list the published ones with {LIST_RELEASES}.")
    release = Catalogue(Home(root)).get(release_id)
    return _show(release, args) if action == "show" else _get(release, args)


def _cost(listing: dict) -> str:
    from privrelease.core.privacy.budget import charge_phrase

    p = listing["privacy"]
    if p["kind"] == "sdc":
        return f"sdc: {' → '.join(p['sdc_methods'])} (not DP, no budget spent)"
    return charge_phrase(p["kind"], p["epsilon"], p["delta"])


def _list(catalogue: Catalogue, args: argparse.Namespace) -> int:
    releases = catalogue.releases(args.dataset)
    if args.json:
        print(json.dumps(catalogue.index() | {"releases": [r.listing() for r in releases]}, indent=2))
        return 0
    if not releases:
        print(
            "no published release"
            + (f" of dataset {args.dataset!r}" if args.dataset else "")
            + "; a release is listed once its run has published it (privrelease release REQUEST)"
        )
        return 0
    print(f"{'release':<44} {'dataset':<16} {'mechanism':<14} {'created (UTC)':<19}  cost")
    for r in releases:
        s = r.listing()
        test = " [test release]" if s["test_mode"] else ""
        print(f"{s['id']:<44} {s['dataset']:<16} {s['mechanism']:<14} {s['created'][:19]:<19}  {_cost(s)}{test}")
    print("show one: privrelease release show ID; its files: privrelease release get ID [--out DIR]")
    return 0


def _show(release: Published, args: argparse.Namespace) -> int:
    s = release.listing()
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    print(f"release    {s['id']}{' (test release: not for publication)' if s['test_mode'] else ''}")
    print(f"dataset    {s['dataset']} (registration {s['dataset_version']}, unit {s['unit']})")
    print(f"request    {s['mechanism']} {json.dumps(s['request']['params'])}")
    print(f"guarantee  {s['guarantee']}")
    print(f"cost       {_cost(s)}")
    print(f"ledger     entry #{s['ledger']['seq']} ({s['ledger']['hash'][:16]}…)")
    print(f"created    {s['created']}")
    print("files")
    for f in s["files"]:
        print(f"  {f['name']:<32} {f['bytes']:>10} bytes  sha256 {f['sha256']}")
    print(f"get them: privrelease release get {s['id']} [--out DIR]\n")
    print((release.folder / s["report"]).read_text(), end="")
    return 0


def _get(release: Published, args: argparse.Namespace) -> int:
    """Copy the release's files into ``--out`` (default ./ID), each checked against its manifest's digest."""
    from privrelease.core.datasets.snapshots import sha256

    out = Path(args.out or release.id)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file; name a folder (it is created if missing).")
    files = release.files()
    missing = [n for n in files if not (release.folder / n).is_file()]
    if missing:
        raise UserError(
            f"release {release.id} lists {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} no longer in its "
            f"folder {release.folder}; nothing was copied. Tell the operator (privrelease ledger verify --files names "
            "every release whose files changed)."
        )
    clash = [n for n, digest in files.items() if (out / n).exists() and sha256(out / n) != digest]
    if clash:
        raise UserError(f"{out} already holds other files named {', '.join(clash)}; choose another --out folder.")
    out.mkdir(parents=True, exist_ok=True)
    for name, digest in files.items():
        target = out / name
        shutil.copyfile(release.folder / name, target)
        if sha256(target) != digest:
            target.unlink()
            raise UserError(
                f"the copy of {name} does not match its manifest's sha256; nothing is wrong with what you typed: "
                "tell the operator, and try again."
            )
        print(f"{target}  sha256 {digest}")
    print(f"release {release.id}: {len(files)} files in {out}, each matching its manifest's sha256")
    return 0


def budget_words(entry: dict) -> str:
    """A catalogue entry's budget in a few words, for ``dataset list``."""
    return "; no budget (SDC)" if entry["budget"] is None else f"; {entry['budget']['says']}"
