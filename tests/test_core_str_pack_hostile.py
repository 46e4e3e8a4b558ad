"""Hostile input for the compiled str → UTF-8 packer (torch_gpubpe.core.str_pack, _utf8pack.c): every
path (pack, Packed, pack_batches, and the public API on top) gives the bytes of
reference.to_bytes — lone surrogates → U+FFFD, a pair → its character — for surrogates at the
16-character blocks and the bounce buffer's pieces, kinds 1/2/4 with bytes-likes and numpy
scalars in one batch, cached UTF-8 (also half-filled, as a concurrent PyUnicode_AsUTF8 leaves
it), legacy strings, str subclasses that override their methods, one object many times, empty
and tiny documents by the million, huge documents, lists changed by another thread meanwhile;
a bad item raises InputError naming its index, an exception of the source passes through
unchanged; the ids of train(list) and encode_batch(es) equal those made with the packer off."""

from __future__ import annotations

import ctypes
import itertools
import os
import pickle
import subprocess
import sys
import threading
from array import array

import numpy as np
import pytest

from torch_gpubpe.core import cpython_layout
from torch_gpubpe.core import str_pack
from torch_gpubpe.errors import InputError
from torch_gpubpe.core.reference import to_bytes

UNITS = ["a", " ", "\xe9", "\u07ff", "\u0800", "\u4e2d", "\U0001f600", "\U0010ffff",
         "\ud800", "\udbff", "\udc00", "\udfff"]


@pytest.fixture(autouse=True)
def _fresh():
    str_pack.reset()
    assert str_pack.available()   # (CPython 3.10-3.13 on x86-64/glibc: a failure is a bug)
    yield


