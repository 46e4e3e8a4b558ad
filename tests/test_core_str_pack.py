"""The compiled str → UTF-8 packer (torch_gpubpe.core.str_pack, _utf8pack.c) gives the bytes of
reference.to_bytes for every item — every PEP 393 kind, ASCII, bytes, cached UTF-8, lone and
paired surrogates, str subclasses — at lengths around its 16-character blocks and its bounce
buffer's pieces, through each path (one array, Packed + copy_parts, the trainer's batches), on
one thread or many, and on every corpus; unavailable, the packers give the same bytes one
document at a time, record why and warn once."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import CORPUS_NAMES, corpus_docs
from torch_gpubpe.core import cpython_layout
from torch_gpubpe.core import utf8_native as _utf8_native
from torch_gpubpe.core import str_pack
from torch_gpubpe.encoding.tokenizer import _pack, copy_parts
from torch_gpubpe.errors import InputError
from torch_gpubpe.notices import GPUBPEWarning
from torch_gpubpe.encoding.pretokenize import pack_documents
from torch_gpubpe.core.reference import to_bytes
from torch_gpubpe.training.wordcount import document_batches as _batches, str_packer

SURROGATES = "\ud800\udbff\udc00\udfff\ud83d\ude00"
# lengths around the 16-character blocks and a 64 KiB bounce buffer's pieces (≈ 21,800
# characters of kind 2, 16,382 of kind 4)
LENGTHS = [0, 1, 2, 15, 16, 17, 31, 32, 33, 16382, 16383, 21842, 21843, 32761, 65535, 65536]


def _chars(max_codepoint: int):
    return st.characters(max_codepoint=max_codepoint, exclude_categories=())  # (surrogates too)


def _doc():
    return st.one_of(
        st.text(_chars(0x7F), max_size=70),
        st.text(_chars(0xFF), max_size=70),                 # kind 1
        st.text(_chars(0xFFFF), max_size=70),               # kind 2, surrogates too
        st.text(_chars(0x10FFFF), max_size=70),             # kind 4
        st.text(st.sampled_from("ab\x7f\x80\xff\u07ff\u0800\uffff\U00010000\U0010ffff"
                                + SURROGATES), max_size=70),
        # (ASCII runs around a block with one character of another size in them)
        st.tuples(st.integers(0, 40), st.sampled_from("\xe9\u4e2d\U0001f600\ud800\udc00"),
                  st.integers(0, 40)).map(lambda t: "a" * t[0] + t[1] + "b" * t[2]),
        st.binary(max_size=20),
    )


def _want(docs) -> bytes:
    return b"".join(to_bytes(d) for d in docs)


def _every_path(docs, threads: int) -> dict[str, bytes]:
    data, offsets = str_pack.pack(docs, threads=threads)
    assert np.diff(offsets).tolist() == [len(to_bytes(d)) for d in docs]
    p = str_pack.Packed(docs, threads=threads)
    assert (p.offsets == offsets).all()
    dst = np.full(len(p) + 16, 0xAA, np.uint8)
    copy_parts(dst[: len(p)], [p])
    assert (dst[len(p):] == 0xAA).all()   # (nothing written past its room)
    batches = list(str_pack.pack_batches(iter(docs), 200, {}, threads=threads))
    return {"pack": data.tobytes(), "Packed + copy_parts": dst[: len(p)].tobytes(),
            "Packed.tobytes": p.tobytes(),
            "pack_batches": b"".join(d.tobytes() for d, _ in batches)}


@pytest.fixture(autouse=True)
def _fresh():
    str_pack.reset()
    yield
    str_pack.reset()


def test_available_here():
    """This machine (CPython 3.10–3.13, glibc, a C compiler) builds and uses it: a failed
    build or self-test here would be a bug, not a reason to skip."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", GPUBPEWarning)
        assert str_pack.available(), str_pack.fallbacks()
    assert str_pack.fallbacks() == {}


@settings(max_examples=300, deadline=None)
@given(docs=st.lists(_doc(), max_size=12))
def test_every_path_gives_the_bytes_of_to_bytes(docs):
    want = _want(docs)
    for threads in (1, 3):
        for name, got in _every_path(docs, threads).items():
            assert got == want, (name, threads)


@settings(max_examples=150, deadline=None)
@given(docs=st.lists(_doc(), max_size=12))
def test_the_portable_build_gives_the_same_bytes(docs):
    """The build without SSE2 blocks (-DGPUBPE_NO_SIMD: 64-bit words) packs as the SIMD one."""
    lib = _portable()
    for mode in (0, 1):
        assert str_pack._pack_arrays(lib, docs, 0, 1, mode)[0].tobytes() == _want(docs)


_PORTABLE: list = []


