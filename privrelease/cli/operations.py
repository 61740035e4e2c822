"""The operator's commands: ``backup``, ``restore`` and ``upgrade`` of a home, and ``release --resume`` of a release whose
publishing the machine stopped."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from privrelease.cli import typed


def _mb(size: int) -> str:
    return f"{size / 2**20:.1f} MB"


def cmd_backup(args: argparse.Namespace, root: Path) -> int:
    from privrelease.core.operations.backup import backup

    taken = backup(root, Path(typed.path(args.folder)), args.wait)
    m = taken.manifest
    head = f"entry #{m['ledger_head'][0]}" if m["ledger_head"] else "no entries"
    print(
        f"backup of {root} in {taken.folder}: {len(m['files'])} files, {_mb(taken.size)}, {taken.seconds:.1f} s; the ledger at {head}"
    )
    print("  not in it: the ledger key (keep its copy apart; its SHA-256 is recorded), the anchors (outside the home)")
    for what in ("snapshot_store", "data_root"):
        if m[what] != "in the backup":
            print(f"  {what.replace('_', ' ')} {m[what]}: back it up on its own")
    return 0


def cmd_restore(args: argparse.Namespace, root: Path) -> int:
    from privrelease.core.operations.restore import restore
    from privrelease.core.people import requester

    done = restore(
        Path(typed.path(args.folder)),
        root,
        Path(typed.path(args.key)) if args.key else None,
        [Path(typed.path(a)) for a in args.anchors or []],
        args.accept_rollback,
        args.without_anchors,
        requester(),
        args.drill,
    )
    print(f"restored into {root}: the ledger at entry #{done.head} as backed up, {done.entries} entries now")
    if done.lost:
        print(
            f"  rollback accepted: {done.lost} entries the backup lacked were carried forward from the anchors (their charges stay spent)"
        )
    for line in done.problems:
        print(f"verification FAILED: {line}")
    if done.problems:
        return 3
    print("  verified: the hash chain and its anchors, every registration's snapshot, every release's files")
    if args.drill:
        print("  a drill: this copy reads and verifies, and refuses every charge (the ledger stays where it was)")
    else:
        print(
            "  the ledger now lives here: where it was backed up from is retired (its charges refused) where this host reaches it"
        )
    return 0


def cmd_upgrade(args: argparse.Namespace, root: Path) -> int:
    from privrelease.core.operations.restore import stamp
    from privrelease.core.operations.upgrade import upgrade
    from privrelease.core.people import requester
    from privrelease.core.store import SCHEMA_VERSION

    folder = Path(typed.path(args.backup)) if args.backup else root.parent / f"{root.name}-backup-{stamp()}"
    done = upgrade(root, folder, requester())
    if done.backup is None:
        print(f"the home {root} is at schema {done.old}, this privrelease's: nothing to upgrade")
        return 0
    print(f"upgraded {root} from schema {done.old} to {SCHEMA_VERSION}; the backup taken first: {done.backup.folder}")
    if done.moved:
        print(f"  the anchors moved out of the home, to {done.moved} (keep that folder out of backups)")
    return 0


def cmd_resume(args: argparse.Namespace, root: Path) -> int:
    from privrelease.core.errors import UserError
    from privrelease.core.release import charged
    from privrelease.core.release.home import Home
    from privrelease.core.release.pipeline import outcome

    home = Home(root)
    charge = next((e for e in home.ledger.entries() if e.release_id == args.resume and e.status == "reserved"), None)
    if charge is None:
        raise UserError(
            f"no release {args.resume!r} was charged in the ledger of home {root} (privrelease ledger history lists them)."
        )
    done = charged.resume(home, charge)
    out = outcome(done["manifest"], done["folder"], False)
    print(
        json.dumps(out, indent=2)
        if args.json
        else f"release {out['release_id']}\nfolder {out['folder']}\n(published from its sealed draw; nothing was charged again)"
    )
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "backup", help="copy the home (ledger, registrations, snapshots, releases) into a new folder, while it runs"
    )
    p.add_argument("folder", help="a new folder outside the home (made 0700)")
    p.add_argument("--wait", type=float, default=300.0, help="seconds to wait for releases half-way (charged, not yet settled)")
    p.set_defaults(func=cmd_backup)
    p = sub.add_parser("restore", help="restore a backup into an empty home, checked against the ledger's anchors")
    p.add_argument("folder", help="a folder privrelease backup wrote")
    p.add_argument("--key", metavar="FILE", help="the ledger key (a backup never holds it), unless it is already in place")
    p.add_argument("--anchors", action="append", metavar="FILE", help="the old host's anchors file (repeatable)")
    p.add_argument(
        "--accept-rollback",
        action="store_true",
        help="restore a backup older than the anchors: recorded, lost charges kept spent",
    )
    p.add_argument(
        "--without-anchors", action="store_true", help="no anchors were kept: restore unchecked, recorded on the ledger"
    )
    p.add_argument(
        "--drill",
        action="store_true",
        help="a restore drill: the copy is verified and refuses charges; the ledger stays where it is",
    )
    p.set_defaults(func=cmd_restore)
    p = sub.add_parser("upgrade", help="move the home to this privrelease's schema, after a backup, on the ledger's record")
    p.add_argument("--backup", metavar="DIR", help="where the backup taken first goes (default: beside the home)")
    p.set_defaults(func=cmd_upgrade)
