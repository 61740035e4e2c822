"""A test must not fail at random: every generator a test or a benchmark makes is seeded, or says on its line why
what it asserts holds for every draw (``# any draw: <why>``). Run by ``make lint``; exits 1 naming each place.

Unseeded: ``noise.generator()`` / ``noise.generator(None)`` / ``Randomness(None)`` (operating-system entropy),
``np.random.default_rng()`` and ``SeedSequence()`` without a seed, numpy's legacy global functions
(``np.random.normal`` …) and the ``random`` module's (``random.random`` …), ``secrets``' and ``os.urandom`` aside:
tokens and names, not draws a test asserts on, so they are not counted. A release run in a test without a seed
draws from the operating system too; the tests that assert on such a release's numbers seed it (``seed:`` in test
mode), which review, not this check, keeps so.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOTS = ("tests", "bench")
MARK = "# any draw:"
LEGACY = {
    "rand",
    "randn",
    "randint",
    "random",
    "normal",
    "uniform",
    "choice",
    "shuffle",
    "permutation",
    "seed",
    "laplace",
    "binomial",
}
STDLIB = {"random", "randint", "choice", "choices", "shuffle", "sample", "uniform", "gauss", "randrange"}


def _name(node: ast.AST) -> str:
    """``a.b.c`` of an attribute chain or a name ('' for anything else)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _name(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _unseeded_arg(call: ast.Call) -> bool:
    """No argument at all, or a literal None first."""
    if not call.args and not call.keywords:
        return True
    first = call.args[0] if call.args else call.keywords[0].value
    return isinstance(first, ast.Constant) and first.value is None


def unseeded(call: ast.Call) -> str | None:
    """Why ``call`` draws from an unseeded source, or None."""
    name = _name(call.func)
    last = name.rsplit(".", 1)[-1]
    if last in ("generator", "Randomness") and _unseeded_arg(call):
        return f"{name}() draws from the operating system's entropy"
    if last in ("default_rng", "SeedSequence") and _unseeded_arg(call):
        return f"{name}() is seeded from the operating system's entropy"
    if name.startswith(("np.random.", "numpy.random.")) and last in LEGACY:
        return f"{name} uses numpy's global, unseeded generator"
    if name.startswith("random.") and name.count(".") == 1 and last in STDLIB:
        return f"{name} uses the random module's global, unseeded generator"
    return None


def _span(statement: ast.stmt) -> range:
    """The lines a mark may stand on: a simple statement's, or a compound statement's header (``for``, ``if``, ``with``)."""
    body = getattr(statement, "body", None)
    last = body[0].lineno - 1 if isinstance(body, list) and body else statement.end_lineno
    return range(statement.lineno, max(last, statement.lineno) + 1)


def check(path: Path) -> list[str]:
    """Each unseeded call in ``path`` whose statement (any line of it, or of a compound statement's header) lacks the mark."""
    text = path.read_text()
    lines = text.splitlines()
    out = []

    def visit(node: ast.AST, span: range) -> None:
        if isinstance(node, ast.stmt):
            span = _span(node)
        why = unseeded(node) if isinstance(node, ast.Call) else None
        if why and not any(MARK in lines[i - 1] for i in span):
            out.append(f"{path}:{node.lineno}: {why}; seed it, or say on its line why the test holds for every draw ({MARK} …)")
        for child in ast.iter_child_nodes(node):
            visit(child, span)

    visit(ast.parse(text, str(path)), range(0))
    return out


def main(roots: list[str]) -> int:
    found = [line for root in roots for path in sorted(Path(root).rglob("*.py")) for line in check(path)]
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or list(ROOTS)))
