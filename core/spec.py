"""Release specs: the YAML a steward writes, checked before anything runs.

The JSON schema in ``schemas/release-spec.schema.json`` is generated from these models
(``json_schema()``); a test keeps the file and the models in step.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from core import mechanisms, noise
from core.errors import SpecError
from core.mechanisms.base import StrictParams

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$"


class DatasetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=ID_PATTERN, description="dataset id: the ledger's budget unit and the release folder")
    source: str = Field(min_length=1, description="path of the input file, relative to the spec's folder")
    format: Literal["csv", "parquet", "jsonl"] = Field(description="file format")
    delimiter: str = Field(",", min_length=1, max_length=1, description="CSV field delimiter")
    suite: str | list[dict] | None = Field(
        None, description="expectation suite: a JSON file (next to the spec or in schemas/suites) or inline expectations"
    )


class MechanismSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="mechanism name")
    params: dict = Field(default_factory=dict, description="the mechanism's parameters")


class ReleaseSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    release_id: str | None = Field(None, pattern=ID_PATTERN, description="optional; a retry with the same id is charged once")
    dataset: DatasetSpec
    mechanism: MechanismSpec
    seed: int | None = Field(None, ge=0, description="test mode only (PRIVRELEASE_TEST_MODE=1)")


def _choice(name: str, params: type[StrictParams]) -> type[BaseModel]:
    return create_model(
        f"{name.upper()}Mechanism", __config__=ConfigDict(extra="forbid", frozen=True),
        name=(Literal[name], Field(name, description="mechanism")), params=(params, ...),
    )  # fmt: skip


# The mechanism as a typed choice: what a Prefect form renders (a selector, then each
# mechanism's own fields with their bounds and descriptions).
MechanismChoice = Annotated[
    Union[tuple(_choice(n, m.Params) for n, m in sorted(mechanisms.REGISTRY.items()))],  # noqa: UP007
    Field(discriminator="name"),
]


class ReleaseRequest(BaseModel):
    """A release spec as a typed flow parameter (for runs triggered from the UI)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    release_id: str | None = Field(None, pattern=ID_PATTERN, description="optional; a retry with the same id is charged once")
    dataset: DatasetSpec = Field(description="the input; a relative source is resolved against $PRIVRELEASE_HOME")
    mechanism: MechanismChoice


@dataclass(frozen=True)
class Release:
    """A checked spec: paths resolved, mechanism parameters parsed, release id fixed."""

    spec: ReleaseSpec
    release_id: str
    source: Path
    spec_dir: Path
    params: StrictParams

    @property
    def dataset(self) -> str:
        return self.spec.dataset.id

    @property
    def mechanism(self) -> str:
        return self.spec.mechanism.name


def _describe(exc: ValidationError, prefix: str = "") -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in (prefix, *err["loc"]) if x != "")
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def parse(doc: object, spec_dir: Path) -> Release:
    """Check a spec document (already parsed from YAML) and resolve it."""
    if not isinstance(doc, dict):
        raise SpecError("a release spec is a YAML mapping with keys dataset, mechanism (and optionally release_id, seed).")
    try:
        spec = ReleaseSpec.model_validate(doc)
    except ValidationError as exc:
        raise SpecError(f"the release spec is invalid: {_describe(exc)}.") from None
    noise.check_seed(spec.seed)
    module = mechanisms.get(spec.mechanism.name)
    try:
        params = module.Params.model_validate(spec.mechanism.params)
    except ValidationError as exc:
        raise SpecError(f"the release spec is invalid: {_describe(exc, 'mechanism.params')}.") from None
    release_id = spec.release_id or (
        f"{spec.dataset.id}-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
    )
    source = (spec_dir / spec.dataset.source).resolve()
    return Release(spec, release_id, source, spec_dir.resolve(), params)


def load(path: str | Path) -> Release:
    """Read and check a release spec file."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"release spec {str(path)!r} is not a file.")
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise SpecError(f"release spec {path.name!r} is not valid YAML{where}.") from None
    return parse(doc, path.parent)


def json_schema() -> dict:
    """The release-spec JSON schema: the typed request (each mechanism's parameters as a tagged
    alternative) plus the test-mode ``seed`` of a spec file."""
    schema = ReleaseRequest.model_json_schema()
    schema["properties"]["seed"] = ReleaseSpec.model_json_schema()["properties"]["seed"]
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "privrelease release spec"
    return schema


if __name__ == "__main__":
    print(json.dumps(json_schema(), indent=2))
