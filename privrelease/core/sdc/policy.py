"""The data steward's disclosure policy of an SDC dataset: what each column is, and what a release must meet.

As sdcMicro's ``createSdcObj`` and ARX's attribute types, the steward decides before anything runs:

- ``identifiers``: direct identifiers, never published (dropped before any method runs);
- ``keys``: the key variables (quasi-identifiers), ``categorical`` and ``numeric``: every release
  protects at least these, and its risk is measured on them, whatever the request protected;
- ``sensitive``: sensitive variables, published, and the l-diversity threshold is measured on them;
- ``publishable``: insensitive columns, published as they are;
- ``weight``: a sampling weight (published; the risk uses it as sdcMicro's ``weightVar``);
- ``cluster``: a household or cluster id (published as fresh random labels; the household risk
  uses it as sdcMicro's ``hhId``);
- ``thresholds``: what the released table must meet, else it is not published;
- ``hierarchies``: generalisation hierarchies of key variables for global recoding (a numeric
  key's ``breaks``, a categorical key's levels of ``{value: group}`` maps), and a table's sub-totals;
- ``tables``: the rules a table of counts or totals meets (``privrelease.core.sdc.cells.rules``: minimum
  frequency, (n, k)-dominance, the p%-rule, protection, what secondary suppression minimises).

A column the policy does not name is never published. The policy is public (column names and
thresholds) and is recorded on the ledger, each change an entry under the hash chain.
"""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from privrelease.core.errors import SpecError
from privrelease.core.sdc.cells.rules import TableRules
from privrelease.core.tables.readers import steward_file
from privrelease.core.tables.schema import Schema


class PolicyMismatch(SpecError):
    """A disclosure policy names a column the schema lacks, or one of a type its role does not allow."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Keys(_Strict):
    categorical: list[str] = Field(default_factory=list, description="categorical key variables")
    numeric: list[str] = Field(default_factory=list, description="numeric key variables")

    @property
    def all(self) -> list[str]:
        return [*self.categorical, *self.numeric]


class RiskLimit(_Strict):
    """At most ``max_share`` of the records may have an individual risk above ``above``."""

    above: float = Field(gt=0, le=1, description="individual re-identification risk r_k counted as too high")
    max_share: float = Field(ge=0, le=1, description="largest share of records allowed above it")


class Thresholds(_Strict):
    """What a released table must meet, measured on the policy's key (None: not checked)."""

    k: int | None = Field(3, ge=2, description="every key cell of the released table holds at least k records")
    risk: RiskLimit | None = Field(None, description="at most a share of records above an individual risk")
    global_risk: float | None = Field(None, gt=0, le=1, description="expected re-identifications / records, at most")
    l: int | None = Field(None, ge=2, description="distinct l-diversity of every sensitive variable in every key cell")  # noqa: E741
    household_risk: float | None = Field(None, gt=0, le=1, description="highest household risk, at most (needs cluster)")

    def words(self) -> dict[str, str]:
        """Each threshold set, by its field, in words (public)."""
        out = {}
        if self.k is not None:
            out["k"] = f"k-anonymity on the key (k ≥ {self.k})"
        if self.risk is not None:
            share = "no record" if self.risk.max_share == 0 else f"at most {self.risk.max_share:.2%} of records"
            out["risk"] = f"{share} with individual risk above {self.risk.above:g}"
        if self.global_risk is not None:
            out["global_risk"] = f"global risk at most {self.global_risk:g}"
        if self.l is not None:
            out["l"] = f"l-diversity of the sensitive variables (l ≥ {self.l})"
        if self.household_risk is not None:
            out["household_risk"] = f"household risk at most {self.household_risk:g}"
        return out

    def named(self) -> list[str]:
        """The thresholds set, in words (public)."""
        return list(self.words().values())


class Breaks(_Strict):
    """A numeric key's recoding: half-open intervals [b_i, b_{i+1}); values outside go to the end intervals."""

    breaks: list[float] = Field(min_length=2, description="increasing interval ends")

    @model_validator(mode="after")
    def _increasing(self) -> Breaks:
        b = self.breaks
        if any(not math.isfinite(x) for x in b) or any(x >= y for x, y in zip(b, b[1:])):
            raise ValueError("breaks must be finite and strictly increasing")
        return self


Hierarchy = Breaks | list[dict[str, str]]  # numeric breaks, or categorical levels (each maps the level below)


