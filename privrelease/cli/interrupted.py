"""What the command line says when its user stops it (Ctrl-C), when no charged run said it already.

A charged run stopped after its charge says itself what became of the charge (``privrelease.core.interrupts.Interrupted``);
any other interrupt lands here: a command that charges says whether this process made a ledger entry.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def interrupted(args: argparse.Namespace, root: Path) -> str:
    """What an interrupt that no charged run explained did: a charging command says whether this process charged."""
    if not getattr(args, "charges", False):
        return "stopped (Ctrl-C)."
    from privrelease.core.release import charged  # imported only when needed: the command line starts quickly
    from privrelease.core.release.home import Home

    return charged.said(Home(root))
