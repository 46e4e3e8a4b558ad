"""Trie compiler (DESIGN.md §5): layout invariants and exact round trips; no GPU needed."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import corpus_docs
from torch_gpubpe.core import reference
from torch_gpubpe.core.trie import NO_TOKEN, compile_trie, trie_lookup

BYTES = [bytes([b]) for b in range(256)]


def node_spellings(t) -> list[bytes]:
    """Bytes spelled by the path to every node, recovered from the flat arrays alone."""
    nodes = t.nodes.reshape(-1, 3)
    edges = t.edges.reshape(-1, 2)
    spell = [b""] * t.num_nodes
    for k in range(t.num_nodes):
        fc, nc, _ = (int(x) for x in nodes[k])
        for e in range(fc, fc + nc):
            spell[int(edges[e, 1])] = spell[k] + bytes([int(edges[e, 0])])
    return spell


def check_trie(toks: list[bytes]) -> None:
    t = compile_trie(toks)
    nodes = t.nodes.reshape(-1, 3)
    edges = t.edges.reshape(-1, 2)
    assert t.nodes.dtype == np.uint32 and t.edges.dtype == np.uint32
    assert len(edges) == t.num_nodes - 1
    # BFS: edge e leads to node e + 1; children consecutive, in parent order, sorted by byte.
    assert (edges[:, 1] == np.arange(1, t.num_nodes)).all()
    assert nodes[0, 0] == 0 and nodes[0, 1] == 256
    assert (edges[:256, 0] == np.arange(256)).all()
    nc = nodes[:, 1].astype(np.int64)
    assert (nodes[:, 0].astype(np.int64) == np.cumsum(nc) - nc).all()
    for k in range(t.num_nodes):
        fc, n = int(nodes[k, 0]), int(nodes[k, 1])
        assert (np.diff(edges[fc : fc + n, 0].astype(np.int64)) > 0).all()
    # Every node is a prefix of a token; a node carries exactly the smallest id spelling it.
    smallest: dict[bytes, int] = {}
    for i, tb in enumerate(toks):
        smallest.setdefault(tb, i)
    prefixes = {tb[:d] for tb in toks for d in range(len(tb) + 1)}
    spell = node_spellings(t)
    assert set(spell) == prefixes and len(spell) == len(prefixes)
    for k, sp in enumerate(spell):
        tid = int(nodes[k, 2])
        assert tid == smallest.get(sp, NO_TOKEN), (k, sp)
    assert t.max_depth == max(map(len, toks))
    assert (t.token_length == np.array([len(x) for x in toks])).all()
    for tb, i in smallest.items():
        assert trie_lookup(t, tb) == i


def test_corpus_vocab_round_trip():
    docs = corpus_docs("tr_manpages", 40_000) + corpus_docs("code_cpython_headers", 40_000)
    merges = reference.train(docs, vocab_size=1500, min_frequency=2)
    check_trie(reference.token_bytes(merges))


def test_duplicate_spellings_take_smallest_id():
    a, b, c = ord("a"), ord("b"), ord("c")
    merges = [(a, b), (256, c), (b, c), (a, 258)]  # 257 = "abc" = 259
    toks = reference.token_bytes(merges)
    assert toks[257] == toks[259] == b"abc"
    check_trie(toks)
    t = compile_trie(toks)
    assert trie_lookup(t, b"abc") == 257 == reference.encode(b"abc", merges)[0]


def test_prefix_only_nodes_and_zero_bytes():
    toks = BYTES + [b"\x00\x00\x00", b"abcd", b"ab\x00", b"\xff" * 40]
    check_trie(toks)
    t = compile_trie(toks)
    assert trie_lookup(t, b"abc") is None and trie_lookup(t, b"\x00\x00") is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=40), max_size=80))
def test_random_token_sets(extra):
    check_trie(BYTES + extra)


@given(st.lists(st.binary(min_size=1, max_size=3).map(lambda b: b * 7), max_size=30))
@settings(max_examples=30, deadline=None)
def test_long_shared_prefixes(extra):
    check_trie(BYTES + extra + [x + b"z" for x in extra])


def test_bytes_that_are_no_token_and_empty_tokens():
    """A byte with no token still has its root child (256 of them), spelling no token; the
    skipped ids are left out."""
    t = compile_trie([b"a", b"b", b"ab", b"ba"], skip=[3])
    assert int(t.nodes[1]) == 256
    assert trie_lookup(t, b"c") is None and trie_lookup(t, b"ab") == 2
    assert trie_lookup(t, b"ba") is None and trie_lookup(t, b"a") == 0
    assert list(t.token_length) == [1, 1, 2, 2]
    with pytest.raises(ValueError, match="empty"):
        compile_trie(BYTES + [b""])


def test_262144_tokens_compile():
    """A 2^18-token vocab compiles and round-trips (speed: ~0.35 s, measured, not asserted —
    timings belong to benchmarks, not to a shared 2-core CI machine)."""
    rng = np.random.default_rng(0)
    alpha = np.frombuffer(b"etaoinshrdlu cmfwypvbgkjqxz\x00\xc4\xb1", np.uint8)
    lens = rng.integers(2, 16, (1 << 18) - 256)
    toks = BYTES + [alpha[rng.integers(0, len(alpha), n)].tobytes() for n in lens]
    toks[-50:] = [b" " * k for k in range(20, 70)]  # long tokens take the slow column path
    t = compile_trie(toks)
    smallest: dict[bytes, int] = {}
    for i, tb in enumerate(toks):
        smallest.setdefault(tb, i)
    assert int((t.nodes[2::3] != NO_TOKEN).sum()) == len(smallest)
    for i in rng.integers(0, len(toks), 2000).tolist() + list(range(len(toks) - 50, len(toks))):
        assert trie_lookup(t, toks[i]) == smallest[toks[i]]
