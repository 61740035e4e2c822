"""The ledger-audit flow: its artifacts say what `privrelease ledger totals --json` says."""

from __future__ import annotations

import asyncio
import json
import shutil

import duckdb
import pytest

from privrelease.cli.main import main
from privrelease.core.errors import LedgerCorrupt
from privrelease.core.ledger.ledger import PUBLISHED, ChargeRequest, Ledger
from privrelease.core.mechanisms import dpne
from privrelease.core.privacy.budget import Budget


def _fill(home) -> None:
    ledger = Ledger(home / "privrelease.duckdb")
    ledger.set_budget("posts", Budget(6.0, 1e-6))
    for i, eps in enumerate((1.0, 2.0)):
        params = dpne.Params(user_column="u", text_column="t", epsilon=eps, delta=1e-7, T=4)
        plan = dpne.plan(params)
        ledger.reserve(
            ChargeRequest("posts", f"p{i}", "dp", plan.cost, "dpne", {"mechanism": params.model_dump(mode="json")}, plan.detail)
        )
        ledger.settle(f"p{i}", PUBLISHED)
    ledger.reserve(ChargeRequest("survey", "c0", "sdc", None, "ra", {}, {}))


async def _artifacts(flow_run_id) -> dict:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async with get_client() as client:
        found = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    return {a.key: a.data for a in found}


def test_audit_artifacts_match_the_cli(prefect_server, home, capsys):
    from privrelease.flows.audit import ledger_audit

    _fill(home)
    state = ledger_audit(return_state=True)
    assert state.is_completed()
    artifacts = asyncio.run(_artifacts(state.state_details.flow_run_id))
    assert main(["ledger", "totals", "--json"]) == 0
    cli_totals = json.loads(capsys.readouterr().out)
    table = artifacts["ledger-totals"]
    table = json.loads(table) if isinstance(table, str) else table
    # the UI's table prints nested values as raw JSON: each {epsilon, delta} pair is two plain columns
    assert [r["dataset"] for r in table] == [t["dataset"] for t in cli_totals]
    for row, total in zip(table, cli_totals, strict=True):
        assert not any(isinstance(v, dict | list) for v in row.values())
        assert set(row) == set(table[0])  # one set of columns (an sdc row first had hidden the dp rows' figures)
        for key in ("cap", "spent", "remaining"):
            if total[key] is None:
                assert row[f"{key} epsilon"] == row[f"{key} delta"] == "-"
            else:
                pair = (total[key]["epsilon"], total[key]["delta"])
                assert (row[f"{key} epsilon"], row[f"{key} delta"]) == pytest.approx(pair, rel=1e-3)
    assert state.result() == cli_totals
    history = artifacts["ledger-history"]
    assert len(json.loads(history) if isinstance(history, str) else history) == 6
    markdown = artifacts["ledger-audit"]
    assert "Hash chain: **intact** (6 entries)" in markdown and "](data:image/png;base64," in markdown
    # too wide for the UI's view as a table: a list, one item per dataset; no DP total claimed for an sdc one
    assert "- **survey**: kind: sdc · cap (eps / delta): - · spent: - · charges (eps / delta): - · GDP eps: -" in markdown
    shown = next(r for r in table if r["dataset"] == "posts")
    assert shown["spent share"].endswith("% (filter)") and float(shown["spent share"].split("%")[0]) <= 100
    assert shown["next release like the last"].startswith("the next release like this can take epsilon ≤ ")
    posts = next(t for t in cli_totals if t["dataset"] == "posts")
    assert posts["gdp"]["epsilon"] < posts["spent"]["epsilon"] == pytest.approx(3.0)
    assert list((home / "audit").glob("ledger-spend-*.png"))


def test_audit_of_a_tampered_ledger_fails_after_reporting(prefect_server, home):
    from privrelease.flows.audit import ledger_audit

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


def test_audit_of_a_rolled_back_ledger_reports_what_it_lacks(prefect_server, home, tmp_path):
    """A restored older database: the audit still publishes its history and totals as they are, names the anchored
    entry the ledger lacks, and fails."""
    from privrelease.flows.audit import ledger_audit

    _fill(home)
    shutil.copy(home / "privrelease.duckdb", tmp_path / "old.duckdb")
    Ledger(home / "privrelease.duckdb").set_budget("posts", Budget(4.0, 1e-5))  # a later entry the copy lacks
    shutil.copy(tmp_path / "old.duckdb", home / "privrelease.duckdb")
    state = ledger_audit(return_state=True)
    assert state.is_failed()
    artifacts = asyncio.run(_artifacts(state.state_details.flow_run_id))
    assert "**BROKEN**" in artifacts["ledger-audit"] and "missing or different" in artifacts["ledger-audit"]
