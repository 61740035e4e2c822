"""Issue #39: one account could take the whole worker, or fill Prefect's database, at no budget cost.
Each attack goes through a real proxy and gate (``python -m privrelease.gate``, limits set as the operator sets them)
in front of the session's real `prefect server`, and is run again on the weakened variant, the same gate without
its per-account limits (``tests/support/weak_gate.py``), where it succeeds. The pool's limit of runs at once
is shown on a real worker, and the same runs overlapping without it."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import httpx
import pytest

from privrelease.core import limits, settings
from privrelease.core.errors import UserError
from privrelease.gate.accounts import Accounts
from privrelease.gate.headers import PROOF
from privrelease.gate.quotas import Quotas
from tests.conftest import PASSWORD, REPO
from tests.system.test_gate import refused
from tests.system.test_server import _wait, deployment, gate, operator, person, proxy, worker

# what the operator sets for the limited gate (the defaults are 2, 1, 6 and 24)
LIMITS = {settings.ACCOUNT_RUNS: "3", settings.ACCOUNT_SCHEDULED: "1", settings.ACCOUNT_PER_MINUTE: "4",
          settings.ACCOUNT_RELEASES: "3"}  # fmt: skip
# fresh accounts, so that other tests' runs on the session's server are not counted
ACCOUNTS = {"nora": "analyst", "omar": "analyst", "pia": "analyst", "quinn": "analyst", "rosa": "analyst",
            "sid": "analyst", "otto": "auditor", "olga": "auditor", "ugo": "auditor"}  # fmt: skip
PREVIEW = {"parameters": {"preview": True}}  # a release form's preview: nothing charged, but a process on the worker


@pytest.fixture(scope="module")
def gates(served, people):
    """The limited gate and the weakened one in front of the session's server; the test accounts' runs
    are deleted afterwards (no worker of a later test runs them)."""
    env, root = served
    accounts = Accounts(Path(env["PRIVRELEASE_HOME"]) / "privrelease.duckdb")
    known = {a.name for a in accounts.all()}
    for name, role in ACCOUNTS.items():
        if name not in known:
            accounts.add(name, role, PASSWORD)
    with (
        gate(env | LIMITS, root / "gate-limited.log") as limited,
        gate(env | LIMITS, root / "gate-weak.log", "tests.support.weak_gate") as weak,
        # each behind a proxy of its own, as people reach a gate (a proxy keeps its state in its home)
        proxy(env | {settings.HOME: str(root / "proxy-limited")}, limited, root / "proxy-limited.log") as limited_url,
        proxy(env | {settings.HOME: str(root / "proxy-weak")}, weak, root / "proxy-weak.log") as weak_url,
    ):
        yield {"limited": limited_url, "weak": weak_url}


@pytest.fixture(autouse=True)
def _clean(served):
    """After each test, the test accounts' runs are deleted: no worker (of this file's pool test, or of a
    later test on the session's server) runs them."""
    yield
    api = operator(served[0])
    tags = [f"requested-by:{name}" for name in ACCOUNTS]
    for run in api.post("/flow_runs/filter", json={"flow_runs": {"tags": {"any_": tags}}, "limit": 200}).json():
        api.delete(f"/flow_runs/{run['id']}")


def _client(gates: dict, which: str, name: str) -> httpx.Client:
    """A person's client, signed in once: its proof (the gate's cookie, which nginx checks) goes with every call, as a
    browser's tabs share it; calls without one are sign-ins, which nginx holds to a few at a time per address."""
    url = gates[which]
    if PROOF not in _proofs.setdefault(url, {}).setdefault(name, {}):
        with person(url, name, PASSWORD) as signing_in:
            _proofs[url][name] = dict(signing_in.get("/admin/version", timeout=60).cookies)  # one Argon2 check
    client = person(url, name, PASSWORD)
    client.cookies.update(_proofs[url][name])
    return client


_proofs: dict[str, dict[str, dict]] = {}  # proxy -> account -> its proof cookie


def _burst(gates: dict, which: str, name: str, path: str, body: dict, n: int) -> list[httpx.Response]:
    """``n`` calls at once, each on its own connection (as a script would send them)."""

    def one(_) -> httpx.Response:
        with _client(gates, which, name) as client:  # the weakened gate starts all n: Prefect answers them slowly
            return client.post(path, json=body, timeout=120)

    _client(gates, which, name).close()  # signed in once, before the burst: its n calls share the proof
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def _message(response: httpx.Response) -> str:
    return response.json()["exception_message"]


