"""Sign-in (``privrelease.gate.signin``, ``privrelease.gate.throttle``) in this process, on a real accounts store and real Argon2id hashes
(issue #53); each defence also shown missing from the variant tests/support/slow_gate.py runs, where the attack works. The
same attacks through the real proxy, gate and server: tests/system/test_signin_served.py."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest

from privrelease.gate import headers, signin, throttle
from privrelease.gate.accounts import MAX_PASSWORD_BYTES, AccountError, Accounts, check_password
from tests.conftest import PASSWORD, REPO
from tests.support.slow_gate import AddressStrikes, CacheFirst, CountedAfter, OneQueue


@pytest.fixture(scope="module")
def accounts(tmp_path_factory) -> Accounts:
    store = Accounts(tmp_path_factory.mktemp("home") / "privrelease.duckdb")
    store.add("tess", "analyst", PASSWORD)
    store.add("rhea", "steward", PASSWORD)
    store.add("uma", "auditor", PASSWORD)
    return store


class Counted:
    """Argon2id checks made, counted around the real one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.made, real = 0, signin.matches

        def counted(hashed: str, password: str) -> bool:
            self.made += 1
            return real(hashed, password)

        monkeypatch.setattr(signin, "matches", counted)


def _at_once(check, asks: list[tuple[str, str, str]]) -> list:
    """``check(name, password, address)`` for every one of ``asks`` at once; their answers in order."""
    answers: list = [None] * len(asks)

    async def main() -> None:
        async def one(i: int) -> None:
            answers[i] = await check(*asks[i])

        async with anyio.create_task_group() as group:
            for i in range(len(asks)):
                group.start_soon(one, i)

    anyio.run(main)
    return answers


def test_a_throttled_address_is_refused_even_a_password_it_checked_before(accounts):
    for kind, expected in ((signin.SignIn, signin.Refusal), (CacheFirst, signin.Account)):
        gate = kind(accounts)
        assert _at_once(gate.check, [("tess", PASSWORD, "10.0.0.1")])[0].name == "tess"
        wrong = [("tess", f"wrong-{i}", "10.0.0.1") for i in range(3)]
        assert [_at_once(gate.check, [ask])[0] for ask in wrong] == [None] * 3
        again, elsewhere = _at_once(gate.check, [("tess", PASSWORD, "10.0.0.1"), ("tess", PASSWORD, "10.0.0.2")])
        assert isinstance(again, expected), kind  # the variant lets the remembered password in while it refuses guesses
        assert elsewhere.name == "tess"  # the owner, from an address without failures, is not locked out


def test_guesses_sent_at_once_count_while_they_are_checked(accounts):
    """One address, twenty names at once (a spray): three are checked, the rest refused before any check."""
    asks = [(f"nobody{i}", "guess", "10.0.1.1") for i in range(20)]
    answers = _at_once(signin.SignIn(accounts).check, asks)
    assert answers.count(None) == throttle.CAPACITY and all(isinstance(a, signin.Refusal) for a in answers if a)
    weak = signin.SignIn(accounts)
    weak.throttle = CountedAfter()
    assert _at_once(weak.check, asks) == [None] * 20  # counted once answered: every one is checked


def test_strangers_are_never_hashed_and_answered_as_a_wrong_password(accounts, monkeypatch):
    counted = Counted(monkeypatch)
    gate = signin.SignIn(accounts)
    strangers = [(f"nobody{i}", "guess", f"10.0.2.{i}") for i in range(8)]
    assert _at_once(gate.check, strangers) == [None] * 8
    assert counted.made == 1  # the first stranger's wait measured a check of the decoy, once
    assert _at_once(gate.check, [("tess", "guess", "10.0.2.100")]) == [None] and counted.made == 2
    times = list(gate._times)
    waits = [anyio.run(gate.check_time) for _ in range(20)]
    assert all(min(times) <= w <= max(times) for w in waits)  # a stranger waits as long as a check takes
    counted.made = 0
    assert _at_once(OneQueue(accounts).check, strangers) == [None] * 8 and counted.made >= 8  # as before: hashed


