"""Every CPython ``str`` internal torch_gpubpe uses, behind one door: the UTF-8 of a batch of
``str`` documents made by several threads without the GIL.

The packers (``encoder._pack``, ``pack_documents``, ``train(list)``) now go through
:mod:`torch_gpubpe.core.str_pack` (one compiled call per thread range, on this module's checked
layout); the iconv path below is what they take where that is not available
(``fallbacks()["str_native"]`` says why).

``str.encode("utf-8")`` holds the GIL, so a batch of non-ASCII documents is packed by one
thread (the host's bottleneck of ``Tokenizer.encode_batch`` and ``train(list_of_str)``). Here
each compact ``str``'s characters are read in place (PEP 393: ``kind`` 1, 2 or 4 bytes per
character, stored right after the object's header) and transcoded to UTF-8 by glibc's
``iconv`` called through ``ctypes``, which releases the GIL for the call (from ``WCHAR_T``,
glibc's UCS-4, into which kind-1/2 characters are widened by numpy first: one conversion
step instead of two); up to 8 threads each take a contiguous range of the documents. A ``str`` that already holds its UTF-8 (``PyCompactUnicodeObject.utf8``, cached by
``PyUnicode_AsUTF8AndSize``) is read from there; one under ``SMALL`` (1,024) characters is
``str.encode``'d at once (cheaper than handing it out). Per thread, glibc's iconv is about
half as fast as ``str.encode`` (≈ 450 vs 800 MB/s on mostly-ASCII text, 2 cores): the gain
needs ≥ 3 free cores. The internals, each written for **CPython 3.10–3.13** (``WRITTEN_FOR``,
64-bit, little-endian, GIL build, glibc):

=============================  ================================================================
internal                       used for
=============================  ================================================================
``PyASCIIObject.state``        ``kind`` (bits 2–4), ``compact`` (bit 5), ``ascii`` (bit 6), at
(offset 32)                    byte 32 of the object (after refcount, type, length, hash)
data after the header          a compact ``str``'s characters: at byte 48 (ASCII) / 72 (else)
                               on 3.10–3.11 (``wstr`` fields), 40 / 56 on 3.12–3.13
``PyCompactUnicodeObject``     the cached UTF-8 (``utf8_length``, ``utf8``): at 48, 56 on
``.utf8_length``, ``.utf8``    3.10–3.11, at 40, 48 on 3.12–3.13
``PyUnicode_AsUTF8AndSize``,   an ASCII ``str``'s characters (its UTF-8) and a ``bytes``
``PyBytes_AsString``,          object's buffer, read in place by :func:`copy_parts`; a
``PyMemoryView_FromMemory``    numpy view of a ``str``'s characters (to widen them)
(``ctypes.pythonapi``)
=============================  ================================================================

The layout is checked at first use (:func:`available`): the interpreter and version, then a
self-test on strings of each kind (lengths, hashes and kinds read from the objects, and the
UTF-8 made here against ``str.encode``). Where it fails (another interpreter or version, a
free-threaded or debug build, no ``iconv``), the packers take ``str.encode`` per document as
before: the reason is recorded (:func:`fallbacks`, copied by ``train()`` into
``stats["str_fallbacks"]``) and one ``GPUBPEWarning`` says so. Nothing falls back silently.

Documents this path does not take, each packed by :func:`torch_gpubpe.core.reference.to_bytes` (so
the bytes are those of every other packer): a ``str`` with lone surrogates (``iconv`` stops
with ``EILSEQ``; they become U+FFFD, DESIGN.md §1), a non-compact ``str`` or a ``str``
subclass, and ``bytes``-like items; anything else raises ``InputError`` naming its index.

Example::

    >>> from torch_gpubpe.core.cpython_str import join_parts, utf8_parts
    >>> join_parts(utf8_parts(["abc", "çok", "中 😀", b"\\xff", "a\\ud800"])).tobytes()
    b'abc\\xc3\\xa7ok\\xe4\\xb8\\xad \\xf0\\x9f\\x98\\x80\\xffa\\xef\\xbf\\xbd'
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Sequence

import numpy as np

from torch_gpubpe import notices
from torch_gpubpe.errors import InputError
from torch_gpubpe.core.reference import to_bytes

WRITTEN_FOR = ((3, 10), (3, 11), (3, 12), (3, 13))
# (data of a compact ASCII str, data of a compact non-ASCII str, utf8_length, utf8) offsets
_LAYOUTS = {(3, 10): (48, 72, 48, 56), (3, 11): (48, 72, 48, 56),
            (3, 12): (40, 56, 40, 48), (3, 13): (40, 56, 40, 48)}
_LENGTH, _HASH, _STATE = 16, 24, 32
# glibc's iconv converts WCHAR_T (its internal UCS-4) to UTF-8 in one step, about twice as
# fast as from UCS-2LE or ISO-8859-1 (two steps through UCS-4), so kind-1/2 characters are
# widened to UCS-4 by numpy first: short documents gathered (memmove) into a staging buffer of
# WIDEN_CHUNK characters and widened together, long ones a chunk at a time.
_BOUND = {1: 2, 2: 3, 4: 4}   # UTF-8 bytes per character at most: U+00FF, U+FFFF, U+10FFFF
_NARROW = {1: np.uint8, 2: np.uint16}
_ERR = ctypes.c_size_t(-1).value
THREADS = 8
PARALLEL_MIN = 1 << 18  # characters per thread at least (below: one thread)
SMALL = 1024            # characters: a shorter document is encoded by str.encode at once
WIDEN_CHUNK = 1 << 18   # characters widened at a time (1 MiB of UCS-4 per thread)


class Span:
    """``size`` bytes of UTF-8 at ``address``, kept alive by ``owner`` (a scratch array, or the
    ``str`` whose cached UTF-8 it is). ``len(span)`` is ``size``."""

    __slots__ = ("address", "size", "owner")

    def __init__(self, address: int, size: int, owner: object) -> None:
        self.address, self.size, self.owner = address, size, owner

    def __len__(self) -> int:
        return self.size

    def tobytes(self) -> bytes:
        return ctypes.string_at(self.address, self.size)


class Deferred:
    """A non-ASCII compact ``str`` (``owner``) whose UTF-8 is ``size`` bytes (counted from its
    characters, none a surrogate) and not made yet: :func:`copy_parts` transcodes it straight
    into its place in the destination (``nchars`` characters of ``kind`` bytes at
    ``address``). ``len(part)`` is ``size``."""

    __slots__ = ("address", "nchars", "kind", "size", "owner")

    def __init__(self, address: int, nchars: int, kind: int, size: int, owner: str) -> None:
        self.address, self.nchars, self.kind, self.size, self.owner = \
            address, nchars, kind, size, owner

    def __len__(self) -> int:
        return self.size

    def tobytes(self) -> bytes:
        return self.owner.encode()


# -- ctypes.pythonapi: addresses of ASCII str and bytes ------------------------------------------
def _address_functions():
    """CPython's ``PyUnicode_AsUTF8AndSize`` and ``PyBytes_AsString`` through ctypes, typed to
    return addresses; ``(None, None)`` where there is no ``ctypes.pythonapi`` (not CPython)."""
    api = getattr(ctypes, "pythonapi", None)
    if api is None:
        return None, None
    utf8, as_string = api.PyUnicode_AsUTF8AndSize, api.PyBytes_AsString
    utf8.restype = as_string.restype = ctypes.c_void_p
    utf8.argtypes = [ctypes.py_object, ctypes.c_void_p]
    as_string.argtypes = [ctypes.py_object]
    return (lambda t: utf8(t, None)), as_string


str_address, bytes_address = _address_functions()


def _memory_function():
    """``PyMemoryView_FromMemory`` (a read-only memoryview of an address range), or None."""
    api = getattr(ctypes, "pythonapi", None)
    if api is None:
        return None
    f = api.PyMemoryView_FromMemory
    f.restype = ctypes.py_object
    f.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int]
    return f


_memory = _memory_function()


# -- availability ----------------------------------------------------------------------------------
_lock = threading.Lock()
_fallbacks: dict[str, str] = {}
_state: dict = {}     # "ok": bool once checked; "layout"; "iconv" (the ctypes function)
_local = threading.local()


def _why_not() -> str | None:
    """Why the layout of ``WRITTEN_FOR`` cannot be assumed here (None: it can, pending the
    self-test)."""
    import sysconfig

    if sys.implementation.name != "cpython":
        return f"{sys.implementation.name} is not CPython"
    if sys.version_info[:2] not in _LAYOUTS:
        return (f"written for CPython {', '.join('%d.%d' % v for v in WRITTEN_FOR)}, found "
                f"{sys.version_info[0]}.{sys.version_info[1]}")
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return "a free-threaded build (another object layout)"
    if hasattr(sys, "gettotalrefcount"):
        return "a debug build (another object layout)"
    if ctypes.sizeof(ctypes.c_void_p) != 8 or sys.byteorder != "little":
        return "not a 64-bit little-endian build"
    if str_address is None or _memory is None:
        return "no ctypes.pythonapi"
    import platform

    if platform.libc_ver()[0] != "glibc":
        return "not glibc (its iconv's WCHAR_T is UCS-4)"
    return None


def _open_iconv():
    libc = ctypes.CDLL(None)
    iconv, iconv_open = libc.iconv, libc.iconv_open
    iconv_open.restype = ctypes.c_void_p
    iconv_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    iconv.restype = ctypes.c_size_t   # (no argtypes: called with c_void_p objects, half the
    close = libc.iconv_close          # cost of converting five ints per call)
    close.argtypes = [ctypes.c_void_p]
    return iconv, iconv_open, close


class _Descriptors:
    """This thread's iconv descriptor (one is not safe to share between threads) and buffers,
    closed when the thread ends."""

    def __init__(self, iconv_open, close) -> None:
        cd = iconv_open(b"UTF-8", b"WCHAR_T")
        if cd in (None, _ERR):
            raise OSError("iconv_open('UTF-8', 'WCHAR_T') failed")
        self.close, self.cd = close, ctypes.c_void_p(cd)
        self.cells = (ctypes.c_size_t * 4)()   # in pointer, in bytes left, out pointer, out left
        base = ctypes.addressof(self.cells)
        self.args = tuple(ctypes.c_void_p(base + 8 * k) for k in range(4))
        self.wide = np.empty(WIDEN_CHUNK, np.uint32)
        self.bounce = np.empty(4 * WIDEN_CHUNK, np.uint8)   # (UTF-8 of a chunk: ≤ 4 B/char)
        self.stage = {k: np.empty(WIDEN_CHUNK, t) for k, t in _NARROW.items()}

    def __del__(self) -> None:
        self.close(self.cd)


def _descriptors() -> _Descriptors:
    d = getattr(_local, "d", None)
    if d is None:
        d = _local.d = _Descriptors(_state["iconv_open"], _state["iconv_close"])
    return d


_SELF_TEST = ("h\xe9llo w\xf6rld \xff\x00 ", "\u011f\xfc\u015f \u4e2d\u6587 \ufeff\x00 ",
              "\U0001f600 mixed \xe9 \u4e2d \U00010348\x00 ", "\ufeffBOM first \u0100",
              "\U0010ffff\uffff\x80\u07ff\u0800")


def _self_test() -> str | None:
    """None when every internal reads as expected on strings of each kind, at lengths that
    take each path (gathered, widened in chunks, kind 4 in place, a cached UTF-8), else what
    differed."""
    asc_off, _, len_off, utf8_off = _state["layout"]
    for s0 in ("plain ascii text ", *_SELF_TEST):
        s = (s0 * (1024 // len(s0) + 1))[:1024]   # (a fresh object: nothing cached in it)
        a = id(s)
        hash(s)
        st = ctypes.c_uint32.from_address(a + _STATE).value
        kind = 1 if max(s) < "\u0100" else 2 if max(s) < "\U00010000" else 4
        if ctypes.c_ssize_t.from_address(a + _LENGTH).value != len(s):
            return "the length field is not at byte 16"
        if ctypes.c_ssize_t.from_address(a + _HASH).value != hash(s):
            return "the hash field is not at byte 24"
        if (st >> 2) & 7 != kind or not (st >> 5) & 1 or (st >> 6) & 1 != s.isascii():
            return f"the state bits read {st:#x} for a str of kind {kind}"
        if s.isascii():
            if str_address(s) != a + asc_off:
                return "an ASCII str's characters are not where expected"
            continue
        if ctypes.c_void_p.from_address(a + utf8_off).value is not None:
            return "a fresh str reads as having a cached UTF-8"
        docs = [s, s[1:] + s[:1]]
        if kind < 4:   # (and one widened in chunks)
            docs.append((s0 * (WIDEN_CHUNK // len(s0) + 2))[:WIDEN_CHUNK + 1])
        parts = utf8_parts(docs, threads=1)
        if not all(type(p) is Span for p in parts):
            return "a long str was not transcoded"
        if join_parts(parts).tobytes() != "".join(docs).encode():
            return f"iconv's UTF-8 of a kind-{kind} str differs from str.encode"
        parts = utf8_parts(docs, threads=1, defer=True)
        if not all(type(p) is Deferred for p in parts):
            return "a long str was not measured"
        if join_parts(parts).tobytes() != "".join(docs).encode():
            return f"iconv's UTF-8 of a kind-{kind} str written in place differs from str.encode"
    s = _SELF_TEST[1] * (1024 // len(_SELF_TEST[1]) + 1)
    cached = str_address(s)   # (PyUnicode_AsUTF8AndSize caches the UTF-8 in the object)
    if ctypes.c_void_p.from_address(id(s) + utf8_off).value != cached:
        return "the cached UTF-8's address is not where expected"
    if ctypes.c_ssize_t.from_address(id(s) + len_off).value != len(s.encode()):
        return "the cached UTF-8's length is not where expected"
    if join_parts(utf8_parts([s])).tobytes() != s.encode():
        return "a cached UTF-8 read back differs from str.encode"
    for s, n in (("a\ud800b", WIDEN_CHUNK + 9), ("\ud83d\ude00", 1024),
                 ("\U0001f600\udfff", 1024), ("\xe9\udc80", 1024)):
        s = "x" * (n - len(s)) + s
        if (join_parts(utf8_parts([s], threads=1)).tobytes() != to_bytes(s)
                or join_parts(utf8_parts([s], threads=1, defer=True)).tobytes() != to_bytes(s)):
            return "a str with surrogates is not packed as reference.to_bytes packs it"
    return None


def available() -> bool:
    """Whether the threaded iconv path is used; checked (and on failure recorded and warned
    about, once) at the first call."""
    ok = _state.get("ok")
    if ok is not None:
        return ok
    with _lock:
        if "ok" in _state:
            return _state["ok"]
        why = _why_not()
        if why is None:
            try:
                _state["iconv"], _state["iconv_open"], _state["iconv_close"] = _open_iconv()
                _state["layout"] = _LAYOUTS[sys.version_info[:2]]
                _descriptors()
            except (OSError, AttributeError) as e:
                why = f"no usable iconv ({e})"
        if why is None:
            _state["ok"] = True      # (tentatively, for the self-test's own packing)
            try:
                why = _self_test()
            except Exception as e:  # noqa: BLE001 (any failure of the test means: not here)
                why = f"the self-test raised {type(e).__name__}: {e}"
        _state["ok"] = why is None
        if why is not None:
            _fallbacks["str_utf8"] = why
    if why is not None:
        notices.warn(f"torch_gpubpe: the threaded str → UTF-8 packer is off ({why}); documents "
                     "are encoded by str.encode on one thread (slower; recorded in "
                     "stats['str_fallbacks'])", stacklevel=3)
    return why is None


def fallbacks() -> dict[str, str]:
    """Internals of this module not used in this process (name → why). Empty where the
    threaded packer works."""
    with _lock:
        return dict(_fallbacks)


def reset() -> None:
    """Forget the availability check and the recorded fallbacks, this module's and
    :mod:`torch_gpubpe.core.str_pack`'s (tests)."""
    from torch_gpubpe.core import str_pack

    with _lock:
        _fallbacks.clear()
        _state.clear()
    str_pack.reset()


