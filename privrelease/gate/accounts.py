"""People's accounts: the accounts the gate (``privrelease/gate/``) lets into Prefect's UI and API.

An account is a name, one role and a password stored only as an Argon2id hash (argon2-cffi, its
default parameters: salted, slow). Accounts live in the ledger's store (``privrelease.core.store``): the home's
DuckDB file, or PostgreSQL when the ledger is there, so every gate in front of one ledger knows the
same people. The operator has no account: whoever runs the worker and this command on the host
holds Prefect's own credential instead.

- analyst: starts releases through the release forms, reads runs, logs and artifacts, cancels
  their own runs;
- auditor: reads runs, logs and artifacts, starts the ledger audit; starts no release;
- steward: what an analyst may, and approves (or rejects) releases that wait for approval.
"""

from __future__ import annotations

import functools
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from privrelease.core.errors import UserError
from privrelease.core.people import ROLES
from privrelease.core.store import open_store

NAME = re.compile(r"^[a-z][a-z0-9._-]{0,62}$")
MIN_PASSWORD = 12
MAX_PASSWORD_BYTES = 512  # its name, a colon and it fit the 768 bytes of a credential nginx and the gate read


class AccountError(UserError):
    """An account command the user can correct (bad name, role or password, unknown account)."""


@dataclass(frozen=True)
class Account:
    name: str
    role: str
    created: str
    hash: str  # Argon2id, never shown


def _hasher():
    from argon2 import PasswordHasher

    return PasswordHasher()


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise AccountError(
            f"account name {name!r} is not allowed: use 1-63 lower-case letters, digits, '.', '_' or '-', "
            "starting with a letter (it is shown in the ledger as who asked)."
        )
    return name


def check_password(password: str) -> str:
    if len(password) < MIN_PASSWORD:
        raise AccountError(f"the password is too short: use at least {MIN_PASSWORD} characters.")
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        raise AccountError(f"the password is too long: use at most {MAX_PASSWORD_BYTES} bytes (characters, in UTF-8).")
    if "\n" in password or "\r" in password:
        raise AccountError("the password may not contain a line break.")
    return password


class Accounts:
    """The accounts table of the store behind ``db_path`` (or ``$PRIVRELEASE_LEDGER_URL``)."""

    def __init__(self, db_path: Path):
        self.store = open_store(db_path)

    def add(self, name: str, role: str, password: str) -> Account:
        check_name(name)
        if role not in ROLES:
            raise AccountError(f"role {role!r} is not one of {', '.join(ROLES)}.")
        check_password(password)
        account = Account(name, role, datetime.now(UTC).isoformat(timespec="seconds"), _hasher().hash(password))
        with self.store.write() as con:
            if con.execute("SELECT 1 FROM accounts WHERE name = ?", [name]).fetchall():
                raise AccountError(
                    f"account {name!r} exists already; change its password with privrelease user passwd, or remove it first to change its role."
                )
            con.execute(
                "INSERT INTO accounts (name, role, created, hash) VALUES (?, ?, ?, ?)",
                [account.name, account.role, account.created, account.hash],
            )
        return account

    def passwd(self, name: str, password: str) -> Account:
        """Give ``name`` a new password (its role and creation time stay); the old one stops working."""
        check_password(password)
        hashed = _hasher().hash(password)
        with self.store.write() as con:
            rows = con.execute("SELECT name, role, created FROM accounts WHERE name = ?", [name]).fetchall()
            if not rows:
                raise AccountError(f"there is no account {name!r} (privrelease user list shows them).")
            con.execute("UPDATE accounts SET hash = ? WHERE name = ?", [hashed, name])
        return Account(*rows[0], hashed)

    def remove(self, name: str) -> None:
        with self.store.write() as con:
            if not con.execute("SELECT 1 FROM accounts WHERE name = ?", [name]).fetchall():
                raise AccountError(f"there is no account {name!r} (privrelease user list shows them).")
            con.execute("DELETE FROM accounts WHERE name = ?", [name])

    def all(self) -> list[Account]:
        if not self.store.exists():
            return []
        with self.store.read() as con:
            return [
                Account(*row) for row in con.execute("SELECT name, role, created, hash FROM accounts ORDER BY name").fetchall()
            ]

    def verify(self, name: str, password: str) -> Account | None:
        """The account if ``password`` is its password, else None (unknown names cost a hash too)."""
        account = {a.name: a for a in self.all()}.get(name)
        return account if matches(account.hash if account else decoy(), password) and account else None


def matches(hashed: str, password: str) -> bool:
    """Whether ``password`` is the one ``hashed`` (an Argon2id hash) was made of: one hash, 64 MiB."""
    from argon2.exceptions import Argon2Error

    try:
        return _hasher().verify(hashed, password)
    except Argon2Error:
        return False


@functools.cache
def decoy() -> str:
    """A hash of a random password: what no password matches, hashed as long as a real one."""
    return _hasher().hash(secrets.token_urlsafe(24))
