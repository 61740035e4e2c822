"""Release requests: a registered dataset, a mechanism and its public parameters, checked before anything runs.

The JSON schema in ``privrelease/schemas/release-request.schema.json`` is generated from these models
(``json_schema()``); a test keeps the file and the models in step.
"""

from __future__ import annotations

import functools
import json
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from privrelease.core import mechanisms, noise
from privrelease.core.datasets.registry import Dataset
from privrelease.core.errors import SpecError, yaml_where
from privrelease.core.ids import ID_PATTERN
from privrelease.core.mechanisms.base import StrictParams


def _request_params(module: object) -> type[StrictParams]:
    """A mechanism's parameters as a request may give them: without those the registry fills in (the
    privacy unit, the public size and the disclosure policy are the steward's facts, not the analyst's choice)."""
    filled = mechanisms.declared(module).filled
    if not filled:
        return module.Params
    fields = {n: (f.annotation, f) for n, f in module.Params.model_fields.items() if n not in filled}
    return create_model(f"{module.NAME.upper()}RequestParams", __base__=StrictParams, **fields)


def _choice(name: str, params: type[StrictParams]) -> type[BaseModel]:
    return create_model(
        f"{name.upper()}Mechanism",
        __config__=ConfigDict(extra="forbid", frozen=True),
        name=(Literal[name], Field(name, description="mechanism")),
        params=(params, ...),
    )


REQUEST_DOC = "A release request: a registered dataset, a mechanism and its public parameters, nothing else."


def _request(name: str, mechanism: object) -> type[BaseModel]:
    return create_model(
        name,
        __config__=ConfigDict(extra="forbid", frozen=True),
        __doc__=REQUEST_DOC,
        release_id=(
            str | None,
            Field(None, pattern=ID_PATTERN, description="optional; a retry with the same id is charged once"),
        ),
        dataset=(str, Field(pattern=ID_PATTERN, description="id of a dataset the data steward registered")),
        mechanism=(mechanism, ...),
        seed=(int | None, Field(None, ge=0, description="test mode only (PRIVRELEASE_TEST_MODE=1)")),
    )


@functools.cache
def _every() -> type[BaseModel]:
    """The request over every mechanism, the mechanism a typed choice: what a Prefect form renders (a selector, then
    each mechanism's own fields with their bounds and descriptions) and the request schema states."""
    choice = Union[tuple(_choice(n, _request_params(m)) for n, m in sorted(mechanisms.REGISTRY.items()))]  # noqa: UP007
    return _request("ReleaseRequest", Annotated[choice, Field(discriminator="name")])


@functools.cache
def _one(name: str) -> type[BaseModel]:
    """The same request for mechanism ``name`` alone: a command that releases with one mechanism loads no other."""
    return _request("ReleaseRequest", _choice(name, _request_params(mechanisms.get(name))))


def over_every(request: BaseModel) -> BaseModel:
    """``request`` (as ``parse`` gives it, its mechanism's model alone) as a ``ReleaseRequest``: the release flow's
    parameter, the typed choice over every mechanism (each loaded)."""
    return _every().model_validate(request.model_dump())


def __getattr__(name: str) -> object:
    """``ReleaseRequest``: the request over every mechanism, built (every mechanism loaded) when first named."""
    if name == "ReleaseRequest":
        return _every()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    ReleaseRequest = BaseModel  # a request of either model: the same fields, read the same way


@dataclass(frozen=True)
class Release:
    """A checked request against its registered dataset: parameters parsed, release id fixed."""

    request: ReleaseRequest
    release_id: str
    dataset: Dataset
    params: StrictParams

    @property
    def mechanism(self) -> str:
        return self.request.mechanism.name

    @property
    def seed(self) -> int | None:
        return self.request.seed


def _describe(exc: ValidationError, prefix: str = "", tag: str | None = None) -> str:
    parts = []
    for err in exc.errors():
        where = err["loc"]
        if tag is not None and where[:1] == ("mechanism",) and where[1:2] != ("name",):
            where = ("mechanism", tag, *where[1:])  # as the choice over every mechanism names it
        loc = ".".join(str(x) for x in (prefix, *where) if x != "")
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def parse(doc: object) -> ReleaseRequest:
    """Check a request document (already parsed from YAML or JSON) against the request schema."""
    if not isinstance(doc, dict):
        raise SpecError("a release request is a mapping with keys dataset, mechanism (and optionally release_id, seed).")
    if isinstance(doc.get("dataset"), dict):
        raise SpecError(
            "dataset is the id of a registered dataset, not a source description; the data steward "
            "registers sources with 'privrelease dataset add'."
        )
    mechanism = doc.get("mechanism")
    name = mechanism.get("name") if isinstance(mechanism, dict) else None
    if isinstance(name, str):
        mechanisms.get(name)  # an unknown name gets the list of known ones
    try:  # a named mechanism's own model (no other loaded); its errors placed as the typed choice places them
        request = _one(name).model_validate(doc) if isinstance(name, str) else _every().model_validate(doc)
    except ValidationError as exc:
        raise SpecError(f"the release request is invalid: {_describe(exc, tag=name)}.") from None
    noise.check_seed(request.seed)
    return request


def bind(request: ReleaseRequest, dataset: Dataset) -> Release:
    """The request's parameters as the mechanism takes them, with the registered unit filled in."""
    module = mechanisms.get(request.mechanism.name)
    params = request.mechanism.params.model_dump(exclude_unset=True)  # what was asked: validated again, defaults as given
    declared = mechanisms.declared(module)
    unit, rows, policy = declared.UNIT_PARAM, declared.ROWS_PARAM, declared.POLICY_PARAM
    if unit is not None:
        if dataset.unit.column is None and not declared.UNIT_OPTIONAL:
            raise SpecError(
                f"mechanism {request.mechanism.name!r} protects users, but dataset {dataset.id!r} is "
                "registered with unit 'record'; it needs a dataset registered with --unit user:COLUMN."
            )
        params[unit] = dataset.unit.column
    if rows is not None:
        if dataset.rows is None:
            raise SpecError(
                f"mechanism {request.mechanism.name!r} needs a public number of records, but dataset "
                f"{dataset.id!r} is registered with unit {dataset.unit}; it needs --unit record."
            )
        params[rows] = dataset.rows
    if policy is not None and dataset.policy is not None:
        params[policy] = dataset.policy
    if declared.DOMAINS_PARAM is not None:
        params[declared.DOMAINS_PARAM] = dataset.schema.domains()
    if declared.COLUMNS_PARAM is not None and params.get(declared.COLUMNS_PARAM) is None:
        params[declared.COLUMNS_PARAM] = list(dataset.schema.columns)
    try:
        checked = module.Params.model_validate(params)
    except ValidationError as exc:
        raise SpecError(f"the release request is invalid: {_describe(exc, 'mechanism.params')}.") from None
    release_id = request.release_id or f"{dataset.id}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
    return Release(request, release_id, dataset, checked)


def load(path: str | Path) -> ReleaseRequest:
    """Read and check a release request file (YAML or JSON)."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"release request {str(path)!r} is not a file.")
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SpecError(f"release request {path.name!r} is not valid YAML{yaml_where(exc)}.") from None
    return parse(doc)


def json_schema() -> dict:
    """The release-request JSON schema: each mechanism's parameters as a tagged alternative."""
    schema = _every().model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "privrelease release request"
    return schema


if __name__ == "__main__":
    print(json.dumps(json_schema(), indent=2))
