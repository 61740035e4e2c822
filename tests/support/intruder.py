"""The intruder's count, written apart from the product's measures (``privrelease.core.sdc.risk``) so it can check them: for
each person, the released records compatible with their true key (every non-missing key value equal to theirs).

- ``compatible``: in DuckDB, one equi-join per pattern of suppressed keys among the released records (a pattern's
  records are compared on the keys it keeps), summed per person;
- ``brute``: every person against every released record (numpy, small tables), the oracle of the first;
- ``true_keys``: a person's true key as the release codes it, by the auditor's own reading of the policy's
  hierarchies (an interval's index for a numeric key's breaks, the mapped group for a categorical key) and of a
  top-coding; ``read_back``: the released values read back into those codes from the records that kept them
  (each released label must stand for one code: else the coding is not a function of the true value).
"""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd


def _text(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Keys as text (a missing value NULL), named k0, k1, ... so that any column name is safe in SQL."""
    return pd.DataFrame({f"k{j}": frame[c].astype(object).where(frame[c].notna(), None).map(_str) for j, c in enumerate(keys)})


def _str(v: object) -> object:
    return None if v is None else (repr(float(v)) if isinstance(v, (int, float, np.integer, np.floating)) else str(v))


def compatible(persons: pd.DataFrame, released: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """Per person (row of ``persons``, their true key as the release codes it): how many released records are
    compatible with it."""
    people, records = _text(persons, keys), _text(released, keys)
    people["person"] = np.arange(len(people))
    names = list(records.columns)
    records["pattern"] = records[names].isna().to_numpy() @ (1 << np.arange(len(names)))
    con = duckdb.connect()
    con.register("people", people)
    con.register("records", records)
    total = np.zeros(len(people), dtype=np.int64)
    for (pattern,) in con.execute("SELECT DISTINCT pattern FROM records").fetchall():
        kept = [c for j, c in enumerate(names) if not (pattern >> j) & 1]
        grouped = f"SELECT {', '.join(kept + ['count(*) AS n'])} FROM records WHERE pattern = {pattern} GROUP BY ALL"
        if kept:
            on = " AND ".join(f"p.{c} = r.{c}" for c in kept)
            rows = con.execute(f"SELECT p.person, r.n FROM people p JOIN ({grouped}) r ON {on}").fetchnumpy()
            np.add.at(total, rows["person"].astype(np.int64), rows["n"].astype(np.int64))
        else:
            total += int(con.execute(f"SELECT count(*) FROM records WHERE pattern = {pattern}").fetchone()[0])
    con.close()
    return total


def own(persons: pd.DataFrame, released: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """Whether each person's own released record (row i) is compatible with their key: it must be, so a False
    says the two were not coded alike (the auditor's self-check)."""
    p, r = _text(persons, keys).to_numpy(), _text(released, keys).to_numpy()
    return (pd.isna(r) | (p == r)).all(axis=1)


def brute(persons: pd.DataFrame, released: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """The same count, every person against every released record."""
    p, r = _text(persons, keys).to_numpy(), _text(released, keys).to_numpy()
    missing = pd.isna(r)
    ok = missing[None, :, :] | (p[:, None, :] == r[None, :, :])
    return ok.all(axis=2).sum(axis=1)


def _code(values: pd.Series, hierarchy: object, level: int) -> pd.Series:
    """The auditor's own recoding of values: a numeric key's interval index at its breaks, a categorical key's
    group ``level`` levels up (a value a level does not map stays as it is)."""
    if isinstance(hierarchy, dict):
        return pd.Series(np.searchsorted(np.asarray(hierarchy["breaks"], float), values.to_numpy(float), side="right"))
    out = values.astype(str)
    for mapping in hierarchy[:level]:
        out = out.map(lambda v, m=mapping: m.get(v, v))
    return out


def true_keys(true: pd.DataFrame, keys: list[str], steps: list[dict], hierarchies: dict) -> pd.DataFrame:
    """Each person's key as the chain's codings give it from their true values, by the auditor's own reading of
    the steps (``recode`` with the policy document's ``hierarchies``, ``topcode``): the key an intruder who knows
    the true values and the public parameters holds."""
    out = true[keys].reset_index(drop=True).astype(object)
    for step in steps:
        if step["method"] == "recode":
            for c in step["columns"]:
                out[c] = _code(out[c], hierarchies[c], step.get("level", 1)).astype(object)
        elif step["method"] == "topcode" and step["column"] in keys:
            out[step["column"]] = out[step["column"]].astype(float).clip(step.get("bottom"), step.get("top")).astype(object)
        elif step["method"] != "suppress":
            raise ValueError(f"{step['method']} is not a coding: its persons are the table before local suppression")
    return out


def read_back(persons: pd.DataFrame, released: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The released keys in the persons' codes (row i of ``released`` is person i): each released label is read
    back from the records that kept it, and must stand for one code (else the coding is not a function of the
    true value, and this fails)."""
    records = pd.DataFrame(index=range(len(persons)))
    for c in keys:
        code = persons[c].reset_index(drop=True)
        shown = released[c].reset_index(drop=True).astype(object)
        kept = shown.notna()
        pairs = pd.DataFrame({"label": shown[kept].map(str), "code": code[kept].map(_str), "value": code[kept]})
        pairs = pairs.drop_duplicates(["label", "code"])
        assert not pairs["label"].duplicated().any() and not pairs["code"].duplicated().any(), (c, pairs)
        back = dict(zip(pairs["label"], pairs["value"]))  # a label: the person's code object itself
        records[c] = shown.map(lambda v, b=back: b.get(str(v))).astype(object).where(kept, None)
    return records
