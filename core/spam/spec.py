"""The spam-filter training spec: its parties' mail files, features, key and schedule, read from YAML.

It is the parameter object of the ``spam-filter-training`` mechanism (``core.mechanisms.spam_training``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, field_validator

from core.errors import ParameterError, SpecError
from core.params import ID_PATTERN, StrictParams
from core.spam import features as F
from core.spam.paillier import check_bits


class SpamSpec(StrictParams):
    """A training run: its parties' mail files, the features, the key and the schedule (public values)."""

    run_id: str = Field(pattern=ID_PATTERN, description="names the run folder and its ledger entry")
    users: list[str] = Field(min_length=2, max_length=1000, description="one JSON-lines file per user (at least 2): text, label (spam | ham)")
    test: str = Field(description="JSON-lines file for evaluation only")
    features: F.FeatureParams = Field(default_factory=F.FeatureParams)
    key_bits: int = Field(2048, ge=512, le=8192, description="Paillier modulus size: 2048 or more (3072 past 2030); less only in test mode")
    learning_rate: float = Field(1.5e-6, gt=0, le=10, description="η of the first-order-sigmoid rule (1.5e-6 for 10^4 hashed 4-grams)")
    rounds: int = Field(10, ge=1, le=10_000, description="gradient steps")
    mode: Literal["batch", "online"] = Field("batch", description="batch: every message each round; online: each user's next block")
    block_size: int = Field(1000, ge=1, le=1_000_000, description="online mode: messages per user per round")

    @field_validator("key_bits")
    @classmethod
    def _key(cls, bits: int) -> int:
        try:
            return check_bits(bits)
        except ParameterError as exc:
            raise ValueError(str(exc)) from None


def load_spec(path: str | Path) -> tuple[SpamSpec, Path]:
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"spam spec {str(path)!r} is not a file.")
    try:
        doc = yaml.safe_load(path.read_text())
        spec = SpamSpec.model_validate(doc if isinstance(doc, dict) else {})
    except yaml.YAMLError:
        raise SpecError(f"spam spec {path.name!r} is not valid YAML.") from None
    except ValidationError as exc:
        parts = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors())
        raise SpecError(f"the spam spec is invalid: {parts}.") from None
    return spec, path.parent.resolve()

