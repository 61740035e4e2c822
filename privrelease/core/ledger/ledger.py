"""The privacy-budget ledger: append-only, hash-chained, with per-dataset caps.

Every event is a row and no row is ever updated: a cap being set (``cap``), a release being
charged (``reserved``) and its outcome (``published`` or ``failed``). A release's status is its
latest event. Each charge states the guarantee it stands for (``kind``): ``dp`` with (epsilon,
delta) under the dataset's adjacency, ``sdc`` (no epsilon: its risk figures are in the outcome) or
``mpc`` (a cryptographic protocol run). Only ``dp`` charges count against a cap.

Each row's hash is an HMAC-SHA256, under a key kept outside the database, of its content and the
previous row's hash, so a changed, removed or reordered row breaks the chain and cannot be
re-chained without the key; every row written is also anchored (``privrelease.core.ledger.anchors``) outside the
database, so a cut tail or a restored older copy fails ``verify`` too.

The ledger lives in a store (``privrelease.core.store``): the home's DuckDB file, where an OS file lock
serializes each read-check-append transaction, or PostgreSQL (``$PRIVRELEASE_LEDGER_URL``), where
the transaction locks the dataset's row for the check and the chain head's row for the append, so
workers on several hosts never exceed a cap nor lose an entry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from privrelease.core.errors import ApprovalError, BudgetError, BudgetExhausted, ReleaseConflict
from privrelease.core.ledger import account, lease, pinned, refusal
from privrelease.core.ledger.approval import Approval, ApprovalRule, Look, look
from privrelease.core.ledger.book import Book
from privrelease.core.ledger.chain import Entry, canonical, rows
from privrelease.core.people import requester
from privrelease.core.privacy import events
from privrelease.core.privacy.accountant import Filter, Spend
from privrelease.core.privacy.adjacency import read
from privrelease.core.privacy.budget import Budget
from privrelease.core.privacy.cost import DPCost
from privrelease.core.store import Con

CAP, RESERVED, PUBLISHED, FAILED, POLICY = "cap", "reserved", "published", "failed", "policy"
REGISTERED, REFRESHED = "registered", "refreshed"  # a dataset's rows registered or read again: its public facts
KINDS = ("dp", "sdc", "mpc")


def in_place(releases_root: Path, charge: Entry) -> bool:
    """Whether the release folder of ``charge`` is in place and its manifest cites that charge."""
    manifest = releases_root / charge.dataset / str(charge.release_id) / "manifest.json"
    return manifest.is_file() and json.loads(manifest.read_text()).get("ledger") == {"seq": charge.seq, "hash": charge.hash}


@dataclass(frozen=True)
class ChargeRequest:
    """What a charge asks of the ledger: the release (dataset and id), its kind (``dp``, ``sdc`` or ``mpc``) and, for
    ``dp``, its cost (a privacy event under an adjacency); the mechanism and its parameters (a retry with the same id
    and parameters is the same charge); display figures for the entry (``detail``); who asked, from which Prefect run,
    and a steward's approval where the rule holds the charge back."""

    dataset: str
    release_id: str
    kind: str
    cost: DPCost | None
    mechanism: str
    params: dict
    detail: dict | None = None
    flow_run_id: str | None = None
    requested_by: str | None = None
    approval: Approval | None = None


@dataclass(frozen=True)
class Charge:
    """The result of ``reserve``: the charging entry and the release's status before the call."""

    entry: Entry
    previous_status: str | None  # None: newly charged; else the status of an earlier attempt


