"""A census-like sample table for the demo, so it runs without any external data.

Marginals are loosely modelled on UCI Adult, with salary depending on education, age and
hours so that the table has associations worth preserving. Sample data is not privacy noise;
its generator is fixed so every demo shows the same table.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from privrelease.core import paths
from privrelease.core.db import private_files
from privrelease.core.privacy.budget import Budget
from privrelease.core.tables.schema import Column, Schema

DEMO_SEED = 20100101

_CATEGORIES: dict[str, dict[str, float]] = {
    "workclass": {"Private": 0.74, "Self-emp-not-inc": 0.08, "Local-gov": 0.07, "State-gov": 0.04,
                  "Self-emp-inc": 0.04, "Federal-gov": 0.03},
    "education": {"HS-grad": 0.33, "Some-college": 0.22, "Bachelors": 0.17, "Masters": 0.05,
                  "Assoc-voc": 0.04, "11th": 0.04, "Assoc-acdm": 0.03, "10th": 0.03, "7th-8th": 0.02,
                  "Prof-school": 0.02, "Doctorate": 0.01, "9th": 0.02, "12th": 0.02},
    "marital-status": {"Married-civ-spouse": 0.47, "Never-married": 0.32, "Divorced": 0.14,
                       "Separated": 0.03, "Widowed": 0.03, "Married-spouse-absent": 0.01},
    "occupation": {"Prof-specialty": 0.13, "Craft-repair": 0.13, "Exec-managerial": 0.13,
                   "Adm-clerical": 0.12, "Sales": 0.12, "Other-service": 0.11, "Machine-op-inspct": 0.07,
                   "Transport-moving": 0.05, "Handlers-cleaners": 0.05, "Farming-fishing": 0.03,
                   "Tech-support": 0.03, "Protective-serv": 0.02, "Priv-house-serv": 0.01},
    "relationship": {"Husband": 0.41, "Not-in-family": 0.26, "Own-child": 0.15, "Unmarried": 0.11,
                     "Wife": 0.05, "Other-relative": 0.02},
    "race": {"White": 0.86, "Black": 0.09, "Asian-Pac-Islander": 0.03, "Amer-Indian-Eskimo": 0.01, "Other": 0.01},
    "sex": {"Male": 0.68, "Female": 0.32},
    "native-country": {"United-States": 0.91, "Mexico": 0.02, "Philippines": 0.01, "Germany": 0.01,
                       "Canada": 0.01, "India": 0.01, "Other": 0.03},
}  # fmt: skip

_EDU_RANK = {"Doctorate": 3, "Prof-school": 3, "Masters": 2, "Bachelors": 2}


def census(rows: int = 20_000, seed: int = DEMO_SEED) -> pd.DataFrame:
    """A synthetic census table with Adult's column names."""
    rng = np.random.default_rng(seed)
    data: dict[str, object] = {"age": np.clip(np.round(rng.gamma(6.0, 6.5, rows) + 17), 17, 90).astype(np.int64)}
    for column, dist in _CATEGORIES.items():
        values = np.array(list(dist))
        weights = np.array(list(dist.values()))
        data[column] = values[rng.choice(len(values), size=rows, p=weights / weights.sum())]
    data["hours-per-week"] = np.clip(np.round(rng.normal(40, 12, rows)), 1, 99).astype(np.int64)
    frame = pd.DataFrame(data)
    score = (
        frame["education"].map(_EDU_RANK).fillna(0).to_numpy()
        + (frame["age"].to_numpy() > 35)
        + (frame["hours-per-week"].to_numpy() > 45)
        + (frame["marital-status"].to_numpy() == "Married-civ-spouse")
    )
    frame["salary"] = np.where(rng.random(rows) < 1 / (1 + np.exp(3.2 - 1.1 * score)), ">50K", "<=50K")
    return frame


_PHRASES = [
    "the release went out on time",
    "privacy budget left for this quarter",
    "please send the report",
    "see you at the meeting",
    "thanks for the quick reply",
    "the data looks good to me",
]
_WORDS = [f"word{i}" for i in range(400)]


