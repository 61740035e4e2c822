"""The steward's terms for the users' mail and the approval of spam training (third privacy review,
findings 2, 3a and 6): a run without dp: on mail under a DP cap, a trust assumption set by the party
it protects against, and a dp: run that never asked a steward. Each attack succeeds on a weakened
variant without the check, so each test can fail."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from privrelease.core.datasets.demo import mail
from privrelease.core.errors import SpecError
from privrelease.core.ledger.ledger import CAP, RESERVED, Ledger
from privrelease.core.release.home import Home
from privrelease.core.release.spam_run import SpamJob
from privrelease.core.spam import terms
from privrelease.core.spam.training import load_user
from tests.cli.test_cli import EXE, REPO, run
from tests.flows.test_release_flow import cli
from tests.system.test_spam_flow import corpus, spec


def _corpus(folder: Path, capsys, seed: int) -> None:
    """Another corpus (``seed``) split among three users, as ``tests.system.test_spam_flow.corpus`` does."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "all.jsonl").write_text("".join(json.dumps(m) + "\n" for m in mail(240, seed)))
    assert cli(capsys, "spam", "split", str(folder / "all.jsonl"), "--out", str(folder), "--users", "3")[0] == 0


def _spec(folder: Path, **changes) -> str:
    return spec(folder, **changes).replace("mail/", f"{folder.name}/")


DP = {"epsilon": 2.0, "delta": 1e-6, "colluders": 1, "max_features": 100, "radius": 1.0}


def _weaken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Weakened: the run as before the review, with no terms of the steward's to meet."""
    monkeypatch.setattr(terms, "check", lambda *args, **kwargs: None)


@pytest.mark.parametrize("weakened", [False, True])
def test_finding_2_a_run_without_dp_on_mail_under_a_dp_cap_is_refused(home, test_mode, capsys, monkeypatch, weakened):
    """With a cap on spam-mail, the operator's run without dp: (exact round sums) is refused before anything
    is recorded, saying what to change; weakened, it is accepted as an mpc run of the same users' mail."""
    corpus(home / "data" / "mail", capsys)
    assert cli(capsys, "ledger", "set-budget", "spam-mail", "--epsilon", "8", "--delta", "1e-5")[0] == 0
    source = spec(home / "data" / "mail", run_id="exact")
    if weakened:
        _weaken(monkeypatch)
        assert SpamJob(source).check(Home(home)).dataset == "spam-filter"  # would decrypt exact sums
        return
    with pytest.raises(SpecError, match="the users' mail is under a DP cap"):
        SpamJob(source).check(Home(home))
    code, _, err = cli(capsys, "spam", "train", source)
    assert code == 2 and "add dp: to the spec, or ask the data steward to allow exact runs" in err
    assert [e.status for e in Ledger(home / "privrelease.duckdb").entries()] == [CAP]


def test_finding_2_exact_runs_the_steward_allows_never_read_mail_a_dp_run_read(prefect_server, home, test_mode, capsys):
    """--allow-exact-runs: a run without dp: may read other mail, never a message a dp: run read, however
    the file is changed: named again, copied, reordered, reformatted, split between users (runs are bound to
    the keyed digests of the messages they read). On other mail it runs to the end: no party refuses it."""
    folder = home / "data" / "mail"
    corpus(folder, capsys)
    r = cli(capsys, "ledger", "set-budget", "spam-mail", "--epsilon", "8", "--delta", "1e-5", "--allow-exact-runs")
    assert r[0] == 0 and "runs without dp: allowed on mail no dp: run has read" in r[1]
    code, _, err = cli(capsys, "spam", "train", spec(folder, run_id="r-dp", rounds=1, dp=DP))
    assert code == 0, err
    (charge,) = [e for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id == "r-dp" and e.status == RESERVED]
    assert "mail" not in json.loads(charge.params)  # nothing of the mail on the ledger: the binding is the operator's index
    assert (home / terms.INDEX).stat().st_mode & 0o777 == 0o600
    with pytest.raises(SpecError, match="messages of this spec's users were read by a dp: run"):
        SpamJob(spec(folder, run_id="again")).check(Home(home))
    changed = home / "data" / "changed"
    changed.mkdir()
    lines = [(folder / f"user-{k}.jsonl").read_text().splitlines() for k in (1, 2, 3)]
    (changed / "user-1.jsonl").write_text("\n".join(reversed(lines[0])) + "\n\n")  # reordered, a blank line
    (changed / "user-2.jsonl").write_text(
        "".join(json.dumps(dict(reversed(json.loads(x).items()))) + "\n" for x in lines[1][1:])
    )  # keys reordered, one message left out
    half = len(lines[2]) // 2
    (changed / "user-3.jsonl").write_text("\n".join(lines[2][:half]) + "\n")  # split between two users
    (changed / "user-4.jsonl").write_text("\n".join(lines[2][half:]) + "\n")
    shutil.copyfile(folder / "test.jsonl", changed / "test.jsonl")
    for users in (["user-1.jsonl", "user-4.jsonl"], ["user-2.jsonl", "user-4.jsonl"], ["user-3.jsonl", "user-4.jsonl"]):
        with pytest.raises(SpecError, match="were read by a dp: run"):
            SpamJob(_spec(changed, run_id="changed", users=users)).check(Home(home))
    fresh = home / "data" / "fresh"
    _corpus(fresh, capsys, seed=6)
    code, _, err = cli(capsys, "spam", "train", _spec(fresh, run_id="fresh", rounds=1))
    assert code == 0, err  # every user's party takes part: its mail is not the capped one


