"""DPNE: accounting reference values, contribution bounds, validity, invariants, statistics.

Statistical tests use fixed seeds; z-tests assert |z| < 4.5 (two-sided rate 6.8e-6 each).
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from collections.abc import Iterator

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from scipy.stats import chisquare, norm

from bench import dpne_baselines as baselines
from privrelease.core import noise
from privrelease.core.mechanisms import dpne
from privrelease.core.mechanisms.dpne import candidates as dpne_candidates
from privrelease.core.mechanisms.dpne import corpus as dpne_corpus
from privrelease.core.mechanisms.dpne import counts as dpne_counts
from privrelease.core.privacy.budget import compose_sigmas, gaussian_delta, gaussian_epsilon, gaussian_sigma
from tests.support.helpers import planned_run

Z_LIMIT = 4.5


def seeded(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


def params(**kw) -> dpne.Params:
    base = {"user_column": "user", "text_column": "text", "epsilon": 4.0, "delta": 1e-7, "T": 4, "delta0": 20}
    return dpne.Params(**(base | kw))


def phrase_corpus(users: int = 3000, seed: int = 0) -> pd.DataFrame:
    """Users post phrases from a small grammar (frequent n-grams) plus random word noise."""
    rng = seeded(seed)
    phrases = ["the cat sat on the mat", "to be or not to be", "a b c d e", "privacy is the product"]
    noise_words = [f"z{i}" for i in range(300)]
    rows = []
    for u in range(users):
        for _ in range(int(rng.integers(1, 4))):
            text = phrases[int(rng.integers(0, len(phrases)))]
            text += " " + " ".join(rng.choice(noise_words, size=int(rng.integers(0, 4))))
            rows.append((u, text))
    return pd.DataFrame(rows, columns=["user", "text"])


# -- accounting --------------------------------------------------------------------------------------


def test_reference_sigmas_and_thresholds():
    assert gaussian_sigma(4, 5e-8) == pytest.approx(1.327904, abs=1e-6)
    assert gaussian_sigma(1, 5e-8) == pytest.approx(4.808702, abs=1e-6)
    acc = dpne.accounting(params(T=9, delta0=300))
    assert acc.sigma_star == pytest.approx(1.327904, abs=1e-6)
    assert acc.sigmas == pytest.approx([3.983711] * 9, abs=1e-6)
    assert acc.rho_1 == pytest.approx(25.0851, abs=1e-4)
    assert dpne.accounting(params(T=9, delta0=100)).rho_1 == pytest.approx(24.4381, abs=1e-4)
    msnbc = dpne.accounting(params(epsilon=1, T=6, delta0=10))
    assert msnbc.sigmas[0] == pytest.approx(11.778867, abs=1e-6)
    assert msnbc.rho_1 == pytest.approx(67.8177, abs=1e-4)
    assert dpne.dpsu_threshold(1.327904, 300, 5e-8) == pytest.approx(8.4002, abs=1e-3)


def test_geometric_split():
    acc = dpne.accounting(params(T=9, delta0=300, split="geometric", c=0.9))
    assert acc.sigmas[0] == pytest.approx(6.5243, abs=1e-4) and acc.sigmas[-1] == pytest.approx(2.8085, abs=1e-4)
    assert compose_sigmas(acc.sigmas) == pytest.approx(acc.sigma_star, rel=1e-12)
    assert acc.rho_1 == pytest.approx(41.046, abs=1e-3)
    acc = dpne.accounting(params(T=9, delta0=300, split="geometric", c=0.8))
    assert acc.sigmas[0] == pytest.approx(13.0722, abs=1e-4) and acc.sigmas[-1] == pytest.approx(2.1931, abs=1e-4)
    assert acc.rho_1 == pytest.approx(82.183, abs=1e-3)


PLD = """
import json, sys
import dp_accounting
from dp_accounting.pld import pld_privacy_accountant
sigmas, delta = json.loads(sys.argv[1]), float(sys.argv[2])
pld = pld_privacy_accountant.PLDAccountant()
pld.compose(dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(noise_multiplier=s) for s in sigmas]))
print(pld.get_epsilon(target_delta=delta))
"""


def _pld_epsilon(sigmas: list[float], delta: float) -> float:
    """dp-accounting's PLD accountant, in its own process (absl's logging set-up upsets Prefect's
    console handler under pytest's capture)."""
    out = subprocess.run(
        [sys.executable, "-c", PLD, json.dumps(sigmas), repr(delta)], capture_output=True, text=True, check=True, timeout=120
    )
    return float(out.stdout)


