"""Who may do what through the gate: one table of (who, method, route, when, body), default deny.

A call is allowed when a row names the caller's role (or ``anyone``, which includes a caller
without credentials), its method, a route template that matches its whole path, and the row's
condition (``when=``) holds. Every other call is refused: a route Prefect adds in an upgrade is
closed until a row names it. Websocket routes (events, logs) are named by no row, so no person
reaches them.

The route's parameters (``{id}``, ``{name}``) are taken from the template's match and handed, with
the caller's account and Prefect's records, to the row's callables (``privrelease.gate.rewrites``, ``privrelease.gate.answers``): its condition,
checked against Prefect's own records; its body rewrite (``body=``), which makes the body passed on
from the one asked (or refuses it): every read query's is bounded (``privrelease.gate.bounds``), the events'
rebuilt by allow-list (``privrelease.gate.events``); its reply (``reply=``), which makes the answer passed back
from Prefect's; or its answer (``answer=``), for rows the gate answers itself and never passes on as
asked: the next page of events (from a token whose filter the gate rebuilds), and public values: the
UI asks for its server's settings and version on every page, but Prefect's ``/api/admin`` routes
(settings hold the database URL; others clear the database) are the operator's alone; and the UI's
own settings are passed on without Prefect's second UI (v2), which this table is not written for.

The deployments an analyst and the auditor start are read from ``prefect.yaml`` (its release forms
run ``privrelease/flows/forms.py`` or ``privrelease/flows/tables.py``, the audit ``privrelease/flows/audit.py``). ``docs/SECURITY.md`` shows this table as
``markdown()`` renders it: ``python -m privrelease.gate.access --write docs/SECURITY.md`` regenerates it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from privrelease.core import paths
from privrelease.core.errors import UserError
from privrelease.core.people import ANALYST, AUDITOR, STEWARD
from privrelease.gate import catalogue, forms, owned
from privrelease.gate.answers import health, next_events, prefect_version, public_settings, ui_settings
from privrelease.gate.call import Answer, Condition, Reply, Rewrite
from privrelease.gate.rewrites import (
    answer_approval,
    awaits_approval,
    bounded,
    cancel,
    deployment_in,
    event_count,
    event_query,
    events_shown,
    own_run,
    start_run,
    stored_schema,
)

ANONYMOUS = "anyone"  # the role of a caller without credentials
PEOPLE = frozenset({ANALYST, AUDITOR, STEWARD})
ANYONE = frozenset({ANONYMOUS, *PEOPLE})
SPENDERS = frozenset({ANALYST, STEWARD})  # who may start a release
RELEASE_ENTRYPOINTS = ("privrelease/flows/forms.py:", "privrelease/flows/tables.py:")  # a release form: one mechanism's flow
AUDIT_ENTRYPOINT = "privrelease/flows/audit.py:ledger_audit"


def declared_forms(path: Path) -> tuple[tuple[str, ...], str]:
    """The deployments of ``prefect.yaml`` an analyst starts (one form per mechanism), and the auditor's."""
    try:
        deployments = (yaml.safe_load(path.read_text()) or {}).get("deployments") or []
    except FileNotFoundError:
        raise UserError(
            f"the gate's access table reads the deployments people may start from {path}, which does not exist: "
            f"run the gate from a privrelease checkout, or set ${paths.REPO_ENV} to one"
        ) from None
    forms = tuple(d["name"] for d in deployments if d.get("entrypoint", "").startswith(RELEASE_ENTRYPOINTS))
    audits = [d["name"] for d in deployments if d.get("entrypoint") == AUDIT_ENTRYPOINT]
    if not forms or len(audits) != 1:
        raise UserError(
            f"{path} declares {len(forms)} release forms ({' or '.join(RELEASE_ENTRYPOINTS)}...) and {len(audits)} "
            f"ledger audits ({AUDIT_ENTRYPOINT}): the gate's access table needs some forms and one audit"
        )
    return forms, audits[0]


RELEASE_FORMS, AUDIT_FORM = declared_forms(paths.repo() / "prefect.yaml")
# The UI's pages (its router's top-level paths): each answers the same index.html, no data.
UI_PAGES = ("dashboard", "runs", "flows", "deployments", "flow-runs", "artifacts", "automations", "blocks",
            "concurrency-limits", "events", "notifications", "settings", "variables", "work-pools", "work-queues",
            "login")  # fmt: skip
CATALOGUE_PAGES = ("/privrelease", "/privrelease/releases", "/privrelease/releases/{id}", "/privrelease/datasets",
                   "/privrelease/signin")  # fmt: skip
PARAMETER = re.compile(r"\\\{([a-z_]+)(\\\*)?\\\}")  # "{x}" or "{x*}", as re.escape leaves it


