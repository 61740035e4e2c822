"""Private spam-filter training: Paillier and fixed point, each protocol step against plaintext,
multi-party sums, classification, transcript and hiding checks, features and reductions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from core.spam import features as F
from core.spam import protocol as P
from core.spam.paillier import KeyPair, Overflow, PublicKey
from core.spam.training import plain_gradient


@pytest.fixture(scope="module")
def keys512() -> KeyPair:
    return KeyPair(512)


def toy(n: int, d: int, seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    x = [np.unique(rng.integers(0, d, rng.integers(2, 12))) for _ in range(n)]
    w = rng.normal(0, 1, d)
    y = np.array([1 if w[xi].sum() > 0 else -1 for xi in x])
    return x, y


def parties(key_bits: int, x: list[np.ndarray], y: np.ndarray, d: int, users: int, eta: float = 0.1, seed: int = 0):
    server = P.Server(key_bits, np.zeros(d), eta)
    group = [P.User(f"user-{k + 1}", x[k::users], y[k::users], server.public_key, server.scales,
                    np.random.default_rng(seed + k)) for k in range(users)]  # fmt: skip
    return server, group


# -- Paillier and fixed point ------------------------------------------------------------------------


def test_paillier_round_trips_negatives_and_homomorphisms(keys512):
    key = keys512.public
    rng = np.random.default_rng(1)
    for _ in range(50):
        a, b = (int(v) for v in rng.integers(-(2**62), 2**62, 2))
        k = int(rng.integers(-1000, 1000))
        ca, cb = key.encrypt(a, "a"), key.encrypt(b, "b")
        assert keys512.decrypt(ca, key.half, "a") == a
        assert keys512.decrypt(key.add(ca, cb), key.half, "a+b") == a + b
        assert keys512.decrypt(key.scale(ca, k), key.half, "k·a") == k * a
        assert keys512.decrypt(key.negate(ca), key.half, "−a") == -a
        assert keys512.decrypt(key.add_plain(ca, b, "b"), key.half, "a+b") == a + b
        again = key.rerandomize(ca)
        assert again != ca and keys512.decrypt(again, key.half, "a") == a
    edge = key.half - 1
    assert keys512.decrypt(key.encrypt(-edge, "edge"), key.half, "edge") == -edge


def test_overflow_is_detected_not_wrapped(keys512):
    key = keys512.public
    with pytest.raises(Overflow, match="use larger key_bits"):
        key.encrypt(key.half, "too big")
    c = key.encrypt(1 << 300, "big")
    with pytest.raises(Overflow, match="outside its range"):
        keys512.decrypt(c, 1 << 200, "bounded")
    with pytest.raises(Overflow, match="cannot hold mask range"):
        P.Scales.plan(512, mask_range=60)


def test_fixed_point_encoding_is_exact_rounding():
    for value in (1.0, 0.5, math.pi, 1e-30, math.exp(-63), 123456.789):
        for bits in (10, 60, 200):
            exact = value * 2**bits
            assert abs(P._fixed(value, bits) - exact) <= 0.5 + 1e-9 * exact


def test_scales_fit_the_key_and_grow_with_it():
    small, large = P.Scales.plan(512), P.Scales.plan(2048)
    assert small.q_bits >= 128 and large.mask_range > 10 * small.mask_range
    for s in (small, large):
        step6 = s.e_bits + math.ceil(s.clip * P.LOG2E) + s.r_bits + math.ceil(s.mask_range * P.LOG2E) + 2
        assert step6 + s.q_bits < s.key_bits - 2


# -- the protocol against its plaintext counterpart -----------------------------------------------------


def test_each_intermediate_of_one_round_decrypts_to_its_plaintext_value():
    x, y = toy(30, 40, 2)
    server, (user,) = parties(512, x, y, 40, 1)
    server.w = np.random.default_rng(3).normal(0, 0.5, 40)
    keys, s, times = server._keys, server.scales, P.StepTimes()
    z = np.array([yi * server.w[xi].sum() for xi, yi in zip(x, y)])
    block = np.arange(len(y))
    weights = server.encrypted_weights(times)
    assert [keys.decrypt(c, keys.public.half, "w") / 2**P.W_BITS for c in weights] == pytest.approx(server.w, abs=1e-14)
    masked = user.masked_scores(weights, block, times)
    r = np.array(user._r) / 2**P.W_BITS
    assert np.abs(r).max() <= s.mask_range
    u = np.array([keys.decrypt(c, keys.public.half, "u") for c in masked]) / 2**P.W_BITS
    assert u == pytest.approx(z - r, abs=1e-12)
    exps = server.exponentials(masked, times)
    e = np.array([keys.decrypt(c, keys.public.half, "e") for c in exps], dtype=float) / 2**s.e_bits
    assert e == pytest.approx(np.exp(z - r), rel=1e-12)
    denominators = user.masked_denominators(exps, times)
    q = np.array(user._q, dtype=float)
    got = np.array([keys.decrypt(c, keys.public.half, "qd") for c in denominators], dtype=float) / 2.0 ** (s.e_bits + s.r_bits)
    assert got / q == pytest.approx(1 + np.exp(z), rel=1e-12)
    recips = server.reciprocals(denominators, times)
    back = np.array([keys.decrypt(c, keys.public.half, "1/qd") for c in recips], dtype=float) / 2.0**s.s_bits
    assert back * q == pytest.approx(1 / (1 + np.exp(z)), rel=1e-12)
    grad = user.encrypted_gradient(recips, 40, times)
    g = np.array([keys.decrypt(c, keys.public.half, "g") for c in grad], dtype=float) / 2.0**s.s_bits
    assert g == pytest.approx(plain_gradient(x, y, server.w), abs=1e-12)


def test_several_rounds_track_plaintext_gradient_ascent_and_users_sum_to_the_pooled_gradient():
    x, y = toy(45, 30, 4)
    server, users = parties(512, x, y, 30, 3, eta=0.2)
    w = np.zeros(30)
    pooled_x = [xi for k in range(3) for xi in x[k::3]]
    pooled_y = np.concatenate([y[k::3] for k in range(3)])
    for _ in range(4):
        _, gradient = P.train_round(server, users, [np.arange(len(u)) for u in users], P.Channel())
        plain = plain_gradient(pooled_x, pooled_y, w)
        assert gradient == pytest.approx(plain, abs=1e-12)  # the sum of three users' shares
        w = w + 0.2 * plain
        assert server.w == pytest.approx(w, abs=1e-12)
    assert np.abs(w).max() > 0.1  # the model did move


def test_message_and_ciphertext_counts_per_round():
    x, y = toy(20, 16, 5)
    server, users = parties(512, x, y, 16, 2)
    channel = P.Channel()
    blocks = [np.arange(len(u)) for u in users]
    P.train_round(server, users, blocks, channel)
    assert len(channel.log) == 6 * 2  # three round trips per user
    for user, block in zip(users, blocks):
        mine = [m for m in channel.log if user.name in (m.sender, m.receiver)]
        assert [m.kind for m in mine] == ["encrypted-weights", "masked-scores", "masked-exponentials",
                                          "masked-denominators", "masked-reciprocals", "encrypted-gradient"]  # fmt: skip
        assert sum(m.count for m in mine) == 4 * len(block) + 2 * 16  # the paper's 4n + 2d
        assert all(m.bytes == m.count * server.public_key.ciphertext_bytes for m in mine)


# -- classification ---------------------------------------------------------------------------------------


def test_classification_equals_the_sign_of_the_score_even_at_tiny_margins():
    d = 8
    server = P.Server(512, np.zeros(d))
    rng = np.random.default_rng(6)
    for margin in (3.0, 1e-3, 1e-9, -1e-9, -2.5, 0.0):
        x = np.array([1, 4, 6])
        w = rng.normal(0, 1, d)
        w[x] = [0.75, -0.5, margin - 0.25]  # wᵀx = margin, within 2^-48 (0.0 exactly)
        server.w = w
        for seed in range(4):  # the client's random sign must not matter
            label = P.classify(server, P.Client(x, server.public_key, np.random.default_rng(seed)), P.Channel())
            assert label == ("spam" if margin > 0 else "ham"), margin


def test_the_server_sees_a_sign_independent_of_the_label():
    server = P.Server(512, np.array([2.0, -2.0]))
    signs = {"spam": [], "ham": []}
    for seed in range(200):
        for x, label, offset in ((np.array([0]), "spam", 0), (np.array([1]), "ham", 10_000)):
            client = P.Client(x, server.public_key, np.random.default_rng(seed + offset))
            signs[label].append(server.sign(client.masked_score(server.encrypted_weights(P.StepTimes()))))
    table = [[signs[k].count(1), signs[k].count(-1)] for k in signs]
    assert stats.fisher_exact(table).pvalue > 1e-3  # false alarm rate 0.001


# -- what each party sees --------------------------------------------------------------------------------


def test_transcript_has_no_plaintext_and_users_never_hold_the_secret_key():
    x, y = toy(12, 10, 7)
    server, users = parties(512, x, y, 10, 2)
    channel = P.Channel()
    P.train_round(server, users, [np.arange(len(u)) for u in users], channel)
    to_server = [m for m in channel.log if m.receiver == "server"]
    to_users = [m for m in channel.log if m.receiver != "server"]
    assert to_server and all(m.payload == "ciphertext" for m in to_server)  # no plaintext x or y
    assert all(m.payload == "ciphertext" for m in to_users)  # no plaintext w
    for user in users:
        for value in vars(user).values():
            assert not isinstance(value, KeyPair)
            assert type(value).__module__.split(".")[0] != "phe"
        assert isinstance(user.public_key, PublicKey) and not hasattr(user.public_key, "_secret")


def test_masked_values_the_server_decrypts_do_not_depend_on_the_data():
    """KS: u = z − r and ln(q(1 + e^z)) for scores −4 and +4 come from indistinguishable laws."""
    x = [np.array([0])] * 300 + [np.array([1])] * 300
    y = np.ones(600, dtype=int)
    server = P.Server(1024, np.array([-4.0, 4.0]))
    user = P.User("user-1", x, y, server.public_key, server.scales, np.random.default_rng(8))
    keys, times = server._keys, P.StepTimes()
    masked = user.masked_scores(server.encrypted_weights(times), np.arange(600), times)
    u = np.array([keys.decrypt(c, keys.public.half, "u") for c in masked], dtype=float) / 2**P.W_BITS
    # false alarm rate 0.001 each; the additive mask's total variation is 8/(2R) = 0.036 here
    assert stats.ks_2samp(u[:300], u[300:]).pvalue > 1e-3
    denominators = user.masked_denominators(server.exponentials(masked, times), times)
    logs = np.array([math.log(keys.decrypt(c, keys.public.half, "v")) for c in denominators])
    assert stats.ks_2samp(logs[:300], logs[300:]).pvalue > 1e-3


def test_a_2048_bit_round_matches_plaintext():
    x, y = toy(4, 6, 9)
    server, users = parties(2048, x, y, 6, 1)
    assert server.public_key.bits == 2048 and server.scales.mask_range > 250
    _, gradient = P.train_round(server, users, [np.arange(4)], P.Channel())
    assert gradient == pytest.approx(plain_gradient(x, y, np.zeros(6)), abs=1e-12)


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