@pytest.mark.parametrize(
    "eps,delta,T,split,c",
    [
        (4, 1e-7, 9, "equal", None),
        (1, 1e-7, 6, "equal", None),
        (0.5, 1e-6, 3, "geometric", 0.7),
        (8, 1e-9, 12, "geometric", 0.95),
    ],
)
def test_inverse_accounting_and_independent_pld(eps, delta, T, split, c):
    p = params(epsilon=eps, delta=delta, T=T, split=split, c=c)
    acc = dpne.accounting(p)
    sigma = compose_sigmas(acc.sigmas)
    # the continuous proof is calibrated at the discrete sampler's budget, a hair inside (eps, delta/2)
    eps_c, delta_c = noise.continuous_budget(eps, delta / 2, sum(p.caps))
    assert 0 < eps - eps_c < 1e-6 and 0 < delta / 2 - delta_c < 1e-6 * delta
    assert gaussian_epsilon(sigma, delta_c) == pytest.approx(eps_c, rel=1e-9)
    assert gaussian_delta(eps_c, sigma) == pytest.approx(delta_c, rel=1e-6)
    pld_eps = _pld_epsilon(acc.sigmas, delta / 2)
    assert pld_eps >= eps - 1e-6  # PLD is conservative (pessimistic discretization) ...
    assert pld_eps == pytest.approx(eps, abs=1e-3)  # ... and agrees to its default precision


def test_rho_1_bounds_a_lone_user_by_half_delta():
    sigma, cap, half = 3.983711, 300, 5e-8
    rho = dpne.dpsu_threshold(sigma, cap, half)
    t = np.arange(1, cap + 1)
    leak = -np.expm1(t * norm.logcdf((rho - 1 / np.sqrt(t)) / sigma))  # 1 - Phi(.)^t
    assert (leak <= half * (1 + 1e-9)).all()
    assert leak.max() == pytest.approx(half, rel=1e-6)  # tight at the worst t


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"delta0": [5, 5]}, "delta0 has 2 entries"),
        ({"split": "geometric"}, "c is required"),
        ({"c": 0.5}, "c is required"),
        ({"delta": 0}, "greater than 0"),
        ({"epsilon": -1}, "greater than 0"),
        ({"pruning": "left"}, "'both' or 'single'"),
        ({"delta0": 0}, "between 1 and 100,000"),
    ],
)
def test_bad_parameters(kw, message):
    with pytest.raises(ValidationError, match=message):
        params(**kw)


# -- contributions and validity ------------------------------------------------------------------------


def test_whitespace_tokens_are_the_regular_expression_split_on_whitespace():
    """The whitespace tokenizer (translate, then split on spaces) against DuckDB's RE2 split on \\s+, on
    every character up to U+3000 between two letters and on 20,000 random mixes of spaces, controls
    and Unicode spaces (which are not \\s and so stay inside tokens)."""
    rng = seeded(11)
    alphabet = ["x", "y", " ", "\t", "\n", "\r", "\f", "\v", "\u00a0", "\u2003", "\x1c", "\x85", "\u3000"]
    texts = [f"a{chr(c)}b" for c in range(1, 0x3001)]
    texts += ["".join(rng.choice(alphabet, size=int(rng.integers(0, 13)))) for _ in range(20_000)]
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT unnest($texts::VARCHAR[]) AS text", {"texts": texts})
    ours = con.execute(f"SELECT {dpne_counts.tokens_sql('whitespace', 'text')} FROM t").fetchall()
    regex = con.execute("SELECT list_filter(string_split_regex(text, '\\s+'), lambda x: x <> '') FROM t").fetchall()
    assert ours == regex
    assert sum(len(r[0]) == 2 for r in ours[:0x3000]) == 5  # only tab, newline, form feed, return and space split "a?b"


def _partition(frame: pd.DataFrame, p: dpne.Params, parts: int = 1, part: int = 0) -> dpne_counts.Partition:
    return dpne_corpus.open_partition((frame, p, parts, part))


def _occurrences(partition: dpne_counts.Partition, encoding: dpne_counts.Encoding | None) -> pd.DataFrame:
    """The current level's (user, gram) occurrences, each gram as its n-gram and each user as its id."""
    users, grams, names = partition.occurrences()
    grams = names.take(grams).to_numpy(zero_copy_only=False) if names is not None else encoding.grams(grams)
    return pd.DataFrame({"user": partition.user_ids[users], "gram": grams})


