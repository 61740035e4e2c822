"""DPNE's counting audited as user-level sums: the histogram of every level is the sum of
each user's own capped vector, whatever the partitions, the groups of ``CHUNK`` occurrences, the
order of the posts, the user ids' type or the tokens' characters; and a release is the same in
process and on several partitions under one seed."""

from __future__ import annotations

import itertools
import zlib

import duckdb
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privrelease.core.mechanisms import dpne
from privrelease.core.mechanisms.dpne import corpus as dpne_corpus
from privrelease.core.mechanisms.dpne import counts as dpne_counts

UNIT = 2.0**-12  # w(1) = 4096 grid units: every kept gram weighs at least 1 unit up to the cap
TOKENS = ["a", "b", "c", "é", "x\u00a0y", "😀", "a\x0bb", "Ω1", "-", "İ"]  # no \t\n\f\r or space inside
GAPS = [" ", "\t", "\n", "  ", " \r\n ", "\f"]  # what the whitespace tokenizer splits on


def params(**kw) -> dpne.Params:
    base = {"user_column": "user", "text_column": "text", "epsilon": 4.0, "delta": 1e-7, "T": 3, "delta0": 3}
    return dpne.Params(**(base | kw))


def _id_values(kind: str, n: int) -> list:
    """n distinct user ids of one type (float: user 0 is 0.0 or -0.0, one user to DuckDB and pandas)."""
    if kind == "int":
        return [(-1) ** i * (2**62 + i) for i in range(n)]
    if kind == "float":
        return [0.0] + [i + 0.5 for i in range(1, n)]
    if kind == "str":
        return ["", "NULL", " a", "é", "1", "1.0", "nan", "user\u00a0x"][:n]
    return list(pd.Timestamp("2020-01-01") + pd.to_timedelta(np.arange(n) * 1_000_003, unit="us"))


@st.composite
def corpora(draw) -> tuple[pd.DataFrame, list, list[list[list[str]]]]:
    """A frame (user, text) in a random post order, the user ids, and each user's posts as token lists."""
    kind = draw(st.sampled_from(["int", "float", "str", "time"]))
    vocab = draw(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=5, unique=True))
    users = draw(st.integers(1, 6))
    posts = [draw(st.lists(st.lists(st.sampled_from(vocab), max_size=9), min_size=1, max_size=4)) for _ in range(users)]
    ids = _id_values(kind, users)
    rows = []
    for u, mine in enumerate(posts):
        for toks in mine:
            gaps = draw(st.lists(st.sampled_from(GAPS), min_size=len(toks) + 1, max_size=len(toks) + 1))
            text = gaps[0] + "".join(t + g for t, g in zip(toks, gaps[1:])) if toks or draw(st.booleans()) else None
            uid = -0.0 if kind == "float" and u == 0 and draw(st.booleans()) else ids[u]
            rows.append((uid, text))
    order = draw(st.permutations(range(len(rows))))
    return pd.DataFrame([rows[i] for i in order], columns=["user", "text"]), ids, posts


def _grams(posts: list[list[str]], k: int) -> set[str]:
    return {" ".join(toks[i : i + k]) for toks in posts for i in range(len(toks) - k + 1)}


def _candidates(previous: set[str], words: set[str], pruning: str) -> set[str]:
    """V_k from the released sets, by brute force."""
    if pruning == "single":
        return {f"{a} {z}" for a in previous for z in words}
    return {f"{a} {b.split(' ')[-1]}" for a in previous for b in previous if a.split(" ")[1:] == b.split(" ")[:-1]}


def _chosen(grams: set[str], salt: int) -> set[str]:
    """A fixed, arbitrary two thirds of ``grams``: the ones "released"."""
    return {g for g in grams if zlib.crc32(f"{salt}:{g}".encode()) % 3}


def _released(posts: list[list[list[str]]], pruning: str, T: int, salt: int) -> dict[int, set[str]]:
    """Released sets S_1..S_(T-1): every word, then at each level two thirds of V_k (some of them
    held by nobody, as simulated zero-weight candidates are)."""
    everyone = [p for mine in posts for p in mine]
    released = {1: _grams(everyone, 1)}
    for k in range(2, T):
        released[k] = _chosen(_candidates(released[k - 1], released[1], pruning), salt + k)
    return released


