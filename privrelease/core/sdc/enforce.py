"""The disclosure policy applied to an SDC release, at each step of the pipeline.

- ``admit`` (with the request's check, before anything is charged or read): the dataset has a
  policy; the request names only columns the policy lets a release hold (never a direct
  identifier nor a column the policy does not name); it protects at least the policy's key
  variables (naming the ones it leaves out), a key protected only nominally (top coding) only
  under a policy with a threshold measured on the key.
- ``prepare`` (before the mechanism runs): the table cut to the policy's published columns, its
  rows shuffled with the release's randomness (OS entropy; a seed only in test mode), so no
  released row keeps its input position, and cluster ids replaced by fresh random labels (no step
  sees the registered ids, whose order may follow the input's).
- ``missed`` (after the risk is measured on the policy's key): the thresholds the released table
  misses, in public words; a release that misses one is not published.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from privrelease.core.errors import SpecError, UserError
from privrelease.core.sdc.policy import Policy


class ThresholdMissed(UserError):
    """The released table would not meet the steward's disclosure policy: it is not published."""


def admit(dataset, mechanism: str, module, params) -> None:
    """Refuse, from public facts only, an SDC request its dataset's policy does not allow."""
    policy: Policy | None = dataset.policy
    if policy is None:
        raise SpecError(
            f"dataset {dataset.id!r} has no disclosure policy, so no SDC release of it is possible; its "
            f"data steward sets one with: privrelease dataset policy {dataset.id} --policy FILE."
        )
    columns = list(dataset.schema.columns)
    named = module.needs(params, tuple(columns)).columns
    identifiers = [c for c in named if c in policy.identifiers]
    if identifiers:
        raise SpecError(
            f"{identifiers} of dataset {dataset.id!r} is a direct identifier in its disclosure policy: it "
            "is never published, so no release can name it."
        )
    fixed = [c for c in named if c in (policy.weight, policy.cluster)]
    if fixed:
        raise SpecError(
            f"{fixed} of dataset {dataset.id!r} is the weight or cluster id of its disclosure policy: it is "
            "published as the policy says, so no release names it."
        )
    published = set(policy.releasable(columns))
    unnamed = [c for c in named if c not in published]
    if unnamed:
        raise SpecError(
            f"{unnamed} of dataset {dataset.id!r} is not named by its disclosure policy, so it is never "
            f"published; the columns a release may hold are {policy.releasable(columns)}."
        )
    _steps_admitted(dataset, mechanism, params, policy)
    protected = set(module.protects(params))
    missing = [c for c in policy.key_vars.all if c not in protected]
    if missing:
        raise SpecError(
            f"the request leaves key variables {missing} of dataset {dataset.id!r} unprotected; its disclosure "
            f"policy's key is {policy.key_vars.all}, and a release protects every one of them (more is allowed). "
            f"Add them to {_where(mechanism)}, or add a step that protects them (sdc: recode, suppress, ...)."
        )
    nominal = [c for c in getattr(module, "nominal", lambda _: [])(params) if c in policy.key_vars.all]
    if nominal and not identifying(policy):
        raise SpecError(
            f"key variables {nominal} of dataset {dataset.id!r} are protected only by topcode, which changes nothing "
            "where its bounds lie outside the values (not public, so nothing tells before the rows are read): it "
            "protects only under a policy with a threshold measured on the key (k, risk, global_risk or "
            "household_risk), and this policy sets none. Add a step that protects them (recode, suppress, "
            "microaggregate, noise, pram), or ask the data steward for a threshold."
        )


def identifying(policy: Policy) -> list[str]:
    """The policy's thresholds measured on re-identification through the key (l-diversity is not one), in words."""
    said = policy.thresholds.words()
    return [said[k] for k in ("k", "risk", "global_risk", "household_risk") if k in said]


