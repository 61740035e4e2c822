"""Private classification: DGK comparison, sign correctness at the edges, what each party's view
reveals (a curious server, a curious client, each also run against a weakened variant), the
transcript's labels, the server's kept state and the errors.

Test keys: 512-bit Paillier and 512-bit DGK with t = 80 (test mode). The protocol draws its
randomness from the OS, so the statistical bands are stated with their false-alarm rates."""

from __future__ import annotations

import json
import stat

import gmpy2
import numpy as np
import pytest
from scipy import stats

from privrelease.core.errors import ParameterError
from privrelease.core.spam import classify as K
from privrelease.core.spam import compare as C
from privrelease.core.spam import decision as D
from privrelease.core.spam import service as S
from privrelease.core.spam.parties import Local
from privrelease.core.spam.wire import Channel

ELL, KAPPA, ONE = K.SCORE_BITS, K.KAPPA, 1 << K.SCALE_BITS
Z = stats.norm.isf(0.5e-6)  # two-sided bands with false-alarm rate 1e-6


@pytest.fixture(scope="module")
def dgk() -> C.DGKKey:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PRIVRELEASE_TEST_MODE", "1")
        return C.DGKKey.generate(512, 80, int(gmpy2.next_prime(3 * ELL + 3)))


class Recorder(K.Wire):
    """A wire that also keeps the bytes, so each party's inbox can be analysed as the party would."""

    def __init__(self):
        super().__init__(Channel())
        self.sent: list[tuple[str, str, bytes]] = []  # (receiver, kind, bytes)

    def send(self, sender: str, receiver: str, kind: str, data: bytes) -> bytes:
        self.sent.append((receiver, kind, data))
        return super().send(sender, receiver, kind, data)

    def inbox(self, party: str, kind: str) -> list[bytes]:
        return [data for receiver, k, data in self.sent if receiver == party and k == kind]


def setup(weights: np.ndarray, dgk: C.DGKKey, cutoff: int = 0) -> tuple[K.ClassifyServer, bytes, bytes, Recorder]:
    from phe import paillier

    _, secret = paillier.generate_paillier_keypair(n_length=512)
    server = K.ClassifyServer(weights, secret.p, secret.q, dgk, cutoff)
    wire = Recorder()
    keys = wire.send("server", "client", "public-keys", server.public_keys())
    return server, keys, wire.send("server", "client", "encrypted-weights", server.encrypted_weights()), wire


def query(server, keys, weights, wire, x, client_type=K.ClassifyClient) -> tuple[str, K.ClassifyClient]:
    client = client_type(keys, weights)
    return K.classify(Local(server), client, wire, x), client