@dataclass(frozen=True)
class Rule:
    who: frozenset[str]
    method: str
    route: str  # "{x}" matches one path segment, "{x*}" the rest of the path; either is the parameter x
    when: Condition | None = None  # checked against Prefect's records
    body: Rewrite | None = None  # the body passed on, made from the one asked
    answer: Answer | None = None  # answered by the gate itself, never passed on
    reply: Reply | None = None  # the answer passed back, made from Prefect's
    starts: bool = False  # it starts a run: the account's limits apply first (privrelease.gate.quotas)
    reads: bool = False  # it only reads (a POST query; every GET does): asked again once if the connection broke
    alone: bool = False  # Prefect works hard for it: one of an account's at a time (one more waits), few at once in all
    pattern: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        regex = PARAMETER.sub(lambda m: f"(?P<{m[1]}>{'.*' if m[2] else '[^/]+'})", re.escape(self.route))
        object.__setattr__(self, "pattern", re.compile(f"^{regex}$"))
        if self.when is not None and self.body is None:
            raise ValueError(f"{self.route}: a row with a condition rewrites the body")
        acts = (self.when, self.body, self.reply)
        if any(x is not None for x in acts) and (ANONYMOUS in self.who or self.answer is not None):
            raise ValueError(f"{self.route}: a row that checks or rewrites is for people, and is passed on")
        if self.reads and (self.starts or self.when is not None):
            raise ValueError(f"{self.route}: a row that starts or acts on a run does not only read")
        if self.alone and ANONYMOUS in self.who:
            raise ValueError(f"{self.route}: one at a time per account is for people")

    @property
    def read_only(self) -> bool:
        """Whether Prefect only reads for it: every GET, and the POST queries marked so."""
        return self.method in ("GET", "HEAD") or self.reads

    def params(self, path: str) -> dict[str, str]:
        """The route's parameters as ``path`` fills them in."""
        return self.pattern.match(path).groupdict()


def _reads(*routes: str, who: frozenset[str] = PEOPLE, reply: Reply | None = None) -> list[Rule]:
    """Read-only calls: a GET of a resource, or one of Prefect's POST queries (filter, count, ...), its
    body bounded (``privrelease.gate.bounds``), its answer made by ``reply`` if given."""
    return [
        Rule(who, method, route, body=bounded if method == "POST" else None, reply=reply, reads=True)
        for method, route in (r.split(" ", 1) for r in routes)
    ]


