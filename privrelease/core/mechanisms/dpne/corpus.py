"""DPNE's corpus: one user partition's posts read and tokenized into position arrays (``open_partition``),
and, for a release in this process on a registered snapshot, those arrays kept in a private cache beside
the snapshot, so that a later release maps them back instead of reading and tokenizing every post again.

The cache. Tokenizing is deterministic given the snapshot's bytes, the user and text columns and the
tokenizer, and a registered snapshot never changes (its SHA-256 is checked at every read), so the arrays of
one (snapshot version, user column, text column, tokenizer) are computed once. They are written as one
Arrow IPC file (one record batch of one row, each array a list), atomically (a temporary file of mode 600
renamed into place), then a checksum (CRC-32 of the IPC bytes) and a format mark. A release reads it
memory-mapped: the integer arrays and the vocabulary are views of the mapped file (read-only, which
``Partition`` never writes into). The file records its key: the snapshot's verified digest, both columns,
the tokenizer's SQL expression and ``FORMAT``; a file that is missing, unreadable, truncated, altered
(checksum) or of another key is ignored and written again, so the cache never changes an answer and never
fails a release (writing it may fail: the release goes on without).

Where, and how many. The file lives in the snapshot's own folder of the store (mode 700; the file mode 600),
named after its stem (``paths.derived``): it holds private data, as the snapshot does, and is never part of
a release, a log or a message. There is one per (snapshot version, user column, text column, tokenizer):
the file's name holds a hash of the columns and tokenizer, and a digest or format that differs rewrites
that same file. That is bounded: the columns are the dataset's registered ones, the tokenizers two, and a
new registration of the dataset removes the earlier versions' files with them (``snapshots.prune``), as
dropping its rows removes them all (``snapshots.remove``).
Dask workers (more than one partition) read and tokenize their users themselves, as before: no cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import zlib
from pathlib import Path
from typing import NamedTuple, Protocol

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from privrelease.core import parallel, paths
from privrelease.core.db import quote_ident, scratch
from privrelease.core.mechanisms.base import Snapshot
from privrelease.core.mechanisms.dpne.counts import NONE, Partition, tokens_sql

FORMAT = 1  # raise when what the file holds, or how it is laid out, changes
MAGIC = b"PRDPNE01"  # the file's last 8 bytes, after the CRC-32 of the IPC bytes (8 bytes, little-endian)
TRAILER = struct.Struct("<Q8s")
META = b"privrelease"  # the schema's metadata entry holding the key
FAILED = (OSError, ValueError, KeyError, TypeError, IndexError, NotImplementedError, pa.ArrowException)  # a bad file


class Corpus(Protocol):
    """What a partition reads of DPNE's parameters (``dpne.Params`` has them)."""

    user_column: str
    text_column: str
    tokenizer: str


class Arrays(NamedTuple):
    """A partition's positions, as ``Partition`` takes them (after its connection)."""

    user_ids: np.ndarray
    user_hash: np.ndarray
    users: np.ndarray
    tokens: np.ndarray
    vocabulary: pa.Array


def open_partition(spec: tuple[pd.DataFrame | str | Snapshot, Corpus, int, int]) -> Partition:
    """One user partition's positions: the users with hash(user) % parts = part (all of a user's posts,
    so the per-user cap applies within it), read from the frame, the stored snapshot's file (on a Dask
    worker, its path) or a registered ``Snapshot`` (in process: from its cache when there is a good one);
    tokenized in DuckDB."""
    source, params, parts, part = spec
    con = scratch()
    threads = parallel.worker_threads()
    if threads:  # a worker started with --nthreads 1 keeps DuckDB and Arrow to one core too
        con.execute(f"SET threads = {threads}")
        pa.set_cpu_count(threads)
    if not isinstance(source, Snapshot):
        return Partition(con, *tokenize(con, source, params, parts, part))
    if not source.digest or parts != 1:  # an identity unknown (or a share of the users): nothing to key a cache by
        return Partition(con, *tokenize(con, source.path, params, parts, part))
    snapshot, key = Path(source.path), cache_key(source.digest, params)
    arrays = read(snapshot, key)
    if arrays is None:
        arrays = tokenize(con, source.path, params, 1, 0)
        write(snapshot, key, arrays)
    return Partition(con, *arrays)


