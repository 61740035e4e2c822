"""Local suppression to k = 3 on UCI Adult, alone and after global recoding: suppressed cells, information loss, time.

The key is {age, workclass, education, marital-status, occupation, race, sex, native-country} (the
one ARX's Adult tutorial marks quasi-identifying), the hierarchies those of
privrelease/schemas/policies/adult.policy.yaml. Information loss is reported three ways:

- suppressed cells and records with at least one; the people compatible with fewer than k released records
  given their (recoded) true key (``privrelease.core.sdc.risk``'s intruder count: 0 by construction);
- non-uniform entropy (ARX's "non-uniform entropy", in bits per record): Σ over records and keys of
  −log2 P(original value | released value), the probability taken over the original table, a
  suppressed (missing) value released as the whole column;
- the average equivalence class size C_AVG = N / (classes · k) (LeFevre et al. 2006; 1 is ideal).

Run: .venv/bin/python bench/bench_sdc.py   (PRIVRELEASE_DATA holds uci/adult.data.gz)
Results are recorded in bench/RESULTS.md (command, date, machine).
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from privrelease.core.sdc import methods, policy, risk  # noqa: E402

ADULT = Path(os.environ.get("PRIVRELEASE_DATA", "data")) / "uci" / "adult.data.gz"
K = 3


def adult() -> pd.DataFrame:
    frame = pd.read_csv(ADULT, skipinitialspace=True, na_values="?")
    frame.columns = [c.strip() for c in frame.columns]
    return frame.dropna().reset_index(drop=True)


def entropy_loss(original: pd.DataFrame, released: pd.DataFrame, keys: list[str]) -> float:
    """Non-uniform entropy, bits per record."""
    bits = 0.0
    for c in keys:
        o, r = original[c].astype("string"), released[c].astype("string").fillna("\x00suppressed")
        pairs = pd.DataFrame({"r": r, "o": o})
        joint = pairs.groupby(["r", "o"])["r"].transform("size").to_numpy(float)
        given = pairs.groupby("r")["r"].transform("size").to_numpy(float)
        bits += float(-np.log2(joint / given).sum())
    return bits / len(original)


def classes(released: pd.DataFrame, keys: list[str]) -> int:
    return len(released[keys].astype("string").fillna("*").drop_duplicates())


def run(name: str, frame: pd.DataFrame, rules: policy.Policy, recode: methods.Recode | None) -> dict:
    started = time.perf_counter()
    data = frame
    if recode is not None:
        data, _ = methods.recode(frame, recode, rules)
    out, said = methods.suppress(data, methods.Suppress(method="suppress", k=K), rules)
    seconds = time.perf_counter() - started
    keys = rules.key_vars.all
    assert risk.record_cells(out, keys)["fk"].min() >= K
    compatible = risk.record_cells(out, keys, count="intruder", persons=data)["fk"]
    return {
        "variant": name,
        "seconds": seconds,
        "below_k": int((compatible < K).sum()),
        "suppressed_cells": said["suppressed_cells"],
        "records_touched": int(out[keys].isna().any(axis=1).sum()),
        "entropy_bits": entropy_loss(frame, out, keys),
        "c_avg": len(out) / (classes(out, keys) * K),
    }


def main() -> None:
    frame = adult()
    rules = policy.read(str(REPO / "privrelease" / "schemas" / "policies" / "adult.policy.yaml"))
    keys = rules.key_vars.all
    before = risk.record_cells(frame, keys)["fk"]
    print(f"UCI Adult: {len(frame)} records, key {keys}; {int((before < K).sum())} records in cells below k = {K}")
    five = ["age", "native-country", "education", "marital-status", "workclass"]
    variants = [
        ("local suppression alone", None),
        ("recode age (5-year bands), then suppress", methods.Recode(method="recode", columns=["age"])),
        ("recode every key one level, then suppress", methods.Recode(method="recode", columns=[k for k in keys if k != "sex"])),
        ("recode 5 keys two levels, then suppress", methods.Recode(method="recode", columns=five, level=2)),
    ]
    print(
        "| variant | suppressed cells | records touched | people compatible with < k | non-uniform entropy (bits/record) | C_AVG | seconds |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, recode in variants:
        r = run(name, frame, rules, recode)
        print(
            f"| {r['variant']} | {r['suppressed_cells']:,} | {r['records_touched']:,} | {r['below_k']:,} | {r['entropy_bits']:.3f} | "
            f"{r['c_avg']:.2f} | {r['seconds']:.2f} |"
        )
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