def _portable():
    if not _PORTABLE:
        _PORTABLE.append(_utf8_native.build(["-DGPUBPE_NO_SIMD"]))
    str_pack.available()   # (the layout, checked)
    return _PORTABLE[0]


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("c", ["a", "\xe9", "\u4e2d", "\U0001f600", "\ud800", "\ud83d\ude00"])
def test_boundary_lengths_of_each_kind(n, c):
    """Runs of ``n`` characters of each size (ASCII, then one in the middle and one at the
    end of another kind), alone and after an ASCII prefix (every block alignment)."""
    base = c * n
    for s in (base, "a" * n + c, "a" * (n // 2) + c + "a" * (n - n // 2), base + "x" + c,
              "\xe9" + "a" * n, "\u4e2d" + "a" * n, "\U0001f600" + "a" * n):
        docs = [s, "q" * 7 + s, s[: n // 3]]
        want = _want(docs)
        for name, got in _every_path(docs, 2).items():
            assert got == want, (name, repr(s[:40]), len(s))
        for mode in (0, 1):
            assert str_pack._pack_arrays(_portable(), docs, 0, 1, mode)[0].tobytes() == want


def test_surrogates_as_to_bytes():
    """Lone surrogates → U+FFFD, a high one followed by a low one → the character they encode
    (to_bytes's utf-16 surrogatepass round trip), in kind 2 and kind 4, split across bounce
    pieces too."""
    cases = ["\ud800", "\udc00", "\ud800\ud800", "\ud800\udc00", "\udc00\ud800", "x\ud800",
             "\udbff\udfff", "\ud800\ud800\udc00", "\U0001f600\udc00", "\U0001f600\ud83d"]
    for s in cases:
        for doc in (s, "a" * 21841 + s, "\U0001f600" * 16381 + s, s * 9000):
            for name, got in _every_path([doc], 1).items():
                assert got == to_bytes(doc), (name, repr(s), len(doc))


def test_cached_utf8_bytes_subclasses_and_bad_items():
    class S(str):
        pass

    class Loud(str):
        def encode(self, *a, **k):
            return b"LOUD"

    cached = "güzel 中文 " * 50
    cpython_layout.str_address(cached)   # (PyUnicode_AsUTF8AndSize caches the UTF-8 in the object)
    docs = [S("çok"), cached, b"\xff\x00", bytearray(b"ba"), memoryview(b"mv"), Loud("x"),
            S("a\ud800")]
    assert _every_path(docs, 2)["pack"] == _want(docs)
    for pack in (lambda d: str_pack.pack(d), str_pack.Packed, pack_documents, _pack,
                 lambda d: _pack(d, keep_parts=True)):
        with pytest.raises(InputError, match="document 2: expected str or bytes, got int"):
            pack(["a", "é", 5])
    with pytest.raises(InputError, match="document 7: expected str or bytes, got NoneType"):
        list(str_pack.pack_batches(iter(["é" * 3] * 7 + [None]), 4, {}))
    released = memoryview(b"gone")
    released.release()
    for pack in (str_pack.pack, lambda d: list(str_pack.pack_batches(d, 4, {}))):
        with pytest.raises(InputError, match="document 2: unreadable memoryview"):
            pack(["ok", b"fine", released])


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_corpora(threads, monkeypatch):
    """Every corpus, and all of them as ~11 KB documents (the trainer's shape), over
    ``threads`` threads (ranges of at least 1 KiB of work)."""
    monkeypatch.setattr(str_pack, "MIN_WORK", 1024)
    pieces = []
    for name in CORPUS_NAMES:
        docs = corpus_docs(name, 400_000)
        pieces += [d[i : i + 11_000] for d in docs for i in range(0, len(d), 11_000)]
        want = b"".join(d.encode() for d in docs)
        assert _every_path(docs, threads)["pack"] == want, name
    got = _every_path(pieces, threads)
    assert all(b == _want(pieces) for b in got.values())


def test_pack_batches_batches_and_info():
    """A batch ends at the first document that brings it to batch_bytes (or at its task's
    end); info counts documents and bytes."""
    docs = (["a" * 700, "é" * 300, "中" * 200, "😀" * 100] * 300)
    info: dict = {}
    sizes = []
    for data, offsets in str_pack.pack_batches(iter(docs), 4096, info, threads=2):
        assert offsets[0] == 0 and offsets[-1] == len(data)
        assert offsets[-2] < 4096   # (no batch goes past the document that brought it there)
        sizes.append(len(data))
    assert info["num_documents"] == len(docs)
    assert info["corpus_bytes"] == sum(sizes) == len(_want(docs))


def test_buffers_are_reused_only_when_free():
    bufs = str_pack._Buffers(keep=4, min_size=100)
    a = bufs.get(50)
    view = a[:10]
    del a
    b = bufs.get(50)
    assert b.ctypes.data != view.base.ctypes.data   # (a view of the first is alive)
    first = view.base.ctypes.data
    del view, b
    assert bufs.get(50).ctypes.data in (first, bufs.bufs[1].ctypes.data)
    c = bufs.get(50)
    assert len({x.ctypes.data for x in bufs.bufs}) == len(bufs.bufs)
    del c


def test_the_paths_use_it():
    docs = ["é" * 2000, "中" * 5000, "😀" * 3000, "ascii"]
    parts, offsets = _pack(docs, keep_parts=True)
    assert len(parts) == 1 and type(parts[0]) is str_pack.Packed
    assert type(_pack(docs, keep_parts=True, defer=False)[0]) is np.ndarray   # (encode_batches)
    assert str_packer(docs) == f"str_pack, {str_pack.BATCH_THREADS} threads"


def test_a_pool_thread_does_not_wait_on_the_pool(monkeypatch):
    monkeypatch.setattr(str_pack, "MIN_WORK", 16)
    docs = ["çok güzel " * 200] * 64
    pool = str_pack.pool_for(4)
    futs = [pool.submit(lambda: str_pack.pack(docs, threads=4)[0].tobytes()) for _ in range(8)]
    assert all(f.result(timeout=60) == _want(docs) for f in futs)


def test_threads_default_to_the_cpu_count():
    cpus = os.cpu_count() or 1
    assert str_pack.THREADS == min(16, cpus) and str_pack.BATCH_THREADS == min(8, cpus)


def test_no_compiler_gives_the_same_bytes_records_and_warns_once(monkeypatch):
    monkeypatch.setattr(_utf8_native, "c_compiler", lambda: None)
    _utf8_native.reset()
    try:
        docs = corpus_docs(CORPUS_NAMES[0], 200_000) + ["a\ud800", b"\xff", "😀"]
        with pytest.warns(GPUBPEWarning, match="no C compiler") as rec:
            assert not str_pack.available()
            got = [pack_documents(docs)[0].tobytes(), _pack(docs)[0].tobytes(),
                   b"".join(d.tobytes() for d, _ in _batches(iter(docs), 4096, {}))]
            assert not str_pack.available()
        assert len([w for w in rec if issubclass(w.category, GPUBPEWarning)]) == 1
        assert list(str_pack.fallbacks()) == ["str_native"]
        assert "no C compiler" in str_pack.fallbacks()["str_native"]
        assert str_pack.pack(docs) is None
        assert all(b == _want(docs) for b in got)
        assert str_packer(docs) == "to_bytes per document"
    finally:
        _utf8_native.reset()


def test_a_wrong_layout_fails_the_self_test(monkeypatch):
    """The self-test packs through the layout: a shifted data offset is caught, recorded and
    warned about, never used."""
    a, c, ln, u = cpython_layout.layout()
    monkeypatch.setattr(cpython_layout, "layout", lambda: (a, c + 8, ln, u))
    with pytest.warns(GPUBPEWarning, match="compiled str → UTF-8 packer is off"):
        assert not str_pack.available()
    assert "differs from to_bytes" in str_pack.fallbacks()["str_native"]


@pytest.mark.parametrize("prepend", [False, True])
def test_metaspace_gives_sentencepieces_text(prepend, monkeypatch):
    """SentencePiece's Metaspace (every space → ▁, with ``prepend`` one ▁ before each non-empty
    document) on the packing threads, on one thread, and without the compiler (the normalizer's
    own path): the same bytes and document bounds as ``str.replace`` per document."""
    from torch_gpubpe.encoding.normalizers import normalize_packed

    docs = [d.encode() for n in CORPUS_NAMES for d in corpus_docs(n, 400_000)] * 3
    docs += [b"", b" ", b"  a b ", b"\xe2\x96\x81 x", b"\xff \xe2", b""]
    data, offsets = pack_documents(docs)
    meta = "\u2581".encode()
    want = [(meta if prepend and d else b"") + d.replace(b" ", meta) for d in docs]

    def check(out, off):
        assert [out[off[k]:off[k + 1]].tobytes() for k in range(len(docs))] == want
        assert off[-1] == len(out)

    check(*str_pack.metaspace(data, offsets, prepend, threads=4))
    check(*str_pack.metaspace(data, offsets, prepend, threads=1))
    assert len(data) >= 4 * str_pack.MIN_WORK   # (four threads take a range each)
    name = "metaspace-prepend" if prepend else "metaspace"
    check(*normalize_packed(data, offsets, name))
    monkeypatch.setattr(str_pack, "metaspace", lambda *a, **k: None)
    check(*normalize_packed(data, offsets, name))


def test_find_bytes_over_several_threads_finds_the_first():
    """The compiled scan for bytes a vocab lacks, over several threads' parts (the ASCII
    skip when every marked byte is >= 0x80, and without it): the first marked byte, as numpy
    finds it, wherever it lies; -1 when there is none."""
    rng = np.random.default_rng(11)
    data = rng.integers(0x20, 0x80, 5_000_000).astype(np.uint8)   # (no 0x03)
    data[rng.random(len(data)) < 0.05] = 0xE2   # non-ASCII that is not marked
    for marked in ([0xF1, 0xFF], [0x03, 0xF1]):
        table = np.zeros(256, bool)
        table[marked] = True
        assert str_pack.find_bytes(data, table, threads=8) == -1
        for at in (0, 7, 8, 1_249_999, 1_250_000, 3_333_333, len(data) - 1):
            d = data.copy()
            d[at] = marked[-1]
            d[min(at + 5, len(d) - 1)] = marked[0]
            want = int(np.argmax(table[d]))
            assert str_pack.find_bytes(d, table, threads=8) == want == at


def test_metaspace_of_tiny_documents_over_several_threads():
    """Metaspace over ranges of tiny documents (0-3 bytes, mostly spaces): every range's last
    bytes, documents ending at a range's end, empty ones between: str.replace's bytes."""
    rng = np.random.default_rng(3)
    alphabet = np.frombuffer(b"  a\xe2", np.uint8)
    sizes = rng.integers(0, 4, 1_500_000)
    offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    data = alphabet[rng.integers(0, len(alphabet), int(offsets[-1]))]
    meta = "\u2581".encode()
    raw = data.tobytes()
    for prepend in (False, True):
        out, off = str_pack.metaspace(data, offsets, prepend, threads=8)
        want = b"".join((meta if prepend and b > a else b"") + raw[a:b].replace(b" ", meta)
                        for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist()))
        assert out.tobytes() == want and off[-1] == len(out)
        ends = np.cumsum([0] + [len(meta) * prepend * (b > a) + (b - a) + 2 * raw[a:b].count(b" ")
                                for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())])
        assert np.array_equal(off, ends)


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
def test_byte_fallback_expansion_compiled_and_not(dtype, monkeypatch):
    """ByteUnits.expand (each prefix token → its byte tokens; document offsets moved) gives
    the same ids and offsets compiled and in numpy, where a prefix token opens or ends a
    document, at the ends of the ids, and between empty documents."""
    from torch_gpubpe.core.sentencepiece import ByteUnits

    units = ByteUnits(vocab=None, first_prefix=100, expansion=((7, 8), (9, 10, 11), (12,)))
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 103, 50_000).astype(dtype)
    ids[[0, -1]] = 101
    cuts = np.sort(rng.choice(np.arange(1, len(ids)), 300, replace=False))
    offsets = np.concatenate([[0, 0], cuts, cuts[:5], [len(ids), len(ids)]]).astype(np.int64)
    offsets.sort()
    want = []
    for k in range(len(offsets) - 1):
        doc = []
        for t in ids[offsets[k]:offsets[k + 1]].tolist():
            doc += list(units.expansion[t - 100]) if t >= 100 else [t]
        want.append(doc)

    def check(out, off):
        assert out.dtype == dtype and off[-1] == len(out)
        assert [out[off[k]:off[k + 1]].tolist() for k in range(len(want))] == want

    assert str_pack.available()
    check(*units.expand(ids, offsets))
    monkeypatch.setattr(str_pack, "library", lambda: None)
    check(*units.expand(ids, offsets))


