"""How the command line words a user error (plain words first, the detail where the user asks for it) and a ledger
entry (``ledger history``'s lines)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from privrelease.core.errors import BudgetExhausted, NotRegistered, UserError


def error_words(exc: UserError, args: argparse.Namespace, root: Path) -> str:
    """The error's message; a dataset not found says which home was searched, and a budget refusal keeps its
    accounting detail for --verbose."""
    if isinstance(exc, NotRegistered):
        return f"{str(exc).rstrip('.')}; the home searched is {root} (from {args.home_from})."
    if isinstance(exc, BudgetExhausted) and exc.detail and not getattr(args, "verbose", False):
        return f"{exc.plain} (--verbose adds the accounting behind it)"
    return str(exc)


def entry_words(e) -> str:
    """One ledger entry in words: what happened, to which release, and who asked."""
    detail = json.loads(e.detail) if e.detail else {}
    by = f" (by {e.requested_by})" if e.requested_by else ""
    if e.status == "cap":
        return f"cap set: epsilon={e.epsilon:g} delta={e.delta:g}{by}"
    if e.status == "policy":  # the whole policy: --json or dataset show
        return f"disclosure policy set{by}: {policy_line(detail)}"
    if e.status in ("registered", "refreshed"):  # the rows a release reads: public facts only
        rows = f", {detail['rows']} rows" if "rows" in detail else ""  # under a user unit the count is not public
        return f"{e.status}{by}: version {detail.get('version')} ({detail.get('unit')}, {detail.get('purpose')}, {detail.get('columns')} columns{rows})"  # fmt: skip
    if e.status == "rollback":
        lost = len(detail.get("lost", []))
        return f"rollback accepted{by}: the ledger had lost {lost} anchored entries, carried forward after this one"
    if e.status == "upgrade":
        return f"upgraded{by}: schema {detail.get('from')} to {detail.get('to')} (privrelease {detail.get('version')})"
    if e.status == "restore":
        return f"restored{by} from a backup of {detail.get('taken', '?')} (head #{(detail.get('backup_head') or ['-'])[0]})"
    if e.status == "reserved":
        cost = f"charged epsilon={e.epsilon:g} delta={e.delta:g}" if e.kind == "dp" else "recorded (not DP: no budget)"
        return f"{e.release_id} {e.mechanism}: {cost}{by}"
    if e.status == "failed":
        kept = "; its charge stands" if e.kind == "dp" else ""
        return f"{e.release_id}: failed, {detail.get('reason', 'no reason recorded')}{kept}"
    figures = ", ".join(f"{k}={v}" for k, v in detail.items() if isinstance(v, (int, float, str)))
    return f"{e.release_id}: {e.status}" + (f": {figures}" if figures else "")


def policy_line(policy: dict) -> str:
    """A disclosure policy in one short line: its key and thresholds."""
    keys = [*policy["keys"]["categorical"], *policy["keys"]["numeric"]]
    thresholds = ", ".join(f"{k}={v}" for k, v in policy["thresholds"].items() if v is not None) or "none"
    return f"key={','.join(keys)} thresholds: {thresholds} identifiers={len(policy['identifiers'])}"
