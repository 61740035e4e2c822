"""An SDC table: counts or totals by up to four dimensions, with margins and sub-totals, protected by cell suppression.

The request names the dimensions (``group_by``), the measure (``count``, or ``sum`` of a numeric column), the
dimensions with sub-totals at every level of the policy's hierarchy (``subtotals``) and the secondary method.
Everything that decides what is sensitive is the steward's (the policy's ``tables`` rules, filled in from the
registration, never the request's): which rules, their parameters, the protection, what secondary suppression
minimises, the contributor (the policy's ``cluster`` where it names one).

1. The table (``privrelease.core.sdc.cells.table``): each cell's total, contributors and largest contributions.
2. Primary suppression (``privrelease.core.sdc.cells.rules``): cells failing a rule, with their protection intervals.
3. Secondary suppression (``privrelease.core.sdc.cells.secondary``): the exact MIP or the deviation-LP heuristic.
4. The audit (``privrelease.core.sdc.cells.audit``): the intruder's LPs over the published cells and relations give each
   sensitive cell's feasible interval; one narrower than its protection stops the release (``assess``: nothing is
   published, the failed entry names the policy's rules in words).

Released: one row per cell (each dimension's label and level, the value or nothing, the status: published,
primary, secondary, empty) and the same pivoted (``pivot.csv``). Not differential privacy.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from privrelease.core.errors import InternalError, ParameterError
from privrelease.core.mechanisms.base import Earlier, Plan, Result
from privrelease.core.mechanisms.sdc_table import perturbed
from privrelease.core.mechanisms.sdc_table import report as out
from privrelease.core.params import StrictParams
from privrelease.core.privacy.cost import NoDP
from privrelease.core.sdc import enforce
from privrelease.core.sdc.cells import audit as _audit
from privrelease.core.sdc.cells import factors as _factors
from privrelease.core.sdc.cells import linked, secondary
from privrelease.core.sdc.cells import rules as _rules
from privrelease.core.sdc.cells import table as _table
from privrelease.core.sdc.cells.table import Table
from privrelease.core.sdc.policy import Breaks, Policy
from privrelease.core.tables.schema import Needs

NAME = "sdc_table"
POLICY_PARAM = "policy"


class Params(StrictParams):
    """A table of counts or totals by up to four dimensions; the policy is the dataset's (filled in)."""

    group_by: list[str] = Field(min_length=1, max_length=4, description="the table's dimensions (published columns)")
    measure: Literal["count", "sum"] = Field("count", description="count the records, or sum a numeric column")
    column: str | None = Field(None, description="the numeric column a sum adds up (measure: sum only)")
    subtotals: list[str] = Field(
        default_factory=list, description="dimensions given sub-totals at every level of the policy's hierarchy"
    )
    method: Literal["suppression", "cell_key"] = Field(
        "suppression", description="cell suppression, or every cell perturbed by the cell key method"
    )
    secondary: Literal["auto", "exact", "heuristic"] = Field(
        "auto", description="secondary suppression: the exact MIP, the LP heuristic, or exact where it fits"
    )
    policy: Policy | None = Field(None, description="the dataset's disclosure policy (from the registration)")

    @model_validator(mode="after")
    def _shape(self) -> Params:
        if len(set(self.group_by)) != len(self.group_by):
            raise ValueError(f"group_by names a column twice: {self.group_by}")
        if (self.measure == "sum") != (self.column is not None):
            raise ValueError("measure: sum needs column (the numeric column it adds up); count takes none")
        if self.column is not None and self.column in self.group_by:
            raise ValueError(f"column {self.column!r} is also a dimension of the table")
        stray = [d for d in self.subtotals if d not in self.group_by]
        if stray:
            raise ValueError(f"subtotals names {stray}, which are not in group_by {self.group_by}")
        return self


