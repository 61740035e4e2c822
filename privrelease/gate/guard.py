"""The worker's job command (``python -m privrelease.gate.guard``): run a flow run only if its deployment is one
the operator declared in ``prefect.yaml``, with the declared entrypoint, pull steps and settings.

The process pool's job template (``deploy/process-pool.json``) names this module as the command of
every flow run, and no run can change it. Before any code of the run is loaded (its pull steps,
its entrypoint), the guard reads the run's deployment with the operator's credential and compares
it with the declaration in this checkout's ``prefect.yaml``; a run without a deployment, of an
undeclared deployment, or of one whose entrypoint, pull steps, job variables or parameter checking
differ, is refused: the refusal is logged on the worker and in the run's state (Failed), and the
process ends without running anything of it. Otherwise it hands over to Prefect's engine in the
same process. This is defence in depth behind the gate, for a deployment changed by anyone who
holds (or stole) the operator's credential.
"""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import yaml

from privrelease.core import paths, settings
from privrelease.core.people import REQUESTED_BY


def declared_deployments(repo: Path) -> dict[str, dict]:
    """The deployments ``prefect.yaml`` declares, by name: entrypoint, pull steps (with ``{{ $VAR }}``
    filled in from this environment, as ``prefect deploy`` does), job variables, parameter checking."""
    config = yaml.safe_load((repo / "prefect.yaml").read_text())

    def fill(value):
        if isinstance(value, str):
            return re.sub(r"\{\{\s*\$([A-Z_][A-Z0-9_]*)\s*\}\}", lambda m: settings.get(m.group(1), ""), value)
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    out = {}
    for item in config["deployments"]:
        out[item["name"]] = {
            "entrypoint": item["entrypoint"],
            "pull_steps": fill(item.get("pull", config.get("pull")) or []),
            "job_variables": (item.get("work_pool") or {}).get("job_variables") or {},
            "enforce_parameter_schema": bool(item.get("enforce_parameter_schema", True)),
        }
    return out


def problem(run: dict, deployment: dict | None, allowed: dict[str, dict]) -> str | None:
    """Why this run may not run on this worker; None if it may."""
    if deployment is None:
        return "it belongs to no deployment"
    want = allowed.get(deployment["name"])
    if want is None:
        return f"its deployment {deployment['name']!r} is not declared in prefect.yaml"
    got = {
        "entrypoint": deployment.get("entrypoint"),
        "pull_steps": deployment.get("pull_steps") or [],
        "job_variables": deployment.get("job_variables") or {},
        "enforce_parameter_schema": bool(deployment.get("enforce_parameter_schema")),
    }
    for key, expected in want.items():
        if got[key] != expected:
            return f"its deployment {deployment['name']!r} has another {key.replace('_', ' ')} than prefect.yaml declares"
    tags = [t for t in run.get("tags", []) if t.startswith(REQUESTED_BY)]
    if len(tags) > 1:
        return "it names more than one requester"
    return None


def main() -> int:
    from prefect.client.orchestration import get_client
    from prefect.states import Failed

    run_id = settings.get(settings.FLOW_RUN_ID)
    if not run_id:
        print("privrelease guard: no flow run to check ($PREFECT__FLOW_RUN_ID is unset); nothing runs.", file=sys.stderr)
        return 1
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(run_id)
        deployment = client.read_deployment(run.deployment_id) if run.deployment_id else None
        why = problem(
            run.model_dump(mode="json"), deployment and deployment.model_dump(mode="json"), declared_deployments(paths.repo())
        )
        if why is not None:
            message = f"refused by the worker's guard: {why}; nothing of it was run."
            print(f"privrelease guard: flow run {run_id} {message}", file=sys.stderr, flush=True)
            client.set_flow_run_state(run_id, Failed(message=message), force=True)
            return 0  # the run is settled as failed: no crash, so the worker runs none of its hooks either
    sys.argv = [sys.argv[0]]
    runpy.run_module("prefect.engine", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
