"""``privrelease mechanisms``, and the list of mechanisms that ends ``privrelease release --help``.

Both read ``privrelease.core.release.describe``, imported only when they print: the mechanisms take about a
second to import, which no other command should pay.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from privrelease.core.errors import SpecError

MECHANISMS_EPILOG = "(the mechanisms)"


class ReleaseHelp(argparse.RawDescriptionHelpFormatter):
    """``release --help`` ends with the mechanisms and their pages, listed only when help is printed."""

    def add_text(self, text: str | None) -> None:
        if text == MECHANISMS_EPILOG:
            from privrelease.core.mechanisms import MECHANISMS
            from privrelease.core.release import describe

            pages = "\n".join(f"  {n:<21} {describe.page(n)}" for n in MECHANISMS)
            text = f"mechanisms (a request's mechanism.name), each described on its page:\n{pages}\n"
            text += "(spam-filter-training is not a request's: it runs with `privrelease spam train`)\n"
            text += "`privrelease mechanisms [NAME]` prints their parameters, types, defaults and bounds."
        super().add_text(text)


def cmd_mechanisms(args: argparse.Namespace, root: Path) -> int:
    from privrelease.core.mechanisms import MECHANISMS
    from privrelease.core.release import describe

    if args.name is not None and args.name not in MECHANISMS:
        raise SpecError(f"unknown mechanism {args.name!r}; available: {', '.join(MECHANISMS)}.")
    print("\n\n".join(describe.text(n) for n in MECHANISMS if args.name in (None, n)))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mechanisms", help="every mechanism with its parameters: types, defaults, bounds")
    p.add_argument("name", nargs="?", help="only this mechanism (e.g. dpne)")
    p.set_defaults(func=cmd_mechanisms)
