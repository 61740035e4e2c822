"""attack10: what the dp: padding does not make independent of the mail, and what a non-dp run still
publishes about it.

1. With dp: every message is padded to max_features indices, but step 2's per-message product
   E[2y_i·C_w]·E[C_w·wᵀx_i]^(−1) multiplies by ``key.trivial(2y_i·C_w)``, whose size follows the
   label: 1 + n·2^49 (≈ |n| + 50 bits) for spam, 1 + n·(n − 2^49) (≈ 2|n| bits) for ham. A spam
   message's multiplication is cheaper (2048-bit key, this machine: ≈ 3.6 µs against ≈ 6.5 µs), so a
   user's round time still follows how many of its block's messages are spam.
2. Without dp: the server stopped the run when the model's L1 norm passed the public 2^L1_BITS; whether
   and in which round that happens is a function of the mail, and the flow recorded it in the ledger
   (FAILED, the reason's text, the rounds completed) and in Prefect's log and task states. Fixed by
   clamping w just inside the bound instead (``protocol.clamp_l1``).
"""

from __future__ import annotations

import json

import gmpy2
import numpy as np
import pytest

from privrelease.core.errors import ParameterError
from privrelease.core.release.charged import failure
from privrelease.core.spam import dp
from privrelease.core.spam import parties as Q
from privrelease.core.spam import protocol as P
from privrelease.core.spam import wire as W
from tests.spam.test_spam_dropout import mail


class Operand:
    """Stands for E[C_w·wᵀx_i]^(−1) in step 2 and records the size of what it is multiplied with."""

    def __init__(self, value, seen):
        self.value, self.seen = value, seen

    def __rmul__(self, other):
        self.seen.append(int(other).bit_length())
        return other * self.value


class Watched(P.User):
    """An honest user whose step-2 per-message multiplications are observed (as their time would be)."""

    seen: list[int]

    def gradient(self, weights: bytes, round_: int) -> bytes:
        self.seen = []
        invert = gmpy2.invert
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(P.gmpy2, "invert", lambda c, m: Operand(invert(c, m), self.seen))
            return super().gradient(weights, round_)


def test_with_dp_a_message_costs_the_same_whatever_its_label(test_mode):
    users, t = 3, 2
    calibrated = dp.calibrate(dp.DPParams(epsilon=1, delta=1e-6, colluders=0, max_features=12), users, 1, threshold=t)
    data = mail(users, 6, seed=11)
    data[0] = (data[0][0], np.array([1, 1, 1, -1, -1, -1]))  # three spam, three ham
    server = P.Server(512, np.zeros(40), 0.01, threshold=t, share_variance=calibrated.share_variance)
    members = [Watched(f"user-{k + 1}", x, y, noise=calibrated.share(0)) for k, (x, y) in enumerate(data)]
    channel = W.Channel()
    Q.setup(Q.Local(server), [Q.Local(u) for u in members], channel)
    Q.train_round(Q.Local(server), [Q.Local(u) for u in members], channel, 0)
    sizes = members[0].seen
    assert len(sizes) == 6  # one multiplication per message of the block
    full = server.public_key.nsquare.bit_length()
    # before the fix: spam [~563, ~563, ~563], ham [~1024, ~1024, ~1024] bits at a 512-bit key
    assert max(sizes) - min(sizes) < 64 and min(sizes) > full - 64, sizes


def _run(data, rounds, eta):
    server = P.Server(512, np.zeros(40), eta, threshold=2)
    members = [P.User(f"user-{k + 1}", x, y) for k, (x, y) in enumerate(data)]
    channel = W.Channel()
    Q.setup(Q.Local(server), [Q.Local(u) for u in members], channel)
    active = [Q.Local(u) for u in members]
    for r in range(rounds):
        try:
            _, _, active = Q.train_round(Q.Local(server), active, channel, r)
        except ParameterError as exc:
            return r, failure(exc), server.w
    return rounds, None, server.w


def test_without_dp_whether_and_when_the_model_diverges_is_not_published(test_mode):
    """Two corpora with the same public counts (3 users × 6 messages), the same spec (η, rounds).
    Before the fix the long one's run failed in round 4 (index 3) on the public L1 bound
    (``ParameterError: the model's L1 norm passed the public bound``, a UserError: its text and the
    rounds done went to the ledger's FAILED entry) and the short one's was PUBLISHED, which told the
    two corpora apart. Now the server clamps w just inside the bound (``protocol.clamp_l1``) and both
    complete; the clamp shows only in the model, which stays in the run folder."""
    short = [([np.array([k % 40]) for k in range(6 * u, 6 * u + 6)], np.array([1, -1] * 3)) for u in range(3)]
    long = [([np.arange(40) for _ in range(6)], np.ones(6, dtype=int)) for _ in range(3)]
    done_short, failed_short, w_short = _run(short, 5, 0.5)
    done_long, failed_long, w_long = _run(long, 5, 0.5)
    assert (done_short, failed_short) == (5, None)
    assert (done_long, failed_long) == (5, None), (
        failed_long
    )  # before the fix: (3, {"reason": "ParameterError: ... L1 norm ..."})
    assert 2**20 * (1 - 2**-19) < np.abs(w_long).sum() < 2**20 and np.abs(w_short).sum() < 2**20
    assert np.abs(P.clamp_l1(np.full(4, 2.0**19))).sum() < 2**20  # and a model already inside is left as it is:
    assert np.array_equal(P.clamp_l1(np.full(4, 1.0)), np.full(4, 1.0))


def test_without_dp_the_withheld_auc_is_not_readable_by_others_in_the_run_folder(prefect_server, home, test_mode, capsys):
    """3. Without dp: the AUC is withheld from the ledger, log and artifact, but report.json, report.md
    and roc.png (its legend) carry it, written with the process umask (0644 under 022) in a folder
    created 0755: anyone who can list $PRIVRELEASE_HOME/spam reads it, while model.npy is 0600.
    Fix: the run folder is staged 0700 (owner, the server's operator, only)."""
    import os
    import stat

    from tests.flows.test_release_flow import cli
    from tests.system.test_spam_flow import corpus, spec

    old = os.umask(0o022)
    try:
        corpus(home / "data" / "mail", capsys)
        code, _, err = cli(capsys, "spam", "train", spec(home / "data" / "mail", rounds=1))
    finally:
        os.umask(old)
    assert code == 0, err
    folder = home / "spam" / "r1"
    report = json.loads((folder / "report.json").read_text())
    assert report["dp"] is None and f"{report['auc_private']:.6f}" in (folder / "report.md").read_text()
    # before the fix: 0o755 (and report.json 0o644)
    assert stat.S_IMODE(folder.stat().st_mode) & 0o077 == 0, oct(folder.stat().st_mode)