def rules_of(params: Params) -> _rules.TableRules:
    """The policy's table rules for this request, or the refusal that names what the policy lacks."""
    policy = params.policy
    if policy is None:
        raise ParameterError("an sdc_table needs the dataset's disclosure policy")
    rules = policy.tables
    if rules is None:
        raise ParameterError(
            "sdc_table: the disclosure policy sets no rules for tables (its tables section); the data steward "
            "adds one (min_frequency, dominance, p_percent) before a table of this dataset can be released"
        )
    if params.method == "cell_key":
        if params.measure == "count" and rules.cell_key is None:
            raise ParameterError(
                "sdc_table: the cell key method perturbs counts by the policy's perturbation table (tables.cell_key: "
                "D, V, js), which this policy lacks; the data steward sets it, or ask for method: suppression"
            )
        if params.measure == "sum" and rules.cell_key_sums is None:
            raise ParameterError(
                "sdc_table: the cell key method multiplies each contribution to a sum by a factor its contributor's key "
                "selects (tables.cell_key_sums: low, high, max_guess), which this policy lacks; the data steward sets "
                "it, or ask for method: suppression"
            )
    elif params.measure == "count" and rules.min_frequency is None:
        raise ParameterError(
            "sdc_table: a count table is protected by the policy's min_frequency rule, which this policy lacks; "
            "the data steward sets tables.min_frequency"
        )
    if params.measure == "sum" and not rules.magnitude():
        raise ParameterError(
            "sdc_table: a magnitude table (measure: sum) is protected by the policy's dominance or p_percent rule, "
            "and this policy has neither; the data steward sets tables.dominance or tables.p_percent"
        )
    for d in params.subtotals:
        h = policy.hierarchies.get(d)
        if h is None:
            raise ParameterError(
                f"sdc_table: sub-totals of {d!r} need its hierarchy in the disclosure policy, which has none for it "
                f"(hierarchies: {sorted(policy.hierarchies)}); leave {d!r} out of subtotals (its total is published)"
            )
        if isinstance(h, Breaks):
            raise ParameterError(f"sdc_table: {d!r} has numeric breaks, not a hierarchy of categories: no sub-totals")
    return rules


def needs(params: Params, schema: tuple[str, ...]) -> Needs:
    if params.policy is not None:
        rules_of(params)
    columns = [*params.group_by, *([params.column] if params.column else [])]
    return Needs(columns=tuple(columns), numeric=(params.column,) if params.column else ())


def protects(params: Params) -> list[str]:
    """Every key variable: the table publishes no record; a key it groups by is protected by the cell rules, the
    others are summed over."""
    return list(params.policy.key_vars.all) if params.policy is not None else list(params.group_by)


def plan(params: Params) -> Plan:
    by = " × ".join(params.group_by)
    what = "counts" if params.measure == "count" else f"sums of {params.column}"
    if params.method == "cell_key" and params.measure == "sum":
        how = "the cell key method: every contribution multiplied by its contributor's factor, the same in every table"
    elif params.method == "cell_key":
        how = "the cell key method: every count perturbed by its cell's key, the same cell alike in every table"
    else:
        how = "cell suppression by the disclosure policy's rules, audited by the intruder's linear programs"
    return Plan(
        cost=NoDP("statistical disclosure control (not differential privacy)"),
        guarantee=f"SDC table of {what} by {by}: {how}; not differential privacy",
    )


def notes(params: Params, plan_: Plan, columns: tuple[str, ...]) -> list[str]:
    """What a preview can say of a table from public values (the policy's rules and the request), and what it
    cannot: which cells are sensitive depends on the rows, which it does not read."""
    rules = params.policy.tables if params.policy is not None else None
    if rules is None:
        return []
    if params.method == "cell_key" and params.measure == "sum" and rules.cell_key_sums is not None:
        return [
            f"{perturbed.sum_words(rules)}; every cell is published, and margins are the sums of the cells below them; "
            "the same cell has the same sum in every table of this dataset.",
            f"Sums of {params.column} are published by one method: this table is refused after a suppressed table of "
            "them, after a cell key table of them under other factors, or after a microdata release of this dataset.",
        ]
    if params.method == "cell_key" and rules.cell_key is not None:
        return [
            f"{perturbed.words(rules.cell_key)}; every cell is published, margins perturbed as cells of their own "
            "(they need not add up); the same cell has the same count in every table of this dataset.",
            "A cell key table is audited with the suppressed tables of this dataset published before it: if its "
            "counts, each within the perturbation of the truth, would narrow one of their suppressed cells, it is "
            "not published.",
        ]
    return [
        f"primary suppression by the policy's rules: {'; '.join(rules.words().values())}; secondary suppression: "
        f"{params.secondary}, minimising the suppressed {'cells' if rules.cost == 'count' else 'total'}.",
        "Which cells are sensitive, and so how many are suppressed, depends on the rows, which a preview does not "
        "read: it cannot say. The release is refused if the intruder's linear programs, over this table and the "
        "tables of the same measure published before it from this dataset, narrow a sensitive cell below its "
        "protection.",
    ]