def posts(users: int = 3_000, seed: int = DEMO_SEED) -> pd.DataFrame:
    """A small corpus: each user writes a few posts mixing common phrases and rarer words."""
    rng = np.random.default_rng(seed)
    per_user = rng.integers(1, 5, users)
    user = np.repeat(np.arange(users), per_user)
    phrase = np.array(_PHRASES)[rng.integers(0, len(_PHRASES), len(user))]
    extra = [" ".join(rng.choice(_WORDS, size=int(k))) for k in rng.integers(0, 5, len(user))]
    return pd.DataFrame({"user": user, "text": [f"{p} {e}".strip() for p, e in zip(phrase, extra)]})


def logins(rows: int = 500, seed: int = DEMO_SEED) -> pd.DataFrame:
    """Login sessions for the outlier demo: most are ordinary, a few are off in volume and timing."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "duration_min": rng.normal(30, 8, rows),
            "mb_sent": rng.normal(50, 15, rows),
            "hour": rng.normal(13, 3, rows),
            "failed_logins": rng.normal(1, 0.5, rows),
        }
    )
    odd = rng.choice(rows, size=8, replace=False)
    frame.loc[odd, "mb_sent"] = rng.normal(400, 120, len(odd))
    frame.loc[odd, "hour"] = rng.normal(3, 1.5, len(odd))
    return frame.round(3)


_SPAM = [
    "free money",
    "click here now",
    "limited offer",
    "winner claim your prize",
    "cheap pills",
    "act now",
    "unsubscribe",
    "100% guaranteed",
    "wire transfer",
    "lowest price",
]
_HAM = [
    "meeting at ten",
    "draft of the report",
    "see attached minutes",
    "lunch tomorrow",
    "budget review",
    "thanks for the notes",
    "schedule for next week",
    "the release is out",
    "call me later",
    "project update",
]


REGIONS = ("North", "South", "East", "West", "Central")
GRADES = ("G1", "G2", "G3", "G4")


def payroll(persons: int = 5_000, seed: int = DEMO_SEED) -> pd.DataFrame:
    """Monthly pay slips for the DP-table demo: each person in one region and grade, with 1 to 6 slips."""
    rng = np.random.default_rng(seed)
    region = rng.choice(len(REGIONS), persons, p=[0.3, 0.25, 0.2, 0.15, 0.1])
    grade = rng.choice(len(GRADES), persons, p=[0.4, 0.3, 0.2, 0.1])
    slips = rng.integers(1, 7, persons)
    person = np.repeat(np.arange(persons), slips)
    base = np.repeat(2_000 * 1.4**grade + 150 * region, slips)
    return pd.DataFrame(
        {
            "person": person,
            "region": np.array(REGIONS)[np.repeat(region, slips)],
            "grade": np.array(GRADES)[np.repeat(grade, slips)],
            "month": np.concatenate([np.arange(1, k + 1) for k in slips]),
            "salary": np.round(base * rng.lognormal(0, 0.15, len(person)), 2),
        }
    )


# the steward declares the regions and grades (public lists), so a table by them shows every key
PAYROLL_SCHEMA = Schema(
    columns={
        "person": Column(type="integer"),
        "region": Column(type="string", domain=list(REGIONS)),
        "grade": Column(type="string", domain=list(GRADES)),
        "month": Column(type="integer"),
        "salary": Column(type="float"),
    }
)


def mail(messages: int = 300, seed: int = DEMO_SEED) -> list[dict]:
    """Labelled sample mail for the spam demo: spam and ham share words, in different proportions."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(messages):
        spam = bool(rng.random() < 0.35)
        own, other = (_SPAM, _HAM) if spam else (_HAM, _SPAM)
        words = [own[k] for k in rng.integers(0, len(own), rng.integers(2, 6))] + [
            other[k] for k in rng.integers(0, len(other), rng.integers(0, 3))
        ]
        rng.shuffle(words)
        out.append({"text": f"Subject: note {i}\n\n" + ". ".join(words), "label": "spam" if spam else "ham"})
    return out


