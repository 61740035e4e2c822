"""How the command line words a user error: plain words first, the detail where the user asks for it."""

from __future__ import annotations

import argparse
from pathlib import Path

from core.errors import BudgetExhausted, NotRegistered, UserError


def error_words(exc: UserError, args: argparse.Namespace, root: Path) -> str:
    """The error's message; a dataset not found says which home was searched, and a budget refusal keeps its
    accounting detail for --verbose."""
    if isinstance(exc, NotRegistered):
        return f"{str(exc).rstrip('.')}; the home searched is {root} (from {args.home_from})."
    if isinstance(exc, BudgetExhausted) and exc.detail and not getattr(args, "verbose", False):
        return f"{exc.plain} (--verbose adds the accounting behind it)"
    return str(exc)
