"""What the data steward is told of their own rows at registration, refresh and in the dry runs (``dataset check``,
``dataset policy --check``): warnings about raw data, said on the steward's command line only, never in a release,
an artifact or anything an analyst reads (they name counts and values of the rows).

- a repeated identifier: a column named like one (``patient_id``, ``person``, ``customer``) whose values repeat, so
  several rows belong to one person: k-anonymity counts rows, not people, and a dp dataset of the record unit
  protects rows, not people. The tools are the policy's ``cluster`` (sdcMicro's ``hhId``: the risk and local
  suppression count the cluster's records together) and, for dp, ``--unit user:COLUMN``;
- a near-unique or identifier-like column a release would publish (an sdc policy's key, sensitive or publishable
  column): most of its values distinct (a postcode of 72% distinct values), or named like one (``name``, ``email``);
- invisible or padded category values: a text value with a zero-width character, a non-breaking space, a byte-order
  mark, or spaces before or after it, which becomes a category of its own (a one-record ward); ``--normalise``
  reads them without (``infer.Reading``).
"""

from __future__ import annotations

import re

from privrelease.core.datasets.infer import normalised_sql
from privrelease.core.db import quote_ident
from privrelease.core.sdc.policy import Policy
from privrelease.core.tables.schema import Schema

ID_NAME = re.compile(
    r"(^|[_\W])(id|ids|uuid|guid|key|no|nr|number|code|ssn|nhs|mrn)$|^(patient|person|customer|client|employee|member|"
    r"user|household|visitor|account|staff|pupil|student)(_?(id|no|nr|number|code|key))?$",
    re.IGNORECASE,
)
PERSONAL_NAME = re.compile(
    r"^(first_?|last_?|full_?|sur|given_?|family_?)?name$|e_?mail|phone|mobile|address|street|^dob$|birth_?date|passport",
    re.IGNORECASE,
)
NEAR_UNIQUE = 0.5  # a published column with more distinct values than this share of its present ones
SHOWN = 3  # values named per column


def warnings(con, table: str, schema: Schema, unit_column: str | None, purpose: str, policy: Policy | None) -> list[str]:
    """The steward's warnings about ``table`` (a registration's rows in DuckDB), in the order above."""
    names = list(schema.columns)
    counts = _counts(con, table, names)
    rows = counts.pop("")
    out = [*_repeated(counts, rows, unit_column, purpose, policy)]
    if purpose == "sdc" and policy is not None:
        out += _published(counts, policy.releasable(names), policy)
    text = [c for c in names if schema.columns[c].type == "string"]
    out += _padded(con, table, text)
    return out


def on_policy(con, table: str, schema: Schema, policy: Policy) -> list[str]:
    """What the steward should know of a disclosure policy on the registered rows (``dataset policy --check``): the
    warnings above that depend on it, and how many records lie in key cells smaller than its k before any release's
    methods (what a release's recoding and local suppression must cover)."""
    names = list(schema.columns)
    counts = _counts(con, table, names)
    rows = counts.pop("")
    out = [*_repeated(counts, rows, None, "sdc", policy), *_published(counts, policy.releasable(names), policy)]
    key, k = policy.key_vars.all, policy.thresholds.k
    if key and k:
        cells = f"SELECT count(*) AS n FROM {table} GROUP BY {', '.join(quote_ident(c) for c in key)}"
        small, few = con.execute(f"SELECT coalesce(sum(n) FILTER (WHERE n < {int(k)}), 0), count(*) FILTER (WHERE n < {int(k)}) FROM ({cells})").fetchone()  # fmt: skip
        out.append(
            f"on the registered rows, before any release's methods, {small:,} of {rows:,} records lie in {few:,} key "
            f"cells of fewer than k={k} records (key: {', '.join(key)}): a release's recoding and local suppression "
            "must cover them."
        )
    return out


def _counts(con, table: str, names: list[str]) -> dict[str, tuple[int, int]]:
    """Per column: its distinct and present values; under "": the rows."""
    parts = ", ".join(f"count(DISTINCT {quote_ident(c)}), count({quote_ident(c)})" for c in names)
    found = con.execute(f"SELECT count(*){', ' + parts if parts else ''} FROM {table}").fetchone()
    return {"": found[0], **{c: (found[1 + 2 * i], found[2 + 2 * i]) for i, c in enumerate(names)}}


def _repeated(counts: dict, rows: int, unit_column: str | None, purpose: str, policy: Policy | None) -> list[str]:
    out = []
    for column, (distinct, present) in counts.items():
        if not ID_NAME.search(column) or not 1 < distinct < present or column == unit_column:
            continue
        if policy is not None and column == policy.cluster:
            continue
        said = (
            f"column {column!r} looks like an identifier and repeats ({present:,} values, {distinct:,} distinct): "
            "several rows belong to one person or household? "
        )
        if purpose == "sdc":
            said += (
                "k-anonymity counts rows, not people (a cell of 6 records may hold 2 of them): name it as the policy's "
                "cluster (cluster: " + column + ", as sdcMicro's hhId), so that the household risk counts a person's "
                "rows together (thresholds: household_risk) and a release labels them afresh"
            )
        else:
            said += "the record unit protects one row, not a person with several: register with --unit user:" + column
        out.append(said + ".")
    return out


def _published(counts: dict, published: list[str], policy: Policy) -> list[str]:
    out = []
    roles = policy.roles()
    for column in published:
        if column == policy.cluster or column == policy.weight:
            continue
        distinct, present = counts[column]
        role = next((r for r, cs in roles.items() if column in cs), "published")
        if PERSONAL_NAME.search(column):
            out.append(
                f"column {column!r} is named like a personal detail and the policy publishes it ({role}): if it "
                "identifies people, name it under identifiers: (never published)."
            )
        elif present > 1 and distinct < present and distinct > NEAR_UNIQUE * present:
            out.append(
                f"column {column!r} is near-unique ({distinct / present:.0%} of its {present:,} values distinct) and the "
                f"policy publishes it ({role}): a value held by one or two records points at them. Recode it (a "
                "hierarchy in the policy), make it a key variable, or name it under identifiers."
            )
    return out


def _padded(con, table: str, text: list[str]) -> list[str]:
    out = []
    for column in text:
        found = con.execute(
            f"SELECT v, count(*) FROM (SELECT {quote_ident(column)} AS v FROM {table}) "
            f"WHERE v IS NOT NULL AND v IS DISTINCT FROM {normalised_sql('v')} GROUP BY v ORDER BY count(*) DESC, v"
        ).fetchall()
        if found:
            records = sum(n for _, n in found)
            shown = ", ".join(repr(v) for v, _ in found[:SHOWN]) + (" ..." if len(found) > SHOWN else "")
            out.append(
                f"column {column!r} has {len(found)} values with invisible characters or spaces around them ({shown}; "
                f"{records:,} records): each is a category of its own, apart from the value it looks like. Register "
                "with --normalise to read them without (it is kept for refresh), or clean the source."
            )
    return out
