"""The release pipeline: its steps as plain functions, and ``release``, the one sequence of them.

prepare → (a steward's approval, for a large charge) → load → charge → privatize → check → (SDC: assess) → publish
→ settle.

Every charge ends in an outcome: a release killed after its charge is settled as failed
(``interrupted``) or, if its folder was already in place, as published, by ``recover``, which
the next release and every ledger command run first. A retry never draws under an old charge.

``flows/release.py`` runs the same sequence with each step as a Prefect task (``tasks/release.py``
has the same names); the command line runs it directly when no Prefect server is configured.

``prepare`` reads only public facts (the request, the registered schema, the ledger's totals),
so a wrong request is refused before anything is charged (in under a second of which nearly all
is interpreter start and imports; see bench/RESULTS.md). Only
``load`` touches the rows, and nothing after it can refuse for a reason that depends on them.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from core import budget as accounts
from core import faults, mechanisms, noise, parallel, paths, snapshots
from core import publish as _publish
from core import spec as _spec
from core.accountant import Spend, events_of
from core.accounting import charge_phrase
from core.accounts import requester
from core.errors import ApprovalError, BudgetExhausted, ReleaseConflict, SpecError, UserError
from core.ledger import FAILED, PUBLISHED, Charge, Ledger
from core.mechanisms.base import DPCost, Plan, Result
from core.registry import Registry
from core.sdc import enforce
from core.sdc import report as sdc_report
from core.spec import Release, ReleaseRequest


@dataclass(frozen=True)
class Store:
    """The state folder: the DuckDB database (registry and ledger), snapshots and releases."""

    root: Path

    @classmethod
    def open(cls) -> Store:
        """The home configured for this process (``$PRIVRELEASE_HOME``): never a request's choice."""
        return cls(paths.home())

    @property
    def db(self) -> Path:
        return paths.database(self.root)

    @property
    def releases(self) -> Path:
        return paths.releases(self.root)

    @property
    def staging(self) -> Path:
        return paths.staging(self.root)

    @property
    def ledger(self) -> Ledger:
        return Ledger(self.db)

    @property
    def registry(self) -> Registry:
        return Registry(self.root)


def prepare(store: Store, request: ReleaseRequest) -> tuple[Release, Plan]:
    """Bind a request to its registered dataset and plan it; refuse what cannot run, from public facts."""
    release, plan_ = check(store, request)
    admit(store, release, plan_)
    return release, plan_


def check(store: Store, request: ReleaseRequest, dropped: bool = False) -> tuple[Release, Plan]:
    """Everything ``prepare`` checks but the budget: the request against the dataset's registration
    (``dropped``: also one whose rows were dropped, for a preview) and the mechanism's bounds."""
    noise.check_seed(request.seed)  # a typed request from a flow run skipped spec.parse
    dataset = store.registry.get(request.dataset, dropped)
    release = _spec.bind(request, dataset)
    module = mechanisms.get(release.mechanism)
    plan_ = module.plan(release.params)
    if plan_.cost.kind != dataset.purpose:
        kinds = {"dp": "differentially private releases", "sdc": "statistical disclosure control (RA, swapping)"}
        raise SpecError(f"dataset {dataset.id!r} is registered for {kinds[dataset.purpose]}; mechanism "
                        f"{release.mechanism!r} gives {kinds[plan_.cost.kind]}. Ask the data steward for a "
                        "dataset registered for that purpose.")  # fmt: skip
    if isinstance(plan_.cost, DPCost) and plan_.cost.unit != dataset.unit.kind:
        raise SpecError(f"mechanism {release.mechanism!r} is private for a {plan_.cost.unit} unit, but dataset "
                        f"{dataset.id!r} is registered with unit {dataset.unit}.")  # fmt: skip
    module.needs(release.params, tuple(dataset.schema.columns)).check(dataset.schema, dataset.id)
    if dataset.purpose == "sdc":
        enforce.admit(dataset, release.mechanism, module, release.params)
    return release, plan_


