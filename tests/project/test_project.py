"""Project-level contracts: the spec schema, the stack, the layout rules, prefect.yaml."""

from __future__ import annotations

import ast
import importlib
import json
import sys

import jsonschema
import phe.util
import yaml

from privrelease.core.datasets.demo import DEMO_REQUEST
from privrelease.core.release import spec as spec_module
from privrelease.gate import access
from tests.conftest import REPO


def test_committed_spec_schema_matches_the_models():
    committed = json.loads((REPO / "privrelease" / "schemas" / "release-request.schema.json").read_text())
    assert committed == spec_module.json_schema(), (
        "regenerate: python -m privrelease.core.release.spec > privrelease/schemas/release-request.schema.json"
    )


def test_schema_accepts_the_demo_spec_and_rejects_bad_ones():
    schema = json.loads((REPO / "privrelease" / "schemas" / "release-request.schema.json").read_text())
    doc = yaml.safe_load(DEMO_REQUEST)
    jsonschema.validate(doc, schema)
    for bad in (
        {**doc, "extra": 1},
        {**doc, "mechanism": {"name": "ra", "params": {**doc["mechanism"]["params"], "k": "three"}}},
        {**doc, "mechanism": {"name": "nope", "params": {}}},
        {**doc, "dataset": {"id": "census-demo", "source": "census.csv", "format": "csv"}},
        {**doc, "mechanism": {"name": "dpne", "params": {"user_column": "u", "text_column": "t", "epsilon": 1, "delta": 1e-7}}},
    ):
        assert list(jsonschema.Draft202012Validator(schema).iter_errors(bad)), bad


def test_gmpy2_accelerates_phe():
    assert phe.util.HAVE_GMP, "gmpy2 is missing: Paillier would run 8-10x slower"


def test_core_never_imports_prefect():
    for path in (REPO / "privrelease" / "core").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            )
            assert not any(n == "prefect" or n.startswith("prefect.") for n in names), path


def _environment_reads(tree: ast.AST) -> list[int]:
    """Lines that read the environment: os.environ[...] (not as an assignment's target), os.environ.get, os.getenv."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value):
            lines.append(node.lineno)
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in ("get", "copy", "items", "keys", "values")
            and _is_environ(node.value)
        ):
            lines.append(node.lineno)
        elif (
            isinstance(node, ast.Attribute)
            and node.attr == "getenv"
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            lines.append(node.lineno)
    return sorted(lines)


def _is_environ(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id == "os"
    )


def test_one_module_reads_the_environment():
    """Every environment variable is read in privrelease/core/settings.py, which lists them (#38): no other product module
    reads one (the command line may still set variables for the flows it starts)."""
    readers = {}
    for folder in ("core", "flows", "gate"):
        for path in (REPO / "privrelease" / folder).rglob("*.py"):
            found = _environment_reads(ast.parse(path.read_text()))
            if found and path != REPO / "privrelease" / "core" / "settings.py":
                readers[str(path.relative_to(REPO))] = found
    assert readers == {}
    assert _environment_reads(ast.parse("import os\nx = os.environ.get('A')\ny = os.getenv('B')\nz = os.environ['C']\n")) == [
        2,
        3,
        4,
    ]
    assert _environment_reads(ast.parse("import os\nos.environ['A'] = '1'\n")) == []  # setting one is not reading it


def test_the_docs_policy_table_is_the_gates_policy():
    """docs/SECURITY.md shows privrelease/gate/access.py's RULES as markdown() renders it, row for row."""
    page = (REPO / "docs" / "SECURITY.md").read_text()
    assert access.BEGIN in page and access.END in page
    assert page == access.spliced(page), (
        "docs/SECURITY.md's access table differs from privrelease/gate/access.py's RULES; regenerate it: "
        ".venv/bin/python -m privrelease.gate.access --write docs/SECURITY.md"
    )


def test_prefect_yaml_entrypoints_import():
    config = yaml.safe_load((REPO / "prefect.yaml").read_text())
    assert config["deployments"]
    for deployment in config["deployments"]:
        module_path, name = deployment["entrypoint"].split(":")
        module = importlib.import_module(module_path.removesuffix(".py").replace("/", "."))
        assert hasattr(getattr(module, name), "fn"), deployment["entrypoint"]


def test_every_package_the_product_imports_is_pinned_as_the_lock_pins_it():
    """Each third-party package imported by privrelease/core/, privrelease/flows/ or privrelease/gate/ is a declared dependency in
    pyproject.toml, pinned to the version requirements.lock.txt installs (a package that only came
    along with another could change or vanish with it)."""
    import importlib.metadata as metadata
    import re
    import tomllib

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    declared = {
        norm(d.split("==")[0].split("[")[0]): d.split("==")[1]
        for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    locked = {
        norm(name): version
        for name, version in re.findall(
            r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s#]+)", (REPO / "requirements.lock.txt").read_text(), re.M
        )
    }
    local = {"privrelease", "__future__"}
    modules = set()
    for folder in ("core", "flows", "gate"):
        for path in (REPO / "privrelease" / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    modules |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules.add(node.module.split(".")[0])
    owners = metadata.packages_distributions()
    imported = {norm(owners[m][0]) for m in modules - local - set(sys.stdlib_module_names)}
    assert "cryptography" in imported and "pyarrow" in imported  # the scan sees what the code imports
    assert sorted(imported - set(declared)) == []
    assert {name: declared[name] for name in imported} == {name: locked[name] for name in imported}