# -- packing ---------------------------------------------------------------------------------------
def _document(doc, k: int) -> bytes:
    """The slow path's bytes of one item (``reference.to_bytes``), errors naming index ``k``."""
    try:
        return to_bytes(doc)
    except TypeError as e:
        raise InputError(f"document {k}: {e}") from e


def _transcode(addr: list[int], nchars: list[int], kinds: list[int], lo: int, hi: int
               ) -> tuple[np.ndarray, list[int], list[int]]:
    """UTF-8 of documents ``lo..hi-1`` (``nchars`` characters of ``kinds`` at ``addr``) in a
    new array: each one's start in it and length (-1 where iconv refused it: surrogates).
    The GIL is released in each iconv call and memmove (ctypes) and numpy's widening copies."""
    d = _descriptors()
    iconv, cd, cells, (p_in, p_inl, p_out, p_outl) = _state["iconv"], d.cd, d.cells, d.args
    chunk = min(WIDEN_CHUNK, len(d.wide))
    wide = d.wide[:chunk]
    wide_at = wide.ctypes.data
    bound = sum(nchars[j] * _BOUND[kinds[j]] for j in range(lo, hi))
    out = np.empty(bound, np.uint8)
    base = out.ctypes.data
    cells[2], cells[3] = base, bound
    starts, sizes = [0] * (hi - lo), [-1] * (hi - lo)
    move = ctypes.memmove

    def convert(j: int, at: int, nbytes: int) -> bool:
        """iconv ``nbytes`` of UCS-4 at ``at`` onto the output (document j's part)."""
        cells[0], cells[1] = at, nbytes
        if iconv(cd, p_in, p_inl, p_out, p_outl) == _ERR or cells[1]:
            iconv(cd, None, None, None, None)   # (back to the initial state)
            return False
        return True

    def finish(j: int, start: int, ok: bool) -> None:
        if ok:
            starts[j - lo], sizes[j - lo] = start - base, cells[2] - start
        else:   # (its partial output is overwritten by the next document)
            cells[3] += cells[2] - start
            cells[2] = start

    groups = {1: [], 2: []}   # kind → [(document, offset in the staging buffer)]
    fill = {1: 0, 2: 0}
    stage_at = {k: v.ctypes.data for k, v in d.stage.items()}   # (.ctypes costs µs: once)

    def flush(kind: int) -> None:
        """Widen a staging buffer and convert it in one iconv call; each document's length is
        its characters + those ≥ U+0080 + those ≥ U+0800 (one by one after a failure:
        surrogates)."""
        m, group = fill[kind], groups[kind]
        stage = d.stage[kind][:m]
        np.copyto(wide[:m], stage)
        start = cells[2]
        if convert(0, wide_at, 4 * m):
            offs = np.fromiter((off for _, off in group), np.int64, len(group))
            lens = (np.add.reduceat((stage >= 0x80).view(np.uint8) + (stage >= 0x800).view(np.uint8),
                                    offs, dtype=np.int64) + np.diff(offs, append=m)).tolist()
            if sum(lens) == cells[2] - start:
                at = start - base
                for (j, _), n in zip(group, lens):
                    starts[j - lo], sizes[j - lo] = at, n
                    at += n
                group.clear()
                fill[kind] = 0
                return
        cells[3] += cells[2] - start   # (not expected: converted again document by document)
        cells[2] = start
        for j, off in group:
            start = cells[2]
            finish(j, start, convert(j, wide_at + 4 * off, 4 * nchars[j]))
        group.clear()
        fill[kind] = 0

    for j in range(lo, hi):
        n, kind = nchars[j], kinds[j]
        if kind == 4:                 # in place
            start = cells[2]
            finish(j, start, convert(j, addr[j], 4 * n))
        elif n <= chunk:              # gathered with others of its kind
            if fill[kind] + n > chunk:
                flush(kind)
            move(stage_at[kind] + kind * fill[kind], addr[j], kind * n)
            groups[kind].append((j, fill[kind]))
            fill[kind] += n
        else:                         # widened a chunk at a time
            src = np.frombuffer(_memory(addr[j], n * kind, 0x100), _NARROW[kind])
            start, ok = cells[2], True
            for c in range(0, n, chunk):
                m = min(chunk, n - c)
                np.copyto(wide[:m], src[c:c + m])
                if not convert(j, wide_at, 4 * m):
                    ok = False
                    break
            finish(j, start, ok)
    for kind in groups:
        if groups[kind]:
            flush(kind)
    return out, starts, sizes


