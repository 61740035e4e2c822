"""The analyst's form for an SDC table (``sdc_table``): counts or totals by group with their margins, protected by
cell suppression or the cell key method, as the steward's policy sets. A flow of its own beside the mechanisms'
forms (``privrelease/flows/forms.py``), with the same flat typed parameters; it builds the request a request file
gives and runs the one pipeline (``run_request``)."""

from typing import Literal

from prefect import flow

from privrelease.core.mechanisms import sdc_table
from privrelease.flows.fields import Column, ReleaseId, SdcDataset, bounded, form
from privrelease.flows.release import run_request


@flow(name="release-sdc-table", persist_result=False)
@form(sdc_table.Params, column="the numeric column a sum adds up (measure: sum only; leave empty for a count)")
def sdc_table_release(
    dataset: SdcDataset = "census-demo",
    group_by: bounded(sdc_table.Params, "group_by", list[Column]) = ["education", "sex"],  # noqa: B006
    measure: Literal["count", "sum"] = "count",
    column: Column | None = None,
    subtotals: list[Column] = [],  # noqa: B006
    method: Literal["suppression", "cell_key"] = "suppression",
    secondary: Literal["auto", "exact", "heuristic"] = "auto",
    release_id: ReleaseId = "",
    preview: bool = False,
) -> dict:
    """Release a table of counts or totals by group from a registered sdc dataset, with its margins (and sub-totals
    where asked), protected as its steward's policy sets: cell suppression audited by the intruder's linear programs,
    or every cell perturbed by the cell key method (a count by its cell's key, a sum by its contributors' factors)."""
    params = {"group_by": group_by, "measure": measure, "column": column, "subtotals": subtotals, "method": method}
    return run_request(release_id, dataset, "sdc_table", params | {"secondary": secondary}, preview)
