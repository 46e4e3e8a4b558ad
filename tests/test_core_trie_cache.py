"""torch_gpubpe.core.trie's disk cache (through torch_gpubpe.core.disk_cache, which the
merge-order tables share: tests/test_core_bpe_table_cache.py): a trie restored from it equals the
compiled one array for array; another vocab or another trie.py is another file; a damaged file
is compiled again; an unwritable folder warns once and still gives the right trie;
TORCH_GPUBPE_NO_CACHE=1 turns it off; only vocabs of 8192 tokens or more are cached."""

from __future__ import annotations

import doctest
import warnings

import numpy as np
import pytest

from conftest import assert_same_fields, fresh_disk_cache
from torch_gpubpe.core import disk_cache as _disk_cache
from torch_gpubpe.core import trie

BYTES = [bytes([b]) for b in range(256)]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    fresh_disk_cache(monkeypatch, tmp_path, trie, "TRIE_CACHE_MIN_TOKENS", trie.trie_cache_stats)
    return _disk_cache.cache_root() / "trie"


def _tokens(n=2000, seed=0) -> list[bytes]:
    """The 256 bytes and ``n`` distinct random tokens of 2..40 bytes (some past the trie's
    16-byte sort window), in a shuffled id order."""
    rng = np.random.default_rng(seed)
    out = set()
    while len(out) < n:
        k = int(rng.integers(2, 41))
        out.add(bytes(rng.integers(97, 101 if k > 16 else 123, k, dtype=np.uint8)))
    toks = BYTES + sorted(out)
    return [toks[i] for i in rng.permutation(len(toks))]


def _same(a: trie.Trie, b: trie.Trie) -> None:
    assert_same_fields(a, b, same_types=True)  # num_nodes, max_depth: ints, not numpy scalars


def test_trie_from_the_cache_is_the_compiled_one(cache):
    toks = _tokens()
    first = trie.cached_trie(toks)
    assert trie.trie_cache_stats["built"] == 1 and trie.trie_cache_stats["saved"] == 1
    assert len(list(cache.glob("trie-*.npz"))) == 1
    loaded = trie.cached_trie(tuple(toks))
    assert trie.trie_cache_stats["loaded"] == 1 and trie.trie_cache_stats["built"] == 1
    fresh = trie.compile_trie(toks)
    _same(fresh, first)
    _same(fresh, loaded)
    for i in range(0, len(toks), 97):
        assert trie.trie_lookup(loaded, toks[i]) == i


def test_another_vocab_or_another_trie_py_is_another_file(cache, tmp_path, monkeypatch):
    a, b = _tokens(500, seed=1), _tokens(500, seed=2)
    assert trie.trie_cache_key(a) == trie.trie_cache_key(list(a))
    assert trie.trie_cache_key(a) != trie.trie_cache_key(b)
    i, j = [k for k in range(len(a)) if len(a[k]) == 1][:2]
    swapped = list(a)
    swapped[i], swapped[j] = a[j], a[i]  # the same bytes and lengths, other ids
    assert trie.trie_cache_key(a) != trie.trie_cache_key(swapped)
    trie.cached_trie(a)
    trie.cached_trie(b)
    assert len(list(cache.glob("trie-*.npz"))) == 2 and trie.trie_cache_stats["built"] == 2
    edited = tmp_path / "trie.py"
    edited.write_bytes(trie._TRIE_CACHE.source.read_bytes() + b"\n# changed\n")
    key = trie.trie_cache_key(a)
    monkeypatch.setattr(trie._TRIE_CACHE, "source", edited)
    assert trie.trie_cache_key(a) != key


def test_a_damaged_file_is_compiled_again_and_rewritten(cache):
    toks = _tokens()
    fresh = trie.compile_trie(toks)
    trie.cached_trie(toks)
    (path,) = cache.glob("trie-*.npz")
    path.write_bytes(path.read_bytes()[:300])
    with pytest.warns(Warning, match="trie not cached.*damaged"):
        again = trie.cached_trie(toks)
    _same(fresh, again)
    assert trie.trie_cache_stats["built"] == 2 and trie.trie_cache_stats["errors"]
    _same(fresh, trie.cached_trie(toks))  # rewritten: loads again
    assert trie.trie_cache_stats["loaded"] == 1


def test_a_file_of_wrong_shapes_is_not_used(cache):
    toks = _tokens()
    fresh = trie.cached_trie(toks)
    (path,) = cache.glob("trie-*.npz")
    arrays = trie._trie_to_arrays(fresh)
    arrays["edges"] = arrays["edges"][:-2]
    np.savez(path, **arrays)
    with pytest.warns(Warning, match="edges is uint32"):
        again = trie.cached_trie(toks)
    _same(trie.compile_trie(toks), again)
    assert trie.trie_cache_stats["loaded"] == 0 and trie.trie_cache_stats["built"] == 2


def test_unwritable_folder_warns_once_and_compiles(cache, tmp_path, monkeypatch):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("x")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    a, b = _tokens(300, seed=3), _tokens(300, seed=4)
    with pytest.warns(Warning, match="trie not cached.*writable"):
        got = trie.cached_trie(a)
    _same(trie.compile_trie(a), got)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _same(trie.compile_trie(b), trie.cached_trie(b))  # said once per process
    assert trie.trie_cache_stats["built"] == 2 and trie.trie_cache_stats["saved"] == 0
    assert len(trie.trie_cache_stats["errors"]) == 2


def test_env_turns_the_cache_off(cache, monkeypatch):
    monkeypatch.setenv(_disk_cache.ENV_OFF, "1")
    toks = _tokens(300)
    trie.cached_trie(toks)
    _same(trie.compile_trie(toks), trie.cached_trie(toks))
    assert trie.trie_cache_stats["built"] == 2 and not cache.exists()


def test_only_vocabs_of_8192_tokens_or_more_are_cached(cache, monkeypatch):
    monkeypatch.setattr(trie, "TRIE_CACHE_MIN_TOKENS", _disk_cache.MIN_TOKENS)
    small = _tokens(_disk_cache.MIN_TOKENS - 257)
    trie.cached_trie(small)
    assert not cache.exists() and trie.trie_cache_stats["built"] == 1
    large = _tokens(_disk_cache.MIN_TOKENS - 256)
    assert len(large) == 8192
    trie.cached_trie(large)
    _same(trie.compile_trie(large), trie.cached_trie(large))
    assert trie.trie_cache_stats["saved"] == 1 and trie.trie_cache_stats["loaded"] == 1


def test_compile_errors_are_not_cached(cache):
    with pytest.raises(ValueError, match="empty"):
        trie.cached_trie(BYTES + [b"ab", b""])
    assert not cache.exists()


def test_tokenizer_trie_comes_from_the_cache(cache):
    from torch_gpubpe import Tokenizer, Vocab

    vocab = Vocab(tokens=tuple(_tokens(600, seed=5)), mode="greedy")
    _same(trie.compile_trie(vocab.token_bytes), Tokenizer(vocab).trie)
    _same(trie.compile_trie(vocab.token_bytes), Tokenizer(vocab).trie)
    assert trie.trie_cache_stats["saved"] == 1 and trie.trie_cache_stats["loaded"] == 1


def test_disk_cache_docstring_example():
    res = doctest.testmod(_disk_cache)
    assert res.attempted > 0 and res.failed == 0
