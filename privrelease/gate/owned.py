"""What of the operator's own objects people never read: automations, blocks, variables, work-pool job
templates and concurrency limits, and the settings of theirs that Prefect shows inside a deployment, a flow
run or a work pool.

No row of ``privrelease.gate.access`` reads automations, blocks, variables or concurrency limits as such (their routes
are refused). Three kinds of answer hold some of them all the same, and the gate clears it from them
(``cleared``): a deployment (its job variables, whose environment may hold a secret or a variable's
template, its pull steps, its concurrency limit and storage blocks), a flow run (its job variables and
infrastructure block) and a work pool (its base job template, the worker's command and environment, and
its storage blocks); what people read instead is empty, in the shape Prefect's UI expects. The automations
related to a deployment or a flow, which the UI asks for on their pages, are answered by the gate itself
(``no_automations``): every automation is the operator's.
"""

from __future__ import annotations

from typing import Any

from privrelease.gate.call import Call, says

EMPTY_TEMPLATE = {"job_configuration": {}, "variables": {"type": "object", "properties": {}}}
NO_STORAGE = {"bundle_upload_step": None, "bundle_execution_step": None, "default_result_storage_block_id": None}
# field -> what people read in its place, wherever an answer (an object, a list of them, or a page's results) has it
OPERATORS: dict[str, Any] = {
    "job_variables": {},
    "pull_steps": None,
    "global_concurrency_limit": None,
    "storage_document_id": None,
    "infrastructure_document_id": None,
    "base_job_template": EMPTY_TEMPLATE,
    "storage_configuration": NO_STORAGE,
}


def _cleared(item: Any) -> Any:
    if not isinstance(item, dict):
        return item
    return item | {key: OPERATORS[key] for key in item.keys() & OPERATORS.keys()}


@says("the operator's settings (job variables and template, pull steps, concurrency limit, blocks) cleared")
def cleared(answer: Any, call: Call) -> Any:
    if isinstance(answer, list):
        return [_cleared(item) for item in answer]
    if isinstance(answer, dict) and isinstance(answer.get("results"), list):
        return answer | {"results": [_cleared(item) for item in answer["results"]]}
    return _cleared(answer)


@says("answered by the gate: none (every automation is the operator's)")
async def no_automations(call: Call) -> Any:
    return []
