"""The ledger-audit flow: its artifacts say what `privrelease ledger totals --json` says."""

from __future__ import annotations

import asyncio
import json

import duckdb
import pytest

from core.accounting import Budget
from core.errors import LedgerCorrupt
from core.ledger import PUBLISHED, Ledger
from core.mechanisms import dpne
from flows.cli import main


def _fill(home) -> None:
    ledger = Ledger(home / "privrelease.duckdb")
    ledger.set_budget("posts", Budget(6.0, 1e-6))
    for i, eps in enumerate((1.0, 2.0)):
        plan = dpne.plan(dpne.Params(user_column="u", text_column="t", epsilon=eps, delta=1e-7, T=4))
        ledger.reserve("posts", f"p{i}", "dp", plan.cost.budget, "add or remove one user", "dpne", {"i": i}, plan.detail)
        ledger.settle(f"p{i}", PUBLISHED)
    ledger.reserve("survey", "c0", "sdc", None, None, "ra", {}, {})


async def _artifacts(flow_run_id) -> dict:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async with get_client() as client:
        found = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    return {a.key: a.data for a in found}


def test_audit_artifacts_match_the_cli(prefect_server, home, capsys):
    from flows.audit import ledger_audit

    _fill(home)
    state = ledger_audit(return_state=True)
    assert state.is_completed()
    artifacts = asyncio.run(_artifacts(state.state_details.flow_run_id))
    assert main(["ledger", "totals", "--json"]) == 0
    cli_totals = json.loads(capsys.readouterr().out)
    table = artifacts["ledger-totals"]
    assert (json.loads(table) if isinstance(table, str) else table) == cli_totals
    assert state.result() == cli_totals
    history = artifacts["ledger-history"]
    assert len(json.loads(history) if isinstance(history, str) else history) == 6
    markdown = artifacts["ledger-audit"]
    assert "Hash chain: **intact** (6 entries)" in markdown and "ledger-spend-" in markdown
    assert "| survey | sdc | - | - | - | - |" in markdown  # no DP total is claimed for an sdc dataset
    posts = next(t for t in cli_totals if t["dataset"] == "posts")
    assert posts["gdp"]["epsilon"] < posts["spent"]["epsilon"] == pytest.approx(3.0)
    assert list((home / "audit").glob("ledger-spend-*.png"))


def test_audit_of_a_tampered_ledger_fails_after_reporting(prefect_server, home):
    from flows.audit import ledger_audit

    _fill(home)
    con = duckdb.connect(str(home / "privrelease.duckdb"))
    con.execute("UPDATE ledger SET epsilon = 0.1 WHERE seq = 2")
    con.close()
    state = ledger_audit(return_state=True)
    assert state.is_failed()
    with pytest.raises(LedgerCorrupt, match="entry 2"):
        state.result()
    artifacts = asyncio.run(_artifacts(state.state_details.flow_run_id))
    assert "**BROKEN**: entry 2" in artifacts["ledger-audit"]
