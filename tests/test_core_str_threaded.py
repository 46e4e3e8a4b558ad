"""Every packer of ``str`` documents (encoder._pack and its parts, pretokenize.pack_documents,
wordcount.document_batches, readers' Python documents) gives the bytes of reference.to_bytes for
every item, through the compiled packer and through its fallback (one ``to_bytes`` per document
where the CPython layout or the compiled part is not available), with the copies on one thread
or many; unavailable, the packers record why and warn once."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import CORPUS_NAMES, corpus_docs
from torch_gpubpe.core import copy_pool, cpython_layout, str_pack
from torch_gpubpe.encoding.tokenizer import _pack, copy_parts, join_parts
from torch_gpubpe.errors import InputError
from torch_gpubpe.notices import GPUBPEWarning
from torch_gpubpe.encoding.pretokenize import pack_documents
from torch_gpubpe.io.readers import _to_array
from torch_gpubpe.core.reference import to_bytes
from torch_gpubpe.training.wordcount import document_batches as _batches

SURROGATES = "\ud800\udbff\udc00\udfff\ud83d\ude00"


def _chars(max_codepoint: int):
    # (exclude_categories=() lets in surrogates, which hypothesis leaves out by default)
    return st.characters(max_codepoint=max_codepoint, exclude_categories=())


def _doc():
    return st.one_of(
        st.text(_chars(0x7F), max_size=40),                 # ASCII (read in place)
        st.text(_chars(0xFF), max_size=40),                 # kind 1 (latin-1)
        st.text(_chars(0xFFFF), max_size=40),               # kind 2 (BMP, surrogates too)
        st.text(_chars(0x10FFFF), max_size=40),             # kind 4 (astral)
        st.text(st.sampled_from("a\x00\xe9\u4e2d\U0001f600\ufeff" + SURROGATES), max_size=20),
        st.binary(max_size=20),
    )


def _want(docs) -> bytes:
    return b"".join(to_bytes(d) for d in docs)


def _all_packers(docs) -> dict[str, bytes]:
    def joined(x):
        return join_parts(x).tobytes() if isinstance(x, list) else x.tobytes()

    out = {"_pack parts, not deferred": joined(_pack(docs, keep_parts=True, defer=False)[0]),
           "pack_documents": pack_documents(docs)[0].tobytes(),
           "_pack": _pack(docs)[0].tobytes()}
    parts, offsets = _pack(docs, keep_parts=True)
    if isinstance(parts, list):
        dst = np.empty(int(offsets[-1]), np.uint8)
        copy_parts(dst, parts)
        out["_pack parts"] = dst.tobytes()
    else:
        out["_pack parts"] = parts.tobytes()
    out["_batches"] = b"".join(d.tobytes() for d, _ in _batches(iter(docs), 64, {}))
    vals = _to_array(list(docs), "text")[0]   # (PyReader's batches of Python documents)
    out["readers._to_array"] = b"".join(vals.cast(pa.large_binary()).to_pylist())
    return out


def _off(monkeypatch, why: str = "forced by a test") -> None:
    """The compiled packer unavailable (the layout check fails with ``why``)."""
    monkeypatch.setattr(cpython_layout, "why_not", lambda: why)
    str_pack.reset()


# The packer (compiled, or its fallback) with the copies and the packing spread over threads
# from a few bytes on (many pieces, many ranges) as well as at the defaults.
PATHS = {"compiled": {}, "compiled, threads": dict(threads=True),
         "fallback": dict(off=True), "fallback, threads": dict(off=True, threads=True)}


@contextlib.contextmanager
def _paths(name: str):
    mp = pytest.MonkeyPatch()
    try:
        if PATHS[name].get("off"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", GPUBPEWarning)
                _off(mp)
                str_pack.available()
        if PATHS[name].get("threads"):
            mp.setattr(copy_pool, "PARALLEL_COPY_MIN", 8)
            mp.setattr(copy_pool, "COPY_PIECE", 5)
            mp.setattr(str_pack, "MIN_WORK", 8)
            mp.setattr(os, "cpu_count", lambda: 8)   # (threads even on 2 cores)
        yield
    finally:
        mp.undo()
        str_pack.reset()


@pytest.fixture(autouse=True)
def _fresh_module():
    str_pack.reset()
    yield
    str_pack.reset()


def test_available_here():
    """This interpreter (CPython 3.10–3.13, 64-bit, a C compiler) takes the compiled path: a
    failed check here would be a bug, not a reason to skip."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", GPUBPEWarning)
        assert cpython_layout.check() is None
        assert str_pack.available(), str_pack.fallbacks()
    assert str_pack.fallbacks() == {}