def test_finding_2_a_dp_run_never_reads_mail_an_exact_run_decrypted(home, test_mode, capsys):
    """The reviewer's order the other way round: an exact run before any cap, then a cap and a dp: run on the
    same mail, whose sums the server already decrypted exactly: refused."""
    folder = home / "data" / "mail"
    corpus(folder, capsys)
    job = SpamJob(spec(folder, run_id="exact"))
    job.check(Home(home))
    job.load(Home(home))  # what an exact run records before its charge
    assert cli(capsys, "ledger", "set-budget", "spam-mail", "--epsilon", "8", "--delta", "1e-5")[0] == 0
    with pytest.raises(SpecError, match="were read by an earlier run without dp:"):
        SpamJob(spec(folder, run_id="later", dp=DP)).check(Home(home))


@pytest.mark.parametrize("weakened", [False, True])
def test_under_dp_a_copied_users_file_is_refused(home, test_mode, capsys, monkeypatch, weakened):
    """A copy of user 1's file listed as a third user (a new inode, one byte changed) sums each of its messages
    twice a round, twice the sensitivity the noise is for (true epsilon about 4, charged 2): refused under dp:,
    whatever the copy's bytes; weakened (each message not checked once), it is accepted."""
    folder = home / "data" / "mail"
    corpus(folder, capsys)
    (folder / "copy.jsonl").write_text((folder / "user-1.jsonl").read_text() + "\n")
    assert cli(capsys, "ledger", "set-budget", "spam-mail", "--epsilon", "8", "--delta", "1e-5")[0] == 0
    source = spec(folder, run_id="copied", dp=DP, users=["user-1.jsonl", "user-2.jsonl", "copy.jsonl"])
    if weakened:
        monkeypatch.setattr(terms, "once", lambda *args: None)
        assert SpamJob(source).check(Home(home)).dataset == "spam-mail"
        return
    with pytest.raises(SpecError, match="holds one message twice \\('user-1.jsonl' and 'copy.jsonl'\\)"):
        SpamJob(source).check(Home(home))
    (folder / "copy.jsonl").write_text((folder / "user-3.jsonl").read_text() + (folder / "test.jsonl").read_text())
    with pytest.raises(SpecError, match="evaluation mail 'test.jsonl' holds messages of the users' mail"):
        SpamJob(source).check(Home(home))


def test_finding_2_each_users_party_refuses_rounds_without_noise(tmp_path, capsys):
    """The user's own process refuses mail under a cap when the run adds no noise, before it reads the mail."""
    root = tmp_path / "data"
    corpus(root, capsys)
    params = {"modulus": 100_000, "reduction": "hash", "dimension": 512, "seed": 0}
    with pytest.raises(SpecError, match="user-1: this user's mail is under a DP cap.*refuses to take part"):
        load_user("user-1", root / "user-1.jsonl", root, params, None, protected=True)
    noise = {"share_variance": 2**40, "max_features": 100, "seed": 0}
    assert load_user("user-1", root / "user-1.jsonl", root, params, None, noise=noise, protected=True).noise == noise
    assert load_user("user-1", root / "user-1.jsonl", root, params, None).noise is None  # no cap: as before