SUITES = Path(__file__).resolve().parents[2] / "schemas" / "suites"  # package data: privrelease/schemas/
# what write_demo registers: id, source, unit, purpose, expectation suite, a cap that covers a few
# dozen runs of each form's defaults (the UI's Quick run), and a declared schema (None: inferred)
_REGISTERED = (
    ("census-demo", "census.csv", "record", "sdc", SUITES / "census_demo.json", None, None),  # with CENSUS_POLICY
    ("posts-demo", "posts.csv", "user:user", "dp", None, Budget(20.0, 1e-5), None),
    ("logins-demo", "logins.csv", "record", "dp", None, Budget(40.0, 1e-3), None),
    ("payroll-demo", "payroll.csv", "user:person", "dp", None, Budget(20.0, 1e-5), PAYROLL_SCHEMA),
)  # fmt: skip
DATASETS = tuple(r[0] for r in _REGISTERED)


def _write_sources(folder: Path, rows: int) -> None:
    """The demo's raw sources and the users' mail (under ``private_files``: 0600)."""
    census(rows).to_csv(folder / "census.csv", index=False)
    posts().to_csv(folder / "posts.csv", index=False)
    logins().to_csv(folder / "logins.csv", index=False)
    payroll().to_csv(folder / "payroll.csv", index=False)
    spam = folder / "mail"
    spam.mkdir(exist_ok=True, mode=0o700)
    for name, part in (("user-1", mail(600, 1)), ("user-2", mail(600, 2)), ("test", mail(200, 3))):
        (spam / f"{name}.jsonl").write_text("".join(json.dumps(m) + "\n" for m in part))


def write_demo(home: Path, rows: int = 20_000) -> Path:
    """Act as the data steward: write the sample sources under the data root, register them (DP ones
    with a cap), and write the analyst's release requests. Returns the census request's path."""
    from privrelease.core.datasets.registry import Registry, Unit
    from privrelease.core.ledger.ledger import Ledger
    from privrelease.core.tables.readers import data_root

    root = data_root(home)
    folder = root / "demo"
    for part in (root, folder):  # the raw sources and mail are the steward's only
        part.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(part, 0o700)
    with private_files():
        _write_sources(folder, rows)
    from privrelease.core.sdc import policy

    (folder / "census.policy.yaml").write_text(CENSUS_POLICY)
    census_policy = policy.parse(yaml.safe_load(CENSUS_POLICY), "the demo census policy")
    registry, ledger = Registry(home), Ledger(paths.database(home))
    registered = {d.id for d in registry.list()}
    capped = {t.dataset for t in ledger.totals() if t.cap is not None}
    for dataset_id, source, unit, purpose, suite, cap, schema in _REGISTERED:
        rules = census_policy if purpose == "sdc" else None
        if dataset_id in registered:
            registry.refresh(dataset_id, root)
            if rules is not None and registry.get(dataset_id).policy != rules:
                registry.set_policy(dataset_id, rules)
        else:
            registry.add(
                dataset_id,
                f"demo/{source}",
                "csv",
                Unit.parse(unit),
                purpose,
                schema=schema,
                suite=str(suite) if suite else None,
                root=root,
                policy=rules,
            )
        if cap is not None and dataset_id not in capped:
            ledger.set_budget(dataset_id, cap)
    requests = home / "requests"
    requests.mkdir(exist_ok=True)
    (requests / "posts-dpne.yaml").write_text(DEMO_NGRAM_REQUEST)
    (requests / "logins-outliers.yaml").write_text(DEMO_OUTLIER_REQUEST)
    (requests / "payroll-aggregate.yaml").write_text(DEMO_AGGREGATE_REQUEST)
    (folder / "spam-training.yaml").write_text(DEMO_SPAM_SPEC)  # under the data root, beside its mail
    request = requests / "census-ra.yaml"
    request.write_text(DEMO_REQUEST)
    return request


