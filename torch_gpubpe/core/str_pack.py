"""``str`` documents → one UTF-8 buffer on many threads: each thread takes one contiguous range
of the documents and transcodes it in a single compiled call without the GIL
(:mod:`torch_gpubpe.core.utf8_native`, ``_utf8pack.c``), reading each ``str``'s characters in
place (the PEP 393 layout checked by :mod:`torch_gpubpe.core.cpython_layout`) and writing
straight into the destination.

Why: ``str.encode`` holds the GIL, so documents encoded by it are packed by one thread however
many cores there are; threads help only where the work per document runs without the GIL, so
here the Python work per document is one ``id()``. Per call the documents' objects are read by
``gpubpe_scan`` (kind, length, where the characters are; ASCII ``str``, ``bytes`` and cached
UTF-8 are plain copies), sized by ``gpubpe_measure`` where the destination must be exact, and
transcoded by ``gpubpe_encode`` (16 ASCII characters at a time with SSE2, the rest one by one).
The bytes equal :func:`torch_gpubpe.core.reference.to_bytes` of each document (lone surrogates
→ U+FFFD, a surrogate pair → its character); an item that is not an exact ``str``/``bytes`` (or
a non-compact ``str``) is packed by ``to_bytes`` on the calling thread, a bad one raises
``InputError`` naming its index.

Three shapes use it:

* :func:`pack` — one array (``core.packing.pack_documents``, ``encoding.batch_pack``);
* :class:`Packed` — measured now, transcoded later by
  :func:`torch_gpubpe.core.copy_pool.copy_parts` straight into the encoder's mapped upload
  buffer (written in order, through a 64 KiB per-thread bounce buffer: it may be
  write-combined);
* :func:`pack_batches` — the trainer's stream of ~``batch_bytes`` batches (one pool task per
  batch, several in flight, buffers recycled once the consumer drops them).

Threads: :data:`THREADS` (the CPU count, at most 16; :data:`BATCH_THREADS` for the trainer's
batches, at most 8) or the ``threads`` argument. Where the compiled part or the layout is not
available (no C compiler, another interpreter), :func:`available` is False,
``fallbacks()["str_native"]`` says why (copied by ``train()`` into ``stats["str_fallbacks"]``),
one ``GPUBPEWarning`` says so, and the callers encode each document by ``to_bytes`` on their
own thread (:func:`encode_each`): the same bytes, slower.

Example::

    >>> from torch_gpubpe.core.str_pack import pack
    >>> data, offsets = pack(["abc", "çok", "中 😀", b"\\xff", "a\\ud800"])
    >>> data.tobytes(), offsets.tolist()
    (b'abc\\xc3\\xa7ok\\xe4\\xb8\\xad \\xf0\\x9f\\x98\\x80\\xffa\\xef\\xbf\\xbd', [0, 3, 7, 15, 16, 20])
"""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from torch_gpubpe import notices
from torch_gpubpe.core import cpython_layout, utf8_native
from torch_gpubpe.core.copy_pool import POOL_PREFIX, in_pool_thread
from torch_gpubpe.core.reference import to_bytes
from torch_gpubpe.errors import InputError

THREADS = max(1, min(16, os.cpu_count() or 1))
"""Threads of :func:`pack` and :class:`Packed` (the ``threads`` argument overrides it)."""
BATCH_THREADS = max(1, min(8, os.cpu_count() or 1))
"""Threads (and batches in flight) of :func:`pack_batches`: fewer than :data:`THREADS` (8
already outrun the GPU's counting; each batch in flight holds its buffer)."""
MIN_WORK = 1 << 20      # work units (≈ bytes) per thread at least: below, fewer threads
BOUNCE = 1 << 16        # bytes of a thread's bounce buffer (cache-resident)
_COST = np.array([1, 4, 4, 0, 4, 0], np.int64)   # work per unit by kind (0: memcpy; -1: last)
_BOUNDS = np.array([1, 2, 3, 0, 4, 0], np.int64)  # UTF-8 bytes per unit at most, by kind