_SURROGATE_MASK = {2: 0xF800, 4: 0xFFFFF800}   # (c & mask) == 0xD800: a surrogate


def _flags(a: np.ndarray, kind: int) -> tuple[list[np.ndarray], np.ndarray | None]:
    """For the characters ``a`` (``kind`` 1, 2 or 4): ``bool`` arrays of those ≥ U+0080,
    U+0800, U+10000 (as many as the kind can hold: each adds one UTF-8 byte), and of the
    surrogates (None for kind 1, or when the largest character is below U+D800 or none is
    one)."""
    flags = [a >= 0x80] + ([a >= 0x800] if kind > 1 else []) + ([a >= 0x10000] if kind == 4
                                                                 else [])
    if kind == 1 or not len(a) or a.max() < 0xD800:
        return flags, None
    sur = (a & _SURROGATE_MASK[kind]) == 0xD800
    return flags, (sur if sur.any() else None)


def _measure(addr: list[int], nchars: list[int], kinds: list[int], lo: int, hi: int
             ) -> list[int]:
    """The UTF-8 size of documents ``lo..hi-1`` (``nchars`` characters of ``kinds`` at
    ``addr``) counted from their characters (each is 1 byte + 1 per threshold U+0080, U+0800,
    U+10000 it reaches: :func:`_flags`), -1 where one is a surrogate (iconv refuses them;
    reference.to_bytes makes them U+FFFD). Short kind-1/2 documents are gathered (memmove)
    into this thread's staging buffers and counted together; the GIL is released in memmove
    and numpy's passes."""
    d = _descriptors()
    chunk = min(WIDEN_CHUNK, len(d.wide))
    sizes = [-1] * (hi - lo)
    groups = {1: [], 2: []}   # kind → [(document, offset in the staging buffer)]
    fill = {1: 0, 2: 0}
    stage_at = {k: v.ctypes.data for k, v in d.stage.items()}
    move = ctypes.memmove

    def flush(kind: int) -> None:
        m, group = fill[kind], groups[kind]
        flags, sur = _flags(d.stage[kind][:m], kind)
        count = np.count_nonzero   # (per document: a reduceat to int64 is ~4x slower)
        for j, off in group:
            end = off + nchars[j]
            if sur is None or not count(sur[off:end]):
                sizes[j - lo] = nchars[j] + int(sum(count(f[off:end]) for f in flags))
        group.clear()
        fill[kind] = 0

    for j in range(lo, hi):
        n, kind = nchars[j], kinds[j]
        if kind < 4 and n <= chunk:   # gathered with others of its kind
            if fill[kind] + n > chunk:
                flush(kind)
            move(stage_at[kind] + kind * fill[kind], addr[j], kind * n)
            groups[kind].append((j, fill[kind]))
            fill[kind] += n
            continue
        src = np.frombuffer(_memory(addr[j], n * kind, 0x100),   # (read in place, by chunks)
                            _NARROW.get(kind, np.uint32))
        size = n
        for c in range(0, n, chunk):
            flags, sur = _flags(src[c:c + chunk], kind)
            if sur is not None:
                break
            size += int(sum(np.count_nonzero(f) for f in flags))
        else:
            sizes[j - lo] = size
    for kind in groups:
        if groups[kind]:
            flush(kind)
    return sizes


