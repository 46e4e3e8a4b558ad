"""The threaded str → UTF-8 packer (torch_gpubpe.core.cpython_str) gives the bytes of
reference.to_bytes for every item, in every packer that uses it (encoder._pack, both paths,
pretokenize.pack_documents, wordcount.document_batches, readers' Python documents), with one thread or
many; unavailable, the packers give the same bytes through str.encode, record why and warn
once."""

from __future__ import annotations

import contextlib
import os
import warnings

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import CORPUS_NAMES, corpus_docs
from torch_gpubpe.core import cpython_str as cs
from torch_gpubpe.core import str_pack
from torch_gpubpe.encoding.tokenizer import _pack, copy_parts
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
    out = {"utf8_parts": cs.join_parts(cs.utf8_parts(docs)).tobytes(),
           "utf8_parts 1 thread": cs.join_parts(cs.utf8_parts(docs, threads=1)).tobytes(),
           "utf8_parts deferred": cs.join_parts(cs.utf8_parts(docs, defer=True)).tobytes(),
           "utf8_parts deferred, 1 thread":
               cs.join_parts(cs.utf8_parts(docs, threads=1, defer=True)).tobytes(),
           "_pack parts, not deferred": cs.join_parts(_pack(docs, keep_parts=True,
                                                            defer=False)[0]).tobytes()
               if isinstance(_pack(docs, keep_parts=True, defer=False)[0], list)
               else _pack(docs, keep_parts=True, defer=False)[0].tobytes(),
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


# Which path each document takes is set by sizes; these settings send short documents down
# each one: str.encode below SMALL (the defaults), iconv after gathering with others and
# widening to UCS-4 (kind 4: in place), after widening in chunks of 3 characters (chunk edges
# everywhere), over up to 8 threads (the copies, and the transcoding of deferred parts, too).
PATHS = {"defaults": {},
         "gathered": dict(SMALL=0, PARALLEL_MIN=8, PARALLEL_COPY_MIN=8),
         "chunked": dict(SMALL=0, WIDEN_CHUNK=3, PARALLEL_MIN=8, PARALLEL_COPY_MIN=8),
         "small stage": dict(SMALL=0, WIDEN_CHUNK=50, PARALLEL_MIN=8)}   # (many flushes)


@contextlib.contextmanager
def _paths(name: str):
    old = {k: getattr(cs, k) for k in PATHS[name]}
    cpus = os.cpu_count
    try:
        for k, v in PATHS[name].items():
            setattr(cs, k, v)
        os.cpu_count = lambda: 8   # (threads even on 2 cores)
        yield
    finally:
        os.cpu_count = cpus
        for k, v in old.items():
            setattr(cs, k, v)


@pytest.fixture(autouse=True)
def _fresh_module():
    cs.reset()
    cs.available()   # (the self-test, with the module's own sizes)
    yield
    cs.reset()


def test_available_here():
    """This interpreter (CPython 3.10–3.13, 64-bit, glibc) takes the threaded path: a failed
    self-test here would be a bug, not a reason to skip."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", GPUBPEWarning)
        assert cs.available(), cs.fallbacks()
    assert cs.fallbacks() == {}


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
    docs = ["é" * 2000, "中" * 5000, "😀" * 3000, "é" * 10]
    assert [type(p) for p in cs.utf8_parts(docs)] == [cs.Span, cs.Span, cs.Span, bytes]
    assert ([type(p) for p in cs.utf8_parts(docs, defer=True)]
            == [cs.Deferred, cs.Deferred, cs.Deferred, bytes])
    assert [p.kind for p in cs.utf8_parts(docs, defer=True)[:3]] == [1, 2, 4]
    for path in ("gathered", "chunked"):
        with _paths(path):
            assert all(type(p) is cs.Span for p in cs.utf8_parts(docs))
            assert all(type(p) is cs.Deferred for p in cs.utf8_parts(docs, defer=True))
    str_pack._state["lib"] = None   # (encoder._pack without the compiled packer of str_pack)
    parts, _ = _pack(docs + ["x" * 20000], keep_parts=True, defer=True)   # (encoder.DEFER_STR)
    assert [type(p) for p in parts] == [cs.Deferred] * 3 + [bytes, str]
    parts, _ = _pack(docs + ["x" * 20000], keep_parts=True)   # (the default: not deferred)
    assert [type(p) for p in parts] == [cs.Span] * 3 + [bytes, str]
    parts, _ = _pack(docs + ["x" * 20000], keep_parts=True, defer=False)   # (encode_batches)
    assert [type(p) for p in parts] == [cs.Span] * 3 + [bytes, str]


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("path", ["gathered", "chunked"])
def test_corpora_with_one_thread_or_many(monkeypatch, threads, path):
    """Every corpus packed equal to b"".join(d.encode()), with batches split over
    ``threads`` threads (ranges of at least 1 KiB)."""
    monkeypatch.setattr(cs, "PARALLEL_MIN", 1024)
    for name in CORPUS_NAMES:
        docs = corpus_docs(name, 1_000_000)
        want = b"".join(d.encode() for d in docs)
        with _paths(path):
            if path == "chunked":
                cs.WIDEN_CHUNK = 1000
            parts = cs.utf8_parts(docs, threads=threads)
            deferred = cs.utf8_parts(docs, threads=threads, defer=True)
            monkeypatch.setattr(cs, "PARALLEL_COPY_MIN", 1024)   # (written by many threads)
            dst = np.full(len(want), 0xAA, np.uint8)
            copy_parts(dst, deferred)
        assert cs.join_parts(parts).tobytes() == want, name
        assert dst.tobytes() == want, name
        assert [len(p) for p in parts] == [len(d.encode()) for d in docs]
        assert [len(p) for p in deferred] == [len(d.encode()) for d in docs]
        assert any(isinstance(p, cs.Span) for p in parts) or all(d.isascii() for d in docs)
        assert any(isinstance(p, cs.Deferred) for p in deferred) or all(d.isascii() for d in docs)


@pytest.mark.parametrize("path", PATHS)
def test_mixed_kinds_in_one_batch_over_threads(path):
    docs = ["ascii " * 9, "", "çok güzel " * 7, "a\ud800b", "中文 " * 30, "😀 x " * 20,
            b"raw \xff", "\x00", "\ud83d\ude00", "ё" * 50, "\ufeffbom", "x" * 3000 + "\ud800",
            "é" * 5000, "中" * 7000 + "\udfff", "😀" * 4000] * 7
    with _paths(path):
        for threads in (1, 2, 5, 8):
            got = cs.join_parts(cs.utf8_parts(docs, threads=threads)).tobytes()
            assert got == _want(docs), threads
            got = cs.join_parts(cs.utf8_parts(docs, threads=threads, defer=True)).tobytes()
            assert got == _want(docs), (threads, "deferred")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("n", [1, 1023, 1024, 4095, 8191, 8192, 9000])
def test_surrogates_become_u_fffd_as_in_to_bytes(path, n):
    with _paths(path):
        for s in ("a\ud800b", "\udfff", "\ud83d", "\ud83d\ude00", "😀\udfff", "é\udc80"):
            for s in (s + "x" * n, "é" * n + s):   # (surrogates first, or last, in each kind)
                for defer in (False, True):
                    got = cs.join_parts(cs.utf8_parts([s, "é" * 2000], defer=defer)).tobytes()
                    assert got == to_bytes(s) + ("é" * 2000).encode(), defer


@pytest.mark.parametrize("kind_doc", ["é" * 3000, "中" * 3000, "😀" * 3000, "é" * 300_000])
def test_a_deferred_part_of_the_wrong_size_raises_never_writes_past(kind_doc):
    """A deferred part is written with exactly its counted size of room: were the count wrong
    (a bug), copy_parts raises rather than leave garbage or write into the next part."""
    (p,) = cs.utf8_parts([kind_doc], defer=True)
    assert type(p) is cs.Deferred and p.tobytes() == kind_doc.encode()
    for delta in (-1, 1):
        wrong = cs.Deferred(p.address, p.nchars, p.kind, p.size + delta, kind_doc)
        dst = np.zeros(p.size + delta + 16, np.uint8)
        with pytest.raises(RuntimeError, match="not the .* bytes counted for its"):
            copy_parts(dst[:p.size + delta], [wrong])
        assert not dst[p.size + delta:].any()
    dst = np.zeros(p.size, np.uint8)
    copy_parts(dst, [p])   # (the descriptor is usable after the refusals)
    assert dst.tobytes() == kind_doc.encode()


def test_cached_utf8_is_read_from_the_str():
    s = "güzel 中文 " * 500
    cs.str_address(s)    # PyUnicode_AsUTF8AndSize caches the UTF-8 in the object
    (part,) = cs.utf8_parts([s])
    assert isinstance(part, cs.Span) and part.owner is s
    assert part.tobytes() == s.encode()


def test_str_subclasses_are_packed_as_to_bytes_packs_them():
    class S(str):
        pass

    class Loud(str):
        def encode(self, *a, **k):
            return b"LOUD"

    docs = [S("çok"), S("abc"), Loud("x"), S("a\ud800")]
    for name, got in _all_packers(docs).items():
        assert got == _want(docs) == b"\xc3\xa7okabcLOUDa\xef\xbf\xbd", name


def test_bad_items_are_named_with_their_index():
    docs = ["a", "é", 5]
    for pack in (pack_documents, _pack, lambda d: _pack(d, keep_parts=True)):
        with pytest.raises(InputError, match="document 2: expected str or bytes, got int"):
            pack(docs)
    # wordcount groups documents: the index counts from the corpus's start
    with pytest.raises(InputError, match="document 7: expected str or bytes, got NoneType"):
        list(_batches(iter(["é" * 3] * 7 + [None]), 4, {}))


def test_called_from_a_pool_thread_does_not_wait_on_the_pool(monkeypatch):
    monkeypatch.setattr(cs, "PARALLEL_MIN", 16)
    docs = ["çok güzel " * 200] * 64
    futs = [cs.copy_pool().submit(lambda: cs.join_parts(cs.utf8_parts(docs)).tobytes())
            for _ in range(cs.THREADS)]
    assert all(f.result(timeout=60) == _want(docs) for f in futs)


def test_a_wrong_layout_fails_the_self_test(monkeypatch):
    """The self-test reads the objects through the layout: shifted offsets are caught (and
    recorded, warned), never used."""
    import sys

    v = sys.version_info[:2]
    a, c, ln, u = cs._LAYOUTS[v]
    monkeypatch.setitem(cs._LAYOUTS, v, (a + 8, c + 8, ln, u))
    cs.reset()
    with pytest.warns(GPUBPEWarning, match="threaded str → UTF-8 packer is off"):
        assert not cs.available()
    assert "str_utf8" in cs.fallbacks()
    docs = ["çok", "中文 😀", "a\ud800"]
    assert cs.join_parts(cs.utf8_parts(docs)).tobytes() == _want(docs)


def test_unavailable_gives_the_same_bytes_records_and_warns_once(monkeypatch):
    monkeypatch.setattr(cs, "_why_not", lambda: "forced by a test")
    cs.reset()
    docs = corpus_docs(CORPUS_NAMES[0], 200_000) + ["a\ud800", b"\xff", "😀"]
    with pytest.warns(GPUBPEWarning, match="forced by a test") as rec:
        got = _all_packers(docs)
        _all_packers(docs)
    assert len([w for w in rec if issubclass(w.category, GPUBPEWarning)]) == 1
    assert cs.fallbacks() == {"str_utf8": "forced by a test",   # (str_pack needs the layout)
                              "str_native": "the CPython str layout is not checked here "
                                            "(fallbacks()['str_utf8'])"}
    for name, b in got.items():
        assert b == _want(docs), name
    assert not any(isinstance(p, cs.Span) for p in cs.utf8_parts(docs))


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
    cs.reset()
    monkeypatch.setattr(cs, "_why_not", lambda: "forced by a test")
    stats2: dict = {}
    with pytest.warns(GPUBPEWarning, match="forced by a test"):
        v2 = train(docs, 262, stats=stats2)
    assert set(stats2["str_fallbacks"]) == {"str_utf8", "str_native"}
    assert stats2["str_packer"] == "to_bytes per document"
    assert v2.merges == v1.merges