def test_the_limits_defaults_are_the_ones_the_settings_state():
    """One place states each default (``privrelease.core.limits``); the settings' table says the same to operators."""
    said = {v.name: v.default for v in settings.VARIABLES}
    for f in fields(limits.Limits):
        assert said[limits.VARIABLES[f.name]] == str(f.default), f.name


def test_a_limit_that_is_not_one_stops_the_gate_and_make_serve_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    said = "$PRIVRELEASE_ACCOUNT_RUNS is a whole number, 1 or more; got 0"
    monkeypatch.setenv(settings.ACCOUNT_RUNS, "0")
    with pytest.raises(UserError) as refusal:
        limits.configured()
    assert str(refusal.value) == said
    env = os.environ | {
        settings.ACCOUNT_RUNS: "0",
        settings.HOME: str(tmp_path),
        settings.PREFECT_URL: "http://127.0.0.1:9",
        settings.PREFECT_AUTH: "operator:x",
    }
    gate_ = subprocess.run(
        [sys.executable, "-m", "privrelease.gate"], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert gate_.returncode == 2 and gate_.stderr == f"the gate cannot start: {said}\n"
    serve = subprocess.run(
        [sys.executable, "-m", "privrelease.core.limits", "pool"],
        env=env | {settings.POOL_LIMIT: "two"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        serve.returncode == 1 and serve.stderr == "privrelease: $PRIVRELEASE_POOL_LIMIT is a whole number, 1 or more; got two\n"
    )


def test_when_prefect_does_not_say_how_many_runs_an_account_has_the_run_is_not_started():
    async def unknown(flow_runs: dict) -> None:
        return None

    async def create():
        raise AssertionError("a run was created without being counted")

    answer = anyio.run(Quotas(limits.Limits(), unknown).start, "nora", {"parameters": {}}, create)
    assert answer == (503, "Prefect's server did not say how many runs you have: try again in a moment")


def test_one_analyst_cannot_fill_the_worker_with_previews(served, gates):
    """Twelve previews at once (nothing charged, each a process on the worker): through the gate three are
    started and the rest refused with 429 naming the limit, while another analyst still starts one; a
    cancelled run makes room, until the account has started its four runs of the minute. On the gate
    without its limits all twelve are started."""
    env, _ = served
    form = f"/deployments/{deployment(operator(env), 'dpne')['id']}/create_flow_run"
    answers = _burst(gates, "limited", "nora", form, PREVIEW, 12)
    assert sorted(r.status_code for r in answers) == [201] * 3 + [429] * 9, [r.text for r in answers]
    assert all(refused(r) for r in answers if r.status_code == 429)
    nora = _client(gates, "limited", "nora")
    again = nora.post(form, json=PREVIEW)
    assert again.status_code == 429 and _message(again) == (
        "privrelease gate: you have 3 runs not finished; the limit is 3 per account: wait for one to finish or cancel one"
    )
    assert _client(gates, "limited", "omar").post(form, json=PREVIEW).status_code == 201  # another account is not held up
    mine = [r.json()["id"] for r in answers if r.status_code == 201]
    assert nora.post(f"/flow_runs/{mine[0]}/set_state", json={"state": {"type": "CANCELLING"}}).status_code in (200, 201)
    assert nora.post(form, json=PREVIEW).status_code == 201  # room again: 3 not finished, 4 started this minute
    assert nora.post(f"/flow_runs/{mine[1]}/set_state", json={"state": {"type": "CANCELLING"}}).status_code in (200, 201)
    churn = nora.post(form, json=PREVIEW)
    assert churn.status_code == 429 and re.fullmatch(
        r"privrelease gate: you started 4 runs in the last minute; the limit is 4 a minute per account: "
        r"start it again in \d+ s",
        _message(churn),
    ), churn.text
    # the weakened variant: the same burst, all of it started
    weak = _burst(gates, "weak", "pia", form, PREVIEW, 12)
    assert [r.status_code for r in weak] == [201] * 12, [r.text for r in weak]


def test_the_auditor_cannot_fill_the_worker_with_audits(served, gates):
    env, _ = served
    form = f"/deployments/{deployment(operator(env), 'ledger-audit')['id']}/create_flow_run"
    answers = _burst(gates, "limited", "otto", form, {"parameters": {}}, 8)
    assert sorted(r.status_code for r in answers) == [201] * 3 + [429] * 5, [r.text for r in answers]
    assert "the limit is 3 per account" in _message(next(r for r in answers if r.status_code == 429))
    assert _client(gates, "limited", "olga").post(form, json={"parameters": {}}).status_code == 201
    weak = _burst(gates, "weak", "ugo", form, {"parameters": {}}, 8)
    assert [r.status_code for r in weak] == [201] * 8, [r.text for r in weak]


def test_a_run_with_500_kb_of_parameters_is_refused(served, gates):
    """The issue's 500 KB parameters (a form's free text field; the gate passes bodies of up to 1 MiB on)."""
    env, _ = served
    api = operator(env)
    form = f"/deployments/{deployment(api, 'dpne')['id']}/create_flow_run"
    big = {"parameters": {"text_column": "x" * 500_000, "preview": True}}
    answer = _client(gates, "limited", "quinn").post(form, json=big)
    assert (
        answer.status_code == 413
        and refused(answer)
        and _message(answer)
        == (
            "privrelease gate: the run's parameters take 488 KB of JSON in 3 values; the limit is 16 KB and 500 values: "
            "a form's parameters name a registered dataset and its settings, never data"
        )
    )
    assert _client(gates, "limited", "quinn").post(form, json={"parameters": {"text_column": "x" * 15_000}}).status_code == 201
    weak = _client(gates, "weak", "quinn").post(form, json=big, timeout=120)  # Prefect stores 500 KB slowly
    assert weak.status_code == 201, weak.text
    assert len(api.get(f"/flow_runs/{weak.json()['id']}").json()["parameters"]["text_column"]) == 500_000  # stored whole


def test_one_analyst_cannot_publish_sdc_releases_without_end(served, gates):
    """The sixth attack's free SDC releases in a loop (each a few MB on the worker's disk, no budget spent): once
    the account has three published in the day (the operator's limit here; each marked completed as the worker does
    once it has published), the next release is refused (429, naming the limit) before anything runs, while a
    preview is still started; on the gate without its limits, the same account publishes a fourth."""
    env, _ = served
    api = operator(env)
    form = f"/deployments/{deployment(api, 'meds')['id']}/create_flow_run"
    sid = _client(gates, "limited", "sid")
    for _ in range(3):
        started = sid.post(form, json={"parameters": {}})
        assert started.status_code == 201, started.text
        assert "publishes" in api.get(f"/flow_runs/{started.json()['id']}").json()["tags"]  # the gate's tag, not sid's
        done = api.post(f"/flow_runs/{started.json()['id']}/set_state", json={"state": {"type": "COMPLETED"}, "force": True})
        assert done.status_code in (200, 201), done.text
    fourth = sid.post(form, json={"parameters": {}})
    assert (
        fourth.status_code == 429
        and refused(fourth)
        and _message(fourth)
        == (
            "privrelease gate: you have started 3 runs that publish in the last 24 hours (previews are not counted); the "
            "limit is 3 a day per account: preview it instead, or publish it once the first of them is a day old"
        )
    )
    preview = sid.post(form, json=PREVIEW)
    assert preview.status_code == 201 and "publishes" not in api.get(f"/flow_runs/{preview.json()['id']}").json()["tags"]
    weak = _client(gates, "weak", "sid").post(form, json={"parameters": {}})
    assert weak.status_code == 201, weak.text


def _at(days: float) -> dict:
    when = (datetime.now(UTC) + timedelta(days=days)).isoformat()
    return {"parameters": {"preview": True}, "state": {"type": "SCHEDULED", "state_details": {"scheduled_time": when}}}


def test_runs_far_ahead_or_many_ahead_are_refused(served, gates):
    """A run scheduled a year ahead or in a past year is refused (422, naming the 30 days); of runs scheduled for later an
    account keeps one; a time the gate cannot read is refused rather than passed on. Without the limits,
    both are scheduled."""
    env, _ = served
    api = operator(env)
    form = f"/deployments/{deployment(api, 'dpne')['id']}/create_flow_run"
    rosa = _client(gates, "limited", "rosa")
    far = rosa.post(form, json=_at(400))
    assert far.status_code == 422 and refused(far)
    assert re.fullmatch(
        r"privrelease gate: the run is scheduled 399 days ahead; the limit is 30 days: schedule it at most "
        r"30 days from now",
        _message(far),
    ), far.text
    garbled = _at(1) | {"state": {"type": "SCHEDULED", "state_details": {"scheduled_time": "next tuesday"}}}
    unreadable = rosa.post(form, json=garbled)
    assert unreadable.status_code == 422 and _message(unreadable) == (
        "privrelease gate: the run's scheduled time 'next tuesday' is not a time: send an ISO 8601 time, e.g. 2030-01-31T06:00:00Z"
    )
    past = rosa.post(form, json=_at(-365 * 2025))  # the sixth attack's year-1 start: dashboards' lateness in years
    assert past.status_code == 422 and _message(past).endswith(
        "in the past: leave the time out to start it now, or schedule it ahead"
    )
    assert rosa.post(form, json=_at(2)).status_code == 201
    second = rosa.post(form, json=_at(3))
    assert second.status_code == 429 and _message(second) == (
        "privrelease gate: you have 1 runs scheduled for later; the limit is 1 per account: cancel one, or start this one now"
    )
    assert rosa.post(form, json=PREVIEW).status_code == 201  # one to start now is still welcome
    weak = _client(gates, "weak", "rosa")
    created = [weak.post(form, json=_at(days)) for days in (400, 3, 4, -365 * 2025)]
    assert [r.status_code for r in created] == [201] * 4, [r.text for r in created]
    scheduled = api.get(f"/flow_runs/{created[0].json()['id']}").json()["expected_start_time"]
    assert datetime.fromisoformat(scheduled) > datetime.now(UTC) + timedelta(days=399)


def _overlapping(api: httpx.Client, ids: list[str]) -> int:
    """How many pairs of the runs the worker held at the same time: from the run's PENDING (the worker took it,
    which the pool's limit governs) to its end (a process starts in seconds on a loaded machine, and a preview
    may end before the next one's process has started, so start times alone need not overlap)."""

    def taken(run_id: str) -> str:
        states = api.get("/flow_run_states/", params={"flow_run_id": run_id}).json()
        return min(s["timestamp"] for s in states if s["type"] == "PENDING")

    spans = sorted((taken(i), api.get(f"/flow_runs/{i}").json()["end_time"]) for i in ids)
    return sum(1 for i, (_, end) in enumerate(spans) for start, _ in spans[i + 1 :] if start < end)


@pytest.mark.parametrize("pool_limit", [1, None], ids=["pool-limited", "weakened-no-pool-limit"])
def test_the_pool_runs_at_most_its_limit_at_once(served, pool_limit):
    """Three previews submitted together on a pool limited to one run at once run one after the other; on a
    pool without a limit (the weakened variant) the worker runs them at the same time."""
    env, root = served
    api = operator(env)
    configured = api.get("/work_pools/privrelease").json()["concurrency_limit"]
    assert configured == limits.configured().pool  # what the tests' deploy() set, as make serve does
    dpne = deployment(api, "dpne")["id"]
    try:
        assert api.patch("/work_pools/privrelease", json={"concurrency_limit": pool_limit}).status_code == 204
        ids = [api.post(f"/deployments/{dpne}/create_flow_run", json=PREVIEW).json()["id"] for _ in range(3)]
        log = root / f"worker-pool-{pool_limit}.log"
        with worker(env, log):
            assert [_wait(api, i, log) for i in ids] == ["COMPLETED"] * 3
    finally:
        api.patch("/work_pools/privrelease", json={"concurrency_limit": configured})
    overlaps = _overlapping(api, ids)
    assert overlaps == 0 if pool_limit == 1 else overlaps > 0, json.dumps(
        [api.get(f"/flow_runs/{i}").json()["start_time"] for i in ids]
    )


def test_a_run_started_again_after_the_answer_is_approved_on_what_the_steward_was_shown(prefect_server):
    """A suspended release runs again from the start once answered, and looks at its charge afresh; the
    approval is given on the look the steward was shown, kept with the run, so a charge that grew while
    it waited (others spent meanwhile) is not covered by it (the ledger then refuses it)."""
    from prefect import flow

    from privrelease.core.ledger.approval import Approval, ApprovalRule, Look
    from privrelease.flows import steps

    shown = Look(ApprovalRule(share=0.1), epsilon=1.0, epsilon_left=10.0, cap_epsilon=10.0, filter_share=0.1, account_epsilon=0.0)
    grown = Look(
        ApprovalRule(share=0.1), epsilon=1.0, epsilon_left=1.0, cap_epsilon=10.0, filter_share=math.inf, account_epsilon=0.0
    )

    @flow(persist_result=False)
    def asked_twice() -> list:
        return [steps._shown(shown), steps._shown(grown)]  # the first run's look, then the restarted run's

    first, again = asked_twice()
    assert first == (shown, False) and again == (shown, True)
    approval = Approval.given(again[0], "sam", datetime.now(UTC))
    assert approval.covers(shown) and not approval.covers(grown)
