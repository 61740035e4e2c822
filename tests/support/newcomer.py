"""The newcomer's own messy tables from issue #54, regenerated (fixed seeds): a statistical office's hospital visits
(4,985 rows, an SDC dataset) and a payroll (2,802 payslips, a DP dataset of the person unit), with what such data
holds: repeated patients, a near-unique postcode, names, blanks, out-of-range values, a zero-width space and a
trailing space in a ward's name, and a ``Fïnance`` department."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

WARDS = ["Cardiology", "Oncology", "Maternity", "Surgery", "Geriatrics", "Paediatrics"]
DEPARTMENTS = ["Finance", "Fïnance", "Operations", "Research", "Sales", "Legal"]
GRADES = ["A", "B", "C", "D"]


def hospital(rows: int = 4985, patients: int = 1900, seed: int = 54) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    patient = rng.integers(0, patients, rows)
    age = rng.integers(18, 95, patients)[patient]
    sex = np.where(rng.random(patients) < 0.52, "F", "M")[patient]
    ward = rng.choice(WARDS, rows, p=[0.2, 0.15, 0.15, 0.25, 0.15, 0.1]).astype(object)
    ward[rng.choice(rows, 1, replace=False)] = "Surgery\u200b"  # a zero-width space: a one-record ward
    ward[rng.choice(rows, 3, replace=False)] = "Oncology "  # padded
    stay = rng.gamma(2.0, 3.0, rows).round(1).astype(object)
    stay[rng.choice(rows, 40, replace=False)] = ""  # blanks
    stay[rng.choice(rows, 5, replace=False)] = 999.0  # out of range
    return pd.DataFrame(
        {
            "visit_id": np.arange(100000, 100000 + rows),
            "patient_id": patient + 5000,
            "name": [f"Person {p:04d}" for p in patient],
            "postcode": [f"P{x:04d}" for x in rng.integers(0, int(rows * 1.3), rows)],
            "age": age,
            "sex": sex,
            "ward": ward,
            "diagnosis": rng.choice(["I21", "C50", "O80", "K35", "S72", "J18", "E11"], rows),
            "length_of_stay": stay,
        }
    )


HOSPITAL_POLICY = {
    "identifiers": ["visit_id"],
    "keys": {"categorical": ["sex", "ward"], "numeric": ["age"]},
    "sensitive": ["diagnosis"],
    "publishable": ["postcode", "name"],
    "thresholds": {"k": 3},
    "hierarchies": {"age": {"breaks": [18, 30, 45, 60, 75, 95]}},
}


def payroll(rows: int = 2802, people: int = 480, seed: int = 55) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    person = rng.integers(0, people, rows)
    department = np.array(DEPARTMENTS, dtype=object)[rng.integers(0, len(DEPARTMENTS), people)][person]
    grade = np.array(GRADES)[rng.integers(0, 4, people)][person]
    salary = rng.normal(3200, 900, rows).round(2)
    salary[rng.choice(rows, 6, replace=False)] = -50.0  # out of range: clipped to the bounds by a release
    salary[rng.choice(rows, 3, replace=False)] = 250000.0
    bonus = rng.normal(300, 100, rows).round(2).astype(object)
    bonus[rng.choice(rows, 200, replace=False)] = ""  # blanks: a nullable column
    return pd.DataFrame(
        {
            "person_id": person + 70000,
            "department": department,
            "grade": grade,
            "month": rng.integers(1, 13, rows),
            "salary": salary,
            "bonus": bonus,
        }  # fmt: skip
    )


def write(folder: Path) -> dict[str, Path]:
    """The two tables as CSV files and the hospital's disclosure policy as YAML, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"hospital": folder / "hospital.csv", "payroll": folder / "payroll.csv", "policy": folder / "hospital.policy.yaml"}
    hospital().to_csv(paths["hospital"], index=False)
    payroll().to_csv(paths["payroll"], index=False)
    paths["policy"].write_text(yaml.safe_dump(HOSPITAL_POLICY, sort_keys=False))
    return paths
