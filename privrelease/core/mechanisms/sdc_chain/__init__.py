"""An SDC release as a chain of methods: recoding, then RA or a swap, then local suppression, in one release.

A request names its ``steps`` in order; each is one of the methods of ``privrelease.core.sdc.methods``
(``recode``, ``topcode``, ``suppress``, ``microaggregate``, ``pram``, ``noise``) or one of the
papers' mechanisms (``ra``, ``mews``, ``meds``, ``eds``, with their own parameters). The
dataset's disclosure policy is the steward's (filled in from the registration, never the
request's): the recoding hierarchies and the key that local suppression protects come from it.
The release's risk is measured on the policy's key after the last step, and one report says what
each step did.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from privrelease.core.errors import InternalError, ParameterError
from privrelease.core.mechanisms import ra, swapping
from privrelease.core.mechanisms.base import Plan, Result
from privrelease.core.params import StrictParams
from privrelease.core.privacy.cost import NoDP
from privrelease.core.sdc import methods
from privrelease.core.sdc.policy import Policy
from privrelease.core.tables.schema import Needs

NAME = "sdc"
POLICY_PARAM = "policy"


class RAStep(ra.Params):
    method: Literal["ra"]


class MEWSStep(swapping.MEWSParams):
    method: Literal["mews"]


class MEDSStep(swapping.DepthParams):
    method: Literal["meds"]


class EDSStep(swapping.EDSParams):
    method: Literal["eds"]


PAPERS = {"ra": ra, "mews": swapping.MEWS, "meds": swapping.MEDS, "eds": swapping.EDS}
Step = Annotated[
    Union[  # noqa: UP007 - a discriminated union of classes: pydantic reads it as written
        methods.Recode,
        methods.TopCode,
        methods.Suppress,
        methods.Microaggregate,
        methods.Pram,
        methods.Noise,
        RAStep,
        MEWSStep,
        MEDSStep,
        EDSStep,
    ],
    Field(discriminator="method"),
]


class Params(StrictParams):
    """The chain: methods applied in order; the policy is the dataset's (filled in from its registration)."""

    steps: list[Step] = Field(min_length=1, max_length=12, description="the methods, in order")
    policy: Policy | None = Field(None, description="the dataset's disclosure policy (from the registration)")

    @model_validator(mode="after")
    def _order(self) -> Params:
        papers = [s.method for s in self.steps if s.method in PAPERS]
        if len(papers) > 1:
            raise ValueError(f"a chain applies at most one of ra, mews, meds, eds; it names {papers}")
        if any(isinstance(s, methods.Suppress) for s in self.steps[:-1]):
            raise ValueError("suppress is the last step: a later step would undo the k-anonymity it reaches")
        recoded: set[str] = set()
        for i, s in enumerate(self.steps):
            wanted = set(_numeric_needs(s))
            if wanted & recoded:
                raise ValueError(
                    f"step {i + 1} ({s.method}) needs {sorted(wanted & recoded)} numeric, but an earlier "
                    "recode step made them intervals"
                )
            if isinstance(s, methods.Recode):
                recoded |= set(s.columns)
        return self


def _paper(step) -> StrictParams:
    """A paper mechanism's own parameters, without the step's ``method``."""
    return PAPERS[step.method].Params.model_validate(step.model_dump(exclude={"method"}))


def _numeric_needs(step) -> list[str]:
    if step.method in PAPERS:
        return list(PAPERS[step.method].needs(_paper(step), ()).numeric)
    return methods.numeric(step)


def protects(params: Params) -> list[str]:
    """Every column some step changes to protect it (local suppression: the whole key)."""
    out: list[str] = []
    for s in params.steps:
        if s.method in PAPERS:
            out += PAPERS[s.method].protects(_paper(s))
        elif params.policy is not None:
            out += methods.protects(s, params.policy)
    return list(dict.fromkeys(out))