def test_one_credential_sent_at_once_is_checked_once(accounts, monkeypatch):
    counted = Counted(monkeypatch)
    answers = _at_once(signin.SignIn(accounts).check, [("rhea", PASSWORD, "10.0.3.1")] * 6)
    assert [a.name for a in answers] == ["rhea"] * 6 and counted.made == 1


def test_a_name_is_checked_one_at_a_time_and_strangers_waiting_are_few(accounts, monkeypatch):
    monkeypatch.setattr(signin, "STRANGERS_WAITING", 4)
    gate = signin.SignIn(accounts)
    answers = _at_once(gate.check, [("tess", f"guess-{i}", f"10.0.4.{i}") for i in range(5)])
    assert answers.count(None) == signin.NAME_WAITING and answers.count(signin.BUSY) == 5 - signin.NAME_WAITING
    answers = _at_once(gate.check, [(f"nobody{i}", "guess", f"10.0.5.{i}") for i in range(10)])
    assert answers.count(None) == 4 and answers.count(signin.BUSY) == 6


def test_a_browser_that_signed_in_before_has_a_place_of_its_own_in_a_name_under_attack(accounts, monkeypatch):
    """The independent attack on #53 (F2): guesses from many addresses kept a name's two places full, and its owner's
    right password was refused (429) for as long as they went on. A caller with the gate's proof that this credential
    signed in before (the proxy's cookie, which no guesser has) has a place past the guessers' share."""
    real = signin.matches

    def slow(hashed: str, password: str) -> bool:
        time.sleep(0.3)  # a loaded machine's check: the guesses hold the name's places while the owner asks
        return real(hashed, password)

    monkeypatch.setattr(signin, "matches", slow)

    def owner(proven: bool) -> list:
        gate = signin.SignIn(accounts)
        asks = [("uma", f"guess-{i}", f"10.0.8.{i}", False) for i in range(4)] + [("uma", PASSWORD, "10.0.9.1", proven)]
        answers: list = [None] * len(asks)

        async def main() -> None:
            async def one(i: int) -> None:
                answers[i] = await gate.check(*asks[i])

            async with anyio.create_task_group() as group:
                for i in range(len(asks)):
                    group.start_soon(one, i)
                    await anyio.sleep(0.02)  # the guesses first

        anyio.run(main)
        return answers

    flood_then_owner = owner(proven=True)
    assert flood_then_owner[:4].count(signin.BUSY) == 2 and flood_then_owner[4].name == "uma"
    assert owner(proven=False)[4] is signin.BUSY  # without the proof: refused while the guesses hold the places


def test_the_owners_typo_while_the_name_is_under_attack_bans_only_a_browser_without_the_proof():
    """The re-attack on #53 (N2): with strikes for failures at a name under attack, the owner's one typo banned her own
    address with the guessers'. A credential that brings the proof is judged by its own address only."""
    for proven, banned in ((False, 60), (True, None)):
        bucket = throttle.Throttle()
        for i in range(3):  # guessers elsewhere fill the name's bucket
            bucket.charge("uma", f"10.0.10.{i}", now=0)
            bucket.failed("uma", f"10.0.10.{i}", now=0)
        assert bucket.wait("uma", "10.0.11.1", now=1, proven=proven) is None  # a clean address: let in
        bucket.charge("uma", "10.0.11.1", now=1)
        assert bucket.failed("uma", "10.0.11.1", now=1, proven=proven) == banned  # her typo
        assert (bucket.wait("uma", "10.0.11.1", now=2, proven=proven) is None) == proven  # her next try


class FirstCome(signin.Turns):
    """Turns in the order asked, whoever asks (every sign-in waited behind the names under attack)."""

    def turn(self, clean: bool):
        return super().turn(True)