def test_byte_fallback_expansion_over_several_threads_equals_numpys():
    """The compiled expansion cut into ranges of documents (several threads) gives numpy's
    ids and offsets; no prefix token at all gives back the same arrays."""
    from torch_gpubpe.core.sentencepiece import ByteUnits

    units = ByteUnits(vocab=None, first_prefix=1000, expansion=((7, 8), (9, 10, 11), (12,)))
    rng = np.random.default_rng(9)
    ids = rng.integers(0, 1000, 3_000_000).astype(np.uint32)
    ids[rng.random(len(ids)) < 0.01] = rng.integers(1000, 1003)
    offsets = np.unique(np.concatenate([[0, len(ids)], rng.integers(0, len(ids), 2000)]))
    offsets = offsets.astype(np.int64)
    table, lens = units.tables
    got = str_pack.expand_ids(ids, offsets, 1000, table, lens, threads=8)
    assert got is not None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(str_pack, "library", lambda: None)
        want = units.expand(ids, offsets)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    plain = ids % 1000
    same = str_pack.expand_ids(plain, offsets, 1000, table, lens, threads=8)
    assert same[0] is plain and same[1] is offsets


def test_pack_batch_names_a_bad_item_by_its_index_in_the_callers_list():
    """A group of a larger list (``first``): the error names the item's index in the list."""
    from torch_gpubpe.encoding.batch_pack import pack_batch

    for keep_parts in (False, True):
        with pytest.raises(InputError, match="document 11"):
            pack_batch(["ok", ["not text"]], keep_parts=keep_parts, first=10)