def nominal(params: Params) -> list[str]:
    """The columns only nominal steps protect (``methods.nominal``: top coding), no other step."""
    real: set[str] = set()
    named: list[str] = []
    for s in params.steps:
        own = PAPERS[s.method].protects(_paper(s)) if s.method in PAPERS else methods.protects(s, params.policy)
        if s.method not in PAPERS and methods.nominal(s):
            named += own
        else:
            real |= set(own)
    return [c for c in dict.fromkeys(named) if c not in real]


def needs(params: Params, schema: tuple[str, ...]) -> Needs:
    columns: list[str] = []
    numeric: list[str] = []
    for s in params.steps:
        if s.method in PAPERS:
            n = PAPERS[s.method].needs(_paper(s), schema)
            columns += n.columns
            numeric += n.numeric
        else:
            columns += methods.columns(s)
            numeric += methods.numeric(s)
    if params.policy is not None:
        for s in params.steps:
            if s.method not in PAPERS:
                methods.check(s, params.policy)
        aggregated = [c for s in params.steps if s.method == "microaggregate" for c in s.columns]
        keys = [c for c in aggregated if c in params.policy.key_vars.all]
        if keys and params.steps[-1].method == "suppress":
            raise ParameterError(
                f"microaggregate then suppress: {keys} are key variables, and a group mean seen "
                "fewer than k times in the release is the value of a suppressed member (group sizes "
                "follow from N and k); recode them instead, or leave out the suppress step"
            )
    return Needs(columns=tuple(dict.fromkeys(columns)), numeric=tuple(dict.fromkeys(numeric)))


def plan(params: Params) -> Plan:
    chain = " → ".join(s.method for s in params.steps)
    return Plan(
        cost=NoDP("statistical disclosure control (not differential privacy)"),
        guarantee=f"SDC chain {chain}: the disclosure policy's thresholds, measured on its key; not differential privacy",
    )


def run(frame: pd.DataFrame, params: Params, plan: Plan, rng: np.random.Generator) -> Result:
    if params.policy is None:
        raise ParameterError("an sdc chain needs the dataset's disclosure policy")
    data, done, persons = frame, [], None
    for s in params.steps:
        if isinstance(s, methods.Suppress):  # each record's person's key as the release codes it (recoded, perturbed)
            persons = data[params.policy.key_vars.all].reset_index(drop=True)
        if s.method in PAPERS:
            # A paper's own figures (Pa, widths, bounds, bin counts, its charts) describe the table its step
            # saw and left, which later steps go on changing: published, they would tell values those steps
            # hide (a top-coded maximum, a suppressed value). In a chain its step states its parameters only;
            # the release's risk statement is the policy's measures on the final table.
            module, own = PAPERS[s.method], _paper(s)
            result = module.run(data, own, plan, rng)  # the chain's plan: no step draws DP noise
            module.check(data, result, own)
            data = result.data
            done.append({"method": s.method, **own.model_dump(mode="json")})
        else:
            data, info = methods.apply(data, s, params.policy, rng)
            done.append(info)
    privacy = {"steps": done}
    suppressed = sum(d.get("suppressed_cells", 0) for d in done)
    headline = {"chain": " → ".join(s.method for s in params.steps), "suppressed_cells": suppressed}
    lines = "\n".join(
        f"{i + 1}. `{d['method']}`: " + ", ".join(f"{k} {v}" for k, v in d.items() if k != "method") for i, d in enumerate(done)
    )
    report = (
        f"## SDC chain: {headline['chain']}\n\nThe steps ran in this order on the policy's published columns "
        "(not differential privacy). A paper's step states its parameters only: its own figures would describe "
        "a table the later steps changed. The release's risk is the policy's, measured on the final table "
        "below.\n\n" + lines + "\n"
    )
    return Result(data.reset_index(drop=True), privacy, report, [], headline, persons=persons)


def check(original: pd.DataFrame, result: Result, params: Params) -> None:
    """The chain keeps the columns and never adds rows; each paper step checked its own invariants."""
    if list(result.data.columns) != list(original.columns) or len(result.data) > len(original):
        raise InternalError("an SDC chain changed the table's columns or added rows")
