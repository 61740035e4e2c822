"""A registered dataset's public facts: its privacy unit and what a release request is checked against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from privrelease.core.errors import SpecError
from privrelease.core.ids import check_id
from privrelease.core.privacy.adjacency import AddRemoveUser, ReplaceRecord
from privrelease.core.sdc.policy import Policy
from privrelease.core.tables.schema import Schema

FORMATS = ("csv", "parquet", "jsonl")
PURPOSES = ("dp", "sdc")


@dataclass(frozen=True)
class Unit:
    """The privacy unit: one record, or every record of one user (``user:COLUMN``)."""

    kind: Literal["record", "user"]
    column: str | None = None

    @classmethod
    def parse(cls, text: str) -> Unit:
        if text == "record":
            return cls("record")
        if text.startswith("user:") and text[5:]:
            return cls("user", text[5:])
        raise SpecError(f"--unit must be 'record' or 'user:COLUMN' (the column naming each user), got {text!r}.")

    def __str__(self) -> str:
        return "record" if self.kind == "record" else f"user:{self.column}"

    @property
    def adjacency(self) -> ReplaceRecord | AddRemoveUser:
        """The neighbouring relation DP releases of this dataset are made under."""
        return ReplaceRecord() if self.kind == "record" else AddRemoveUser(self.column)


@dataclass(frozen=True)
class Dataset:
    """A registered dataset's public facts: all a release request is checked against."""

    id: str
    version: int
    unit: Unit
    purpose: Literal["dp", "sdc"]
    schema: Schema
    rows: int | None  # public only under the record unit
    registered: str
    policy: Policy | None = None  # an sdc dataset's disclosure policy (the steward's; None: no release possible)
    policy_entry: int | None = None  # the ledger entry that recorded it

    def facts(self) -> dict:
        """What the ledger records of a registration or refresh: public facts only, the row count where the unit
        makes it public; never the source's path or the snapshot's digest."""
        return {"version": self.version, "unit": str(self.unit), "purpose": self.purpose,
                "columns": len(self.schema.columns)} | ({"rows": self.rows} if self.rows is not None else {})  # fmt: skip

    def public(self) -> dict:
        return {
            "id": self.id,
            "version": self.version,
            "unit": str(self.unit),
            "purpose": self.purpose,
            "adjacency": self.unit.adjacency.sentence if self.purpose == "dp" else None,
            "rows": self.rows,
            "registered": self.registered,
            "schema": {n: c.model_dump() for n, c in self.schema.columns.items()},
            **(
                {"policy": self.policy.public() if self.policy else None, "policy_entry": self.policy_entry}
                if self.purpose == "sdc"
                else {}
            ),
        }


def arguments(dataset_id: str, fmt: str, unit: Unit, purpose: str, policy: Policy | None) -> None:
    """A registration's arguments checked on their own, before the registry or any row is read."""
    check_id(dataset_id, "dataset id")
    if fmt not in FORMATS:
        raise SpecError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}.")
    if purpose not in PURPOSES:
        raise SpecError(f"--purpose must be 'dp' (differentially private releases) or 'sdc' (RA, swapping), got {purpose!r}.")
    if purpose == "sdc" and unit.kind != "record":
        raise SpecError(
            "an sdc dataset releases perturbed records: its unit is 'record'. When several records belong to one "
            f"person or household ({unit.column!r}), register with --unit record and name that column as the "
            "disclosure policy's cluster: (as sdcMicro's hhId): the household risk counts their records together."
        )
    if policy is not None and purpose != "sdc":
        raise SpecError(
            "--policy is a disclosure policy for an sdc dataset; a dp dataset is protected by its privacy unit and budget."
        )
