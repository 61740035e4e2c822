"""The forms' fields (``privrelease/flows/forms.py``): the types a form's parameters take (a registered dataset, a column, a bound on
a user's rows, lists of typed items in place of mappings), each with its ``Params`` bounds and description, and what
the forms share (the form decorator, the SDC chain around a method, the aggregate form's fields per unit)."""

from functools import partial
from typing import Annotated, Any

from pydantic import BaseModel, Field

from privrelease.core.ids import ID_PATTERN
from privrelease.core.mechanisms import aggregate
from privrelease.core.mechanisms.base import StrictParams
from privrelease.core.mechanisms.outliers import scale as outliers_scale
from privrelease.core.release.catalogue import FORM_FIELD
from privrelease.core.release.home import Home
from privrelease.core.sdc import methods


def _marked(annotation: Any, mark: str, **field: Any) -> Any:
    """A field the gate fills in from the registry when the UI opens the form (``privrelease.gate.forms``: ``dataset:<purpose>``,
    ``column``, ``user-unit``); stored as text, so a dataset registered after the forms were deployed is a valid
    value, and the release checks every name."""
    return Annotated[annotation, Field(**field, json_schema_extra={FORM_FIELD: mark})]


SdcDataset = _marked(str, "dataset:sdc", pattern=ID_PATTERN)
Column = _marked(str, "column", min_length=1)
DpDataset = _marked(str, "dataset:dp", pattern=ID_PATTERN)


def bounded(model: type[BaseModel], name: str, annotation: Any = None) -> Any:
    """A ``Params`` field's type (or ``annotation``, e.g. its names offered as choices) with its bounds, as a
    form parameter's annotation: one source for both."""
    field = model.model_fields[name]
    annotation = annotation or field.annotation
    return Annotated[(annotation, *field.metadata)] if field.metadata else annotation


ReleaseId = Annotated[str, Field(pattern=f"^$|{ID_PATTERN}")]  # empty: a fresh id
COMMON = {
    "dataset": "id of a dataset the data steward registered",
    "recode": "key variables recoded first with the disclosure policy's hierarchies (global recoding)",
    "recode_level": "categorical keys: how many hierarchy levels up",
    "suppress": "after the method: local suppression until every key cell holds the policy's k records",
    "release_id": "optional; a retry with the same id is charged once (default: a fresh id)",
    "preview": "only check the request and show its cost, the budget left and its expected accuracy (an artifact); "
    "nothing is charged or read",
}


def form(*models: type[BaseModel], **extra: str):
    """Name each parameter in the flow's docstring with its ``Params`` description: what the form
    shows under the field (Prefect takes descriptions from a Google-style Args section)."""

    def decorate(fn):
        names = fn.__code__.co_varnames[: fn.__code__.co_argcount]
        described = {**COMMON, **{n: f.description for m in models for n, f in m.model_fields.items() if f.description}}
        described |= extra
        args = "".join(f"\n    {n}: {described[n]}" for n in names if n in described)
        fn.__doc__ = f"{fn.__doc__}\n\nArgs:{args}\n"
        return fn

    return decorate


class ColumnScale(StrictParams):
    """One column's public scale: its values are standardized as (x - mean) / std."""

    column: Column = Field(description="column of the registered dataset")
    mean: bounded(outliers_scale.PublicScale, "mean") = Field(
        description=outliers_scale.PublicScale.model_fields["mean"].description
    )
    std: bounded(outliers_scale.PublicScale, "std") = Field(
        description=outliers_scale.PublicScale.model_fields["std"].description
    )


class ColumnRange(StrictParams):
    """One column's public clipping range, for a charged estimate of its scale."""

    column: Column = Field(description="column of the registered dataset")
    low: float = Field(allow_inf_nan=False, description="public lower end of the column's values")
    high: float = Field(allow_inf_nan=False, description="public upper end (above low)")


class ColumnWidth(StrictParams):
    """One swapped column's cell width."""

    column: Column = Field(description="column of the swap set")
    width: float = Field(gt=0, allow_inf_nan=False, description="cell width, in width_units")


RA_QI = ["age", "workclass", "education", "marital-status", "relationship", "race", "sex", "native-country", "salary"]
RECODE = ["age", "education", "native-country"]  # the demo census's policy has hierarchies for these


def sdc_request(name: str, params: dict, recode: list[str], recode_level: int, suppress: bool) -> tuple[str, dict]:
    """An SDC form's mechanism and parameters: the method alone, or, with ``recode`` or ``suppress``, the chain
    recode → method → local suppression (one release, one report)."""
    if not recode and not suppress:
        return name, params
    steps = ([{"method": "recode", "columns": recode, "level": recode_level}] if recode else []) + [{"method": name, **params}]
    return "sdc", {"steps": steps + ([{"method": "suppress"}] if suppress else [])}


LOGIN_SCALES = [ColumnScale(column="duration_min", mean=30, std=8), ColumnScale(column="mb_sent", mean=50, std=15),
                ColumnScale(column="hour", mean=13, std=3), ColumnScale(column="failed_logins", mean=1, std=0.5)]  # fmt: skip


class ColumnCodes(StrictParams):
    """One numeric column's top and bottom codes."""

    column: Column = Field(description="a numeric column")
    top: bounded(methods.TopCode, "top") = Field(None, description=methods.TopCode.model_fields["top"].description)
    bottom: bounded(methods.TopCode, "bottom") = Field(None, description=methods.TopCode.model_fields["bottom"].description)


class ColumnQuantiles(ColumnRange):
    """One column's quantiles within its public range."""

    q: Annotated[list[Annotated[float, Field(gt=0, lt=1)]], Field(min_length=1)] = Field(description="levels, each in (0, 1)")
    bins: bounded(aggregate.Measure, "bins") = 64
    interval_share: bounded(aggregate.Measure, "interval_share") = aggregate.Measure.model_fields["interval_share"].default


def per_user(dataset: str, **bounds: int | None) -> dict:
    """The fields that bound a user's rows, for a dataset of the user unit (empty ones: the mechanism's default, 1);
    a dataset of the record unit ignores them (each record is in one key), whatever the form held."""
    unit = Home.open().registry.get(dataset, dropped=True).unit
    return {k: v for k, v in bounds.items() if v is not None} if unit.kind == "user" else {}


UserBound = partial(_marked, int | None, "user-unit", ge=1, le=10_000)
PER_USER = "; empty: 1; a dataset of the record unit ignores it (the form leaves it out when opened for one)"
