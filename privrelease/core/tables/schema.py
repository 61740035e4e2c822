"""The public shape of a registered table, and what a mechanism needs of it.

A release is checked against the registered schema alone: checking the data itself at release
time would answer questions about the rows for free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from privrelease.core.errors import SpecError

TYPES = ("integer", "float", "string", "boolean", "date", "timestamp")


class Column(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["integer", "float", "string", "boolean", "date", "timestamp"]
    nullable: bool = False
    domain: list[str | int | bool] | None = Field(
        None, min_length=1, description="the column's public values, declared by the steward (aggregate releases every key)"
    )

    @model_serializer(mode="wrap")
    def _without_empty_domain(self, handler):  # a column without a domain dumps as it did before domains
        out = handler(self)
        if out.get("domain") is None:
            out.pop("domain", None)
        return out

    @model_validator(mode="after")
    def _domain(self) -> Column:
        kinds = {"integer": int, "string": str, "boolean": bool}
        if self.domain is not None:
            kind = kinds.get(self.type)
            if kind is None or any(type(v) is not kind for v in self.domain):
                raise ValueError(
                    f"a domain lists values of an integer, string or boolean column, all of its type; got {self.domain!r}"
                )
            if len(set(self.domain)) != len(self.domain):
                raise ValueError("a domain lists a value twice")
        return self


class Schema(BaseModel):
    """The steward's declared schema: column names in file order, each with its type."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    columns: dict[str, Column] = Field(min_length=1)

    def domains(self) -> dict[str, list]:
        """The public domains the steward declared, by column."""
        return {n: list(c.domain) for n, c in self.columns.items() if c.domain is not None}

    def numeric(self, name: str) -> bool:
        return self.columns[name].type in ("integer", "float")

    def yaml(self) -> str:
        return yaml.safe_dump({"columns": {n: c.model_dump() for n, c in self.columns.items()}}, sort_keys=False)


@dataclass(frozen=True)
class Needs:
    """What a mechanism needs of its input: columns present, non-null, numeric."""

    columns: tuple[str, ...]
    numeric: tuple[str, ...] = ()

    def check(self, schema: Schema, dataset: str) -> None:
        """Refuse, from the public schema only, a request the data cannot serve."""
        missing = [c for c in self.columns if c not in schema.columns]
        if missing:
            raise SpecError(f"dataset {dataset!r} has no column {missing[0]!r}; its columns are {list(schema.columns)}.")
        nullable = [c for c in self.columns if schema.columns[c].nullable]
        if nullable:
            raise SpecError(
                f"column {nullable[0]!r} of dataset {dataset!r} may hold empty values (its registered schema says "
                "nullable: true), and this mechanism needs a column without them: an empty value has nothing to count, "
                "sum, average or rank by. Choose another column, or ask the data steward to register this one without "
                "empty values (filled in the source, or those rows left out, then privrelease dataset refresh)."
            )
        text = [c for c in self.numeric if not schema.numeric(c)]
        if text:
            raise SpecError(
                f"column {text[0]!r} of dataset {dataset!r} is registered as "
                f"{schema.columns[text[0]].type}; this mechanism needs a numeric column."
            )
