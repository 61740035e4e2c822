"""DPNE's corpus cache (``dpne_corpus``): a release in process on a registered snapshot keeps the tokenized
positions beside the snapshot and later releases map them back. The released n-grams are the same draw for
draw with and without it; a cache that is missing, unreadable, truncated, altered or of another key (snapshot,
tokenizer) is ignored and written again; it is private (mode 600, in the store, never in a release folder);
a new registration prunes it with its version, and dropping the dataset's rows deletes it; Dask's partitions (more than one) do not use it."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pytest

from privrelease.core import noise
from privrelease.core.datasets import snapshots
from privrelease.core.datasets.registry import Registry
from privrelease.core.ledger.ledger import Budget, Ledger
from privrelease.core.mechanisms import dpne
from privrelease.core.mechanisms.base import Snapshot
from privrelease.core.mechanisms.dpne import corpus as dpne_corpus
from privrelease.core.release import pipeline
from privrelease.core.release.home import Home
from privrelease.core.release.spec import parse
from tests.mechanisms.test_dpne import params, phrase_corpus
from tests.support.helpers import register


def _snapshot(folder: Path, posts: pd.DataFrame) -> Snapshot:
    """``posts`` as a registered snapshot's file in ``folder`` (``v1.parquet``), with its digest."""
    path = folder / "v1.parquet"
    with duckdb.connect() as con:
        con.from_df(posts).write_parquet(str(path))
    return Snapshot(str(path), snapshots.sha256(path))


def _opened(source: Snapshot | str, p: dpne.Params) -> tuple:
    """The positions ``open_partition`` gives of ``source`` (a ``Snapshot``, or a file's path: no cache), as lists."""
    partition = dpne_corpus.open_partition((source, p, 1, 0))
    partition.close()
    return (partition.user_ids.tolist(), partition.user_hash.tolist(), partition.users.tolist(),
            partition.tokens.tolist(), partition.vocabulary.to_pylist())  # fmt: skip


def _cache(snapshot: Snapshot, p: dpne.Params) -> Path:
    return dpne_corpus.cache_path(Path(snapshot.path), dpne_corpus.cache_key(snapshot.digest, p))


def _refuse_tokenizing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_):
        raise AssertionError("tokenized again: the cache was not read")

    monkeypatch.setattr(dpne_corpus, "tokenize", refuse)


@pytest.mark.parametrize("pruning", ["both", "single"])
def test_a_warm_run_maps_the_cache_read_only_and_draws_alike(pruning, tmp_path, monkeypatch, test_mode):
    snapshot, p = _snapshot(tmp_path, phrase_corpus(600, seed=3)), params(T=4, pruning=pruning)
    without, _ = dpne.extract(Snapshot(snapshot.path), p, dpne.plan(p), noise.generator(11))  # no digest: no cache
    assert not list(tmp_path.glob("*.derived-*"))
    cold, _ = dpne.extract(snapshot, p, dpne.plan(p), noise.generator(11))  # tokenizes, and writes the cache
    assert _cache(snapshot, p).is_file()
    _refuse_tokenizing(monkeypatch)
    partition = dpne_corpus.open_partition((snapshot, p, 1, 0))
    assert not any(a.flags.writeable for a in (partition.users, partition.tokens, partition.user_hash))
    with pytest.raises(ValueError, match="read-only"):
        partition.users[0] = 0  # a view of the mapped file: the levels never write into it (or they would raise)
    partition.close()
    warm, _ = dpne.extract(snapshot, p, dpne.plan(p), noise.generator(11))
    assert len(without) > 20 and set(without["n"]) == {1, 2, 3, 4}
    pd.testing.assert_frame_equal(cold, without)
    pd.testing.assert_frame_equal(warm, without)


def test_dask_partitions_read_the_file_and_keep_no_cache(tmp_path, monkeypatch, test_mode):
    snapshot, p = _snapshot(tmp_path, phrase_corpus(300, seed=4)), params(T=3)
    whole, _ = dpne.extract(Snapshot(snapshot.path), p, dpne.plan(p), noise.generator(5))
    monkeypatch.setattr(dpne.parallel, "workers", lambda: 3)  # three partitions, each from the file's path
    parts, _ = dpne.extract(snapshot, p, dpne.plan(p), noise.generator(5))
    pd.testing.assert_frame_equal(parts, whole)
    assert [f.name for f in tmp_path.iterdir()] == ["v1.parquet"]


def _flip_a_token(data: bytes) -> bytes:
    """The cache file's bytes with one bit of one token id flipped."""
    buffer = pa.py_buffer(data)
    batch = pa.ipc.open_file(buffer.slice(0, len(data) - dpne_corpus.TRAILER.size)).get_batch(0)
    at = batch.column("tokens").values.buffers()[1].address - buffer.address + 4 * 2  # the third position: a token
    return data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]


def _unchecked_tokens(data: bytes) -> list:
    """The tokens a reader without the checksum would take from the file."""
    batch = pa.ipc.open_file(pa.py_buffer(data[: -dpne_corpus.TRAILER.size])).get_batch(0)
    return batch.column("tokens").values.to_pylist()