def _levels(
    partition: dpne_counts.Partition, pruning: str, released: dict[int, set[str]], upto: int
) -> Iterator[tuple[int, dpne_counts.Encoding | None]]:
    """Walk a partition through levels 1..upto as ``dpne.extract`` does, with the given sets taken as
    released; yields each level and its encoding of the grams' ids (None at level 1: the tokens)."""
    words, encoding = sorted(released[1]), None
    for k in range(1, upto + 1):
        if k > 1:
            previous = sorted(released[k - 1])
            sent = previous if encoding is None else encoding.ids(previous)
            encoding = dpne_counts.Encoding(pruning, words, previous)
            partition.advance(k, sent, encoding.base, pruning)
        yield k, encoding


@pytest.mark.parametrize("pruning", ["both", "single"])
def test_each_users_vector_has_unit_norm_and_at_most_cap_entries(pruning):
    frame = phrase_corpus(400)
    frame.loc[len(frame)] = (9999, " ".join(f"w{i}" for i in range(5000)))  # a heavy user
    p = params(pruning=pruning, delta0=[7, 5, 3, 2])
    partition = _partition(frame, p)
    tokens = {t for text in frame["text"] for t in text.split()}
    bigrams = {" ".join(b) for text in frame["text"] for b in zip(text.split(), text.split()[1:])}
    held = {u: " ".join(texts) for u, texts in frame.groupby("user")["text"]}
    for k, encoding in _levels(partition, pruning, {1: tokens, 2: bigrams}, 3):
        cap, unit = p.caps[k - 1], 2.0**-18
        users, grams, names = partition.occurrences()
        u, g, m = dpne_counts.contributions(partition.con, users, grams, partition.user_hash, cap, 12345, names)
        rows = pd.DataFrame({"user": partition.user_ids[u], "gram": g, "m": m})
        assert not rows.duplicated(["user", "gram"]).any()
        assert rows.groupby("user").size().max() == cap  # the heavy user is capped
        assert (rows.groupby("user")["m"].agg(["size", "first"]).diff(axis=1)["first"] == 0).all()  # m = entries kept
        w = dpne_counts.unit_weights(cap, unit)
        k_ = np.arange(1, len(w))
        assert (k_ * w[1:] ** 2 <= 4**18).all()  # ||v||_2 <= 1 exactly on the grid ...
        assert (k_ * (w[1:] + 1) ** 2 > 4**18).all()  # ... and w(m) is the largest such weight
        named = names.take(g).to_numpy(zero_copy_only=False) if names is not None else encoding.grams(g)
        assert all(f" {gram} " in f" {held[user]} " for user, gram in zip(rows["user"], named))  # each user's own n-grams
        heavy = set(named[rows["user"].to_numpy() == 9999])
        assert len(heavy) == cap and all(gram.startswith("w") and len(gram.split()) == k for gram in heavy)
        distinct = _occurrences(partition, encoding).drop_duplicates().groupby("user").size()
        kept = rows.groupby("user").size()  # every user keeps min(its distinct grams, the cap) ...
        assert kept.index.equals(distinct.index) and (kept == distinct.clip(upper=cap)).all()
        assert (rows.groupby("user")["m"].first() == kept).all()  # ... each weighted w(that number)
        hist = dpne_counts.histogram(partition.con, users, grams, partition.user_hash, cap, 12345, unit, names)
        assert hist["units"].sum() == w[m].sum()  # exact integer sums
    partition.close()