def admit(store: Store, release: Release, plan_: Plan) -> None:
    """Refuse a DP release its dataset's cap cannot take (writes nothing), naming the largest epsilon that fits."""
    if isinstance(plan_.cost, DPCost):
        try:
            store.ledger.admit(release.dataset.id, plan_.cost.budget, plan_.detail)
        except BudgetExhausted as exc:
            fit = largest_fit(store.ledger, release.dataset.id, mechanisms.get(release.mechanism), release.params)
            raise BudgetExhausted(f"{exc} {fit}") from None


def warnings(release: Release, plan_: Plan) -> list[str]:
    """What a release would waste (public values only), said before its charge: ``core.preview``'s warnings."""
    from core import preview

    return preview.warnings(release, plan_)


def largest_fit(ledger: Ledger, dataset: str, module, params) -> str:
    """What a refused request could ask for instead: the largest epsilon of it (same delta and other
    parameters) that the dataset's filter would admit, found by planning it at other epsilons."""
    f, spends = ledger.admission(dataset)
    if f is None or "epsilon" not in type(params).model_fields:
        return ""

    def make(eps: float) -> Spend | None:
        try:
            p = module.plan(type(params).model_validate({**params.model_dump(mode="json"), "epsilon": eps}))
        except ValueError:  # pydantic's ValidationError too: no such request at this epsilon
            return None
        return Spend("this release", p.cost.budget, events_of(p.detail))

    best = accounts.largest_epsilon(f, spends, make, params.epsilon)
    if best is None:
        return "No epsilon of this request fits (its delta alone does not)."
    return f"The largest epsilon of this request that fits is {best:.3g} (same delta and other parameters)."


def load(store: Store, release: Release) -> pd.DataFrame:
    """The registered snapshot, checked; for a mechanism whose Dask workers read it themselves, also
    checked to be readable on every worker (before the charge, so an unreachable store costs nothing).
    For an SDC release, only the columns its disclosure policy publishes, rows shuffled (``enforce.prepare``)."""
    frame = store.registry.load(release.dataset)
    if release.dataset.purpose == "sdc":
        return enforce.prepare(frame, release.dataset.policy, noise.generator(release.seed))
    if mechanisms.declared(mechanisms.get(release.mechanism)).READS_SNAPSHOT_ON_WORKERS:
        missing = parallel.unreadable(frame.attrs["snapshot"])
        if missing:
            raise snapshots.SnapshotUnreachable(
                f"dataset {release.dataset.id!r} cannot be read on the Dask workers {', '.join(missing)}: its snapshot "
                f"{frame.attrs['snapshot']} is not readable there. Mount the snapshot store at the same path on every "
                "Dask worker's host, or run without Dask. Nothing was charged."
            )
    return frame


def needs_approval(store: Store, release: Release, plan_: Plan) -> str | None:
    """Why this release must wait for a data steward's approval (public values only), or None."""
    if not isinstance(plan_.cost, DPCost):
        return None
    found = store.ledger.approval(release.dataset.id, plan_.cost.budget, plan_.detail)
    if found is None:
        return None
    share, threshold = found
    return (f"this release takes {share:.1%} of the remaining budget of dataset {release.dataset.id!r}, more than "
            f"the {threshold:.1%} its data steward lets a release take without approval")  # fmt: skip


def approve(store: Store, release: Release, plan_: Plan, log: logging.Logger | logging.LoggerAdapter) -> None:
    """Outside Prefect no steward can answer: a release that needs approval is refused, before its charge."""
    why = needs_approval(store, release, plan_)
    if why is not None:
        raise ApprovalError(f"{why}. Start it from its release form in the Prefect UI, where a steward can approve "
                            "it, or ask the steward to raise the dataset's --approve-above.")  # fmt: skip


