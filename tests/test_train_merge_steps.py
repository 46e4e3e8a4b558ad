"""Several merges per step (train_wordlist.wgsl wl_select / walk_batch) against the oracles.

A step merges a prefix of the pair ranking whose ids are all distinct; these tests check that
it gives exactly the reference's merges (DESIGN.md §3) where the batched path differs from one
merge per step: members whose occurrences touch (chains mixing members, led by their leftmost
occurrence), such chains carried past the walk budget, candidates in one table block (its
second-best entry) or in many blocks and super-blocks, ties, and rebuilt tables. Every test
also checks that steps of several merges did happen, so that none passes on the one-merge path.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from conftest import corpus_docs
from torch_gpubpe.core import reference
from torch_gpubpe.training import wordlist_loop as tw
from torch_gpubpe.training.trainer import GPUTrainer, train

pytestmark = pytest.mark.gpu


def _run(words, weights, merges, monkeypatch, most=None, **kw):
    monkeypatch.setattr(tw, "MAX_MERGES_PER_STEP", most)
    st: dict = {}
    got = GPUTrainer().run(words, weights, merges, 1, stats=st, **kw)
    return got, st


def _counts(docs):
    counts = reference.count_words(docs)
    words = [w for w in counts if len(w) > 1]
    return words, [counts[w] for w in words]


@pytest.mark.parametrize("corpus", ["en_novels", "multi_udhr", "code_cpython_stdlib"])
def test_steps_of_several_merges_equal_one_merge_per_step(corpus, monkeypatch):
    docs = corpus_docs(corpus, 60_000)
    words, weights = _counts(docs)
    ref = reference.train(docs, 256 + 700, 1)
    many, st = _run(words, weights, 700, monkeypatch)
    one, st1 = _run(words, weights, 700, monkeypatch, most=1)
    assert many == ref and one == ref
    assert st["merges_per_step"] > 1.5
    assert st1["merges_per_step"] == 1.0 and st1["merge_steps"] == len(ref)


@pytest.mark.parametrize("budget", [8, 61, None])
def test_chains_mixing_members_equal_reference(budget, monkeypatch):
    """(a, b) and (c, d) are merged in one step (boosted by short words) where they also
    occur back to back, "abcdabcd…", "cdab…", "abab…": one thread merges each such chain in
    order, mixing the two merges; with a small budget it is carried (continued) mid-chain."""
    docs = (["ab"] * 50 + ["cd"] * 49 + ["abcd" * 300, "cdab" * 41 + "c", "ab" * 77 + "cd" * 5,
             "xabcdy", "dcba", "a b c d", "abxcd", "abcdcdab" * 9, "efab" * 33, "cdgh" * 31])
    words, weights = _counts(docs)
    ref = reference.train(docs, 256 + 40, 1)
    got, st = _run(words, weights, 40, monkeypatch, budget=budget)
    assert got == ref
    assert st["merges_per_step"] > 1
    if budget == 8:
        assert st["walks_paused"] >= 1


def test_candidates_in_one_block_and_across_super_blocks(monkeypatch):
    """A one-block table (every candidate in one block, more of them than wl_select's list
    holds: its threshold is raised), 2^21 slots (2,048 blocks in 8 super-blocks: every block
    a candidate), 2^22 (16 super-blocks: the 9th one's best bounds the blocks taken), and a
    small table rebuilt."""
    docs = corpus_docs("multi_udhr", 40_000)
    words, weights = _counts(docs)
    ref = reference.train(docs, 256 + 300, 1)
    for rows, batch in ((32, 8), (65536, None), (131072, None), (128, 8)):
        got, st = _run(words, weights, 300, monkeypatch, rows=rows, batch=batch)
        assert got == ref, rows
        assert st["merges_per_step"] > 1.2


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hst.lists(hst.tuples(hst.text("abcde ", min_size=2, max_size=40),
                            hst.integers(1, 6)), min_size=1, max_size=40),
       hst.integers(1, 8))
def test_random_words_with_ties_equal_reference(items, most):
    """Small alphabets and small counts: many tied pairs and touching occurrences of
    different members (any bound on merges per step)."""
    words = {}
    for w, c in items:
        b = w.encode()
        if len(b) > 1:
            words[b] = words.get(b, 0) + c
    if not words:
        return
    old = tw.MAX_MERGES_PER_STEP
    tw.MAX_MERGES_PER_STEP = most
    try:
        got = GPUTrainer().run(list(words), list(words.values()), 60, 1)
    finally:
        tw.MAX_MERGES_PER_STEP = old
    assert got == reference.train_from_word_counts(words, 316, 1)


def test_train_reports_merges_per_step(monkeypatch):
    rng = random.Random(7)
    docs = ["".join(rng.choice("abcdefgh ") for _ in range(200)) for _ in range(200)]
    st: dict = {}
    vocab = train(docs, 400, min_frequency=1, stats=st)
    assert list(vocab.merges) == reference.train(docs, 400, 1)
    assert st["merge_steps"] < st["num_merges"]
    assert st["merges_per_step"] == st["num_merges"] / st["merge_steps"]
