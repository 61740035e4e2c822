"""The analyst's forms: one flow per mechanism, each with flat typed parameters.

Prefect's default UI renders a flat parameter (a string, a number with its bounds, a choice, a
list of typed items) as a form field, but a tagged union of objects as a raw JSON box. So each
mechanism gets a flow of its own whose parameters are that mechanism's public parameters, with
the bounds, defaults and descriptions of its ``Params``; the flow assembles the same release
request a request file or the command line gives and runs the one pipeline (``run_request``).
Mapping-shaped parameters (outliers' per-column scales, MEWS's per-column widths) are lists of
typed items here. No operator setting (home, runner, cluster) is a parameter.
"""

from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

from prefect import flow
from pydantic import BaseModel, Field

from core import paths, settings
from core.datasets.registry import Registry
from core.errors import SpecError
from core.ids import ID_PATTERN
from core.mechanisms import aggregate, dpne, outliers, outliers_scale, ra, swapping
from core.mechanisms.base import StrictParams
from flows.release import run_request


def _registered(purpose: str) -> tuple[list[str], list[str]]:
    """The datasets of ``purpose`` in the home of the process that deploys the forms (with
    $PRIVRELEASE_FORMS_FROM_REGISTRY=1), and their public column names (an sdc dataset's: the ones its
    policy publishes): what the forms offer by name. Elsewhere (a worker running a form, a test) the
    fields take text: the deployment's stored schema is what the server checks, and the release checks
    every name anyway. A dataset registered later appears when the forms are deployed again (make serve
    deploys them at every start)."""
    home = settings.get(settings.HOME)
    if not settings.flag(settings.FORMS_FROM_REGISTRY) or not home or not paths.database(Path(home)).exists():
        return [], []
    datasets = [d for d in Registry(Path(home)).list() if d.purpose == purpose and (d.policy or purpose == "dp")]
    names = [list(d.schema.columns) for d in datasets]
    columns = [c for d, n in zip(datasets, names) for c in (d.policy.published(n) if d.policy else n)]
    return [d.id for d in datasets], list(dict.fromkeys(columns))


def _choice(names: list[str], text: Any) -> Any:
    return Literal[tuple(names)] if names else text


(SDC_DATASETS, SDC_COLUMNS), (DP_DATASETS, DP_COLUMNS) = _registered("sdc"), _registered("dp")
SdcDataset = _choice(SDC_DATASETS, Annotated[str, Field(pattern=ID_PATTERN)])
Column = _choice(SDC_COLUMNS, Annotated[str, Field(min_length=1)])
DpDataset = _choice(DP_DATASETS, Annotated[str, Field(pattern=ID_PATTERN)])
DpColumn = _choice(DP_COLUMNS, Annotated[str, Field(min_length=1)])


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

    column: DpColumn = Field(description="column of the registered dataset")
    mean: bounded(outliers_scale.PublicScale, "mean") = Field(
        description=outliers_scale.PublicScale.model_fields["mean"].description
    )
    std: bounded(outliers_scale.PublicScale, "std") = Field(
        description=outliers_scale.PublicScale.model_fields["std"].description
    )


class ColumnRange(StrictParams):
    """One column's public clipping range, for a charged estimate of its scale."""

    column: DpColumn = Field(description="column of the registered dataset")
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


@flow(name="release-ra", persist_result=False)
@form(
    ra.Params,
    p="which QI column to redraw (k = 0): uniformly, or with the Pa-maximizing (entropy) choice",
    p_per_column="instead of p: one probability per QI column, in qi's order, summing to 1",
    k="0: RA, one QI cell per record redrawn; 1 .. number of QI columns: Enhanced RA, k distinct cells",
)
def ra_release(
    dataset: SdcDataset = "census-demo",
    qi: Annotated[list[Column], Field(min_length=1)] = RA_QI,
    sensitive: Column = "occupation",
    k: Annotated[int, Field(ge=0)] = 0,
    p: Literal["uniform", "entropy"] = "uniform",
    p_per_column: list[Annotated[float, Field(ge=0, le=1)]] = [],  # noqa: B006
    recode: list[Column] = RECODE,
    recode_level: Annotated[int, Field(ge=1, le=10)] = 1,
    suppress: bool = True,
    release_id: ReleaseId = "",
    preview: bool = False,
) -> dict:
    """Release a registered table with RA (Yang & Qiao) or Enhanced RA: QI cells redrawn from their
    column's marginal; the sensitive column is never changed. Optionally recoded first and locally
    suppressed after, to meet the data steward's disclosure policy."""
    params = {"qi": qi, "sensitive": sensitive, "p": p_per_column or p} | ({"k": k} if k else {})
    return run_request(release_id, dataset, *sdc_request("ra", params, recode, recode_level, suppress), preview)