def test_a_name_without_failures_is_checked_before_names_under_attack(accounts, monkeypatch):
    """uma's and tess's names have failed (under attack); while uma's guess is checked, a guess of tess's waits,
    then rhea signs in: rhea's password is checked before the guess. uma's check is held until all three have asked,
    so the order does not depend on how long a hash takes on a loaded machine."""
    order: list[str] = []
    real = signin.matches
    asked = threading.Event()

    def matches(hashed: str, password: str) -> bool:
        order.append(password)
        if password == "guess-u":
            asked.wait(10)  # the check in progress while the others ask (a thread: the event loop goes on)
        return real(hashed, password)

    monkeypatch.setattr(signin, "matches", matches)

    def checked(turns: type[signin.Turns]) -> list[str]:
        gate = signin.SignIn(accounts)
        gate._turns = turns(signin.HASHES_AT_ONCE)
        for name in ("uma", "tess"):
            gate.throttle.charge(name, "10.0.6.1")
            gate.throttle.failed(name, "10.0.6.1")

        async def main() -> None:
            async with anyio.create_task_group() as group:
                for name, password, address in (("uma", "guess-u", "10.0.6.2"), ("tess", "guess-t", "10.0.6.3"),
                                                ("rhea", PASSWORD, "10.0.6.4")):  # fmt: skip
                    group.start_soon(gate.check, name, password, address)
                    await anyio.sleep(0.05)  # each asks after the one before
                asked.set()

        order.clear()
        asked.clear()
        anyio.run(main)
        return list(order)

    assert checked(signin.Turns) == ["guess-u", PASSWORD, "guess-t"]
    assert checked(FirstCome) == ["guess-u", "guess-t", PASSWORD]


def test_bans_grow_for_an_address_that_keeps_failing():
    def waits(bucket: throttle.Throttle) -> list[int]:
        now, seen = 0.0, []
        for _ in range(3):
            bucket.charge("n", "a", now=now)
            bucket.failed("n", "a", now=now)
        for _ in range(5):
            seen.append(bucket.wait("n", "a", now=now))
            now += seen[-1]
            assert bucket.wait("n", "a", now=now) is None  # one more guess when the ban ends
            bucket.charge("n", "a", now=now)
            bucket.failed("n", "a", now=now)
        return seen

    assert waits(throttle.Throttle(leak_s=10)) == [10, 20, 40, 80, 160]
    assert waits(CountedAfter(leak_s=10)) == [10] * 5  # without bans: one guess every leak, however long it goes on
    capped = throttle.Throttle(leak_s=1000)
    assert waits(capped)[-1] == throttle.BAN_MAX_S


def _guesses_in_an_hour(bucket: throttle.Throttle, addresses: int) -> tuple[int, int]:
    """A guesser sharing one name over ``addresses`` addresses, each guessing whenever it may (checked every second of
    an hour): the guesses checked, and the addresses banned at least once."""
    checked, banned = 0, set()
    for second in range(3600):
        for i in range(addresses):
            address = f"10.9.0.{i}"
            if bucket.wait("alice", address, now=second) is None:
                bucket.charge("alice", address, now=second)
                checked += 1
                if bucket.failed("alice", address, now=second) is not None:
                    banned.add(address)
    return checked, len(banned)


def test_addresses_sharing_the_guessing_of_one_name_each_climb_the_ladder():
    """The independent attack on #53 (F1): two addresses guessing one name never filled their own buckets, so neither
    was banned, and together they had 120 guesses an hour (60 addresses 3,600), where one address has 8."""
    alone, _ = _guesses_in_an_hour(throttle.Throttle(), 1)
    two, banned = _guesses_in_an_hour(throttle.Throttle(), 2)
    ten, _ = _guesses_in_an_hour(throttle.Throttle(), 10)
    assert alone <= 9 and banned == 2 and two <= 2 * alone and ten <= 10 * alone, (alone, two, ten)
    weak, never = _guesses_in_an_hour(AddressStrikes(), 2)
    assert weak >= 100 and never == 0, (weak, never)


