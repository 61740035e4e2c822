"""The release pipeline: a release's own steps as plain functions, and ``release``, which runs them as
one charged run (``privrelease.core.release.charged``).

check → admit → (a steward's approval, for a large charge) → load → reserve → privatize → check its
output → (SDC: assess) → publish → settle.

``check`` reads only public facts (the request, the registered schema, the ledger's totals), so a
wrong request is refused before anything is charged (in under a second of which nearly all is
interpreter start and imports; see bench/RESULTS.md). Only ``load`` touches the rows, and nothing
after it can refuse for a reason that depends on them.

``Steps`` are the steps that touch the rows; ``privrelease/flows/steps.py`` runs the same functions as Prefect
tasks, and the command line runs them directly when no Prefect server is configured.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from privrelease.core import charts, faults, mechanisms, noise, parallel
from privrelease.core.datasets import snapshots
from privrelease.core.errors import InternalError, ReleaseConflict, SpecError
from privrelease.core.ledger import account, pinned
from privrelease.core.ledger.ledger import Charge, Ledger
from privrelease.core.mechanisms.base import Earlier, Plan, Result, Snapshot
from privrelease.core.privacy.cost import DPCost
from privrelease.core.release import audited, charged, headroom
from privrelease.core.release import publish as _publish
from privrelease.core.release import spec as _spec
from privrelease.core.release.charged import Caller, Claim, Log
from privrelease.core.release.home import Home
from privrelease.core.release.spec import Release
from privrelease.core.sdc import enforce
from privrelease.core.sdc import report as sdc_report

if TYPE_CHECKING:
    from privrelease.core.release.spec import ReleaseRequest


def prepare(home: Home, request: ReleaseRequest) -> tuple[Release, Plan]:
    """Bind a request to its registered dataset and plan it; refuse what cannot run, from public facts."""
    release, plan_ = check(home, request)
    admit(home, release, plan_)
    return release, plan_


def check(home: Home, request: ReleaseRequest, dropped: bool = False) -> tuple[Release, Plan]:
    """Everything ``prepare`` checks but the budget: the request against the dataset's registration
    (``dropped``: also one whose rows were dropped, for a preview) and the mechanism's bounds."""
    noise.check_seed(request.seed)  # a typed request from a flow run skipped spec.parse
    dataset = home.registry.get(request.dataset, dropped)
    release = _spec.bind(request, dataset)
    module = mechanisms.get(release.mechanism)
    plan_ = module.plan(release.params)
    if plan_.cost.kind != dataset.purpose:
        kinds = {"dp": "differentially private releases", "sdc": "statistical disclosure control (RA, swapping)"}
        raise SpecError(
            f"dataset {dataset.id!r} is registered for {kinds[dataset.purpose]}; mechanism "
            f"{release.mechanism!r} gives {kinds[plan_.cost.kind]}. Ask the data steward for a "
            "dataset registered for that purpose."
        )
    if isinstance(plan_.cost, DPCost) and plan_.cost.adjacency != dataset.unit.adjacency:
        raise SpecError(
            f'mechanism {release.mechanism!r} is private under "{plan_.cost.adjacency.sentence}" (a '
            f"{plan_.cost.unit} unit), but dataset {dataset.id!r} is registered with unit {dataset.unit}."
        )
    module.needs(release.params, tuple(dataset.schema.columns)).check(dataset.schema, dataset.id)
    if dataset.purpose == "sdc":
        enforce.admit(dataset, release.mechanism, module, release.params)
        why = audited.follows(home, dataset.id, release.mechanism, release.params, dataset.policy, release.release_id)
        if why:
            raise SpecError(f"release {release.release_id!r} of dataset {dataset.id!r} is refused: {why}. Nothing was charged.")
    return release, plan_


def admit(home: Home, release: Release, plan_: Plan) -> None:
    """Refuse a DP release its dataset's cap cannot take (writes nothing), naming the largest epsilon that fits."""
    charged.admit(
        home,
        claim(release, plan_),
        lambda: largest_fit(home.ledger, release.dataset.id, mechanisms.get(release.mechanism), release.params),
    )


def claim(release: Release, plan_: Plan) -> Claim:
    """What the release asks of the ledger; the charge pins the parameters and the registration version."""
    params = {
        "mechanism": release.params.model_dump(mode="json"),
        "registration": release.dataset.version,
        "test_mode": release.seed is not None,
    } | ({"policy": release.dataset.policy_entry} if release.dataset.purpose == "sdc" else {})
    return Claim(release.dataset.id, release.release_id, release.mechanism, plan_, params)


