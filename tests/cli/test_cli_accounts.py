"""The home's database holds the accounts' password hashes (#42): it and its write-ahead log are mode 600; and
an account's password can be changed (``privrelease user passwd NAME``), after which the gate refuses the old one."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from privrelease.core import db
from privrelease.core.store import DuckStore
from privrelease.gate import app as gate_app
from privrelease.gate import signin
from privrelease.gate.accounts import Accounts
from tests.cli.test_cli import EXE, REPO, run
from tests.gate.test_accounts import PASSWORD

NEW = "another long enough password"


def typed(home: Path, line: str, *args: str) -> subprocess.CompletedProcess:
    """``printf '%s\\n' LINE | privrelease user ...``: the password on standard input."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")} | {"PRIVRELEASE_HOME": str(home)}
    return subprocess.run([EXE, *args], cwd=REPO, env=env, input=line + "\n", capture_output=True, text=True, timeout=60)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_user_passwd_as_typed(tmp_path: Path):
    home = tmp_path / "home"
    assert typed(home, PASSWORD, "user", "add", "alice", "--role", "analyst", "--password-stdin").returncode == 0
    r = typed(home, NEW, "user", "passwd", "alice", "--password-stdin")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "account alice (analyst) has a new password; the gate refuses the old one within seconds\n"
    accounts = Accounts(home / "privrelease.duckdb")
    assert accounts.verify("alice", PASSWORD) is None and accounts.verify("alice", NEW).role == "analyst"
    r = run(home, "user", "passwd", "alice")  # no --password-stdin: a random one, shown once
    made = r.stdout.splitlines()[1].removeprefix("password (shown once, keep it): ")
    assert r.returncode == 0 and accounts.verify("alice", made) is not None and accounts.verify("alice", NEW) is None
    for args, line, message in (
        (("user", "passwd", "bob", "--password-stdin"), NEW, "error: there is no account 'bob' (privrelease user list"),
        (("user", "passwd", "alice", "--password-stdin"), "short", "error: the password is too short"),
        (("user", "add", "alice", "--role", "analyst", "--password-stdin"), NEW, "error: account 'alice' exists already; change its password with privrelease user passwd"),
    ):  # fmt: skip
        r = typed(home, line, *args)
        assert r.returncode == 2 and r.stderr.startswith(message) and "Traceback" not in r.stderr, (args, r.stderr)
    assert accounts.verify("alice", made) is not None  # a refused change changes nothing


class StaleSignIn(signin.SignIn):
    """Sign-in without the defence: it reads the accounts once and keeps them."""

    async def _accounts(self):
        if not self._names:
            self._names = self.load()
        return self._names


class StaleGate(gate_app.Gate):
    def __init__(self, *args):
        super().__init__(*args)
        self.signin = StaleSignIn(self.accounts)


@pytest.mark.parametrize("gate_class", [gate_app.Gate, StaleGate], ids=["gate", "stale-gate"])
def test_the_gate_refuses_the_old_password_after_passwd(gate_class, tmp_path: Path, monkeypatch):
    """Through the real gate (its routes, in this process; no upstream is reached): a signed-in analyst is
    refused a route (403) and a wrong password is refused sign-in (401). After passwd the old password is a wrong one,
    because the gate rereads the accounts (its TTL set to 0 here, so no test waits); the stale gate still lets it in."""
    monkeypatch.setattr(signin, "ACCOUNTS_TTL_S", 0.0)
    home = tmp_path / "home"
    Accounts(home / "privrelease.duckdb").add("alice", "analyst", PASSWORD)
    app = gate_app.create_app(home, "http://127.0.0.1:9", "operator:x", gate_class)
    with TestClient(app, base_url="http://testserver/api") as client:

        def status(password: str) -> int:
            return client.delete("/work_pools/x", auth=("alice", password)).status_code

        assert (status(PASSWORD), status(NEW)) == (403, 401)
        assert typed(home, NEW, "user", "passwd", "alice", "--password-stdin").returncode == 0
        after = status(PASSWORD), status(NEW)
    assert after == ((401, 403) if gate_class is gate_app.Gate else (403, 401))  # stale: the old one still signs in


def test_the_database_and_its_log_are_private(tmp_path: Path, monkeypatch):
    home = tmp_path / "home"
    assert typed(home, PASSWORD, "user", "add", "alice", "--role", "analyst", "--password-stdin").returncode == 0
    database = home / "privrelease.duckdb"
    assert mode(database) == 0o600  # it was 644, with the accounts' password hashes in it

    def log_mode() -> int:
        with DuckStore(database).read() as con:
            con.execute("CREATE TABLE IF NOT EXISTS probe (x INTEGER); INSERT INTO probe VALUES (1)")  # DuckDB writes its log now
            return mode(database.with_name(database.name + ".wal"))

    assert log_mode() == 0o600
    monkeypatch.setattr(db, "private_files", contextlib.nullcontext)  # weakened: no umask around the connection
    assert log_mode() == 0o644
    database.chmod(0o644)  # a home made before files were private: the next command makes it 600
    assert run(home, "user", "list").returncode == 0 and mode(database) == 0o600