RULES: tuple[Rule, ...] = (
    # -- the UI's shell: its pages, scripts, images and its own settings (no data) -------------------
    Rule(ANYONE, "GET", "/"),
    Rule(ANYONE, "GET", "/ui-settings", answer=ui_settings),
    Rule(ANYONE, "GET", "/assets/{file}"),
    Rule(ANYONE, "GET", "/ico/{file}"),
    Rule(ANYONE, "GET", "/{file}.svg"),
    Rule(ANYONE, "GET", "/robots.txt"),
    *(Rule(ANYONE, "GET", page) for name in UI_PAGES for page in (f"/{name}", f"/{name}/{{rest*}}")),
    Rule(ANYONE, "GET", "/api/health", answer=health),
    # -- answered by the gate: what the UI asks of /api/admin on every page (people's: the UI takes an answer to
    # its version as signed in) ---------------------------------------------------------------------------
    Rule(PEOPLE, "GET", "/api/admin/settings", answer=public_settings),
    Rule(PEOPLE, "GET", "/api/admin/version", answer=prefect_version),
    # -- answered by the gate: the catalogues of published releases and datasets (privrelease.gate.catalogue) ------------
    *(Rule(ANYONE, "GET", page, answer=catalogue.page) for page in CATALOGUE_PAGES),
    Rule(ANYONE, "GET", "/privrelease/catalogue.js", answer=catalogue.script),
    Rule(PEOPLE, "GET", "/privrelease/api/index.json", answer=catalogue.index),
    Rule(PEOPLE, "GET", "/privrelease/api/releases/{id}", answer=catalogue.release),
    Rule(PEOPLE, "GET", "/privrelease/api/releases/{id}/files/{name}", answer=catalogue.release_file),
    Rule(PEOPLE, "GET", "/privrelease/api/releases/{id}/all.zip", answer=catalogue.release_archive),
    Rule(PEOPLE, "GET", "/privrelease/api/datasets", answer=catalogue.datasets),
    Rule(PEOPLE, "GET", "/privrelease/api/datasets/{id}", answer=catalogue.dataset),
    # -- reading: deployments and their forms, runs, task runs, logs, artifacts -------------------------
    # a deployment, a run and a work pool without the operator's settings in them (privrelease.gate.owned); a deployment's
    # release form with its fields filled in from the registry (privrelease.gate.forms, which clears it as gate.owned does)
    Rule(PEOPLE, "GET", "/api/deployments/{id}", answer=forms.deployment),
    *_reads(
        "POST /api/deployments/filter",
        "POST /api/deployments/paginate",
        "POST /api/flow_runs/filter",
        "POST /api/flow_runs/paginate",
        "GET /api/flow_runs/{id}",
        "POST /api/work_pools/filter",
        "GET /api/work_pools/{name}",
        reply=owned.cleared,
    ),
    Rule(PEOPLE, "GET", "/api/automations/related-to/{resource}", answer=owned.no_automations),
    *_reads(
        "POST /api/flows/filter",
        "POST /api/flows/count",
        "POST /api/flows/paginate",
        "GET /api/flows/{id}",
        "POST /api/deployments/count",
        "GET /api/deployments/{id}/schedules",
        "POST /api/flow_runs/count",
        "POST /api/flow_runs/history",
        "GET /api/flow_runs/{id}/graph-v2",
        "GET /api/flow_runs/{id}/input/{key}",
        "GET /api/flow_run_states/",
        "POST /api/task_runs/filter",
        "POST /api/task_runs/count",
        "POST /api/task_runs/paginate",
        "GET /api/task_runs/{id}",
        "GET /api/task_run_states/",
        "POST /api/task_runs/history",
        "POST /api/logs/filter",
        "POST /api/artifacts/filter",
        "POST /api/artifacts/count",
        "POST /api/artifacts/latest/filter",
        "POST /api/artifacts/latest/count",
        "GET /api/artifacts/{id}",
        "GET /api/artifacts/{key}/latest",
        "POST /api/ui/flow_runs/history",
        "POST /api/ui/flow_runs/count-task-runs",
        "POST /api/ui/flows/count-deployments",
        "POST /api/ui/flows/next-runs",
        "POST /api/ui/task_runs/dashboard/counts",
        "POST /api/ui/task_runs/count",
        "POST /api/flow_runs/lateness",
        "POST /api/saved_searches/filter",
        # the pool's queues and workers, as the dashboard and a deployment's page show their health
        "GET /api/work_pools/{name}/queues/{queue}",
        "POST /api/work_pools/{name}/queues/filter",
        "POST /api/work_pools/{name}/workers/filter",
    ),
    # the run form checks its fields against its deployment's schema; the event feed and a run's graph read events
    Rule(PEOPLE, "POST", "/api/ui/schemas/validate", body=stored_schema, reads=True, alone=True),
    Rule(PEOPLE, "POST", "/api/events/filter", body=event_query, reply=events_shown, reads=True, alone=True),
    Rule(PEOPLE, "GET", "/api/events/filter/next", answer=next_events),
    Rule(PEOPLE, "POST", "/api/events/count-by/{countable}", body=event_count, reads=True, alone=True),
    # -- acting: each role its own ---------------------------------------------------------------------
    Rule(
        SPENDERS, "POST", "/api/deployments/{id}/create_flow_run", when=deployment_in(RELEASE_FORMS), body=start_run, starts=True
    ),
    Rule(
        frozenset({AUDITOR}),
        "POST",
        "/api/deployments/{id}/create_flow_run",
        when=deployment_in([AUDIT_FORM]),
        body=start_run,
        starts=True,
    ),
    Rule(PEOPLE, "POST", "/api/flow_runs/{id}/set_state", when=own_run, body=cancel),
    Rule(frozenset({STEWARD}), "POST", "/api/flow_runs/{id}/resume", when=awaits_approval, body=answer_approval),
)


def decide(role: str, method: str, path: str, rules: tuple[Rule, ...] | None = None) -> Rule | None:
    """The first rule (of ``rules``, else RULES) that lets ``role`` (or "anyone") call ``method path``; None: refused."""
    for rule in RULES if rules is None else rules:
        if role in rule.who and rule.method == method and rule.pattern.match(path):
            return rule
    return None


# -- the table as the docs show it --------------------------------------------------------------------

BEGIN, END = (
    "<!-- access table: rendered from privrelease/gate/access.py by `python -m privrelease.gate.access --write docs/SECURITY.md` -->",
    "<!-- /access table -->",
)


def markdown() -> str:
    """RULES as a markdown table, one line per row, in its order."""

    def who(roles: frozenset[str]) -> str:
        return ANONYMOUS if roles == ANYONE else ", ".join(r for r in (ANALYST, AUDITOR, STEWARD) if r in roles)

    lines = ["| who | method | route | when | body passed on, or answer |", "|---|---|---|---|---|"]
    for rule in RULES:
        does = "; ".join(
            [x.says for x in (rule.body, rule.answer, rule.reply) if x is not None]
            + (["the account's run limits first"] if rule.starts else [])
            + (["one of the account's at a time, one more waiting"] if rule.alone else [])
        )
        lines.append(f"| {who(rule.who)} | {rule.method} | `{rule.route}` | {rule.when.says if rule.when else ''} | {does} |")
    return "\n".join(lines) + "\n"


def spliced(page: str) -> str:
    """``page`` with the text between its BEGIN and END lines replaced by ``markdown()``."""
    head, sep, rest = page.partition(BEGIN + "\n")
    _, end, tail = rest.partition(END)
    if not sep or not end:
        raise ValueError(f"the page has no {BEGIN!r} ... {END!r} block")
    return f"{head}{BEGIN}\n{markdown()}{END}{tail}"


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"] and len(sys.argv) == 3:
        target = Path(sys.argv[2])
        target.write_text(spliced(target.read_text()))
    else:
        print(markdown(), end="")
