"""DPNE's output check finds every released 1-gram among the posts' tokens: the first sixteenth of the posts
first, the rest for the words still missing (``dpne._unheld``), with the answer of tokenizing every post."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from core.errors import InternalError
from core.mechanisms import dpne
from tests.test_dpne import params


def _posts(n: int = 320) -> pd.DataFrame:
    texts = ["the cat sat", "on\tthe mat", "Cat, the HAT!"] * (n // 3)
    texts[-1] = "a rare word"  # held by the last post only: past the first sixteenth
    return pd.DataFrame({"user": range(len(texts)), "text": texts})


def _released(*words: str) -> SimpleNamespace:
    return SimpleNamespace(data=pd.DataFrame({"ngram": list(words), "n": [1] * len(words)}))


def test_a_word_held_only_past_the_first_posts_is_found():
    posts, p = _posts(), params()
    head = posts.iloc[: len(posts) // dpne.HEAD_SHARE]
    assert "rare" not in " ".join(head["text"])  # the weakened variant, the first posts alone, would not find it
    assert dpne._unheld(posts, p, {"rare", "the", "cat", "mat", "on"}) == set()
    dpne.check(posts, _released("rare", "the", "on"), p)


@pytest.mark.parametrize(
    ("tokenizer", "held", "unheld"),
    [
        ("whitespace", {"cat", "Cat,", "HAT!", "on", "word"}, {"ca", "hat", "the cat", "zz", "on\tthe"}),
        ("words", {"cat", "hat", "on", "word"}, {"Cat,", "HAT!", "ca", "zz", "the cat"}),
    ],
)
def test_only_tokens_are_held_not_substrings_or_other_spellings(tokenizer, held, unheld):
    posts, p = _posts(), params(tokenizer=tokenizer)
    assert dpne._unheld(posts, p, held | unheld) == unheld
    dpne.check(posts, _released(*sorted(held)), p)
    for word in unheld - {"the cat", "on\tthe"}:  # one-token words a buggy release could hold
        with pytest.raises(InternalError, match="1-gram no user holds"):
            dpne.check(posts, _released("on", word), p)


def test_an_empty_corpus_holds_no_word():
    assert dpne._unheld(pd.DataFrame({"user": [], "text": []}), params(), set()) == set()
    assert dpne._unheld(pd.DataFrame({"user": [], "text": []}), params(), {"a"}) == {"a"}
