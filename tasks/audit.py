"""Tasks of the ledger audit (the ledger holds public parameters only; still never cached)."""

from __future__ import annotations

import contextlib

from prefect import task
from prefect.cache_policies import NO_CACHE

from core import audit as _audit
from core.charts import render_chart
from core.errors import LedgerCorrupt
from core.pipeline import Store, recover


@task(name="read-ledger", cache_policy=NO_CACHE, persist_result=False)
def read(store: Store) -> _audit.Audit:
    with contextlib.suppress(LedgerCorrupt):  # a broken ledger is reported by the audit itself
        recover(store)  # interrupted releases are settled before the audit reads the ledger
    return _audit.audit(store.ledger, store.releases)


@task(name="chart-spend", cache_policy=NO_CACHE, persist_result=False)
def chart(store: Store, audit: _audit.Audit, stamp: str) -> str | None:
    spec = _audit.spend_chart(audit.entries)
    if spec is None:
        return None
    path = store.root / "audit" / f"ledger-spend-{stamp}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    render_chart(spec, path)
    return str(path)