def level_histograms(
    frame: pd.DataFrame, p: dpne.Params, released: dict[int, set[str]], key: int, parts: int = 1
) -> dict[int, dict[str, int]]:
    """Each level's merged histogram {n-gram: units} from ``parts`` user partitions, walked as
    ``dpne.extract`` walks them, with ``released`` taken as the released sets."""
    partitions = [dpne_corpus.open_partition((frame, p, parts, i)) for i in range(parts)]
    words, previous, sent, encoding, out = sorted(released[1]), [], [], None, {}
    try:
        for k in range(1, p.T + 1):
            if k > 1:
                previous = sorted(released[k - 1])
                sent = previous if encoding is None else encoding.ids(previous)
                encoding = dpne_counts.Encoding(p.pruning, words, previous)
            hist = dpne_counts.merge(
                [c.level(k, sent, encoding.base if encoding else 0, p.pruning, p.caps[k - 1], key, UNIT) for c in partitions]
            )
            hist = encoding.named(hist) if encoding is not None else hist
            assert hist["gram"].is_unique and (hist["units"] > 0).all()
            out[k] = dict(zip(hist["gram"], hist["units"].tolist()))
    finally:
        for c in partitions:
            c.close()
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    corpus=corpora(),
    pruning=st.sampled_from(["both", "single"]),
    caps=st.lists(st.integers(1, 4), min_size=3, max_size=3),
    parts=st.integers(1, 4),
    chunk=st.integers(1, 30),
    key=st.integers(0, 2**63 - 1),
    salt=st.integers(0, 99),
)
def test_every_level_is_the_sum_of_each_users_own_capped_vector(corpus, pruning, caps, parts, chunk, key, salt):
    """Add/remove-one-user, checked directly: at every level the histogram of all users, counted in
    ``parts`` partitions and groups of ``chunk`` occurrences, is the sum of the histograms of each user
    alone (one partition, groups of the default size). So no user's vector depends on another user, on
    a group boundary or on a partition; and each user's vector holds min(m, cap) of the user's own valid
    k-grams (none crossing a post), each weighed w(min(m, cap)): l2 norm <= 1 on the grid."""
    frame, ids, posts = corpus
    p = params(pruning=pruning, delta0=caps)
    released = _released(posts, pruning, p.T, salt)
    default = dpne_counts.CHUNK
    dpne_counts.CHUNK = chunk
    try:
        together = level_histograms(frame, p, released, key, parts)
    finally:
        dpne_counts.CHUNK = default
    total: dict[int, dict[str, int]] = {k: {} for k in together}
    for u, mine in enumerate(posts):
        alone = level_histograms(frame[frame["user"] == ids[u]], p, released, key)
        for k, hist in alone.items():
            valid = _grams(mine, k) if k == 1 else _grams(mine, k) & _candidates(released[k - 1], released[1], pruning)
            kept = min(len(valid), caps[k - 1])
            w = int(dpne_counts.unit_weights(caps[k - 1], UNIT)[kept]) if kept else 0
            assert set(hist) <= valid and len(hist) == kept and set(hist.values()) <= {w}, (k, u)
            assert kept * w**2 * UNIT**2 <= 1
            for g, units in hist.items():
                total[k][g] = total[k].get(g, 0) + units
    assert together == total


@settings(max_examples=300, deadline=None)
@given(
    users=st.lists(st.integers(0, 40), max_size=300),
    chunk=st.integers(1, 50),
    share=st.integers(1, 50),
    ways=st.integers(1, 4),
    ordered=st.booleans(),
)
def test_user_groups_keep_every_user_whole(users, chunk, share, ways, ordered):
    """``_user_groups``: every occurrence in exactly one group, all of a user's in the same one, and each
    group's users a range of indices (what ``contributions`` counts over), however many threads (``ways``)
    count them and whatever the groups' bounds."""
    users = np.sort(np.asarray(users, np.int32)) if ordered else np.asarray(users, np.int32)
    default = dpne_counts.CHUNK, dpne_counts.SHARE
    dpne_counts.CHUNK, dpne_counts.SHARE = chunk, share
    try:
        groups = dpne_counts._user_groups(users, ways)
    finally:
        dpne_counts.CHUNK, dpne_counts.SHARE = default
    taken = np.concatenate([np.arange(len(users))[g] for g in groups]) if groups else np.empty(0, int)
    assert sorted(taken.tolist()) == list(range(len(users)))
    owner = {}
    for n, g in enumerate(groups):
        mine = np.unique(users[g])
        assert (len(mine) or len(users) == 0) and all(owner.setdefault(int(u), n) == n for u in mine)
    ranges = [(int(users[g].min()), int(users[g].max())) for g in groups if len(users[g])]
    for (a, b), (c, d) in itertools.combinations(ranges, 2):
        assert b < c or d < a  # the groups' index ranges do not overlap


