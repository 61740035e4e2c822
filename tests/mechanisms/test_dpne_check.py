"""DPNE's output check finds every released 1-gram among the posts' tokens: the first sixteenth of the posts
first, the rest for the words still missing (``dpne._unheld``), with the answer of tokenizing every post; from
the rows, and from the snapshot's file (a release's ``Snapshot``: the first posts by their row number in it)."""

from __future__ import annotations

from types import SimpleNamespace

import duckdb
import pandas as pd
import pytest

from privrelease.core.errors import InternalError
from privrelease.core.mechanisms import dpne
from privrelease.core.mechanisms.base import Snapshot
from tests.mechanisms.test_dpne import params

FORMS = ["rows", "snapshot"]


def _posts(n: int = 320) -> pd.DataFrame:
    texts = ["the cat sat", "on\tthe mat", "Cat, the HAT!"] * (n // 3)
    texts[-1] = "a rare word"  # held by the last post only: past the first sixteenth
    return pd.DataFrame({"user": range(len(texts)), "text": texts})


def _as(form: str, posts: pd.DataFrame, tmp_path) -> pd.DataFrame | Snapshot:
    """The posts as ``check`` gets them: the rows, or their Parquet file (row groups of 64 rows, so the first
    sixteenth and the rest are in several groups, read on both of DuckDB's threads)."""
    if form == "rows":
        return posts
    path = tmp_path / "posts.parquet"
    with duckdb.connect() as con:
        con.from_df(posts).write_parquet(str(path), row_group_size=64)
    return Snapshot(str(path))


def _released(*words: str) -> SimpleNamespace:
    return SimpleNamespace(data=pd.DataFrame({"ngram": list(words), "n": [1] * len(words)}))


@pytest.mark.parametrize("form", FORMS)
def test_a_word_held_only_past_the_first_posts_is_found(form, tmp_path):
    posts, p = _posts(), params()
    head = posts.iloc[: len(posts) // dpne.HEAD_SHARE]
    assert "rare" not in " ".join(head["text"])  # the weakened variant, the first posts alone, would not find it
    assert dpne._unheld(_as(form, posts, tmp_path), p, {"rare", "the", "cat", "mat", "on"}) == set()
    dpne.check(_as(form, posts, tmp_path), _released("rare", "the", "on"), p)


@pytest.mark.parametrize(
    ("tokenizer", "held", "unheld"),
    [
        ("whitespace", {"cat", "Cat,", "HAT!", "on", "word"}, {"ca", "hat", "the cat", "zz", "on\tthe"}),
        ("words", {"cat", "hat", "on", "word"}, {"Cat,", "HAT!", "ca", "zz", "the cat"}),
    ],
)
@pytest.mark.parametrize("form", FORMS)
def test_only_tokens_are_held_not_substrings_or_other_spellings(tokenizer, held, unheld, form, tmp_path):
    posts, p = _as(form, _posts(), tmp_path), params(tokenizer=tokenizer)
    assert dpne._unheld(posts, p, held | unheld) == unheld
    dpne.check(posts, _released(*sorted(held)), p)
    for word in unheld - {"the cat", "on\tthe"}:  # one-token words a buggy release could hold
        with pytest.raises(InternalError, match="1-gram no user holds"):
            dpne.check(posts, _released("on", word), p)


@pytest.mark.parametrize("form", FORMS)
def test_an_empty_corpus_holds_no_word(form, tmp_path):
    empty = _as(form, pd.DataFrame({"user": pd.Series([], dtype="int64"), "text": pd.Series([], dtype=str)}), tmp_path)
    assert dpne._unheld(empty, params(), set()) == set()
    assert dpne._unheld(empty, params(), {"a"}) == {"a"}
