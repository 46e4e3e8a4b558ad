"""torch_gpubpe.core.bpe_tables's disk cache of merge-order tables: tables restored from it equal the built
ones field for field; a different vocab is a different file; a damaged file is rebuilt; an
unwritable folder or TORCH_GPUBPE_NO_CACHE=1 builds every time, and only the former warns."""

from __future__ import annotations


import pytest

from conftest import assert_same_fields, fresh_disk_cache
from torch_gpubpe import Vocab
from torch_gpubpe.core import bpe_tables as bpe
from torch_gpubpe.core import reference

TEXT = ("the quick brown fox jumps over the lazy dog; " * 40 + "Ünïcödé ğüşıöç 日本語 🙂 " * 20
        + "def f(x):\n    return x ** 2\n" * 30)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    fresh_disk_cache(monkeypatch, tmp_path, bpe, "TABLE_CACHE_MIN_TOKENS", bpe.table_cache_stats)
    return bpe.table_cache_dir()


def _vocab(size=420, text=TEXT) -> Vocab:
    return Vocab.from_merges(reference.train([text], size, 1), mode="bpe")


def _same(a: bpe.BpeTables, b: bpe.BpeTables) -> None:
    assert_same_fields(a, b)


def test_tables_from_the_cache_are_the_built_ones(cache):
    built = bpe.bpe_tables(_vocab())
    assert bpe.table_cache_stats["built"] == 1 and bpe.table_cache_stats["saved"] == 1
    assert len(list(cache.glob("bpe-*.npz"))) == 1
    loaded = bpe.bpe_tables(_vocab())  # a new Vocab object: its tables come from the file
    assert bpe.table_cache_stats["loaded"] == 1 and bpe.table_cache_stats["built"] == 1
    _same(built, loaded)
    v = _vocab()
    t = bpe.bpe_tables(v)
    pairs = [(a, b) for a in range(256, 300) for b in range(250, 300)]
    assert [bpe.valid_pair(t, a, b) for a, b in pairs] == [bpe.valid_pair(built, a, b)
                                                          for a, b in pairs]


def test_another_vocab_is_another_file(cache):
    a, b = _vocab(300), _vocab(320)
    assert bpe.table_cache_key(a) != bpe.table_cache_key(b)
    assert bpe.table_cache_key(a) == bpe.table_cache_key(_vocab(300))
    bpe.bpe_tables(a)
    bpe.bpe_tables(b)
    assert len(list(cache.glob("bpe-*.npz"))) == 2 and bpe.table_cache_stats["built"] == 2


def test_a_damaged_file_is_rebuilt_and_rewritten(cache):
    built = bpe.bpe_tables(_vocab())
    (path,) = cache.glob("bpe-*.npz")
    path.write_bytes(path.read_bytes()[:100])
    with pytest.warns(Warning, match="not cached"):
        again = bpe.bpe_tables(_vocab())
    _same(built, again)
    assert bpe.table_cache_stats["built"] == 2 and bpe.table_cache_stats["errors"]
    _same(built, bpe.bpe_tables(_vocab()))  # rewritten: loads again
    assert bpe.table_cache_stats["loaded"] == 1


def test_unwritable_folder_warns_once_and_builds(cache, tmp_path, monkeypatch):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("x")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    with pytest.warns(Warning, match="not cached"):
        bpe.bpe_tables(_vocab())
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bpe.bpe_tables(_vocab(300))  # said once per process
    assert bpe.table_cache_stats["built"] == 2 and bpe.table_cache_stats["saved"] == 0


@pytest.mark.parametrize("name", ["TORCH_GPUBPE_NO_CACHE", "TORCH_GPUBPE_NO_TABLE_CACHE"])
def test_env_turns_the_cache_off(cache, monkeypatch, name):
    """The one cache switch, and the name it replaces (kept for one release)."""
    assert bpe.ENV_NO_TABLE_CACHE == "TORCH_GPUBPE_NO_CACHE"
    monkeypatch.setenv(name, "1")
    bpe.bpe_tables(_vocab())
    bpe.bpe_tables(_vocab())
    assert bpe.table_cache_stats["built"] == 2 and not cache.exists()


def test_small_vocabs_are_not_cached(cache, monkeypatch):
    monkeypatch.setattr(bpe, "TABLE_CACHE_MIN_TOKENS", 10_000)
    bpe.bpe_tables(_vocab())
    assert not cache.exists() and bpe.table_cache_stats["built"] == 1