CENSUS_POLICY = """\
# The data steward's disclosure policy of the demo census (privrelease dataset policy census-demo --policy FILE).
identifiers: []                  # direct identifiers: never published (the synthetic census has none)
keys:                            # key variables: every release protects them, and its risk is measured on them
  categorical: [workclass, education, marital-status, relationship, race, sex, native-country]
  numeric: [age]
sensitive: [occupation]          # published; l-diversity is measured on it
publishable: [hours-per-week, salary]   # insensitive: published as they are
thresholds:                      # a released table that misses one is not published
  k: 3                           # every key cell holds at least 3 records
  risk: {above: 0.34, max_share: 0.0}   # no record with an individual risk above 0.34
hierarchies:                     # for global recoding (the recode step)
  age: {breaks: [17, 25, 35, 45, 55, 65, 75]}
  education:
    - {Preschool: Primary, 1st-4th: Primary, 5th-6th: Primary, 7th-8th: Secondary, 9th: Secondary, 10th: Secondary,
       11th: Secondary, 12th: Secondary, HS-grad: HS-grad, Some-college: College, Assoc-voc: College,
       Assoc-acdm: College, Bachelors: Bachelors, Masters: Graduate, Prof-school: Graduate, Doctorate: Graduate}
  native-country:
    - {Mexico: Other, Philippines: Other, Germany: Other, Canada: Other, India: Other}
tables:                          # what a table of counts or sums (sdc_table) meets
  min_frequency: 5               # cell suppression: a non-empty cell has at least 5 records
  p_percent: {p: 10}             # ... and no contribution to a sum can be estimated within 10%
  cell_key: {D: 3, V: 1.5, js: 2}   # the cell key method: perturbations up to 3, variance 1.5, no count 1 or 2
"""

DEMO_REQUEST = """\
# The analyst's request: the registered demo census table, protected as its steward's policy asks:
# age and education recoded with the policy's hierarchies, then RA (Yang & Qiao: one key cell per record
# redrawn from its column's marginal; occupation, the sensitive column, kept), then local suppression
# until every key cell holds the policy's k records. Rows are shuffled; only the policy's columns go out.
dataset: census-demo
mechanism:
  name: sdc
  params:
    steps:
      - {method: recode, columns: [age, education, native-country]}
      - method: ra
        qi: [age, workclass, education, marital-status, relationship, race, sex, native-country]
        sensitive: occupation
      - {method: suppress}
"""

DEMO_NGRAM_REQUEST = """\
# An n-gram release of the registered demo corpus with DPNE: user-level (epsilon, delta)-DP.
# The unit (one user = all posts sharing a 'user' value) was fixed by the steward at registration.
dataset: posts-demo
mechanism:
  name: dpne
  params:
    text_column: text
    epsilon: 1.0
    delta: 1.0e-7
    T: 4
    delta0: 10
    tokenizer: words
"""

DEMO_OUTLIER_REQUEST = """\
# Which two features hold the most unusual login sessions, and how many? Record-level DP
# (Okada et al.), within the cap the steward set for logins-demo.
dataset: logins-demo
mechanism:
  name: outliers
  params:
    query: top_subspaces
    c: 1
    h: 2
    k: 3
    r: 0.05
    epsilon: 2.0
    delta: 1.0e-5
    release_counts: true
    standardize:                 # public scales (e.g. from last year's published report)
      duration_min: {mean: 30, std: 8}
      mb_sent: {mean: 50, std: 15}
      hour: {mean: 13, std: 3}
      failed_logins: {mean: 1, std: 0.5}
"""

DEMO_AGGREGATE_REQUEST = """\
# A DP table of the demo payroll: pay slips, the mean and the median monthly salary by region and grade, each
# person (all their pay slips) protected. Regions and grades were declared at registration: every key shows.
dataset: payroll-demo
mechanism:
  name: aggregate
  params:
    group_by: [region, grade]
    measures:
      - {op: count}
      - {op: mean, column: salary, bounds: [0, 10000]}
      - {op: quantile, column: salary, q: [0.5], bounds: [0, 10000]}   # drawn by the exponential mechanism
    epsilon: 1.0
    delta: 1.0e-6
    max_groups: 1                # a person's slips are all in one region and grade
    max_rows: 6                  # at most six slips per person count
"""

DEMO_SPAM_SPEC = """\
# Two mail providers train one spam filter with the server; nobody shows anyone their mail.
# Run with: privrelease spam train demo/spam-training.yaml (the path, like the mail files', is under
# the data root; a new run_id for each run)
run_id: spam-demo
users: [mail/user-1.jsonl, mail/user-2.jsonl]
test: mail/test.jsonl
features: {modulus: 1000000, reduction: hash, dimension: 500, seed: 0}  # a measured map: >= 50 messages per user
key_bits: 2048
learning_rate: 0.0001
rounds: 3
mode: batch
block_size: 1000
"""
