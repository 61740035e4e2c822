"""The fourth privacy review's finding 2: a stricter disclosure policy recorded while a release runs stops it.

The reviewer's timeline: a release reserved, the steward records ``l: 2`` six seconds later, the release publishes
six seconds after that with ``l_min: 1`` in its own manifest. Here the steward's change lands inside the run (a
step wrapped to record it): after the load, the charge is refused, nothing charged; after the charge, the release
is settled failed and nothing published, the message saying the policy changed. The weakened variant, without the
look before publishing, publishes under the old policy what the new one refuses."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
from pathlib import Path

import pandas as pd
import pytest

from privrelease.core.datasets.registry import Registry
from privrelease.core.ledger import pinned
from privrelease.core.ledger.ledger import FAILED, RESERVED, Ledger
from privrelease.core.release import pipeline
from privrelease.core.release.home import Home
from privrelease.core.release.spec import parse
from privrelease.core.sdc import policy
from tests.support.helpers import register

DOC = {"keys": {"categorical": ["a"]}, "sensitive": ["s"], "thresholds": {"k": 3}}
STRICTER = DOC | {"thresholds": {"k": 3, "l": 2}}
REQUEST = {
    "release_id": "r1",
    "dataset": "t",
    "seed": 1,
    "mechanism": {"name": "sdc", "params": {"steps": [{"method": "suppress"}]}},
}


def _table() -> pd.DataFrame:
    """Cells of 4 on the key; the first holds one sensitive value only: k = 3 holds, l = 2 does not."""
    return pd.DataFrame({"a": list("ppppqqqqrrrr"), "s": ["s1"] * 4 + ["s1", "s2"] * 4})


def _stricter(home: Path) -> None:
    Registry(home).set_policy("t", policy.parse(STRICTER, "the steward's new policy"))


def _entries(home: Path) -> list[str]:
    return [e.status for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id == "r1"]


def _steps(home: Path, step: str) -> pipeline.Steps:
    """The release's steps, the one named recording the stricter policy once it has run."""
    steps = pipeline.Steps()
    own = getattr(steps, step)

    def then(*args):
        out = own(*args)
        _stricter(home)
        return out

    return dataclasses.replace(steps, **{step: then})


def test_a_policy_recorded_after_the_load_refuses_the_charge(home, test_mode):
    register(home, _table(), "t", policy=policy.parse(DOC, "test policy"))
    with pytest.raises(pinned.PolicyChanged, match=r"policy of dataset 't' changed while this release ran .*nothing was charged"):
        pipeline.release(Home(home), parse(REQUEST), _steps(home, "load"))
    assert _entries(home) == [] and not (home / "releases" / "t").exists()


def test_a_policy_recorded_after_the_charge_fails_the_release_and_publishes_nothing(home, test_mode):
    register(home, _table(), "t", policy=policy.parse(DOC, "test policy"))
    with pytest.raises(
        pinned.PolicyChanged, match=r"policy of dataset 't' changed while this release ran .*nothing was published"
    ):
        pipeline.release(Home(home), parse(REQUEST), _steps(home, "privatize"))
    assert _entries(home) == [RESERVED, FAILED] and not (home / "releases" / "t").exists()
    failed = [e for e in Ledger(home / "privrelease.duckdb").entries() if e.release_id == "r1"][-1]
    assert json.loads(failed.detail)["reason"].startswith("PolicyChanged: the disclosure policy of dataset 't' changed")
    # the same request afterwards is checked under the new policy, and refused by it
    with pytest.raises(Exception, match=r"l-diversity of the sensitive variables \(l ≥ 2\)"):
        pipeline.release(Home(home), parse(REQUEST | {"release_id": "r2"}))


def test_weakened_without_the_look_before_publishing_the_old_policy_publishes_l_1(home, test_mode, monkeypatch):
    register(home, _table(), "t", policy=policy.parse(DOC, "test policy"))
    monkeypatch.setattr(pinned, "held", lambda *_: contextlib.nullcontext())
    summary = pipeline.release(Home(home), parse(REQUEST), _steps(home, "privatize"))
    manifest = json.loads((Path(summary["folder"]) / "manifest.json").read_text())
    assert manifest["sdc_report"]["l_min"] == 1 and Registry(home).get("t").policy.thresholds.l == 2


def test_while_a_release_is_published_a_steward_waits_to_record_a_policy(home):
    """``held`` keeps the lock a policy is recorded under: a steward's change started meanwhile (another thread,
    the same lock file) waits until the release is in place, and lands after it."""
    register(home, _table(), "t", policy=policy.parse(DOC, "test policy"))
    ledger = Ledger(home / "privrelease.duckdb")
    pinned_entry = ledger.policy_entry("t").seq
    done = threading.Event()
    steward = threading.Thread(target=lambda: (_stricter(home), done.set()))
    with pinned.held(ledger, "t", pinned_entry):
        steward.start()
        assert not done.wait(1.0)  # still waiting for the lock
        assert ledger.policy_entry("t").seq == pinned_entry
    steward.join(30)
    assert done.is_set() and ledger.policy_entry("t").seq > pinned_entry
