"""Parameter types every request shares: the strict base of parameter objects, and the id pattern."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$"  # dataset, release and run ids: they name folders and ledger rows


class StrictParams(BaseModel):
    """Base for parameter objects: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)
