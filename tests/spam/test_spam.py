"""Private spam-filter training: Paillier (against phe), key policy, packing and masks, the
protocol against its plaintext rule, participation floors, classification, processes, features."""

from __future__ import annotations

import json
import os

import gmpy2
import numpy as np
import pytest
from phe import paillier as phe
from scipy import stats

from privrelease.core import parallel
from privrelease.core.errors import InternalError, ParameterError, UserError
from privrelease.core.spam import features as F
from privrelease.core.spam import floors, paillier
from privrelease.core.spam import parties as Q
from privrelease.core.spam import protocol as P
from privrelease.core.spam import wire as W
from privrelease.core.spam.aggregation import Agreement, Layout
from privrelease.core.spam.paillier import KeyPair, Overflow
from privrelease.core.spam.training import load_user, plain_gradient


@pytest.fixture(scope="module")
def keys512() -> KeyPair:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PRIVRELEASE_TEST_MODE", "1")
        return KeyPair(512)


def toy(n: int, d: int, seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    x = [np.unique(rng.integers(0, d, rng.integers(2, 12))) for _ in range(n)]
    w = rng.normal(0, 1, d)
    y = np.array([1 if w[xi].sum() > 0 else -1 for xi in x])
    return x, y


def group(key_bits: int, x: list[np.ndarray], y: np.ndarray, d: int, users: int, eta: float = 0.1, user_class=P.User):
    """A server and ``users`` users (user k holds messages k, k + users, ...), set up in process."""
    server = P.Server(key_bits, np.zeros(d), eta)
    members = [user_class(f"user-{k + 1}", x[k::users], y[k::users]) for k in range(users)]
    parties = Q.Local(server), [Q.Local(u) for u in members]
    channel = W.Channel()
    Q.setup(*parties, channel)
    return server, members, parties, channel


# -- Paillier ---------------------------------------------------------------------------------------------------


def test_paillier_round_trips_negatives_and_homomorphisms(keys512):
    key = keys512.public
    rng = np.random.default_rng(1)
    for _ in range(50):
        a, b = (int(v) for v in rng.integers(-(2**62), 2**62, 2))
        k = int(rng.integers(-1000, 1000))
        ca, cb = key.encrypt(a, "a"), keys512.encrypt(b, "b")  # a user's encryption and the key holder's CRT one
        assert keys512.decrypt(ca, key.half, "a") == a and keys512.decrypt(cb, key.half, "b") == b
        assert keys512.decrypt(key.add(ca, cb), key.half, "a+b") == a + b
        assert keys512.decrypt(key.scale(ca, k), key.half, "k·a") == k * a
        assert keys512.decrypt(key.negate(ca), key.half, "−a") == -a
        assert keys512.decrypt(key.add_plain(ca, b, "b"), key.half, "a+b") == a + b
        again = key.rerandomize(ca)
        assert again != ca and keys512.decrypt(again, key.half, "a") == a
    edge = key.half - 1
    assert keys512.decrypt(key.encrypt(-edge, "edge"), key.half, "edge") == -edge
    assert key.unpack(key.pack([ca, cb])) == [ca, cb]


def test_our_paillier_agrees_with_phe(keys512):
    """Same keys, either implementation encrypts, the other decrypts."""
    public = phe.PaillierPublicKey(keys512.public.n)
    private = phe.PaillierPrivateKey(public, int(keys512._p), int(keys512._q))
    for m in (0, 1, 12345, keys512.public.n - 1, 2**300 + 7):
        assert int(keys512.raw_decrypt(gmpy2.mpz(public.raw_encrypt(m)))) == m
        assert (
            private.raw_decrypt(
                int(keys512.encrypt(m % keys512.public.n - (keys512.public.n if m > keys512.public.half else 0), "m"))
            )
            == m
        )


def test_the_key_holders_obfuscators_are_fresh_nth_residues(keys512):
    obfuscators = {int(keys512.obfuscator()) for _ in range(200)}
    assert len(obfuscators) == 200
    assert all(keys512.raw_decrypt(gmpy2.mpz(o)) == 0 for o in list(obfuscators)[:20])  # r^n encrypts 0
    # uniform over the n-th residues: the low bit of an n-th residue's representative is a fair coin (false alarm 0.001)
    assert stats.binomtest(sum(o & 1 for o in obfuscators), 200).pvalue > 1e-3


def test_a_batch_of_obfuscators_is_drawn_on_every_core_and_each_is_fresh(keys512, monkeypatch):
    """``KeyPair.obfuscators``: a batch spread over forked processes (two here, one per core asked for) gives as many
    r^n, each an encryption of 0, none repeated across the processes (each draws from the OS: a generator copied by
    the fork would repeat the other's), their low bits fair (false alarm 0.001); a process that fails fails the
    batch, which is never returned short."""
    monkeypatch.setattr(paillier, "BATCH", 50)
    monkeypatch.setattr(paillier.os, "sched_getaffinity", lambda pid: {0, 1})
    drawn = keys512.obfuscators(300)
    assert len(drawn) == 300 and len({int(o) for o in drawn}) == 300
    assert all(keys512.raw_decrypt(o) == 0 for o in drawn[:20] + drawn[-20:])  # both processes' r^n encrypt 0
    assert stats.binomtest(sum(int(o) & 1 for o in drawn), 300).pvalue > 1e-3
    parent = os.getpid()

    def fails_in_a_child() -> gmpy2.mpz:
        if os.getpid() != parent:
            raise RuntimeError("the child's draw failed")
        return gmpy2.mpz(1)

    monkeypatch.setattr(keys512, "obfuscator", fails_in_a_child)
    with pytest.raises(InternalError, match="encryption randomness failed"):
        keys512.obfuscators(300)


def test_forked_jobs_come_back_in_order_with_their_status():
    """``parallel.forked``: each job's bytes in the jobs' order, the first run here; a child that raised gives a
    non-zero status; one the parent fails on is still reaped (no child left)."""
    said = parallel.forked(lambda job: str(job * os.getpid() // os.getpid()).encode() * 1000, [1, 2, 3])
    assert [raw for raw, _ in said] == [b"1" * 1000, b"2" * 1000, b"3" * 1000] and [s for _, s in said] == [0, 0, 0]
    parent = os.getpid()

    def job(n: int) -> bytes:
        if n == 2:
            raise ValueError("no")
        return b"ok"

    assert [s != 0 for _, s in parallel.forked(job, [1, 2])] == [False, True]
    children, fork = [], os.fork

    def recorded() -> int:
        children.append(fork())
        return children[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(parallel.os, "fork", recorded)
        with pytest.raises(ValueError):
            parallel.forked(lambda n: b"" if os.getpid() != parent else job(2), [2, 1])
    assert len(children) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(children[0], os.WNOHANG)  # the child was reaped


def test_key_sizes_below_2048_bits_are_for_tests_only(monkeypatch):
    monkeypatch.delenv("PRIVRELEASE_TEST_MODE", raising=False)
    for bits in (512, 1024, 2040):
        with pytest.raises(ParameterError, match="at least 2048.*test runs only"):
            KeyPair(bits)
    with pytest.raises(ParameterError, match="multiple of 8"):
        KeyPair(2052)
    assert KeyPair(2048).public.bits == 2048


def test_a_spec_with_a_small_key_is_refused_outside_test_mode(monkeypatch):
    from pydantic import ValidationError

    from privrelease.core.spam.training import SpamSpec

    monkeypatch.delenv("PRIVRELEASE_TEST_MODE", raising=False)
    with pytest.raises(ValidationError, match="key_bits must be a multiple of 8 and at least 2048"):
        SpamSpec(run_id="r", users=["a", "b"], test="t", key_bits=1024)
    assert SpamSpec(run_id="r", users=["a", "b"], test="t").key_bits == 2048


def test_overflow_is_detected_not_wrapped(keys512):
    key = keys512.public
    with pytest.raises(Overflow, match="use larger key_bits"):
        key.encrypt(key.half, "too big")
    with pytest.raises(Overflow, match="outside its range"):
        keys512.decrypt(key.encrypt(1 << 300, "big"), 1 << 200, "bounded")
    with pytest.raises(ParameterError, match="cannot hold one gradient slot"):
        Layout(64, 10, 2, 1000).check()


# -- packing and masks ----------------------------------------------------------------------------------------


def test_layout_packs_extreme_values_of_every_user_without_carries():
    layout = Layout(512, 23, 3, 1000).check()
    assert layout.slots * layout.slot_bits <= 510 and layout.ciphertexts == -(-23 // layout.slots)
    top = layout.offset - 1
    rng = np.random.default_rng(2)
    values = [[int(v) for v in rng.choice([-top, top, 0, 1, -1], 23)] for _ in range(3)]
    totals = [0] * layout.ciphertexts
    for user in values:
        for j, v in enumerate(user):
            totals[j // layout.slots] += (v + layout.offset) << ((j % layout.slots) * layout.slot_bits)
    assert max(totals).bit_length() <= 510  # below n/4 for any 512-bit n
    assert layout.unpack(totals) == [sum(col) for col in zip(*values)]


def test_pairwise_masks_cancel_in_the_sum_and_change_every_round():
    n = int(gmpy2.next_prime(2**511))
    members = [Agreement() for _ in range(4)]
    keys = [a.public_key() for a in members]
    for k, a in enumerate(members):
        a.agree(k, keys, b"run")
    for round_ in (0, 1):
        masks = [a.mask(n, round_, 5) for a in members]
        assert [sum(col) % n for col in zip(*masks)] == [0] * 5
        assert all(0 <= m < n for ms in masks for m in ms) and len({m for ms in masks for m in ms}) == 20
    assert members[0].mask(n, 0, 5) != members[0].mask(n, 1, 5)
    with pytest.raises(ParameterError, match="every user's key once"):
        Agreement().agree(0, keys, b"run")


# -- the protocol against its plaintext rule ---------------------------------------------------------------


def test_rounds_track_the_plaintext_rule_and_the_server_decrypts_only_the_sum(test_mode):
    x, y = toy(45, 30, 4)
    server, users, (s, us), channel = group(512, x, y, 30, 3, eta=0.2)
    w = np.zeros(30)
    pooled_x = [xi for k in range(3) for xi in x[k::3]]
    pooled_y = np.concatenate([y[k::3] for k in range(3)])
    decrypted: list = []  # every ciphertext the server's secret key opens
    raw_decrypt = server._keys.raw_decrypt
    server._keys.raw_decrypt = lambda c: decrypted.append(c) or raw_decrypt(c)
    for r in range(4):
        decrypted.clear()
        _, gradient, _ = Q.train_round(s, us, channel, r)
        key, count = server.public_key, server.layout.ciphertexts
        messages = [W.read_ciphertexts(m, key, count, "x") for m in server._round["received"].values()]
        assert len(messages) == 3 and decrypted == [key.add(key.add(a, b), c) for a, b, c in zip(*messages)]  # only the sums
        plain = plain_gradient(pooled_x, pooled_y, w)
        assert gradient == pytest.approx(plain, abs=1e-12)  # the sum of three users' shares
        w = w + 0.2 * plain
        assert server.w == pytest.approx(w, abs=1e-12)
    assert np.abs(w).max() > 0.1  # the model did move
    per_round = [m for m in channel.log if m.round == 3]
    assert [m.kind for m in per_round] == (
        ["round"] * 3
        + ["self-mask-shares"] * 6
        + ["encrypted-weights"] * 3
        + ["masked-gradient"] * 3
        + ["unmask-request"] * 3
        + ["mask-shares"] * 3
    )
    assert all(m.count == server.layout.ciphertexts for m in per_round if m.kind == "masked-gradient")
    assert server.layout.ciphertexts < 30  # packing: fewer ciphertexts (and decryptions) than coordinates


@pytest.mark.parametrize("bits", [3072, 4352])
def test_large_keys_train_without_overflow(test_mode, bits):
    """Keys ≥ 4,248 bits used to raise OverflowError (float scales); every scale is now an integer."""
    x, y = toy(6, 5, 9)
    server, _, (s, us), channel = group(bits, x, y, 5, 2)
    _, gradient, _ = Q.train_round(s, us, channel, 0)
    assert gradient == pytest.approx(
        plain_gradient(x[0::2] + x[1::2], np.concatenate([y[0::2], y[1::2]]), np.zeros(5)), abs=1e-12
    )


def test_participation_floors_are_enforced_by_the_users(monkeypatch):
    x, y = toy(8, 6, 3)
    monkeypatch.setenv("PRIVRELEASE_TEST_MODE", "1")
    with pytest.raises(ParameterError, match="at least 2 users"):
        group(512, x, y, 6, 1)
    server = P.Server(512, np.zeros(6))
    alone, other = P.User("user-1", x, y), P.User("user-2", x, y)
    directory = server.directory(alone.announce(), other.announce())
    doc = json.loads(directory[1:])
    with pytest.raises(ParameterError, match="at least 2 users"):  # a server that drops the other user is refused
        alone.setup(W.public_message({**doc, "users": ["user-1"], "keys": doc["keys"][:1], "sizes": doc["sizes"][:1]}))
    with pytest.raises(ParameterError, match="does not follow from the public sizes"):
        alone.setup(W.public_message({**doc, "layout": {**doc["layout"], "slots": 1}}))
    alone.setup(directory)
    weights = server.weights_message()
    with pytest.raises(ParameterError, match="round 0 was not begun"):
        alone.gradient(weights, 0)
    other.setup(directory)
    bundles = [alone.begin(server.round_message(0)), other.begin(server.round_message(0))]
    with pytest.raises(ParameterError, match="round 0's mask keys were not relayed to this user"):  # masks before a gradient
        alone.gradient(weights, 0)
    alone.hold(server.relay(*bundles)["user-1"])
    alone.gradient(weights, 0)
    with pytest.raises(ParameterError, match="used once"):
        alone.gradient(weights, 0)
    server.w[0] = 2.0**20
    with pytest.raises(ParameterError, match="L1 norm passed the public bound.*smaller learning_rate"):
        server.weights_message()
    monkeypatch.delenv("PRIVRELEASE_TEST_MODE")
    with pytest.raises(
        ParameterError, match="user 2 sums 16 messages per round; each user needs at least 1000.*raise block_size"
    ):
        P.check_participation([5000, 16], floors.floor(F.FeatureParams(dimension=10_000)))
    P.check_participation([1000, 1000], floors.floor(F.FeatureParams(dimension=10_000)))
    with pytest.raises(ParameterError, match="no participation floor was measured for reduction 'hash' to 100000.*hash to 10000"):
        floors.floor(F.FeatureParams(dimension=100_000))
    for reduction in ("none", "df", "multinomial", "uniform", "lsh"):  # not measured: refused outside test mode
        with pytest.raises(ParameterError, match=f"reduction {reduction!r}"):
            floors.floor(F.FeatureParams(reduction=reduction, dimension=10_000))


def _core_limit(pid: int) -> tuple[int, int]:
    """A process's core-file limit (soft, hard), as /proc shows it ("unlimited" as -1)."""
    line = next(x for x in open(f"/proc/{pid}/limits").read().splitlines() if x.startswith("Max core file size"))
    soft, hard = line.split()[4:6]
    return tuple(-1 if v == "unlimited" else int(v) for v in (soft, hard))


def test_parties_run_in_their_own_processes_with_only_their_own_secrets(test_mode, tmp_path):
    from privrelease.core.datasets.demo import mail

    params = F.FeatureParams(modulus=10_000, dimension=64).model_dump()
    paths = []
    for k in range(2):
        paths.append(tmp_path / f"user-{k + 1}.jsonl")
        paths[-1].write_text("".join(json.dumps(m) + "\n" for m in mail(12, k)))
    server = Q.Remote("server", P.Server, 512, np.zeros(64), 0.01)
    users = [Q.Remote(f"user-{k + 1}", load_user, f"user-{k + 1}", p, tmp_path, params, None) for k, p in enumerate(paths)]
    try:
        channel = W.Channel()
        Q.setup(server, users, channel)
        _, gradient, _ = Q.train_round(server, users, channel, 0)
        local = [load_user(f"user-{k + 1}", p, tmp_path, params, None) for k, p in enumerate(paths)]
        x = [xi for u in local for xi in u._x]
        y = np.concatenate([u._y for u in local])
        assert gradient == pytest.approx(plain_gradient([np.array(v) for v in x], y, np.zeros(64)), abs=1e-12)
        assert not any(hasattr(p, "party") for p in [server, *users])  # this process holds pipes, not parties
        for party in [server, *users]:  # a party that crashes dumps no core (its key, its mail): the limit is 0, for good
            assert _core_limit(party._process.pid) == (0, 0)
        with pytest.raises(UserError, match="used once"):  # errors cross the process boundary by type and message
            users[0].call("gradient", server.call("weights_message"), 0)
    finally:
        for p in [server, *users]:
            p.close()


# -- classification ---------------------------------------------------------------------------------------


# -- features ------------------------------------------------------------------------------------------------


def test_byte_4grams_are_big_endian_values_mod_m():
    got = F.grams(b"abcde", 1_000_000)
    expected = sorted({int.from_bytes(b"abcd", "big") % 1_000_000, int.from_bytes(b"bcde", "big") % 1_000_000})
    assert got.tolist() == expected
    assert F.grams("abc", 1000).size == 0
    assert F.grams(b"aaaaaaa", 97).tolist() == [int.from_bytes(b"aaaa", "big") % 97]
    assert F.grams("é€ab", 2**32).size == len("é€ab".encode()) - 3  # UTF-8 bytes, not characters


def test_only_the_first_35000_bytes_count():
    head = b"x" * (F.MAX_BYTES - 2)
    assert F.grams(head + b"QRST", 2**32).tolist() == F.grams(head + b"QR", 2**32).tolist()
    assert int.from_bytes(b"xxQR", "big") in F.grams(head + b"QRST", 2**32)


@pytest.mark.parametrize("reduction", ["hash", "uniform", "lsh", "df", "multinomial"])
def test_reductions_are_deterministic_under_the_shared_seed_and_have_the_right_dimension(reduction):
    params = F.FeatureParams(modulus=5000, reduction=reduction, dimension=64, seed=3)
    docs = [F.grams(f"message {i} about topic {i % 7} and more words".encode(), 5000) for i in range(50)]
    one, two = F.fit(params, docs), F.fit(params, docs)
    for doc in docs:
        a, b = one.apply(doc), two.apply(doc)
        assert np.array_equal(a, b) and (a.size == 0 or (a.min() >= 0 and a.max() < 64))
    if reduction in ("uniform", "df", "multinomial"):
        assert (one.keep >= 0).sum() == 64
    other = F.fit(params.model_copy(update={"seed": 4}), docs)
    if reduction in ("uniform", "lsh", "multinomial"):
        assert any(not np.array_equal(one.apply(d), other.apply(d)) for d in docs)
    assert (reduction in F.DATA_DEPENDENT) == (reduction in ("df", "multinomial"))


def test_feature_settings_are_checked():
    with pytest.raises(ValueError, match="larger than the modulus"):
        F.FeatureParams(modulus=100, dimension=1000)
    assert F.FeatureParams(modulus=100, reduction="none", dimension=1000).size == 100