def test_users_sharing_one_hash_are_still_capped_one_by_one():
    """The cap's ranking keys on the user's hash, but users are told apart by their index: users whose
    hashes collide (all zero here) each keep ``cap`` of their own grams, weighted w(cap)."""
    con = duckdb.connect()
    users = np.repeat(np.arange(5, dtype=np.int32), 12)
    grams = np.tile(np.arange(12, dtype=np.int64), 5)
    u, g, m = dpne_counts.contributions(con, users, grams, np.zeros(5, np.uint64), 4, 7)
    kept = pd.DataFrame({"u": u, "g": g, "m": m})
    assert (kept.groupby("u").size() == 4).all() and (kept["m"] == 4).all() and not kept.duplicated(["u", "g"]).any()
    # the same hash and key choose the same grams: the choice is the user's hash's, not the index's
    assert kept.groupby("u")["g"].apply(frozenset).nunique() == 1


@settings(max_examples=200, deadline=None)
@given(
    words=st.lists(st.sampled_from(TOKENS), min_size=1, max_size=6, unique=True),
    pruning=st.sampled_from(["both", "single"]),
    salt=st.integers(0, 99),
    k=st.integers(2, 4),
)
def test_encoding_ids_are_one_to_one_and_decode_to_their_ngram(words, pruning, salt, k):
    released = {1: set(words)}
    for j in range(2, k):
        released[j] = _chosen(_candidates(released[j - 1], released[1], pruning), salt + j) or released[j - 1]
    previous = sorted(released[k - 1])
    if len(previous[0].split(" ")) != k - 1:
        return
    valid = sorted(_candidates(set(previous), set(words), pruning))
    encoding = dpne_counts.Encoding(pruning, sorted(words), previous)
    ids = encoding.ids(valid)
    assert len(set(ids.tolist())) == len(valid) and (ids >= 0).all()
    assert list(encoding.grams(ids)) == valid


@pytest.mark.parametrize("pruning", ["both", "single"])
def test_a_release_is_the_same_in_process_and_on_partitions(pruning, tmp_path, monkeypatch):
    """One seed, one release: in process, on 2 and 9 partitions (some empty), with groups of 1 and 23
    occurrences; a heavy user over every cap, empty and NULL posts, unusual characters."""
    rng = np.random.default_rng(5)
    vocab = np.array(TOKENS + [f"w{i}" for i in range(20)], dtype=object)
    rows = [(int(u), " ".join(rng.choice(vocab[:8], size=int(rng.integers(0, 7))))) for u in rng.integers(0, 7, 60)]
    rows += [(99, " ".join(vocab[8:])), (5, None), (6, "\t\n")]
    frame = pd.DataFrame(rows, columns=["user", "text"])
    path = str(tmp_path / "v1.parquet")
    duckdb.connect().from_df(frame).write_parquet(path)
    stored = duckdb.connect().execute("SELECT * FROM read_parquet(?)", [path]).df()
    p = params(pruning=pruning, epsilon=50, delta=1e-3, T=4, delta0=[4, 3, 2, 1], eta=0.5, publish_weights=True)
    first, levels = dpne.extract(stored, p, dpne.plan(p), np.random.default_rng(3))
    assert len(first) > 10 and (first["n"] > 1).any()
    for parts, chunk in ((1, 1), (2, 23), (9, 1), (9, dpne_counts.CHUNK)):
        monkeypatch.setattr(dpne.parallel, "workers", lambda parts=parts: parts)
        monkeypatch.setattr(dpne_counts, "CHUNK", chunk)
        again, again_levels = dpne.extract(stored, p, dpne.plan(p), np.random.default_rng(3), path if parts > 1 else None)
        assert again.equals(first) and again_levels == levels, (parts, chunk)
