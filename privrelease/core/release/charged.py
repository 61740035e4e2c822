"""One charged run: the path every run the ledger charges goes through, a release and a spam-filter
training alike.

recover → check (the run's own: public facts only) → admit (a DP cost against the cap's filter) →
ask (a steward's approval, when the rule the steward set with the cap holds the charge back) →
load (the run's own: its private inputs read and checked, before the charge) → reserve (under the
ledger's lock: the filter and the approval rule applied again, the decision recorded in the entry)
→ work (the run's own: it draws its noise and publishes) → settle (``published`` with the run's
headline figures, or ``failed`` with the charge kept).

A run is a ``Job``: its own steps, and nothing of the ledger's. How a steward is asked is the
caller's ``Approver``: the Prefect flows pause for an answer in the UI (``privrelease/flows/steps.py``); a
command without a Prefect server cannot wait for one, so it refuses (``refuse``). Every charge ends
in an outcome: one killed after its charge is settled by ``recover``, which every run and every
ledger command runs first.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from privrelease.core import environment, faults, interrupts
from privrelease.core.errors import ApprovalError, BudgetExhausted, ReleaseConflict, UserError
from privrelease.core.ledger import lease, pinned, refusal
from privrelease.core.ledger.approval import Approval, Look
from privrelease.core.ledger.chain import Entry, canonical
from privrelease.core.ledger.ledger import FAILED, PUBLISHED, RESERVED, Charge, ChargeRequest, in_place
from privrelease.core.mechanisms.base import Plan
from privrelease.core.privacy.budget import charge_phrase
from privrelease.core.privacy.cost import DPCost
from privrelease.core.release import audited
from privrelease.core.release import publish as _publish
from privrelease.core.release.home import Home

T = TypeVar("T")
Log = logging.Logger | logging.LoggerAdapter


@dataclass(frozen=True)
class Claim:
    """What a run asks of the ledger, from public facts only: a charge of its plan's cost on a dataset."""

    dataset: str
    run_id: str
    mechanism: str
    plan: Plan
    params: dict  # what the charge pins: a retry with other parameters under the same run id is refused

    @property
    def dp(self) -> DPCost | None:
        return self.plan.cost if isinstance(self.plan.cost, DPCost) else None


@dataclass(frozen=True)
class Caller:
    """Who runs it: the flow run (None outside Prefect) and the account that asked (None: this process's user)."""

    flow_run_id: str | None = None
    requested_by: str | None = None


class Approver(Protocol):
    def __call__(self, dataset: str, look: Look, log: Log) -> Approval: ...


class Job(Protocol[T]):
    """A charged run's own steps (``privrelease.core.release.pipeline.ReleaseJob``, ``privrelease.core.release.spam_run.SpamJob``)."""

    def check(self, home: Home) -> Claim: ...
    def admit_hint(self, home: Home) -> str: ...  # what a refused request could ask for instead ("" if nothing)
    def load(self, home: Home) -> None: ...
    def room(self, home: Home) -> tuple[Path, Path, float]: ...  # where it stages, where it publishes, MB it may need
    def work(self, home: Home, charge: Charge, log: Log) -> tuple[T, dict]: ...  # its result, and the ledger's headline
    def earlier(self, home: Home, charge: Charge) -> T: ...  # the result of the run published earlier under this id
    def progress(self) -> dict: ...  # public figures of how far it got, kept with a failed outcome


@dataclass(frozen=True)
class Ledgering:
    """The two ledger steps of a charged run, as plain functions (``privrelease/flows/steps.py`` runs them as Prefect tasks)."""

    reserve: Callable[[Home, Claim, Caller, Approval | None], Charge]
    settle: Callable[[Home, str, str, str, dict, str | None], None]


def refuse(dataset: str, look: Look, log: Log) -> Approval:
    """Outside Prefect no steward can answer: a charge that needs approval is refused, before it is made."""
    raise ApprovalError(
        f"{look.words(dataset)}. Start it from its form in the Prefect UI, where a steward can approve "
        "it, or ask the steward to raise the dataset's --approve-above."
    )


