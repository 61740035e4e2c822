"""The ledger audit: history, per-dataset totals, the hash-chain check, and spend over time."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from privrelease.core.charts import Chart
from privrelease.core.errors import LedgerCorrupt
from privrelease.core.ledger.account import Totals, totals
from privrelease.core.ledger.chain import Entry
from privrelease.core.ledger.ledger import RESERVED, Ledger


@dataclass(frozen=True)
class Audit:
    entries: list[Entry]
    totals: list[Totals]
    problem: str | None  # None when the chain and the manifests check out

    def markdown(self, chart: str | None) -> str:
        status = "**intact**" if self.problem is None else f"**BROKEN**: {self.problem}"
        rows = "\n".join(
            f"| {t.dataset} | {t.kind or '-'} | {_pair(t.cap)} | {_share(t)} | {_pair(t.spent)} | "
            f"{'-' if t.gdp_epsilon is None else f'{t.gdp_epsilon:.4g}'} | {_accountant(t)} | {t.published} / {t.failed} / {t.pending} |"
            for t in self.totals
        )
        picture = f"\n\nBudget spent over time: `{chart}`\n" if chart else ""
        return (
            f"# Ledger audit\n\nHash chain: {status} ({len(self.entries)} entries).\n\n"
            "| dataset | kind | cap (eps / delta) | spent | charges (eps / delta) | GDP eps | filter eps | PLD eps | next "
            "release | published / failed / pending |\n|---|---|---|---|---|---|---|---|---|---|\n"
            + rows
            + picture
            + "\n\nspent: the share of the cap the accountant that admits has used (basic: the charges added up, while no "
            "charge has Gaussian noise; filter: the Rényi filter's costs over its budget), never above 100%; charges: "
            "the charges added up, which may pass the cap's epsilon once the Rényi filter admits (it counts Gaussian "
            "noise together, tighter than a sum); filter eps: what the admission filter certifies for the whole history "
            "at the cap's delta; PLD eps: dp-accounting's tight figure there (reported only); next release: how many "
            "more like the last one the filter admits.\n"
        )


def _accountant(t: Totals) -> str:
    a = t.account
    if a is None:
        return "- | - | -"
    flt = "-" if a.filter_epsilon is None else f"{a.filter_epsilon:.4g}"
    tight = "-" if a.pld_epsilon is None else f"{a.pld_epsilon:.4g}"
    return f"{flt} | {tight} | {'-' if a.like is None else f'{a.like} fits {a.fits} more'}"


def _share(t: Totals) -> str:
    share, by = t.account.spent if t.account is not None else (None, "")
    return "-" if share is None else f"{100 * share:.3g}% ({by})"


def _pair(budget) -> str:
    return "-" if budget is None else budget.show()


def audit(ledger: Ledger, releases_root: Path) -> Audit:
    """Read everything an auditor needs; a broken chain is reported, not raised."""
    try:
        ledger.verify(releases_root)
        ledger.anchor()  # the audit pins the head it checked, outside the database
        replayed = ledger.replay()
        problem = None if not replayed else "admission replay: " + "; ".join(replayed)
    except LedgerCorrupt as exc:
        problem = f"entry {exc.seq}: {exc}"
    entries = ledger.entries_unchecked()  # a rolled-back ledger is audited as it is: its problem says what it lacks
    return Audit(entries, totals(entries, ledger.home), problem)


def spend_chart(entries: list[Entry]) -> Chart | None:
    """Cumulative epsilon charged per dataset against time (steps at each charge)."""
    charges = [e for e in entries if e.status == RESERVED and e.kind == "dp"]
    if not charges:
        return None
    frame = pd.DataFrame(
        {
            "dataset": [e.dataset for e in charges],
            "ts": pd.to_datetime([e.ts for e in charges]),
            "epsilon": [e.epsilon for e in charges],
        }
    )
    points = {
        name: (group["ts"].to_numpy(), np.cumsum(group["epsilon"].to_numpy()))
        for name, group in frame.groupby("dataset", sort=True)
    }
    return Chart(
        "ledger_spend.png",
        "Epsilon spent per dataset (basic composition)",
        [],
        {},
        "epsilon",
        kind="line",
        points=points,
        axes=("time (UTC)", "epsilon"),
    )
