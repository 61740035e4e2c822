"""What the command line says when its user stops it (Ctrl-C), when no charged run said it already.

A charged run stopped after its charge says itself what became of the charge (``core.interrupts.Interrupted``);
any other interrupt lands here: a command that charges says whether this process made a ledger entry.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from core import paths
from core.privacy.budget import charge_phrase


def interrupted(args: argparse.Namespace, root: Path) -> str:
    """What an interrupt that no charged run explained did: a charging command says whether this process charged."""
    if not getattr(args, "charges", False):
        return "stopped (Ctrl-C)."
    from core.ledger import lease  # imported only when needed: the command line starts quickly

    mine = [e for e in _entries(root) if e.holder == lease.me(root) and e.release_id]
    if not mine:
        return "stopped (Ctrl-C) before its charge: nothing was charged and nothing published."
    e = mine[-1]
    return (
        f"stopped (Ctrl-C) after its charge: ledger entry #{e.seq} ({charge_phrase(e.kind, e.epsilon, e.delta)}) stands; "
        "the next privrelease command records its outcome (see privrelease ledger history)."
    )


def _entries(root: Path) -> list:
    from core.ledger.ledger import Ledger

    ledger = Ledger(paths.database(root))
    return ledger.entries() if ledger.store.exists() else []
