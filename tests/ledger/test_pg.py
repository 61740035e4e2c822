"""One PostgreSQL ledger for several workers: migration from a home's DuckDB file (as a user types it),
a connection lost mid-charge, the dataset's row lock against a weakened store, a worker with the
wrong key, and errors that never show the URL's password. Two workers releasing at once against one
cap: tests/system/test_server_pg.py."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path

import duckdb
import psycopg
import pytest
import yaml

from privrelease.core.errors import BudgetError, LedgerCorrupt
from privrelease.core.ledger.ledger import PUBLISHED, RESERVED, ChargeRequest, Ledger
from privrelease.core.privacy.adjacency import ReplaceRecord
from privrelease.core.privacy.budget import Budget
from privrelease.core.store import PgStore, StoreUnavailable
from tests.cli.test_cli import EXE, run, typed
from tests.mechanisms.test_outliers import planted
from tests.support.helpers import dp, register
from tests.support.pages import sh_block

ADJ = ReplaceRecord()
PUBLIC = {c: {"mean": 0.0, "std": 1.0} for c in "abcde"}


# A count of outliers in columns a and b at epsilon 1.
OUTLIERS = {
    "dataset": "sessions",
    "mechanism": {
        "name": "outliers",
        "params": {"columns": ["a", "b"], "k": 3, "r": 0.1, "epsilon": 1.0, "delta": 1e-4, "standardize": PUBLIC},
    },
}


def outliers_request(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "request.yaml").write_text(yaml.safe_dump(OUTLIERS))
    return folder / "request.yaml"


def steward(home: Path, env: dict | None = None, epsilon: str = "5") -> None:
    """Register 300 planted records as ``sessions`` (record unit, dp) and cap it at ``epsilon``."""
    (home / "data").mkdir(parents=True)
    planted().to_csv(home / "data" / "sessions.csv", index=False)
    r = run(
        home,
        "dataset",
        "add",
        "sessions",
        "--source",
        str(home / "data" / "sessions.csv"),
        "--format",
        "csv",
        "--unit",
        "record",
        "--purpose",
        "dp",
        env=env,
    )
    assert r.returncode == 0, r.stderr
    r = run(home, "ledger", "set-budget", "sessions", "--epsilon", epsilon, "--delta", "1e-3", env=env)
    assert r.returncode == 0, r.stderr


@pytest.mark.system
def test_migrate_a_home_into_postgresql(tmp_path: Path, pg_url: str):
    home = tmp_path / "home"
    steward(home)
    r = run(home, "release", str(outliers_request(tmp_path / "req")))
    assert r.returncode == 0, r.stderr
    before = json.loads(run(home, "ledger", "history", "--json").stdout)
    assert [e["status"] for e in before] == ["registered", "cap", RESERVED, PUBLISHED]

    with duckdb.connect(str(home / "privrelease.duckdb")) as con:  # as homes from before relative snapshot paths
        con.execute("UPDATE datasets SET snapshot = ?", [str(home / "datasets" / "sessions" / "v1.parquet")])

    migrate = sh_block("guides/hosts.md", "privrelease ledger migrate")  # as docs/guides/hosts.md prints it
    r = typed(
        home, migrate.replace("postgresql://USER@HOST:5432/privrelease", pg_url), tmp_path, f"{Path(EXE).parent}:/usr/bin:/bin"
    )
    assert r.returncode == 0, r.stderr
    with psycopg.connect(pg_url) as con:  # a path any worker resolves under its own snapshot folder
        assert con.execute("SELECT snapshot FROM privrelease.datasets").fetchall() == [("sessions/v1.parquet",)]
    assert r.stdout.startswith(f"migrated 4 ledger entries and 1 registrations into {pg_url}; the hash chain verifies")
    on_pg = {"PRIVRELEASE_LEDGER_URL": pg_url}
    assert json.loads(run(home, "ledger", "history", "--json", env=on_pg).stdout) == before  # same JSON, same chain
    r = run(home, "ledger", "verify", env=on_pg)
    assert r.returncode == 0 and "ledger ok: 4 entries" in r.stdout
    r = run(home, "release", str(outliers_request(tmp_path / "req2")), env=on_pg)  # the registration arrived too
    assert r.returncode == 0, r.stderr
    totals = json.loads(run(home, "ledger", "totals", "--json", env=on_pg).stdout)
    assert (totals[0]["spent"]["epsilon"], totals[0]["published"]) == (2.0, 2)
    r = run(home, "ledger", "totals")  # without the URL: refused, not a second budget in the old file
    assert r.returncode == 2 and f"ledger and registrations were moved to {pg_url} (privrelease ledger migrate)" in r.stderr

    other = tmp_path / "other-home"
    register(other, planted(), "sessions", "record", "dp")  # another home's ledger (in this process: faster)
    Ledger(other / "privrelease.duckdb").set_budget("sessions", Budget(5.0, 1e-3))
    r = run(other, "ledger", "migrate", "--to", pg_url)  # another home's ledger is never merged into this one
    assert r.returncode == 2 and r.stderr.startswith("error: the target database")
    assert "already holds 6 ledger entries and 1 registrations; migrate into an empty database" in r.stderr
    r = run(other, "ledger", "migrate", "--to", "mysql://root:hunter2@db/x")
    assert r.returncode == 2 and "--to must be a postgresql://" in r.stderr and "hunter2" not in r.stderr
    r = run(tmp_path / "empty", "ledger", "migrate", "--to", pg_url)
    assert r.returncode == 2 and "has no ledger to migrate" in r.stderr


def test_a_password_is_never_shown(tmp_path: Path, pg_url: str):
    with_password = pg_url.replace("postgres@", "postgres:s3cret-pw@", 1)  # the test server trusts any password
    r = run(tmp_path / "home", "info", "--json", env={"PRIVRELEASE_LEDGER_URL": with_password})
    assert r.returncode == 0 and json.loads(r.stdout)["ledger_store"] == pg_url.replace("postgres@", "postgres:***@")
    assert "s3cret" not in r.stdout + r.stderr
    url = "postgresql://steward:s3cret-pw@127.0.0.1:1/ledger"  # nothing listens on port 1
    for args in (("ledger", "totals"), ("dataset", "list"), ("ledger", "migrate", "--to", url)):
        r = run(tmp_path / "home", *args, env={"PRIVRELEASE_LEDGER_URL": url})
        assert r.returncode == 2 and r.stdout + r.stderr != ""
        assert "s3cret" not in r.stdout + r.stderr and "Traceback" not in r.stderr
        assert "could not connect to the ledger database postgresql://steward:***@127.0.0.1:1/ledger" in r.stderr
    r = run(tmp_path / "home", "info", "--json", env={"PRIVRELEASE_LEDGER_URL": "sqlite://u:s3cret-pw@x/y"})
    assert r.returncode == 2 and "s3cret" not in r.stderr and "sqlite://u:***@x/y" in r.stderr


@pytest.fixture
def pg_ledger(tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    monkeypatch.setenv("PRIVRELEASE_LEDGER_URL", pg_url)
    ledger = Ledger(tmp_path / "home" / "privrelease.duckdb")
    ledger.set_budget("d", Budget(1.0, 1e-6))
    return ledger


def test_a_connection_dropped_mid_charge_writes_nothing(pg_ledger: Ledger, pg_url: str):
    admin = psycopg.connect(pg_url, autocommit=True, options="-c search_path=privrelease")
    # a trigger that holds the charge's transaction open after its row is inserted, before it commits
    admin.execute("CREATE FUNCTION hold() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(60); RETURN NEW; END $$")
    admin.execute("CREATE TRIGGER hold AFTER INSERT ON ledger FOR EACH ROW EXECUTE FUNCTION hold()")
    failure: list[BaseException] = []

    def charge() -> None:
        try:
            pg_ledger.reserve(ChargeRequest("d", "r1", "dp", dp(0.4), "m", {}, {}))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            failure.append(exc)

    worker = threading.Thread(target=charge)
    worker.start()
    deadline = time.monotonic() + 30
    while not (
        row := admin.execute(
            "SELECT pid, query FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()"
        ).fetchone()
    ):
        assert time.monotonic() < deadline, "the charge never reached its insert"
        time.sleep(0.05)
    assert row[1].startswith("INSERT INTO ledger")  # the row is written, not committed
    with pytest.raises(psycopg.errors.LockNotAvailable):  # and the dataset's row is locked by it
        admin.execute("SELECT dataset FROM ledger_datasets WHERE dataset = 'd' FOR UPDATE NOWAIT")
    admin.execute("SELECT pg_terminate_backend(%s)", [row[0]])
    worker.join(timeout=30)
    admin.execute("DROP TRIGGER hold ON ledger")
    assert len(failure) == 1 and isinstance(failure[0], StoreUnavailable)
    assert "so nothing was half-written" in str(failure[0]) and "run the command again" in str(failure[0])
    assert [e.status for e in pg_ledger.entries()] == ["cap"] and pg_ledger.verify() == 1
    charged = pg_ledger.reserve(ChargeRequest("d", "r1", "dp", dp(0.4), "m", {}, {}))  # the retry charges once
    assert charged.previous_status is None and pg_ledger.verify() == 2
    assert pg_ledger.totals()[0].spent == Budget(0.4, 0.0)
    admin.close()


def test_a_worker_with_another_key_cannot_extend_the_chain(pg_ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    other = Ledger(tmp_path / "other-home" / "privrelease.duckdb")  # its own home, so its own (new) key file
    (tmp_path / "other-home" / "keys").mkdir(parents=True)
    (tmp_path / "other-home" / "keys" / "ledger.key").write_text("11" * 32 + "\n")
    with pytest.raises(LedgerCorrupt, match="does not check out under this process's ledger key"):
        other.reserve(ChargeRequest("d", "r1", "dp", dp(0.4), "m", {}, {}))
    assert [e.status for e in pg_ledger.entries()] == ["cap"] and pg_ledger.verify() == 1
    monkeypatch.setenv("PRIVRELEASE_LEDGER_KEY_FILE", str(pg_ledger.home / "keys" / "ledger.key"))  # control
    other.reserve(ChargeRequest("d", "r1", "dp", dp(0.4), "m", {}, {}))
    assert pg_ledger.verify() == 2


class _Unlocked(PgStore):
    """The weakened store: a charge's check does not lock the dataset's row (the head is still locked)."""

    @contextlib.contextmanager
    def write(self, dataset: str | None = None, upgrading: bool = False):
        with self.read() as con:
            yield con


@pytest.mark.parametrize("locked", [True, False], ids=["row-lock", "weakened-no-row-lock"])
def test_the_dataset_row_lock_is_what_holds_the_cap(pg_ledger: Ledger, pg_url: str, locked: bool):
    """Two charges of 0.6 against a cap of 1, both checking while a third party holds the chain head."""
    store = pg_ledger.store if locked else _Unlocked(pg_url)
    admin = psycopg.connect(pg_url, options="-c search_path=privrelease")
    admin.execute("SELECT id FROM ledger_head WHERE id = 1 FOR UPDATE")  # held until rollback below
    outcomes: list[str] = []

    def charge(release: str) -> None:
        try:
            Ledger(pg_ledger.db_path, store).reserve(ChargeRequest("d", release, "dp", dp(0.6), "m", {}, {}))
            outcomes.append("charged")
        except BudgetError:
            outcomes.append("refused")

    threads = [threading.Thread(target=charge, args=(f"r{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    watcher = psycopg.connect(pg_url, autocommit=True)
    deadline = time.monotonic() + 30
    while (
        watcher.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        ).fetchone()[0]
        < 2
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    admin.rollback()  # both charges are now waiting: on the head (checked) or on the dataset's row (not yet)
    for thread in threads:
        thread.join(timeout=30)
    spent = pg_ledger.totals()[0].spent.epsilon
    if locked:
        assert sorted(outcomes) == ["charged", "refused"] and spent == 0.6
    else:  # the control: without the row lock both checks saw 1.0 left, and the cap is exceeded
        assert outcomes == ["charged", "charged"] and spent == pytest.approx(1.2)
    assert pg_ledger.verify() == 1 + outcomes.count("charged")
    admin.close()
    watcher.close()