_lock = threading.Lock()
_state: dict = {}
_fallbacks: dict[str, str] = {}
_local = threading.local()
_OFF = "the compiled str packer is off"   # (the key of its one warning: notices.warn_once)


# -- availability ----------------------------------------------------------------------------------
def _self_test(lib) -> str | None:
    """None when the compiled packer gives ``to_bytes``'s bytes on strings of every kind and
    lone surrogates, through each path (straight, bounced, exact room), else what differed."""
    docs = [s * k for s in ("plain ascii ", *cpython_layout.SAMPLES, "a\ud800b\udfff",
                            "\ud83d\ude00x", "\U0001f600\udc00") for k in (1, 37)]
    docs += [b"\xff\x00 bytes", "".join(cpython_layout.SAMPLES) * 500]
    want = b"".join(map(to_bytes, docs))
    for mode in (0, 1):
        data, _ = _pack_arrays(lib, docs, 0, 1, mode)
        if data.tobytes() != want:
            return f"its UTF-8 differs from to_bytes (mode {mode})"
    return None


def library():
    """The compiled packer (ctypes), or None: not available here (recorded, warned once)."""
    lib = _state.get("lib", False)
    if lib is not False:
        return lib
    with _lock:
        if "lib" not in _state:
            why = cpython_layout.check()
            if why is not None:
                why = f"the CPython str layout is not usable here: {why}"
            lib = None
            if why is None:
                lib = utf8_native.library()
                why = utf8_native.why_not()
            if why is None:
                _state["lib"] = lib   # (tentatively, for the self-test)
                try:
                    why = _self_test(lib)
                except Exception as e:  # noqa: BLE001 (any failure of the test means: not here)
                    why = f"the self-test raised {type(e).__name__}: {e}"
            _state["lib"] = None if why else lib
            if why:
                _fallbacks["str_native"] = why
                notices.warn_once(_OFF, f"torch_gpubpe: the compiled str → UTF-8 packer is off "
                                  f"({why}); documents are encoded by str.encode one at a time "
                                  "(slower; recorded in stats['str_fallbacks'])", stacklevel=3)
    return _state["lib"]


def available() -> bool:
    """Whether the compiled packer is used (checked, and on failure recorded and warned about,
    at the first call)."""
    return library() is not None


def fallbacks() -> dict[str, str]:
    """What this process packs without (``"str_native"``: why the compiled packer is not used);
    empty where it is. ``train()`` copies it into ``stats["str_fallbacks"]``."""
    with _lock:
        return dict(_fallbacks)


def reset() -> None:
    """Forget the checks, the recorded fallback and its warning (tests)."""
    with _lock:
        _state.clear()
        _fallbacks.clear()
    notices.said.discard(_OFF)
    cpython_layout.reset()


# -- without the compiled packer -------------------------------------------------------------------
def document_bytes(doc, k: int) -> bytes:
    """``reference.to_bytes(doc)``, an error naming index ``k``.

    Raises:
        InputError: ``doc`` is neither ``str`` nor bytes-like (or unreadable)."""
    try:
        return to_bytes(doc)
    except TypeError as e:
        raise InputError(f"document {k}: {e}") from e


def encode_each(docs: Sequence, first: int = 0) -> tuple[list[bytes | str], np.ndarray]:
    """The packers' path where the compiled one is not available: each document's UTF-8 made on
    this thread (:func:`document_bytes`), an ASCII ``str`` and a ``bytes`` item kept as they are
    (their bytes are their UTF-8: :func:`torch_gpubpe.core.copy_pool.copy_parts` reads them in
    place). Returns the parts and their int64 offsets (``len(docs) + 1``).

    Raises:
        InputError: a bad item, naming its index ``first + k``.
    """
    parts = [d if type(d) is bytes or (type(d) is str and d.isascii())
             else document_bytes(d, first + k) for k, d in enumerate(docs)]
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)), out=offsets[1:])
    return parts, offsets