def _steps_admitted(dataset, mechanism: str, params, policy: Policy) -> None:
    """What a step's parameters cannot do to this dataset, known from its registration (before any charge)."""
    steps = list(getattr(params, "steps", [])) or [params]
    names = [getattr(s, "method", mechanism) for s in steps]
    for name, step in zip(names, steps):
        if getattr(step, "others", "keep") == "eds":
            outside = [
                c for c in policy.releasable(list(dataset.schema.columns)) if c not in step.swap_set and dataset.schema.numeric(c)
            ]
            fixed = [c for c in outside if c in (policy.weight, policy.cluster)]
            if fixed:
                raise SpecError(
                    f"{name}: others: eds would rank-swap the weight or cluster id {fixed}, which are "
                    "published as the disclosure policy says; use others: keep."
                )
            nullable = [c for c in outside if dataset.schema.columns[c].nullable]
            if nullable:
                raise SpecError(
                    f"{name}: others: eds rank-swaps every numeric column outside the swap set, and "
                    f"{nullable} may be empty (nullable); EDS needs complete columns: use others: keep."
                )
        if name in ("mews", "meds", "eds") and dataset.rows is not None and dataset.rows < 2:  # else refused after the charge
            raise SpecError(f"{name}: swapping needs at least 2 records; dataset {dataset.id!r} has {dataset.rows}.")
        k = getattr(step, "k", None) if name in ("microaggregate", "suppress") else None
        if k is not None and dataset.rows is not None and k > dataset.rows:
            raise SpecError(f"{name}: k = {k} is more than the {dataset.rows} records of dataset {dataset.id!r}.")


def notes(dataset, module, params) -> list[str]:
    """What a preview can tell of an SDC release from public values: what is published and dropped, what
    the risk is measured on, the thresholds, and whether the request meets one by construction."""
    policy: Policy = dataset.policy
    columns = list(dataset.schema.columns)
    out = [
        f"published columns: {policy.releasable(columns)}; dropped: identifiers {policy.identifiers}, columns "
        f"the policy does not name {policy.unnamed(dataset.schema)}; rows shuffled.",
        f"risk is measured on the policy's key {policy.key_vars.all} after the last step.",
    ]
    nominal = [c for c in getattr(module, "nominal", lambda _: [])(params) if c in policy.key_vars.all]
    if nominal:
        out.append(
            f"{nominal} are protected only by topcode, nominally (its bounds may lie outside the values): the "
            "thresholds, measured on the final table, are what protects them."
        )
    named = policy.thresholds.named()
    if not named:
        return [*out, "the policy sets no threshold: the table is published as the methods leave it."]
    steps = getattr(params, "steps", [])
    last = steps[-1] if steps else None
    k = policy.thresholds.k
    if k is not None and last is not None and last.method == "suppress" and (last.k or k) >= k:
        out.append(
            f"k-anonymity on the key (k ≥ {k}) holds by construction: the last step suppresses key values "
            "until every released key cell (a suppressed value a value of its own) holds that many records, so "
            "every person is compatible with at least that many released records given their true key."
        )
    out.append(
        "thresholds the released table must meet: " + "; ".join(named) + ". Whether it does depends on the "
        "rows: a release that misses one is not published, and its failed ledger entry names the thresholds "
        "missed (never a figure of the table)."
    )
    return out


def _where(mechanism: str) -> str:
    return {"ra": "qi", "mews": "swap_set", "meds": "swap_set", "eds": "swap_set"}.get(mechanism, "the steps")


class Rows:
    """The registered rows of a prepared table, in its order: carried in ``attrs`` for the steward's
    internal report, compared and copied by identity (pandas compares and deep-copies ``attrs``)."""

    def __init__(self, order: np.ndarray):
        self.order = order

    def __deepcopy__(self, memo) -> Rows:
        return self


RECORD_KEY = "__record_key"  # a prepared frame's column of record keys, where the mechanism asks for them (never published)
FACTOR_KEY = "__factor_key"  # and of its contributors' factor keys (sums by the cell key method; never published)
KEYS = (RECORD_KEY, FACTOR_KEY)