def _contributors(frame: pd.DataFrame, policy: Policy) -> np.ndarray:
    if policy.cluster is None:
        return np.arange(len(frame), dtype=np.int64)
    ids = pd.factorize(frame[policy.cluster], use_na_sentinel=True)[0].astype(np.int64)
    alone = ids < 0  # a record without a cluster id is a contributor of its own
    ids[alone] = ids.max(initial=-1) + 1 + np.arange(int(alone.sum()))
    return ids


def shaped(frame: pd.DataFrame, params: Params) -> tuple[pd.DataFrame, list[_table.Dim]]:
    """The rows with the table's dimensions as labels (an empty value as ``(missing)``), and the dimensions."""
    policy = params.policy
    frame = frame.assign(**{d: frame[d].astype("string").fillna(out.MISSING) for d in params.group_by})
    dims = [
        _table.dimension(d, sorted(frame[d].unique()), policy.hierarchies[d] if d in params.subtotals else None)
        for d in params.group_by
    ]
    return frame, dims


def tabulate(frame: pd.DataFrame, params: Params, factors: np.ndarray | None = None) -> _table.Table:
    """The table of ``frame`` as the request and the policy shape it (no protection yet), each contribution
    moved by its row's factor where ``factors`` are given (sums by the cell key method: ``factors.moved``)."""
    policy, rules = params.policy, rules_of(params)
    frame, dims = shaped(frame, params)
    if params.measure == "sum":
        value = pd.to_numeric(frame[params.column], errors="coerce").to_numpy(dtype=float)
        if np.isnan(value).any() or (value < 0).any():
            raise ParameterError(
                f"sdc_table: column {params.column!r} has empty or negative values; a magnitude table's rules and "
                "audit take non-negative contributions"
            )
    else:
        value = np.ones(len(frame))
    if factors is not None:
        value = _factors.moved(value, factors)
    top_n = max(2, rules.dominance.n if rules.dominance else 2)
    return _table.build(frame, dims, value, _contributors(frame, policy), top_n)


def protect(t: _table.Table, params: Params):
    """Primary and secondary suppression of ``t`` and its audit: (status by cell, pattern, audit, protection)."""
    rules = rules_of(params)
    sensitive, lower, upper, failed = _rules.primary(rules, params.measure, t.contributors, t.values, t.top)
    empty = t.contributors == 0
    a = _table.relations(t.shape, t.dims)
    pattern = secondary.choose(params.secondary, a, t.values, sensitive, lower, upper, empty, rules.cost, t.dims)
    checked = _audit.audit(a, t.values, pattern.suppressed, sensitive, lower, upper, everything=pattern.suppressed.sum() <= 400)
    status = np.where(empty, "empty", np.where(sensitive, "primary", np.where(pattern.suppressed, "secondary", "published")))
    return status, pattern, checked, (lower, upper, failed)


def record_keys(params: Params) -> bool:
    """The cell key method reads each record's key (``enforce.RECORD_KEY``); suppression reads none."""
    return params.method == "cell_key"


