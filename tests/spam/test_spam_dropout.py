"""A party may leave (issue 27): Bonawitz et al.'s double masking with Shamir-shared seeds.

Our use of the shares (any t rebuild a user's mask secret, t − 1 do not; the rebuilt masks cancel
exactly), the server's sum after users leave against the plaintext rule (exactly, in integers),
every refusal of a user, and the attack a user's refusal stops: a server that claims a user left
after receiving its message and asks for both kinds of shares. Killing party processes: the flow
test (tests/system/test_spam_flow.py)."""

from __future__ import annotations

import itertools
import threading

import gmpy2
import numpy as np
import pytest
from pydantic import ValidationError

from privrelease.core.errors import ParameterError
from privrelease.core.spam import dp
from privrelease.core.spam import dropout as R
from privrelease.core.spam import parties as Q
from privrelease.core.spam import protocol as P
from privrelease.core.spam import wire as W
from privrelease.core.spam.aggregation import W_BITS, Agreement, new_seed, self_mask
from privrelease.core.spam.spec import SpamSpec

D = 40


def mail(users: int, per_user: int, seed: int) -> list[tuple[list[np.ndarray], np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        ([np.unique(rng.integers(0, D, rng.integers(2, 9))) for _ in range(per_user)], rng.choice([-1, 1], per_user))
        for _ in range(users)
    ]


def exact(x: list[np.ndarray], y: np.ndarray, w: np.ndarray) -> list[int]:
    """A user's gradient slots 4·C_w·g_j in integers, at the server's w rounded to the grid (the plaintext rule)."""
    w_int = np.rint(np.ldexp(w, W_BITS)).astype(np.int64)
    out = [0] * D
    for xi, yi in zip(x, y):
        t = (int(yi) << (W_BITS + 1)) - int(w_int[xi].sum())
        for j in xi.tolist():
            out[j] += t
    return out


class Leaver(Q.Local):
    """A user that leaves when asked ``method`` in round ``at`` (its process would be gone: ``Dropped``)."""

    def __init__(self, party, method: str, at: int):
        super().__init__(party)
        self.leave, self.gone = (method, at), False

    def send(self, method: str, *args) -> None:
        self.gone = self.gone or (method, self.party._holder.round) == self.leave
        if self.gone:
            raise Q.Dropped(f"{self.name} left")
        super().send(method, *args)


def started(users: int, threshold: int, seed: int = 1, user_class=P.User):
    data = mail(users, 6, seed)
    server = P.Server(512, np.random.default_rng(seed).normal(0, 0.05, D), 0.01, threshold=threshold)
    members = [user_class(f"user-{k + 1}", x, y) for k, (x, y) in enumerate(data)]
    channel = W.Channel()
    Q.setup(Q.Local(server), [Q.Local(u) for u in members], channel)
    return server, members, data, channel


def test_any_t_shares_rebuild_a_mask_secret_and_the_rebuilt_masks_cancel_exactly():
    n = int(gmpy2.next_prime(2**511))
    users, t = 5, 3
    members = [Agreement() for _ in range(users)]
    keys = [a.public_key() for a in members]
    for k, a in enumerate(members):
        a.agree(k, keys, b"run")
    shares = [R.split(a.seed, t, users) for a in members]
    for subset in itertools.combinations(range(users), t):  # any t shares rebuild the seed, hence the key
        assert all(Agreement(R.combine([s[i] for i in subset], t, "s")).public_key() == keys[u] for u, s in enumerate(shares))
    for subset in itertools.combinations(range(users), t - 1):  # t − 1 do not (and are refused as such)
        with pytest.raises(ParameterError, match="only 2 shares of s came back, fewer than the threshold 3"):
            R.combine([shares[0][i] for i in subset], t, "s")
        assert Shamir_guess(shares[0], subset) != members[0].seed
    for survivors in ([0, 1, 3], [1, 2, 3, 4], [0, 2, 4]):
        left = [u for u in range(users) if u not in survivors]
        for round_ in (0, 7):
            total = [0] * 4
            for v in survivors:  # each survivor masked toward every participant of the round
                total = [a + b for a, b in zip(total, members[v].mask(n, round_, 4))]
            for u in left:  # the server's part: the left user's masks toward the survivors, rebuilt from t shares
                rebuilt = Agreement(R.combine([shares[u][i] for i in survivors[:t]], t, "s"))
                rebuilt.agree(u, keys, b"run")
                total = [a + b for a, b in zip(total, rebuilt.mask(n, round_, 4, among=survivors))]
            assert [v % n for v in total] == [0, 0, 0, 0]
    seed = new_seed()  # self-masks: fresh per seed and round, uniform-looking, rebuilt from any t shares
    assert self_mask(seed, 0, n, 3) != self_mask(seed, 1, n, 3) != self_mask(new_seed(), 1, n, 3)
    assert self_mask(R.combine(R.split(seed, t, users)[2:], t, "b"), 1, n, 3) == self_mask(seed, 1, n, 3)


def Shamir_guess(shares: list[tuple[int, bytes]], subset: tuple[int, ...]) -> bytes:
    """What t − 1 shares give when forced through the library's interpolation: a wrong secret."""
    from Crypto.Protocol.SecretSharing import Shamir

    return Shamir.combine([shares[i] for i in subset])


def test_after_users_leave_the_server_decrypts_exactly_the_survivors_sum(test_mode):
    """Four users, threshold 2. Round 0: everyone. Round 1: user-3 leaves after sharing its self-mask
    seed, before its gradient (its mask secret is rebuilt). Round 2: user-3 is out; user-1 leaves
    after its gradient, before returning shares (a survivor, its self-mask rebuilt from the others').
    Round 3: user-1 is out too. Each round the server's decrypted sum is the survivors' gradient
    sum at its model, exactly, in integers."""
    server, members, data, channel = started(4, 2)
    s = Q.Local(server)
    active = [Leaver(members[0], "unmask", 2), Q.Local(members[1]), Leaver(members[2], "gradient", 1), Q.Local(members[3])]
    expected_survivors = [
        ["user-1", "user-2", "user-3", "user-4"],
        ["user-1", "user-2", "user-4"],
        ["user-1", "user-2", "user-4"],
        ["user-2", "user-4"],
    ]
    for round_, names in enumerate(expected_survivors):
        w = server.w.copy()
        _, _, active = Q.train_round(s, active, channel, round_)
        assert [u.name for u in active] == names
        truth = [sum(col) for col in zip(*(exact(*data[int(n[-1]) - 1], w) for n in names))]
        assert server.sums == truth
        assert server._round["left"] == [[], ["user-3"], [], ["user-1"]][round_]  # whose mask secret was asked for


def test_the_users_refuse_what_would_unmask_one_of_them(test_mode):
    server, members, _, _ = started(3, 2)
    user = members[0]
    with pytest.raises(ParameterError, match="round 0 names 1 participants, fewer than the threshold 2; refusing"):
        user.begin(W.public_message({"round": 0, "participants": ["user-1"]}))
    user.begin(W.public_message({"round": 0, "participants": ["user-1", "user-2", "user-3"]}))
    ask = lambda **kinds: W.public_message({"round": 0, "self": [], "secret": [], **kinds})  # noqa: E731
    with pytest.raises(ParameterError, match="asks for both the self-mask share and the mask secret share of user-2"):
        user.unmask(ask(self=["user-1", "user-2", "user-3"], secret=["user-2"]))
    with pytest.raises(ParameterError, match="names 1 survivors, fewer than the threshold 2: their sum would not be protected"):
        user.unmask(ask(self=["user-1"], secret=["user-2", "user-3"]))
    with pytest.raises(ParameterError, match="the unmask request is for round 4, but this user's current round is 0"):
        user.unmask(W.public_message({"round": 4, "self": ["user-1", "user-2"], "secret": []}))
    with pytest.raises(ParameterError, match="says this user left, but it is answering; it never reveals a share of its own"):
        user.unmask(ask(self=["user-2", "user-3"], secret=["user-1"]))  # a malicious server collecting user-1's secret
    assert set(R.read_shares(user.unmask(ask(self=["user-1", "user-3"], secret=["user-2"])))) == {"self", "secret", "keys"}
    with pytest.raises(ParameterError, match="asks for both the self-mask share and the mask secret share of user-2"):
        user.unmask(ask(self=["user-1", "user-2", "user-3"]))  # the other kind, in a second request of the round
    with pytest.raises(ParameterError, match="round 1 names user-2, which was not among the last round's participants"):
        user.begin(W.public_message({"round": 1, "participants": ["user-1", "user-2", "user-3"]}))
    with pytest.raises(ParameterError, match="each round number is used once"):
        user.begin(W.public_message({"round": 0, "participants": ["user-1", "user-3"]}))
    # a relayed share opens only for its recipient, its kind and its round
    sealed = members[1].begin(server.round_message(0))
    mine = R.relay([sealed], 3)[0]
    with pytest.raises(ParameterError, match="a relayed self share of round 1 does not authenticate"):
        user._sealer.open(R.SELF, 1, mine)
    with pytest.raises(ParameterError, match="addressed to another user"):
        user._sealer.open(R.SELF, 0, R.relay([sealed], 3)[2])


def test_the_threshold_is_public_checked_and_carries_the_dp_calibration(test_mode):
    with pytest.raises(ParameterError, match="threshold is 1, but it must lie between 2 and the number of users"):
        P.Server(512, np.zeros(3), threshold=1).directory(
            *(P.User(f"u{k}", [np.array([0])], np.array([1])).announce() for k in range(3))
        )
    with pytest.raises(ValidationError, match="threshold is 4, but the spec lists 3 users"):
        SpamSpec(run_id="r", users=["a", "b", "c"], test="t", key_bits=2048, threshold=4)
    with pytest.raises(ValidationError, match="threshold\n  Input should be greater than or equal to 2"):
        SpamSpec(run_id="r", users=["a", "b", "c"], test="t", threshold=1)
    assert [SpamSpec(run_id="r", users=list("abcde"[:k]), test="t").quorum for k in (2, 3, 4, 5)] == [2, 2, 3, 3]
    server = P.Server(512, np.zeros(3), threshold=3)
    users = [P.User(f"user-{k + 1}", [np.array([0])] * 2, np.array([1, -1]), threshold=2) for k in range(3)]
    directory = server.directory(*(u.announce() for u in users))
    with pytest.raises(ParameterError, match="the server's threshold 3 is not the spec's 2; refusing to take part"):
        users[0].setup(directory)
    params = dp.DPParams(epsilon=1, delta=1e-6, colluders=2)
    with pytest.raises(ParameterError, match="colluders is 2, but a round may complete with only the threshold of 2 users"):
        dp.calibrate(params, 5, 1, threshold=2)
    full, quorum = dp.calibrate(params, 5, 1), dp.calibrate(params, 5, 1, threshold=3)
    assert (full.honest, quorum.honest) == (3, 1) and quorum.sigma >= full.sigma * (
        1 - 1e-9
    )  # same total noise, from fewer users
    assert quorum.share_variance >= 3 * full.share_variance - 3


class Generous(P.User):
    """Weakened: hands out whatever shares it is asked for, both kinds for the same user included."""

    def unmask(self, request: bytes) -> bytes:
        doc = W.read_public(request, "r")
        survivors = [n for n in doc[R.SELF] if n not in doc[R.SECRET]]
        first = self._holder.reveal({**doc, R.SECRET: []})  # every self-mask share asked for
        self._holder.given = {}  # ... forgetting what it gave
        return R.shares_message(
            {R.SELF: first[R.SELF], R.KEYS: first[R.KEYS], R.SECRET: self._holder.reveal({**doc, R.SELF: survivors})[R.SECRET]}
        )


@pytest.mark.parametrize("weakened", [False, True])
def test_a_server_claiming_a_user_left_after_its_message_learns_nothing(test_mode, weakened):
    """The server receives all three users' messages, then claims user-2 left and asks for user-2's
    self-mask share and its mask-secret share. Honest users refuse; generous ones hand it user-2's
    exact gradient (its ciphertext decrypted alone, its self-mask and pairwise masks removed)."""
    server, members, data, channel = started(3, 2, seed=3, user_class=Generous if weakened else P.User)
    names = [u.name for u in members]
    w = server.w.copy()
    relayed = server.relay(*(u.begin(server.round_message(0)) for u in members))
    for u in members:
        u.hold(relayed[u.name])
    weights = server.weights_message()
    messages = {u.name: u.gradient(weights, 0) for u in members}
    request = W.public_message({"round": 0, "self": names, "secret": ["user-2"]})
    if not weakened:
        for u in members:  # user-2 itself is answering, so it knows it did not leave
            said = "says this user left, but it is answering" if u.name == "user-2" else "asks for both the self-mask share"
            with pytest.raises(ParameterError, match=said):
                u.unmask(request)
        return
    replies = [R.read_shares(u.unmask(request)) for u in members if u.name != "user-2"]  # t = 2 of them suffice
    victim = 1
    b = R.combine(R.gather(replies, names, R.SELF)[victim], 2, "b")
    agreement = Agreement(R.combine(R.gather(replies, names, R.SECRET)[victim], 2, "s"))
    key, layout = server.public_key, server.layout
    context = key.n.to_bytes(key.bits // 8 + 1, "big")
    agreement.agree_with(victim, {names.index(k): bytes.fromhex(v) for k, v in replies[0][R.KEYS].items()}, context)
    masks = [
        (a + c) % key.n for a, c in zip(agreement.mask(key.n, 0, layout.ciphertexts), self_mask(b, 0, key.n, layout.ciphertexts))
    ]
    alone = [int(server._keys.raw_decrypt(c)) for c in W.read_ciphertexts(messages["user-2"], key, layout.ciphertexts, "x")]
    assert layout.unpack([(v - m) % key.n for v, m in zip(alone, masks)], 1) == exact(*data[victim], w)


def test_a_party_that_does_not_answer_in_time_has_left_for_good():
    party = Q.Remote("user-9", threading.Event)  # a party whose wait(600) hangs for ten minutes
    party.timeout = 1.0  # public and configurable (the spec's timeout); set after the party is built
    try:
        with pytest.raises(Q.Dropped, match="the user-9 process did not answer within 1 s"):
            party.call("wait", 600)
        with pytest.raises(Q.Dropped, match="the user-9 process is gone"):  # killed: it cannot come back mid-run
            party.call("is_set")
    finally:
        party.close()


def test_malformed_or_misdirected_shares_and_lists_are_refused(test_mode):
    server, members, _, _ = started(3, 2)
    user, names = members[0], ["user-1", "user-2", "user-3"]
    for participants, reason in (
        (["user-1", "user-1", "user-2"], "round 0 names unknown or repeated users"),
        (["user-1", "mallory"], "round 0 names unknown or repeated users"),
        (["user-2", "user-3"], "round 0 does not name this user"),
    ):
        with pytest.raises(ParameterError, match=reason):
            user.begin(W.public_message({"round": 0, "participants": participants}))
    bundles = [u.begin(server.round_message(0)) for u in members]
    holder = R.Holder(0, names, 2)
    holder.begin(0, ["user-1", "user-2"])
    with pytest.raises(ParameterError, match="names user-3, not a participant of round 0"):
        holder.reveal({"round": 0, "self": ["user-1", "user-2"], "secret": ["user-3"]})
    for bad, reason in ((b"S" + bytes(R.RECORD - 1), "expected sealed shares"), (b"J{}", "expected sealed shares")):
        with pytest.raises(ParameterError, match=reason):
            R.records(bad)
    with pytest.raises(ParameterError, match="a sealed share names no user of the directory"):
        R.relay(bundles[:1], 1)  # user-1's shares for user-2 and user-3, in a directory of one
    with pytest.raises(ParameterError, match="expected mask shares"):
        R.read_shares(W.public_message({}))
    with pytest.raises(ParameterError, match="every user's sealing key once"):
        R.Sealer().agree(0, [R.Sealer().public_key()] * 2, b"run")


def test_shares_that_do_not_rebuild_a_left_users_key_void_the_round(test_mode):
    server, members, _, channel = started(3, 2)
    relayed = server.relay(*(u.begin(server.round_message(0)) for u in members))
    for u in members:
        u.hold(relayed[u.name])
    weights = server.weights_message()
    request = server.unmask_request({u.name: u.gradient(weights, 0) for u in members[:2]})
    replies = [R.read_shares(u.unmask(request)) for u in members[:2]]
    for reply in replies:  # a share altered in transit (or by a faulty user)
        x, share = reply["secret"]["user-3"]
        reply["secret"]["user-3"] = [x, bytes(16).hex() if x == 1 else share]
    with pytest.raises(
        ParameterError, match="the shares of user-3's mask secret do not rebuild its announced key; the round is void"
    ):
        server.aggregate(*(R.shares_message(r) for r in replies))