MICRODATA = (
    "a microdata release of this dataset published {column} record by record, and a table of its sums (by cell "
    "suppression or the cell key method) beside it would give its protected cells away: a column's sums are not "
    "published from a dataset whose microdata holds it"
)
TABLES = "sdc_table"  # the mechanism whose tables of sums ``after_tables`` holds a microdata release to


def after_tables(policy: Policy, before: dict[str, tuple[str, dict]]) -> str | None:
    """Why a microdata release (it publishes every column the policy makes releasable, record by record) may not
    follow the releases published before from the dataset (by release id, each one's mechanism and parameters):
    tables of sums of a column it would publish. None: it may."""
    said: dict[str, list[str]] = {}
    for release_id, (mechanism, params) in sorted(before.items()):
        column = params.get("column") if mechanism == TABLES and params.get("measure") == "sum" else None
        if column is not None and policy.releasable([column]):
            said.setdefault(column, []).append(release_id)
    return (
        "; ".join(
            f"sums of {column} were published by tables of this dataset ({', '.join(ids)}), protected by cell "
            "suppression or the cell key method, and a microdata release would publish it record by record, which "
            "gives their protected cells away: this dataset's microdata is not released while it holds that column"
            for column, ids in said.items()
        )
        or None
    )


def prepare(frame: pd.DataFrame, policy: Policy, rng: np.random.Generator) -> pd.DataFrame:
    """The policy's published columns only (and the records' keys, where the cell key method asked for them: ``KEYS``),
    rows in a random order (the input rows kept in ``attrs``), cluster ids as fresh random labels 1..H (households
    stay together, their ids do not reach any step)."""
    order = rng.permutation(len(frame))
    kept = policy.releasable(list(frame.columns)) + [k for k in KEYS if k in frame.columns]
    out = frame[kept].iloc[order].reset_index(drop=True)
    if policy.cluster is not None:
        codes, uniques = pd.factorize(out[policy.cluster], use_na_sentinel=True)
        labels = rng.permutation(len(uniques)) + 1
        out[policy.cluster] = pd.array(np.where(codes >= 0, labels[np.maximum(codes, 0)], 0), dtype="Int64")
        out.loc[codes < 0, policy.cluster] = pd.NA
    out.attrs["input_rows"] = Rows(order)
    return out


def missed(figures: dict, policy: Policy, *more: dict) -> list[str]:
    """The thresholds the released table misses (their names and the policy's values, never a figure), on its
    figures and on each of ``more`` (the same figures counted another way: the intruder's)."""
    out = _missed(figures, policy)
    for other in more:
        out += [said for said in _missed(other, policy) if said not in out]
    return out


def _missed(figures: dict, policy: Policy) -> list[str]:
    t = policy.thresholds
    out = []
    said = t.words()
    numbers = [v for k, v in figures.items() if isinstance(v, float)]
    if any(not math.isfinite(v) or v < 0 for v in numbers):  # fail closed: a figure that cannot be compared
        return list(said.values()) or ["finite risk figures"]
    if t.k is not None and figures["records"] and figures["k"] < t.k:
        out.append(said["k"])
    if t.risk is not None and figures["records_risk_above"]["records"] > t.risk.max_share * figures["records"]:
        out.append(said["risk"])
    if t.global_risk is not None and figures["global_risk"] > t.global_risk:
        out.append(said["global_risk"])
    if t.l is not None and figures["records"] and figures["l_min"] < t.l:
        out.append(said["l"])
    if t.household_risk is not None and figures["household_risk_max"] > t.household_risk:
        out.append(said["household_risk"])
    return out


def refuse(dataset: str, release_id: str, missing: list[str]) -> ThresholdMissed:
    return ThresholdMissed(
        f"release {release_id!r} of dataset {dataset!r} was not published: the released table would not meet its "
        f"disclosure policy ({'; '.join(missing)}). Protect more (coarser recoding, local suppression to the policy's "
        "k, a wider swap) and release again under a new release_id; the data steward's internal report has the figures."
    )