def admit(home: Home, claim: Claim, hint: Callable[[], str] = str) -> None:
    """Refuse a DP charge the dataset's cap cannot take (writes nothing), with what would fit instead (``hint``)."""
    if claim.dp is None:
        return
    try:
        home.ledger.admit(claim.dataset, claim.dp)
    except BudgetExhausted as exc:
        raise hinted(exc, hint) from None


def preflight(home: Home, job: Job, caller: Caller, served: bool, log: Log) -> Claim:
    """What a command checks before it starts Prefect, the run's own first steps on public facts, so a bad request
    is refused at once with its error alone and nothing started: the job's check, admission against the cap with
    what would fit instead, and, where no Prefect server runs (no steward can answer), a charge the approval rule
    holds back refused now. The one pre-flight: the release and spam-training commands both call it."""
    claim = job.check(home)
    admit(home, claim, lambda: job.admit_hint(home))
    if not served and (held := look(home, claim, caller)) is not None:
        refuse(claim.dataset, held, log)
    return claim


def hinted(exc: BudgetExhausted, hint: Callable[[], str]) -> BudgetExhausted:
    """A refusal with what would fit instead (``hint``) said before what to do: at admission, and under the lock
    when a release charged meanwhile took the room."""
    stated = exc.plain.removesuffix(refusal.ACTION).rstrip()
    return BudgetExhausted(" ".join(x for x in (stated, hint(), refusal.ACTION) if x), exc.detail)


def look(home: Home, claim: Claim, caller: Caller) -> Look | None:
    """Why this charge must wait for a data steward (public values only), or None: a look before the charge."""
    if claim.dp is None:
        return None
    return home.ledger.approval(claim.dataset, claim.dp, caller.requested_by)


def ask(home: Home, claim: Claim, caller: Caller, approver: Approver, log: Log) -> Approval | None:
    """The steward's approval when the rule holds this charge back (the approver pauses, or refuses)."""
    found = look(home, claim, caller)
    return None if found is None else approver(claim.dataset, found, log)


def reserve(home: Home, claim: Claim, caller: Caller, approval: Approval | None) -> Charge:
    """Reserve a run's cost as its plan states it: the one way every charged run charges the ledger. Only a
    DP cost carries a privacy event (its budget derived from it) and an adjacency; the approval is checked
    again under the lock."""
    return home.ledger.reserve(
        ChargeRequest(
            claim.dataset,
            claim.run_id,
            claim.plan.cost.kind,
            claim.dp,
            claim.mechanism,
            claim.params,
            claim.plan.detail,
            caller.flow_run_id,
            caller.requested_by,
            approval,
        )
    )


def settle(home: Home, dataset: str, run_id: str, status: str, detail: dict, flow_run_id: str | None = None) -> None:
    """Record a run's outcome and remove any staging it left, but a sealed draw of a failed one (``resume``)."""
    home.ledger.settle(run_id, status, detail, flow_run_id)
    for folder in _publish.staged(home.staging, dataset, run_id):
        if status == PUBLISHED or not detail.get("sealed"):
            shutil.rmtree(folder, ignore_errors=True)


DIRECT = Ledgering(reserve=reserve, settle=settle)


def failure(exc: BaseException) -> dict:
    """A failed run's ledger detail: the message is kept only for user errors (an internal one may carry data)."""
    return {"reason": f"{type(exc).__name__}: {exc}" if isinstance(exc, UserError) else type(exc).__name__}