def warnings(release: Release, plan_: Plan) -> list[str]:
    """Requests that would spend budget and return mostly noise, as the mechanism warns of them (public values
    only: its parameters, its plan and the registered column names), said before the charge and in the preview."""
    module = mechanisms.declared(mechanisms.get(release.mechanism))
    return module.warnings(release.params, plan_, tuple(release.dataset.schema.columns))


def largest_fit(ledger: Ledger, dataset: str, module, params) -> str:
    """What a refused request could ask for instead: the largest epsilon of it (same delta and other parameters)
    that the dataset's filter would admit (``headroom``: the figure the preview and the catalogue show too)."""
    found = headroom.room(ledger, dataset, module.NAME, params)
    if found is None:
        return ""
    if found.epsilon is None:
        f, spends = ledger.admission(dataset)
        rest, _ = account.left(f, spends)
        if rest.epsilon <= 0:
            return "No epsilon of this request fits: the cap has no epsilon left."
        return (
            f"No epsilon of this request fits, however small: the delta it needs is more than the delta={rest.delta:.3g} "
            "left of the cap."
        )
    said = found.take()
    return f"{said[0].upper()}{said[1:]}, with the same other parameters."


def room_mb(release: Release) -> float:
    """The most a release's files may take, in MB, from public facts: its dataset's rows and columns where the unit
    makes the row count public (at most 128 bytes a cell, in CSV and Parquet both), else 32 MB; charts and the
    report 8 MB."""
    rows = release.dataset.rows
    return 8.0 + (32.0 if rows is None else rows * len(release.dataset.schema.columns) * 128 / 2**20)


def load(home: Home, release: Release) -> pd.DataFrame | Snapshot:
    """The registered snapshot, checked; for a mechanism whose Dask workers read it themselves, also
    checked to be readable on every worker (before the charge, so an unreachable store costs nothing).
    For an SDC release, only the columns its disclosure policy publishes, rows shuffled (``enforce.prepare``).
    For a DP mechanism that reads the snapshot's file itself (``READS_SNAPSHOT``), that file, checked."""
    declared = mechanisms.declared(mechanisms.get(release.mechanism))
    if release.dataset.purpose == "dp" and declared.READS_SNAPSHOT:
        checked, digest = home.registry.checked(release.dataset)
        rows: pd.DataFrame | Snapshot = Snapshot(str(checked), digest)
        path = rows.path
    else:
        rows = home.registry.load(release.dataset)
        if release.dataset.purpose == "sdc":
            if declared.record_keys(release.params):  # each record's key, from all it holds
                from privrelease.core.noise import keys  # a cell key release's only

                taken = [c for c in enforce.KEYS if c in rows.columns]
                if taken:
                    raise InternalError(f"dataset {release.dataset.id!r} has a column named {taken[0]!r}")
                secret = snapshots.record_key_secret(home.root, release.dataset.id, release.seed)
                made = {enforce.RECORD_KEY: keys.record_keys(secret, rows)}  # of the registered columns only
                column = declared.factor_keys(release.params)  # sums: each contributor's factor key too
                if column is not None:
                    made[enforce.FACTOR_KEY] = keys.factor_keys(secret, rows[release.dataset.policy.cluster], column)
                rows = rows.assign(**made)
            return enforce.prepare(rows, release.dataset.policy, noise.generator(release.seed))
        path = rows.attrs["snapshot"]
    if declared.READS_SNAPSHOT_ON_WORKERS:
        missing = parallel.unreadable(path)
        if missing:
            raise snapshots.SnapshotUnreachable(
                f"dataset {release.dataset.id!r} cannot be read on the Dask workers {', '.join(missing)}: its snapshot "
                f"{path} is not readable there. Mount the snapshot store at the same path on every "
                "Dask worker's host, or run without Dask. Nothing was charged."
            )
    return rows


def privatize(release: Release, plan_: Plan, frame: pd.DataFrame | Snapshot) -> Result:
    """Run the mechanism with the plan that was charged (``claim``'s: it draws only that plan's noise) on fresh
    randomness (a fixed seed only in test mode), then check it; its charts (public values only) are drawn
    meanwhile, where a drawing process was started (``charts.ahead``)."""
    module = mechanisms.get(release.mechanism)
    result = module.run(frame, release.params, plan_, noise.generator(release.seed))
    charts.start(result.charts)
    module.check(frame, result, release.params)
    return result


