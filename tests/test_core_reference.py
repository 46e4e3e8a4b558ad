"""The oracle itself: DESIGN.md examples, a recount-everything twin of the trainer, encode/decode."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import corpus_docs
from torch_gpubpe.core import reference


@pytest.mark.parametrize(
    "text, words",
    [
        (b"yak\xc4\xb1nl\xc4\xb1k ve", [b"yak\xc4\xb1nl\xc4\xb1k", b" ve"]),
        (b"a  b", [b"a", b" ", b" b"]),
        (b"x=1;\r\n", [b"x", b"=", b"1", b";", b"\r\n"]),
        (b"\t b", [b"\t", b" b"]),
        ("2026 yılı".encode(), [b"2026", " yılı".encode()]),
        (b"", []),
        (b"   ", [b"   "]),
        (b"a   ", [b"a", b"   "]),
        (b"  -x", [b" ", b" -", b"x"]),
    ],
)
def test_design_examples(text, words):
    assert reference.split_words(text) == words


def _naive_train(word_counts, vocab_size, min_frequency):
    """DESIGN.md §3 literally: recount every pair after every merge."""
    words = {tuple(w): c for w, c in word_counts.items()}
    merges = []
    while 256 + len(merges) < vocab_size:
        counts = Counter()
        for w, c in words.items():
            for p in zip(w, w[1:]):
                counts[p] += c
        if not counts:
            break
        best = max(counts.items(), key=lambda kv: (kv[1], -kv[0][0], -kv[0][1]))
        if best[1] < min_frequency:
            break
        pair, new = best[0], 256 + len(merges)
        merges.append(pair)
        merged = Counter()
        for w, c in words.items():
            merged[reference._merge_word(w, pair, new)] += c
        words = merged
    return merges


@pytest.mark.parametrize("seed", range(6))
def test_incremental_trainer_equals_naive(seed):
    rng = random.Random(seed)
    alphabet = b"ab " if seed % 2 else b"abc1 .\n"
    docs = [bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 60))) for _ in range(40)]
    docs.append(b"a" * rng.randrange(1, 50))
    wc = reference.count_words(docs)
    for mf in (1, 2, 3):
        assert reference.train_from_word_counts(wc, 330, mf) == _naive_train(wc, 330, mf)


def test_incremental_trainer_equals_naive_on_real_text():
    wc = reference.count_words(corpus_docs("tr_ud_boun", 20_000))
    assert reference.train_from_word_counts(wc, 400, 2) == _naive_train(wc, 400, 2)


def test_run_merge_semantics():
    assert reference._merge_word((97,) * 5, (97, 97), 256) == (256, 256, 97)
    # after (a,a): aa aa a → (aa,aa) and (aa,a) tie at 1; smallest right id (a=97) wins
    assert reference.train([b"aaaaa"], 258, min_frequency=1) == [(97, 97), (256, 97)]
    assert reference.train([b"aaaaa"] * 2 + [b"aaaa"], 258, min_frequency=1) == [(97, 97), (256, 256)]


def test_ties_smallest_left_then_right():
    # every pair occurs once: (97, 98) < (98, 99) < (99, 100)
    assert reference.train([b"abcd"], 257, min_frequency=1) == [(97, 98)]
    assert reference.train([b"ba", b"ab"], 257, min_frequency=1) == [(97, 98)]


def test_min_frequency_and_specials():
    assert reference.train([b"ab cd"], 300, min_frequency=2) == []
    m = reference.train([b"ab ab ab"], 258, min_frequency=1, num_special_tokens=1)
    assert len(m) == 1
    with pytest.raises(ValueError, match="vocab_size"):
        reference.train([b"x"], 256, num_special_tokens=1)


def test_huge_counts_exact():
    wc = {b"ab": 3 << 32, b"bc": (3 << 32) - 1, b"cd": 1 << 33}
    assert reference.train_from_word_counts(wc, 257, 1) == [(97, 98)]


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=200))
def test_encode_decode_roundtrip(data):
    merges = reference.train([data, b"hello world hello"], 300, min_frequency=1)
    ids = reference.encode(data, merges)
    assert reference.decode_bytes(ids, merges) == data
    assert all(0 <= i < 256 + len(merges) for i in ids)


def test_encode_is_greedy_longest_match_within_words():
    merges = reference.train([b"hello hello hellooo"], 270, min_frequency=1)
    tb = reference.token_bytes(merges)
    for text in (b"hellooo hello", b"  hello!!", b"ohell"):
        ids = reference.encode(text, merges)
        pos = 0
        for w in reference.split_words(text):
            j = 0
            while j < len(w):
                tok = tb[ids[pos]]
                longest = max(len(t) for t in tb if w[j:].startswith(t))
                assert len(tok) == longest and w[j:].startswith(tok)
                j += len(tok)
                pos += 1
        assert pos == len(ids)


def test_str_lone_surrogate_becomes_replacement():
    assert reference.to_bytes("a\ud800b") == "a\ufffdb".encode()


def test_single_str_is_not_a_corpus():
    with pytest.raises(TypeError, match=r"pass \[text\]"):
        reference.train("hello hello hello", 260, min_frequency=1)
    with pytest.raises(TypeError, match=r"pass \[text\]"):
        reference.encode_batch(b"hello", [])


def test_reference_decode_rejects_out_of_range():
    with pytest.raises(ValueError, match="token id -1 at position 1"):
        reference.decode_bytes([97, -1], [])
