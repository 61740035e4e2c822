"""A trained run's classifier as a service: the server's state kept beside the model, and ``spam classify``.

The first query of a model makes the server's classification state: its Paillier and DGK keys (under a
second) and E[W_j] for every feature, four 1024-bit exponentiations each (``classify.nth_power``: about
4 ms of CPU a feature here, so 40 s for 10^4 hashed features; 6 ms, 60 s, before issue #42). That is done once per model, in chunks the caller
can show progress for (``classify_messages``'s ``progress``); later queries read it back.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from privrelease.core.spam import dp
from privrelease.core.spam import features as F
from privrelease.core.spam.classify import ClassifyClient, ClassifyServer, Wire, classify, pack_ints
from privrelease.core.spam.parties import Remote
from privrelease.core.spam.wire import Channel

CHUNK = 250  # weights encrypted between two progress reports (about 2 s)


class Service:
    """The server's classification state for a run's model: made once, kept beside the model (mode 600),
    made again if the model changed. The server compares at ``cutoff`` (``privrelease.core.spam.decision``)."""

    def __init__(self, folder: Path, weights: np.ndarray, key_bits: int, cutoff: int = 0):
        home = folder / "classifier"
        home.mkdir(mode=0o700, exist_ok=True)
        self._digest = hashlib.sha256(np.asarray(weights, dtype=float).tobytes()).hexdigest()
        self._state, self._keys, self._weights = home / "server.json", home / "public-keys.bin", home / "encrypted-weights.bin"
        self._made: list[int] | None = None  # E[W] so far while being made; None once kept
        if self._state.exists():
            state = json.loads(self._state.read_text())
            if state["model_sha256"] == self._digest:
                self.server = ClassifyServer.restore(weights, state, cutoff)
                return
            self._state.unlink()
        self.server = ClassifyServer.generate(weights, key_bits, cutoff)
        self._made = []

    @property
    def left(self) -> int:
        """Features whose E[W_j] is still to be made (0 once the state is kept)."""
        return 0 if self._made is None else self.server.features - len(self._made)

    def make(self, count: int) -> int:
        """Encrypt the next ``count`` weights; with the last, keep the state. Returns ``left``."""
        if self._made is None:
            return 0
        done = len(self._made)
        self._made += self.server.encrypt_weights(done, min(done + count, self.server.features))
        if self.left == 0:
            self._keys.write_bytes(self.server.public_keys())
            self._weights.write_bytes(pack_ints(b"P", self._made, self.server.public_key.ciphertext_bytes))
            fd = os.open(self._state, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # 0600 from the first byte
            with os.fdopen(fd, "w") as fh:
                json.dump({**self.server.state(), "model_sha256": self._digest}, fh)
            self._made = None
        return self.left

    def publication(self) -> tuple[bytes, bytes]:
        """The published keys and E[W], once made."""
        while self.left:
            self.make(self.left)
        return self._keys.read_bytes(), self._weights.read_bytes()


def service(folder: Path, weights: np.ndarray, key_bits: int, cutoff: int = 0) -> tuple[ClassifyServer, bytes, bytes]:
    """The server, its published keys and E[W] for a model, made at once if need be."""
    made = Service(folder, weights, key_bits, cutoff)
    return made.server, *made.publication()


class ServerParty:
    """The classification server as a party of its own: its model, cutoff, keys and state are read and
    made inside its process, which publishes only the public keys and E[W]."""

    name = "server"

    def __init__(self, folder: Path, key_bits: int):
        cutoff = json.loads((folder / "report.json").read_text()).get("decision", {}).get("cutoff_units", 0)
        self._service = Service(folder, np.load(folder / "model.npy"), key_bits, cutoff)

    def left(self) -> tuple[int, int]:
        return self._service.left, self._service.server.features

    def make(self, count: int) -> int:
        return self._service.make(count)

    def publication(self) -> tuple[bytes, bytes]:
        return self._service.publication()

    def comparison_bits(self, data: bytes) -> bytes:
        return self._service.server.comparison_bits(data)

    def masked_result(self, data: bytes) -> bytes:
        return self._service.server.masked_result(data)


def features(folder: Path, text: str) -> np.ndarray:
    """A message's features as the run's model was trained on them."""
    report = json.loads((folder / "report.json").read_text())
    params = F.FeatureParams.model_validate({k: v for k, v in report["features"].items() if k != "data_dependent"})
    keep = np.load(folder / "feature_map.npy") if (folder / "feature_map.npy").exists() else None
    x = F.Reducer(params, keep).apply(F.grams(text, params.modulus))
    if report.get("dp"):  # the model was trained on messages of at most max_features features
        x = dp.cap(x, report["dp"]["max_features"], params.seed)
    return x


def classify_messages(
    folder: Path, texts: list[str], key_bits: int | None = None, progress: Callable[[int, int], None] | None = None
) -> tuple[list[str], Channel]:
    """Run the private classification protocol (``privrelease.core.spam.classify.classify``) for each message against a
    trained run's model; ``progress(done, total)`` after each chunk of E[W] while the state is made."""
    xs = [features(folder, text) for text in texts]
    key_bits = key_bits or json.loads((folder / "report.json").read_text())["key_bits"]
    server = Remote("server", ServerParty, folder, key_bits)  # the model and keys stay there
    try:
        left, total = server.call("left")
        while left:
            left = server.call("make", CHUNK)
            if progress is not None:
                progress(total - left, total)
        keys, weights = server.call("publication")
        wire = Wire(Channel())
        client = ClassifyClient(
            wire.send(server.name, "client", "public-keys", keys), wire.send(server.name, "client", "encrypted-weights", weights)
        )
        return [classify(server, client, wire, x) for x in xs], wire.channel
    finally:
        server.close()
