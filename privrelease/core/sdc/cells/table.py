"""A hierarchical table: each dimension's tree of nodes, the cells (every combination of nodes), their values and
contributions, and the linear relations between them (each parent the sum of its children, along each dimension).

A dimension without sub-totals has its values and a total. One with sub-totals takes the policy's categorical
hierarchy (levels of ``{value: group}`` maps, as global recoding reads them: a value a level does not map keeps
its name); a node with a single child is that child's cell again and is left out. Nodes are listed depth first
from the total (``TOTAL``), each group before its members, members sorted; a node's depth is its level (0: total).
Cells are the product of the dimensions' nodes in C order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import sparse

TOTAL = "Total"


@dataclass(frozen=True)
class Dim:
    name: str
    labels: list[str]  # each node's label, depth first from the total
    depth: list[int]  # 0: the total
    children: dict[int, list[int]]  # a parent node's children
    leaf: dict[str, int]  # a value's node

    def ancestors(self, node: int) -> list[int]:
        """The node and every node above it."""
        up = {c: p for p, cs in self.children.items() for c in cs}
        out = [node]
        while out[-1] in up:
            out.append(up[out[-1]])
        return out


def dimension(name: str, values: list[str], levels: list[dict[str, str]] | None = None) -> Dim:
    """A dimension over ``values`` (each a leaf), grouped by ``levels`` (None: only a total above them)."""
    parent: dict[tuple, tuple] = {}
    root = (-1, TOTAL)
    for v in values:
        node, here = (0, v), v
        for j, level in enumerate(levels or [], start=1):
            here = level.get(here, here)
            parent[node] = (j, here)
            node = (j, here)
        parent[node] = root
    kids: dict[tuple, list[tuple]] = {}
    for child, p in parent.items():
        kids.setdefault(p, []).append(child)
    for node in [n for n in list(kids) if n != root]:  # a node with one child is that child's cell: leave it out
        if len(kids[node]) == 1:
            (only,) = kids.pop(node)
            up = parent.pop(node)
            kids[up] = [only if c == node else c for c in kids[up]]
            parent[only] = up
    labels, depth, children, leaf = [], [], {}, {}

    def walk(node: tuple, d: int) -> int:
        i = len(labels)
        labels.append(node[1])
        depth.append(d)
        if node[0] == 0:
            leaf[node[1]] = i
        below = sorted(kids.get(node, []), key=lambda n: (n[0] == 0, n[1]))
        if below:
            children[i] = [walk(c, d + 1) for c in below]
        return i

    walk(root, 0)
    return Dim(name, labels, depth, children, leaf)


@dataclass(frozen=True)
class Table:
    dims: list[Dim]
    values: np.ndarray  # each cell's total (a count, or a sum)
    contributors: np.ndarray  # each cell's number of contributors
    top: np.ndarray  # each cell's largest contributions, decreasing (cells by rows)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(d.labels) for d in self.dims)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def nodes(self) -> np.ndarray:
        """Each cell's node in each dimension (cells by rows)."""
        return np.stack(np.unravel_index(np.arange(self.size), self.shape), axis=1)


def build(frame: pd.DataFrame, dims: list[Dim], value: np.ndarray, contributor: np.ndarray, top_n: int = 2) -> Table:
    """The table of ``frame`` (each record's value, 1 for a count, and its contributor's id): each cell's total, its
    number of contributors and its ``top_n`` largest contributions (a contributor's records in a cell summed)."""
    shape = tuple(len(d.labels) for d in dims)
    leaves = [frame[d.name].astype("string").map(d.leaf).to_numpy(dtype=np.int64) for d in dims]
    base = pd.DataFrame({f"d{i}": c for i, c in enumerate(leaves)} | {"who": contributor, "v": value})
    base = base.groupby([*(f"d{i}" for i in range(len(dims))), "who"], sort=False, as_index=False)["v"].sum()
    expanded = base
    for i, d in enumerate(dims):  # each record counts in its leaf's cell and in every cell above it
        up = pd.DataFrame([(n, a) for n in d.leaf.values() for a in d.ancestors(n)], columns=[f"d{i}", f"a{i}"])
        expanded = expanded.merge(up, on=f"d{i}").drop(columns=f"d{i}")
    cell = np.ravel_multi_index(tuple(expanded[f"a{i}"].to_numpy() for i in range(len(dims))), shape)
    per = pd.DataFrame({"cell": cell, "who": expanded["who"].to_numpy(), "v": expanded["v"].to_numpy(dtype=float)})
    per = per.groupby(["cell", "who"], sort=False, as_index=False)["v"].sum()
    size = int(np.prod(shape))
    values = np.bincount(per["cell"], weights=per["v"], minlength=size)
    contributors = np.bincount(per["cell"], minlength=size).astype(np.int64)
    per = per.sort_values(["cell", "v"], ascending=[True, False], kind="stable")
    rank = per.groupby("cell").cumcount().to_numpy()
    keep = rank < top_n
    top = np.zeros((size, top_n))
    top[per["cell"].to_numpy()[keep], rank[keep]] = per["v"].to_numpy()[keep]
    return Table(dims, values, contributors, top)


def relations(shape: tuple[int, ...], dims: list[Dim]) -> sparse.csr_matrix:
    """Each relation ``parent - sum(children) = 0`` as a row over the cells (sparse, entries ±1)."""
    index = np.arange(int(np.prod(shape))).reshape(shape)
    rows, cols, vals, r = [], [], [], 0
    for axis, d in enumerate(dims):
        for p, kids in d.children.items():
            top = np.take(index, p, axis=axis).ravel()
            ids = np.arange(r, r + top.size)
            rows.append(ids)
            cols.append(top)
            vals.append(np.ones(top.size))
            for c in kids:
                rows.append(ids)
                cols.append(np.take(index, c, axis=axis).ravel())
                vals.append(-np.ones(top.size))
            r += top.size
    if not rows:
        return sparse.csr_matrix((0, index.size))
    return sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(r, index.size))