@flow(name="release-mews", persist_result=False)
@form(
    swapping.MEWSParams,
    t_lb="smallest candidate cell width (in width_units); used when no width is given",
    t_ub="largest candidate cell width; the width is drawn from [t_lb, t_ub] and kept secret",
    width="one explicit cell width for every swapped column (instead of a secret width from [t_lb, t_ub])",
    widths="explicit cell widths, one per swapped column (instead of a secret width)",
    k="rank-swapping depth (tuples per bin) when others is eds",
)
def mews_release(
    dataset: SdcDataset = "census-demo",
    swap_set: Annotated[list[Column], Field(min_length=1)] = ["age", "hours-per-week"],  # noqa: B006
    t_lb: Annotated[float, Field(gt=0)] = 1.0,
    t_ub: Annotated[float, Field(gt=0)] = 3.0,
    width: Annotated[float | None, Field(gt=0)] = None,
    widths: list[ColumnWidth] = [],  # noqa: B006
    width_units: Literal["sd", "absolute"] = "sd",
    swap_mode: swapping.SwapMode = "cyclic",
    others: Literal["eds", "keep"] = "keep",
    k: Annotated[int | None, Field(ge=2)] = None,
    candidates: bounded(swapping.MEWSParams, "candidates") = 100,
    singletons: Literal["merge", "suppress"] = "merge",
    recode: list[Column] = [],  # noqa: B006
    recode_level: Annotated[int, Field(ge=1, le=10)] = 1,
    suppress: bool = True,
    release_id: ReleaseId = "",
    preview: bool = False,
) -> dict:
    """Swap values inside the cells of an equi-width grid (MEWS): every value moves by less than the
    cell width, whose secret draw is the privacy argument."""
    if width is not None or widths:
        choice = {"widths": width if not widths else {w.column: w.width for w in widths}}
    else:
        choice = {"t_range": [t_lb, t_ub]}
    params = {
        "swap_set": swap_set,
        "width_units": width_units,
        "swap_mode": swap_mode,
        "others": others,
        "candidates": candidates,
        "singletons": singletons,
        **choice,
    } | ({"k": k} if k is not None else {})
    return run_request(release_id, dataset, *sdc_request("mews", params, recode, recode_level, suppress), preview)


def _depth(name: str, swap_set: list[str], k: int):
    """MEDS and EDS share their parameters: the swapped columns and the bin depth."""

    def depth_release(
        dataset: SdcDataset = "census-demo",
        swap_set: Annotated[list[Column], Field(min_length=1)] = swap_set,
        k: Annotated[int, Field(ge=2)] = k,
        swap_mode: swapping.SwapMode = "cyclic",
        others: Literal["eds", "keep"] = "keep",
        recode: list[Column] = [],  # noqa: B006
        recode_level: Annotated[int, Field(ge=1, le=10)] = 1,
        suppress: bool = True,
        release_id: ReleaseId = "",
        preview: bool = False,
    ) -> dict:
        params = {"swap_set": swap_set, "k": k, "swap_mode": swap_mode, "others": others}
        return run_request(release_id, dataset, *sdc_request(name, params, recode, recode_level, suppress), preview)

    depth_release.__doc__ = {
        "meds": "Swap values inside bins of k tuples built around the farthest pair (MEDS, multivariate equi-depth).",
        "eds": "Rank-swap values inside bins of k consecutive ranks (EDS, univariate equi-depth).",
    }[name]
    described = form(swapping.DepthParams, k="tuples per bin (bin depth)")(depth_release)
    return flow(name=f"release-{name}", persist_result=False)(described)


meds_release = _depth("meds", ["age", "hours-per-week"], 20)
eds_release = _depth("eds", ["hours-per-week"], 10)