def _split(data, offsets) -> list[bytes]:
    data = np.asarray(data).tobytes()
    return [data[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]


def _batches(docs, batch_bytes: int = 1000, threads: int = 3) -> list[bytes]:
    out, info = [], {}
    for data, offsets in str_pack.pack_batches(docs, batch_bytes, info, threads=threads):
        out += _split(data, offsets)
    assert info["num_documents"] == len(out)
    assert info["corpus_bytes"] == sum(map(len, out))
    return out


def _every_path(docs, threads: int = 2) -> dict[str, list[bytes]]:
    p = str_pack.Packed(docs, threads=threads)
    return {"pack": _split(*str_pack.pack(docs, threads=threads)),
            "Packed": _split(np.frombuffer(p.tobytes(), np.uint8), p.offsets),
            "pack_batches": _batches(docs, threads=threads + 1)}


def _assert_as_to_bytes(docs, threads: int = 2) -> None:
    want = [to_bytes(d) for d in docs]
    for name, got in _every_path(docs, threads).items():
        bad = [k for k, (g, w) in enumerate(zip(got, want)) if g != w]
        assert len(got) == len(want) and not bad, (name, bad[:5])


def test_surrogate_rule_of_to_bytes():
    """The rule the packer follows, on every three units: a high surrogate then a low one is
    one character, any other surrogate is U+FFFD."""
    for t in itertools.product(UNITS, repeat=3):
        s, out, i = "".join(t), [], 0
        while i < len(s):
            c = ord(s[i])
            if 0xD800 <= c <= 0xDBFF and i + 1 < len(s) and 0xDC00 <= ord(s[i + 1]) <= 0xDFFF:
                out.append(chr(0x10000 + ((c - 0xD800) << 10) + ord(s[i + 1]) - 0xDC00))
                i += 2
                continue
            out.append("\ufffd" if 0xD800 <= c <= 0xDFFF else s[i])
            i += 1
        assert to_bytes(s) == "".join(out).encode(), t


def test_every_three_units():
    _assert_as_to_bytes(["".join(t) for t in itertools.product(UNITS, repeat=3)])


# a bounce piece: (65536 - 8) // BOUND units (kind 1: 32764, kind 2: 21842, kind 4: 16382)
@pytest.mark.parametrize("base", ["a", "\xe9", "\u4e2d", "\U0001f600"])
def test_surrogates_at_blocks_and_pieces(base):
    docs = []
    for n in (15, 16, 17, 32, 33, 4097, 16382, 16384, 21842, 21844, 32764, 32766, 43686):
        for sur in ("\ud800\udc00", "\ud83d", "\ude00", "\udc00\ud800"):
            for pos in {0, 7, 8, 15, 16, n // 2, n - 2, n - 1, 16381, 21841, 32763}:
                if 0 <= pos < n:
                    docs.append(base * pos + sur + base * (n - pos - 1))
    _assert_as_to_bytes(docs)


def test_kinds_bytes_likes_and_numpy_scalars_in_one_batch():
    docs = ["", b"", "ascii", "l\xe1tin", "\u4e2d\u6587", "\U0001f600 four", b"\xff\xfe raw",
            bytearray(b"b\xe9a"), memoryview(b"m-e-m-o")[::2], memoryview(array("I", [1, 2 ** 31])),
            memoryview(np.arange(6, dtype=np.uint16).reshape(2, 3).T), np.str_("np \u4e2d"),
            np.bytes_(b"np b"), "\ud800", "x" * 70000 + "\xe9"] * 3
    _assert_as_to_bytes(docs)
    _assert_as_to_bytes(docs, threads=1)


def _as_utf8():
    f = ctypes.pythonapi.PyUnicode_AsUTF8
    f.restype, f.argtypes = ctypes.c_void_p, [ctypes.py_object]
    return f


def test_cached_utf8_and_legacy_strings():
    cached = ["cached \u4e2d text " * 40, "l\xe1tin " * 3000, "\U0001f600" * 20000]
    for s in cached:
        assert _as_utf8()(s)
    docs = cached * 3
    api = ctypes.pythonapi
    if hasattr(api, "PyUnicode_FromUnicode"):   # (≤ 3.11: legacy, non-compact strings)
        f = api.PyUnicode_FromUnicode
        f.restype, f.argtypes = ctypes.py_object, [ctypes.c_wchar_p, ctypes.c_ssize_t]
        docs += [f("leg\xe1cy \u4e2d \U0001f600", 12), f("ascii legacy", 12)]
    if hasattr(api, "PyUnicode_AsUnicode"):     # (≤ 3.11: a wstr cached in a compact str)
        g = api.PyUnicode_AsUnicode
        g.restype, g.argtypes = ctypes.c_void_p, [ctypes.py_object]
        w = ["wide \u4e2d", "l\xe1t", "\U0001f600x"]
        for s in w:
            g(s)
        docs += w
    _assert_as_to_bytes(docs)


def test_a_half_filled_utf8_cache_is_not_read():
    """PyUnicode_AsUTF8 on another thread (with the GIL, while the scan runs without it) sets
    the cache's pointer before its length: the scan must not take the pointer with length 0
    (a document silently emptied)."""
    s = "half \u4e2d filled " * 10
    _, _, len_off, ptr_off = cpython_layout.layout()
    buf = ctypes.create_string_buffer(len(s) * 3 + 1)
    ptr = ctypes.c_void_p.from_address(id(s) + ptr_off)
    size = ctypes.c_ssize_t.from_address(id(s) + len_off)
    assert ptr.value is None and size.value == 0
    ptr.value = ctypes.addressof(buf)
    try:
        got = _every_path(["a", s, "b"])
    finally:
        ptr.value = None
    for name, parts in got.items():
        assert parts == [b"a", to_bytes(s), b"b"], name


class _Odd(str):
    def __len__(self):
        return 10 ** 9

    def __str__(self):
        return "other"

    def __iter__(self):
        raise RuntimeError("not iterable")


class _Loud(str):
    def encode(self, *args, **kwargs):
        return b"LOUD"


class _NotBytes(str):
    def encode(self, *args, **kwargs):
        return "not bytes" * 1000


def test_str_subclasses():
    """A str subclass is packed as to_bytes packs it: its characters whatever else it
    overrides, its own encode() where it has one; an encode() that gives no bytes is an
    InputError naming the item, never an object of another type read as bytes."""
    docs = ["a", _Odd("h\xe9llo \u4e2d"), _Odd("plain"), _Odd("\ud800x"), _Loud("q\xe9"), "b"]
    want = [b"a", "h\xe9llo \u4e2d".encode(), b"plain", b"\xef\xbf\xbdx", b"LOUD", b"b"]
    assert [to_bytes(d) for d in docs] == want
    assert all(type(to_bytes(d)) is bytes for d in docs)
    _assert_as_to_bytes(docs)
    bad = ["\u4e2d" * 100] * 3000 + [_NotBytes("x\xe9")]
    with pytest.raises(TypeError, match="_NotBytes.encode returned str"):
        to_bytes(bad[-1])
    for call in (lambda: str_pack.pack(bad, threads=2), lambda: str_pack.Packed(bad, threads=2),
                 lambda: _batches(bad, batch_bytes=4096)):
        with pytest.raises(InputError, match="document 3000: _NotBytes.encode returned str"):
            call()


class _LenRaises(str):
    def __init__(self, *a):
        self.error = OverflowError


    def __len__(self):
        raise self.error("no length")


def test_items_whose_len_raises_in_pack_batches():
    """pack_batches sizes its tasks by len(): an item whose len() raises is packed all the
    same (as the other paths do), a bad one raises InputError naming its index."""
    odd = [_LenRaises("l\xe9n"), _LenRaises("x")]
    odd[1].error = RuntimeError
    docs = ["a", *odd, "b"]
    assert _batches(docs) == [to_bytes(d) for d in docs]
    for bad in (range(2 ** 70), None):
        docs = ["a" * 600] * 5000 + [bad]
        with pytest.raises(InputError, match="document 5000"):
            _batches(docs, batch_bytes=1 << 14)


def test_bad_items_name_their_index():
    released = memoryview(b"gone")
    released.release()
    for bad in (None, 7, 1.5, ["x"], released, object()):
        docs = ["\u4e2d" * 100] * 3000 + [bad] + ["z"]
        for call in (lambda: str_pack.pack(docs, threads=2),
                     lambda: str_pack.Packed(docs, threads=2),
                     lambda: _batches(docs, batch_bytes=4096)):
            with pytest.raises(InputError, match="document 3000"):
                call()


class _Stop(BaseException):
    pass


@pytest.mark.parametrize("error", [ValueError, KeyboardInterrupt, _Stop])
def test_a_source_that_raises_midway(error):
    def gen():
        for k in range(3000):
            yield "\xe9\u4e2d" * (k % 90)
        raise error("midway")

    with pytest.raises(error, match="midway"):
        _batches(gen(), batch_bytes=2048)
    docs = ["after \u4e2d"] * 100   # (the pool still works)
    assert _batches(iter(docs)) == [to_bytes(d) for d in docs]


def test_one_object_many_times():
    s, b = "same \u4e2d\ud800 \U0001f600 " * 50, b"same bytes"
    docs = [s, b] * 20000
    _assert_as_to_bytes(docs)
    assert _batches(x for x in docs) == [to_bytes(d) for d in docs]


def test_many_tiny_documents():
    docs = ["", "a", "\xe9", "\u4e2d", "\U0001f600", "\ud800", b"", b"z"] * 25000
    _assert_as_to_bytes(docs)


@pytest.mark.heavy
def test_millions_of_tiny_documents():
    docs = ["", "a", "\xe9", "\u4e2d", "\U0001f600", "\udc00", b"", b"z"] * 500000
    _assert_as_to_bytes(docs)


@pytest.mark.heavy
def test_a_huge_kind_4_document():
    s = "\U0001f600a\u4e2d\ud800" * (75_000_000 // 4) + "\ud83d"   # (300 MB of characters)
    want = to_bytes(s)
    for name, got in _every_path([s, "x", s]).items():
        assert got == [want, b"x", want], name


def test_a_list_changed_by_another_thread():
    """Another thread appends to, inserts into and cuts the list being packed: no crash, and
    each document packed is one of the list's, whole."""
    docs = [f"doc \u4e2d {k} " * 5 for k in range(20000)]
    known = {to_bytes(d) for d in docs}
    stop = threading.Event()

    def change():  # a bounded number of changes: an iterator over a list that grows as
        k = 0        # fast as it is read would never end
        while not stop.is_set() and k < 100_000:
            k += 1
            d = f"doc \u4e2d {k % 20000} " * 5
            docs.append(d)
            if k % 500 == 0:
                del docs[:300]
            if k % 7 == 0:
                docs.insert(0, d)

    t = threading.Thread(target=change)
    t.start()
    try:
        for _ in range(4):
            for got in (_split(*str_pack.pack(docs, threads=2)), _batches(docs, 4096)):
                assert got and set(got) <= known
    finally:
        stop.set()
        t.join()


_PUBLIC = r"""
import itertools, pickle, sys
import numpy as np
from torch_gpubpe import Tokenizer, train
from torch_gpubpe.core import utf8_native
if sys.argv[1] == "0":   # (the compiled packer off: no C compiler)
    utf8_native.c_compiler = lambda: None
units = ["a", " ", "\xe9", "\u4e2d", "\U0001f600", "\ud800", "\udc00", "\ud83d\ude00"]
docs = ["".join(t) for t in itertools.product(units, repeat=3)]
class S(str):
    def encode(self, *a, **k):
        return b"LOUD"
class T(str):
    def __len__(self):
        return 10 ** 9
docs += [S("s\xfcb \u4e2d"), T("t\xfcb \u4e2d"), np.str_("np \xe9"), b"raw \xff", bytearray(b"ba \xe9"),
         memoryview(b"m e m o")[::2], "", b"", ("x\u4e2d\ud800" * 8000)[:21843],
         "a" * 32765 + "\udbff", "\U0001f600" * 16383 + "\ud800\udc00"]
stats = {}
vocab = train(docs, 300, stats=stats)
tok = Tokenizer(vocab)
ids = [np.asarray(x).tolist() for x in tok.encode_batch(docs)]
ids2 = [np.asarray(x).tolist() for b in tok.encode_batches([docs[:200], docs[200:]]) for x in b]
pickle.dump((vocab.merges, ids, ids2, stats["str_packer"]), sys.stdout.buffer)
"""


@pytest.mark.gpu
def test_public_api_ids_equal_those_with_the_packer_off():
    out = {}
    for flag in ("1", "0"):
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        r = subprocess.run([sys.executable, "-c", _PUBLIC, flag], env=env, capture_output=True,
                           timeout=600)
        assert r.returncode == 0, r.stderr.decode()[-3000:]
        out[flag] = pickle.loads(r.stdout)
    assert out["1"][3].startswith("str_pack") and out["0"][3] == "to_bytes per document"
    merges, ids, ids2, _ = out["1"]
    assert ids == ids2
    assert merges == out["0"][0]
    assert ids == out["0"][1] and ids2 == out["0"][2]