def integer_model(rng: np.random.Generator, d: int, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Weights that are exact multiples of 2^-48 (bits <= 52: exact floats), so the score S is an exact integer."""
    assert bits <= 52
    W = rng.integers(-(1 << bits), 1 << bits, d)
    return W, np.ldexp(W.astype(float), -K.SCALE_BITS)


def subsets(rng: np.random.Generator, n: int, d: int) -> list[np.ndarray]:
    return [np.unique(rng.integers(0, d, rng.integers(1, 12))) for _ in range(n)]


# -- the comparison ---------------------------------------------------------------------------------


def test_dgk_comparison_shares_the_bit_exactly_for_every_pair_of_4_bit_inputs(dgk):
    for d_hat in range(16):
        bits = C.bit_ciphertexts(dgk, d_hat, 4)
        assert [dgk.is_zero(c) for c in bits] == [not (d_hat >> i) & 1 for i in range(4)]
        for r_hat in range(16):
            for delta_a in (0, 1):
                terms = C.blinded_terms(dgk.public, bits, r_hat, delta_a)
                assert len(terms) == 5 and sum(dgk.is_zero(c) for c in terms) <= 1
                assert delta_a ^ C.share(dgk, terms) == int(d_hat < r_hat)


def test_dgk_refuses_a_plaintext_space_too_small_for_the_comparison(dgk):
    small = C.DGKPublic(dgk.public.n, dgk.public.g, dgk.public.h, 7, dgk.public.t)
    with pytest.raises(ParameterError, match="u = 7 is too small for 4-bit comparisons; it must exceed"):
        C.blinded_terms(small, C.bit_ciphertexts(dgk, 3, 4), 5, 0)


# -- correctness --------------------------------------------------------------------------------------


def test_the_client_gets_the_sign_at_zero_one_ulp_and_the_largest_scores(dgk):
    rng = np.random.default_rng(1)
    d = 24
    W, _ = integer_model(rng, d, 40)
    top = (1 << (ELL - 1)) - (1 << 60)  # two such weights sum to just below the 2^72 bound
    x = np.array([3, 7, 11])
    for target in (0, 1, -1, 2, -2, 2 * top, -2 * top):
        W2 = [int(v) for v in W]
        if abs(target) > 2:
            W2 = [0] * d
            W2[3] = W2[7] = top if target > 0 else -top
        else:
            W2[11] = target - W2[3] - W2[7]
        w = np.array([np.ldexp(float(v), -K.SCALE_BITS) for v in W2])
        assert sum(int(v) for v in np.rint(np.ldexp(w, K.SCALE_BITS)).astype(object)[x]) == target
        server, keys, weights, wire = setup(w, dgk)
        for _ in range(3):  # the client's fresh masks must not matter
            assert query(server, keys, weights, wire, x)[0] == ("spam" if target > 0 else "ham"), target


def test_the_client_gets_the_sign_on_many_random_messages(dgk):
    rng = np.random.default_rng(2)
    d = 40
    W, w = integer_model(rng, d, 52)
    server, keys, weights, wire = setup(w, dgk)
    for x in subsets(rng, 150, d):
        score = sum(int(W[j]) for j in x)
        assert query(server, keys, weights, wire, x)[0] == ("spam" if score > 0 else "ham")


def test_the_client_gets_the_comparison_with_the_servers_cutoff(dgk):
    """The server subtracts its cutoff T from what it decrypts: the client reads [S > T] exactly at the
    edges (S = T is ham, S = T + 1 spam), for cutoffs on either side of 0; the bare sign would not."""
    rng = np.random.default_rng(3)
    d = 30
    W, w = integer_model(rng, d, 44)
    xs = subsets(rng, 40, d)
    for t in (sum(int(W[j]) for j in xs[0]), -(1 << 45) - 7, 1 << 45):
        server, keys, weights, wire = setup(w, dgk, t)
        for x in xs:
            score = sum(int(W[j]) for j in x)
            assert query(server, keys, weights, wire, x)[0] == ("spam" if score > t else "ham"), (t, score)
            assert D.label(w, x, t) == ("spam" if score > t else "ham")
        edge = [j for j in range(d) if W[j] > 0][0]
        at, above = setup(w, dgk, int(W[edge])), setup(w, dgk, int(W[edge]) - 1)
        assert query(*at, np.array([edge]))[0] == "ham" and query(*above, np.array([edge]))[0] == "spam"
    with pytest.raises(ParameterError, match="weights sum to more than 2\\^24"):  # |T| counts toward the bound
        K.ClassifyServer(np.zeros(2), dgk.p, dgk.q, dgk, 1 << ELL)


# -- a curious server ---------------------------------------------------------------------------------


class SmallMaskClient(K.ClassifyClient):
    """Weakened: the additive mask spans 16 bits instead of ℓ + 1 + κ."""

    def _mask(self) -> int:
        import secrets

        return secrets.randbits(16)


def server_attack(server: K.ClassifyServer, wire: Recorder, mask_bits: int) -> tuple[list[int], list[int]]:
    """With its own keys, the server decrypts everything it received in each query and guesses the
    score (d minus the offset and the mask's mean) and the label from β = ⌊d/2^ℓ⌋ ⊕ δ_B."""
    secret, key = server._secret, server._dgk
    scores, labels = [], []
    for q, t in zip(wire.inbox("server", "masked-score"), wire.inbox("server", "comparison-terms")):
        d = int(secret.raw_decrypt(K.unpack(q)[0]))
        scores.append(d - (1 << ELL) + 1 - ((1 << mask_bits) - 1) // 2)
        labels.append(((d >> ELL) ^ C.share(key, K.unpack(t))) & 1)
    return scores, labels


def test_a_curious_server_learns_neither_the_score_nor_the_sign_but_does_with_a_small_mask(dgk):
    rng = np.random.default_rng(3)
    d, n = 40, 300
    W, w = integer_model(rng, d, 52)
    xs = subsets(rng, n, d)
    truth = np.array([sum(int(W[j]) for j in x) for x in xs], dtype=object)
    spam = np.array([s > 0 for s in truth])
    server, keys, weights, wire = setup(w, dgk)
    for x in xs:
        query(server, keys, weights, wire, x)
    guess, beta = server_attack(server, wire, ELL + 1 + KAPPA)
    low, high = stats.binom.ppf(0.5e-6, n, 0.5), stats.binom.isf(0.5e-6, n, 0.5)
    assert low <= np.sum(np.array([g > 0 for g in guess]) == spam) <= high  # sign from the score: chance
    assert low <= np.sum(np.array(beta, dtype=bool) == spam) <= high  # sign from the comparison: chance
    corr = stats.pearsonr([float(g) for g in guess], truth.astype(float))[0]
    assert abs(corr) < Z / np.sqrt(n)  # no linear information about the score
    assert max(abs(g - s) for g, s in zip(guess, truth)) > 1 << 140  # nowhere near exact
    # weakened: the same attack recovers every score to within 2^15 units of 2^-48, hence every sign
    weak = Recorder()
    weak.send("server", "client", "public-keys", keys)
    for x, label in zip(xs[:50], spam):
        assert query(server, keys, weights, weak, x, SmallMaskClient)[0] == ("spam" if label else "ham")
    guess, _ = server_attack(server, weak, 16)
    assert all(abs(g - s) <= 1 << 15 for g, s in zip(guess, truth[:50]))
    assert all((g > 0) == s for g, s in zip(guess, spam[:50]))


# -- a curious client ---------------------------------------------------------------------------------


class UnrandomizedDGK(C.DGKKey):
    """Weakened: the server's bit encryptions lack the h^r factor (g^b only)."""

    def encrypt_bit(self, b: int) -> gmpy2.mpz:
        return gmpy2.mpz(self.public.g) if b else gmpy2.mpz(1)


def client_attack(client: K.ClassifyClient, bits: bytes, label: str) -> tuple[int, int]:
    """The client reads each DGK ciphertext as 1 if it equals g (else 0), rebuilds d̂, removes its own
    r̂ and, with its label, reconstructs S; returns (reconstructed S, bits read)."""
    cts = K.unpack(bits)
    d_hat = sum((int(c) == client.dgk.g) << i for i, c in enumerate(cts))
    z_low = (d_hat - client._r) % (1 << ELL)
    return z_low + ((label == "spam") << ELL) - (1 << ELL) + 1, d_hat


def test_a_curious_client_learns_only_its_label_but_more_from_unrandomized_dgk(dgk):
    rng = np.random.default_rng(4)
    d, n = 40, 150
    W, w = integer_model(rng, d, 52)
    xs = subsets(rng, n, d)
    truth = [sum(int(W[j]) for j in x) for x in xs]
    for key, weak in ((dgk, False), (UnrandomizedDGK(dgk.p, dgk.q, dgk.vp, dgk.vq, dgk.public), True)):
        server, keys, weights, wire = setup(w, key)
        recovered, right_bits = [], 0
        for x in xs if not weak else xs[:30]:
            label, client = query(server, keys, weights, wire, x)
            s, d_hat = client_attack(client, wire.inbox("client", "comparison-bits")[-1], label)
            recovered.append(s)
            true_d_hat = (truth[len(recovered) - 1] + (1 << ELL) - 1 + client._r) % (1 << ELL)
            right_bits += ELL - bin(d_hat ^ true_d_hat).count("1")
        exact = sum(s == t for s, t in zip(recovered, truth))
        if weak:
            assert exact == len(recovered)  # every |score| recovered exactly
        else:
            trials = ELL * n  # d̂ is uniform, so each bit guess is right with probability 1/2
            assert stats.binom.ppf(0.5e-6, trials, 0.5) <= right_bits <= stats.binom.isf(0.5e-6, trials, 0.5)
            assert exact == 0
            corr = stats.pearsonr([float(abs(s)) for s in recovered], [float(abs(t)) for t in truth])[0]
            assert abs(corr) < Z / np.sqrt(n)


# -- the transcript -------------------------------------------------------------------------------------


def test_the_transcript_labels_payloads_by_what_they_are(dgk):
    rng = np.random.default_rng(5)
    W, w = integer_model(rng, 16, 40)
    server, keys, weights, wire = setup(w, dgk)
    query(server, keys, weights, wire, np.array([1, 2, 3]))
    log = [(m.sender, m.kind, m.payload, m.count) for m in wire.channel.log]
    assert log == [
        ("server", "public-keys", "public", 9),
        ("server", "encrypted-weights", "ciphertext", 16),
        ("client", "masked-score", "ciphertext", 1),
        ("server", "comparison-bits", "ciphertext", ELL),
        ("client", "comparison-terms", "ciphertext", ELL + 1),
        ("server", "masked-result", "plaintext", 1),
    ]
    assert [m.bytes for m in wire.channel.log] == [len(data) for _, _, data in wire.sent]
    # a client that sent its score in the clear, or a DGK bit sent unencrypted, is labelled plaintext
    n2 = server.public_key.nsquare
    assert wire.inspect(K.pack_ints(b"P", [int(W[1] + W[2] + W[3]) % n2], 128)) == ("plaintext", 1)
    assert wire.inspect(K.pack_ints(b"D", [1, int(dgk.public.g)] * 3, 64))[0] == "plaintext"
    assert wire.inspect(K.pack_ints(b"D", [int(dgk.public.g)], 64))[0] == "plaintext"  # unrandomized: g^1


# -- the server's kept state and the errors --------------------------------------------------------------


def test_the_server_state_is_made_once_per_model_and_kept_private(tmp_path, test_mode):
    w = np.array([0.5, -0.25, 1.0])
    server, keys, weights = S.service(tmp_path, w, 512)
    state = tmp_path / "classifier" / "server.json"
    assert stat.S_IMODE(state.stat().st_mode) == 0o600 and stat.S_IMODE(state.parent.stat().st_mode) == 0o700
    again, keys2, weights2 = S.service(tmp_path, w, 512)
    assert (keys2, weights2) == (keys, weights) and again.state() == server.state()
    _, keys3, _ = S.service(tmp_path, w * 2, 512)  # a new model: new keys and E[w]
    assert keys3 != keys and stat.S_IMODE(state.stat().st_mode) == 0o600


def test_errors_say_what_to_change(dgk, monkeypatch):
    with pytest.raises(ParameterError, match="weights sum to more than 2\\^24 in magnitude; .* smaller learning rate"):
        K.ClassifyServer(np.full(4, 2.0**23), dgk.p, dgk.q, dgk)
    server, keys, weights, _ = setup(np.array([1.0, -1.0]), dgk)
    wrong = json.loads(keys[1:])
    wrong["kappa"] = 40
    with pytest.raises(ParameterError, match="other classification parameters than this client implements"):
        K.ClassifyClient(K.pack_json(wrong), weights)
    big = server.public_key.encrypt(1 << (ELL + KAPPA + 2), "tampered")
    with pytest.raises(ParameterError, match="masked score is out of range: the client must use the published"):
        server.comparison_bits(K.pack_ints(b"P", [big], server.public_key.ciphertext_bytes))
    with pytest.raises(ParameterError, match=f"the comparison needs {ELL + 1} terms: the client must use the published ones"):
        server.masked_result(K.pack_ints(b"D", [2] * ELL, 64))
    monkeypatch.delenv("PRIVRELEASE_TEST_MODE", raising=False)
    with pytest.raises(ParameterError, match="at least 2048 bits outside test mode; train the run with key_bits: 2048 or more"):
        K.ClassifyServer.generate(np.zeros(2), 1024)
    with pytest.raises(ParameterError, match="DGK keys need at least 2048 bits and t = 224 outside test mode"):
        C.DGKKey.generate(1024, 224)


def test_the_server_party_runs_in_its_own_process(tmp_path, test_mode):
    """The classification server reads its model and makes its keys in a spawned process: the client's
    process holds only the pipe and the public bytes, and still gets the sign."""
    import os

    from privrelease.core.spam.parties import Remote

    w = np.zeros(16)
    w[[2, 5]] = [0.75, -0.25]
    np.save(tmp_path / "model.npy", w)
    (tmp_path / "report.json").write_text(json.dumps({"decision": {"cutoff_units": int(0.6 * ONE)}}))  # the run's cutoff
    server = Remote("server", S.ServerParty, tmp_path, 512)
    try:
        assert server._process.pid != os.getpid() and not hasattr(server, "party")
        assert server.call("left") == (16, 16)
        assert [server.call("make", 10), server.call("make", 10), server.call("make", 10)] == [6, 0, 0]
        keys, weights = server.call("publication")
        wire = K.Wire(Channel())
        client = K.ClassifyClient(
            wire.send("server", "client", "public-keys", keys), wire.send("server", "client", "encrypted-weights", weights)
        )
        assert K.classify(server, client, wire, np.array([2])) == "spam"  # 0.75 > 0.6
        assert K.classify(server, client, wire, np.array([2, 5])) == "ham"  # 0.75 - 0.25 > 0, but not > 0.6
        assert K.classify(server, client, wire, np.array([5])) == "ham"
    finally:
        server.close()
    assert oct((tmp_path / "classifier" / "server.json").stat().st_mode & 0o777) == "0o600"


# -- the cutoff: chosen on the evaluation mail ------------------------------------------------------------

COUNTS = ("true_positives", "false_positives", "false_negatives", "true_negatives")


def test_the_cutoff_is_the_least_that_meets_the_false_positive_target():
    rng = np.random.default_rng(4)
    for _ in range(200):
        n = int(rng.integers(1, 60))
        values = [int(v) for v in rng.integers(-20, 20, n)]  # ties on purpose
        labels = rng.choice([-1, 1], n)
        if not (labels < 0).any():
            continue
        target = float(rng.choice([0.0, 0.01, 0.1, 0.25, 0.5, 0.99]))
        t = D.cutoff(values, labels, target)
        ham = np.array(values)[labels < 0]
        assert (ham > t).sum() <= np.floor(target * len(ham) + 1e-9)  # meets the target
        assert (ham > t - 1).sum() > np.floor(target * len(ham) + 1e-9)  # one lower would not
        figures = D.confusion(values, labels, t)
        assert figures["false_positives"] == (ham > t).sum() and sum(figures[k] for k in COUNTS) == n
    with pytest.raises(ValueError, match="no ham"):
        D.cutoff([1, 2], np.array([1, 1]), 0.01)


def test_decide_on_mail_where_the_sign_calls_everything_ham():
    """Issue #42: every score negative (AUC high), so the sign flags nothing; the chosen cutoff flags the
    spam at a false-positive rate within the target, and says what the sign would have given."""
    w = np.ldexp(np.array([-4.0, -1.0, -3.0, -2.0]), -10)
    messages = [np.array([0]), np.array([0, 2]), np.array([0, 3])] * 30 + [np.array([1]), np.array([3])] * 20
    labels = np.array([-1, -1, -1] * 30 + [1, 1] * 20)
    got = D.decide(w, messages, labels, 0.01)
    assert got["at_sign"]["true_positives"] == 0 and got["at_sign"]["false_positives"] == 0
    assert got["recall"] == 1.0 and got["false_positives"] == 0 and got["precision"] == 1.0
    assert got["cutoff_units"] == D.scores(w, [np.array([0])])[0] and got["cutoff"] == -4 / 1024
    assert (got["true_positives"], got["false_negatives"], got["true_negatives"]) == (40, 0, 90)


def test_the_key_holders_r_to_the_n_is_r_to_the_n(dgk):
    """E[W]'s randomizer: r^n mod p² from two short exponentiations equals r^n mod p² (so E[W_j] is as random
    as before); and the ciphertexts decrypt to the weights."""
    from phe import paillier

    _, secret = paillier.generate_paillier_keypair(n_length=512)
    p, q = gmpy2.mpz(secret.p), gmpy2.mpz(secret.q)
    n = p * q
    for r in [1, 2, int(p) + 1, int(n) - 1, *(int(v) for v in np.random.default_rng(5).integers(1, 2**62, 20))]:
        assert K.nth_power(r, p, q) == gmpy2.powmod(r, n, p * p) and K.nth_power(r, q, p) == gmpy2.powmod(r, n, q * q)
    w = np.array([0.5, -0.25, 1.0])
    server = K.ClassifyServer(w, p, q, dgk)
    decrypted = [int(server._secret.raw_decrypt(c)) for c in server.encrypt_weights(0, 3)]
    assert [d - int(n) if d > n // 2 else d for d in decrypted] == [int(v) for v in np.ldexp(w, K.SCALE_BITS)]