class Ledger(Book):
    """The budgets' ledger: caps, policies, charges and their outcomes, in its book (``privrelease.core.ledger.book``)."""

    # -- writing -------------------------------------------------------------------------------

    def set_budget(
        self,
        dataset: str,
        cap: Budget,
        approve_above: float | None = None,
        requested_by: str | None = None,
        approve_account: tuple[float, float] | None = None,
        terms: dict | None = None,
    ) -> Entry:
        """Record a dataset's cap; later caps replace earlier ones, and the history keeps both.

        ``approve_above``: the largest share of what remains one release may take without a steward's
        approval; ``approve_account``: (epsilon, hours), the most one account may charge in a window
        without it (``privrelease.core.ledger.approval``; None: no approval needed). ``terms``: further conditions the
        steward sets with the cap (the spam mail's trust assumptions, ``privrelease.core.spam.terms``)."""
        rule = ApprovalRule(approve_above, *(approve_account or (None, None)))
        with self._write(dataset) as (con, written):
            return self._append(
                con,
                written,
                dataset=dataset,
                status=CAP,
                epsilon=cap.epsilon,
                delta=cap.delta,
                detail=rule.as_detail() | (terms or {}),
                requested_by=requested_by,
            )

    def set_policy(self, dataset: str, policy: dict, requested_by: str | None = None) -> Entry:
        """Record an SDC dataset's disclosure policy (the steward's); a later one replaces it, the history keeps both."""
        with self._write(dataset) as (con, written):
            return self._append(con, written, dataset=dataset, status=POLICY, detail=policy, requested_by=requested_by)

    def registered(self, dataset: str, status: str, facts: dict, requested_by: str | None = None) -> Entry:
        """Record a dataset's registration or refresh (``REGISTERED``, ``REFRESHED``) with its public facts only (its
        version, unit and purpose, and its row count where the unit makes it public): an auditor sees when the rows
        a release read changed. Never a source's path or a snapshot's digest."""
        if status not in (REGISTERED, REFRESHED):
            raise ValueError(f"a dataset's rows are {REGISTERED!r} or {REFRESHED!r}, not {status!r}")
        with self._write(dataset) as (con, written):
            return self._append(con, written, dataset=dataset, status=status, detail=facts, requested_by=requested_by)

    def policy_entry(self, dataset: str, con: Con | None = None) -> Entry | None:
        """The dataset's current disclosure policy entry (its ``detail`` holds the policy), if any; read with
        ``con`` when given (a reader's connection already open on this store: one open instead of two)."""
        if con is None:
            if not self.store.exists():
                return None
            with self._read() as con:
                return self.policy_entry(dataset, con)
        found = rows(con, "WHERE dataset = ? AND status = ? ORDER BY seq DESC LIMIT 1", [dataset, POLICY])
        return found[0] if found else None

    def cap_entry(self, dataset: str) -> Entry | None:
        """The dataset's cap in force (its ``detail`` holds the steward's approval rule and terms), if any."""
        if not self.store.exists():
            return None
        with self._read() as con:
            return self._cap_entry(con, dataset)

    def approval(self, dataset: str, cost: DPCost, requested_by: str | None = None) -> Look | None:
        """The steward's rule against a charge of ``cost`` by ``requested_by``, when the charge must wait for
        an approval (``privrelease.core.ledger.approval``); None when it need not. A look taken before the charge:
        ``reserve`` takes it again under its lock."""
        with self._read() as con:
            found = self._look(con, dataset, Spend.of("this release", cost.event), requested_by or requester(), datetime.now(UTC))
        return found if found is not None and found.needed else None

    def _look(self, con, dataset: str, candidate: Spend, requested_by: str, now: datetime) -> Look | None:
        cap = self._cap_entry(con, dataset)
        rule = ApprovalRule.of(json.loads(cap.detail)) if cap is not None else ApprovalRule()
        if not rule.any:
            return None
        charges = rows(con, "WHERE dataset = ? AND status = ? AND kind = 'dp' ORDER BY seq", [dataset, RESERVED])
        mine = [(e.ts, e.epsilon) for e in charges if e.requested_by == requested_by]
        return look(rule, Filter.of(cap.budget), account.history(charges), candidate, mine, now)

    def admit(self, dataset: str, cost: DPCost) -> None:
        """Refuse, without writing, a dp charge the dataset's cap cannot take (the early check)."""
        with self._read() as con:
            self._check_cap(con, dataset, cost)

    def admission(self, dataset: str) -> tuple[Filter | None, list[Spend]]:
        """The dataset's admission filter (None: no cap) and its dp history, for what-if questions."""
        with self._read() as con:
            cap = self._cap(con, dataset)
            return (None if cap is None else Filter.of(cap)), account.history(
                rows(con, "WHERE dataset = ? AND status = ? AND kind = 'dp' ORDER BY seq", [dataset, RESERVED])
            )

    def reserve(self, request: ChargeRequest) -> Charge:
        """Charge a release (``request``), atomically, once per release id.

        A retry with the same release id and the same ``params`` returns the first charge; the same
        id with other params is refused. A dp charge (its privacy event, whose parts the entry records
        beside the (epsilon, delta) derived from it: ``privrelease.core.privacy.events.stored``) needs a cap (fail
        closed) and the dataset's one adjacency (recorded as its code); sdc and mpc runs carry no epsilon.
        Under the same lock, the steward's approval rule is applied again: a dp charge it holds back needs
        an ``approval`` that still covers it, and what was decided is recorded with the charge
        (``privrelease.core.ledger.approval``).
        """
        r = request
        dataset, release_id, kind, cost, mechanism, params = r.dataset, r.release_id, r.kind, r.cost, r.mechanism, r.params
        detail, flow_run_id, requested_by, approval = r.detail, r.flow_run_id, r.requested_by, r.approval
        if kind not in KINDS or (kind == "dp") != (cost is not None):
            raise ValueError(f"a {kind!r} charge takes a DP cost (a privacy event and an adjacency) exactly when it is dp")
        with self._write(dataset) as (con, written):
            earlier = self._earlier(con, release_id, dataset, mechanism, params)
            if earlier is not None:
                return earlier
            kinds = {e.kind for e in rows(con, "WHERE dataset = ? AND status = ?", [dataset, RESERVED])}
            if kinds - {kind}:
                raise BudgetError(
                    f"dataset {dataset!r} has {kinds.pop()} entries in the ledger; one dataset holds "
                    f"one kind of release, not {kind}."
                )
            requested_by, now = requested_by or requester(), datetime.now(UTC)
            if kind == "dp":
                decision, counted = self._check_cap(con, dataset, cost)
                recorded = events.stored(cost.event)
                detail = {
                    **(detail or {}),
                    **({"events": recorded} if recorded is not None else {}),
                    "admission": {"rule": account.RULE, "region": decision.region, "mode": counted.mode},
                }
                seen = self._look(con, dataset, counted, requested_by, now)
                if seen is not None:
                    if seen.needed and (approval is None or not approval.covers(seen)):
                        raise ApprovalError(
                            f"{seen.words(dataset)}. "
                            + (
                                "It changed while this release waited for the steward (another charge came first): the "
                                "approval given no longer covers it. Nothing was charged; start it again to ask anew."
                                if approval is not None
                                else "Nothing was charged; it needs a steward's approval."
                            )
                        )
                    detail["approval"] = seen.record(approval if seen.needed else None)
                    detail["admission"]["rule"] = account.APPROVED
            if pinned.of(params) is not None:  # an SDC release's charge: the policy it was checked under, still in force
                pinned.check(self.policy_entry(dataset, con), dataset, pinned.of(params), "nothing was charged")
            self.store.lock_head(con)
            earlier = self._earlier(con, release_id, dataset, mechanism, params)  # the same id on another dataset
            if earlier is not None:
                return earlier
            entry = self._append(
                con,
                written,
                dataset=dataset,
                release_id=release_id,
                flow_run_id=flow_run_id,
                kind=kind,
                adjacency=cost.adjacency.code if cost else None,
                mechanism=mechanism,
                params=params,
                epsilon=cost.budget.epsilon if cost else 0.0,
                delta=cost.budget.delta if cost else 0.0,
                detail=detail or {},
                holder=lease.me(self.home),
                status=RESERVED,
                requested_by=requested_by,
                ts=now,
            )
            return Charge(entry, None)

    @staticmethod
    def _earlier(con, release_id: str, dataset: str, mechanism: str, params: dict) -> Charge | None:
        """The first charge of this release id, if any; one for a different release is a conflict."""
        earlier = rows(con, "WHERE release_id = ? ORDER BY seq", [release_id])
        if not earlier:
            return None
        first = earlier[0]
        if first.dataset != dataset or first.params != canonical(params) or first.mechanism != mechanism:
            raise ReleaseConflict(
                f"release id {release_id!r} was already used for a different release "
                f"(dataset, mechanism, parameters or registration differ); choose a new release_id."
            )
        return Charge(first, earlier[-1].status)

    def _check_cap(self, con, dataset: str, cost: DPCost):
        """The filter's decision on the history with this charge added, and the charge as counted (its mode);
        a refusal raises and explains itself. Adjacencies are compared as typed values (``adjacency.read``
        takes a stored code, or a sentence from before codes), never as words."""
        cap = self._cap(con, dataset)
        if cap is None:
            raise BudgetError(
                f"dataset {dataset!r} has no privacy budget, so a DP release is refused; set one "
                f"with: privrelease ledger set-budget {dataset} --epsilon E --delta D"
            )
        other = [
            read(e.adjacency)
            for e in rows(con, "WHERE dataset = ? AND kind = 'dp' AND status = ?", [dataset, RESERVED])
            if read(e.adjacency) != cost.adjacency
        ]
        if other:
            raise BudgetError(
                f"dataset {dataset!r} was charged under another adjacency ({other[0].sentence}); DP costs "
                "under different neighbouring relations do not add up under one cap."
            )
        f = Filter.of(cap)
        spends = account.history(rows(con, "WHERE dataset = ? AND status = ? AND kind = 'dp' ORDER BY seq", [dataset, RESERVED]))
        decision, counted = f.admit(spends, Spend.of("this release", cost.event))
        if not decision.admitted:
            raise BudgetExhausted(*refusal.refusal(dataset, f, spends, counted))
        return decision, counted

    def settle(self, release_id: str, status: str, detail: dict | None = None, flow_run_id: str | None = None) -> Entry:
        """Record a release's outcome. A failed release keeps its charge."""
        if status not in (PUBLISHED, FAILED):
            raise ValueError(f"a release settles as {PUBLISHED!r} or {FAILED!r}, not {status!r}")
        with self._write() as (con, written):
            return self._settle(con, written, release_id, status, detail, flow_run_id)

    def _settle(self, con, written: list, release_id: str, status: str, detail: dict | None, flow_run_id: str | None) -> Entry:
        self.store.lock_head(con)  # before reading the latest status, so two outcomes cannot both be written
        charged = rows(con, "WHERE release_id = ? AND status = ? ORDER BY seq LIMIT 1", [release_id, RESERVED])
        if not charged:
            raise ValueError(f"release {release_id!r} was never charged")
        first = charged[0]
        latest = rows(con, "WHERE release_id = ? ORDER BY seq DESC LIMIT 1", [release_id])[0]
        if latest.status == PUBLISHED:
            return latest  # a published release stays published, whatever a late retry reports
        return self._append(
            con,
            written,
            dataset=first.dataset,
            release_id=release_id,
            flow_run_id=flow_run_id,
            kind=first.kind,
            mechanism=first.mechanism,
            status=status,
            detail=detail or {},
        )

    def recover(self, releases_root: Path) -> list[Entry]:
        """Settle every charge whose holder is gone: ``published`` if its release folder is in place
        (the process died between publishing and settling), else ``failed`` (reason ``interrupted``),
        keeping its charge. Returns the outcomes written."""
        if not self.store.exists():
            return []
        with self._write() as (con, written):
            out = []
            for charge in self._open(con):
                if lease.alive(charge.holder, charge.ts) or not lease.ours(charge.holder, charge.ts, self.home):
                    continue
                if in_place(releases_root, charge):
                    out.append(
                        self._settle(
                            con, written, charge.release_id, PUBLISHED, {"recovered": "interrupted after publishing"}, None
                        )
                    )
                else:
                    out.append(self._settle(con, written, charge.release_id, FAILED, {"reason": "interrupted"}, None))
            return out

    def pending(self) -> list[Entry]:
        """Charges without an outcome yet (their holders are still running, or not yet recovered)."""
        with self._read() as con:
            return self._open(con)

    @staticmethod
    def _open(con) -> list[Entry]:
        return rows(
            con,
            "WHERE status = ? AND release_id IN (SELECT release_id FROM ledger GROUP BY release_id "
            "HAVING count(*) = 1) ORDER BY seq",
            [RESERVED],
        )

    # -- reading -------------------------------------------------------------------------------

    def _cap(self, con, dataset: str) -> Budget | None:
        cap = self._cap_entry(con, dataset)
        return None if cap is None else cap.budget

    @staticmethod
    def _cap_entry(con, dataset: str) -> Entry | None:
        caps = rows(con, "WHERE dataset = ? AND status = ? ORDER BY seq DESC LIMIT 1", [dataset, CAP])
        return caps[0] if caps else None

    def totals(self, tight: bool = True, dataset: str | None = None) -> list[account.Totals]:
        """Per dataset (or of ``dataset`` only): its kind, cap, dp spend (basic composition), and release
        counts by status; ``tight``: with the PLD figure (``account.account``)."""
        return account.totals(self.entries(dataset), self.home, tight)

    def replay(self) -> list[str]:
        """Every recorded admission recomputed from the recorded caps and events: the entries that do not follow."""
        return account.replay(self.entries())
