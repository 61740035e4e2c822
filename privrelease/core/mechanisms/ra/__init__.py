"""RA and Enhanced RA: random anonymization of quasi-identifiers (Yang & Qiao, 2010).

Every record gets one QI cell (RA, column chosen with probabilities ``p``) or ``k`` distinct QI
cells (Enhanced RA, uniformly) redrawn from that column's empirical marginal in the original
table. The sensitive column and all other columns are never changed. The guarantee is
probabilistic anonymity Pa (eq. 1 of the paper), not differential privacy: nothing is charged.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from privrelease.core.charts import Chart
from privrelease.core.errors import InternalError, ParameterError
from privrelease.core.mechanisms.base import Plan, Result
from privrelease.core.params import StrictParams
from privrelease.core.privacy.cost import NoDP
from privrelease.core.tables.schema import Needs

NAME = "ra"
P_TOLERANCE = 1e-9
# What the published figures tell of the registered table (eq. 1 takes the original marginals; DECISIONS.md)
REVEALS = (
    "Pa, Pa_max and, with p: entropy, p are computed from the registered table's QI marginals: from them "
    "follows each QI column's Shannon entropy H_i (e^H_i is its effective number of categories), and nothing "
    "else of the table; on a column with two values H_i gives the exact split of its records."
)


class Params(StrictParams):
    """RA's public parameters. ``k`` present selects Enhanced RA."""

    qi: list[str] = Field(min_length=1, description="quasi-identifier columns that may be redrawn")
    sensitive: str = Field(min_length=1, description="sensitive column; never changed")
    p: Literal["uniform", "entropy"] | list[float] = Field(
        "uniform", description="column-choice probabilities: uniform, entropy (Pa-maximizing) or one per QI column"
    )
    k: int | None = Field(None, description="Enhanced RA: number of distinct QI cells redrawn per record (1..m)")

    @model_validator(mode="after")
    def _consistent(self) -> Params:
        m = len(self.qi)
        if len(set(self.qi)) != m:
            raise ValueError("qi lists a column twice")
        if self.sensitive in self.qi:
            raise ValueError(f"the sensitive column {self.sensitive!r} cannot also be a QI column")
        if isinstance(self.p, list):
            if len(self.p) != m:
                raise ValueError(f"p has {len(self.p)} entries but qi has {m} columns")
            if any(not math.isfinite(x) or x < 0 for x in self.p):
                raise ValueError("p entries must be finite and non-negative")
            if abs(sum(self.p) - 1) > P_TOLERANCE:
                raise ValueError(f"p must sum to 1, it sums to {sum(self.p):.12g}")
        if self.k is not None:
            if not 1 <= self.k <= m:
                raise ValueError(f"k must be between 1 and the number of QI columns ({m}), got {self.k}")
            if self.p != "uniform":
                raise ValueError("Enhanced RA (k) picks its k columns uniformly; drop p or set it to 'uniform'")
        return self


def needs(params: Params, schema: tuple[str, ...]) -> Needs:
    return Needs(columns=(*params.qi, params.sensitive))


def protects(params: Params) -> list[str]:
    """The columns RA changes to protect them: its QI columns."""
    return list(params.qi)


def plan(params: Params) -> Plan:
    variant = "Enhanced RA" if params.k is not None else "RA"
    return Plan(
        cost=NoDP("probabilistic anonymity (not differential privacy)"),
        guarantee=f"{variant}: probabilistic anonymity Pa (Yang & Qiao, eq. 1); not differential privacy",
    )