@pytest.mark.parametrize("path", PATHS)
@settings(max_examples=200, deadline=None)
@given(docs=st.lists(_doc(), max_size=12))
def test_every_packer_gives_the_bytes_of_to_bytes(path, docs):
    want = _want(docs)
    with _paths(path):
        for name, got in _all_packers(docs).items():
            assert got == want, name


@pytest.mark.parametrize("path", PATHS)
@settings(max_examples=50, deadline=None)
@given(docs=st.lists(_doc(), max_size=12))
def test_offsets_are_each_documents_length(path, docs):
    lengths = [len(to_bytes(d)) for d in docs]
    with _paths(path):
        for offsets in (pack_documents(docs)[1], _pack(docs)[1],
                        _pack(docs, keep_parts=True)[1],
                        _pack(docs, keep_parts=True, defer=False)[1]):
            assert np.diff(offsets).tolist() == lengths


def test_the_paths_are_taken():
    """(So that the settings above test what they say.)"""
    docs = ["é" * 2000, "中" * 5000, "😀" * 3000, "é" * 10, b"raw"]
    big = docs + ["x" * 20000]
    assert [type(p) for p in _pack(big, keep_parts=True)[0]] == [str_pack.Packed]
    assert type(_pack(big, keep_parts=True, defer=False)[0]) is np.ndarray
    with _paths("fallback"):
        assert not str_pack.available()
        parts, _ = _pack(big, keep_parts=True)   # (≥ 4 KiB a document: unjoined parts)
        assert [type(p) for p in parts] == [bytes] * 5 + [str]
        assert parts[4] is big[4] and parts[5] is big[5]   # (read in place by the copy)
        assert type(_pack(["é", "a"], keep_parts=True)[0]) is np.ndarray   # (small: one array)


@pytest.mark.parametrize("path", PATHS)
def test_corpora(path):
    """Every corpus packed equal to b"".join(d.encode())."""
    for name in CORPUS_NAMES:
        docs = corpus_docs(name, 300_000)
        want = b"".join(d.encode() for d in docs)
        with _paths(path):
            got = _all_packers(docs)
        for k, b in got.items():
            assert b == want, (name, k)


@pytest.mark.parametrize("path", PATHS)
def test_mixed_kinds_in_one_batch(path):
    docs = ["ascii " * 9, "", "çok güzel " * 7, "a\ud800b", "中文 " * 30, "😀 x " * 20,
            b"raw \xff", "\x00", "\ud83d\ude00", "ё" * 50, "\ufeffbom", "x" * 3000 + "\ud800",
            "é" * 5000, "中" * 7000 + "\udfff", "😀" * 4000] * 7
    with _paths(path):
        for name, got in _all_packers(docs).items():
            assert got == _want(docs), name


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("n", [1, 1023, 1024, 4095, 8192, 9000])
def test_surrogates_become_u_fffd_as_in_to_bytes(path, n):
    with _paths(path):
        for s in ("a\ud800b", "\udfff", "\ud83d", "\ud83d\ude00", "😀\udfff", "é\udc80"):
            for s in (s + "x" * n, "é" * n + s):   # (surrogates first, or last, in each kind)
                docs = [s, "é" * 2000]
                for name, got in _all_packers(docs).items():
                    assert got == _want(docs), name


def test_cached_utf8_is_read_from_the_str():
    s = "güzel 中文 " * 500
    cpython_layout.str_address(s)    # PyUnicode_AsUTF8AndSize caches the UTF-8 in the object
    for path in PATHS:
        with _paths(path):
            assert pack_documents([s, "é"])[0].tobytes() == s.encode() + "é".encode()


