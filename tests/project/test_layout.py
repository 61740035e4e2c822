"""The house's shape (#38): each package imports only the packages below it, and no module reaches itself
through its imports, counting the imports inside functions too. docs/ARCHITECTURE.md draws the same table."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

# from the top floor down; a package may import itself and any package after it
FLOORS = tuple(f"privrelease.{f}" for f in (
    "cli", "gate", "flows", "core.operations", "core.release", "core.datasets", "core.mechanisms", "core.spam", "core.sdc",
    "core.ledger", "core.privacy", "core.tables", "core"))  # fmt: skip
SIBLINGS = {
    frozenset({"privrelease.core.spam", "privrelease.core.sdc"}),
    frozenset({"privrelease.gate", "privrelease.flows"}),
}  # one floor: neither imports the other


def package(module: str) -> str:
    """The floor a dotted module name lives on: the longest of ``FLOORS`` it starts with."""
    return max((f for f in FLOORS if module == f or module.startswith(f + ".")), key=len)


def imports(root: Path) -> dict[str, set[str]]:
    """Every product module and the product modules it imports, anywhere in its body."""
    paths = {
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
        for top in ("core", "flows", "gate", "cli")
        for p in (root / "privrelease" / top).rglob("*.py")
    }
    found = {}
    for module, path in sorted(paths.items()):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # ``from package import module`` names the module (its package's __init__ runs anyway, for every import)
                names |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in paths else node.module for a in node.names}
        found[module] = {n for n in names if n in paths and n != module}
    return found


def violations(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, targets in graph.items():
        for target in targets:
            a, b = package(module), package(target)
            if a != b and (FLOORS.index(b) < FLOORS.index(a) or frozenset({a, b}) in SIBLINGS):
                wrong.append(f"{module} ({a}) imports {target} ({b}), which is not below it")
    return sorted(wrong)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each module that reaches itself, with the path (depth-first, every module once)."""
    found, state = [], {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = "open"
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                found.append(path[path.index(n) :] + [n] if n in path else [m, n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return found


def test_each_package_imports_only_the_packages_below_it():
    graph = imports(REPO)
    assert len(graph) > 100 and all(
        m.split(".")[:2] in (["privrelease", t] for t in ("core", "flows", "gate", "cli")) for m in graph
    )
    assert violations(graph) == []
    assert cycles(graph) == []


def test_the_checks_catch_an_import_back_up_and_a_cycle():
    """The same checks on a weakened house: the ledger importing the release path, and a two-module circle."""
    graph = imports(REPO)
    graph["privrelease.core.ledger.ledger"] = graph["privrelease.core.ledger.ledger"] | {"privrelease.core.release.charged"}
    assert violations(graph) == [
        "privrelease.core.ledger.ledger (privrelease.core.ledger) imports privrelease.core.release.charged (privrelease.core.release), which is not below it"
    ]
    assert cycles(graph)  # charged imports the ledger, which now imports charged
    graph = imports(REPO)
    graph["privrelease.core.spam.dp"] = graph["privrelease.core.spam.dp"] | {"privrelease.core.sdc.policy"}
    assert violations(graph) == [
        "privrelease.core.spam.dp (privrelease.core.spam) imports privrelease.core.sdc.policy (privrelease.core.sdc), which is not below it"
    ]


def test_the_architecture_doc_lists_every_package():
    doc = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    for floor in FLOORS[:-1]:
        assert f"`{floor.replace('.', '/')}/`" in doc, floor


def test_tests_live_in_folders_by_subject():
    """No test file at the suite's top (#55): each lives in its subject's folder, and the system tier is a folder."""
    tests = REPO / "tests"
    assert sorted(p.name for p in tests.glob("test_*.py")) == []
    folders = {p.parent.relative_to(tests).parts[0] for p in tests.rglob("test_*.py")}
    assert {"system", "attacks", "privacy", "ledger", "mechanisms", "release", "sdc", "spam", "gate", "flows", "cli"} <= folders
    assert not list((tests / "support").glob("test_*.py"))


def test_every_prefect_task_is_made_in_flows_steps():
    """Prefect wraps core steps as tasks in one place (#55): no other module makes a task."""
    made = sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "privrelease").rglob("*.py")
        if any(isinstance(d, ast.Call) and getattr(d.func, "id", None) == "task" or getattr(d, "id", None) == "task"
               for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, ast.FunctionDef) for d in node.decorator_list)
    )  # fmt: skip
    assert made == ["privrelease/flows/steps.py"]
