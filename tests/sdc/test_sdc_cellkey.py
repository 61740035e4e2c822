"""The cell key method (#56): the same cell gets the same perturbed count in two different tables; the perturbation
table's rows have mean 0 and the steward's variance where they can, never publish 1..js, keep a zero."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from privrelease.core.sdc.cells import cellkey
from privrelease.core.sdc.cells.rules import CellKey

RULE = CellKey(D=3, V=1.5, js=2)


def test_the_perturbation_tables_rows():
    for n in range(0, 12):
        d, p = cellkey.row(n, RULE)
        assert p.sum() == pytest.approx(1) and (p >= 0).all() and (np.abs(d) <= RULE.D).all()
        assert not np.isin(n + d, [1, 2]).any() and (n + d >= 0).all()
        if n >= RULE.D + RULE.js:  # room on both sides: the moments hold
            assert p @ d == pytest.approx(0, abs=1e-6) and p @ d**2 == pytest.approx(RULE.V, rel=1e-4)
    assert cellkey.row(0, RULE)[0].tolist() == [0]


def _cells(frame: pd.DataFrame, by: list[str]) -> tuple[pd.DataFrame, np.ndarray]:
    """Every cell of a table by ``by`` with its margins ('*': all), and each record's cells as (record, cell) pairs."""
    rows, pairs = [], []
    for mask in range(2 ** len(by)):
        kept = [d for i, d in enumerate(by) if mask >> i & 1]
        groups = frame.groupby(kept).indices if kept else {(): np.arange(len(frame))}
        for key, idx in groups.items():
            key = key if isinstance(key, tuple) else (key,)
            label = dict(zip(kept, key))
            rows.append(tuple(label.get(d, "*") for d in by))
            pairs += [(r, len(rows) - 1) for r in idx]
    return pd.DataFrame(rows, columns=by), np.array(pairs)


def _perturbed(frame, keys, by):
    cells, pairs = _cells(frame, by)
    counts = np.bincount(pairs[:, 1], minlength=len(cells))
    ck = cellkey.cell_keys(keys[pairs[:, 0]], pairs[:, 1], len(cells))
    return cells.assign(count=counts, perturbed=cellkey.perturb(counts, ck, RULE))


def test_the_same_cell_gets_the_same_perturbed_count_in_two_tables():
    rng = np.random.default_rng(56)
    frame = pd.DataFrame({"a": rng.choice(list("xyz"), 500), "b": rng.choice(list("pq"), 500), "c": rng.choice(list("uvw"), 500)})
    keys = rng.random(len(frame))  # drawn once per record
    ab = _perturbed(frame, keys, ["a", "b"])
    ac = _perturbed(frame, keys, ["a", "c"])
    left = ab[ab.b == "*"].set_index("a")["perturbed"]  # the cells a = ..., all b: the same records as a = ..., all c
    right = ac[ac.c == "*"].set_index("a")["perturbed"]
    assert left.to_dict() == right.to_dict()
    assert (ab["perturbed"] != ab["count"]).any()  # it does perturb
    assert not ab["perturbed"].isin([1, 2]).any() and (ab["perturbed"] >= 0).all()
    # another draw of the keys perturbs the same cell otherwise somewhere: the keys, not the table, decide
    other = _perturbed(frame, rng.random(len(frame)), ["a", "b"])
    assert (other["perturbed"] != ab["perturbed"]).any()