@pytest.mark.parametrize(("chunk", "shuffled"), [(dpne_counts.CHUNK, False), (37, False), (37, True)])
@pytest.mark.parametrize("pruning", ["both", "single"])
def test_each_levels_histogram_matches_a_brute_force_over_the_texts(pruning, chunk, shuffled, monkeypatch):
    """With a cap above every user's count, the histogram of every level is, per n-gram, the sum over
    its users of w(m), m the user's number of distinct valid n-grams: counted in Python from the texts;
    also when users are counted in groups of about ``chunk`` occurrences, their posts one after another
    or (shuffled) interleaved with other users' posts."""
    monkeypatch.setattr(dpne_counts, "CHUNK", chunk)
    frame = phrase_corpus(300, seed=5)
    if shuffled:
        frame = frame.sample(frac=1, random_state=2).reset_index(drop=True)
    grams = [{" ".join(t.split()[i : i + k]) for t in frame["text"] for i in range(len(t.split()) - k + 1)} for k in (1, 2, 3)]
    released = {1: grams[0], 2: {g for g in grams[1] if hash_bit(g)}}
    released[3] = {g for g in grams[2] if hash_bit(g) and _valid_at(g, released, pruning)}  # S_k lies in V_k
    cap, unit, key = 1000, 2.0**-10, 99
    partition = _partition(frame, params(pruning=pruning))
    for k, encoding in _levels(partition, pruning, released, 4):
        users, ids, names = partition.occurrences()
        hist = dpne_counts.histogram(partition.con, users, ids, partition.user_hash, cap, key, unit, names)
        if encoding is not None:
            hist["gram"] = encoding.grams(hist["gram"].to_numpy())
        w, oracle = dpne_counts.unit_weights(cap, unit), {}
        for _, texts in frame.groupby("user")["text"]:
            held = {" ".join(t.split()[i : i + k]) for t in texts for i in range(len(t.split()) - k + 1)}
            held = {g for g in held if k == 1 or _valid_at(g, released, pruning)}
            for g in held:
                oracle[g] = oracle.get(g, 0) + int(w[len(held)])
        assert dict(zip(hist["gram"], hist["units"].tolist())) == oracle and oracle, k
    partition.close()


def hash_bit(gram: str) -> bool:
    """A fixed, arbitrary half of the n-grams."""
    return int.from_bytes(gram.encode()[-2:].rjust(2, b"\0"), "big") % 2 == 0


def _valid_at(gram: str, released: dict[int, set[str]], pruning: str) -> bool:
    k = len(gram.split())
    head, tail, last = gram.rpartition(" ")[0], gram.partition(" ")[2], gram.rpartition(" ")[2]
    return head in released[k - 1] and (tail in released[k - 1] if pruning == "both" else last in released[1])


def test_partition_shares_add_up_to_the_histogram_of_all_users():
    """Each partition sums its users' weights per gram before anything leaves it (the Dask runner's
    shares); ``merge`` adds the shares. At every level the merged shares of three user partitions
    equal the one-partition histogram, grams held in several partitions included, and level 1 (cap
    above every user's word count) equals a brute-force sum of w(m) over users."""
    frame = phrase_corpus(500, seed=3)
    frame.loc[len(frame)] = (9999, " ".join(f"w{i}" for i in range(50)))  # a user over every cap
    p = params(pruning="both")
    units, key = [noise.grid(s) for s in dpne.accounting(p).sigmas], 777
    whole = dpne_corpus.open_partition((frame, p, 1, 0))
    parts = [dpne_corpus.open_partition((frame, p, 3, i)) for i in range(3)]
    previous: list[str] = []
    words: list[str] = []
    sent: list[str] | np.ndarray = []
    try:
        for k, cap in ((1, 60), (2, 5), (3, 3), (4, 2)):
            encoding = dpne_counts.Encoding("both", words, previous) if k > 1 else None
            base = encoding.base if encoding else 0
            full = whole.level(k, sent, base, "both", cap, key, units[k - 1])
            shares = [c.level(k, sent, base, "both", cap, key, units[k - 1]) for c in parts]
            assert sum(s["gram"].isin(set(full["gram"][:20])).sum() for s in shares) > 20  # shared grams
            assert dpne_counts.merge(shares).equals(full), k
            assert full["gram"].is_monotonic_increasing and full["units"].dtype == np.int64
            if encoding is not None:  # the ids are the level's n-grams, one id each
                grams = encoding.grams(full["gram"].to_numpy())
                assert len(set(grams)) == len(grams) and all(len(g.split()) == k for g in grams)
                assert encoding.ids(list(grams)).tolist() == full["gram"].tolist()
                full = encoding.named(full)
            if k == 1:
                w = dpne_counts.unit_weights(cap, units[0])
                oracle: dict[str, int] = {}
                for _, texts in frame.groupby("user")["text"]:
                    held = {t for text in texts for t in text.split()}
                    for t in held:
                        oracle[t] = oracle.get(t, 0) + int(w[len(held)])
                assert dict(zip(full["gram"], full["units"].tolist())) == oracle
            else:  # a brute force of the total: each user adds w(m) for each of its m = min(valid grams, cap) kept
                w, total = dpne_counts.unit_weights(cap, units[k - 1]), 0
                for _, texts in frame.groupby("user")["text"]:
                    valid = {" ".join(t.split()[i : i + k]) for t in texts for i in range(len(t.split()) - k + 1)}
                    m = min(sum(_valid_at(g, {k - 1: set(previous)}, "both") for g in valid), cap)
                    total += m * int(w[m])
                assert full["units"].sum() == total
            chosen = list(full["gram"][full["units"] >= full["units"].quantile(0.5)])  # "released": the heavier half
            sent = chosen if encoding is None else encoding.ids(chosen)
            previous = chosen
            words = words or chosen
    finally:
        for partition in [whole, *parts]:
            partition.close()