def follows(params: Params, before: dict[str, tuple[str, dict]]) -> str | None:
    """Why this table may not follow the releases published before from the dataset (by release id, each one's
    mechanism and parameters): sums of its column by the other method, or by the cell key method under another
    perturbation (``perturbed.conflict``); sums of a column a microdata release published record by record
    (``enforce.MICRODATA``). None: it may."""
    said: dict[str, list[str]] = {}
    for release_id, (mechanism, then) in sorted(before.items()):
        if mechanism != NAME:
            why = enforce.MICRODATA.format(column=params.column) if params.measure == "sum" else None
        elif (then.get("measure"), then.get("column")) == (params.measure, params.column):
            why = perturbed.conflict(params, Params.model_validate(then))
        else:
            why = None
        if why:
            said.setdefault(why, []).append(release_id)
    return "; ".join(f"{why} (published before: {', '.join(ids)})" for why, ids in said.items()) or None


def factor_keys(params: Params) -> str | None:
    """Sums by the cell key method read each contributor's factor key (``enforce.FACTOR_KEY``) of their column."""
    return params.column if params.method == "cell_key" and params.measure == "sum" else None


def run(frame: pd.DataFrame, params: Params, plan: Plan, rng: np.random.Generator) -> Result:
    rules = rules_of(params)
    t = tabulate(frame, params)
    if params.method == "cell_key" and params.measure == "sum":
        return perturbed.sums(t, tabulate(frame, params, perturbed.factors_of(frame, rules.cell_key_sums)), params, rules)
    if params.method == "cell_key":
        return perturbed.run(t, shaped(frame, params)[0], params, rules)
    status, pattern, checked, (lower, upper, failed) = protect(t, params)
    tidy = out.tidy(t, status, params)
    figures = out.figures(status, t.values, pattern, checked)
    internal = out.internal(t, status, pattern, checked, lower, upper, failed, rules, params)
    bits = int(np.bitwise_or.reduce(failed[checked.exposed], initial=0))
    said = rules.words()
    exposed = [said[r] for r, bit in _rules.RULE_BITS.items() if bits & bit and r in said]
    return Result(
        tidy,
        {"method": "cell suppression", "rules": list(said.values())} | figures,
        out.report(figures, params, rules),
        [],
        {k: figures[k] for k in ("cells", "primary", "secondary")},
        name="table",
        tables={"pivot": out.pivot(tidy, params)},
        internal=internal | {"exposed": [int(c) for c in checked.exposed], "exposed_rules": exposed},
    )


def check(original: pd.DataFrame, result: Result, params: Params) -> None:
    """Every cell once; a suppressed or empty cell's value never published as a number it is not; a perturbed
    count within its perturbation table's reach (``perturbed.check``)."""
    data = result.data
    value = out.value_column(params)
    if data.duplicated([*params.group_by, *(f"{d}_level" for d in params.group_by)]).any():
        raise InternalError("an sdc_table released a cell twice")
    if set(enforce.KEYS) & set(data.columns):
        raise InternalError("an sdc_table released its records' keys")
    if params.method == "cell_key" and params.measure == "sum":
        perturbed.check_sums(tabulate(original, params), result, params, rules_of(params))
        return
    if params.method == "cell_key":
        perturbed.check(tabulate(original, params), original, result, params, rules_of(params))
        return
    hidden = data["status"].isin(["primary", "secondary"])
    if data.loc[hidden, value].notna().any():
        raise InternalError("an sdc_table published a suppressed cell's value")


def assess(frame: pd.DataFrame, result: Result, params: Params, earlier: list[Earlier] = ()) -> tuple[dict, dict, list[str]]:
    """The audit's verdict: every sensitive cell's interval at least its protection, else the policy's rules
    missed, in its words (public: the rules' names and parameters, never a figure of the table); then the same
    over this table and every table of the same records and measure published before it (``linked``)."""
    internal = dict(result.internal or {})
    missed = (internal.get("exposed_rules") or list(rules_of(params).words().values())) if internal.get("exposed") else []
    if not missed:
        missed = _linked(frame, result, params, earlier, internal)
    external = {k: result.privacy[k] for k in out.FIGURES if k in result.privacy} | {"audit": "failed" if missed else "passed"}
    return external, internal, missed