# -- one range of documents ------------------------------------------------------------------------
class _Docs:
    """The documents of one call read by ``gpubpe_scan``: per document ``src`` (address),
    ``len`` (units), ``kind`` (0: bytes to copy, 1/2/4: characters of that size), ``size``
    (its UTF-8 bytes, once measured), and ``keep`` (the objects, and the ``bytes`` made here
    for the items the scan left to Python), alive as long as this."""

    __slots__ = ("src", "len", "kind", "size", "keep", "total")

    def __init__(self, lib, docs: Sequence, first: int) -> None:
        keep = list(docs)   # (its own list: the caller may change theirs meanwhile)
        n = len(keep)
        obj = np.fromiter(map(id, keep), np.uint64, n)
        self.src = np.empty(n, np.uint64)
        self.len = np.empty(n, np.int64)
        self.kind = np.empty(n, np.int8)
        self.size = None
        self.total = 0
        left = lib.gpubpe_scan(n, obj.ctypes.data, id(str), id(bytes), _layout().ctypes.data,
                               self.src.ctypes.data, self.len.ctypes.data, self.kind.ctypes.data)
        if left:   # (not exact str/bytes, or a non-compact str: to_bytes here, then a copy)
            keep = list(keep)
            for k in np.flatnonzero(self.kind < 0).tolist():
                b = keep[k] = document_bytes(keep[k], first + k)   # (InputError names it)
                self.src[k], self.len[k], self.kind[k] = cpython_layout.bytes_address(b), len(b), 0
        self.keep = keep

    def measure(self, lib, lo: int, hi: int) -> int:
        """Sizes of documents ``lo..hi-1`` into ``self.size``; their total."""
        return lib.gpubpe_measure(hi - lo, self.src[lo:].ctypes.data, self.len[lo:].ctypes.data,
                                  self.kind[lo:].ctypes.data, self.size[lo:].ctypes.data)

    def encode(self, lib, lo: int, hi: int, dst: int, cap: int, mode: int) -> int:
        """UTF-8 of documents ``lo..hi-1`` to address ``dst`` (``cap`` bytes of room, ``mode``
        of ``gpubpe_encode``), sizes into ``self.size``; the bytes written."""
        b = _bounce()
        got = lib.gpubpe_encode(hi - lo, self.src[lo:].ctypes.data, self.len[lo:].ctypes.data,
                                self.kind[lo:].ctypes.data, dst, cap, self.size[lo:].ctypes.data,
                                b.ctypes.data, len(b), mode)
        if got < 0:
            raise RuntimeError(f"torch_gpubpe: document {lo - 1 - got} did not fit the room "
                               "counted for it: a bug in str_pack")
        return got

    def work(self) -> np.ndarray:
        """Cumulative work (≈ memcpy bytes) per document."""
        return np.cumsum(self.len * _COST[self.kind], dtype=np.int64)

    def bound(self) -> int:
        return int(np.dot(self.len, _BOUNDS[self.kind]))


def _layout() -> np.ndarray:
    lay = _state.get("layout")
    if lay is None:
        lay = _state["layout"] = np.array([*cpython_layout.layout(), cpython_layout.BYTES_DATA],
                                          np.int64)
    return lay


def _bounce() -> np.ndarray:
    b = getattr(_local, "bounce", None)
    if b is None:
        b = _local.bounce = np.empty(BOUNCE, np.uint8)
    return b


