"""The ``privrelease ledger`` commands: caps and approval thresholds (the steward), history, totals,
verification and recovery (the auditor and the operator), and the move to PostgreSQL."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from privrelease.cli.words import entry_words
from privrelease.core import paths, settings
from privrelease.core.errors import LedgerCorrupt, UserError


def cmd_set_budget(args: argparse.Namespace, root: Path) -> int:
    from privrelease.core.datasets.registry import Registry
    from privrelease.core.ids import check_id
    from privrelease.core.ledger.approval import ApprovalRule
    from privrelease.core.ledger.ledger import Ledger
    from privrelease.core.people import requester
    from privrelease.core.privacy.budget import Budget
    from privrelease.core.spam.terms import MAIL, Terms

    check_id(args.dataset, "dataset id")
    spam = (args.min_colluders, args.min_threshold, args.allow_exact_runs)
    if args.dataset != MAIL and spam != (None, None, False):
        raise UserError(
            f"--min-colluders, --min-threshold and --allow-exact-runs are the terms of the users' mail; they "
            f"go with the cap of {MAIL!r}, not of {args.dataset!r}."
        )
    if args.dataset != MAIL and Registry(root).get(args.dataset).purpose != "dp":  # the mail corpus is not registered
        raise UserError(
            f"dataset {args.dataset!r} is registered for statistical disclosure control, which has "
            "no epsilon; a privacy budget applies to datasets registered with --purpose dp."
        )
    try:
        cap = Budget(args.epsilon, args.delta)
    except ValueError as exc:
        raise UserError(f"invalid budget: {exc}.") from None
    if args.approve_above is not None and not 0 <= args.approve_above <= 1:
        raise UserError(f"--approve-above is a share of the remaining budget, from 0 to 1; got {args.approve_above:g}.")
    if (args.approve_account_above is None) != (args.window is None):
        raise UserError(
            "--approve-account-above EPSILON and --window HOURS go together: the most one account may charge "
            "in that many hours without a steward's approval."
        )
    account = None if args.window is None else (args.approve_account_above, args.window)
    try:
        rule = ApprovalRule(args.approve_above, *(account or (None, None)))
    except ValueError as exc:
        raise UserError(f"invalid approval rule: {exc}.") from None
    terms = Terms.detail(*spam)
    ledger = Ledger(paths.database(root))
    earlier = ledger.cap_entry(args.dataset)
    entry = ledger.set_budget(args.dataset, cap, args.approve_above, requester(), account, terms)
    said = f"; {rule.words()}" if rule.any else ""
    if terms:
        said += f"; the mail's terms: {Terms.of(terms).words()}"
    print(f"cap for {args.dataset}: epsilon={cap.epsilon:g} delta={cap.delta:g}{said} (ledger entry #{entry.seq})")
    dropped = sorted(set(json.loads(earlier.detail)) - set(json.loads(entry.detail))) if earlier is not None else []
    if dropped:  # a cap replaces the one before it whole: say what no longer holds
        print(
            f"note: the earlier cap's {', '.join(d.replace('_', '-') for d in dropped)} no longer apply; give them "
            "again with this command to keep them"
        )
    if rule.share is not None and rule.account_epsilon is None:
        print(
            "note: --approve-above bounds each release's share of what remains, so many releases each under it can "
            "still spend the cap; bound an account's spend too with --approve-account-above EPSILON --window HOURS"
        )
    totals = next((t for t in ledger.totals() if t.dataset == args.dataset), None)
    if totals is not None and totals.over_cap:
        spent = totals.spent
        print(
            f"note: {args.dataset} has already spent epsilon={spent.epsilon:g} delta={spent.delta:g}; "
            "no further DP release fits under this cap"
        )
    return 0


WIDTH = 120  # a history line's most characters; --verbose and ledger show give the rest


def cmd_history(args: argparse.Namespace, root: Path) -> int:
    from privrelease.core.ledger.ledger import Ledger

    ledger = Ledger(paths.database(root))
    entries = ledger.entries(args.dataset)
    if args.dataset is not None and not entries:
        _no_entries(args.dataset, root, ledger)
    if args.json:
        print(json.dumps([e.as_dict() for e in entries], indent=2))
        return 0
    print(f"{'seq':>4}  {'time (UTC)':<16}  {'dataset':<14} what (requested by); ledger show SEQ for the whole entry")
    for e in entries:
        line = f"{e.seq:>4}  {e.ts[:16].replace('T', ' '):<16}  {e.dataset:<14} {entry_words(e)}"
        print(line if args.verbose or len(line) <= WIDTH else line[: WIDTH - 1] + "…")
        if args.verbose and e.detail not in ("{}", ""):
            print(f"{'':>6}detail: {_detail(json.loads(e.detail))}")
    return 0


def _no_entries(dataset: str, root: Path, ledger) -> None:
    """A --dataset with no entry: refused when no such dataset is known, so a typo is not read as "nothing spent"."""
    from privrelease.core.datasets.registry import Registry

    known = sorted({d.id for d in Registry(root).list()} | {e.dataset for e in ledger.entries()})
    if dataset not in known:
        raise UserError(
            f"no dataset {dataset!r} in the ledger or the registry of home {root}; "
            + (f"the datasets there are {', '.join(known)}." if known else "it has no datasets yet.")
        )


def _detail(detail: dict) -> str:
    return " ".join(f"{k}={len(v)} parts" if k == "events" else f"{k}={v}" for k, v in detail.items())  # events in full: --json


def cmd_show(args: argparse.Namespace, root: Path) -> int:
    """One ledger entry, every field, its parameters and detail in full."""
    from privrelease.core.ledger.ledger import Ledger

    entries = Ledger(paths.database(root)).entries()
    entry = next((e for e in entries if e.seq == args.seq), None)
    if entry is None:
        raise UserError(f"the ledger of home {root} has no entry #{args.seq}; it has entries #1 to #{len(entries)}.")
    print(json.dumps(entry.as_dict(), indent=2))
    return 0


def cmd_totals(args: argparse.Namespace, root: Path) -> int:
    from privrelease.core.ledger import account
    from privrelease.core.ledger.ledger import Ledger
    from privrelease.core.release import headroom

    ledger = Ledger(paths.database(root))
    entries = ledger.entries()
    totals = account.totals(entries, ledger.home)
    rooms = {t.dataset: headroom.after_last(entries, t.dataset) for t in totals if t.kind == "dp" and t.account is not None}
    if args.json:
        print(json.dumps([t.as_dict() | {"room": _room(rooms.get(t.dataset))} for t in totals], indent=2))
        return 0

    def pair(b) -> str:  # a Budget, or None
        return "no cap" if b is None else b.show()

    print(
        f"{'dataset':<16} {'kind':<4} {'cap eps/delta':>22} {'spent':>7} {'by':<6} {'next release like the last':<30} "
        f"{'charges eps/delta':>22} {'filter eps':>10} {'PLD eps':>8} {'GDP eps':>8}  releases (published/failed/pending)"
    )
    for t in totals:
        gdp = "-" if t.gdp_epsilon is None else f"{t.gdp_epsilon:.4g}"
        a, room = t.account, rooms.get(t.dataset)
        if t.kind == "dp":
            flt = "-" if a is None or a.filter_epsilon is None else f"{a.filter_epsilon:.4g}"
            share, by = a.spent if a is not None else (None, "-")  # the accountant's, whatever the last release was
            spent, by = ("-", "-") if share is None else (f"{100 * share:.3g}%", by)
            tight = "-" if a is None or a.pld_epsilon is None else f"{a.pld_epsilon:.4g}"
            nxt = "-" if room is None else "none fits" if room.epsilon is None else f"{room.like}: eps ≤ {room.epsilon:.3g}"
            money = f"{pair(t.cap):>22} {spent:>7} {by:<6} {nxt:<30} {pair(t.spent):>22} {flt:>10} {tight:>8} {gdp:>8}"
        else:  # no epsilon is claimed for sdc and mpc runs, so none is shown
            money = f"{'not DP: no budget':>22} {'-':>7} {'-':<6} {'-':<30} {'-':>22} {'-':>10} {'-':>8} {'-':>8}"
        print(f"{t.dataset:<16} {t.kind or '-':<4} {money}  {t.releases} ({t.published}/{t.failed}/{t.pending})")
    if any(t.kind == "dp" for t in totals):
        print(
            "spent: the share of the cap the accountant that admits has used (by basic: the charges added up, while no "
            "charge has Gaussian noise; by filter: the Rényi filter's costs over its budget), never above 100%; next "
            "release like the last: the largest epsilon of the same release (same delta and other parameters) the cap "
            "still admits; charges: the charges added up, which may pass the cap's epsilon once the Rényi filter admits "
            "(it counts Gaussian noise together, tighter than a sum); filter eps: what the filter certifies for the whole "
            "history at the cap's delta; PLD eps: dp-accounting's tight figure there (reported, not used to admit) "
            "(docs/ACCOUNTING.md)"
        )
    return 0


def _room(room) -> dict | None:
    return None if room is None else room.as_dict()


def cmd_verify(args: argparse.Namespace, root: Path) -> int:
    from datetime import UTC, datetime

    from privrelease.core.ledger import anchors
    from privrelease.core.ledger.ledger import Ledger
    from privrelease.core.operations import files

    ledger = Ledger(paths.database(root))
    try:
        lines = tuple(anchors.parse_line(line, anchors.key(root, create=False)) for line in args.anchor or ())
        n = ledger.verify(paths.releases(root), lines)
    except LedgerCorrupt as exc:
        print(f"ledger verification FAILED at entry {exc.seq}: {exc}", file=sys.stderr)
        return 3
    print(f"ledger ok: {n} entries, hash chain intact, every anchor and every published release's entry present")
    if lines:
        held = ", ".join(f"entry #{m['seq']} of {m['ts']}" for m in lines)
        print(f"the auditor's anchor lines hold: {held}")
    if args.files:
        problems = files.check_releases(paths.releases(root))
        for line in problems:
            print(f"release files FAILED: {line}", file=sys.stderr)
        for folder in files.sealed(paths.staging(root)):
            release = folder.name.rsplit(".", 1)[0]
            print(
                f"sealed: {release} of {folder.parent.name} is drawn and charged, not yet published: privrelease release --resume {release}"
            )
        if problems:
            return 3
        print(
            f"release files ok: every published release's files match its manifest ({files.count(paths.releases(root))} releases)"
        )
    problems = ledger.replay()
    if problems:
        for line in problems:
            print(f"admission replay FAILED: {line}", file=sys.stderr)
        return 3
    charges = sum(1 for e in ledger.entries() if e.kind == "dp" and e.status == "reserved")
    print(f"admission replay ok: {charges} dp charges recomputed from their recorded events and caps; each follows")
    now = datetime.now(UTC)
    for e in ledger.pending() if n else []:
        age = (now - datetime.fromisoformat(e.ts)).total_seconds()
        print(
            f"pending: release {e.release_id} of {e.dataset} (entry #{e.seq}) charged {age:.0f} s ago, its process still running"
        )
    return 0


def cmd_recover(args: argparse.Namespace, root: Path) -> int:
    """Run by main before every ledger command; this one only reports what it settled."""
    settled = getattr(args, "recovered", [])
    for e in settled:
        print(f"release {e.release_id} of {e.dataset}: interrupted, settled as {e.status} (ledger entry #{e.seq})")
    if not settled:
        print("no interrupted release to settle")
    return 0


def cmd_accept_rollback(args: argparse.Namespace, root: Path) -> int:
    """Record a rollback on the ledger, every lost entry carried forward (``privrelease.core.ledger.rollback``)."""
    from privrelease.core.ledger.ledger import Ledger
    from privrelease.core.people import requester

    done = Ledger(paths.database(root)).accept_rollback(requester(), args.without_anchors)
    detail = json.loads(done.rollback.detail)
    heads = [(detail[k] or [0])[0] for k in ("ledger_head", "anchored_head")]
    said = f"rollback recorded as ledger entry #{done.rollback.seq}: the ledger ended at entry #{heads[0]}, its anchors at #{heads[1]}"
    if done.carried:
        print(
            f"{said}; {len(done.carried)} lost entries carried forward as entries #{done.carried[0].seq}-#{done.carried[-1].seq}"
        )
    else:
        print(f"{said}; none could be carried (the anchors were lost): the ledger is anchored anew from here")
    spent = sorted({(e.dataset, e.release_id) for e in done.carried if e.status == "reserved" and e.kind == "dp"})
    for dataset, release in spent:
        print(f"  carried charge: {release} of {dataset} (its budget stays spent)")
    return 0


def cmd_anchor(args: argparse.Namespace, root: Path) -> int:
    """The head as one signed line for an auditor to keep, or the key that checks such lines."""
    from privrelease.core.ledger import anchors
    from privrelease.core.ledger.ledger import Ledger

    chain_key = anchors.key(root, create=False)
    if args.public_key:
        print(anchors.public_key(chain_key))
        return 0
    head = Ledger(paths.database(root)).anchor()
    if head is None:
        raise UserError("the ledger has no entries yet: there is no head to anchor.")
    print(anchors.line(chain_key, head.seq, head.hash, head.ts))
    return 0


def cmd_migrate(args: argparse.Namespace, root: Path) -> int:
    from privrelease.core.datasets import snapshots
    from privrelease.core.datasets.migrate import migrate
    from privrelease.core.ledger import anchors
    from privrelease.core.store import redact

    entries, registrations = migrate(root, args.to)
    print(
        f"migrated {entries} ledger entries and {registrations} registrations into {redact(args.to)}; "
        "the hash chain verifies there"
    )
    print(
        f"every worker now needs: {settings.LEDGER_URL} set to that URL, this ledger key ({anchors.key_path(root)}, via "
        f"${settings.LEDGER_KEY_FILE}) and the snapshots ({snapshots.root(root)}) in its ${settings.SNAPSHOT_STORE}"
    )
    return 0


def add_parsers(sub) -> None:
    ledger = sub.add_parser("ledger", help="read and manage the privacy-budget ledger")
    lsub = ledger.add_subparsers(dest="ledger_command", required=True)
    p = lsub.add_parser("set-budget", help="set a dataset's (epsilon, delta) cap")
    p.add_argument("dataset")
    p.add_argument("--epsilon", type=float, required=True)
    p.add_argument("--delta", type=float, required=True)
    p.add_argument(
        "--approve-above",
        type=float,
        metavar="FRACTION",
        help="a release taking more than this share (0-1) of the remaining budget waits for a steward's approval",
    )
    p.add_argument(
        "--approve-account-above",
        type=float,
        metavar="EPSILON",
        help="with --window: a release bringing its requester's epsilon in the window past this waits for a steward",
    )
    p.add_argument("--window", type=float, metavar="HOURS", help="the window of --approve-account-above, in hours")
    p.add_argument(
        "--min-colluders",
        type=int,
        metavar="C",
        help="spam-mail only: dp: runs must assume at least C users colluding with the server",
    )
    p.add_argument(
        "--min-threshold",
        type=int,
        metavar="T",
        help="spam-mail only: dp: runs must need at least T users for a round to complete",
    )
    p.add_argument(
        "--allow-exact-runs",
        action="store_true",
        help="spam-mail only: allow training without dp: on mail no dp: run has read (refused by default)",
    )
    p.set_defaults(func=cmd_set_budget)
    p = lsub.add_parser("history", help="every ledger entry, in order")
    p.add_argument("--dataset")
    p.add_argument("--json", action="store_true")
    p.add_argument("--verbose", action="store_true", help="each entry's detail in full, under its line")
    p.set_defaults(func=cmd_history)
    p = lsub.add_parser("show", help="one ledger entry in full (its number from ledger history)")
    p.add_argument("seq", type=int)
    p.set_defaults(func=cmd_show)
    p = lsub.add_parser("totals", help="per dataset: cap, spent (basic, filter, PLD), what still fits")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_totals)
    p = lsub.add_parser(
        "verify", help="check the hash chain and replay every admission (exit 3 if either fails); list pending charges"
    )
    p.add_argument(
        "--anchor", action="append", metavar="LINE", help="an auditor's line from ledger anchor --print: its entry must be there"
    )
    p.add_argument("--files", action="store_true", help="also check every published release's files against its manifest")
    p.set_defaults(func=cmd_verify)
    p = lsub.add_parser(
        "accept-rollback",
        help="record that the ledger lost entries (a restored older copy) and carry each lost entry forward from the anchors",
    )
    p.add_argument(
        "--without-anchors", action="store_true", help="the anchors are lost: record it and anchor the ledger anew from its head"
    )
    p.set_defaults(func=cmd_accept_rollback)
    p = lsub.add_parser("anchor", help="print the ledger's head as a signed line for an auditor to keep")
    p.add_argument("--print", action="store_true", help="the signed line (the default)")
    p.add_argument("--public-key", action="store_true", help="the public key that checks the lines instead")
    p.set_defaults(func=cmd_anchor)
    p = lsub.add_parser("recover", help="settle the charges of interrupted releases (every ledger command does too)")
    p.set_defaults(func=cmd_recover)
    p = lsub.add_parser("migrate", help="copy this home's ledger and registrations into an empty PostgreSQL database")
    p.add_argument(
        "--to", required=True, metavar="URL", help="postgresql://USER@HOST:PORT/DB (keep the password in PGPASSWORD or ~/.pgpass)"
    )
    p.set_defaults(func=cmd_migrate)
