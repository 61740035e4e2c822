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
from typing import Annotated, Any, Literal

from prefect import flow
from pydantic import Field

from privrelease.core.errors import SpecError
from privrelease.core.mechanisms import aggregate, dpne, outliers, ra, swapping
from privrelease.core.mechanisms.outliers import scale as outliers_scale
from privrelease.core.sdc import methods
from privrelease.flows.fields import (
    LOGIN_SCALES,
    PER_USER,
    RA_QI,
    RECODE,
    Column,
    ColumnCodes,
    ColumnQuantiles,
    ColumnRange,
    ColumnScale,
    ColumnWidth,
    DpDataset,
    ReleaseId,
    SdcDataset,
    UserBound,
    bounded,
    form,
    per_user,
    sdc_request,
)
from privrelease.flows.release import run_request

__all__ = ["ColumnCodes", "ColumnQuantiles", "ColumnRange", "ColumnScale", "ColumnWidth"]  # the forms' item types


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


@flow(name="release-sdc", persist_result=False)
@form(
    recode="key variables recoded with the disclosure policy's hierarchies (global recoding), the first step",
    topcode="numeric columns top- and bottom-coded (each code a step of its own)",
    microaggregate="numeric columns aggregated together in groups of microaggregate_k records (MDAV)",
    microaggregate_k=methods.Microaggregate.model_fields["k"].description,
    pram="categorical columns randomized by PRAM, each on its own",
    pram_keep=methods.Pram.model_fields["keep"].description,
    noise="numeric columns with additive noise",
    noise_level=methods.Noise.model_fields["level"].description,
    suppress="the last step: local suppression until every key cell holds the policy's k records",
    suppress_k=methods.Suppress.model_fields["k"].description,
)
def sdc_release(
    dataset: SdcDataset = "census-demo",
    recode: list[Column] = RECODE,
    recode_level: bounded(methods.Recode, "level") = 1,
    topcode: list[ColumnCodes] = [],  # noqa: B006
    microaggregate: list[Column] = [],  # noqa: B006
    microaggregate_k: bounded(methods.Microaggregate, "k") = 3,
    pram: list[Column] = [],  # noqa: B006
    pram_keep: bounded(methods.Pram, "keep") = 0.8,
    noise: list[Column] = [],  # noqa: B006
    noise_level: bounded(methods.Noise, "level") = 0.1,
    suppress: bool = True,
    suppress_k: bounded(methods.Suppress, "k") = None,
    release_id: ReleaseId = "",
    preview: bool = False,
) -> dict:
    """Release a registered table through a chain of the steward's SDC methods, in this order: recode, top coding,
    microaggregation, PRAM, noise, local suppression (each one that is asked for); the disclosure policy's
    thresholds are measured on its key after the last step (the command line's `sdc` mechanism)."""
    steps = [{"method": "recode", "columns": recode, "level": recode_level}] if recode else []
    steps += [{"method": "topcode", "column": c.column, "top": c.top, "bottom": c.bottom} for c in topcode]
    steps += [{"method": "microaggregate", "columns": microaggregate, "k": microaggregate_k}] if microaggregate else []
    steps += [{"method": "pram", "columns": pram, "keep": pram_keep}] if pram else []
    steps += [{"method": "noise", "columns": noise, "level": noise_level}] if noise else []
    steps += [{"method": "suppress"} | ({"k": suppress_k} if suppress_k else {})] if suppress else []

    def chain() -> dict:
        if not steps:
            raise SpecError("the chain has no step: name columns to recode, top-code, microaggregate, PRAM or add noise "
                            "to, or tick suppress")  # fmt: skip
        return {"steps": steps}

    return run_request(release_id, dataset, "sdc", chain, preview)


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
    columns: Annotated[list[Column], Field(min_length=1)] = ["mb_sent", "hour"],  # noqa: B006
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
    columns: list[Column] = [],  # noqa: B006
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


@flow(name="release-aggregate", persist_result=False)
@form(aggregate.Params, count="release the count per key", distinct="columns whose distinct values are counted per key",
      sums="columns summed per key, each clipped to its public range", means="columns averaged per key, clipped likewise",
      quantiles="columns whose quantiles are released per key, within their public range",
      max_groups=aggregate.Params.model_fields["max_groups"].description + PER_USER,
      max_rows=aggregate.Params.model_fields["max_rows"].description + PER_USER)  # fmt: skip
def aggregate_release(
    dataset: DpDataset = "payroll-demo",
    group_by: bounded(aggregate.Params, "group_by", list[Column]) = ["region", "grade"],  # noqa: B006
    count: bool = True,
    distinct: list[Column] = [],  # noqa: B006
    sums: list[ColumnRange] = [],  # noqa: B006
    means: list[ColumnRange] = [ColumnRange(column="salary", low=0, high=10_000)],  # noqa: B006
    quantiles: list[ColumnQuantiles] = [],  # noqa: B006
    epsilon: bounded(aggregate.Params, "epsilon") = 1.0,
    rho: bounded(aggregate.Params, "rho") = None,
    delta: bounded(aggregate.Params, "delta") = 1e-6,
    noise: Literal["gaussian", "laplace"] = "gaussian",
    max_groups: UserBound() = 1,
    max_rows: UserBound() = 6,
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
              "noise": noise}  # fmt: skip
    bounds = partial(per_user, dataset, max_groups=max_groups, max_rows=max_rows)
    return run_request(release_id, dataset, "aggregate", lambda: params | bounds(), preview)
