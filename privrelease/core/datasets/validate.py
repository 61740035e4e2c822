"""Validate a table against the steward's expectation suite with Great Expectations 1.x.

This runs at registration, for the data steward, who may see the data: failures give counts.
They still never repeat the unexpected values Great Expectations collects, so a message can be
pasted into a ticket. Releases never run it: a failed expectation would be a free count.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from privrelease.core.errors import SpecError, ValidationFailed


@dataclass(frozen=True)
class ValidationReport:
    suite: str
    success: bool
    evaluated: int
    failures: list[dict] = field(default_factory=list)


def load_suite(suite: str) -> tuple[str, list[dict]]:
    """A steward's expectation suite: a JSON file with an ``expectations`` list."""
    path = Path(suite)
    if not path.is_file():
        raise SpecError(f"--suite {suite!r} is not a file; give an expectation-suite JSON file.")
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise SpecError(f"expectation suite {path.name!r} is not valid JSON (line {exc.lineno}).") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("expectations"), list):
        raise SpecError(f"expectation suite {path.name!r} needs a top-level 'expectations' list.")
    return str(doc.get("name") or path.stem), [_expectation(e) for e in doc["expectations"]]


def _expectation(raw: object) -> dict:
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        raise SpecError("each expectation needs a 'type' (for example expect_column_values_to_not_be_null) and 'kwargs'.")
    kwargs = raw.get("kwargs", {})
    if not isinstance(kwargs, dict):
        raise SpecError(f"expectation {raw['type']!r}: 'kwargs' must be a mapping.")
    return {"type": raw["type"], "kwargs": kwargs}


def validate(frame: pd.DataFrame, suite_name: str, expectations: list[dict]) -> ValidationReport:
    """Run the expectations on ``frame``; raise ``ValidationFailed`` listing what failed."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    checked = []
    for raw in expectations:
        # Build each expectation ourselves: the suite constructor logs and *drops* a bad one.
        try:
            checked.append(ExpectationConfiguration(type=raw["type"], kwargs=raw["kwargs"]).to_domain_obj())
        except Exception as exc:  # noqa: BLE001 - GX raises several unrelated types here
            reason = str(exc).split(":")[-1].strip() or type(exc).__name__
            raise SpecError(f"expectation {raw['type']!r} in suite {suite_name!r} is not valid: {reason}.") from None
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    batch = (
        context.data_sources.add_pandas(name="release")
        .add_dataframe_asset(name="input")
        .add_batch_definition_whole_dataframe("whole")
    )
    suite = context.suites.add(gx.ExpectationSuite(name="suite", expectations=checked))
    definition = context.validation_definitions.add(gx.ValidationDefinition(name="validation", data=batch, suite=suite))
    result = definition.run(batch_parameters={"dataframe": frame}, result_format="SUMMARY")
    failures = [_failure(r) for r in result.results if not r.success]
    failures.sort(key=lambda f: (f["expectation"], f["column"] or ""))
    report = ValidationReport(suite_name, not failures, len(result.results), failures)
    if failures:
        lines = "; ".join(_describe(f) for f in failures)
        raise ValidationFailed(
            f"the dataset failed {len(failures)} of {report.evaluated} expectations of suite "
            f"{suite_name!r}: {lines}. Nothing was registered; fix the data or the suite.",
            failures,
        )
    return report


def _failure(result) -> dict:
    config = result.expectation_config
    res = result.result or {}
    observed = res.get("observed_value")
    return {
        "expectation": config.type,
        "column": config.kwargs.get("column"),
        "unexpected_count": res.get("unexpected_count"),
        # Only types and counts are safe to repeat; other observed values may be data.
        "observed_type": observed if "type" in config.type and isinstance(observed, str) else None,
        "observed_rows": observed if config.type.startswith("expect_table_row_count") else None,
    }


def _describe(failure: dict) -> str:
    where = f"{failure['expectation']}({failure['column']})" if failure["column"] else failure["expectation"]
    if failure["unexpected_count"] is not None:
        return f"{where}: {failure['unexpected_count']} unexpected rows"
    if failure["observed_type"]:
        return f"{where}: column has type {failure['observed_type']}"
    if failure["observed_rows"] is not None:
        return f"{where}: the table has {failure['observed_rows']} rows"
    return f"{where}: failed (is the column missing?)"