def reserve(store: Store, dataset: str, run_id: str, mechanism: str, plan_: Plan, params: dict,
            adjacency: str | None, flow_run_id: str | None = None, requested_by: str | None = None) -> Charge:  # fmt: skip
    """Reserve a run's cost as its plan states it: the one way every flow (release, spam training)
    charges the ledger. Only a DP cost carries a budget and the dataset's adjacency."""
    cost = plan_.cost
    dp = isinstance(cost, DPCost)
    return store.ledger.reserve(dataset, run_id, cost.kind, cost.budget if dp else None, adjacency if dp else None,
                                mechanism, params, plan_.detail, flow_run_id, requested_by or requester())  # fmt: skip


def charge(store: Store, release: Release, plan_: Plan, flow_run_id: str | None = None,
           requested_by: str | None = None) -> Charge:  # fmt: skip
    """Reserve the release's cost; the reservation pins the parameters and the registration version."""
    params = {
        "mechanism": release.params.model_dump(mode="json"),
        "registration": release.dataset.version,
        "test_mode": release.seed is not None,
    } | ({"policy": release.dataset.policy_entry} if release.dataset.purpose == "sdc" else {})
    return reserve(store, release.dataset.id, release.release_id, release.mechanism, plan_, params,
                   release.dataset.unit.adjacency, flow_run_id, requested_by)  # fmt: skip


def privatize(release: Release, frame: pd.DataFrame) -> Result:
    """Run the mechanism on fresh randomness (a fixed seed only in test mode), then check it."""
    module = mechanisms.get(release.mechanism)
    result = module.run(frame, release.params, noise.generator(release.seed))
    module.check(frame, result, release.params)
    return result


def assess(store: Store, release: Release, frame: pd.DataFrame, result: Result) -> Result:
    """An SDC release's risk and utility report, on the disclosure policy's key: the internal one written
    for the data steward under the home (never published, never logged), the external one (figures of
    the released table only) attached to the result to be published with it. A released table that
    misses a threshold of the policy is refused here (``enforce.ThresholdMissed``), after the internal
    report says by how much."""
    policy = release.dataset.policy
    module = mechanisms.get(release.mechanism)
    role = sdc_report.roles(release.mechanism, policy, module.protects(release.params), result.privacy, frame, result.data)
    external = sdc_report.external(result.data, role)
    missing = enforce.missed(external, policy)
    internal = sdc_report.internal(frame, result.data, role) | {"thresholds_missed": missing}
    sdc_report.write_internal(store.root, release.dataset.id, release.release_id, release.mechanism, internal,
                              sdc_report.records(frame, result.data, role))  # fmt: skip
    if missing:
        raise enforce.refuse(release.dataset.id, release.release_id, missing)
    return sdc_report.attach(result, external, release.mechanism)


def publish(store: Store, release: Release, plan_: Plan, result: Result, charge_: Charge) -> _publish.Published:
    record = _publish.manifest(release, plan_, result, charge_.entry)
    return _publish.publish(store.releases, store.staging, record, result)


def settle(store: Store, dataset: str, run_id: str, status: str, detail: dict, flow_run_id: str | None = None) -> None:
    """Record a run's outcome (every flow's one way) and remove any staging it left."""
    store.ledger.settle(run_id, status, detail, flow_run_id)
    for folder in _publish.staged(store.staging, dataset, run_id):
        shutil.rmtree(folder, ignore_errors=True)


def failure(exc: BaseException) -> dict:
    """A failed run's ledger detail: the message is kept only for user errors (an internal one may carry data)."""
    return {"reason": f"{type(exc).__name__}: {exc}" if isinstance(exc, UserError) else type(exc).__name__}


def recover(store: Store) -> list:
    """Settle the charges of interrupted releases and remove staging no live release holds.

    Run by every command that touches the ledger, so no charge stays without an outcome."""
    settled = store.ledger.recover(store.releases)
    if store.staging.is_dir():
        # Folders first, then the live charges: a release stages only after its charge is recorded, so
        # every folder listed here that is still in use has its charge among the pending read after.
        # (Reading the charges first let a release that charged and staged in between lose its folder.)
        folders = list(store.staging.glob("*/*"))
        live = {(e.dataset, e.release_id) for e in store.ledger.pending()}
        for folder in folders:
            if (folder.parent.name, folder.name.rsplit(".", 1)[0]) not in live:
                shutil.rmtree(folder, ignore_errors=True)
    return settled