def _brute_force(previous: set[str], words: set[str], k: int, pruning: str) -> set[str]:
    out = set()
    for w in previous:
        for z in words:
            gram = f"{w} {z}"
            toks = gram.split()
            suffix_ok = " ".join(toks[1:]) in previous if pruning == "both" else True
            if len(toks) == k and suffix_ok and toks[0] in words:
                out.add(gram)
    return out


def _closed_levels(seed: int) -> tuple[set[str], set[str], set[str]]:
    rng = seeded(seed)
    words = {f"{c}" for c in "abcdef"}
    s2 = {f"{x} {y}" for x, y in itertools.product(sorted(words), repeat=2) if rng.random() < 0.5}
    v3 = _brute_force(s2, words, 3, "both")
    s3 = {g for g in sorted(v3) if rng.random() < 0.5}
    return words, s2, s3


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("pruning", ["both", "single"])
def test_exact_candidate_count_and_uniform_sampler(seed, pruning):
    words, s2, s3 = _closed_levels(seed)
    for k, previous in ((2, words), (3, s2), (4, s3)):
        truth = _brute_force(previous, words, k, pruning)
        space = dpne_candidates.Candidates(sorted(previous), sorted(words), pruning)
        assert space.size == len(truth)
        if not truth:
            continue
        draws = space.sample(seeded(seed), 200 * len(truth))
        assert set(draws) == truth
        counts = pd.Series(draws).value_counts().reindex(sorted(truth)).to_numpy()
        assert chisquare(counts).pvalue > 1e-6
        taken = set(sorted(truth)[: len(truth) // 2])
        outside = space.sample_outside(seeded(seed), len(truth) - len(taken), taken)
        assert set(outside) == truth - taken


@pytest.mark.parametrize("pruning", ["both", "single"])
def test_candidate_positions_match_brute_force(pruning):
    """Every occurrence of a valid k-gram, and nothing else, with its user: the shifted position arrays
    against a brute force over the texts (several posts per user, so no gram may cross a post)."""
    words, s2, _ = _closed_levels(3)
    texts = [" ".join(t) for t in itertools.product(sorted(words | {"q"}), repeat=3)]
    frame = pd.DataFrame({"user": [i // 3 for i in range(len(texts))], "text": texts})
    partition = _partition(frame, params(pruning=pruning))
    valid = {1: words, 2: _brute_force(words, words, 2, pruning), 3: _brute_force(s2, words, 3, pruning)}
    for k, encoding in _levels(partition, pruning, {1: words, 2: s2}, 3):
        got = _occurrences(partition, encoding)
        truth = [
            (u, " ".join(t.split()[i : i + k]))
            for u, t in zip(frame["user"], frame["text"])
            for i in range(len(t.split()) - k + 1)
        ]
        truth = sorted((u, g) for u, g in truth if k == 1 or g in valid[k])
        assert sorted(zip(got["user"], got["gram"])) == truth and truth, k
    partition.close()


# -- the mechanism end to end (core) ---------------------------------------------------------------------


@pytest.mark.parametrize("pruning", ["both", "single"])
def test_output_invariants_and_reproducibility(pruning):
    frame = phrase_corpus()
    p = params(pruning=pruning, T=6, eta=0.2)
    first = planned_run(dpne, frame, p, seeded(1))
    dpne.check(frame, first, p)
    table = first.data
    released = set(table["ngram"])
    known_words = {t for text in frame["text"] for t in text.split()}
    assert set(table.loc[table["n"] == 1, "ngram"]) <= known_words
    if pruning == "both":  # downward closed: every contiguous subgram is released too
        for gram in released:
            toks = gram.split()
            for i, j in itertools.combinations(range(len(toks) + 1), 2):
                assert " ".join(toks[i:j]) in released
    assert {"the cat sat on the mat", "to be or not to be"} <= released
    assert first.manifest["counts_by_length"] == {str(k): int((table["n"] == k).sum()) for k in range(1, 7)}
    assert planned_run(dpne, frame, p, seeded(1)).data.equals(table)
    assert not planned_run(dpne, frame, p, seeded(2)).data.equals(table)


def test_planted_ngrams_of_single_users_are_never_released():
    frame = phrase_corpus(2000)
    planted = [f"secret{i} phrase{i} here{i}" for i in range(200)]
    frame = pd.concat([frame, pd.DataFrame({"user": range(50_000, 50_200), "text": planted})], ignore_index=True)
    p = params(T=9, delta0=300)  # the paper's Reddit settings
    for seed in range(10):
        out = set(planned_run(dpne, frame, p, seeded(seed)).data["ngram"])
        assert not any(tok in g for g in out for tok in ("secret", "phrase", "here"))
    # At rho_1 = 25.09, sigma_1 = 3.98, one user's word is released with probability < 1e-9;
    # 10 runs x 600 planted words leave a false alarm below 1e-5.


def test_nonexistent_ngrams_match_the_binomial_expectation():
    """Users hold single words (no real bigram except one), so released bigrams are spurious."""
    words = [f"w{i}" for i in range(40)]
    texts = [w for w in words for _ in range(200)] + ["w0 w1"] * 300
    frame = pd.DataFrame({"user": range(len(texts)), "text": texts})
    p = params(T=2, delta0=5, eta=0.5, epsilon=2)
    acc = dpne.accounting(p)
    rng = seeded(77)
    runs, spurious = 40, []
    for _ in range(runs):
        out, levels = dpne.extract(frame, p, dpne.plan(p), rng)
        bigrams = set(out.loc[out["n"] == 2, "ngram"])
        assert len(out[out["n"] == 1]) == 40  # every word is common enough
        spurious.append(len(bigrams - {"w0 w1"}))
        assert levels[1].simulated == len(bigrams - {"w0 w1"})  # internal only: published nowhere
    v2, supp = 40 * 40, 1
    prob = float(norm.sf(acc.sigmas[1] * norm.isf(0.5 * min(1, 40 / v2)) / acc.sigmas[1]))
    assert prob == pytest.approx(0.5 * 40 / v2)
    n = v2 - supp
    z = (np.mean(spurious) - n * prob) / math.sqrt(n * prob * (1 - prob) / runs)
    assert abs(z) < Z_LIMIT
    assert np.mean(spurious) <= 0.5 * 40 * 1.2  # Prop. 2.2: at most eta * |S_1| expected


def test_publish_weights_and_empty_levels():
    frame = pd.DataFrame({"user": range(500), "text": ["alpha"] * 500})
    out = planned_run(dpne, frame, params(T=3, publish_weights=True), seeded(4))
    assert list(out.data.columns) == ["ngram", "n", "noisy_weight"]
    assert out.data["noisy_weight"].iloc[0] == pytest.approx(500, abs=6 * dpne.accounting(params(T=3)).sigmas[0])
    spurious = out.data[out.data["n"] > 1]
    assert (spurious["noisy_weight"] > np.array(out.privacy["rho"])[spurious["n"].to_numpy() - 1]).all()
    hidden = planned_run(dpne, frame, params(T=3), seeded(4))
    assert list(hidden.data.columns) == ["ngram", "n"]
    nothing = planned_run(dpne, pd.DataFrame({"user": [1], "text": ["lonely"]}), params(T=3), seeded(4))
    assert nothing.manifest["counts_by_length"] == {"1": 0, "2": 0, "3": 0}


def test_baseline_grams_match_brute_force_and_baselines_run():
    frame = phrase_corpus(300)
    partition = _partition(frame, params())
    for k in (1, 2, 3):
        users, ids = baselines.all_grams(partition, k)
        got = sorted(zip(partition.user_ids[users].tolist(), baselines.names(partition, ids)))
        truth = sorted(
            (u, " ".join(t.split()[i : i + k]))
            for u, t in zip(frame["user"], frame["text"])
            for i in range(len(t.split()) - k + 1)
        )
        assert got == truth and (baselines.lengths(partition, ids) == k).all()
    partition.close()
    big = phrase_corpus(3000)
    for variant in ("all", "even", "single"):
        counts = baselines.baseline(big, params(T=3), seeded(5), variant)
        assert list(counts) == [1, 2, 3]
        # the 17 words of the four phrases are held by ~750 users each: every baseline finds them
        assert 17 <= counts[1] <= 17 + 300
    with pytest.raises(ValueError, match="unknown baseline"):
        baselines.baseline(big, params(T=3), seeded(5), "some")


def test_an_empty_release_is_explained_from_public_values():
    """A corpus too small for the threshold: the report says why, with the public rho_1."""
    frame = pd.DataFrame({"user": range(5), "text": ["the same words"] * 5})
    p = params(T=2, epsilon=1.0, delta=1e-7, delta0=3)
    out = planned_run(dpne, frame, p, seeded(1))
    acc = dpne.accounting(p)
    assert out.data.empty and "**Nothing was released.**" in out.report
    assert f"passes rho_1 = {acc.rho_1:.4g}" in out.report and f"at least {math.ceil(acc.rho_1)} users" in out.report
    full = planned_run(dpne, phrase_corpus(3000), params(), seeded(2))
    assert not full.data.empty and "Nothing was released" not in full.report


def test_zero_threshold_level_publishes_weights_on_the_noise_scale(test_mode):
    """Finding 1 of the privacy review, end to end: eta = 0.5 and |S_2| >= |V_3| make rho_3 exactly 0.
    Simulated zero-weight 3-grams got weights around 10^6 sigma_3 (the tail sampler overflowed), so
    they stood out from held ones. Every released weight must now lie within a few sigma of what
    users hold, and rho_3 prints as 0, not -0.0."""
    frame = pd.DataFrame({"user": range(800), "text": ["alpha beta"] * 400 + ["beta gamma"] * 400})
    p = dpne.Params(user_column="user", text_column="text", epsilon=4, delta=1e-6, T=3, delta0=5, eta=0.5, publish_weights=True)
    seen_zero = False
    for seed in range(6):
        out = planned_run(dpne, frame, p, noise.generator(seed))
        rho = out.privacy["rho"]
        sigma = dpne.accounting(p).sigmas[2]
        level3 = out.data[out.data["n"] == 3]
        assert (level3["noisy_weight"] < 12 * sigma).all(), level3  # nobody holds a 3-gram: weight 0 + noise
        if rho[2] == 0.0:
            seen_zero = True
            assert math.copysign(1.0, rho[2]) == 1.0 and "-0.0" not in out.report
    assert seen_zero
    assert dpne.level_threshold(1.0, 5e-324, 1, 10**9) < 40  # an underflowing tail share: finite, not inf


def test_merging_shares_whose_sum_would_wrap_64_bits_is_refused():
    """Shares add exactly in int64. Merging is refused once the shares' weights add up to 2^62 or more
    (a conservative bound: short of it, no sum can wrap), so it errs, never returns a wrapped histogram."""
    share = pd.DataFrame({"gram": [7, 9], "units": [2**60, 1]})
    assert dpne_counts.merge([share, share]).to_dict("list") == {"gram": [7, 9], "units": [2**61, 2]}
    with pytest.raises(OverflowError, match="overflow 64-bit integers"):
        dpne_counts.merge([share.assign(units=[2**61, 1])] * 2)


@pytest.mark.parametrize("named", [False, True])
def test_a_user_over_the_cap_keeps_the_cap_smallest_by_keyed_hash_then_gram(named):
    """``contributions`` against an oracle: each user's distinct grams; a user with more than ``cap`` of
    them keeps the ``cap`` smallest by (DuckDB's hash of (the user's hash, the gram, the key), the gram),
    sorted here in Python. Grams as ids (levels >= 2) and as names (level 1, ranked by the name)."""
    import pyarrow as pa

    rng, cap, key = seeded(5), 3, 987_654_321
    users = rng.integers(0, 60, 2_000)
    grams = rng.integers(0, 40, len(users))
    user_hash = rng.integers(0, 2**63, 60).astype(np.uint64)
    names = pa.array([f"w{i:02d}é" for i in rng.permutation(40)]) if named else None  # names in another order than ids
    con = duckdb.connect()
    u, g, m = dpne_counts.contributions(con, users, grams, user_hash, cap, key, names)
    got = {(int(a), int(b)) for a, b in zip(u, g)}
    pairs = sorted(set(zip(users.tolist(), grams.tolist())))
    x = pa.array([g for _, g in pairs]) if names is None else names.take(pa.array([g for _, g in pairs]))
    con.register("ranked", pa.table({"h": user_hash[[p[0] for p in pairs]], "x": x}))
    ranks = con.execute("SELECT hash(h, x, $key::UBIGINT) AS r FROM ranked", {"key": key}).fetchnumpy()["r"].tolist()
    held: dict[int, list[tuple[int, object, int]]] = {}
    for (user, gram), rank, name in zip(pairs, ranks, x.to_pylist()):
        held.setdefault(user, []).append((rank, name, gram))
    expected = {(user, gram) for user, ranked in held.items() for _, _, gram in sorted(ranked)[:cap]}
    assert got == expected
    assert sum(len(r) > cap for r in held.values()) > 40  # most users are over the cap
    assert {int(a): int(b) for a, b in zip(u, m)} == {user: min(len(r), cap) for user, r in held.items()}


@settings(max_examples=200, deadline=None)
@given(
    ids=st.sets(st.integers(0, 2**40), max_size=60),
    grams=st.lists(st.integers(0, 2**40), max_size=200),
    small=st.booleans(),
)
def test_index_of_is_the_hash_lookup(ids, grams, small):
    """``index_of`` (a lookup table over a small range of ids, else a hash lookup) gives each gram's place in
    the released ids or NONE, as pandas' hash lookup does: over ids of a small range (the table) and a wide one."""
    ids = np.asarray(sorted(ids, key=lambda x: x % 997), dtype=np.int64)
    grams = np.asarray(grams + ids[::2].tolist(), dtype=np.int64)
    if small:
        ids, grams = ids % 5_000, grams % 5_000
        ids = pd.unique(ids)
    expected = pd.Index(ids).get_indexer(grams)
    found = dpne_counts.index_of(ids, grams)
    assert found.dtype == np.int32 and found.tolist() == expected.tolist()


@pytest.mark.parametrize("ways", [1, 2, 3])
def test_a_levels_histogram_is_the_same_on_any_number_of_threads(ways, monkeypatch):
    """The histogram counted by one thread, or by several each counting groups of whole users, is the same
    (exact integer shares, added): on 3,000 users with a cap some exceed, named (level 1) and by id."""
    rng = seeded(4)
    users = np.sort(rng.integers(0, 3_000, 40_000)).astype(np.int32)
    grams = rng.integers(0, 400, len(users))
    names = pa.array([f"w{i:03d}" for i in range(400)])
    user_hash = rng.integers(0, 2**63, 3_000).astype(np.uint64)
    con = duckdb.connect()
    monkeypatch.setattr(dpne_counts, "threads", lambda: 1)
    alone = [dpne_counts.histogram(con, users, grams, user_hash, 8, 77, 2.0**-10, n) for n in (None, names)]
    monkeypatch.setattr(dpne_counts, "threads", lambda: ways)
    monkeypatch.setattr(dpne_counts, "SHARE", 1_000)
    assert len(dpne_counts._user_groups(users, ways)) == ways
    for one, together in zip(
        alone, (dpne_counts.histogram(con, users, grams, user_hash, 8, 77, 2.0**-10, n) for n in (None, names))
    ):
        assert together.equals(one)


@pytest.mark.parametrize("wide", [False, True])
def test_distinct_pairs_are_the_set_of_occurrences_sorted(wide):
    """``distinct_pairs`` against Python's sorted set, on users from an offset and grams as small ids
    (one int64 key per pair) or ids near 2^62 and negative ones (a key would overflow: the grams'
    codes, in the grams' order, stand for them)."""
    rng = seeded(11)
    users = rng.integers(1_000, 1_300, 5_000).astype(np.int32)
    ids = rng.integers(0, 50, len(users))
    grams = np.where(ids % 2, 2**62 - ids, -ids) if wide else ids
    u, g = dpne_counts.distinct_pairs(users, grams)
    expected = sorted(set(zip(users.tolist(), grams.tolist())))
    assert list(zip(u.tolist(), g.tolist())) == expected
    assert len(expected) < len(users)  # repeats were there to drop
    empty = dpne_counts.distinct_pairs(np.zeros(0, np.int32), np.zeros(0, np.int64))
    assert [len(a) for a in empty] == [0, 0]
