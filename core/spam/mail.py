"""Users' mail files: JSON lines (optionally gzipped) of ``text`` and ``label`` (spam | ham)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

from core.errors import SpecError


def read_mail(path: Path, shown: str | None = None) -> tuple[list[str], np.ndarray]:
    """Texts and labels (+1 spam, −1 ham) of a JSON-lines file (optionally gzipped); errors name
    the file as ``shown`` (default: its name)."""
    shown = shown or path.name
    if not path.is_file():
        raise SpecError(f"mail file {shown!r} does not exist.")
    opener = gzip.open if path.suffix == ".gz" else open
    texts, labels = [], []
    with opener(path, "rt", encoding="utf-8", errors="surrogateescape") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                raise SpecError(f"{shown} line {number} is not valid JSON.") from None
            if not isinstance(doc, dict) or not isinstance(doc.get("text"), str) or doc.get("label") not in ("spam", "ham"):
                raise SpecError(f"{shown} line {number}: each line needs 'text' (a string) and 'label' (spam or ham).")
            texts.append(doc["text"])
            labels.append(1 if doc["label"] == "spam" else -1)
    if not texts:
        raise SpecError(f"{shown} holds no messages.")
    return texts, np.array(labels)