def assess(home: Home, release: Release, frame: pd.DataFrame, result: Result) -> Result:
    """An SDC release's risk and utility report, on the disclosure policy's key: the internal one written
    for the data steward under the home (never published, never logged), the external one (figures of
    the released table only) attached to the result to be published with it. A released table that
    misses a threshold of the policy is refused here (``enforce.ThresholdMissed``), after the internal
    report says by how much."""
    policy = release.dataset.policy
    module = mechanisms.get(release.mechanism)
    own = mechanisms.declared(module).assess
    if own is not None:  # a table's audit: the intruder's intervals, in place of the microdata's risk
        earlier = published_before(home, release)
        external, internal, missing = own(frame, result, release.params, earlier)
        sdc_report.write_own(home.root, release.dataset.id, release.release_id, internal | {"rules_missed": missing})
        if missing:
            raise enforce.refuse(release.dataset.id, release.release_id, missing)
        audited = {**(result.internal or {}), AUDITED_WITH: sorted(e.release_id for e in earlier)}
        return dataclasses.replace(sdc_report.attach_own(result, external), internal=audited)
    role = sdc_report.roles(release.mechanism, policy, module.protects(release.params), result.privacy, frame, result.data)
    external = sdc_report.external(result.data, role)
    internal = sdc_report.internal(frame, result.data, role, sdc_report.table_figures(external), result.persons)
    missing = enforce.missed(external, policy, internal["intruder"])  # the published cells' and the intruder's
    sdc_report.write_internal(
        home.root,
        release.dataset.id,
        release.release_id,
        release.mechanism,
        internal | {"thresholds_missed": missing},
        sdc_report.records(frame, result.data, role, result.persons),
    )
    if missing:
        raise enforce.refuse(release.dataset.id, release.release_id, missing)
    return sdc_report.attach(result, external, release.mechanism)


AUDITED_WITH = "audited_with"  # in an own-assessed result's internal figures: the earlier releases it was audited with


def published_before(home: Home, release: Release) -> list[Earlier]:
    """The releases of this mechanism published before from the dataset (any registration), each with its
    parameters and data as published: what a table is audited with (linked tables). Each data file is checked
    against its manifest's digest; one missing or that does not match fails the release (fail closed). One published while
    this release is audited fails it at publishing (``publish``, under the lock SDC releases publish under)."""
    out = []
    for release_id, (e, _) in audited.published(home, release.dataset.id, release.mechanism, release.release_id).items():
        folder = _publish.release_folder(home.releases, release.dataset.id, release_id)
        try:
            record = json.loads((folder / "manifest.json").read_text())
            name = next(f for f in record["files"] if f.endswith(".parquet"))
            matches = snapshots.sha256(folder / name) == record["files"][name]
        except (OSError, ValueError, KeyError, StopIteration):
            matches = False
        if not matches:
            raise SpecError(
                f"release {release_id} of dataset {release.dataset.id!r}, published before, cannot be read as published "
                f"from {folder} (missing, or not what its manifest says), so this release cannot be audited with it and "
                "is not published. The operator restores that folder from a backup; then release again."
            )
        same = json.loads(e.params).get("registration") == release.dataset.version
        out.append(Earlier(release_id, record["mechanism"]["params"], pd.read_parquet(folder / name), same))
    return out


def publish(home: Home, release: Release, plan_: Plan, result: Result, charge_: Charge) -> _publish.Published:
    """Write the release in place; an SDC release's disclosure policy is held for it under the lock a policy is
    recorded under, and one the steward changed since the request was checked fails it (``privrelease.core.ledger.pinned``)."""
    record = _publish.manifest(release, plan_, result, charge_.entry)
    if release.dataset.purpose != "sdc":
        return _publish.publish(home.releases, home.staging, record, result)
    with pinned.held(home.ledger, release.dataset.id, release.dataset.policy_entry):
        r = release  # held: no other SDC release publishes now; one published since the check may forbid this one
        why = audited.follows(home, r.dataset.id, r.mechanism, r.params, r.dataset.policy, r.release_id)
        if why:
            raise ReleaseConflict(
                f"release {r.release_id!r} was not published, as a release published while it ran forbids it: {why}."
            )
        if result.internal is not None and AUDITED_WITH in result.internal:  # held: no other SDC release publishes now
            now = audited.published(home, release.dataset.id, release.mechanism, release.release_id)
            meanwhile = sorted(set(now) - set(result.internal[AUDITED_WITH]))
            if meanwhile:
                raise ReleaseConflict(
                    f"release {release.release_id!r} was not published: {', '.join(meanwhile)} of dataset "
                    f"{release.dataset.id!r} was published while it was audited, and it was not audited with them. "
                    "Release it again under a new release_id: it will be."
                )
        return _publish.publish(home.releases, home.staging, record, result)