def _ranges(work: np.ndarray, threads: int) -> list[tuple[int, int]]:
    """Contiguous ranges of about equal work, at most ``threads``, each ≥ MIN_WORK."""
    n, total = len(work), int(work[-1]) if len(work) else 0
    t = max(1, min(threads, total // MIN_WORK, n))
    if t == 1:
        return [(0, n)]
    cuts = [0, *np.searchsorted(work, [total * j // t for j in range(1, t)], side="right").tolist(), n]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if a < b]


def _run(fn, ranges: list[tuple[int, int]]) -> list:
    """``fn(lo, hi)`` of each range, the first on this thread, the others on the pool (all
    here when this is a pool thread: a task never waits on the pool)."""
    if len(ranges) == 1 or in_pool_thread():
        return [fn(lo, hi) for lo, hi in ranges]
    pool = pool_for(len(ranges))
    futures = [pool.submit(fn, lo, hi) for lo, hi in ranges[1:]]
    return [fn(*ranges[0]), *(f.result() for f in futures)]


_POOL: tuple | None = None
_pool_lock = threading.Lock()


def pool_for(threads: int):
    """The process's pool of packing threads (named as the copy pool's,
    :func:`torch_gpubpe.core.copy_pool.in_pool_thread`, so that a task never waits on it), with
    at least ``threads - 1`` workers."""
    global _POOL
    need = max(1, threads - 1)
    p = _POOL
    if p is None or p[0] != os.getpid() or p[1] < need:
        with _pool_lock:
            p = _POOL
            if p is None or p[0] != os.getpid() or p[1] < need:
                from concurrent.futures import ThreadPoolExecutor

                size = max(need, THREADS - 1)
                if p is not None and p[0] == os.getpid():
                    p[2].shutdown(wait=False)   # (its tasks finish; a larger pool replaces it)
                _POOL = p = (os.getpid(), size,
                             ThreadPoolExecutor(size, thread_name_prefix=POOL_PREFIX + " (pack)"))
    return p[2]


# -- SentencePiece's Metaspace ------------------------------------------------------------------
def metaspace(data: np.ndarray, offsets: np.ndarray, prepend: bool, *,
              threads: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """The packed batch ``data`` / ``offsets`` (int64) with every space as ``▁`` (U+2581) and,
    with ``prepend``, one ``▁`` before each non-empty document, on the packing threads; None
    where the compiled packer is off (recorded and warned by :func:`library`)."""
    lib = library()
    if lib is None:
        return None
    data = np.ascontiguousarray(data, np.uint8)
    offsets = np.ascontiguousarray(offsets, np.int64)
    ranges = _ranges(offsets[1:], THREADS if threads is None else threads)
    src = data.ctypes.data

    def grow(lo: int, hi: int) -> int:
        a, b = int(offsets[lo]), int(offsets[hi])
        extra = 2 * lib.gpubpe_count_spaces(src + a, b - a)
        return extra + (3 * int(np.count_nonzero(np.diff(offsets[lo:hi + 1]))) if prepend else 0)

    sizes = [int(offsets[hi] - offsets[lo]) + g for (lo, hi), g in zip(ranges, _run(grow, ranges))]
    return _write_by_ranges(ranges, sizes, np.uint8, lambda lo, hi, dst, dst_off: (
        lib.gpubpe_metaspace(src, offsets.ctypes.data + 8 * lo, hi - lo, int(prepend), dst,
                             dst_off)))


def _write_by_ranges(ranges: list[tuple[int, int]], sizes: list[int], dtype, write
                     ) -> tuple[np.ndarray, np.ndarray]:
    """One output of ``sum(sizes)`` items and its document offsets (``ranges`` of documents,
    ``sizes[j]`` items from range ``j``): ``write(lo, hi, dst, dst_off)`` writes range ``j``'s
    items at address ``dst`` and its documents' offsets, from 0, at ``dst_off``, on the
    packing threads; each range's offsets are then moved to where its items begin."""
    starts = np.cumsum([0, *sizes])
    out = np.empty(int(starts[-1]), dtype)
    new_off = np.empty(ranges[-1][1] + 1, np.int64)
    new_off[-1] = len(out)

    def one(j: int, _=None) -> None:
        lo, hi = ranges[j]
        write(lo, hi, out.ctypes.data + out.itemsize * int(starts[j]), new_off.ctypes.data + 8 * lo)
        new_off[lo:hi] += starts[j]

    _run(one, [(j, j + 1) for j in range(len(ranges))])
    return out, new_off


def find_bytes(data: np.ndarray, table: np.ndarray, *, threads: int | None = None) -> int:
    """The first index of ``data`` (uint8) whose byte value ``table`` (256 bools) marks, or -1;
    on the packing threads where the compiled packer is available, else in numpy."""
    data = np.ascontiguousarray(data, np.uint8)
    lib = library()
    if lib is None:
        hit = table[data]
        return int(np.argmax(hit)) if hit.any() else -1
    t = np.ascontiguousarray(table, np.uint8)
    high = int(not t[:0x80].any())
    n = len(data)
    parts = max(1, min(THREADS if threads is None else threads, n // MIN_WORK))
    cuts = [n * j // parts for j in range(parts + 1)]

    def find(lo: int, hi: int) -> int:
        a, b = cuts[lo], cuts[hi]
        k = lib.gpubpe_find_bytes(data.ctypes.data + a, b - a, t.ctypes.data, high)
        return -1 if k < 0 else a + k

    found = [k for k in _run(find, [(j, j + 1) for j in range(parts)]) if k >= 0]
    return min(found) if found else -1


def expand_ids(ids: np.ndarray, offsets: np.ndarray, first: int, table: np.ndarray,
               lens: np.ndarray, *, threads: int | None = None
               ) -> tuple[np.ndarray, np.ndarray] | None:
    """SentencePiece's byte fallback on the packing threads: every id ``t >= first`` of the
    flat ``ids`` (uint16/uint32; document bounds ``offsets``, int64) replaced by its
    ``lens[t - first]`` byte tokens ``table[t - first, :lens[t - first]]`` (uint32 rows).
    Returns ``(ids, offsets)`` (the same objects when no id is expanded), or None where the
    compiled packer is off (recorded and warned by :func:`library`)."""
    lib = library()
    if lib is None:
        return None
    ids = np.ascontiguousarray(ids)
    offsets = np.ascontiguousarray(offsets, np.int64)
    table = np.ascontiguousarray(table, np.uint32)
    lens = np.ascontiguousarray(lens, np.uint8)
    el = ids.itemsize
    # (ids count double as work: expanding one costs about what packing two bytes does)
    ranges = _ranges(offsets[1:] * 2, THREADS if threads is None else threads)
    src = ids.ctypes.data

    def count(lo: int, hi: int) -> int:
        a, b = int(offsets[lo]), int(offsets[hi])
        return b - a + lib.gpubpe_expand_count(src + el * a, b - a, el, first, lens.ctypes.data)

    sizes = _run(count, ranges)
    if sum(sizes) == len(ids):
        return ids, offsets
    return _write_by_ranges(ranges, sizes, ids.dtype, lambda lo, hi, dst, dst_off: (
        lib.gpubpe_expand(src, el, first, table.ctypes.data, table.shape[1], lens.ctypes.data,
                          offsets.ctypes.data + 8 * lo, hi - lo, dst, dst_off)))


# -- one array -------------------------------------------------------------------------------------
def _pack_arrays(lib, docs: Sequence, first: int, threads: int, mode: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    d = _Docs(lib, docs, first)
    d.size = np.empty(len(d.len), np.int64)
    ranges = _ranges(d.work(), threads)
    totals = _run(lambda lo, hi: d.measure(lib, lo, hi), ranges)
    out = np.empty(sum(totals), np.uint8)
    starts = np.cumsum([0, *totals[:-1]]).tolist()
    base = out.ctypes.data

    def write(j: int) -> int:
        (lo, hi), at = ranges[j], starts[j]
        return d.encode(lib, lo, hi, base + at, totals[j], mode)

    _run(lambda j, _: write(j), [(j, j + 1) for j in range(len(ranges))])
    offsets = np.zeros(len(d.size) + 1, np.int64)
    np.cumsum(d.size, out=offsets[1:])
    return out, offsets


def pack(docs: Sequence, first: int = 0, *, threads: int | None = None
         ) -> tuple[np.ndarray, np.ndarray] | None:
    """The UTF-8 of ``docs`` back to back and its offsets, or None where the compiled packer
    is not available (then :func:`encode_each`).

    Args:
        docs: ``str`` or bytes-like documents.
        first: index of ``docs[0]`` in the caller's corpus (for error messages).
        threads: at most this many threads (default :data:`THREADS`).
    Returns:
        ``(data, offsets)``: uint8 shape ``(total bytes,)``, int64 shape ``(len(docs) + 1,)``.
    Raises:
        InputError: an item is neither ``str`` nor bytes-like (names its index).
    """
    lib = library()
    if lib is None:
        return None
    return _pack_arrays(lib, docs, first, THREADS if threads is None else threads, 0)


# -- measured now, written later (the encoder's upload buffer) -----------------------------------
class Packed:
    """The documents of a batch, measured (``offsets``), their UTF-8 not made yet:
    :meth:`copy_into` writes it (``len(packed)`` bytes) straight into a destination. A part
    for :func:`torch_gpubpe.core.copy_pool.copy_parts` and ``join_parts``; the documents are
    kept alive by it."""

    __slots__ = ("_d", "_ranges", "_totals", "offsets", "threads")

    def __init__(self, docs: Sequence, first: int = 0, *, threads: int | None = None) -> None:
        lib = library()
        if lib is None:
            raise RuntimeError("str_pack.Packed needs the compiled packer (str_pack.available())")
        self.threads = THREADS if threads is None else threads
        d = self._d = _Docs(lib, docs, first)
        d.size = np.empty(len(d.len), np.int64)
        self._ranges = _ranges(d.work(), self.threads)
        self._totals = _run(lambda lo, hi: d.measure(lib, lo, hi), self._ranges)
        self.offsets = np.zeros(len(d.size) + 1, np.int64)
        np.cumsum(d.size, out=self.offsets[1:])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def documents(self) -> list:
        """The documents (``str`` and ``bytes``-like), for checks of their contents."""
        return list(self._d.keep)

    def copy_into(self, dst: int, nbytes: int) -> None:
        """Write the UTF-8 to address ``dst`` (``nbytes`` == ``len(self)``), each thread its
        range in order, through its bounce buffer (the destination may be write-combined)."""
        if nbytes != len(self):
            raise ValueError(f"Packed.copy_into: {len(self)} bytes for {nbytes} bytes of room")
        lib, d = library(), self._d
        starts = np.cumsum([0, *self._totals[:-1]]).tolist()

        def write(j: int, _=None) -> int:
            lo, hi = self._ranges[j]
            return d.encode(lib, lo, hi, dst + starts[j], self._totals[j], 1)

        _run(write, [(j, j + 1) for j in range(len(self._ranges))])

    def tobytes(self) -> bytes:
        out = np.empty(len(self), np.uint8)
        self.copy_into(out.ctypes.data, len(out))
        return out.tobytes()


# -- the trainer's batches -------------------------------------------------------------------------
class _Buffers:
    """Output buffers (each at least ``min_size`` bytes) handed out again once nothing but
    this pool refers to them: the consumer dropped every view of it (CPython's reference
    count says so: the pool's list and ``getrefcount``'s argument)."""

    def __init__(self, keep: int, min_size: int) -> None:
        self.keep, self.min_size, self.bufs, self.lock = keep, min_size, [], threading.Lock()

    def _free(self, k: int) -> bool:
        return sys.getrefcount(self.bufs[k]) <= 2

    def get(self, nbytes: int) -> np.ndarray:
        with self.lock:
            for k in range(len(self.bufs)):
                if len(self.bufs[k]) >= nbytes and self._free(k):
                    return self.bufs[k]
            b = np.empty(max(nbytes, self.min_size), np.uint8)
            if len(self.bufs) < self.keep:
                self.bufs.append(b)
            else:   # (in place of the smallest free one, if any)
                free = [k for k in range(len(self.bufs)) if self._free(k)]
                if free:
                    self.bufs[min(free, key=lambda k: len(self.bufs[k]))] = b
            return b


def _batch_task(lib, docs: list, first: int, batch_bytes: int, buffers: _Buffers
                ) -> list[tuple[np.ndarray, np.ndarray]]:
    """One task of :func:`pack_batches`: the documents straight into a recycled buffer (room
    for their bound), split into batches ending at the first document that brings a batch
    to ``batch_bytes``."""
    d = _Docs(lib, docs, first)
    d.size = np.empty(len(d.len), np.int64)
    buf = buffers.get(d.bound() + 64)
    d.encode(lib, 0, len(docs), buf.ctypes.data, len(buf), 0)
    ends = np.cumsum(d.size)
    out, a, base = [], 0, 0
    while a < len(ends):
        b = a + 1 + int(np.searchsorted(ends[a:], base + batch_bytes))
        b = min(b, len(ends))
        offsets = np.zeros(b - a + 1, np.int64)
        offsets[1:] = ends[a:b] - base
        out.append((buf[base : int(ends[b - 1])], offsets))
        base, a = int(ends[b - 1]), b
    return out


def pack_batches(documents: Iterable, batch_bytes: int, info: dict, *,
                 threads: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The documents as batches ``(data, offsets)`` of about ``batch_bytes`` UTF-8 bytes each
    (a batch ends at the first document that brings it to ``batch_bytes``, or at the end of a
    task's ``batch_bytes`` characters), in order: each task (documents of ``batch_bytes``
    characters) packed by one pool thread in one compiled call, ``threads`` tasks in flight.
    ``data`` is a view of a buffer reused once every view of it is dropped. Counts
    ``num_documents`` and ``corpus_bytes`` into ``info`` as batches are yielded.

    Raises:
        InputError: a bad document (when its batch comes up), naming its index.
    """
    lib = library()
    if lib is None:
        raise RuntimeError("str_pack.pack_batches needs the compiled packer (str_pack.available())")
    inflight = max(1, BATCH_THREADS if threads is None else threads)
    pool = pool_for(inflight + 1)
    buffers = _Buffers(inflight + 8, 3 * batch_bytes + 64)   # (more alive: not kept after)
    it = iter(documents)
    pending: deque = deque()
    done = 0   # documents handed to tasks

    def submit() -> bool:
        nonlocal done
        group, size = [], 0
        for doc in it:
            group.append(doc)
            try:
                size += len(doc)   # (units: ≤ its UTF-8 bytes)
            except Exception:  # noqa: BLE001 (a released memoryview, an odd __len__: the
                pass           # task packs it by to_bytes or names it)
            if size >= batch_bytes:
                break
        if not group:
            return False
        pending.append((pool.submit(_batch_task, lib, group, done, batch_bytes, buffers),
                        len(group)))
        done += len(group)
        return True

    more = True
    while more and len(pending) < inflight:
        more = submit()
    ndocs = 0
    while pending:
        fut, n = pending.popleft()
        batches = fut.result()
        if more:
            more = submit()
        for data, offsets in batches:
            ndocs += len(offsets) - 1
            info["num_documents"] = ndocs
            info["corpus_bytes"] = info.get("corpus_bytes", 0) + len(data)
            yield data, offsets
        del fut, batches, data, offsets   # (the buffer is free once the consumer drops its views)


__all__ = ["BATCH_THREADS", "THREADS", "Packed", "available", "document_bytes", "encode_each",
           "fallbacks", "library", "pack", "pack_batches", "pool_for", "reset"]