CORRUPT = {
    "empty": lambda data: b"",
    "truncated": lambda data: data[: len(data) // 2],
    "its trailer cut": lambda data: data[:-3],
    "garbage": lambda data: b"\x00garbage" * 100,
    "another format mark": lambda data: data[:-8] + b"PRDPNE00",
    "a flipped bit in a token": _flip_a_token,
}


@pytest.mark.parametrize("how", sorted(CORRUPT) + ["a folder", "unwritable"])
def test_a_bad_cache_is_ignored_and_written_again(how, tmp_path, monkeypatch):
    snapshot, p = _snapshot(tmp_path, phrase_corpus(300, seed=1)), params()
    fresh = _opened(snapshot.path, p)  # tokenized from the file, no cache
    if how == "unwritable":  # the cache cannot be written (a full disk): the run goes on without, no file left
        monkeypatch.setattr(dpne_corpus.os, "replace", lambda *_: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
        assert _opened(snapshot, p) == fresh
        assert [f.name for f in tmp_path.iterdir()] == ["v1.parquet"]
        return
    assert _opened(snapshot, p) == fresh  # writes the cache
    cache = _cache(snapshot, p)
    if how == "a folder":  # unreadable, and cannot be replaced: the run goes on without, no temporary file left
        cache.unlink()
        cache.mkdir()
        assert _opened(snapshot, p) == fresh
        assert sorted(f.name for f in tmp_path.iterdir()) == sorted(["v1.parquet", cache.name]) and cache.is_dir()
        return
    data = CORRUPT[how](cache.read_bytes())
    cache.write_bytes(data)
    if how == "a flipped bit in a token":
        assert _unchecked_tokens(data) != fresh[3]  # without the checksum, a wrong token id would be read
    assert _opened(snapshot, p) == fresh
    assert dpne_corpus.read(Path(snapshot.path), dpne_corpus.cache_key(snapshot.digest, p)) is not None  # rewritten
    _refuse_tokenizing(monkeypatch)
    assert _opened(snapshot, p) == fresh


def _key_without(part: str):
    """The weakened key: without the tokenizer (its file shared by both tokenizers), or without the snapshot's digest."""
    real = dpne_corpus.cache_key

    def key(digest: str, p: dpne.Params) -> dict:
        k = real(digest, p)
        if part == "tokenizer":
            return {n: v for n, v in k.items() if n != "tokens_sql"} | {"tokenizer": "any"}
        return {n: v for n, v in k.items() if n != "snapshot_sha256"}

    return key


@pytest.mark.parametrize("weakened", [False, True])
@pytest.mark.parametrize("changed", ["tokenizer", "snapshot"])
def test_a_cache_of_another_key_is_not_used(changed, weakened, tmp_path, monkeypatch):
    """The cache of one tokenizer is not the other's; after the snapshot's path holds other bytes (another
    digest) its cache is not theirs. The weakened key without that part gives the first arrays instead."""
    posts = pd.DataFrame({"user": [1, 2, 2, 3], "text": ["The cat", "the CAT sat", "on\tthe mat", "Sat, the"]})
    first, p = _snapshot(tmp_path, posts), params()
    if weakened:
        monkeypatch.setattr(dpne_corpus, "cache_key", _key_without(changed))
    before = _opened(first, p)  # writes p's cache of these bytes
    if changed == "tokenizer":
        second, q = first, params(tokenizer="words")
    else:
        second, q = _snapshot(tmp_path, posts.assign(text=["a b", "c d e", "f", "g h"])), p
    fresh = _opened(second.path, q)
    assert fresh != before
    assert (_opened(second, q) == fresh) is not weakened
    if changed == "tokenizer" and not weakened:  # planted where the words' cache is: its recorded key differs
        shutil.copy(_cache(first, p), _cache(second, q))
        assert _opened(second, q) == fresh


DPNE = {"name": "dpne", "params": {"text_column": "text", "epsilon": 2.0, "delta": 1e-6, "T": 3, "delta0": 10}}


def test_a_release_keeps_its_cache_private_and_a_new_registration_or_a_drop_removes_it(home, monkeypatch, test_mode):
    register(home, phrase_corpus(400, seed=2), "ds", "user:user", "dp")
    Ledger(home / "privrelease.duckdb").set_budget("ds", Budget(10.0, 1e-3))
    store = home / "datasets" / "ds"

    def release(n: int) -> Path:
        request = parse({"dataset": "ds", "release_id": f"r{n}", "seed": 7, "mechanism": DPNE})
        return Path(pipeline.release(Home(home), request)["folder"])

    first = release(1)
    (cache,) = store.glob("v1.derived-*")
    assert oct(cache.stat().st_mode & 0o777) == "0o600" and oct(store.stat().st_mode & 0o777) == "0o700"
    with monkeypatch.context() as patch:
        _refuse_tokenizing(patch)
        second = release(2)  # warm: from the cache, the same draws
    assert (first / "ngrams.csv").read_bytes() == (second / "ngrams.csv").read_bytes()
    assert len((first / "ngrams.csv").read_text().splitlines()) > 5
    for f in [*first.rglob("*"), *second.rglob("*")]:  # the releases hold no trace of it
        assert ".derived-" not in f.name and (f.is_dir() or dpne_corpus.MAGIC not in f.read_bytes())
        assert f.is_dir() or cache.name.encode() not in f.read_bytes()
    (store / f"{cache.name}.x1.tmp").write_bytes(b"left by a crash")
    (store / "v2.derived-kept").write_bytes(b"the new version's")  # pruning keeps what belongs to the version it keeps
    (home / "data" / "ds.csv").write_text("user,text\n1,a b\n2,c d\n")
    assert Registry(home).refresh("ds", home / "data").version == 2
    assert sorted(f.name for f in store.iterdir()) == ["v2.derived-kept", "v2.parquet"]
    Registry(home).drop("ds")  # the rows dropped: what was computed from them too
    assert not list(store.iterdir())