def recover(home: Home) -> list:
    """Settle the charges of interrupted runs, publish the sealed draws of failed ones where the machine now lets
    it (``resume``), and remove staging no live run holds and no sealed draw needs."""
    settled = home.ledger.recover(home.releases)
    if home.staging.is_dir():
        # Folders first, then the live charges: a run stages only after its charge is recorded, so every
        # folder listed here that is still in use has its charge among the pending read after.
        folders = list(home.staging.glob("*/*"))
        live = {(e.dataset, e.release_id) for e in home.ledger.pending()}
        for folder in folders:
            ref = (folder.parent.name, folder.name.lstrip(".").rsplit(".", 1)[0])
            if ref in live:
                continue
            if folder.is_file():  # the disk space a run held: gone with its settled charge; before any, a minute at most
                if home.ledger.status(ref[1]) is not None or time.time() - folder.stat().st_mtime > 60:
                    folder.unlink(missing_ok=True)
                continue
            charge = _sealed_charge(home, folder)
            if charge is None:
                shutil.rmtree(folder, ignore_errors=True)
                continue
            try:
                resume(home, charge)
            except (UserError, OSError):  # the machine still refuses (or another process published it first): left as it is
                continue
            settled.append(home.ledger.entries(charge.dataset)[-1])
    return settled


def _sealed_charge(home: Home, folder: Path) -> Entry | None:
    """The charge whose sealed draw ``folder`` is, while its release is unpublished; None for anything else."""
    manifest = folder / "manifest.json"
    if not manifest.is_file():
        return None
    ref = json.loads(manifest.read_text()).get("ledger", {})
    entry = next((e for e in home.ledger.entries(folder.parent.name) if e.seq == ref.get("seq")), None)
    if entry is None or entry.hash != ref.get("hash") or home.ledger.status(str(entry.release_id)) == PUBLISHED:
        return None
    return entry


def run(home: Home, job: Job[T], caller: Caller, approver: Approver, log: Log, ledger: Ledgering = DIRECT) -> T:
    """Run one charged job from recovery to its settled outcome (see the module docstring); returns its result.
    A failure after the charge is settled as failed, the charge kept."""
    faults.check()
    try:
        recover(home)
        claim = job.check(home)
        admit(home, claim, lambda: job.admit_hint(home))
        faults.point("prepare")
        approval = ask(home, claim, caller, approver, log)
        if approval is not None:
            log.info("approved by the data steward %s", approval.by or "(unknown)")
        job.load(home)
        faults.point("load")
        refuse_a_second_draw(home, claim)
        staging, target, mb = job.room(home)
        environment.preflight(staging, target, mb)  # a disk or folder that cannot take the release refuses it now
        environment.hold(_publish.room(staging, claim.dataset, claim.run_id), mb)
    except BaseException as exc:  # a Ctrl-C before the charge (DuckDB's RuntimeError('Query interrupted') too): none made
        if "staging" in locals():
            environment.free(_publish.room(staging, claim.dataset, claim.run_id))
        if interrupts.caused(exc):
            raise interrupts.Interrupted(interrupts.BEFORE) from None
        raise
    charge = None
    try:
        try:
            charge = ledger.reserve(home, claim, caller, approval)
        except BudgetExhausted as exc:  # another release took the room since the admission
            raise hinted(exc, lambda: job.admit_hint(home)) from None
        faults.point("charge")
        if charge.previous_status == PUBLISHED:
            log.info("%s was already published; nothing charged or drawn", claim.run_id)
            return job.earlier(home, charge)
        if charge.previous_status is not None and resumable(home, charge.entry):  # its draw, sealed: published now
            log.info("%s was drawn before and kept sealed; publishing that draw, charging nothing more", claim.run_id)
            resume(home, charge.entry, caller, ledger)
            return job.earlier(home, charge)
        if charge.previous_status is not None:  # one charge, one draw: never a second draw under it
            raise ReleaseConflict(
                f"run {claim.run_id!r} was charged before and did not publish (its ledger status is "
                f"{charge.previous_status}); another attempt would draw new noise under the same charge. "
                "Run it again under a new id, which is a new charge."
            )
        log.info("ledger entry #%d: %s", charge.entry.seq, _phrase(charge.entry))
        result, headline = job.work(home, charge, log)
    except BaseException as exc:
        if charge is None or charge.previous_status is None:  # this run's own charge, if it made one
            _stopped(home, claim, caller, ledger, job, exc, charge)
        raise
    finally:
        environment.free(_publish.room(staging, claim.dataset, claim.run_id))
    try:
        ledger.settle(home, claim.dataset, claim.run_id, PUBLISHED, headline, caller.flow_run_id)
        faults.point("settle")
    except BaseException as exc:
        if interrupts.caused(exc):  # its release is in place: settled (again) as published, and said so
            _stopped(home, claim, caller, ledger, job, exc, charge)
        raise
    return result


