"""The ledger-audit flow: publishes the ledger's history, totals and chain check as artifacts."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from core.errors import LedgerCorrupt
from core.pipeline import Store
from flows.artifacts import data_uri, flat, readable
from tasks import audit as t


@flow(name="ledger-audit", persist_result=False)
def ledger_audit() -> list[dict]:
    """Audit the ledger of the worker's home; the run fails (after publishing its artifacts) if the
    chain is broken."""
    store = Store.open()
    audit = t.read(store)
    chart = t.chart(store, audit, datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"))
    totals = [x.as_dict() for x in audit.totals]
    create_table_artifact(key="ledger-totals", table=[flat(x) for x in totals], description="per dataset: cap, spent, remaining")
    history = [flat(e.as_dict()) for e in audit.entries]
    create_table_artifact(key="ledger-history", table=history, description="every entry")
    picture = f"\n\n![Epsilon spent per dataset over time]({data_uri(Path(chart))})\n" if chart else ""
    create_markdown_artifact(key="ledger-audit", markdown=readable(audit.markdown(None)) + picture, description="ledger audit")
    get_run_logger().info("audited %d entries over %d datasets", len(audit.entries), len(totals))
    if audit.problem is not None:
        raise LedgerCorrupt(f"the ledger's hash chain is broken at {audit.problem}", None)
    return totals