def _write(items: list[tuple[int, Deferred]]) -> None:
    """Transcode each :class:`Deferred` part of ``items`` (destination address, part) to its
    destination: kind-1/2 characters widened to UCS-4 (short documents gathered with others of
    their kind and widened together, long ones a chunk at a time), kind 4 read in place (a
    chunk at a time), each piece converted by iconv into this thread's 1 MiB bounce buffer
    (cache-resident) and copied from there by memmove (wide stores: the mapped upload buffer
    may be write-combined memory, where iconv's byte stores would be slow), with no more room
    than the document's counted ``size`` left.

    Raises:
        RuntimeError: iconv's output is not exactly the counted size (a bug, not bad input);
            nothing is written past the part's ``size`` bytes.
    """
    d = _descriptors()
    iconv, cd, cells, (p_in, p_inl, p_out, p_outl) = _state["iconv"], d.cd, d.cells, d.args
    chunk = min(WIDEN_CHUNK, len(d.wide))
    wide = d.wide[:chunk]
    wide_at, bounce_at = wide.ctypes.data, d.bounce.ctypes.data
    stage_at = {k: v.ctypes.data for k, v in d.stage.items()}
    move = ctypes.memmove
    groups = {1: [], 2: []}   # kind → [(destination, part, offset in the staging buffer)]
    fill = {1: 0, 2: 0}

    def refuse(p: Deferred) -> None:
        iconv(cd, None, None, None, None)   # (back to the initial state)
        raise RuntimeError(f"torch_gpubpe: iconv's UTF-8 of a str is not the {p.size} bytes "
                           f"counted for its {p.nchars} characters: a bug in _cpython_str")

    def put(p: Deferred, dst: int, left: int, at: int, nbytes: int) -> int:
        """Convert ``nbytes`` of UCS-4 at ``at`` to ``dst`` (at most ``left`` bytes); the bytes
        written."""
        room = min(left, nbytes)   # (a character's UTF-8 is at most its 4 bytes of UCS-4)
        cells[0], cells[1], cells[2], cells[3] = at, nbytes, bounce_at, room
        if iconv(cd, p_in, p_inl, p_out, p_outl) == _ERR or cells[1]:
            refuse(p)
        k = room - cells[3]
        move(dst, bounce_at, k)
        return k

    def flush(kind: int) -> None:
        m, group = fill[kind], groups[kind]
        np.copyto(wide[:m], d.stage[kind][:m])
        for dst, p, off in group:
            if put(p, dst, p.size, wide_at + 4 * off, 4 * p.nchars) != p.size:
                refuse(p)
        group.clear()
        fill[kind] = 0

    for dst, p in items:
        n, kind = p.nchars, p.kind
        if kind < 4 and n <= chunk:   # gathered with others of its kind
            if fill[kind] + n > chunk:
                flush(kind)
            move(stage_at[kind] + kind * fill[kind], p.address, kind * n)
            groups[kind].append((dst, p, fill[kind]))
            fill[kind] += n
            continue
        src = None if kind == 4 else np.frombuffer(_memory(p.address, n * kind, 0x100),
                                                   _NARROW[kind])
        left = p.size
        for c in range(0, n, chunk):   # (kind 4 read in place, else widened, a chunk at a time)
            m = min(chunk, n - c)
            if src is None:
                k = put(p, dst, left, p.address + 4 * c, 4 * m)
            else:
                np.copyto(wide[:m], src[c:c + m])
                k = put(p, dst, left, wide_at, 4 * m)
            dst += k
            left -= k
        if left:
            refuse(p)
    for kind in groups:
        if groups[kind]:
            flush(kind)