def _fault_words(entry: Entry, run_id: str, kept: Path | None) -> str:
    """What became of a charge whose run the machine stopped (a full disk, a read-only folder)."""
    charge = f"Ledger entry #{entry.seq} ({_phrase(entry)}) stands"
    if kept is not None:
        return (
            f"{charge}: the release was drawn and is kept sealed in {kept} (its owner's only); once that is fixed, "
            f"`privrelease release --resume {run_id}` publishes that very draw and charges nothing more."
        )
    return f"{charge}: the run stopped before its output could be kept, so nothing was published; a new release is a new charge."


def resumable(home: Home, entry: Entry) -> bool:
    """Whether a charge's release is drawn and sealed, and not yet published (``resume`` publishes it)."""
    kept = _publish.sealed(home.staging, entry.dataset, str(entry.release_id))
    return kept is not None and json.loads((kept / "manifest.json").read_text()).get("ledger") == {
        "seq": entry.seq,
        "hash": entry.hash,
    }


def resume(home: Home, entry: Entry, caller: Caller = Caller(), ledger: Ledgering | None = None) -> dict:
    """Publish a charge's sealed draw (``privrelease release --resume``, ``ledger recover``, or a retry of the same
    request): no new charge, no new draw; settled as published. Refused if there is no sealed draw of it."""
    ledger = ledger or DIRECT
    if not resumable(home, entry):
        raise ReleaseConflict(
            f"release {entry.release_id!r} has no sealed draw to publish (its ledger status is {home.ledger.status(str(entry.release_id))}): "
            "only a release whose publishing failed after its draw was kept can be resumed."
        )
    environment.preflight(
        home.staging, home.releases, None, f"Its charge (ledger entry #{entry.seq}) stands, its draw still sealed."
    )
    kept = _publish.sealed(home.staging, entry.dataset, str(entry.release_id))
    pin = pinned.of(json.loads(entry.params))  # an SDC draw: published only under the policy it was measured under
    try:
        with pinned.held(home.ledger, entry.dataset, pin) if pin is not None else contextlib.nullcontext():
            audited.unaudited_since(home, entry)
            done = _publish.place(kept, home.releases)
    except pinned.PolicyChanged:
        shutil.rmtree(kept, ignore_errors=True)  # it can never be published now
        raise
    except OSError as exc:
        raise environment.unwritable(exc, _fault_words(entry, str(entry.release_id), kept)) or exc from None
    ledger.settle(
        home, entry.dataset, str(entry.release_id), PUBLISHED, {"resumed": "published from its sealed draw"}, caller.flow_run_id
    )
    return {"manifest": done.manifest, "folder": done.folder}


def refuse_a_second_draw(home: Home, claim: Claim) -> None:
    """A request identical to one whose draw is sealed and unpublished is refused: it would charge again for what
    ``--resume`` publishes for nothing. One read of the dataset's entries, each release's status its latest entry's
    (a dataset's history of repeats costs one pass, not a ledger read per repeat)."""
    entries = home.ledger.entries(claim.dataset)
    latest = {e.release_id: e.status for e in entries}  # chain order: a release's last entry is its status
    params = canonical(claim.params)
    for e in entries:
        if (
            e.status == RESERVED
            and e.release_id != claim.run_id
            and e.mechanism == claim.mechanism
            and e.params == params
            and latest[e.release_id] == FAILED
            and resumable(home, e)
        ):
            raise ReleaseConflict(
                f"the same request was charged before as release {e.release_id} (ledger entry #{e.seq}), and its draw is "
                f"sealed, waiting to be published: `privrelease release --resume {e.release_id}` publishes it and "
                "charges nothing more. Nothing was charged."
            )