def test_str_subclasses_are_packed_as_to_bytes_packs_them():
    class S(str):
        pass

    class Loud(str):
        def encode(self, *a, **k):
            return b"LOUD"

    docs = [S("çok"), S("abc"), Loud("x"), S("a\ud800")]
    for path in PATHS:
        with _paths(path):
            for name, got in _all_packers(docs).items():
                assert got == _want(docs) == b"\xc3\xa7okabcLOUDa\xef\xbf\xbd", (path, name)


def test_bad_items_are_named_with_their_index():
    docs = ["a", "é", 5]
    for path in PATHS:
        with _paths(path):
            for pack in (pack_documents, _pack, lambda d: _pack(d, keep_parts=True)):
                with pytest.raises(InputError, match="document 2: expected str or bytes, got int"):
                    pack(docs)
            # wordcount groups documents: the index counts from the corpus's start
            with pytest.raises(InputError, match="document 7: expected str or bytes, got None"):
                list(_batches(iter(["é" * 3] * 7 + [None]), 4, {}))


def test_called_from_a_pool_thread_does_not_wait_on_the_pool(monkeypatch):
    monkeypatch.setattr(str_pack, "MIN_WORK", 16)
    monkeypatch.setattr(copy_pool, "PARALLEL_COPY_MIN", 16)
    docs = ["çok güzel " * 200] * 64

    def work():
        parts, offsets = _pack(docs, keep_parts=True)
        dst = np.empty(int(offsets[-1]), np.uint8)
        copy_parts(dst, parts)
        return dst.tobytes() + pack_documents(docs)[0].tobytes()

    futs = [copy_pool.copy_pool().submit(work) for _ in range(copy_pool.THREADS)]
    assert all(f.result(timeout=60) == _want(docs) * 2 for f in futs)


def test_a_wrong_layout_fails_the_self_test(monkeypatch):
    """The layout's self-test reads the objects through the offsets: shifted ones are caught
    (and recorded, warned about), never used."""
    v = sys.version_info[:2]
    for shift in ((8, 8, 0, 0), (0, 8, 0, 0), (0, 0, 8, 0), (0, 0, 0, 8)):
        layout = tuple(a + b for a, b in zip(cpython_layout.LAYOUTS[v], shift))
        monkeypatch.setitem(cpython_layout.LAYOUTS, v, layout)
        assert cpython_layout.self_test(layout) is not None, shift
    str_pack.reset()
    with pytest.warns(GPUBPEWarning, match="compiled str → UTF-8 packer is off"):
        assert not str_pack.available()
    assert "the CPython str layout is not usable here" in str_pack.fallbacks()["str_native"]
    assert cpython_layout.layout() is None
    docs = ["çok", "中文 😀", "a\ud800"]
    assert pack_documents(docs)[0].tobytes() == _want(docs)


def test_unavailable_gives_the_same_bytes_records_and_warns_once(monkeypatch):
    _off(monkeypatch)
    docs = corpus_docs(CORPUS_NAMES[0], 200_000) + ["a\ud800", b"\xff", "😀"]
    with pytest.warns(GPUBPEWarning, match="forced by a test") as rec:
        got = _all_packers(docs)
        _all_packers(docs)
    assert len([w for w in rec if issubclass(w.category, GPUBPEWarning)]) == 1
    assert str_pack.fallbacks() == {"str_native": "the CPython str layout is not usable here: "
                                                  "forced by a test"}
    for name, b in got.items():
        assert b == _want(docs), name


@pytest.mark.gpu
def test_train_records_the_packer_and_its_fallbacks(monkeypatch):
    """train(list) packs through torch_gpubpe.core.str_pack (``stats["str_packer"]``); with the str
    layout not usable there, one to_bytes per document: recorded in ``stats["str_fallbacks"]``,
    warned once, the same merges."""
    from torch_gpubpe import train

    docs = ["çok güzel bir gün", "güzel gün"] * 20
    stats: dict = {}
    v1 = train(docs, 262, stats=stats)
    assert stats["str_fallbacks"] == {}
    assert stats["str_packer"].startswith("str_pack, ")
    _off(monkeypatch)
    stats2: dict = {}
    with pytest.warns(GPUBPEWarning, match="forced by a test"):
        v2 = train(docs, 262, stats=stats2)
    assert set(stats2["str_fallbacks"]) == {"str_native"}
    assert stats2["str_packer"] == "to_bytes per document"
    assert v2.merges == v1.merges