def utf8_parts(docs: Sequence, first: int = 0, *, threads: int | None = None,
               defer: bool = False) -> list[str | bytes | Span | Deferred]:
    """The UTF-8 of each document, without joining: an ASCII ``str`` itself (its characters
    are its UTF-8), a ``bytes`` item itself, a :class:`Span` for a non-ASCII ``str`` of at
    least ``SMALL`` characters (transcoded by up to ``threads`` threads, default 8 and at most
    the CPU count, each taking a contiguous range of documents of at least ``PARALLEL_MIN``
    characters), else the ``bytes`` of ``str.encode`` or, failing that,
    :func:`torch_gpubpe.core.reference.to_bytes`. Same bytes as ``to_bytes`` for every item.

    With ``defer``, those ``str`` are not transcoded here but only measured (their UTF-8 size
    counted from their characters by the threads, :func:`_measure`): each becomes a
    :class:`Deferred` part, transcoded by :func:`copy_parts` straight into the destination
    (one pass over their UTF-8 instead of two: scratch, then the destination); one with a
    surrogate is packed by ``to_bytes`` here.

    Args:
        docs: a sequence of ``str`` or bytes-like documents.
        first: index of ``docs[0]`` in the caller's corpus (for error messages).
        defer: return :class:`Deferred` parts (only :func:`copy_parts` and
            :func:`join_parts` read them; the ``str`` must stay alive until then).
    Raises:
        InputError: an item is neither ``str`` nor bytes-like (names its index ``first + k``).
    """
    if not available():
        return [d if type(d) is bytes or (type(d) is str and d.isascii())
                else _document(d, first + k) for k, d in enumerate(docs)]
    _, data_off, len_off, utf8_off = _state["layout"]
    parts: list = []
    todo, addr, nchars, kinds = [], [], [], []
    u32, vp, ssz = ctypes.c_uint32.from_address, ctypes.c_void_p.from_address, \
        ctypes.c_ssize_t.from_address
    for k, d in enumerate(docs):
        t = type(d)
        if t is str:
            if d.isascii():
                parts.append(d)
                continue
            n = len(d)
            if n < SMALL:
                try:
                    parts.append(d.encode())
                except UnicodeEncodeError:   # lone surrogates: U+FFFD (to_bytes)
                    parts.append(_document(d, first + k))
                continue
            a = id(d)
            st = u32(a + _STATE).value
            if st & 32:   # compact
                u = vp(a + utf8_off).value
                if u is not None:
                    parts.append(Span(u, ssz(a + len_off).value, d))
                    continue
                todo.append(len(parts))
                addr.append(a + data_off)
                nchars.append(n)
                kinds.append((st >> 2) & 7)
                parts.append(d)
                continue
        elif t is bytes:
            parts.append(d)
            continue
        parts.append(_document(d, first + k))
    if not todo:
        return parts
    total = sum(nchars)   # (the time goes per character)
    n = min(THREADS if threads is None else threads, os.cpu_count() or 1,
            -(-total // PARALLEL_MIN))
    if threading.current_thread().name.startswith(_POOL_PREFIX):
        n = 1   # (called from a pool task: do not wait on the pool from inside it)
    if n < 2:
        chunks = [(0, len(todo))]
    else:
        ends = np.cumsum(nchars)
        cuts = [0, *np.searchsorted(ends, [total * j // n for j in range(1, n)]).tolist(),
                len(todo)]
        chunks = [(cuts[j], cuts[j + 1]) for j in range(n) if cuts[j] < cuts[j + 1]]
    work = _measure if defer else _transcode
    futures = [copy_pool().submit(work, addr, nchars, kinds, lo, hi) for lo, hi in chunks[1:]]
    results = [work(addr, nchars, kinds, *chunks[0]), *(f.result() for f in futures)]
    if defer:
        for (lo, _hi), sizes in zip(chunks, results):
            for j, size in zip(range(lo, _hi), sizes):
                i = todo[j]
                parts[i] = (_document(parts[i], first + i) if size < 0 else   # (surrogates)
                            Deferred(addr[j], nchars[j], kinds[j], size, parts[i]))
        return parts
    for (lo, _hi), (out, starts, sizes) in zip(chunks, results):
        base = out.ctypes.data
        for j, start, size in zip(range(lo, _hi), starts, sizes):
            i = todo[j]
            if size < 0:   # lone surrogates: U+FFFD, as reference.to_bytes makes them
                parts[i] = _document(parts[i], first + i)
                continue
            parts[i] = Span(base + start, size, out)
    return parts


# -- copies ----------------------------------------------------------------------------------------
_POOL = None
_pool_lock = threading.Lock()
_POOL_PREFIX = "torch_gpubpe copy"
_COPY_PIECE = 1 << 20  # bytes: parts above this are copied in pieces (by several threads)
PARALLEL_COPY_MIN = 1 << 20  # bytes: below this one memcpy is faster than handing out parts
_TRANSCODE_COST = 8    # memcpy bytes as long as transcoding one character (widen + iconv)


def copy_pool():
    """The process's pool of 8 threads for host copies and transcoding (made again after a
    fork: threads do not survive one)."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        with _pool_lock:   # (not _lock: available() holds that while its self-test packs)
            if _POOL is None or _POOL[0] != os.getpid():
                from concurrent.futures import ThreadPoolExecutor

                _POOL = (os.getpid(), ThreadPoolExecutor(THREADS, thread_name_prefix=_POOL_PREFIX))
    return _POOL[1]


def copy_parts(dst: np.ndarray, parts: list[str | bytes | Span | Deferred]) -> None:
    """Copy ``parts`` (``bytes``, ASCII ``str``: their characters are their UTF-8,
    :class:`Span`, or :class:`Deferred`: transcoded here) back to back into the 1-D ``uint8``
    array ``dst`` (of exactly their total size), by up to 8 threads.

    The bytes are read in place: an ASCII ``str``'s characters (``PyUnicode_AsUTF8AndSize``
    returns them without a copy or a cache for compact ASCII strings), a ``bytes`` object's
    buffer, a span's address, and copied by ``ctypes.memmove``, which releases the GIL, in
    pieces of at most 1 MiB; a deferred ``str`` is transcoded by iconv straight to its place
    (:func:`_write`). Each thread takes a contiguous share of the pieces and one of the
    deferred parts (by bytes, and by characters). ``parts`` must stay alive (the caller holds
    it).

    Raises:
        ValueError: the parts do not add up to ``len(dst)``.
    """
    base = dst.ctypes.data
    pieces, o = [], 0  # (destination address, source address, bytes)
    deferred, chars = [], 0   # (destination address, part)
    planned = []              # (destination address, str_pack.Packed)
    for p in parts:
        n = len(p)
        if not n:
            continue
        t = type(p)
        if t is Deferred:
            deferred.append((base + o, p))
            chars += p.nchars
            o += n
            continue
        if t.__name__ == "Packed":   # (str_pack.Packed: its own threads, straight into dst)
            planned.append((base + o, p))
            o += n
            continue
        src = str_address(p) if t is str else p.address if t is Span else bytes_address(p)
        for a in range(0, n, _COPY_PIECE):
            k = min(_COPY_PIECE, n - a)
            pieces.append((base + o + a, src + a, k))
        o += n
    if o != len(dst):
        raise ValueError(f"copy_parts: {o} bytes of parts for {len(dst)} bytes of room")
    for d, p in planned:
        p.copy_into(d, len(p))
    move = ctypes.memmove
    work = o + _TRANSCODE_COST * chars   # (memcpy-byte equivalents)
    nthreads = min(THREADS, os.cpu_count() or 1, -(-work // PARALLEL_COPY_MIN))
    if nthreads < 2 or threading.current_thread().name.startswith(_POOL_PREFIX):
        for d, s, k in pieces:
            move(d, s, k)
        if deferred:
            _write(deferred)
        return

    def shares(sizes: list[int], total: int) -> list[int]:
        ends = np.cumsum(sizes)
        return [0, *np.searchsorted(ends, [total * j // nthreads
                                           for j in range(1, nthreads)]).tolist(), len(sizes)]

    cuts = shares([k for _, _, k in pieces], o - sum(p.size for _, p in deferred))
    dcuts = shares([p.nchars for _, p in deferred], chars) if deferred else [0] * (nthreads + 1)

    def run(j: int) -> None:
        for d, s, k in pieces[cuts[j]:cuts[j + 1]]:
            move(d, s, k)
        if dcuts[j] < dcuts[j + 1]:
            _write(deferred[dcuts[j]:dcuts[j + 1]])

    pool = copy_pool()
    for f in [pool.submit(run, j) for j in range(nthreads)
              if cuts[j] < cuts[j + 1] or dcuts[j] < dcuts[j + 1]]:
        f.result()


def join_parts(parts: list[str | bytes | Span | Deferred]) -> np.ndarray:
    """The ``uint8`` array of ``parts`` (see :func:`copy_parts`) back to back."""
    out = np.empty(sum(map(len, parts)), np.uint8)
    if str_address is None:   # (not CPython: no addresses of str and bytes)
        out[:] = np.frombuffer(b"".join(p if type(p) is bytes else p.encode() for p in parts),
                               np.uint8)
        return out
    copy_parts(out, parts)
    return out
