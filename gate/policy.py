"""Who may do what through the gate: one table of (who, method, route, condition), default deny.

A call is allowed when a row names the caller's role (or ``anyone``, which includes a caller
without credentials), its method, a route template that matches its whole path, and the row's
condition holds. Every other call is refused: a route Prefect adds in an upgrade is closed until a
row names it. Websocket routes (events, logs) are named by no row, so no person reaches them.

Conditions, checked by the gate against Prefect's own records (``gate.app``):

- ``release-form``: the deployment in the path is one of the analyst's release forms;
- ``audit-form``: the deployment is the ledger audit;
- ``own-run``: the flow run was started through the gate by the caller (its ``requested-by`` tag);
  only a cancellation is passed on;
- ``awaits-approval``: the run is paused for a steward's approval and was not started by the caller.

Rows marked ``answer`` are answered by the gate itself with public values and never reach Prefect
as asked: the UI asks for its server's settings and version on every page, but Prefect's
``/api/admin`` routes (settings hold the database URL; others clear the database) are the
operator's alone; and the UI's own settings are passed on without Prefect's second UI (v2), which
this policy is not written for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ANALYST, AUDITOR, STEWARD = "analyst", "auditor", "steward"
PEOPLE = frozenset({ANALYST, AUDITOR, STEWARD})
ANYONE = frozenset({"anyone", *PEOPLE})  # "anyone": a caller without credentials
SPENDERS = frozenset({ANALYST, STEWARD})  # who may start a release

# The deployments of prefect.yaml an analyst starts (one form per mechanism), and the auditor's.
RELEASE_FORMS = ("ra", "mews", "meds", "eds", "dpne", "outlier-count", "outlier-top-subspaces")
AUDIT_FORM = "ledger-audit"
# The UI's pages (its router's top-level paths): each answers the same index.html, no data.
UI_PAGES = ("dashboard", "runs", "flows", "deployments", "flow-runs", "artifacts", "automations", "blocks",
            "concurrency-limits", "events", "notifications", "settings", "variables", "work-pools", "work-queues",
            "login")  # fmt: skip


@dataclass(frozen=True)
class Rule:
    who: frozenset[str]
    method: str
    route: str  # "{x}" matches one path segment, "{x*}" the rest of the path
    condition: str | None = None
    answer: str | None = None  # answered by the gate itself (see ANSWERS in gate.app)
    pattern: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        regex = re.sub(r"\\\{[a-z_]+\\\*\\\}", "(?:.*)", re.escape(self.route))
        regex = re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", regex)
        object.__setattr__(self, "pattern", re.compile(f"^{regex}$"))


def _reads(*routes: str, who: frozenset[str] = PEOPLE) -> list[Rule]:
    """Read-only calls: a GET of a resource, or one of Prefect's POST queries (filter, count, ...)."""
    return [Rule(who, *route.split(" ", 1)) for route in routes]


POLICY: tuple[Rule, ...] = (
    # -- the UI's shell: its pages, scripts, images and its own settings (no data) -------------------
    Rule(ANYONE, "GET", "/"),
    Rule(ANYONE, "GET", "/ui-settings", answer="ui-settings"),
    Rule(ANYONE, "GET", "/assets/{file}"),
    Rule(ANYONE, "GET", "/ico/{file}"),
    Rule(ANYONE, "GET", "/{file}.svg"),
    Rule(ANYONE, "GET", "/robots.txt"),
    *(Rule(ANYONE, "GET", page) for name in UI_PAGES for page in (f"/{name}", f"/{name}/{{rest*}}")),
    Rule(ANYONE, "GET", "/api/health"),
    # -- answered by the gate: what the UI asks of /api/admin on every page ----------------------------
    Rule(PEOPLE, "GET", "/api/admin/settings", answer="settings"),
    Rule(PEOPLE, "GET", "/api/admin/version", answer="version"),
    # -- reading: deployments and their forms, runs, task runs, logs, artifacts -------------------------
    *_reads(
        "POST /api/flows/filter", "POST /api/flows/count", "POST /api/flows/paginate", "GET /api/flows/{id}",
        "POST /api/deployments/filter", "POST /api/deployments/count", "POST /api/deployments/paginate",
        "GET /api/deployments/{id}", "GET /api/deployments/{id}/schedules",
        "POST /api/flow_runs/filter", "POST /api/flow_runs/count", "POST /api/flow_runs/paginate",
        "POST /api/flow_runs/history", "GET /api/flow_runs/{id}", "GET /api/flow_runs/{id}/graph-v2",
        "GET /api/flow_runs/{id}/input/{key}", "GET /api/flow_run_states/",
        "POST /api/task_runs/filter", "POST /api/task_runs/count", "POST /api/task_runs/paginate",
        "GET /api/task_runs/{id}", "GET /api/task_run_states/", "POST /api/task_runs/history",
        "POST /api/logs/filter",
        "POST /api/artifacts/filter", "POST /api/artifacts/count", "POST /api/artifacts/latest/filter",
        "POST /api/artifacts/latest/count", "GET /api/artifacts/{id}", "GET /api/artifacts/{key}/latest",
        "POST /api/ui/flow_runs/history", "POST /api/ui/flow_runs/count-task-runs",
        "POST /api/ui/flows/count-deployments", "POST /api/ui/flows/next-runs",
        "POST /api/ui/task_runs/dashboard/counts", "POST /api/ui/task_runs/count",
        "POST /api/ui/schemas/validate",  # the run form checks its fields against the deployment's schema
        "POST /api/flow_runs/lateness", "POST /api/saved_searches/filter", "POST /api/events/filter",
        "GET /api/events/filter/next", "GET /api/automations/related-to/{resource}",
        # the pool and its queue's health, as the dashboard and a deployment's page show them (no secrets: the
        # job template fixes the worker's command and takes no variables)
        "POST /api/work_pools/filter", "GET /api/work_pools/{name}", "GET /api/work_pools/{name}/queues/{queue}",
        "POST /api/work_pools/{name}/queues/filter", "POST /api/work_pools/{name}/workers/filter",
    ),
    # -- acting: each role its own ---------------------------------------------------------------------
    Rule(SPENDERS, "POST", "/api/deployments/{id}/create_flow_run", condition="release-form"),
    Rule(frozenset({AUDITOR}), "POST", "/api/deployments/{id}/create_flow_run", condition="audit-form"),
    Rule(PEOPLE, "POST", "/api/flow_runs/{id}/set_state", condition="own-run"),
    Rule(frozenset({STEWARD}), "POST", "/api/flow_runs/{id}/resume", condition="awaits-approval"),
)


def decide(role: str, method: str, path: str) -> Rule | None:
    """The first rule that lets ``role`` (or "anyone") call ``method path``; None: refused."""
    for rule in POLICY:
        if role in rule.who and rule.method == method and rule.pattern.match(path):
            return rule
    return None
