"""The tamper matrix: an operator who can write the database file, but not the key or the anchors.

Every case ends with ``privrelease ledger verify`` exiting 3. Controls show what protects: the same
rewrite with the key passes, and a rollback passes once the anchors are gone (both outside the
threat model), so the tests could fail. Row tampering is tried on both stores (DuckDB, PostgreSQL);
the whole-file rollbacks are DuckDB's.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from privrelease.core.ledger import anchors
from privrelease.core.ledger.chain import GENESIS
from privrelease.core.ledger.ledger import PUBLISHED, ChargeRequest, Ledger
from privrelease.core.privacy.adjacency import ReplaceRecord
from privrelease.core.privacy.budget import Budget
from tests.flows.test_release_flow import cli
from tests.support.helpers import dp
from tests.support.pg import raw_sql

ADJ = ReplaceRecord()


@pytest.fixture(params=["duckdb", "postgresql"])
def ledger(request, home: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    """Cap, four charges each published, then a lowered cap: 10 entries, on either store."""
    if request.param == "postgresql":
        monkeypatch.setenv("PRIVRELEASE_LEDGER_URL", request.getfixturevalue("pg_url"))
    return _fill(Ledger(home / "privrelease.duckdb"))


@pytest.fixture
def duck_ledger(home: Path) -> Ledger:
    """The same, in the home's DuckDB file."""
    return _fill(Ledger(home / "privrelease.duckdb"))


def _fill(ledger: Ledger) -> Ledger:
    ledger.set_budget("d", Budget(5.0, 1e-5))
    for i in range(4):
        ledger.reserve(ChargeRequest("d", f"r{i}", "dp", dp(0.5), "m", {"i": i}, {}))
        ledger.settle(f"r{i}", PUBLISHED)
    ledger.set_budget("d", Budget(2.5, 1e-6))
    return ledger


def rechain(ledger: Ledger, key: bytes) -> None:
    """Recompute every hash from the first entry on, as a forger holding ``key`` would."""
    prev = GENESIS
    for entry in ledger.entries_unchecked():  # a forger reads the rows as they are
        fixed = dataclasses.replace(entry, prev_hash=prev, hash="")
        fixed = dataclasses.replace(fixed, hash=fixed.computed_hash(key))
        raw_sql(ledger, "UPDATE ledger SET prev_hash = ?, hash = ? WHERE seq = ?", args=[fixed.prev_hash, fixed.hash, entry.seq])
        prev = fixed.hash


def verify(capsys) -> tuple[int, str]:
    code, out, err = cli(capsys, "ledger", "verify")
    return code, out + err


def test_untouched_ledger_verifies(ledger, capsys):
    code, out = verify(capsys)
    assert code == 0 and "ledger ok: 10 entries" in out
    assert len(ledger.anchors.read()) == 10  # one anchor per entry, cap changes included


@pytest.mark.parametrize(
    "statement,seq",
    [
        ("UPDATE ledger SET epsilon = 0.05 WHERE seq = 4", 4),
        ("UPDATE ledger SET status = 'failed' WHERE seq = 7", 7),
        ("DELETE FROM ledger WHERE seq = 5", 5),
        (("UPDATE ledger SET seq = -seq WHERE seq IN (3, 6)", "UPDATE ledger SET seq = seq + 9 WHERE seq < 0"), 3),
        ("DELETE FROM ledger WHERE seq = 10", 10),
        ("DELETE FROM ledger WHERE seq >= 9", 9),
        ("UPDATE ledger SET epsilon = 50 WHERE seq = 10", 10),
    ],
    ids=["edit", "edit-status", "delete-middle", "reorder", "delete-tail", "delete-tail-2", "edit-last-cap"],
)
def test_row_tampering_exits_3(ledger, capsys, statement, seq):
    raw_sql(ledger, *(statement if isinstance(statement, tuple) else (statement,)))
    code, out = verify(capsys)
    assert code == 3 and f"FAILED at entry {seq}" in out


def test_recompute_after_edit_without_the_key_exits_3(ledger, capsys):
    raw_sql(ledger, "UPDATE ledger SET epsilon = 0.05 WHERE seq IN (2, 4, 6, 8)")  # charges made cheap
    rechain(ledger, b"a guessed key")
    code, out = verify(capsys)
    assert code == 3 and "FAILED at entry 1: entry 1 was changed" in out
    ledger.anchors.written.write_text("")  # anchors that hold nothing
    assert verify(capsys)[0] == 3  # the key alone catches it
    rechain(ledger, anchors.key(ledger.home, create=False))  # control: with the key, and no anchors, it passes
    assert verify(capsys)[0] == 0


def test_recompute_with_the_key_is_still_caught_by_the_anchors(ledger, capsys):
    raw_sql(ledger, "UPDATE ledger SET epsilon = 0.05 WHERE seq = 4")
    rechain(ledger, anchors.key(ledger.home, create=False))
    code, out = verify(capsys)
    assert code == 3 and "FAILED at entry 4: entry 4, anchored at" in out


def test_edit_last_and_recompute_without_the_key_exits_3(ledger, capsys):
    raw_sql(ledger, "DELETE FROM ledger WHERE seq = 10")  # drop the lowered cap ...
    rechain(ledger, b"")  # ... and re-chain what is left with a wrong key
    assert verify(capsys)[0] == 3


def test_rollback_of_the_whole_file_exits_3(duck_ledger, capsys, tmp_path):
    old = tmp_path / "old.duckdb"
    shutil.copy(duck_ledger.db_path, old)
    duck_ledger.reserve(ChargeRequest("d", "r9", "dp", dp(0.5), "m", {"i": 9}, {}))
    duck_ledger.settle("r9", PUBLISHED)
    shutil.copy(old, duck_ledger.db_path)  # the older copy: a charge forgotten
    code, out = verify(capsys)
    assert code == 3 and "entry 11, anchored at" in out and "rolled back" in out
    duck_ledger.anchors.written.write_text("")  # control: with anchors that hold nothing the rollback passes
    assert verify(capsys)[0] == 0


def test_rollback_of_cap_changes_exits_3(duck_ledger, capsys, tmp_path):
    old = tmp_path / "old.duckdb"
    shutil.copy(duck_ledger.db_path, old)
    duck_ledger.set_budget("d", Budget(2.0, 1e-7))  # the cap lowered again ...
    shutil.copy(old, duck_ledger.db_path)  # ... and the copy from before it restored
    code, out = verify(capsys)
    assert code == 3 and "FAILED at entry 11" in out


def test_missing_key_exits_3(ledger, capsys):
    anchors.key_path(ledger.home).unlink()
    code, out = verify(capsys)
    assert code == 3 and "the ledger key" in out and "is missing" in out


def test_key_is_private_and_lives_outside_the_database(duck_ledger):
    path = anchors.key_path(duck_ledger.home)
    assert path.stat().st_mode & 0o777 == 0o600
    raw = duck_ledger.db_path.read_bytes()
    assert path.read_text().strip().encode() not in raw and anchors.key(duck_ledger.home, False) not in raw