def _linked(frame: pd.DataFrame, result: Result, params: Params, earlier: list[Earlier], internal: dict) -> list[str]:
    """The linked audit's verdict (``internal`` gets its figures): the rules missed, naming the earlier tables. An
    earlier table of the same measure is linked when it is of this snapshot, or of an earlier registration whose
    published cells this snapshot rebuilds exactly (the same records registered again); one of this snapshot that
    cannot be rebuilt fails the audit."""
    rules = rules_of(params)
    same = [
        (e, Params.model_validate(e.params))
        for e in earlier
        if (e.params.get("measure"), e.params.get("column")) == (params.measure, params.column)
    ]
    refused = follows(params, {e.release_id: (NAME, e.params) for e, _ in same})
    if refused:  # one published since this release was checked, which the linked audit cannot read (publish refuses it too)
        internal["linked"] = {"with": [], "refused": refused}
        return [refused]
    if params.method == "cell_key" and params.measure == "sum":
        return []  # nothing suppressed, and each contribution moved alike in every table
    tables = [_linked_table("this table", frame, params, rules, result.data)]
    apart = []
    for e, then in same:
        today = rules.model_copy(update={"cell_key": then.policy.tables.cell_key})  # its perturbation was its own
        then = then.model_copy(update={"policy": then.policy.model_copy(update={"tables": today})})
        try:
            tables.append(_linked_table(e.release_id, frame, then, rules, e.data))
        except InternalError:
            if e.same_registration:
                raise
            apart.append(e.release_id)  # other records: not a linear relation of these
    if len(tables) == 1 and not apart:
        return []
    internal["linked"] = {"with": [t.name for t in tables[1:]], "other_records": apart}
    if len(tables) == 1:
        return []
    words = "; ".join(rules.words().values())
    try:
        exposed = linked.audit(tables)
    except linked.TooLarge as exc:
        internal["linked"]["verdict"] = str(exc)
        return [f"{words}, with the tables published before it ({exc}; not audited, so not published)"]
    internal["linked"]["exposed"] = {t.name: e.tolist() for t, e in zip(tables, exposed)}
    if not any(e.size for e in exposed):
        return []
    others = ", ".join(t.name for t in tables[1:])
    return [
        f"{words}, with the tables published before it: together with {others} an intruder's linear programs narrow a protected cell"
    ]


def _linked_table(name: str, frame: pd.DataFrame, params: Params, rules: _rules.TableRules, data: pd.DataFrame) -> linked.Linked:
    """A table rebuilt from the snapshot as ``params`` shaped it, its cells' statuses as ``data`` published them
    (matched by each dimension's label and level), sensitive by ``rules``; one that cannot be matched cell for cell,
    or whose published values differ from the rebuilt ones (by more than a cell key table's D), fails the audit
    (``InternalError``: fail closed). A cell key table's cells are all published, each within its D (``slack``),
    none sensitive: the perturbation protects them."""
    t = tabulate(frame, params)
    nodes = t.nodes()
    keys = [tuple((d.labels[n[i]], d.depth[n[i]]) for i, d in enumerate(t.dims)) for n in nodes]
    said = {
        tuple((row[d], int(row[f"{d}_level"])) for d in params.group_by): (row["status"], row[out.value_column(params)])
        for row in data.to_dict("records")
    }
    if len(said) != len(keys) or any(k not in said for k in keys):
        raise InternalError(f"the table published as {name} cannot be rebuilt cell for cell from its snapshot")
    status = np.array([said[k][0] for k in keys], dtype=object)
    shown = np.array([np.nan if pd.isna(said[k][1]) else float(said[k][1]) for k in keys])
    published = status == "published"
    slack = float(params.policy.tables.cell_key.D) if params.method == "cell_key" else 0.0
    reach = slack + 1e-6 * max(1.0, float(np.abs(t.values).max(initial=0)))
    if np.abs(shown[published] - t.values[published]).max(initial=0) > reach:
        raise InternalError(f"the table published as {name} does not agree with its snapshot")
    if slack:
        none = np.zeros(t.size, dtype=bool)
        return linked.Linked(name, Table(t.dims, shown, t.contributors, t.top), none, none, shown * 0, shown * 0, slack)
    sensitive, lower, upper, _ = _rules.primary(rules, params.measure, t.contributors, t.values, t.top)
    return linked.Linked(name, t, np.isin(status, ["primary", "secondary"]), sensitive, lower, upper)