def tokenize(con: duckdb.DuckDBPyConnection, source: pd.DataFrame | str, params: Corpus, parts: int, part: int) -> Arrays:
    """The partition's positions, from the posts of a frame or of a Parquet file: every token of every post, the
    posts one after another with one empty position (NONE) after each."""
    if isinstance(source, str):
        rows = "read_parquet('" + source.replace("'", "''") + "')"
    else:
        con.register("corpus_input", source)
        rows = "corpus_input"
    user, text = quote_ident(params.user_column), quote_ident(params.text_column)
    posts = con.sql(
        f"SELECT {user} AS uid, hash({user}) AS uhash, {tokens_sql(params.tokenizer, f'CAST({text} AS VARCHAR)')} AS toks "
        f"FROM {rows} WHERE {'TRUE' if parts == 1 else f'hash({user}) % {parts} = {part}'}"
    ).to_arrow_table()
    if not isinstance(source, str):
        con.unregister("corpus_input")
    toks = posts["toks"].combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(toks), 0).to_numpy().astype(np.int64)
    words = pc.dictionary_encode(pc.list_flatten(toks))
    vocabulary = words.dictionary
    codes, uniques = pd.factorize(posts["uid"].to_pandas(), use_na_sentinel=False)
    user_hash = np.zeros(len(uniques), np.uint64)
    user_hash[codes] = posts["uhash"].to_numpy()
    ends = np.cumsum(lengths + 1) - 1  # each post is followed by one empty position
    users = np.repeat(codes.astype(np.int32), lengths + 1)
    users[ends] = NONE
    tokens = np.full(len(users), NONE, np.int32)
    held = np.ones(len(users), bool)
    held[ends] = False
    tokens[held] = words.indices.to_numpy()
    del posts, toks, words
    pa.default_memory_pool().release_unused()  # the posts' text: Arrow's pool would keep it for reuse
    return Arrays(np.asarray(uniques), user_hash, users, tokens, vocabulary)


# -- the cache ----------------------------------------------------------------------------------------------


def cache_key(digest: str, params: Corpus) -> dict:
    """What the cached arrays depend on: the snapshot's bytes (its verified SHA-256), the columns, the tokenizer
    (its SQL, so that a change to it rewrites the cache) and the file's format."""
    return {
        "format": FORMAT,
        "snapshot_sha256": digest,
        "user_column": params.user_column,
        "text_column": params.text_column,
        "tokenizer": params.tokenizer,
        "tokens_sql": tokens_sql(params.tokenizer, "t"),
    }


def cache_path(snapshot: Path, key: dict) -> Path:
    """The cache file of ``key`` beside ``snapshot``: one per (columns, tokenizer) of that version."""
    names = json.dumps([key["user_column"], key["text_column"], key["tokenizer"]]).encode()
    return paths.derived(snapshot, f"dpne-{hashlib.sha256(names).hexdigest()[:16]}.arrow")


def read(snapshot: Path, key: dict) -> Arrays | None:
    """The cached arrays of ``key``, memory-mapped; None when there is no good file of that key."""
    try:
        mapped = pa.memory_map(str(cache_path(snapshot, key))).read_buffer()
        if mapped.size < TRAILER.size:
            return None
        crc, magic = TRAILER.unpack(mapped.slice(mapped.size - TRAILER.size).to_pybytes())
        body = mapped.slice(0, mapped.size - TRAILER.size)
        if magic != MAGIC or zlib.crc32(body) != crc:
            return None
        reader = pa.ipc.open_file(body)
        if json.loads(reader.schema.metadata[META]) != key or reader.num_record_batches != 1:
            return None
        batch = reader.get_batch(0)
        column = {name: batch.column(name).values for name in Arrays._fields}
        arrays = Arrays(
            column["user_ids"].to_numpy(zero_copy_only=False),
            *(column[name].to_numpy() for name in ("user_hash", "users", "tokens")),
            column["vocabulary"],
        )
    except FAILED:
        return None
    return arrays if len(arrays.users) == len(arrays.tokens) and len(arrays.user_hash) == len(arrays.user_ids) else None


def write(snapshot: Path, key: dict, arrays: Arrays) -> None:
    """Keep ``arrays`` as the cache of ``key`` (atomically, mode 600); a failure leaves no file and fails nothing."""
    target = cache_path(snapshot, key)
    tmp = None
    try:
        values = [pa.array(a) if isinstance(a, np.ndarray) else a for a in arrays]
        lists = [pa.LargeListArray.from_arrays(pa.array([0, len(v)], pa.int64()), v) for v in values]
        batch = pa.record_batch(lists, names=list(Arrays._fields))
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, batch.schema.with_metadata({META: json.dumps(key)})) as out:
            out.write_batch(batch)
        body = sink.getvalue()
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f"{target.name}.", suffix=".tmp")  # mode 600
        with os.fdopen(fd, "wb") as handle:
            handle.write(body)
            handle.write(TRAILER.pack(zlib.crc32(body), MAGIC))
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
        tmp = None
        if not snapshot.exists():  # its version was pruned meanwhile (registered again): no cache of it either
            target.unlink(missing_ok=True)
    except FAILED:
        pass
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