def entropies(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """Shannon entropy (nats) of each column's marginal."""
    h = []
    for column in columns:
        f = frame[column].value_counts(normalize=True, dropna=False).to_numpy(dtype=float)
        h.append(float(-(f * np.log(f)).sum()))
    return np.array(h)


def choice_probabilities(params: Params, h: np.ndarray) -> np.ndarray:
    """The column-choice vector p: uniform, explicit, or p_i ∝ exp(H_i) (Prop. 7)."""
    m = len(params.qi)
    if params.p == "uniform":
        return np.full(m, 1.0 / m)
    if params.p == "entropy":
        w = np.exp(h - h.max())
        return w / w.sum()
    return np.asarray(params.p, dtype=float)


def log_pa(h: np.ndarray, p: np.ndarray | None = None, k: int | None = None) -> float:
    """ln Pa: eq. (1) for RA; ln C(m,k) + (k/m)·ΣH_i for Enhanced RA."""
    m = len(h)
    if k is not None:
        return math.log(math.comb(m, k)) + k / m * float(h.sum())
    assert p is not None
    live = p > 0
    return float((p[live] * (-np.log(p[live]) + h[live])).sum())


def log_pa_max(h: np.ndarray, k: int | None = None) -> float:
    """ln Pa_max, the largest Pa that any choice distribution over k-subsets of the QI columns reaches.

    ln Pa(q) = H(q) + Σ_S q_S·Σ_{i∈S} H_i is at most ln Σ_S Π_{i∈S} e^{H_i} (Gibbs; equality at
    q_S ∝ Π e^{H_i}), Prop. 7's argument on k-subsets: Σ e^{H_i} for RA (k = 1), and the k-th
    elementary symmetric sum of the e^{H_i} for Enhanced RA, whose uniform q it bounds.
    """
    k = k or 1
    e = np.full(k + 1, -np.inf)
    e[0] = 0.0
    for hi in h:  # e[j] = ln e_j(e^H) over the columns seen so far (m columns, not records)
        e[1:] = np.logaddexp(e[1:], e[:-1] + hi)
    return float(e[k])


def _selection(n: int, p: np.ndarray, k: int | None, rng: np.random.Generator) -> np.ndarray:
    """Boolean n×m mask of the cells to redraw."""
    m = len(p)
    mask = np.zeros((n, m), dtype=bool)
    if k is None:
        mask[np.arange(n), rng.choice(m, size=n, p=p)] = True
    elif k == m:
        mask[:] = True
    else:
        # The k smallest of m i.i.d. uniforms form a uniformly random k-subset.
        chosen = np.argpartition(rng.random((n, m)), k - 1, axis=1)[:, :k]
        np.put_along_axis(mask, chosen, True, axis=1)
    return mask


def run(frame: pd.DataFrame, params: Params, plan: Plan, rng: np.random.Generator) -> Result:
    """Redraw the selected QI cells; a new value is the value of a uniformly drawn original row."""
    missing = [c for c in (*params.qi, params.sensitive) if c not in frame.columns]
    if missing:
        raise ParameterError(f"RA needs columns {missing} which the table does not have.")
    n, m = len(frame), len(params.qi)
    h = entropies(frame, params.qi)
    p = choice_probabilities(params, h)
    mask = _selection(n, p, params.k, rng)
    out = frame.copy()
    for i, column in enumerate(params.qi):
        rows = np.flatnonzero(mask[:, i])
        source = np.arange(n)
        source[rows] = rng.integers(0, n, size=rows.size)  # a draw from the original marginal
        out[column] = frame[column].array.take(source)
    select_rate = p if params.k is None else np.full(m, params.k / m)
    pa = math.exp(log_pa(h, p, params.k))
    pa_max = max(math.exp(log_pa_max(h, params.k)), pa)  # equal in exact arithmetic at the optimum or k = m
    privacy = {
        "variant": "enhanced_ra" if params.k is not None else "ra",
        "pa": round(pa, 6),
        "pa_max": round(pa_max, 6),
        "p": [round(x, 9) for x in p.tolist()],
        "k": params.k,
        "qi": list(params.qi),
        "sensitive": params.sensitive,
    }
    headline = {"pa": privacy["pa"], "pa_max": privacy["pa_max"], "variant": privacy["variant"]}
    # Report and chart state the risk figures and the selection rates only: no statistic of the
    # original table beyond Pa and Pa_max (the per-column diversities they are built from stay in the run).
    return Result(out, privacy, _report(privacy, select_rate), [_chart(params.qi, select_rate)], headline)


def _report(privacy: dict, select_rate: np.ndarray) -> str:
    k = privacy["k"]
    variant = f"Enhanced RA (k = {k})" if k else "RA"
    cells = f"{k} distinct QI cells" if k else "one QI cell"
    best = (
        "every way of choosing which k cells to redraw (Prop. 7's argument on k-subsets; Enhanced RA chooses uniformly)"
        if k
        else "every column-choice p (Prop. 7)"
    )
    rows = "\n".join(f"| {c} | {r:.4f} |" for c, r in zip(privacy["qi"], select_rate))
    return (
        f"## {variant}\n\n"
        f"Each record had {cells} redrawn from the "
        f"column's original marginal; the sensitive column `{privacy['sensitive']}` and all non-QI columns are unchanged.\n\n"
        f"- **Pa = {privacy['pa']:.4f}**: an attacker who sees a released record's QI values guesses the original "
        f"combination with probability about 1/Pa = {1 / privacy['pa']:.4f}.\n"
        f"- Pa_max = {privacy['pa_max']:.4f} ≥ Pa: the largest Pa on these marginals over {best}.\n"
        f"- Not differential privacy: the ledger records this release with epsilon = delta = 0.\n"
        f"- {REVEALS}\n\n"
        "| QI column | chance of being redrawn |\n|---|---|\n" + rows + "\n"
    )


def _chart(qi: list[str], rate: np.ndarray) -> Chart:
    return Chart(
        filename="ra_columns.png",
        title="Per QI column: chance that a record's cell is redrawn",
        labels=list(qi),
        series={"redrawn": rate.tolist()},
        ylabel="fraction of records",
    )


def check(original: pd.DataFrame, result: Result, params: Params) -> None:
    """Output invariants: shape, untouched columns, no new categories, ≤ 1 or k changed QI cells."""
    released = result.data
    if list(released.columns) != list(original.columns) or len(released) != len(original):
        raise InternalError("RA changed the table's shape or column order")
    for column in original.columns:
        if column not in params.qi and not released[column].equals(original[column]):
            raise InternalError(f"RA changed the non-QI column {column!r}")
    changed = np.zeros(len(original), dtype=np.int64)
    for column in params.qi:
        if not released[column].isin(pd.unique(original[column])).all():
            raise InternalError(f"RA introduced a value outside the original domain of {column!r}")
        changed += (released[column] != original[column]).to_numpy(dtype=bool)
    limit = params.k or 1
    if len(changed) and changed.max() > limit:
        raise InternalError(f"RA changed more than {limit} QI cells of a record")