DIRECT = SimpleNamespace(prepare=prepare, approve=approve, load=load, charge=charge, privatize=privatize, assess=assess,
                         publish=publish, settle=settle)  # fmt: skip


def release(store: Store, request: ReleaseRequest, steps: SimpleNamespace = DIRECT,
            log: logging.Logger | logging.LoggerAdapter = logging.getLogger("privrelease")) -> dict:  # fmt: skip
    """Run one release; returns its summary. A failure after the charge is settled as failed (``failure``),
    the charge kept."""
    faults.check()
    recover(store)
    spec, plan_ = steps.prepare(store, request)
    log.info("prepare: %s on dataset %s (registration %d), release %s", spec.mechanism, spec.dataset.id,
             spec.dataset.version, spec.release_id)  # fmt: skip
    for line in warnings(spec, plan_):
        log.warning("warning: %s", line)
    faults.point("prepare")
    steps.approve(store, spec, plan_, log)
    frame = steps.load(store, spec)
    log.info("load: the registered snapshot, checked against its registration")
    faults.point("load")
    charged = steps.charge(store, spec, plan_)
    faults.point("charge")
    folder = _publish.release_folder(store.releases, spec.dataset.id, spec.release_id)
    if charged.previous_status == PUBLISHED:
        log.info("release %s was already published; nothing charged or drawn", spec.release_id)
        return summary(json.loads((folder / "manifest.json").read_text()), folder, True)
    if charged.previous_status is not None:  # one charge, one draw: never a second draw under it
        raise ReleaseConflict(
            f"release {spec.release_id!r} was charged before and did not publish (its ledger status is "
            f"{charged.previous_status}); another attempt would draw new noise under the same charge. "
            "Release again under a new release_id, which is a new charge."
        )
    cost = plan_.cost
    log.info("ledger entry #%d: %s", charged.entry.seq, charge_phrase(
        "dp", cost.budget.epsilon, cost.budget.delta) if isinstance(cost, DPCost) else charge_phrase(cost.kind))
    try:
        result = steps.privatize(spec, frame)
        log.info("privatize: %s ran and its output checks passed", spec.mechanism)
        faults.point("privatize")
        if not isinstance(cost, DPCost):
            result = steps.assess(store, spec, frame, result)
            log.info("assess: the risk and utility report (internal for the data steward, external to publish)")
        published = steps.publish(store, spec, plan_, result, charged)
        faults.point("publish")
    except Exception as exc:
        steps.settle(store, spec.dataset.id, spec.release_id, FAILED, failure(exc))
        raise
    steps.settle(store, spec.dataset.id, spec.release_id, PUBLISHED, result.headline)
    faults.point("settle")
    log.info("publish: %s", published.folder)
    return summary(published.manifest, published.folder, False)


def summary(manifest: dict, folder: Path, already: bool) -> dict:
    """What a caller is told of a release: public values only."""
    return {
        "release_id": manifest["release_id"],
        "dataset": manifest["dataset"],
        "folder": str(folder),
        "already_published": already,
        "mechanism": manifest["mechanism"]["name"],
        "ledger": manifest["ledger"],
        "privacy": manifest["privacy"],
        "headline": {k: manifest[k] for k in ("result", "counts_by_length") if k in manifest}
        | {k: manifest["privacy"][k] for k in ("pa", "pa_max") if k in manifest["privacy"]}
        | ({"k": manifest["sdc_report"]["k"]} if "sdc_report" in manifest else {})
        | ({"chain": " → ".join(s["method"] for s in manifest["privacy"]["steps"]),
            "suppressed_cells": sum(s.get("suppressed_cells", 0) for s in manifest["privacy"]["steps"])}
           if "steps" in manifest["privacy"] else {})
        | ({"risk": manifest["risk"]} if "risk" in manifest else {}),
    }