class Policy(_Strict):
    """A dataset's disclosure policy (see the module's docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    identifiers: list[str] = Field(default_factory=list)
    key_vars: Keys = Field(alias="keys")  # not ``keys``: Prefect takes an object with keys() for a mapping
    sensitive: list[str] = Field(default_factory=list)
    publishable: list[str] = Field(default_factory=list)
    weight: str | None = None
    cluster: str | None = None
    thresholds: Thresholds = Field(default_factory=Thresholds)
    hierarchies: dict[str, Hierarchy] = Field(default_factory=dict)
    tables: TableRules | None = None  # the rules a table of counts or totals meets (``privrelease.core.sdc.cells.rules``)

    @field_validator("hierarchies", mode="before")
    @classmethod
    def _hierarchy_shapes(cls, value: object) -> object:
        """Each hierarchy's shape, said in the steward's terms (a union's own errors name its types); a
        categorical level's values and groups as text, as the recoding compares them (YAML reads 1: a as a number)."""
        if not isinstance(value, dict):
            raise ValueError("hierarchies is a mapping from each key variable to its hierarchy")
        out = {}
        for name, h in value.items():
            if isinstance(h, dict) and set(h) == {"breaks"}:
                out[name] = h
            elif isinstance(h, list) and all(isinstance(level, dict) for level in h):
                out[name] = [{str(a): str(b) for a, b in level.items()} for level in h]
            else:
                raise ValueError(
                    f"{name!r}: a numeric key's hierarchy is {{breaks: [b0, b1, ...]}}, a categorical "
                    "key's a list of levels, each a {value: group} map"
                )
        return out

    @model_validator(mode="after")
    def _roles(self) -> Policy:
        if not self.key_vars.all:
            raise ValueError("keys: name at least one key variable (categorical or numeric)")
        seen: dict[str, str] = {}
        for role, columns in self.roles().items():
            for c in columns:
                if c in seen:
                    raise ValueError(f"column {c!r} is named twice ({seen[c]} and {role}); give each column one role")
                seen[c] = role
        for name, h in self.hierarchies.items():
            if name not in self.key_vars.all:
                raise ValueError(f"hierarchies: {name!r} is not a key variable; only keys are recoded")
            if isinstance(h, Breaks) != (name in self.key_vars.numeric):
                raise ValueError(
                    f"hierarchies: {name!r} needs {'breaks' if name in self.key_vars.numeric else 'levels'} "
                    "(breaks for a numeric key, a list of {value: group} maps for a categorical one)"
                )
            if isinstance(h, list) and not h:
                raise ValueError(f"hierarchies: {name!r} has no level")
        if self.tables is not None and self.tables.cell_key_sums is not None and self.cluster is None:
            raise ValueError(
                "tables.cell_key_sums needs cluster: each contributor's factor is keyed by its id, which must stay the "
                "same across refreshes; name the contributor's id column (a person, household or enterprise id) as cluster"
            )
        if self.thresholds.household_risk is not None and self.cluster is None:
            raise ValueError("thresholds: household_risk needs cluster (the household id)")
        if self.thresholds.l is not None and not self.sensitive:
            raise ValueError("thresholds: l needs at least one sensitive variable")
        return self

    def roles(self) -> dict[str, list[str]]:
        return {
            "identifiers": self.identifiers,
            "keys.categorical": self.key_vars.categorical,
            "keys.numeric": self.key_vars.numeric,
            "sensitive": self.sensitive,
            "publishable": self.publishable,
            "weight": [self.weight] if self.weight else [],
            "cluster": [self.cluster] if self.cluster else [],
        }

    def releasable(self, columns: list[str]) -> list[str]:
        """The columns a release may hold, in the registered order: everything named but identifiers."""
        allowed = set(self.key_vars.all) | set(self.sensitive) | set(self.publishable)
        allowed |= {c for c in (self.weight, self.cluster) if c}
        return [c for c in columns if c in allowed]

    def check(self, schema: Schema, dataset: str) -> None:
        """Every named column is registered, with a type its role allows (public facts only)."""
        for role, columns in self.roles().items():
            missing = [c for c in columns if c not in schema.columns]
            if missing:
                raise PolicyMismatch(
                    f"the disclosure policy of {dataset!r} names {role} {missing}, which the registered "
                    f"schema lacks; its columns are {list(schema.columns)}."
                )
        for role, columns in (("keys.numeric", self.key_vars.numeric), ("weight", [self.weight] if self.weight else [])):
            text = [c for c in columns if not schema.numeric(c)]
            if text:
                raise PolicyMismatch(
                    f"the disclosure policy of {dataset!r} names {text[0]!r} as {role}, but it is "
                    f"registered as {schema.columns[text[0]].type}; {role} must be numeric."
                )
        sums = self.tables is not None and self.tables.cell_key_sums is not None
        if sums and schema.columns[self.cluster].nullable:
            raise PolicyMismatch(
                f"the cluster column {self.cluster!r} may be empty (nullable), and sums by the cell key method key each "
                "contributor's factor by its id: register it with an id on every record, or leave out tables.cell_key_sums."
            )
        if self.weight and schema.columns[self.weight].nullable:
            raise PolicyMismatch(f"the weight column {self.weight!r} may be empty (nullable); every record needs its weight.")
        nullable = [c for c in self.key_vars.all if schema.columns[c].nullable]
        if nullable:
            raise PolicyMismatch(
                f"the disclosure policy of {dataset!r} names key variables {nullable} that may be empty "
                "(nullable in the registered schema): a missing key value reads as a suppressed one in the "
                "release, and sdcMicro's freqCalc (shown beside the published figures) counts it as matching "
                "every value, so a table with a few missing keys would pass any k there. Register them with "
                "missing values as a category of their own (for example 'unknown'), or leave them out of the key."
            )

    def unnamed(self, schema: Schema) -> list[str]:
        """Registered columns the policy does not name: never published."""
        named = {c for cs in self.roles().values() for c in cs}
        return [c for c in schema.columns if c not in named]

    def public(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)


def parse(doc: object, where: str) -> Policy:
    """A policy document (already parsed), with the errors a steward can act on."""
    if not isinstance(doc, dict):
        raise SpecError(
            f"{where} is not a mapping; a disclosure policy names keys (and optionally identifiers, "
            "sensitive, publishable, weight, cluster, thresholds, hierarchies)."
        )
    try:
        return Policy.model_validate(doc)
    except ValidationError as exc:
        said = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'policy'}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors()
        )
        raise SpecError(f"{where} is invalid ({said}).") from None


def read(path: str) -> Policy:
    """A steward's policy file (YAML or JSON)."""
    return parse(steward_file(path, "--policy"), f"--policy {Path(path).name!r}")
