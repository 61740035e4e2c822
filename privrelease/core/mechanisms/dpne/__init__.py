"""DPNE: differentially private n-gram extraction (Kim, Gopi, Kulkarni & Yekhanin, 2021).

Level 1 is DP set union with the weighted Gaussian policy and the threshold rho_1 of
Theorem 2.1. Level k >= 2 keeps only valid candidates V_k (both-side pruning by default:
prefix and suffix released at level k-1; single-side: prefix at k-1 and last word at 1),
thresholds the users' sparse histogram at rho_k = sigma_k * Phi^-1(1 - eta*min(1, |S_k-1|/|V_k|)),
and adds the zero-weight candidates that would have crossed the threshold: their number is
Binomial(|V_k| - |supp H_k|, Phi(-rho_k/sigma_k)), each drawn uniformly from V_k minus supp H_k.
|V_k| is computed exactly (sum over (k-2)-grams y of L(y)*R(y)), not estimated.

Privacy: user-level (epsilon, delta)-DP under add/remove-one-user adjacency. Each user adds a
vector of l2 norm at most 1 per level (at most Delta_k distinct valid k-grams, each weighted
1/sqrt(|U_i|)); the levels compose as Gaussian DP (1/sigma*^2 = sum 1/sigma_k^2), converted
with the analytic Gaussian at delta/2, and rho_1 bounds the new-item event by delta/2.

Histograms are built in DuckDB (``dpne_counts``); the per-user subsample orders a user's
n-grams by a keyed hash whose 64-bit key comes from ``privrelease.core.noise`` (any selection that depends
only on the user's own data keeps the l2 bound; the key makes it uniform and unpredictable).
What a release is worth, stated before it (the preview) and after: ``dpne_accuracy``.

Noise: each level has a public grid u_k = ``noise.grid(sigma_k)``. A user's weight 1/sqrt(m) is
rounded *down* to the grid (the vector's l2 norm stays <= 1, so the sensitivity is unchanged),
histograms are exact integers in grid units, and the exact discrete Gaussian of ``privrelease.core.noise`` is
added in integers, so no published weight carries low-order bits of a true one. The continuous
proof is calibrated at ``noise.continuous_budget`` (at most sum(Delta_k) noised coordinates differ
between neighbours), and rho_1 adds one grid step for the discrete tail (see ``accounting``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from privrelease.core import noise, parallel
from privrelease.core.charts import Chart
from privrelease.core.db import quote_ident, scratch
from privrelease.core.errors import InternalError
from privrelease.core.mechanisms.base import Plan, Result, Snapshot
from privrelease.core.mechanisms.dpne import detection as dpne_accuracy
from privrelease.core.mechanisms.dpne.candidates import Candidates
from privrelease.core.mechanisms.dpne.corpus import open_partition
from privrelease.core.mechanisms.dpne.counts import SEP, Encoding, Partition, merge, tokens_sql
from privrelease.core.normal import ndtri
from privrelease.core.params import StrictParams
from privrelease.core.privacy import draws, events
from privrelease.core.privacy.adjacency import AddRemoveUser
from privrelease.core.privacy.budget import gaussian_sigma
from privrelease.core.privacy.cost import DPCost
from privrelease.core.tables.schema import Needs

NAME = "dpne"
READS_SNAPSHOT = True  # a release hands ``run`` the checked snapshot's file: DuckDB reads and tokenizes it, no pandas copy
READS_SNAPSHOT_ON_WORKERS = True  # on Dask, each worker reads its users from the stored snapshot (``extract``)
MAX_DELTA0 = 100_000  # a user's distinct n-grams per level; the threshold scans every count up to it
UNIT_PARAM = "user_column"  # filled from the dataset's registered unit
LEVEL = "n-gram level noise"  # the part each level's noise is in the plan's event
# What a preview says of DPNE (the contract's views, ``base.Declared``): each level's noise, threshold and detection table
accuracy, accuracy_lines, accuracy_charts, notes = (dpne_accuracy.accuracy, dpne_accuracy.accuracy_lines,
                                                    dpne_accuracy.accuracy_charts, dpne_accuracy.notes)  # fmt: skip
Cap = Annotated[int, Field(ge=1, le=MAX_DELTA0)]  # one delta0 value (Params checks it; the form's schema states it)


class Params(StrictParams):
    """DPNE's public parameters (the paper's defaults where it has them)."""

    user_column: str = Field(min_length=1, description="column identifying the user (the privacy unit)")
    text_column: str = Field(min_length=1, description="column holding one post's text")
    epsilon: float = Field(gt=0, le=50, description="total epsilon")
    delta: float = Field(gt=0, lt=1, description="total delta")
    T: int = Field(9, ge=1, le=50, description="longest n-gram length")
    delta0: int | list[int] = Field(100, description="per-level cap on a user's distinct k-grams (one value, or one per level)")
    eta: float = Field(0.01, gt=0, le=0.5, description="tolerated fraction of spurious n-grams at levels >= 2 (rho_k >= 0)")
    split: Literal["equal", "geometric"] = Field("equal", description="how the budget is split over levels")
    c: float | None = Field(None, gt=0, lt=1, description="geometric split: sigma_k = c * sigma_(k-1)")
    pruning: Literal["both", "single"] = Field("both", description="candidate pruning for levels >= 2")
    tokenizer: Literal["whitespace", "words"] = Field("whitespace", description="whitespace tokens, or lower-cased words")
    publish_weights: bool = Field(False, description="publish the noisy weight of each released n-gram")

    @model_validator(mode="after")
    def _consistent(self) -> Params:
        if isinstance(self.delta0, list):
            if len(self.delta0) != self.T:
                raise ValueError(f"delta0 has {len(self.delta0)} entries but T is {self.T}")
            if any(not 1 <= d <= MAX_DELTA0 for d in self.delta0):
                raise ValueError(f"every delta0 entry must be between 1 and {MAX_DELTA0:,}")
        elif not 1 <= self.delta0 <= MAX_DELTA0:
            raise ValueError(f"delta0 must be between 1 and {MAX_DELTA0:,}")
        if self.c is not None and (self.T - 1) * math.log10(self.c) < -150:
            raise ValueError(
                f"c = {self.c:g} is too small for T = {self.T}: sigma_T = c^(T-1) * sigma_1 would leave "
                "double precision; c^(T-1) must be at least 1e-150"
            )
        if (self.split == "geometric") != (self.c is not None):
            raise ValueError("c is required with split: geometric, and only then")
        return self

    @property
    def caps(self) -> list[int]:
        return list(self.delta0) if isinstance(self.delta0, list) else [self.delta0] * self.T


# -- accounting (public parameters only) ------------------------------------------------------------


@dataclass(frozen=True)
class Accounting:
    sigma_star: float
    sigmas: list[float]
    rho_1: float
    units: list[float]  # the public grid of each level


def level_sigmas(sigma_star: float, T: int, split: str, c: float | None) -> list[float]:
    """Per-level noise with sum 1/sigma_k^2 = 1/sigma*^2: equal, or geometric with ratio c."""
    if split == "equal":
        return [math.sqrt(T) * sigma_star] * T
    assert c is not None
    sigma_1 = sigma_star * math.sqrt(sum(c ** (-2 * k) for k in range(T)))
    return [sigma_1 * c**k for k in range(T)]


def dpsu_threshold(sigma: float, cap: int, delta_part: float) -> float:
    """rho = max over t <= cap of 1/sqrt(t) + sigma * Phi^-1((1 - delta_part)^(1/t)) (Theorem 2.1).

    A lone user with t items of weight 1/sqrt(t) then gets any of them released with
    probability at most ``delta_part``.
    """
    t = np.arange(1, cap + 1, dtype=float)
    tail = -np.expm1(np.log1p(-delta_part) / t)  # 1 - (1 - delta_part)^(1/t), without cancellation
    return float(np.max(1 / np.sqrt(t) + sigma * -ndtri(tail)))


def accounting(params: Params) -> Accounting:
    """sigma* from the continuous proof at the budget the discrete sampler needs; rho_1 for the
    discrete noise: P[Z >= n] <= P[N(0, s'^2) >= n - 1] (the normalizer of N_Z is >= sqrt(2 pi) s'),
    so Theorem 2.1's threshold at the sampler's actual std sigma' >= sigma_1, plus one grid step."""
    sigma_star = gaussian_sigma(*noise.continuous_budget(params.epsilon, params.delta / 2, sum(params.caps)))
    sigmas = level_sigmas(sigma_star, params.T, params.split, params.c)
    noise.check_shift(1.0, min(sigmas))
    units = [noise.grid(s) for s in sigmas]
    actual = units[0] * math.sqrt(noise.gaussian_variance_units(sigmas[0], units[0]))
    return Accounting(sigma_star, sigmas, dpsu_threshold(actual, params.caps[0], params.delta / 2) + units[0], units)


def level_threshold(sigma: float, eta: float, previous: int, candidates: int) -> float:
    """rho_k = sigma_k * Phi^-1(1 - eta * min(1, |S_k-1| / |V_k|)) >= 0; exactly 0 at eta = 0.5 when
    |S_k-1| >= |V_k| (max() turns Phi^-1's -0.0 into 0.0, which prints as 0). The tail share is floored
    at 1e-300 (rho_k <= 37 sigma_k): a tiny eta times a small ratio underflows to 0, whose rho_k would
    be infinite and fail the run after the data was read."""
    share = max(eta * min(1.0, previous / candidates), 1e-300)
    return max(0.0, sigma * float(-ndtri(share)))


def needs(params: Params, schema: tuple[str, ...]) -> Needs:
    return Needs(columns=(params.user_column, params.text_column))


def plan(params: Params) -> Plan:
    acc = accounting(params)
    return Plan(
        cost=DPCost(events.charge(parts(params, acc), params.epsilon, params.delta), AddRemoveUser(params.user_column)),
        guarantee=f"user-level (epsilon={params.epsilon:g}, delta={params.delta:g})-differential privacy (DPNE, Kim et al.)",
        detail={
            "sigma_star": acc.sigma_star,
            "sigmas": acc.sigmas,
            "mu": 1 / acc.sigma_star,
            "rho_1": acc.rho_1,
            "delta_conversion": params.delta / 2,
            "delta_new_items": params.delta / 2,
            "noise": "exact discrete Gaussian on a public grid per level (privrelease.core.noise)",
            "grids": acc.units,
        },
    )


def parts(params: Params, acc: Accounting) -> list[events.Event]:
    """DPNE's privacy event, part by part: each level's discrete Gaussian (l2 norm <= 1 per level; levels of
    one sigma self-composed; ``extract`` draws with it), the new items (delta only, rho_1), the sampler's slack."""
    return [events.times(events.DiscreteGaussian(s, 1.0, part=LEVEL), n) for s, n in Counter(acc.sigmas).items()] + [
        events.EpsilonDelta(0.0, params.delta / 2, part="new items (DPSU threshold rho_1, Theorem 2.1)"),
        events.sampler_slack(sum(params.caps)),
    ]


# -- the mechanism ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Level:
    k: int
    sigma: float
    rho: float
    candidates: int  # |V_k| (level 1: the support of H_1; not released)
    released: int
    simulated: int  # zero-weight candidates that crossed rho_k (not released: depends on |supp H_k|)


def threshold(
    rng: np.random.Generator, leaf: events.DiscreteGaussian, unit: float, rho: float, units: np.ndarray, zero: int
) -> tuple[np.ndarray, np.ndarray]:
    """One level's noise, drawn with its leaf of the plan's event: the held candidates' noisy weights (true
    weights ``units`` in grid units; the caller keeps those above ``rho``), and the weights of the ``zero``
    zero-weight candidates that pass rho: Binomial(zero, p) of them (p the tail probability), each from the
    tail law. The statistical auditor (tests/support/auditor.py) calls this very function with one candidate per run."""
    noisy = draws.values(rng, leaf, units, unit)
    passed = int(rng.binomial(zero, draws.tail_probability(leaf, unit, rho))) if zero else 0
    return noisy, draws.tail(rng, leaf, unit, rho, passed)


def extract(
    rows: pd.DataFrame | Snapshot, params: Params, plan: Plan, rng: np.random.Generator, snapshot: str | None = None
) -> tuple[pd.DataFrame, list[Level]]:
    """Run DPNE with the leaves of the charged ``plan``; returns the released n-grams (ngram, n, noisy_weight)
    and the per-level accounting.

    The users' grams are counted in user partitions (``parallel.partitioned``): one in process (on a
    registered ``Snapshot``, its positions mapped from the cache beside it once a release has tokenized
    it: ``dpne_corpus``), one per worker on a Dask cluster, where each worker reads its users from
    ``snapshot`` (the stored Parquet file the rows were read from; a ``Snapshot``'s own) and keeps them
    across levels. Only the exact per-level counts come back; the key, the noise and every threshold stay
    in this process.
    """
    acc = accounting(params)
    noises = events.each(plan.cost.event, LEVEL)  # each level's leaf, as the charged plan declares it
    if len(noises) != params.T:
        raise events.Undeclared(f"the plan declares {len(noises)} levels' noise for T = {params.T}")
    key = int(noise.words(rng, 1)[0] >> np.uint64(1))
    snapshot = rows.path if isinstance(rows, Snapshot) else snapshot
    parts = parallel.workers() if snapshot else 1  # rows never travel: without the stored file, in process
    specs = [(snapshot if parts > 1 else rows, params, parts, i) for i in range(parts)]
    levels: list[Level] = []
    released: list[pd.DataFrame] = []
    words: list[str] = []
    previous: list[str] = []
    sent: list[str] | np.ndarray = []  # what the partitions mark: S_1's words at level 2, S_(k-1)'s ids after
    with parallel.partitioned(open_partition, specs, spread=parts > 1) as partitions:
        for k in range(1, params.T + 1):
            leaf, unit, cap = noises[k - 1], acc.units[k - 1], params.caps[k - 1]
            space = Candidates(previous, words, params.pruning) if k > 1 else None
            if space is not None and space.size == 0:  # nothing valid: this and later levels are empty
                levels += [Level(j, acc.sigmas[j - 1], math.nan, 0, 0, 0) for j in range(k, params.T + 1)]
                break
            encoding = Encoding(params.pruning, words, previous) if k > 1 else None
            hist = merge(
                partitions.map(Partition.level, k, sent, encoding.base if encoding else 0, params.pruning, cap, key, unit)
            )
            hist = encoding.named(hist) if encoding is not None else hist
            size = len(hist) if space is None else space.size
            rho = acc.rho_1 if space is None else level_threshold(leaf.sigma, params.eta, len(previous), size)
            noisy, tail = threshold(rng, leaf, unit, rho, hist["units"].to_numpy(), size - len(hist))
            simulated = space.sample_outside(rng, len(tail), set(hist["gram"])) if space is not None else []
            keep = noisy > rho
            out = pd.DataFrame(
                {
                    "ngram": list(hist["gram"][keep]) + simulated,
                    "n": np.int32(k),
                    "noisy_weight": np.concatenate([noisy[keep], tail]),
                }
            ).sort_values("ngram", kind="stable")
            released.append(out)
            levels.append(Level(k, leaf.sigma, rho, size, len(out), len(simulated)))
            previous = list(out["ngram"])
            sent = previous if encoding is None else encoding.ids(previous)
            if k == 1:
                words = previous
    return pd.concat(released, ignore_index=True), levels


def run(rows: pd.DataFrame | Snapshot, params: Params, plan: Plan, rng: np.random.Generator) -> Result:
    released, levels = extract(rows, params, plan, rng, None if isinstance(rows, Snapshot) else rows.attrs.get("snapshot"))
    acc = accounting(params)
    counts = {str(lv.k): lv.released for lv in levels}
    table = released if params.publish_weights else released[["ngram", "n"]]
    privacy = {
        "sigma_star": acc.sigma_star,
        "sigmas": [lv.sigma for lv in levels],
        "rho": [None if math.isnan(lv.rho) else lv.rho for lv in levels],
        "valid_candidates": [None if lv.k == 1 else lv.candidates for lv in levels],
        "pruning": params.pruning,
    }
    headline = {
        "counts_by_length": counts,
        "rho": privacy["rho"],
        "valid_candidates": privacy["valid_candidates"],
    }
    chart = Chart(
        "ngrams_by_length.png",
        "n-grams released per length",
        [str(lv.k) for lv in levels],
        {"released": [float(lv.released) for lv in levels]},
        "n-grams",
    )
    privacy["accuracy"], lines, curve = dpne_accuracy.release(
        params, acc.sigmas, acc.units, acc.rho_1, privacy["rho"], [lv.released for lv in levels], privacy["valid_candidates"]
    )
    return Result(
        table,
        privacy,
        _report(params, acc, levels) + "\n".join(lines) + "\n",
        [chart, curve],
        headline,
        name="ngrams",
        manifest={"counts_by_length": counts},
    )


def _report(params: Params, acc: Accounting, levels: list[Level]) -> str:
    rows = "\n".join(
        f"| {lv.k} | {lv.released} | {lv.sigma:.4f} | {'—' if math.isnan(lv.rho) else f'{lv.rho:.4f}'} | "
        f"{'—' if lv.k == 1 else lv.candidates} |"
        for lv in levels
    )
    return (
        "## DPNE\n\n"
        f"User-level (epsilon = {params.epsilon:g}, delta = {params.delta:g})-DP: adding or removing one user "
        "(all of their posts) changes the probability of any output by at most a factor e^epsilon, plus delta.\n\n"
        f"- Composed noise sigma* = {acc.sigma_star:.6f} (Gaussian DP, analytic conversion at delta/2); "
        f"budget split: {params.split}{f' (c = {params.c})' if params.c else ''}.\n"
        f"- rho_1 = {acc.rho_1:.4f} bounds the chance that any n-gram of a single user is released by delta/2.\n"
        f"- Levels >= 2: {params.pruning}-side pruning, thresholds for at most eta = {params.eta:g} spurious n-grams "
        "per released (k-1)-gram; zero-weight candidates were simulated: each passing one's noise drawn exactly, "
        "how many pass drawn by numpy's floating-point binomial sampler (DPNE's one draw that is not exact).\n"
        f"- Caps per user and level: {params.caps}; tokenizer: {params.tokenizer}.\n\n"
        "| length k | released | sigma_k | rho_k | valid candidates V_k |\n|---|---|---|---|---|\n" + rows + "\n\n"
        "How many zero-weight candidates were simulated is kept nowhere: it depends on how many distinct "
        "n-grams users hold, which the release does not protect.\n"
        + ("" if levels and levels[0].released else dpne_accuracy.nothing_released(params, acc.sigmas[0], acc.rho_1))
    )


HEAD_SHARE = 16  # ``_unheld`` tokenizes the first 1/16 of the posts first


def _unheld(original: pd.DataFrame | Snapshot, params: Params, words: set[str]) -> set[str]:
    """The ``words`` that no post holds as a token, from the posts themselves (the rows, or the snapshot's file). A
    released word is held by many users, so the first posts almost always hold them all: they are tokenized first,
    and the rest only for the words still missing (the same answer as tokenizing every post, at a sixteenth of the cost)."""
    missing, con = set(words), scratch()
    tokens = tokens_sql(params.tokenizer, f"CAST({quote_ident(params.text_column)} AS VARCHAR)")
    try:
        for posts in _halves(con, original):
            if not missing:
                break
            con.register("missing", pd.DataFrame({"w": sorted(missing)}, dtype=object))
            query = f"SELECT DISTINCT t FROM (SELECT unnest({tokens}) AS t FROM {posts}) WHERE t IN (SELECT w FROM missing)"
            missing -= {w for (w,) in con.execute(query).fetchall()}
    finally:
        con.close()
    return missing


def _halves(con, original: pd.DataFrame | Snapshot) -> Iterator[str]:
    """The first 1/``HEAD_SHARE`` of the posts, then the rest, each as a relation of ``con`` (by row number in
    the snapshot's file: the scratch database keeps no row order)."""
    if isinstance(original, Snapshot):
        con.read_parquet(original.path, file_row_number=True).create_view("corpus_input")
        ((rows,),) = con.execute("SELECT count(*) FROM corpus_input").fetchall()
        head = max(1, rows // HEAD_SHARE)
        yield f"corpus_input WHERE file_row_number < {head}"
        yield f"corpus_input WHERE file_row_number >= {head}"
        return
    head = max(1, len(original) // HEAD_SHARE)
    for posts in (original.iloc[:head], original.iloc[head:]):
        con.register("corpus_input", posts)
        yield "corpus_input"


def check(original: pd.DataFrame | Snapshot, result: Result, params: Params) -> None:
    """Invariants: lengths, no duplicates, S_k ⊆ V_k, no spurious 1-grams, downward closure."""
    table = result.data
    grams = table["ngram"].tolist()
    if len(set(grams)) != len(grams):
        raise InternalError("DPNE released an n-gram twice")
    lengths = table["ngram"].str.count(SEP).to_numpy() + 1 if len(table) else np.array([], dtype=int)
    if len(table) and not (lengths == table["n"].to_numpy()).all():
        raise InternalError("DPNE released an n-gram of the wrong length")
    by_length: dict[int, set[str]] = {}
    for gram, n in zip(grams, table["n"]):
        by_length.setdefault(int(n), set()).add(gram)
    words = by_length.get(1, set())
    if _unheld(original, params, words):
        raise InternalError("DPNE released a 1-gram no user holds")
    for k, level in by_length.items():
        if k == 1:
            continue
        lower = by_length.get(k - 1, set())
        for gram in level:
            head, _, tail = gram.partition(SEP)
            stem, _, last = gram.rpartition(SEP)
            ok = stem in lower and (tail in lower if params.pruning == "both" else last in words)
            if not ok:
                raise InternalError(f"DPNE released a length-{k} n-gram outside V_{k}")
