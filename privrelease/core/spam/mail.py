"""Users' mail files: JSON lines (optionally gzipped) of ``text`` and ``label`` (spam | ham)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
from pathlib import Path
from typing import BinaryIO

import numpy as np

from privrelease.core.errors import SpecError


def confined(path: Path, shown: str, root: Path) -> BinaryIO:
    """``path`` opened for reading if what was opened is a regular file inside ``root``. The check is on
    the open file (its /proc/self/fd link), not on the path checked earlier: a folder swapped for a
    symbolic link after the spec was checked leads nowhere outside. Any failure gets one message."""
    refused = SpecError(
        f"mail file {shown!r} must be a regular file inside the data root {str(root)!r}; nothing outside it is read."
    )
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # non-blocking: a FIFO does not hang the open
    except OSError:
        raise refused from None
    if not stat.S_ISREG(os.fstat(fd).st_mode) or not Path(os.readlink(f"/proc/self/fd/{fd}")).is_relative_to(root):
        os.close(fd)
        raise refused
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_mail(
    path: Path, shown: str | None = None, root: Path | None = None, expected: str | None = None
) -> tuple[list[str], np.ndarray]:
    """Texts and labels (+1 spam, −1 ham) of a JSON-lines file (optionally gzipped); errors name
    the file as ``shown`` (default: its name). With ``root``: the file opened must lie inside it (``confined``).
    With ``expected``: its bytes must have that SHA-256 (``read_bytes``), else it changed since it was checked."""
    shown = shown or path.name
    data = read_bytes(path, shown, root)
    if expected is not None and hashlib.sha256(data).hexdigest() != expected:
        raise SpecError(f"mail file {shown!r} changed after the run was checked; its party refuses to take part.")
    return parse_mail(data, shown, path.suffix == ".gz")


def read_bytes(path: Path, shown: str, root: Path | None = None) -> bytes:
    """The file's bytes, read once (so what is checked is what is parsed)."""
    if root is None and not path.is_file():
        raise SpecError(f"mail file {shown!r} does not exist.")
    with confined(path, shown, root) if root is not None else open(path, "rb") as raw:
        return raw.read()


def parse_mail(data: bytes, shown: str, gz: bool) -> tuple[list[str], np.ndarray]:
    texts, labels = [], []
    raw = io.BytesIO(data)
    with (
        gzip.open(raw, "rt", encoding="utf-8", errors="surrogateescape")
        if gz
        else io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape")
    ) as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                raise SpecError(f"{shown} line {number} is not valid JSON.") from None
            if not isinstance(doc, dict) or not isinstance(doc.get("text"), str) or doc.get("label") not in ("spam", "ham"):
                raise SpecError(f"{shown} line {number}: each line needs 'text' (a string) and 'label' (spam or ham).")
            try:
                doc["text"].encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                raise SpecError(
                    f"{shown} line {number}: the text holds a lone surrogate (an escape like \\ud800), "
                    "which is no character; remove it."
                ) from None
            texts.append(doc["text"])
            labels.append(1 if doc["label"] == "spam" else -1)
    if not texts:
        raise SpecError(f"{shown} holds no messages.")
    return texts, np.array(labels)


def split_corpus(corpus: Path, out: Path, users: int, test_fraction: float, seed: int) -> list[Path]:
    """A fixed stratified split of one labelled corpus: users-1.jsonl ... users-K.jsonl and test.jsonl."""
    if users < 1 or not 0 < test_fraction < 1:
        raise SpecError("split needs --users >= 1 and 0 < --test-fraction < 1.")
    texts, labels = read_mail(corpus)
    rng = np.random.default_rng(seed)
    part = np.empty(len(labels), dtype=int)
    for value in (1, -1):  # stratified: each class dealt out separately
        idx = rng.permutation(np.flatnonzero(labels == value))
        n_test = int(round(test_fraction * len(idx)))
        part[idx[:n_test]] = -1
        part[idx[n_test:]] = np.arange(len(idx) - n_test) % users
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"user-{k + 1}.jsonl" for k in range(users)] + [out / "test.jsonl"]
    for k, path in enumerate(paths):
        chosen = np.flatnonzero(part == (k if k < users else -1))
        with path.open("w", encoding="utf-8", errors="surrogateescape") as fh:
            for i in chosen:
                fh.write(json.dumps({"text": texts[i], "label": "spam" if labels[i] > 0 else "ham"}) + "\n")
    return paths