@pytest.mark.parametrize("weakened", [False, True])
def test_finding_6_the_steward_sets_the_trust_assumptions(home, test_mode, capsys, monkeypatch, weakened):
    """Colluders and threshold were the operator's to choose; the steward's floor on each now refuses a spec
    below it (a server colluding with one of two users saw the other's sums at epsilon 1.455 for 1 charged)."""
    folder = home / "data" / "mail"
    corpus(folder, capsys)
    r = cli(capsys, "ledger", "set-budget", "census", "--epsilon", "8", "--delta", "1e-5", "--min-colluders", "1")
    assert r[0] == 2 and "they go with the cap of 'spam-mail', not of 'census'" in r[2]
    for flag, value, said in (
        ("--min-threshold", "1", "--min-threshold is the least users a round completes with, 2 or more; got 1."),
        ("--min-colluders", "-1", "--min-colluders is a number of users, 0 or more; got -1."),
    ):
        r = cli(capsys, "ledger", "set-budget", "spam-mail", "--epsilon", "8", "--delta", "1e-5", flag, value)
        assert r[0] == 2 and r[2] == f"error: {said}\n"
    r = cli(
        capsys,
        "ledger",
        "set-budget",
        "spam-mail",
        "--epsilon",
        "8",
        "--delta",
        "1e-5",
        "--min-colluders",
        "2",
        "--min-threshold",
        "3",
    )
    assert r[0] == 0 and "at least 2 colluding users and a threshold of at least 3 assumed" in r[1]
    few_colluders = {"run_id": "few-colluders", "dp": DP | {"colluders": 1}, "threshold": 3}
    if weakened:
        _weaken(monkeypatch)
        assert SpamJob(spec(folder, **few_colluders)).check(Home(home)).dataset == "spam-mail"
        return
    with pytest.raises(SpecError, match="dp.colluders is 1, but the data steward assumes at least 2 users"):
        SpamJob(spec(folder, **few_colluders)).check(Home(home))
    with pytest.raises(SpecError, match="the spec's threshold is 2, but the data steward requires rounds of at least 3"):
        SpamJob(spec(folder, run_id="low-threshold", dp=DP | {"colluders": 2}, threshold=2)).check(Home(home))
    assert SpamJob(spec(folder, run_id="ok", dp=DP | {"colluders": 2}, threshold=3)).check(Home(home)).dataset == "spam-mail"


