"""``scripts/check_seeds.py`` (run by ``make lint``): a test that draws from an unseeded generator fails at random, so
every unseeded generator in the tests and benchmarks is refused unless its statement says why any draw will do."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.check_seeds import check, main
from tests.conftest import REPO

UNSEEDED = [
    "rng = noise.generator()",
    "rng = noise.generator(None)",
    "rng = noise.Randomness(None)",
    "rng = np.random.default_rng()",
    "x = np.random.normal(0, 1, 5)",
    "x = random.random()",
    "for x in np.random.permutation(5):\n    pass",
    "if np.random.default_rng().random() < 0.5:\n    pass",
]
SEEDED = [
    "rng = noise.generator(3)",
    "rng = noise.Randomness(20261126)",
    "rng = np.random.default_rng(58)",
    "rng = np.random.default_rng(seed=1)",
    "x = rng.normal(0, 1, 5)",
    "token = secrets.token_hex(3)",
    "rng = noise.generator()  # any draw: it asserts where the words come from",
    "values = [\n    f(noise.generator())\n    for _ in range(3)\n]  # any draw: the production path's draws, timed",
]


@pytest.mark.parametrize("source", UNSEEDED)
def test_an_unseeded_generator_is_named(tmp_path: Path, source: str):
    (tmp_path / "t.py").write_text(source + "\n")
    found = check(tmp_path / "t.py")
    assert len(found) == 1 and "t.py:" in found[0] and "# any draw:" in found[0]


@pytest.mark.parametrize("source", SEEDED)
def test_a_seeded_or_justified_generator_passes(tmp_path: Path, source: str):
    (tmp_path / "t.py").write_text(source + "\n")
    assert check(tmp_path / "t.py") == []


def test_the_mark_on_another_statement_does_not_count(tmp_path: Path):
    (tmp_path / "t.py").write_text("a = 1  # any draw: not this one\nrng = np.random.default_rng()\n")
    assert len(check(tmp_path / "t.py")) == 1


def test_the_tests_and_benchmarks_are_clean():
    root = REPO
    assert main([str(root / "tests"), str(root / "bench")]) == 0
