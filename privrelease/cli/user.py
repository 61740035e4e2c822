"""The operator's ``privrelease user`` commands: the people who reach Prefect's UI through the gate."""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from pathlib import Path

from privrelease.core import paths
from privrelease.core.people import ROLES


def _password(args: argparse.Namespace, command: str) -> tuple[str, bool]:
    """The password from standard input (--password-stdin), else a random one (shown once); and whether it was made."""
    from privrelease.gate.accounts import AccountError

    if not args.password_stdin:
        return secrets.token_urlsafe(18), True
    if sys.stdin is None or sys.stdin.isatty():
        raise AccountError(
            "--password-stdin reads the password from standard input: pipe it in, e.g. "
            f"`printf '%s\\n' \"$PASSWORD\" | privrelease user {command} --password-stdin`."
        )
    return sys.stdin.readline().rstrip("\r\n"), False


def cmd_user_add(args: argparse.Namespace, root: Path) -> int:
    from privrelease.gate.accounts import Accounts

    password, generated = _password(args, "add NAME --role ROLE")
    account = Accounts(paths.database(root)).add(args.name, args.role, password)
    print(f"account {account.name} added with role {account.role}; it signs in to the UI as {account.name}:PASSWORD")
    if generated:
        print(f"password (shown once, keep it): {password}")
    return 0


def cmd_user_passwd(args: argparse.Namespace, root: Path) -> int:
    from privrelease.gate.accounts import Accounts

    password, generated = _password(args, "passwd NAME")
    account = Accounts(paths.database(root)).passwd(args.name, password)
    print(f"account {account.name} ({account.role}) has a new password; the gate refuses the old one within seconds")
    if generated:
        print(f"password (shown once, keep it): {password}")
    return 0


def cmd_user_list(args: argparse.Namespace, root: Path) -> int:
    from privrelease.gate.accounts import Accounts

    accounts = Accounts(paths.database(root)).all()
    if args.json:
        print(json.dumps([{"name": a.name, "role": a.role, "created": a.created} for a in accounts], indent=2))
        return 0
    if not accounts:
        print("no accounts yet; add one with: privrelease user add NAME --role analyst|auditor|steward --password-stdin")
    for a in accounts:
        print(f"{a.name:<24} {a.role:<8} added {a.created}")
    return 0


def cmd_user_remove(args: argparse.Namespace, root: Path) -> int:
    from privrelease.gate.accounts import Accounts

    Accounts(paths.database(root)).remove(args.name)
    print(f"account {args.name} removed; the gate refuses it from now on")
    return 0


def add_parsers(sub) -> None:
    users = sub.add_parser("user", help="the accounts that reach Prefect's UI through the gate (operator)")
    usub = users.add_subparsers(dest="user_command", required=True)
    p = usub.add_parser("add", help="add an account with one role")
    p.add_argument("name")
    p.add_argument("--role", required=True, choices=ROLES)
    p.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from standard input (without it a random one is made and shown once)",
    )
    p.set_defaults(func=cmd_user_add)
    p = usub.add_parser("passwd", help="give an account a new password (its role stays)")
    p.add_argument("name")
    p.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the new password from standard input (without it a random one is made and shown once)",
    )
    p.set_defaults(func=cmd_user_passwd)
    p = usub.add_parser("list", help="accounts and their roles (never their passwords)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_user_list)
    p = usub.add_parser("remove", help="remove an account")
    p.add_argument("name")
    p.set_defaults(func=cmd_user_remove)
