"""The ledger-audit flow: publishes the ledger's history, totals and chain check as artifacts."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from privrelease.core.errors import LedgerCorrupt, UserError
from privrelease.core.ledger import audit as _audit
from privrelease.core.release import headroom
from privrelease.core.release.home import Home
from privrelease.flows.artifacts import data_uri, flat, readable
from privrelease.flows.steps import chart_spend, read_ledger, time_limited


def _rooms(home: Home, audit: _audit.Audit) -> dict:
    """What the next release like each dp dataset's last can take (``privrelease.core.release.headroom``); none from a ledger
    that does not check out (the audit reports it as it is)."""
    if audit.problem is not None:
        return {}
    try:
        return {t.dataset: headroom.after_last(audit.entries, t.dataset) for t in audit.totals if t.account is not None}
    except (LedgerCorrupt, UserError):
        return {}


@flow(name="ledger-audit", persist_result=False)
def ledger_audit() -> list[dict]:
    """Audit the ledger of the worker's home; the run fails (after publishing its artifacts) if the
    chain is broken."""
    home = Home.open()
    with time_limited():
        audit = read_ledger(home)
        chart_path = chart_spend(home, audit, datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"))
    totals = [x.as_dict() for x in audit.totals]
    rooms = _rooms(home, audit)
    rows = [x | {"room": None if rooms.get(x["dataset"]) is None else rooms[x["dataset"]].as_dict()} for x in totals]
    create_table_artifact(
        key="ledger-totals", table=[flat(x) for x in rows], description="per dataset: cap, spent, what the next release can take"
    )
    # every entry but its holder (the charging process's host, pid and home: the operator's bookkeeping)
    history = [flat({k: v for k, v in e.as_dict().items() if k != "holder"}) for e in audit.entries]
    create_table_artifact(key="ledger-history", table=history, description="every entry")
    picture = f"\n\n![Epsilon spent per dataset over time]({data_uri(Path(chart_path))})\n" if chart_path else ""
    create_markdown_artifact(key="ledger-audit", markdown=readable(audit.markdown(None)) + picture, description="ledger audit")
    get_run_logger().info("audited %d entries over %d datasets", len(audit.entries), len(totals))
    if audit.problem is not None:
        raise LedgerCorrupt(f"the ledger's hash chain is broken at {audit.problem}", None)
    return rows  # what `ledger totals --json` prints