def test_the_throttle_gives_a_right_password_its_count_back_and_holds_bounded_memory():
    bucket = throttle.Throttle(capacity=3, leak_s=10, max_keys=100)
    for _ in range(10):
        bucket.charge("n", "a", now=0)
        bucket.cleared("n", "a", now=0)
    assert bucket.wait("n", "a", now=0) is None
    for _ in range(3):
        bucket.charge("n", "b", now=0)
        bucket.failed("n", "b", now=0)
    assert bucket.wait("n", "b", now=0) == 10 and bucket.wait("n", "fresh", now=0) is None
    bucket.charge("n", "c", now=0)
    bucket.failed("n", "c", now=0)
    assert bucket.wait("n", "c", now=0) == 20  # the name's bucket (4) refuses an address that failed
    for i in range(1000):
        bucket.charge(f"name{i}", f"10.0.0.{i}", now=0)
        bucket.failed(f"name{i}", f"10.0.0.{i}", now=0)
    assert len(bucket) == 100 and len(bucket._bans) <= 100


def test_the_gates_answers_of_the_registry_load_no_frame_library(tmp_path):
    """What the gate reads for its forms and catalogue (every registered dataset, with its budget, and the index) loads
    no pandas, pyarrow or scipy while no DP release is charged (the independent attack on #53, F4: every mechanism,
    scipy's optimizers included, was loaded to answer the datasets, and the gate sat at 300 MB; a charged dataset's
    next-release figure loads that one mechanism)."""
    from privrelease.core.datasets.demo import write_demo

    home = tmp_path / "home"
    write_demo(home, rows=2000)
    code = (
        "import sys, privrelease.gate.app; from privrelease.core.release.catalogue import Catalogue; from privrelease.core.release.home import Home; "
        "c = Catalogue(Home.open()); n = len(c.datasets()); c.index(); "
        "print(n, sorted({'pandas', 'pyarrow', 'scipy'} & set(sys.modules)))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")} | {"PRIVRELEASE_HOME": str(home)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, timeout=120)
    assert done.stdout.split(maxsplit=1) == ["4", "[]\n"], done.stdout


def test_the_gates_memory_is_bounded():
    """The gate imports no pandas (~80 MB it never uses: the catalogue reads no frame), so one Argon2 check (64 MiB)
    and the calls a flood holds stay under 300 MB (bench/bench_signin_flood.py measures it)."""
    imported = subprocess.run(
        [sys.executable, "-c", "import sys, privrelease.gate.__main__, privrelease.gate.app; print(sorted({'pandas', 'pyarrow'} & set(sys.modules)))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert imported.stdout.strip() == "[]"
    assert signin.HASHES_AT_ONCE * 64 < 300 - 140  # MiB: the checks at once, beside the gate's own ~130 MB
    assert signin.STRANGERS_WAITING + signin.HASHES_AT_ONCE < 192  # far under the proxy's connections to the gate
    assert Path(signin.__file__).read_text().count("\n") < 400


def test_a_credential_is_one_to_the_gate_exactly_when_it_is_one_to_nginx():
    """The independent attack on #53 (F3): past 1,024 base64 characters nginx counted the call as no one's (outside its
    sign-in limits) while the gate checked it as a sign-in. Both read one pattern now, and no password an account can
    have makes a longer credential."""
    conf = (REPO / "deploy" / "nginx.conf").read_text()
    (nginx,) = re.findall(r'"~\^(Basic [^"]+)\$" \$http_authorization;', conf)
    for length in (12, 600, 700, 760, 800, 3000):
        header = "Basic " + base64.b64encode(f"ann:{'x' * length}".encode()).decode()
        assert (re.fullmatch(nginx, header) is not None) == (headers.credentials(header) is not None), length
    assert headers.credentials("Basic " + base64.b64encode(b"ann:" + b"x" * 3000).decode()) is None
    with pytest.raises(AccountError, match="too long: use at most 512 bytes"):
        check_password("é" * 257)
    longest = "Basic " + base64.b64encode(("a" * 63 + ":" + "x" * MAX_PASSWORD_BYTES).encode()).decode()
    assert re.fullmatch(nginx, longest) and headers.credentials(longest) == ("a" * 63, "x" * MAX_PASSWORD_BYTES)