def said(home: Home) -> str:
    """What became of this process's charge, for an interrupt outside a charged run (``_stopped`` says it inside):
    none made, its release recorded as published or as failed, or its outcome still to be recorded."""
    ledger = home.ledger
    mine = [e for e in ledger.entries() if e.holder == lease.me(ledger.home) and e.release_id] if ledger.store.exists() else []
    if not mine:
        return interrupts.BEFORE
    e = mine[-1]
    status = ledger.status(e.release_id)
    if status == PUBLISHED:
        return interrupts.after_publishing(e.release_id, e.seq, _phrase(e))
    if status == FAILED:
        return f"stopped (Ctrl-C) after its charge: ledger entry #{e.seq} ({_phrase(e)}) stands, recorded as failed. Nothing was published."
    return (
        f"stopped (Ctrl-C) after its charge: ledger entry #{e.seq} ({_phrase(e)}) stands; "
        "the next privrelease command records its outcome (see privrelease ledger history)."
    )


def _phrase(entry: Entry) -> str:
    return charge_phrase(entry.kind, entry.epsilon, entry.delta)


def _stopped(
    home: Home, claim: Claim, caller: Caller, ledger: Ledgering, job: Job, exc: BaseException, charge: Charge | None
) -> None:
    """Settle the charge of a run that stopped after making it (as failed, its charge kept: noise may have been
    drawn), and raise ``Interrupted`` for a user's Ctrl-C, saying what became of the charge. An interrupt can land
    inside ``reserve`` after its entry is written: without a ``charge``, this process's pending entry is looked up."""
    mine = lease.me(home.ledger.home)
    entry = (
        charge.entry
        if charge is not None
        else next((e for e in home.ledger.pending() if e.release_id == claim.run_id and e.holder == mine), None)
    )
    stopped = interrupts.caused(exc)
    if entry is None:
        if stopped:
            raise interrupts.Interrupted(interrupts.BEFORE)
        return
    if stopped and in_place(home.releases, entry):
        ledger.settle(
            home, claim.dataset, claim.run_id, PUBLISHED, {"recovered": "interrupted after publishing"}, caller.flow_run_id
        )
        raise interrupts.Interrupted(interrupts.after_publishing(claim.run_id, entry.seq, _phrase(entry)))
    fault = None if stopped else environment.unwritable(exc)
    kept = _publish.sealed(home.staging, claim.dataset, claim.run_id) if fault is not None else None
    detail = (
        {"reason": "interrupted by the user (Ctrl-C)"}
        if stopped
        else {"reason": f"Unwritable: {fault}", "sealed": kept is not None}
        if fault is not None
        else failure(exc)
    )
    ledger.settle(home, claim.dataset, claim.run_id, FAILED, detail | job.progress(), caller.flow_run_id)
    if fault is not None:
        raise environment.unwritable(exc, _fault_words(entry, claim.run_id, kept)) from None
    if stopped:
        raise interrupts.Interrupted(
            f"stopped (Ctrl-C) after its charge: ledger entry #{entry.seq} charged {claim.dataset} epsilon={entry.epsilon:g} "
            f"delta={entry.delta:g}, and that charge stands (recorded as failed): the mechanism had started and may "
            "already have drawn noise from the data, so the budget cannot be given back. Nothing was published."
            if entry.kind == "dp"
            else f"stopped (Ctrl-C) after its ledger entry #{entry.seq} ({entry.kind}: no budget spent), now recorded as "
            "failed. Nothing was published."
        ) from None