@flow(name="release-dpne", persist_result=False)
@form(
    dpne.Params,
    delta0="cap on a user's distinct k-grams at every level",
    delta0_per_level="instead of delta0: one cap per level 1 .. T",
)
def dpne_release(
    dataset: DpDataset = "posts-demo",
    text_column: bounded(dpne.Params, "text_column") = "text",
    epsilon: bounded(dpne.Params, "epsilon") = 1.0,
    delta: bounded(dpne.Params, "delta") = 1e-7,
    T: bounded(dpne.Params, "T") = 4,
    delta0: dpne.Cap = 10,
    delta0_per_level: list[dpne.Cap] = [],  # noqa: B006
    eta: bounded(dpne.Params, "eta") = 0.01,
    split: Literal["equal", "geometric"] = "equal",
    c: bounded(dpne.Params, "c") = None,
    pruning: Literal["both", "single"] = "both",
    tokenizer: Literal["whitespace", "words"] = "words",
    publish_weights: bool = False,
    release_id: ReleaseId = "",
    preview: bool = False,
) -> dict:
    """Release the frequent n-grams of a registered corpus with DPNE (user-level differential privacy)."""
    params = {
        "text_column": text_column,
        "epsilon": epsilon,
        "delta": delta,
        "T": T,
        "delta0": delta0_per_level or delta0,
        "eta": eta,
        "split": split,
        "c": c,
        "pruning": pruning,
        "tokenizer": tokenizer,
        "publish_weights": publish_weights,
    }
    return run_request(release_id, dataset, "dpne", params, preview)


def _outlier_params(
    columns: list[str], standardize: list[ColumnScale], estimate: list[ColumnRange], estimate_share: float, **given: Any
) -> dict:
    """The outliers request: public scales, a charged estimate from public ranges, or raw units (neither)."""
    if standardize and estimate:
        raise SpecError("give either standardize (public scales) or estimate (a charged estimate), not both.")
    scales: object = False
    if standardize:
        scales = {s.column: {"mean": s.mean, "std": s.std} for s in standardize}
    elif estimate:
        scales = {"bounds": {r.column: [r.low, r.high] for r in estimate}, "share": estimate_share}
    return {"columns": columns or None, "standardize": scales, **given}


OUTLIERS = {
    "standardize": "public mean and std per column (e.g. from an earlier published report); empty: raw units",
    "estimate": "instead of standardize: estimate each column's scale privately (charged) within a public range",
    "estimate_share": "fraction of epsilon and delta spent on that estimate",
}


@flow(name="release-outlier-count", persist_result=False)
@form(outliers.Params, **OUTLIERS, columns="the subspace: the columns the distance is measured over")
def outlier_count_release(
    dataset: DpDataset = "logins-demo",
    columns: Annotated[list[DpColumn], Field(min_length=1)] = ["mb_sent", "hour"],  # noqa: B006
    k: bounded(outliers.Params, "k") = 3,
    r: bounded(outliers.Params, "r") = 0.2,
    epsilon: bounded(outliers.Params, "epsilon") = 0.5,
    delta: outliers.CountDelta = 1e-6,
    standardize: list[ColumnScale] = LOGIN_SCALES,
    estimate: list[ColumnRange] = [],  # noqa: B006
    estimate_share: bounded(outliers_scale.PrivateScale, "share") = 0.1,
    scale_share: bounded(outliers.Params, "scale_share") = 0.1,
    noise: Literal["auto", "smooth", "global"] = "auto",
    release_id: ReleaseId = "",
    preview: bool = False,
) -> dict:
    """Release a DP count of the outliers of a registered numeric table in one subspace (record-level DP)."""
    params = partial(
        _outlier_params,
        columns,
        standardize,
        estimate,
        estimate_share,
        query="count",
        k=k,
        r=r,
        epsilon=epsilon,
        delta=delta,
        scale_share=scale_share,
        noise=noise,
    )
    return run_request(release_id, dataset, "outliers", params, preview)