def test_finding_3a_a_spam_dp_run_waits_for_the_steward(prefect_server, home, test_mode, capsys):
    """--approve-above on spam-mail: from the command line without a server the run is refused before its
    charge; through Prefect it pauses in the same approval step a release uses, and the steward's yes is
    recorded in the charge."""
    import prefect.settings
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.flow_runs import resume_flow_run

    folder = home / "data" / "mail"
    corpus(folder, capsys)
    assert cli(capsys, "ledger", "set-budget", "spam-mail", "--epsilon", "4", "--delta", "1e-5", "--approve-above", "0.1")[0] == 0
    source = spec(folder, run_id="big", rounds=1, dp=DP)
    r = run(home, "spam", "train", source)
    assert r.returncode == 2 and "this release charges epsilon=2 of the cap's epsilon=4" in r.stderr, r.stderr
    assert [e.status for e in Ledger(home / "privrelease.duckdb").entries()] == [CAP]
    env = {k: v for k, v in os.environ.items()} | {
        "PRIVRELEASE_HOME": str(home),
        "PRIVRELEASE_APPROVAL_TIMEOUT": "240",
        "PREFECT_API_URL": prefect.settings.PREFECT_API_URL.value(),
    }

    def paused_runs(client) -> list:
        return client.read_flow_runs(
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=["PAUSED"])))
        )

    with get_client(sync_client=True) as client:
        before = {f.id for f in paused_runs(client)}
    proc = subprocess.Popen(
        [EXE, "spam", "train", source], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        paused = None
        with get_client(sync_client=True) as client:
            for _ in range(240):
                paused = next((f for f in paused_runs(client) if f.id not in before), None)
                if paused is not None or proc.poll() is not None:
                    break
                time.sleep(0.5)
        assert paused is not None, proc.communicate(timeout=5)
        assert not [e for e in Ledger(home / "privrelease.duckdb").entries() if e.status == RESERVED]  # nothing charged yet
        resume_flow_run(paused.id, run_input={"approve": True, "approved_by": "sam"})
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    (charge,) = [e for e in Ledger(home / "privrelease.duckdb").entries() if e.status == RESERVED]
    record = json.loads(charge.detail)["approval"]
    assert record["approved_by"] == "sam" and record["needed"] and record["share"] == pytest.approx(0.5)
    assert Ledger(home / "privrelease.duckdb").replay() == []


def test_the_index_binds_messages_not_files(tmp_path: Path, capsys):
    corpus(tmp_path / "a", capsys)
    key = b"k" * 32
    (read,) = terms.read([tmp_path / "a" / "user-1.jsonl"], tmp_path, key)
    digests = read.digests  # each message by its text and by its 4-byte sequences
    assert len(digests) == len(set(digests)) == 2 * len((tmp_path / "a" / "user-1.jsonl").read_text().splitlines())
    assert terms.read([tmp_path / "a" / "user-1.jsonl"], tmp_path, b"j" * 32)[0].digests != digests  # keyed
    index = terms.Index(tmp_path / "index.duckdb")
    assert index.crossed(digests, dp=False) == 0  # no index yet
    index.add("r-dp", [(True, digests[:5])])
    assert index.crossed(digests, dp=False) == 5 and index.crossed(digests, dp=True) == 0
    assert (tmp_path / "index.duckdb").stat().st_mode & 0o777 == 0o600


def _twin(text: str, vector) -> str | None:
    """The message with one character more whose feature vector is the same (the second review's F1)."""
    base = vector(text)
    for c in map(chr, range(0x20, 0x7F)):
        if np.array_equal(vector(text + c), base):
            return text + c
    return None


@pytest.mark.parametrize("weakened", [False, True])
def test_under_dp_a_near_duplicate_with_the_same_features_is_one_message(home, test_mode, capsys, monkeypatch, weakened):
    """Second review, F1: a copy of a victim's message with one character appended, where the feature map does
    not look, is another text but the same vector every round sums: under dp: it is the same message by its
    features, and refused; weakened (messages named by their text only) it passes."""
    from privrelease.core.release.spam_run import _features
    from privrelease.core.spam.spec import load_spec

    folder = home / "data" / "mail"
    corpus(folder, capsys)
    assert cli(capsys, "ledger", "set-budget", "spam-mail", "--epsilon", "8", "--delta", "1e-5")[0] == 0
    source = spec(folder, run_id="twin", dp=DP)
    vector = _features(load_spec(source, home / "data")[0])
    lines = (folder / "user-1.jsonl").read_text().splitlines()
    twins = [(doc, _twin(doc["text"], vector)) for doc in map(json.loads, lines)]
    doc, twin = next((d, t) for d, t in twins if t is not None)
    with (folder / "user-2.jsonl").open("a") as fh:
        fh.write(json.dumps({"text": twin, "label": doc["label"]}) + "\n")
    if weakened:
        monkeypatch.setattr("privrelease.core.release.spam_run._features", lambda spec: None)
        assert SpamJob(source).check(Home(home)).dataset == "spam-mail"
        return
    with pytest.raises(SpecError, match="holds one message twice \\('user-1.jsonl' and 'user-2.jsonl'\\)"):
        SpamJob(source).check(Home(home))


def test_a_party_refuses_mail_changed_after_the_check(home, test_mode, capsys):
    """Second review, F2: the users' files were read again by their parties after the charge, so files swapped
    after the check were trained on. Each party now compares the bytes it reads with those checked."""
    folder = home / "data" / "mail"
    corpus(folder, capsys)
    job = SpamJob(spec(folder, run_id="swap"))
    job.check(Home(home))
    inputs = job.inputs
    assert inputs.expected and len(inputs.expected) == 3
    params = inputs.spec.features.model_dump()
    assert load_user("user-1", inputs.users[0], inputs.root, params, None, expected=inputs.expected[0]).noise is None
    (folder / "user-1.jsonl").write_text((folder / "user-2.jsonl").read_text())  # swapped after the check
    with pytest.raises(SpecError, match="mail file 'user-1.jsonl' changed after the run was checked; its party refuses"):
        load_user("user-1", inputs.users[0], inputs.root, params, None, expected=inputs.expected[0])
    assert load_user("user-1", inputs.users[0], inputs.root, params, None).noise is None  # control: without the check


@pytest.mark.parametrize("weakened", [False, True])
def test_the_index_is_claimed_in_one_step_before_the_charge(home, test_mode, capsys, monkeypatch, weakened):
    """Second review, F3: an exact run checked while a dp: run on the same mail waited for approval passed its
    look, and both ran. The look is taken again with the record, under the index's lock, before each charge."""
    folder = home / "data" / "mail"
    corpus(folder, capsys)
    assert cli(capsys, "ledger", "set-budget", "spam-mail", "--epsilon", "8", "--delta", "1e-5", "--allow-exact-runs")[0] == 0
    dp_job = SpamJob(spec(folder, run_id="dp-waits", dp=DP))
    dp_job.check(Home(home))  # ... and it waits for a steward
    exact = SpamJob(spec(folder, run_id="exact-meanwhile"))
    exact.check(Home(home))
    exact.load(Home(home))  # the exact run claims the mail first
    if weakened:
        monkeypatch.setattr(
            terms.Index, "claim", lambda self, run_id, dp, digests, evaluation, again: self.add(run_id, [(dp, digests)])
        )
        dp_job.load(Home(home))  # the look at check time only: both runs read the mail
        return
    with pytest.raises(SpecError, match="found as this run was about to be charged; nothing was charged"):
        dp_job.load(Home(home))


def _same_grams_twin(text: str) -> str | None:
    """Another text with exactly the same 4-byte sequences (so the same message to every feature map, whatever
    its settings): a repeated 3-byte run lets the stretch between its two places be said twice (third review, F1)."""
    for k in range(len(text), 3, -1):
        j = text.find(text[k - 3 : k], 0, k - 1)
        if 0 <= j and j + 3 < k:
            return text[:k] + text[j + 3 : k] + text[k:]
    return None


@pytest.mark.parametrize("weakened", [False, True])
def test_an_exact_run_on_twins_under_other_feature_settings_is_refused(home, test_mode, capsys, monkeypatch, weakened):
    """Third review, F1: the feature digest depends on a run's settings, so an exact run with dimension 511 on
    texts with the same 4-byte sequences as a dp: run's read the same messages unrefused. Every message is
    now also named by its 4-byte sequences, the same under every feature map; weakened without it, it passes."""
    from privrelease.core.spam import features as F

    folder = home / "data" / "mail"
    corpus(folder, capsys)
    assert cli(capsys, "ledger", "set-budget", "spam-mail", "--epsilon", "8", "--delta", "1e-5", "--allow-exact-runs")[0] == 0
    dp_run = SpamJob(spec(folder, run_id="dp", dp=DP))
    dp_run.check(Home(home))
    dp_run.load(Home(home))  # recorded in the index, as before its charge
    twins = home / "data" / "twins"
    twins.mkdir()
    for name in ("user-1.jsonl", "user-2.jsonl", "user-3.jsonl", "test.jsonl"):
        docs = [json.loads(x) for x in (folder / name).read_text().splitlines()]
        if name != "test.jsonl":
            docs = [d | {"text": t} for d in docs if (t := _same_grams_twin(d["text"])) is not None]  # twins only
        (twins / name).write_text("".join(json.dumps(d) + "\n" for d in docs))
    doc = json.loads((folder / "user-1.jsonl").read_text().splitlines()[0])
    twin = json.loads((twins / "user-1.jsonl").read_text().splitlines()[0])["text"]
    assert twin != doc["text"] and np.array_equal(F.grams(twin, 1 << 32), F.grams(doc["text"], 1 << 32))
    source = _spec(twins, run_id="exact-twins", features={"modulus": 100_000, "reduction": "hash", "dimension": 511, "seed": 0})
    if weakened:
        monkeypatch.setattr(terms, "F", type("NoGrams", (), {"grams": staticmethod(lambda t, m: np.empty(0, np.int64))}))
        assert SpamJob(source).check(Home(home)).dataset == "spam-filter"
        return
    with pytest.raises(SpecError, match="were read by a dp: run"):
        SpamJob(source).check(Home(home))


def test_the_evaluation_file_too_is_read_as_checked_and_a_lone_surrogate_is_refused(home, test_mode, capsys):
    """Third review, F2 and F4: the evaluation mail is scored from the bytes the check read (a file swapped after
    it is refused), and a text with a lone surrogate gets a one-line refusal, not a crash."""
    from privrelease.core.spam.mail import read_mail

    folder = home / "data" / "mail"
    corpus(folder, capsys)
    job = SpamJob(spec(folder, run_id="eval"))
    job.check(Home(home))
    assert read_mail(job.inputs.test, root=job.inputs.root, expected=job.inputs.expected_test)[1].size
    (folder / "test.jsonl").write_text((folder / "user-1.jsonl").read_text())
    with pytest.raises(SpecError, match="mail file 'test.jsonl' changed after the run was checked"):
        read_mail(job.inputs.test, root=job.inputs.root, expected=job.inputs.expected_test)
    with (folder / "user-2.jsonl").open("a") as fh:
        fh.write('{"text": "hello \\ud800 there", "label": "ham"}\n')
    with pytest.raises(SpecError, match=r"user-2.jsonl line \d+: the text holds a lone surrogate"):
        SpamJob(spec(folder, run_id="surrogate")).check(Home(home))


def test_a_message_twice_in_one_file_and_dp_read_mail_as_evaluation_are_refused(home, test_mode, capsys):
    """Fourth review: F1, a message repeated inside one user's file was summed k times a round under dp: (the
    check skipped a digest seen in the same file); F2, mail a dp: run read could be another run's evaluation
    mail, scored in plain text outside any charge."""
    folder = home / "data" / "mail"
    corpus(folder, capsys)
    first = (folder / "user-1.jsonl").read_text().splitlines()[0]
    with (folder / "user-1.jsonl").open("a") as fh:
        fh.write((first + "\n") * 3)
    assert cli(capsys, "ledger", "set-budget", "spam-mail", "--epsilon", "8", "--delta", "1e-5", "--allow-exact-runs")[0] == 0
    with pytest.raises(SpecError, match="holds one message twice \\('user-1.jsonl' and 'user-1.jsonl', within the file\\)"):
        SpamJob(spec(folder, run_id="repeated", dp=DP)).check(Home(home))
    (folder / "user-1.jsonl").write_text("\n".join((folder / "user-1.jsonl").read_text().splitlines()[:-3]) + "\n")
    dp_run = SpamJob(spec(folder, run_id="dp", dp=DP))
    dp_run.check(Home(home))
    dp_run.load(Home(home))
    fresh = home / "data" / "fresh"
    _corpus(fresh, capsys, seed=6)
    shutil.copyfile(folder / "user-2.jsonl", fresh / "test.jsonl")  # capped mail as the evaluation file
    for dp in (None, DP | {"colluders": 1}):
        with pytest.raises(SpecError, match="the evaluation mail holds messages a dp: run read"):
            SpamJob(_spec(fresh, run_id="eval-" + ("dp" if dp else "exact"), **({"dp": dp} if dp else {}))).check(Home(home))


@pytest.mark.parametrize("weakened", [False, True])
def test_the_stewards_terms_as_they_stand_when_the_run_is_charged(home, test_mode, capsys, monkeypatch, weakened):
    """Fifth review: the terms were read at the check only, so a steward tightening them while a run waited
    (for approval, say) did not reach it. They are applied again with the index's claim, just before the charge."""
    folder = home / "data" / "mail"
    corpus(folder, capsys)
    assert cli(capsys, "ledger", "set-budget", "spam-mail", "--epsilon", "8", "--delta", "1e-5", "--min-colluders", "1")[0] == 0
    job = SpamJob(spec(folder, run_id="waits", dp=DP | {"colluders": 1}, threshold=3))
    job.check(Home(home))
    assert cli(capsys, "ledger", "set-budget", "spam-mail", "--epsilon", "8", "--delta", "1e-5", "--min-colluders", "2")[0] == 0
    if weakened:
        monkeypatch.setattr(terms, "check", lambda *args, **kwargs: None)
        job.load(Home(home))  # charged under the terms of its check
        return
    with pytest.raises(SpecError, match="dp.colluders is 1, but the data steward assumes at least 2 users"):
        job.load(Home(home))