@dataclass(frozen=True)
class Steps:
    """The steps of a release that touch its rows, as plain functions (``privrelease/flows/steps.py`` runs each as a Prefect task)."""

    load: Callable[[Home, Release], pd.DataFrame | Snapshot] = load
    privatize: Callable[[Release, Plan, pd.DataFrame | Snapshot], Result] = privatize
    assess: Callable[[Home, Release, pd.DataFrame, Result], Result] = assess
    publish: Callable[[Home, Release, Plan, Result, Charge], _publish.Published] = publish


@dataclass
class ReleaseJob:
    """One release as a charged run (``privrelease.core.release.charged.Job``): its request, its steps, and what each step found."""

    request: ReleaseRequest
    steps: Steps = field(default_factory=Steps)
    log: Log = logging.getLogger("privrelease")
    release: Release | None = None
    plan: Plan | None = None
    frame: pd.DataFrame | Snapshot | None = None

    def check(self, home: Home) -> Claim:
        self.release, self.plan = check(home, self.request)
        r = self.release
        self.log.info(
            "prepare: %s on dataset %s (registration %d), release %s", r.mechanism, r.dataset.id, r.dataset.version, r.release_id
        )
        for line in warnings(r, self.plan):
            self.log.warning("warning: %s", line)
        return claim(r, self.plan)

    def admit_hint(self, home: Home) -> str:
        return largest_fit(home.ledger, self.release.dataset.id, mechanisms.get(self.release.mechanism), self.release.params)

    def room(self, home: Home) -> tuple[Path, Path, float]:
        return home.staging, home.releases, room_mb(self.release)

    def load(self, home: Home) -> None:
        self.frame = self.steps.load(home, self.release)
        self.log.info("load: the registered snapshot, checked against its registration")

    def work(self, home: Home, charge: Charge, log: Log) -> tuple[dict, dict]:
        r, steps = self.release, self.steps
        result = steps.privatize(r, self.plan, self.frame)  # the plan ``check`` made and ``claim`` charged
        log.info("privatize: %s ran and its output checks passed", r.mechanism)
        faults.point("privatize")
        if not isinstance(self.plan.cost, DPCost):
            result = steps.assess(home, r, self.frame, result)
            log.info("assess: the risk and utility report (internal for the data steward, external to publish)")
        published = steps.publish(home, r, self.plan, result, charge)
        faults.point("publish")
        log.info("publish: %s", published.folder)
        return outcome(published.manifest, published.folder, False), result.headline

    def progress(self) -> dict:
        return {}

    def earlier(self, home: Home, charge: Charge) -> dict:
        folder = _publish.release_folder(home.releases, self.release.dataset.id, self.release.release_id)
        return outcome(json.loads((folder / "manifest.json").read_text()), folder, True)


def release(
    home: Home,
    request: ReleaseRequest,
    steps: Steps = Steps(),
    log: Log = logging.getLogger("privrelease"),
    caller: Caller = Caller(),
    approver: charged.Approver = charged.refuse,
    ledger: charged.Ledgering = charged.DIRECT,
) -> dict:
    """Run one release as a charged run; returns its outcome (public values only)."""
    return charged.run(home, ReleaseJob(request, steps, log), caller, approver, log, ledger)


def outcome(manifest: dict, folder: Path, already: bool) -> dict:
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
        | ({"k": manifest["sdc_report"]["k"]} if "k" in manifest.get("sdc_report", {}) else {})
        | (
            {
                "chain": " → ".join(s["method"] for s in manifest["privacy"]["steps"]),
                "suppressed_cells": sum(s.get("suppressed_cells", 0) for s in manifest["privacy"]["steps"]),
            }
            if "steps" in manifest["privacy"]
            else {}
        )
        | ({"risk": manifest["risk"]} if "risk" in manifest else {}),
    }