@flow(name="release-outlier-top-subspaces", persist_result=False)
@form(outliers.Params, **OUTLIERS, columns="the candidate columns (empty: every column)")
def outlier_top_release(
    dataset: DpDataset = "logins-demo",
    columns: list[DpColumn] = [],  # noqa: B006
    c: bounded(outliers.Params, "c") = 1,
    h: bounded(outliers.Params, "h") = 2,
    k: bounded(outliers.Params, "k") = 3,
    r: bounded(outliers.Params, "r") = 0.05,
    epsilon: bounded(outliers.Params, "epsilon") = 1.0,
    delta: bounded(outliers.Params, "delta") = 1e-5,
    release_counts: bool = True,
    count_share: bounded(outliers.Params, "count_share") = 0.5,
    standardize: list[ColumnScale] = LOGIN_SCALES,
    estimate: list[ColumnRange] = [],  # noqa: B006
    estimate_share: bounded(outliers_scale.PrivateScale, "share") = 0.1,
    scale_share: bounded(outliers.Params, "scale_share") = 0.1,
    noise: Literal["auto", "smooth", "global"] = "auto",
    release_id: ReleaseId = "",
    preview: bool = False,
) -> dict:
    """Release which c-column subspaces hold the most outliers of a registered numeric table, and
    (optionally) their DP counts (record-level DP)."""
    params = partial(
        _outlier_params,
        columns,
        standardize,
        estimate,
        estimate_share,
        query="top_subspaces",
        c=c,
        h=h,
        k=k,
        r=r,
        epsilon=epsilon,
        delta=delta,
        release_counts=release_counts,
        count_share=count_share,
        scale_share=scale_share,
        noise=noise,
    )
    return run_request(release_id, dataset, "outliers", params, preview)


class ColumnQuantiles(ColumnRange):
    """One column's quantiles within its public range."""

    q: Annotated[list[Annotated[float, Field(gt=0, lt=1)]], Field(min_length=1)] = Field(description="levels, each in (0, 1)")
    bins: bounded(aggregate.Measure, "bins") = 64
    interval_share: bounded(aggregate.Measure, "interval_share") = aggregate.Measure.model_fields["interval_share"].default


@flow(name="release-aggregate", persist_result=False)
@form(aggregate.Params, count="release the count per key", distinct="columns whose distinct values are counted per key",
      sums="columns summed per key, each clipped to its public range", means="columns averaged per key, clipped likewise",
      quantiles="columns whose quantiles are released per key, within their public range")  # fmt: skip
def aggregate_release(
    dataset: DpDataset = "payroll-demo",
    group_by: bounded(aggregate.Params, "group_by", list[DpColumn]) = ["region", "grade"],  # noqa: B006
    count: bool = True,
    distinct: list[DpColumn] = [],  # noqa: B006
    sums: list[ColumnRange] = [],  # noqa: B006
    means: list[ColumnRange] = [ColumnRange(column="salary", low=0, high=10_000)],  # noqa: B006
    quantiles: list[ColumnQuantiles] = [],  # noqa: B006
    epsilon: bounded(aggregate.Params, "epsilon") = 1.0,
    rho: bounded(aggregate.Params, "rho") = None,
    delta: bounded(aggregate.Params, "delta") = 1e-6,
    noise: Literal["gaussian", "laplace"] = "gaussian",
    max_groups: bounded(aggregate.Params, "max_groups") = 1,
    max_rows: bounded(aggregate.Params, "max_rows") = 6,
    release_id: ReleaseId = "",
    preview: bool = False,
) -> dict:
    """Release counts, sums, means and quantiles by group from a registered dp dataset (aggregate)."""
    measures = [{"op": "count"}] if count else []
    measures += [{"op": "count_distinct", "column": c} for c in distinct]
    measures += [
        {"op": op, "column": r.column, "bounds": [r.low, r.high]} for op, rs in (("sum", sums), ("mean", means)) for r in rs
    ]
    measures += [{"op": "quantile", "column": r.column, "bounds": [r.low, r.high], "q": r.q, "bins": r.bins,
                  "interval_share": r.interval_share} for r in quantiles]  # fmt: skip
    params = {"group_by": group_by, "measures": measures, "epsilon": None if rho else epsilon, "rho": rho, "delta": delta,
              "noise": noise, "max_groups": max_groups, "max_rows": max_rows}  # fmt: skip
    return run_request(release_id, dataset, "aggregate", params, preview)
