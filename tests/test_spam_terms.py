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

import pytest

from core.demo import mail
from core.errors import SpecError
from core.home import Home
from core.ledger import CAP, RESERVED, Ledger
from core.spam import terms
from core.spam.job import SpamJob
from core.spam.training import load_user
from tests.test_cli import EXE, REPO, run
from tests.test_release_flow import cli
from tests.test_spam_flow import corpus, spec


def _corpus(folder: Path, capsys, seed: int) -> None:
    """Another corpus (``seed``) split among three users, as ``tests.test_spam_flow.corpus`` does."""
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
    """--allow-exact-runs: a run without dp: may read other mail, never a file a dp: run read, whether
    named again, hard-linked or copied (each charge records its files' device, inode and keyed digest)."""
    folder = home / "data" / "mail"
    corpus(folder, capsys)
    r = cli(capsys, "ledger", "set-budget", "spam-mail", "--epsilon", "8", "--delta", "1e-5", "--allow-exact-runs")
    assert r[0] == 0 and "runs without dp: allowed on mail no dp: run has read" in r[1]
    code, _, err = cli(capsys, "spam", "train", spec(folder, run_id="r-dp", rounds=1, dp=DP))
    assert code == 0, err
    (charge,) = [e for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id == "r-dp" and e.status == RESERVED]
    mail = json.loads(charge.params)["mail"]
    assert len(mail) == 3 and all(set(m) == {"file", "mac"} and len(m["mac"]) == 64 for m in mail)
    assert all(str(folder) not in json.dumps(m) for m in mail)  # the files as numbers and keyed digests, no path
    with pytest.raises(SpecError, match="was read by a dp: run"):
        SpamJob(spec(folder, run_id="again")).check(Home(home))
    copied = home / "data" / "copy"
    copied.mkdir()
    for name in ("user-1.jsonl", "user-2.jsonl", "user-3.jsonl", "test.jsonl"):
        shutil.copyfile(folder / name, copied / name)  # new inodes, the same bytes
    with pytest.raises(SpecError, match="was read by a dp: run"):
        SpamJob(_spec(copied, run_id="copied")).check(Home(home))
    fresh = home / "data" / "fresh"
    _corpus(fresh, capsys, seed=6)
    assert SpamJob(_spec(fresh, run_id="fresh")).check(Home(home)).dataset == "spam-filter"


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
    r = cli(capsys, "ledger", "set-budget", "spam-mail", "--epsilon", "8", "--delta", "1e-5", "--min-colluders", "2",
            "--min-threshold", "3")
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
    env = {k: v for k, v in os.environ.items()} | {"PRIVRELEASE_HOME": str(home), "PRIVRELEASE_APPROVAL_TIMEOUT": "240",
                                                  "PREFECT_API_URL": prefect.settings.PREFECT_API_URL.value()}  # fmt: skip
    def paused_runs(client) -> list:
        return client.read_flow_runs(flow_run_filter=FlowRunFilter(state=FlowRunFilterState(
            type=FlowRunFilterStateType(any_=["PAUSED"]))))  # fmt: skip

    with get_client(sync_client=True) as client:
        before = {f.id for f in paused_runs(client)}
    proc = subprocess.Popen([EXE, "spam", "train", source], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
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


def test_the_terms_words_and_the_fingerprints_bind_files(tmp_path: Path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("x\n")
    b.write_text("y\n")
    key = b"k" * 32
    fa, fb = terms.fingerprints([a], key), terms.fingerprints([b], key)
    assert fa != fb and terms.fingerprints([a], b"j" * 32)[0]["mac"] != fa[0]["mac"]  # keyed
    params = [json.dumps({"mail": fa})]
    assert terms.read_by_dp(params, fa) and not terms.read_by_dp(params, fb)
    a.write_text("x\nz\n")  # the same file, changed in place: its inode still binds it
    assert terms.read_by_dp(params, terms.fingerprints([a], key))
