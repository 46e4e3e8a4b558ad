"""One reader layer: documents as Arrow arrays (one data buffer + offsets), from files, Hugging
Face datasets and Python iterables (DESIGN.md §6; issue 13).

Every source gives :class:`DocBatch` objects: a ``pyarrow`` binary/string array of documents (never
one Python object per document, except for Python lists, which are packed once per batch), the
global index of each document, and where each came from (``file:line`` / ``file:row N`` /
``row N`` / ``item N``) for error messages. :func:`arrow_to_packed` turns such an array into the
``(uint8 data, int64 offsets)`` pair that the GPU encoder and word counter take, zero copy.

Sources (:func:`open_source` picks one):

=============================  =================================================================
parquet (``.parquet``/``.pq``)  ``pyarrow.parquet``; row groups read on a thread pool, in order;
                               a resumed shard skips whole row groups from the footer
Arrow IPC / feather             ``pyarrow.ipc`` file or stream format (``.arrow``, ``.feather``,
                               ``.ipc``), memory-mapped, zero copy
JSON Lines (``.jsonl``/        ``pyarrow.json`` on chunks of about ``chunk_bytes`` cut at line
``.json``/``.ndjson``)          ends, one block each, chunks parsed on a thread pool;
                               ``.gz``/``.zst``/``.bz2``/``.lz4``/``.xz`` decompressed, a thread
                               per file, several files at once (gzip by ISA-L through
                               python-isal, else zlib: ``stats["gzip_inflate"]``, warned once;
                               zstd, lz4 by pyarrow). A chunk pyarrow refuses (lone
                               surrogate escapes, a non-text value, invalid UTF-8) is parsed line
                               by line with :mod:`json` (recorded in ``stats`` and warned once),
                               so that each row gets today's treatment and errors name file:line
CSV/TSV                         ``pyarrow.csv`` (strings, streaming)
plain text (``.txt``/``.md``)   bytes as they are (byte-level: no decoding, CRLF kept), split by
                               ``sample_by``: ``"line"`` (each line with its ``\\n``: joined they
                               give the file back), ``"paragraph"`` (pieces between ``\\n\\n``,
                               empty ones dropped, as ``datasets``' text loader) or
                               ``"document"`` (one document per file). A file whose first
                               64 KiB look like binary data (NUL or control bytes:
                               :func:`looks_binary`) raises :class:`~torch_gpubpe.errors.NotTextError`
binary (``--format binary``)    the same bytes and splits as plain text, without that check
``datasets.Dataset``            its Arrow table (``with_format("arrow")``), zero copy; a shard
                               reads only its rows
``datasets.IterableDataset``    ``with_format("arrow").iter(batch_size)``
lists / iterables / callables   ``str``/``bytes`` (or row dicts) packed once per batch; a
                               sequence's shard reads only its items
=============================  =================================================================

Sharding: document ``k`` belongs to shard ``k % num_shards``; a shard's position of ``k`` is
``k // num_shards``. ``batches(shard, num_shards, start)`` yields only that shard's documents at
position ``start`` or later.

Null and non-text values stay in the batch as nulls, with :meth:`DocBatch.problem` saying what
they were (``None``, a missing JSON field, a value of another type): each consumer decides
(``TokenizedDataset`` raises or skips, the CLI skips ``None`` rows and raises on other types).

Example::

    >>> from torch_gpubpe.io.readers import open_source, arrow_to_packed
    >>> r = open_source(["one", "two", b"\\xff"])
    >>> b = next(r.batches())
    >>> data, offsets = arrow_to_packed(b.values)
    >>> bytes(data), offsets.tolist()
    (b'onetwo\\xff', [0, 3, 6, 7])
"""

from __future__ import annotations

import glob
import json
import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from torch_gpubpe import notices
from torch_gpubpe._util import is_hf as _is_hf
from torch_gpubpe._util import put_unless_stopped
from torch_gpubpe.errors import InputError
from torch_gpubpe.core.packing import pack_documents
from torch_gpubpe.core.reference import to_bytes

FORMATS = ("parquet", "arrow", "json", "csv", "text", "binary")
"""File formats the reader knows (``--format``); ``jsonl`` is accepted for ``json``.
``binary`` reads a file's bytes like ``text`` (split by ``sample_by``) without the check that
they look like text (:func:`looks_binary`)."""
TEXT_CHECK_BYTES = 1 << 16
"""How much of each plain-text file (decompressed) :func:`looks_binary` looks at."""
MAX_NUL_SHARE = 1e-3
"""Plain text holds (almost) no NUL bytes; random bytes hold 1/256, UTF-16 text about 1/2."""
MAX_CONTROL_SHARE = 1e-2
"""Share of C0 control bytes other than TAB LF VT FF CR BS ESC (and DEL) above which a file is
not text: random bytes hold 9 %, the shipped corpora at most 0.06 % in any 64 KiB."""
MIN_SUSPECT_BYTES = 8
"""Fewer NUL (or other control) bytes than this never make a file binary: a short text with a
stray NUL is still text (random bytes reach it within a few hundred bytes)."""
SAMPLE_BY = ("line", "paragraph", "document")
"""What one document of a plain-text file is (``sample_by=``, ``--sample-by``)."""
DEFAULT_SAMPLE_BY = "line"
DEFAULT_CHUNK_BYTES = 8 << 20  # JSON Lines / text: decompressed bytes parsed per task
DEFAULT_BATCH_ROWS = 1 << 16   # rows per batch from Python iterables and datasets
HF_STREAM_ROWS = 128           # rows per batch read from a datasets.IterableDataset


def _ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


DEFAULT_READ_AHEAD_BYTES = min(4 << 30, _ram_bytes() // 8)
DEFAULT_BATCH_BYTES = 16 << 20
MAX_PACKED_BYTES = 1 << 31     # packed batches stay below 2 GiB (int32-addressable on the GPU)

_COMPRESSION = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2",
                ".lz4": "lz4", ".xz": "xz"}
_EXTENSIONS = {
    ".txt": "text", ".text": "text", ".md": "text",
    ".json": "json", ".jsonl": "json", ".ndjson": "json",
    ".parquet": "parquet", ".pq": "parquet",
    ".csv": "csv", ".tsv": "csv",
    ".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow",
}
# Leading bytes of binary files that must not be read as text or JSON.
# (Text may hold any bytes: only long or checked signatures; parquet also ends with PAR1.)
_MAGICS = ((b"PAR1", "parquet"), (b"ARROW1\x00\x00", "arrow"), (b"\x1f\x8b\x08", "gzip"),
           (b"\x28\xb5\x2f\xfd", "zstd"), (b"\xfd7zXZ\x00", "xz"), (b"\x04\x22\x4d\x18", "lz4"),
           (b"PK\x03\x04", "zip"), (b"\x7fELF", "ELF executable"), (b"%PDF-", "PDF"),
           (b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"), (b"GIF8", "GIF"),
           (b"SQLite format 3\x00", "SQLite"), (b"\x93NUMPY", "numpy .npy"))

_BINARY_TYPES = (pa.binary(), pa.large_binary(), pa.string(), pa.large_string())


# ================================================================================================
# Arrow ⇄ packed numpy
# ================================================================================================
def _is_text_type(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_string_view(t)
            or pa.types.is_binary_view(t))


def arrow_to_packed(values: pa.Array | pa.ChunkedArray, *, nulls: str = "error"
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Documents of an Arrow string/binary array as ``(data, offsets)``, zero copy where it can.

    Args:
        values: ``string``, ``large_string``, ``binary``, ``large_binary`` (or their ``_view``
            kinds, cast first) array or chunked array; slices (a non-zero ``offset``) are fine.
        nulls: ``"error"`` (an :class:`InputError` naming the first null's index), ``"skip"``
            (null documents are dropped: a filtered copy) or ``"empty"`` (they become empty
            documents).
    Returns:
        ``data``: 1-D ``np.uint8`` view of the document bytes back to back (read-only when it is
        Arrow's buffer); ``offsets``: ``np.int64`` of shape ``(n + 1,)`` starting at 0, document
        ``j`` is ``data[offsets[j]:offsets[j+1]]`` (units: bytes).
    Raises:
        InputError: a null with ``nulls="error"``; ``values`` is not string/binary.
    """
    if nulls not in ("error", "skip", "empty"):
        raise ValueError(f"nulls must be 'error', 'skip' or 'empty', got {nulls!r}")
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    t = values.type
    if not _is_text_type(t):
        raise InputError(f"expected a string or binary Arrow array, got {t}")
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        values = values.cast(pa.large_binary())
    if values.null_count:
        if nulls == "error":
            j = int(np.flatnonzero(~_valid_mask(values))[0])
            raise InputError(f"document {j} is null (None), not text")
        if nulls == "skip":
            values = values.filter(values.is_valid())
        # "empty": keep the offsets (a null slot may still span bytes: zero them below)
    n = len(values)
    bufs = values.buffers()
    odt = np.int64 if (pa.types.is_large_string(values.type)
                       or pa.types.is_large_binary(values.type)) else np.int32
    if bufs[1] is None:
        offsets = np.zeros(n + 1, np.int64)
    else:
        offsets = np.frombuffer(bufs[1], odt, n + 1, values.offset * np.dtype(odt).itemsize)
        offsets = offsets.astype(np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    data = (np.frombuffer(bufs[2], np.uint8, hi - lo, lo) if bufs[2] is not None and hi > lo
            else np.zeros(0, np.uint8))
    offsets -= lo
    if values.null_count and nulls == "empty":
        lens = np.diff(offsets)
        lens[~_valid_mask(values)] = 0
        keep = np.repeat(lens > 0, np.diff(offsets)) if len(data) else np.zeros(0, bool)
        data = data[keep] if len(data) else data
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
    return data, offsets


def packed_to_arrow(data: np.ndarray, offsets: np.ndarray) -> pa.LargeBinaryArray:
    """``(uint8 data, int64 offsets from 0)`` as a ``large_binary`` array (zero copy)."""
    data = np.ascontiguousarray(data, np.uint8)
    offsets = np.ascontiguousarray(offsets, np.int64)
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(offsets) - 1,
                                            [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _arrow_indices(js: np.ndarray) -> pa.Array:
    """int64 indices as an Arrow array without a copy. Not ``pa.array(js)``: in a fresh process
    (every DataLoader worker) that imports pandas, 0.3 s, through pyarrow's pandas check."""
    a = np.ascontiguousarray(js, np.int64)
    return pa.Array.from_buffers(pa.int64(), len(a), [None, pa.py_buffer(a)])


def _valid_mask(values: pa.Array) -> np.ndarray:
    """bool array, True where ``values`` (an Arrow array) is not null. Read from the validity
    bitmap (not ``is_valid().to_numpy()``: in pyarrow 26 that imports pandas, 0.3-0.5 s in a
    fresh process such as a DataLoader worker)."""
    if values.null_count == 0:
        return np.ones(len(values), bool)
    bitmap = values.buffers()[0]
    if bitmap is None:  # null type: every value is null
        return np.zeros(len(values), bool)
    bits = np.unpackbits(np.frombuffer(bitmap, np.uint8), count=values.offset + len(values),
                         bitorder="little")
    return bits[values.offset:].astype(bool)


def _as_binary(values: pa.Array) -> pa.Array:
    """A string/binary array as is (view types cast to large_binary); chunked → one chunk."""
    if isinstance(values, pa.ChunkedArray):
        values = (values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)) \
            if values.num_chunks else pa.array([], pa.large_binary())
    if pa.types.is_string_view(values.type) or pa.types.is_binary_view(values.type):
        values = values.cast(pa.large_binary())
    return values


# ================================================================================================
# Batches
# ================================================================================================
class _Origin:
    """Where the rows of one global batch came from (for messages), resolved lazily."""

    def __init__(self, describe: Callable[[int], str], bad: dict[int, str] | None = None,
                 missing: Callable[[int], str | None] | None = None) -> None:
        self.describe = describe  # row j of the global batch → "file:line"
        self.bad = bad or {}      # row j → type name of a non-text value (null in the array)
        self.missing = missing    # row j (null) → "no 'text' field (found [...])" or None


@dataclass
class DocBatch:
    """Documents of one shard, in source order.

    Attributes:
        values: Arrow ``string``/``large_string``/``binary``/``large_binary`` array, one entry per
            document; null where the source had no text (see :meth:`problem`).
        indices: ``np.int64`` global document indices (over the whole source), ascending.
        rows: ``np.int64`` positions in the origin's batch (for :meth:`where`).
    """

    values: pa.Array
    indices: np.ndarray
    rows: np.ndarray
    origin: _Origin = field(repr=False)

    def __len__(self) -> int:
        return len(self.values)

    @property
    def nbytes(self) -> int:
        """Bytes of document data (the offsets' span)."""
        if len(self.values) == 0:
            return 0
        return int(arrow_to_packed(self.values, nulls="empty")[1][-1])

    def where(self, j: int) -> str:
        """Where document ``j`` of this batch is (``path:line``, ``path:row N``, ``row N``,
        ``item N``)."""
        return self.origin.describe(int(self.rows[j]))

    def problem(self, j: int) -> tuple[str, str] | None:
        """``None`` when document ``j`` is text; else ``(kind, detail)``: kind ``"null"`` (the
        value is None/null), ``"missing"`` (the row has no such field; detail names the fields
        it has) or ``"type"`` (detail: the value's type name)."""
        if self.values[j].is_valid:
            return None
        r = int(self.rows[j])
        if r in self.origin.bad:
            return "type", self.origin.bad[r]
        if self.origin.missing is not None:
            why = self.origin.missing(r)
            if why is not None:
                return "missing", why
        return "null", "None"

    def take(self, js: np.ndarray) -> DocBatch:
        js = np.asarray(js, np.int64)
        return DocBatch(self.values.take(_arrow_indices(js)), self.indices[js], self.rows[js],
                        self.origin)

    def slice(self, a: int, b: int) -> DocBatch:
        return DocBatch(self.values.slice(a, b - a), self.indices[a:b], self.rows[a:b],
                        self.origin)


def _shard_of(values: pa.Array, k0: int, origin: _Origin, shard: int, num_shards: int,
              start: int) -> DocBatch | None:
    """The documents of a global batch (``values[j]`` is document ``k0 + j``) that belong to
    ``shard`` at position ``start`` or later."""
    n = len(values)
    first = max(k0, shard + start * num_shards)
    j0 = first - k0 + ((shard - first) % num_shards)
    if j0 >= n:
        return None
    if num_shards == 1:
        js = np.arange(j0, n, dtype=np.int64)
        return DocBatch(values.slice(j0), k0 + js, js, origin)
    js = np.arange(j0, n, num_shards, dtype=np.int64)
    return DocBatch(values.take(_arrow_indices(js)), k0 + js, js, origin)


# ================================================================================================
# Readers
# ================================================================================================
class Reader:
    """Base class: a source of documents that can be read by shard (see the module docstring).

    Subclasses implement :meth:`_global` (batches ``(values, k0, origin)`` in order, where
    ``values[j]`` is document ``k0 + j``; ``first`` is the first global index anyone needs, so
    whole batches before it may be skipped without reading them) or override :meth:`batches`.
    """

    text_column = "text"
    stats: dict

    def describe(self) -> str:
        return type(self).__name__

    def _global(self, first: int) -> Iterator[tuple[pa.Array, int, _Origin]]:
        raise NotImplementedError

    def batches(self, shard: int = 0, num_shards: int = 1, start: int = 0
                ) -> Iterator[DocBatch]:
        """:class:`DocBatch` objects of shard ``shard`` of ``num_shards`` (document ``k`` is in
        shard ``k % num_shards``), from shard position ``start`` on.

        Raises:
            InputError: the source cannot be read (names the file or row and what to pass).
        """
        if not (0 <= shard < num_shards) or start < 0:
            raise ValueError(f"bad shard {shard} of {num_shards} / start {start}")
        for values, k0, origin in self._global(shard + start * num_shards):
            b = _shard_of(values, k0, origin, shard, num_shards, start)
            if b is not None and len(b):
                yield b

    def packed_batches(self, batch_bytes: int = DEFAULT_BATCH_BYTES, *, skip_none: bool = True
                       ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """All documents as packed ``(uint8 data, int64 offsets)`` batches of about
        ``batch_bytes`` (what :func:`torch_gpubpe.training.trainer.train` and the word counters take).
        Null documents are skipped (``skip_none``) and counted in ``self.stats``; a value that
        is not text raises :class:`InputError` naming where it is."""
        stream = documents(self, skip_none=skip_none, stats=self.stats, batch_bytes=batch_bytes)
        for b in prefetch(stream, 2, "torch_gpubpe read"):  # read while the caller counts
            yield b.data, b.offsets

    def __iter__(self) -> Iterator[bytes]:
        """Documents one by one as ``bytes`` (slow path; for small sources and tests)."""
        for b in self.batches():
            yield from b.values.cast(pa.large_binary()).to_pylist() if len(b) else ()


# -- files ---------------------------------------------------------------------------------------
def _split_ext(path: str) -> tuple[str, str | None]:
    """(format extension, compression) of a file name: ``a.JSONL.gz`` → (".jsonl", "gzip")."""
    name = os.path.basename(str(path)).lower()
    comp = None
    for suf, c in _COMPRESSION.items():
        if name.endswith(suf):
            name, comp = name[: -len(suf)], c
            break
    return os.path.splitext(name)[1], comp


def infer_format(path: str) -> str:
    """The format of a file from its name: ``"parquet"``, ``"arrow"``, ``"json"`` (JSON Lines),
    ``"csv"`` or ``"text"``, looking through one compression suffix (``a.jsonl.gz`` → json).

    Raises:
        InputError: an unknown extension (names the file, the formats and ``--format``).
    """
    ext, _ = _split_ext(path)
    if ext not in _EXTENSIONS:
        raise InputError(
            f"{path}: cannot tell the file format from the extension {ext or '(none)'!r}; "
            f"pass --format (file_format=) one of {', '.join(FORMATS)}")
    return _EXTENSIONS[ext]


def _normal_format(fmt: str | None) -> str | None:
    if fmt is None or fmt == "auto":
        return None
    fmt = {"jsonl": "json", "ndjson": "json", "txt": "text", "feather": "arrow", "ipc": "arrow",
           "tsv": "csv"}.get(fmt, fmt)
    if fmt not in FORMATS:
        raise InputError(f"unknown file format {fmt!r}; the formats are {', '.join(FORMATS)}")
    return fmt


def expand_paths(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """Paths in the given order, each glob pattern expanded (sorted).

    Raises:
        InputError: a file does not exist, a pattern matches nothing, or a path is a folder.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    for p in paths:
        p = os.fspath(p)
        if any(ch in p for ch in "*?["):
            hits = sorted(glob.glob(p, recursive=True))
            if not hits:
                raise InputError(f"data file pattern {p!r} matches no file")
            out += [h for h in hits if os.path.isfile(h)]
        elif not os.path.exists(p):
            raise InputError(f"data file {p!r} does not exist")
        elif not os.path.isfile(p):
            raise InputError(f"data file {p!r} is not a file")
        else:
            out.append(p)
    if not out:
        raise InputError("no data files given")
    return out


GZIP_WITHOUT_ISAL = ("torch_gpubpe.io.readers: python-isal is not installed, so .gz files are "
                     "inflated with zlib (pyarrow), 2-4x slower per core than ISA-L (pip install "
                     "isal; stats['gzip_inflate'] says which one ran)")


def _isal_igzip():
    """``isal.igzip`` (python-isal: Intel ISA-L's inflate, 2-4x zlib's speed per core, the GIL
    released while it inflates), or ``None`` when it is not installed."""
    try:
        from isal import igzip
    except ImportError:
        return None
    return igzip


ISAL_BUFFERED = ("torch_gpubpe.io.readers: this python-isal's gzip file has no isal_zlib._GzipReader "
                 "under it (written for python-isal 1.x), so .gz chunks are inflated through its "
                 "buffered file (an extra copy with the GIL held; stats['gzip_inflate'] is "
                 "'isal (buffered)')")


def _isal_inflater(f):
    """The unbuffered inflater under an ``isal.igzip`` file (``isal_zlib._GzipReader``,
    python-isal 1.x), or ``None`` when this python-isal has none there.

    Its ``readinto`` inflates straight into the caller's buffer with the GIL released. The
    file's own ``readinto`` is io's generic one: ``read`` into a fresh ``bytes`` (allocated and
    faulted in each time), then a copy into the buffer with the GIL held. Measured on one core
    (python-isal 1.9.1, 8 MiB buffers): 0.41-0.44 GB/s through the file, 0.63-0.65 GB/s
    through the inflater; on the H200 the copy was the readers' largest GIL-held line while
    16 files were inflated beside the threads that feed the GPU."""
    from isal import isal_zlib

    cls = getattr(isal_zlib, "_GzipReader", None)
    raw = getattr(getattr(f, "_buffer", None), "raw", None)
    return raw if cls is not None and isinstance(raw, cls) else None


class _Inflating:
    """An ``isal.igzip`` file whose ``readinto`` goes to its unbuffered inflater (see
    :func:`_isal_inflater`); ``read`` and closing go to the file. Use one or the other from
    the start: bytes the file has buffered are not seen by ``readinto``."""

    def __init__(self, f, raw) -> None:
        self._f, self.readinto, self.read = f, raw.readinto, f.read

    def __enter__(self) -> _Inflating:
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()

    def close(self) -> None:
        self._f.close()


def _open_raw(path: str, stats: dict | None = None):
    """A binary stream of the decompressed bytes of ``path`` (compression from the suffix).

    gzip goes through :mod:`isal.igzip` when python-isal is installed (its ``readinto``
    through the unbuffered inflater, see :func:`_isal_inflater`), else through pyarrow's zlib
    (warned once); ``stats["gzip_inflate"]`` is set to ``"isal"``, ``"isal (buffered)"`` (a
    python-isal without that inflater, warned once) or ``"zlib"``."""
    _, comp = _split_ext(path)
    if comp is None:
        return open(path, "rb", buffering=0)
    if comp == "gzip":
        igzip = _isal_igzip()
        if stats is not None:
            stats["gzip_inflate"] = "zlib" if igzip is None else "isal"
        if igzip is not None:
            f = igzip.open(path, "rb")
            raw = _isal_inflater(f)
            if raw is None:
                _warn_once(ISAL_BUFFERED)
                if stats is not None:
                    stats["gzip_inflate"] = "isal (buffered)"
                return f
            return _Inflating(f, raw)
        _warn_once(GZIP_WITHOUT_ISAL)
    if comp == "xz" or not pa.Codec.is_available(comp):
        import bz2
        import gzip
        import lzma

        opener = {"gzip": gzip.open, "bz2": bz2.open, "xz": lzma.open}.get(comp)
        if opener is None:
            raise InputError(f"{path}: {comp} decompression is not available in this pyarrow")
        return opener(path, "rb")
    return pa.input_stream(path, compression=comp)


def _sniff(path: str, fmt: str) -> None:
    """Refuse a binary file given as text or JSON Lines (after decompression)."""
    try:
        with _open_raw(path) as f:
            head = f.read(16)
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 4))
            tail = f.read(4)
    except _decompress_errors() as e:  # (EOFError: a .gz file truncated in its first bytes)
        if _split_ext(path)[1]:  # the file, not its format, is the problem
            raise _read_failed(path, e) from e
        raise InputError(f"{path}: cannot be read as {fmt} ({type(e).__name__}: {e}); the "
                         f"formats are {', '.join(FORMATS)}") from e
    import re as _re

    for magic, kind in _MAGICS + ((_re.compile(rb"BZh[1-9]1AY&SY"), "bz2"),):
        hit = magic.match(head) if hasattr(magic, "match") else head.startswith(magic)
        if kind == "parquet":
            hit = hit and tail == b"PAR1" and _split_ext(path)[1] is None  # uncompressed
        if hit:
            raise InputError(
                f"{path}: read as {fmt} but it is a {kind} file; name it by its format or pass "
                f"--format (file_format=) one of {', '.join(FORMATS)} (compressed files need "
                f"their suffix: {', '.join(sorted(set(_COMPRESSION)))})")


_CONTROL = np.zeros(256, bool)
_CONTROL[1:32] = True
_CONTROL[[8, 9, 10, 11, 12, 13, 27]] = False  # BS (overstrike), TAB, LF, VT, FF, CR, ESC (ANSI)
_CONTROL[127] = True


def looks_binary(head: bytes) -> str | None:
    """Why ``head`` (the first :data:`TEXT_CHECK_BYTES` of a file) is not text, or ``None``.

    A deliberately simple check for random or binary bytes given as a ``.txt`` file: the file
    is refused when NUL bytes are at least :data:`MAX_NUL_SHARE` of ``head`` or other C0
    control bytes (not TAB LF VT FF CR, backspace or ESC) at least :data:`MAX_CONTROL_SHARE`,
    and at least :data:`MIN_SUSPECT_BYTES` of them either way.
    UTF-8 text in any script, source code, ANSI-coloured logs and text in 8-bit legacy
    encodings (Latin-1, CP1251: invalid UTF-8 but no control bytes) pass; the message also
    gives the share of bytes that are not valid UTF-8.

    Example::

        >>> looks_binary("çok güzel 😀 الكتاب 中文\\n".encode()) is None
        True
        >>> looks_binary(b"\\x00\\x01" * 100)
        '50.0 % NUL bytes, 50.0 % other control bytes, 0.0 % of the bytes not valid UTF-8'
    """
    if not head:
        return None
    a = np.frombuffer(head, np.uint8)
    n_nul, n_ctrl = int(np.count_nonzero(a == 0)), int(np.count_nonzero(_CONTROL[a]))
    nul, ctrl = n_nul / len(a), n_ctrl / len(a)
    if ((nul < MAX_NUL_SHARE or n_nul < MIN_SUSPECT_BYTES)
            and (ctrl < MAX_CONTROL_SHARE or n_ctrl < MIN_SUSPECT_BYTES)):
        return None
    # bytes not in valid UTF-8 sequences (a sequence cut by the end of head counts as valid)
    valid = len(head.decode("utf-8", "ignore").encode("utf-8"))
    cut = next((k for k in range(1, 4) if len(head) >= k and head[-k] >= 0xC0), 0)
    invalid = max(0, len(head) - valid - cut) / len(head)
    return (f"{100 * nul:.1f} % NUL bytes, {100 * ctrl:.1f} % other control bytes, "
            f"{100 * invalid:.1f} % of the bytes not valid UTF-8")


def _check_text(path: str, raw: bytes) -> None:
    from torch_gpubpe.errors import NotTextError

    why = looks_binary(raw[:TEXT_CHECK_BYTES])
    if why is not None:
        raise NotTextError(
            f"{path}: read as text but it looks like binary data ({why} in its first "
            f"{min(len(raw), TEXT_CHECK_BYTES):,} bytes); to tokenize its bytes as they are, "
            "pass --format binary (format='binary' / file_format='binary'), or give the bytes "
            "to Tokenizer.encode / encode_batch directly")


_warned: set[str] = set()


def _warn_once(msg: str) -> None:
    if msg not in _warned:
        _warned.add(msg)
        notices.warn(msg, stacklevel=3)


def _ordered(tasks: Iterator[Callable[[], Any]], pool: ThreadPoolExecutor, ahead: int
             ) -> Iterator[Any]:
    """Run the callables of ``tasks`` on ``pool``, at most ``ahead`` at a time, results in
    order."""
    pending: deque = deque()
    try:
        for t in tasks:
            pending.append(pool.submit(t))
            # the oldest result as soon as it is ready (not only once `ahead` are queued: the
            # first batch would wait for `ahead` tasks to be made)
            while pending and (len(pending) >= ahead or pending[0].done()):
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for f in pending:
            f.cancel()


class _Pump:
    """A generator run on a daemon thread into a bounded queue (stops when closed). Closed by
    its consumer's thread, it joins the thread; finalized by the garbage collector in another
    thread it only tells it to stop (a finalizer must not wait: the collecting thread may hold
    what the stopping one needs, as in torch_gpubpe.integrations.torch_data._Background)."""

    _END = object()

    def __init__(self, gen: Iterator, depth: int, name: str) -> None:
        self.q: queue.Queue = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.gen = gen
        self.t = threading.Thread(target=self._run, name=name, daemon=True)
        self.t.start()

    def _put(self, x) -> bool:
        return put_unless_stopped(self.q, x, self.stop)

    def _run(self) -> None:
        try:
            for x in self.gen:
                if not self._put((x, None)):
                    break
            self._put((self._END, None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            self._put((self._END, e))
        finally:
            close = getattr(self.gen, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> Iterator:
        consumer = threading.get_ident()
        try:
            while True:
                try:
                    x, err = self.q.get(timeout=1.0)
                except queue.Empty:
                    if not self.t.is_alive() and self.q.empty():
                        raise RuntimeError(f"{self.t.name} stopped without a result") from None
                    continue
                if x is self._END:
                    if err is not None:
                        raise err
                    return
                yield x
                consumer = threading.get_ident()
        finally:
            self.close(join=threading.get_ident() == consumer)

    def close(self, join: bool = True) -> None:
        self.stop.set()
        if join:
            self.t.join(timeout=30)


def prefetch(items: Iterator, depth: int = 2, name: str = "torch_gpubpe prefetch") -> Iterator:
    """``items`` computed on a daemon thread, up to ``depth`` ahead (exceptions re-raised here;
    closing the returned generator stops the thread)."""
    yield from _Pump(iter(items), depth, name)


class _BufferPool:
    """Chunk arrays of ``size`` bytes for reuse: a decompressing thread takes one (or makes a
    new one), the chunk's parser gives it back once nothing refers to its bytes (reused
    memory is not faulted in and zeroed by the kernel again). At most ``keep`` arrays wait
    here; more are freed."""

    def __init__(self, size: int, keep: int) -> None:
        self.size, self.keep = size, keep
        self._free: deque = deque()

    def get(self) -> np.ndarray | None:
        try:
            return self._free.pop()
        except IndexError:
            return None

    def put(self, chunk: memoryview) -> None:
        arr = chunk.obj if isinstance(chunk, memoryview) else None
        if (isinstance(arr, np.ndarray) and arr.nbytes == self.size
                and len(self._free) < self.keep):
            self._free.append(arr)


def _rfind_newline(mv: memoryview, lo: int, hi: int) -> int:
    """Index of the last ``\\n`` in ``mv[lo:hi]`` (absolute), or -1; scans back in 64 KiB
    windows (lines are short; a longer one costs a copy of itself)."""
    step = 1 << 16
    b = hi
    while b > lo:
        a = max(lo, b - step)
        k = bytes(mv[a:b]).rfind(b"\n")
        if k >= 0:
            return a + k
        b = a
        step = min(step * 2, 1 << 24)
    return -1


def _count_newlines(data: np.ndarray) -> int:
    """``\\n`` bytes in a uint8 array, 1 MiB at a time (the comparison's mask stays in cache;
    numpy releases the GIL while it compares)."""
    n = 0
    step = 1 << 20
    for a in range(0, len(data), step):
        n += int(np.count_nonzero(data[a : a + step] == 10))
    return n


def _read_failed(path: str, e: BaseException) -> InputError:
    comp = _split_ext(path)[1]
    how = f"decompressed as {comp}" if comp else "read"
    return InputError(f"{path}: cannot be {how} ({type(e).__name__}: {e})")


def _decompress_errors() -> tuple[type[BaseException], ...]:
    """What decompressors raise on corrupt or truncated input (zlib, isal, pyarrow, bz2, lzma)."""
    import lzma
    import zlib

    errs: list[type[BaseException]] = [OSError, EOFError, zlib.error, lzma.LZMAError,
                                       pa.ArrowException]
    igzip = _isal_igzip()
    if igzip is not None:
        from isal import isal_zlib

        errs.append(isal_zlib.error)
    return tuple(errs)


class FileReader(Reader):
    """Documents from local files of one or several formats (see the module docstring).

    Args:
        paths: a path, glob pattern, or sequence of them; read in this order (document indices
            run over all files in order).
        text_column: column / JSON field holding the text.
        format: one of :data:`FORMATS` for every file (``None``: from each file's extension).
        sample_by: plain-text files: ``"line"`` (default), ``"paragraph"`` or ``"document"``.
        threads: reader threads (default: the CPU count, at most 16). Parquet row groups are
            decoded on these threads (``use_threads=False``), not on Arrow's CPU pool, whose size
            follows ``OMP_NUM_THREADS`` (1 in a Ray worker without ``num_cpus``: every row group
            of the call would be decoded on that one thread).
        chunk_bytes: decompressed JSON Lines / text bytes per parse task.
        read_ahead_bytes: decompressed bytes that JSON Lines files after the one being read
            may hold ahead (their threads decompress in parallel; default
            :data:`DEFAULT_READ_AHEAD_BYTES`, 1/8 of the RAM, at most 4 GiB).
        nice: added to the scheduling niceness of the reader's own threads (decompressing,
            parsing; Linux sets it per thread, elsewhere it is ignored, said in
            ``stats["nice"]``): with ``nice > 0`` the threads that feed the GPU get the cores
            first when both want them, and the reader uses what is left (it reads ahead).
            0 (default): as the calling thread.

    Attributes:
        file_starts: ``(global index of the file's first row, the file's position in
            paths)`` for each file with rows, appended on the reading thread as the reading
            reaches the file (before its rows are handed on), reset by each pass: which file
            a document came from (:class:`torch_gpubpe.integrations.ray.TokenizeFiles`); files without
            rows are absent.
    Raises:
        InputError: a file does not exist, has an unknown extension, or a bad option.
    """

    def __init__(self, paths, text_column: str = "text", format: str | None = None,
                 sample_by: str = DEFAULT_SAMPLE_BY, threads: int | None = None,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 read_ahead_bytes: int | None = None, nice: int = 0) -> None:
        self.paths = expand_paths(paths)
        if not isinstance(nice, int) or not 0 <= nice <= 19:
            raise InputError(f"nice must be an int from 0 to 19, got {nice!r}")
        self.nice = nice
        self.read_ahead_bytes = int(DEFAULT_READ_AHEAD_BYTES if read_ahead_bytes is None
                                    else read_ahead_bytes)
        if not text_column:
            raise InputError("text_column must be a non-empty column name")
        if sample_by not in SAMPLE_BY:
            raise InputError(f"sample_by must be one of {SAMPLE_BY}, got {sample_by!r}")
        self.text_column = text_column
        self.format = _normal_format(format)
        self.formats = [self.format or infer_format(p) for p in self.paths]
        self.sample_by = sample_by
        self.threads = max(1, min(threads or os.cpu_count() or 1, 16))
        self.chunk_bytes = int(chunk_bytes)
        self.stats: dict = {}
        self.file_starts: list[tuple[int, int]] = []
        self._file = 0   # the file (position in its run) a format reader's next rows are of

    def __getstate__(self) -> dict:
        return dict(self.__dict__, stats={}, file_starts=[])

    def describe(self) -> str:
        shown = ", ".join(self.paths[:3]) + (" ..." if len(self.paths) > 3 else "")
        return f"files {shown}"

    def _global(self, first: int) -> Iterator[tuple[pa.Array, int, _Origin]]:
        k = 0
        pool = ThreadPoolExecutor(self.threads, thread_name_prefix="gpubpe-read",
                                  initializer=self._lower_priority)
        self.file_starts = starts = []
        try:
            i = 0
            while i < len(self.paths):
                fmt = self.formats[i]
                # a run of consecutive files of one format is read together (threads across files)
                j = i
                while j < len(self.paths) and self.formats[j] == fmt:
                    j += 1
                reader = {"parquet": self._parquet, "arrow": self._arrow, "json": self._jsonl,
                          "csv": self._csv, "text": self._text,
                          "binary": lambda ps, pool, skip: self._text(ps, pool, skip, False)}[fmt]
                for values, origin in reader(self.paths[i:j], pool, first - k):
                    if len(values) and (not starts or starts[-1][1] != i + self._file):
                        starts.append((k, i + self._file))
                    yield values, k, origin
                    k += len(values)
                i = j
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _lower_priority(self) -> None:
        """Raise this (reader) thread's niceness by ``self.nice`` (Linux: per thread)."""
        if not self.nice:
            return
        tid = threading.get_native_id()
        try:
            if not os.uname().sysname == "Linux":
                raise OSError("per-thread niceness is Linux only")
            os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid)
                           + self.nice)
            self.stats["nice"] = self.nice
        except (OSError, AttributeError) as e:
            self.stats["nice"] = f"not applied ({e})"
            _warn_once(f"torch_gpubpe.io.readers: nice={self.nice} not applied to the reader "
                       f"threads ({e})")

    # Each format reader yields (values, origin) for consecutive rows; ``skip`` rows at the start
    # may be returned as arrays of nulls (cheap) instead of read: nobody looks at them.
    def _missing_column(self, path: str, names: Sequence[str]) -> InputError:
        return InputError(
            f"{path}: no column {self.text_column!r} (columns: {', '.join(map(str, names))}); "
            f"pass --text-column (text_column=) with one of them")

    def _column(self, table: pa.Table | pa.RecordBatch, path: str) -> pa.Array:
        if self.text_column not in table.schema.names:
            raise self._missing_column(path, table.schema.names)
        return table.column(self.text_column)

    def _typed(self, col: pa.Array, path: str, describe) -> tuple[pa.Array, _Origin]:
        """A column as text (or nulls + type names when it holds something else)."""
        col = _as_binary(col)
        if _is_text_type(col.type):
            return col, _Origin(describe)
        if pa.types.is_null(col.type):
            return pa.nulls(len(col), pa.large_binary()), _Origin(describe)
        valid = np.flatnonzero(_valid_mask(col))
        bad = {int(r): str(col.type) for r in valid}
        return pa.nulls(len(col), pa.large_binary()), _Origin(describe, bad)

    def _parquet(self, paths, pool, skip):
        import pyarrow.parquet as pq

        tasks = []
        for t, p in enumerate(paths):
            try:
                pf = pq.ParquetFile(p)
            except (pa.ArrowException, OSError) as e:
                raise InputError(f"{p}: cannot be read as parquet ({e}); the formats are "
                                 f"{', '.join(FORMATS)}") from e
            names = pf.schema_arrow.names
            if self.text_column not in names:
                raise self._missing_column(p, names)
            md = pf.metadata
            base = 0
            for g in range(md.num_row_groups):
                n = md.row_group(g).num_rows
                tasks.append((t, p, md, g, n, base))
                base += n

        def read(p, md, g):
            f = pq.ParquetFile(p, metadata=md)
            # decoded on this (the pool's) thread: Arrow's own pool may have 1 thread (above)
            return f.read_row_group(g, columns=[self.text_column], use_threads=False).column(0)

        def gen():
            nonlocal skip
            for _t, p, md, g, n, base in tasks:
                if skip >= n:  # a resumed shard: this row group is before anything needed
                    skip -= n
                    yield (lambda n=n: n)
                    continue
                skip = 0
                yield (lambda p=p, md=md, g=g: read(p, md, g))

        for (t, p, md, g, n, base), col in zip(tasks, _ordered(gen(), pool, 2 * self.threads)):
            self._file = t
            if isinstance(col, int):
                yield pa.nulls(col, pa.large_binary()), _Origin(lambda j: "")
                continue
            yield self._typed(col, p, lambda j, p=p, base=base: f"{p}:row {base + j}")

    def _arrow(self, paths, pool, skip):
        for t, p in enumerate(paths):
            self._file = t
            try:
                src = pa.memory_map(p)
                try:
                    rd = pa.ipc.open_file(src)
                    batches = (rd.get_batch(i) for i in range(rd.num_record_batches))
                    schema = rd.schema
                except pa.ArrowInvalid:
                    src.seek(0)
                    rd = pa.ipc.open_stream(src)
                    batches, schema = iter(rd), rd.schema
            except (pa.ArrowException, OSError) as e:
                raise InputError(f"{p}: cannot be read as Arrow IPC/feather ({e}); the formats "
                                 f"are {', '.join(FORMATS)}") from e
            if self.text_column not in schema.names:
                raise self._missing_column(p, schema.names)
            base = 0
            for rb in batches:
                col = rb.column(schema.get_field_index(self.text_column))
                yield self._typed(col, p, lambda j, p=p, base=base: f"{p}:row {base + j}")
                base += len(col)

    def _csv(self, paths, pool, skip):
        import pyarrow.csv as pcsv

        for t, p in enumerate(paths):
            self._file = t
            ext, _ = _split_ext(p)
            popts = pcsv.ParseOptions(delimiter="\t" if ext == ".tsv" else ",",
                                      newlines_in_values=True)
            copts = pcsv.ConvertOptions(column_types={self.text_column: pa.large_string()},
                                        include_columns=[self.text_column],
                                        strings_can_be_null=False)
            try:
                rd = pcsv.open_csv(p, parse_options=popts, convert_options=copts,
                                   read_options=pcsv.ReadOptions(block_size=self.chunk_bytes))
            except pa.ArrowInvalid as e:
                if "include_columns" in str(e) or "does not exist" in str(e):
                    hdr = pcsv.open_csv(p, parse_options=popts).schema.names
                    raise self._missing_column(p, hdr) from e
                raise InputError(f"{p}: cannot be read as CSV ({e})") from e
            base = 0
            for rb in rd:
                col = rb.column(0)
                yield col, _Origin(lambda j, p=p, base=base: f"{p}:row {base + j}")
                base += len(col)

    # -- JSON Lines ----------------------------------------------------------------------------
    def _raw_chunks(self, path: str, buffers: _BufferPool | None = None
                    ) -> Iterator[tuple[int, memoryview, int]]:
        """``(first line number, bytes, line ends in them)`` chunks of a (decompressed) file,
        cut after a ``\\n``; into arrays from ``buffers`` (given back by the chunk's parser).

        Raises:
            InputError: the file cannot be decompressed (corrupt or truncated), naming it.
        """
        # Each chunk is decompressed straight into its own buffer (readinto, no GIL held),
        # after the previous chunk's unfinished last line; lines are counted with numpy. The
        # buffers are np.empty (not bytearray: no zero-filling memset under the GIL, and numpy
        # asks for huge pages). (Bytes slicing, joining and counting would hold the GIL for
        # every byte of 16 files at once.) Chunks are memoryviews of those buffers.
        self._lower_priority()  # (this generator runs on its file's own thread)
        tail = b""
        line = 1
        size = self.chunk_bytes
        try:
            with _open_raw(path, self.stats) as f:
                while True:
                    want = max(size, 2 * len(tail))
                    buf = buffers.get() if buffers is not None and want == size else None
                    if buf is None:
                        buf = np.empty(want, np.uint8)
                    mv = memoryview(buf)
                    mv[: len(tail)] = tail
                    got = len(tail)
                    while got < len(buf):  # a stream may return less than asked before its end
                        k = f.readinto(mv[got:])
                        if not k:
                            break
                        got += k
                    if got == len(tail):
                        break
                    cut = _rfind_newline(mv, len(tail), got) + 1
                    if cut == 0:  # no line end yet: a longer chunk
                        tail = bytes(mv[:got])
                        continue
                    chunk = mv[:cut]
                    tail = bytes(mv[cut:got])
                    # (counted before it is handed on: its parser may give the array back)
                    nl = _count_newlines(buf[:cut])
                    yield line, chunk, nl
                    line += nl
        except _decompress_errors() as e:
            raise _read_failed(path, e) from e
        if tail:
            yield line, memoryview(tail), tail.count(b"\n")

    def _files_chunks(self, paths, fmt: str, buffers: _BufferPool | None = None
                      ) -> Iterator[tuple[str, int, memoryview, int]]:
        """Raw chunks ``(path, first line, bytes, line ends in it)`` of ``paths`` in order; up
        to ``threads`` files decompressed at once (into ``buffers``' arrays)."""
        for p in paths:
            _sniff(p, fmt)
        live: deque = deque()
        it = iter(paths)

        live_max = min(self.threads, len(paths))
        # Chunks each file may decompress ahead: the files are consumed in order, so without
        # room to run ahead only the first file's thread would work (one core of gzip).
        depth = max(3, self.read_ahead_bytes // max(1, self.chunk_bytes * live_max))
        self.stats["read_ahead_chunks_per_file"] = depth

        def start_next() -> bool:
            p = next(it, None)
            if p is not None:
                live.append((p, _Pump(self._raw_chunks(p, buffers), depth,
                                      f"gpubpe-decompress {p}")))
            return p is not None

        start_next()  # the others once the first file gave its first chunk (it is awaited)
        try:
            while live:
                p, pump = live[0]
                for line, chunk, nl in pump:
                    while len(live) < live_max and start_next():
                        pass
                    yield p, line, chunk, nl
                live.popleft()
                start_next()
        finally:
            for _, pump in live:
                pump.close()

    def _jsonl(self, paths, pool, skip):
        buffers = _BufferPool(self.chunk_bytes, 4 * self.threads)

        def tasks():
            t = -1
            for p, line, chunk, nl in self._files_chunks(paths, "JSON Lines", buffers):
                t += line == 1     # only a file's first chunk starts at line 1
                yield (lambda t=t, p=p, line=line, chunk=chunk, nl=nl:
                       (t, self._parse_jsonl(p, line, chunk, nl, buffers)))

        first_chunk: set[str] = set()
        for t, (p, values, origin, lines) in _ordered(tasks(), pool, 2 * self.threads):
            self._file = t
            if p not in first_chunk:
                first_chunk.add(p)
                self._check_field_exists(p, values, origin, lines)
            if len(values):
                yield values, origin

    def _check_field_exists(self, p, values, origin, lines) -> None:
        """A file whose first chunk has no row with the field: name the fields it has."""
        if len(values) == 0 or values.null_count < len(values) or origin.bad:
            return
        why = origin.missing(0) if origin.missing else None
        if why is not None:
            obj = json.loads(lines(0)[1])
            keys = list(obj) if isinstance(obj, dict) else []
            raise self._missing_column(f"{p}:{lines(0)[0]}", keys)

    def _parse_jsonl(self, path: str, line0: int, chunk: memoryview, newlines: int,
                     buffers: _BufferPool | None = None):
        """Parse one chunk: ``(path, values, origin, lines)``. ``chunk`` (``newlines`` line
        ends in it) goes back to ``buffers`` once parsed: the batch keeps a copy of its bytes
        only when its rows may need them (null/missing values, blank lines shifting line
        numbers) — else row ``r`` is line ``line0 + r``."""
        try:
            return self._parse_jsonl_chunk(path, line0, chunk, newlines)
        finally:
            if buffers is not None:
                buffers.put(chunk)

    def _parse_jsonl_chunk(self, path: str, line0: int, chunk: memoryview, newlines: int):
        import pyarrow.json as pj

        col = self.text_column
        schema = pa.schema([(col, pa.large_string())])
        popts = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        lines_cache: list = []
        kept: list = [chunk]  # the bytes lines() reads (dropped or copied before returning)

        def lines(r: int) -> tuple[int, bytes | None]:
            """(line number, bytes) of the r-th non-blank line of the chunk."""
            if kept[0] is None:  # no blank lines: row r is line line0 + r (bytes not kept)
                return line0 + r, None
            if not lines_cache:
                lines_cache.append([(line0 + i, ln) for i, ln in
                                    enumerate(bytes(kept[0]).split(b"\n"))
                                    if ln.strip()])
            return lines_cache[0][r]

        def describe(r: int) -> str:
            return f"{path}:{lines(r)[0]}"

        def missing(r: int) -> str | None:
            obj = json.loads(lines(r)[1])
            if isinstance(obj, dict) and col in obj:
                return None
            keys = list(obj) if isinstance(obj, dict) else type(obj).__name__
            return f"no {col!r} field (found {keys})"

        if not bytes(chunk[:4096]).strip() and not bytes(chunk).strip():
            kept[0] = None
            return path, pa.array([], pa.large_binary()), _Origin(describe), lines
        try:
            # The chunk as one block on this thread: the reader's pool parses chunks in
            # parallel (Arrow's own threads would only add hand-offs; no line straddles blocks).
            t = pj.read_json(pa.py_buffer(chunk), parse_options=popts,
                             read_options=pj.ReadOptions(use_threads=False,
                                                         block_size=len(chunk) + 1))
            parsed = t.column(0)  # one block: one chunk (combine_chunks would copy it)
            arr = parsed.chunk(0) if parsed.num_chunks == 1 else parsed.combine_chunks()
            arr.validate(full=True)  # pyarrow.json does not check UTF-8; JSON is UTF-8
            n_lines = newlines + (1 if len(chunk) and chunk[-1] != 10 else 0)
            kept[0] = (bytes(chunk) if arr.null_count or len(arr) != n_lines else None)
            return path, arr, _Origin(describe, None, missing), lines
        except (UnicodeDecodeError, pa.ArrowException):
            pass
        kept[0] = chunk = bytes(chunk)
        # pyarrow refused the chunk (lone surrogate escapes, a value that is not a string,
        # invalid UTF-8, a broken line): parse it line by line, each row treated as before.
        self.stats["jsonl_python_chunks"] = self.stats.get("jsonl_python_chunks", 0) + 1
        _warn_once("torch_gpubpe.io.readers: a JSON Lines chunk that pyarrow cannot parse (lone "
                   "surrogate escapes, non-text values, invalid UTF-8) is read line by line "
                   "with the json module (slower; counted in stats['jsonl_python_chunks'])")
        parts: list[bytes] = []
        valid: list[bool] = []
        bad: dict[int, str] = {}
        miss: dict[int, str] = {}
        for i, ln in enumerate(chunk.split(b"\n")):
            if not ln.strip():
                continue
            r = len(parts)
            try:
                obj = json.loads(ln)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise InputError(f"{path}:{line0 + i}: not a JSON Lines record ({e})") from e
            if not isinstance(obj, dict):
                raise InputError(f"{path}:{line0 + i}: no {col!r} field (found "
                                 f"{type(obj).__name__}); pass text_column= to name the field "
                                 "holding the text")
            v = obj.get(col)
            if isinstance(v, str):
                parts.append(to_bytes(v))
                valid.append(True)
                continue
            parts.append(b"")
            valid.append(False)
            if col not in obj:
                miss[r] = f"no {col!r} field (found {list(obj)})"
            elif v is not None:
                bad[r] = type(v).__name__
        values = _pack_parts(parts, valid)
        return path, values, _Origin(describe, bad, miss.get), lines

    # -- plain text ----------------------------------------------------------------------------
    def _text(self, paths, pool, skip, check: bool = True):
        if check:  # format "binary": the bytes as they are, unchecked
            for p in paths:
                _sniff(p, "text")

        def read(p):
            try:
                with _open_raw(p, self.stats) as f:
                    raw = f.read()
            except _decompress_errors() as e:
                raise _read_failed(p, e) from e
            if check:
                _check_text(p, raw)
            return p, raw

        tasks = ((lambda p=p: read(p)) for p in paths)
        for t, (p, raw) in enumerate(_ordered(tasks, pool, self.threads)):
            self._file = t
            data = np.frombuffer(raw, np.uint8)
            if self.sample_by == "document":
                offsets = np.array([0, len(data)], np.int64)
                yield packed_to_arrow(data, offsets), _Origin(lambda j, p=p: p)
                continue
            if self.sample_by == "line":
                # each line with its "\n" (as io.BytesIO(raw).readlines()); no empty last piece
                ends = (np.flatnonzero(data == 10) + 1).astype(np.int64)
                if len(data) and (not len(ends) or ends[-1] != len(data)):
                    ends = np.append(ends, len(data))
                offsets = np.concatenate([np.zeros(1, np.int64), ends])
                arr = packed_to_arrow(data, offsets)
            else:
                starts, stops = _paragraphs(data)
                lens = stops - starts
                offsets = np.zeros(len(starts) + 1, np.int64)
                np.cumsum(lens, out=offsets[1:])
                arr = packed_to_arrow(data[_ranges(starts, lens)], offsets)
            n = len(arr)
            a = 0
            while a < n:  # batches of about chunk_bytes (zero-copy slices)
                b = int(np.searchsorted(offsets, offsets[a] + self.chunk_bytes, side="left"))
                b = min(max(b, a + 1), n)
                if self.sample_by == "line":
                    desc = (lambda j, p=p, base=a: f"{p}:{base + j + 1}")
                else:
                    desc = (lambda j, p=p, base=a: f"{p}:paragraph {base + j}")
                yield arr.slice(a, b - a), _Origin(desc)
                a = b


def _ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + l)`` for each (s, l), vectorised."""
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(lens)
    return np.arange(total, dtype=np.int64) - np.repeat(ends - lens - starts, lens)


def _paragraphs(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of the pieces of ``data`` between ``b"\\n\\n"`` separators (found left
    to right, non-overlapping, as ``bytes.split(b"\\n\\n")``), empty pieces dropped."""
    n = len(data)
    nl = data == 10
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # runs of consecutive newlines
    d = np.diff(np.concatenate([[0], nl.view(np.int8), [0]]))
    run_s = np.flatnonzero(d == 1)
    run_e = np.flatnonzero(d == -1)
    run_l = run_e - run_s
    pairs = run_l // 2  # separators in each run, at run_s, run_s + 2, ...
    sep = _ranges(run_s, pairs) if pairs.sum() else np.zeros(0, np.int64)
    # _ranges gives run_s + 0, 1, ...: separators sit at even steps
    if len(sep):
        step = np.arange(len(sep)) - np.repeat(np.cumsum(pairs) - pairs, pairs)
        sep = np.repeat(run_s, pairs) + 2 * step
    starts = np.concatenate([[0], sep + 2]).astype(np.int64)
    ends = np.concatenate([sep, [n]]).astype(np.int64)
    keep = ends > starts
    return starts[keep], ends[keep]


def _pack_parts(parts: list[bytes], valid: list[bool] | None = None) -> pa.Array:
    lengths = np.fromiter(map(len, parts), np.int64, len(parts))
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.frombuffer(b"".join(parts), np.uint8)
    vbuf = None
    if valid is not None and not all(valid):
        vbuf = pa.py_buffer(np.packbits(np.array(valid, bool), bitorder="little"))
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(parts),
                                            [vbuf, pa.py_buffer(offsets), pa.py_buffer(data)])


# -- Hugging Face datasets -----------------------------------------------------------------------
class HFReader(Reader):
    """A ``datasets.Dataset`` (map-style: a shard reads only its rows, zero copy from the Arrow
    table) or ``datasets.IterableDataset`` (streaming: read in Arrow batches, a shard keeps its
    documents).

    Raises:
        InputError: the dataset has no ``text_column`` (names the columns it has).
    """

    def __init__(self, ds, text_column: str = "text", batch_rows: int = DEFAULT_BATCH_ROWS,
                 what: str | None = None) -> None:
        self.ds, self.text_column, self.batch_rows = ds, text_column, int(batch_rows)
        self.map_style = _is_hf(ds, "Dataset")
        self.what = what or ("datasets.Dataset" if self.map_style else "datasets.IterableDataset")
        self.stats: dict = {}
        names = getattr(ds, "column_names", None)
        if names is not None and text_column not in names:
            raise InputError(
                f"{self.what}: the dataset has no column {text_column!r} (columns: "
                f"{', '.join(names)}); pass --text-column (text_column=) with one of them")

    def __getstate__(self) -> dict:
        return dict(self.__dict__, stats={})

    def describe(self) -> str:
        return self.what

    def _arrow_ds(self):
        ds = self.ds
        names = getattr(ds, "column_names", None)
        if names is not None and len(names) > 1:
            ds = ds.select_columns([self.text_column])
        return ds.with_format("arrow")

    def _col(self, t: pa.Table, k: int) -> pa.Array:
        if self.text_column not in t.column_names:
            raise InputError(
                f"{self.what}: row {k} has no column {self.text_column!r} (columns: "
                f"{', '.join(t.column_names)}); pass --text-column (text_column=) with one of "
                "them")
        return t.column(self.text_column)

    def _typed(self, col, k0):
        col = _as_binary(col)
        describe = (lambda j, k0=k0: f"row {k0 + j}")
        if _is_text_type(col.type):
            return col, _Origin(describe)
        if pa.types.is_null(col.type):
            return pa.nulls(len(col), pa.large_binary()), _Origin(describe)
        bad = {int(r): str(col.type) for r in np.flatnonzero(_valid_mask(col))}
        return pa.nulls(len(col), pa.large_binary()), _Origin(describe, bad)

    def batches(self, shard: int = 0, num_shards: int = 1, start: int = 0
                ) -> Iterator[DocBatch]:
        if not self.map_style:
            yield from super().batches(shard, num_shards, start)
            return
        ds = self._arrow_ds()
        n = len(ds)
        step = self.batch_rows * num_shards
        a = shard + start * num_shards
        while a < n:
            b = min(n, a + step)
            t = ds[a:b]
            col, origin = self._typed(self._col(t, a), a)
            js = np.arange(0, b - a, num_shards, dtype=np.int64)
            vals = col if num_shards == 1 else col.take(_arrow_indices(js))
            yield DocBatch(vals, a + js, js, origin)
            a = b

    def _global(self, first: int):
        k = 0
        # A streaming dataset gives no batch by bytes: a batch of batch_rows documents of 1 MB
        # each would be held whole (twice, as Python rows while datasets builds it). Batches of
        # HF_STREAM_ROWS rows bound that (documents() joins them into batch_bytes); they cost
        # ~0.5 µs per row more on Arrow-backed datasets (~300 µs per row is datasets' own cost
        # for generators).
        for t in self._arrow_ds().iter(batch_size=min(self.batch_rows, HF_STREAM_ROWS)):
            if not isinstance(t, pa.Table):  # older datasets: dict batches
                t = pa.table(t)
            col, origin = self._typed(self._col(t, k), k)
            yield col, k, origin
            k += len(col)


# -- Python objects ------------------------------------------------------------------------------
def _to_array(items: list, text_column: str) -> tuple[pa.Array, dict[int, str], dict[int, str]]:
    """A list of documents (str, bytes-like, None, row dicts, ...) packed into one array;
    ``(values, bad types by index, missing-column messages by index)``."""
    if all(type(x) is str for x in items):
        # (UTF-8 by several threads: _cpython_str; lone surrogates → U+FFFD, as to_bytes)
        data, offsets = pack_documents(items)
        return pa.Array.from_buffers(pa.large_string(), len(items), [
            None, pa.py_buffer(offsets), pa.py_buffer(data)]), {}, {}
    parts: list[bytes] = []
    valid: list[bool] = []
    bad: dict[int, str] = {}
    miss: dict[int, str] = {}
    for j, x in enumerate(items):
        if isinstance(x, Mapping) and not isinstance(x, (str, bytes)):
            if text_column in x:
                x = x[text_column]
            else:
                cols = ", ".join(map(str, x)) or "none"
                bad[j] = "dict"
                miss[j] = f"has no column {text_column!r} (columns: {cols})"
                parts.append(b"")
                valid.append(False)
                continue
        if isinstance(x, str):
            parts.append(to_bytes(x))
            valid.append(True)
        elif isinstance(x, (bytes, bytearray, memoryview)):
            try:
                parts.append(bytes(x))
            except ValueError as e:  # a released memoryview
                raise InputError(f"item {j}: cannot read the bytes ({e})") from e
            valid.append(True)
        else:
            parts.append(b"")
            valid.append(False)
            if x is not None:
                bad[j] = type(x).__name__
    return _pack_parts(parts, valid), bad, miss


class PyReader(Reader):
    """Python documents: a sequence (a shard reads only its items), an iterable, or a
    zero-argument callable returning one (called each time the reader is read).

    Items: ``str`` (UTF-8; lone surrogates → U+FFFD), bytes-like (as is), ``None`` (null), row
    dicts (their ``text_column``). Packed once per batch of ``batch_rows`` items.
    """

    def __init__(self, obj, text_column: str = "text", batch_rows: int = DEFAULT_BATCH_ROWS,
                 batch_bytes: int = DEFAULT_BATCH_BYTES) -> None:
        self.obj, self.text_column = obj, text_column
        self.batch_rows, self.batch_bytes = int(batch_rows), int(batch_bytes)
        self.stats: dict = {}

    def describe(self) -> str:
        return f"{type(self.obj).__name__} object"

    def _origin(self, k0: int, bad, miss) -> _Origin:
        return _Origin(lambda j, k0=k0: f"item {k0 + j}", bad,
                       (lambda j: miss.get(j)) if miss else None)

    def batches(self, shard: int = 0, num_shards: int = 1, start: int = 0
                ) -> Iterator[DocBatch]:
        obj = self.obj
        if callable(obj) and not isinstance(obj, Iterable):
            obj = obj()
        if isinstance(obj, Sequence) and not isinstance(obj, (str, bytes)):
            ks = range(shard + start * num_shards, len(obj), num_shards)
            for a in range(0, len(ks), self.batch_rows):
                sub = ks[a : a + self.batch_rows]
                items = []
                err = None
                for k in sub:
                    try:
                        items.append(obj[k])
                    except Exception as e:
                        if hasattr(e, "add_note"):
                            e.add_note(f"while reading document {k} (item {k}) of the source")
                        err = e
                        break
                if items:  # the documents before a failing item are delivered first
                    vals, bad, miss = _to_array(items, self.text_column)
                    idx = np.asarray(sub[: len(items)], np.int64)
                    origin = _Origin(lambda j, idx=idx: f"item {idx[j]}", bad,
                                     (lambda j, miss=miss: miss.get(j)) if miss else None)
                    yield DocBatch(vals, idx, np.arange(len(idx), dtype=np.int64), origin)
                if err is not None:
                    raise err
            return
        self._iterable = obj
        yield from super().batches(shard, num_shards, start)

    def _global(self, first: int):
        items: list = []
        size = 0
        k = 0
        it = iter(self._iterable)
        while True:
            try:
                x = next(it)
            except StopIteration:
                break
            except Exception:
                if items:  # the documents before the failure are delivered first
                    vals, bad, miss = _to_array(items, self.text_column)
                    yield vals, k, self._origin(k, bad, miss)
                raise
            items.append(x)
            size += len(x) if isinstance(x, (str, bytes, bytearray)) else 0
            if len(items) >= self.batch_rows or size >= self.batch_bytes:
                vals, bad, miss = _to_array(items, self.text_column)
                yield vals, k, self._origin(k, bad, miss)
                k += len(items)
                items, size = [], 0
        if items:
            vals, bad, miss = _to_array(items, self.text_column)
            yield vals, k, self._origin(k, bad, miss)


# ================================================================================================
# Picking a reader
# ================================================================================================
def open_source(source: Any, *, text_column: str = "text", format: str | None = None,
                sample_by: str = DEFAULT_SAMPLE_BY, threads: int | None = None) -> Reader:
    """The :class:`Reader` for ``source``: a Reader (as is), a :class:`TextSource`, a path or
    ``os.PathLike`` (or a sequence of them) of files, a ``datasets.Dataset``/
    ``IterableDataset``, a ``pyarrow`` array / table, or a list / iterable / callable of
    documents.

    Raises:
        InputError: a path that names no file, an unknown format, a missing column.
    """
    if isinstance(source, Reader):
        return source
    if isinstance(source, TextSource):
        return source.reader()
    if isinstance(source, os.PathLike) or (
            isinstance(source, Sequence) and not isinstance(source, (str, bytes)) and source
            and all(isinstance(p, os.PathLike) for p in source)):
        return FileReader(source, text_column, format, sample_by, threads)
    if isinstance(source, str):
        if os.path.isfile(source) or any(ch in source for ch in "*?["):
            return FileReader(source, text_column, format, sample_by, threads)
        raise InputError(f"source is a str that names no file ({source[:60]!r}); pass a list of "
                         "documents (e.g. [text]), a path, or FileReader(...)")
    if _is_hf(source, "Dataset") or _is_hf(source, "IterableDataset"):
        return HFReader(source, text_column)
    if isinstance(source, (pa.Array, pa.ChunkedArray)):
        return PyReader(_ArrowList(source), text_column)
    if isinstance(source, (pa.Table, pa.RecordBatch)):
        if text_column not in source.schema.names:
            raise InputError(f"the table has no column {text_column!r} (columns: "
                             f"{', '.join(source.schema.names)}); pass text_column=")
        return PyReader(_ArrowList(source.column(text_column)), text_column)
    if isinstance(source, Mapping):
        raise InputError("source is a mapping; pass a sequence of documents or a dataset")
    if not (isinstance(source, Iterable) or callable(source)):
        raise InputError(f"source of type {type(source).__name__} is not iterable")
    return PyReader(source, text_column)


class _ArrowList(Sequence):
    """An Arrow array seen as a sequence (so that it shards like a list), read as Arrow."""

    def __init__(self, arr) -> None:
        self.arr = _as_binary(arr)

    def __len__(self) -> int:
        return len(self.arr)

    def __getitem__(self, k):
        return self.arr[k].as_py()


# ================================================================================================
# TextSource: the CLI's description of where documents come from
# ================================================================================================
@dataclass(frozen=True)
class TextSource:
    """Where documents come from: a Hub/local dataset (through ``datasets``) or local files
    (through :class:`FileReader`).

    Attributes:
        dataset: Hub dataset name (``"wikitext"``, ``"allenai/c4"``) or a local dataset folder;
            ``None`` when ``data_files`` are given.
        data_files: local files or glob patterns.
        config: dataset configuration name (Hub datasets with several, e.g. ``"en"``).
        split: split to read (``"train"``).
        text_column: the column holding the document text.
        streaming: datasets: read lazily (no copy into the ``datasets`` cache).
        file_format: one of :data:`FORMATS` for ``data_files``; ``None`` infers it from each
            extension (:func:`infer_format`).
        sample_by: for plain-text files, what one document is: ``"line"`` (line breaks kept, so
            the documents joined give the file back), ``"paragraph"`` or ``"document"``.
        threads, nice: :class:`FileReader`'s (``--read-threads``, ``--read-nice``).
    """

    dataset: str | None = None
    data_files: tuple[str, ...] = ()
    config: str | None = None
    split: str = "train"
    text_column: str = "text"
    streaming: bool = True
    file_format: str | None = None
    sample_by: str = DEFAULT_SAMPLE_BY
    load_kwargs: dict = field(default_factory=dict, compare=False)
    threads: int | None = field(default=None, compare=False)
    nice: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        files = self.data_files
        if isinstance(files, (str, os.PathLike)):
            files = (files,)
        object.__setattr__(self, "data_files", tuple(str(f) for f in files))
        if (self.dataset is None) == (not self.data_files):
            raise InputError("give either a dataset name (--dataset) or data files (--data-files)")
        if self.sample_by not in SAMPLE_BY:
            raise InputError(f"sample_by must be one of {SAMPLE_BY}, got {self.sample_by!r}")
        if not self.text_column:
            raise InputError("text_column must be a non-empty column name")
        _normal_format(self.file_format)

    def describe(self) -> str:
        """Short human-readable name of the source, used in messages and summaries."""
        if self.dataset is not None:
            parts = [self.dataset] + ([self.config] if self.config else [])
            return f"dataset {'/'.join(parts)!s} split {self.split!r}"
        shown = ", ".join(self.data_files[:3]) + (" ..." if len(self.data_files) > 3 else "")
        return f"files {shown}"

    def reader(self) -> Reader:
        """The :class:`Reader` of this source (files are checked here; datasets open lazily).

        Raises:
            InputError: a file does not exist or has an unknown extension.
        """
        if self.data_files:
            return FileReader(self.data_files, self.text_column, self.file_format,
                              self.sample_by, self.threads, nice=self.nice)
        return _LazyHF(self)

    def load(self):
        """Open a ``dataset=`` source with ``datasets.load_dataset``.

        Returns:
            a ``datasets.IterableDataset`` (``streaming=True``) or ``datasets.Dataset``.
        Raises:
            InputError: the dataset cannot be found or reached (offline: "cannot reach the
                Hugging Face Hub ..."), the config or split is unknown; names the source.
        """
        try:
            import datasets
        except ImportError as e:  # pragma: no cover - datasets is a dependency
            raise InputError("reading datasets needs `pip install datasets`") from e
        if self.data_files:
            raise InputError("TextSource.load() is for dataset= sources; use reader()")
        kwargs: dict[str, Any] = dict(split=self.split, streaming=self.streaming)
        kwargs.update(self.load_kwargs)
        args = (self.dataset,) + ((self.config,) if self.config else ())
        from torch_gpubpe.io.hub import prepare_hub_access

        prepare_hub_access(self.dataset)  # no network: offline at once, not retries (issue 12)
        try:
            return datasets.load_dataset(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - datasets raises many kinds; all become one line
            raise InputError(_explain_load_error(self, e)) from e


class _LazyHF(Reader):
    """A TextSource(dataset=...) opened with ``datasets`` on first read."""

    def __init__(self, src: TextSource) -> None:
        self.src, self.text_column = src, src.text_column
        self._r: HFReader | None = None
        self.stats: dict = {}

    def describe(self) -> str:
        return self.src.describe()

    def _reader(self) -> HFReader:
        if self._r is None:
            self._r = HFReader(self.src.load(), self.text_column, what=self.src.describe())
        return self._r

    def batches(self, shard: int = 0, num_shards: int = 1, start: int = 0):
        try:
            yield from self._reader().batches(shard, num_shards, start)
        except InputError:
            raise
        except Exception as e:  # noqa: BLE001 - datasets/pyarrow errors while streaming
            raise InputError(_explain_load_error(self.src, e)) from e

    def __getstate__(self) -> dict:
        return dict(self.__dict__, _r=None, stats={})


def _explain_load_error(src: TextSource, e: Exception) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    what = src.describe()
    if isinstance(e, StopIteration):
        return f"empty corpus: {what} holds no rows (empty file?)"
    offline = isinstance(e, ConnectionError) or "Couldn't reach" in msg or "offline" in msg.lower()
    if offline:
        from torch_gpubpe.io.hub import explain_hub_failure

        line = explain_hub_failure(what, msg)  # unreachable, or HF_HUB_OFFLINE set by the user
        if line is not None:
            return line
        return (
            f"cannot load {what}: cannot reach the Hugging Face Hub ({msg}). Without network, "
            f"download the dataset elsewhere and pass its files with --data-files, or set "
            f"HF_HUB_OFFLINE=1 to use the local cache only"
        )
    if isinstance(e, FileNotFoundError):
        return f"cannot load {what}: no such dataset on the Hub or on disk ({msg})"
    if isinstance(e, ValueError) and "split" in msg.lower():
        return f"cannot load {what}: {msg} (choose one with --split)"
    if "config" in msg.lower():
        return f"cannot load {what}: {msg} (choose one with --config)"
    return f"cannot load {what}: {type(e).__name__}: {msg}"


# ================================================================================================
# The document stream of the CLI and the trainer: packed, nulls skipped, limits applied
# ================================================================================================
@dataclass
class Packed:
    """A packed batch of documents: ``data`` (uint8), ``offsets`` (int64, ``n + 1``, from 0)
    and ``indices`` (int64 global indices of the source's rows; the stream's own document
    numbers are ``first .. first + n - 1``)."""

    data: np.ndarray
    offsets: np.ndarray
    indices: np.ndarray
    first: int

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def nbytes(self) -> int:
        return int(self.offsets[-1])


def _char_cut(data: np.ndarray, a: int, room: int) -> int:
    """Bytes of ``data[a:]`` to keep, at most ``room``, not ending inside a UTF-8 character
    (steps back over at most 3 continuation bytes)."""
    c = room
    end = len(data)
    for _ in range(3):
        if c <= 0 or a + c >= end or (int(data[a + c]) & 0xC0) != 0x80:
            break
        c -= 1
    if a + c < end and c > 0 and (int(data[a + c]) & 0xC0) == 0x80:
        # more than 3 continuation bytes: not UTF-8 there; cut at the byte limit
        return room
    return c


def documents(reader: Reader, *, max_docs: int | None = None, max_bytes: int | None = None,
              skip_none: bool = True, stats: dict | None = None,
              batch_bytes: int = DEFAULT_BATCH_BYTES, max_batch_docs: int = 1 << 20,
              shard: int = 0, num_shards: int = 1) -> Iterator[Packed]:
    """The document stream of ``reader`` as :class:`Packed` batches of about ``batch_bytes``.

    Rows whose text is None are dropped (``skip_none``; counted in ``stats["skipped_none"]``,
    the first 100 row indices in ``stats["skipped_none_rows"]``) or raise; a value that is not
    text raises :class:`InputError` naming where it is. ``max_docs`` / ``max_bytes`` stop the
    stream; the document that crosses ``max_bytes`` is cut at a UTF-8 character boundary.
    """
    for name, val in (("max_docs", max_docs), ("max_bytes", max_bytes)):
        if val is not None and (not isinstance(val, (int, np.integer)) or val < 0):
            raise InputError(f"{name} must be a non-negative int or None, got {val!r}")
    stats = {} if stats is None else stats
    stats.setdefault("skipped_none", 0)
    stats.setdefault("skipped_none_rows", [])
    if max_docs == 0 or max_bytes == 0:
        return
    what = reader.describe()
    done_docs = done_bytes = 0
    pend: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    pend_bytes = pend_docs = 0
    first = 0

    def flush() -> Packed:
        nonlocal pend, pend_bytes, pend_docs, first
        if len(pend) == 1:
            d, o, i = pend[0]
        else:
            d = np.concatenate([p[0] for p in pend])
            o = np.zeros(sum(len(p[1]) - 1 for p in pend) + 1, np.int64)
            pos, base = 1, 0
            for p in pend:
                o[pos : pos + len(p[1]) - 1] = p[1][1:] + base
                pos += len(p[1]) - 1
                base += int(p[1][-1])
            i = np.concatenate([p[2] for p in pend])
        out = Packed(d, o, i, first)
        first += len(o) - 1
        pend, pend_bytes, pend_docs = [], 0, 0
        return out

    for b in reader.batches(shard, num_shards):
        vals = b.values
        if vals.null_count:
            valid = _valid_mask(vals)
            for j in np.flatnonzero(~valid).tolist():
                kind, detail = b.problem(j)
                loc = b.where(j) if isinstance(reader, FileReader) else f"row {b.indices[j]}"
                if kind == "type":
                    if detail == "dict" and b.origin.missing is not None:
                        raise InputError(f"{what}: row {b.indices[j]} {b.origin.missing(b.rows[j])}"
                                         f"; pass --text-column (text_column=) with one of them")
                    raise InputError(f"{what}: {loc}: column {reader.text_column!r} holds "
                                     f"{detail}, not text")
                if not skip_none:
                    raise InputError(f"{what}: {loc}: column {reader.text_column!r} is "
                                     f"None (missing)")
                stats["skipped_none"] += 1
                if len(stats["skipped_none_rows"]) < 100:
                    stats["skipped_none_rows"].append(int(b.indices[j]))
            b = b.take(np.flatnonzero(valid))
            vals = b.values
        if not len(vals):
            continue
        data, offsets = arrow_to_packed(vals)
        idx = b.indices
        n = len(offsets) - 1
        stop = False
        if max_docs is not None and done_docs + n >= max_docs:
            n = max_docs - done_docs
            stop = True
        if max_bytes is not None and done_bytes + int(offsets[n]) >= max_bytes:
            room = max_bytes - done_bytes
            m = int(np.searchsorted(offsets, room, side="left"))  # offsets[m] >= room
            m = max(m, 1)
            keep = room - int(offsets[m - 1])
            keep = _char_cut(data, int(offsets[m - 1]), keep)
            offsets = offsets[: m + 1].copy()
            offsets[m] = offsets[m - 1] + keep
            n = m
            stop = True
        offsets = offsets[: n + 1]
        data = data[: int(offsets[-1])]
        idx = idx[:n]
        done_docs += n
        done_bytes += int(offsets[-1])
        # split into pieces of about batch_bytes
        a = 0
        while a < n:
            room = batch_bytes - pend_bytes
            c = int(np.searchsorted(offsets, offsets[a] + room, side="left"))
            c = min(max(c, a + 1), n, a + max_batch_docs - pend_docs)
            c = max(c, a + 1)
            o = offsets[a : c + 1] - offsets[a]
            pend.append((data[int(offsets[a]) : int(offsets[c])], o, idx[a:c]))
            pend_bytes += int(o[-1])
            pend_docs += c - a
            a = c
            if pend_bytes >= batch_bytes or pend_docs >= max_batch_docs:
                yield flush()
        if stop:
            break
    if pend:
        yield flush()


def iter_texts(source: Any, *, text_column: str | None = None, max_docs: int | None = None,
               max_bytes: int | None = None, skip_docs: int = 0, skip_none: bool = True,
               stats: dict | None = None) -> Iterator[str]:
    """Documents of ``source`` as ``str``, one by one (the slow path, for small sources;
    ``bytes`` are decoded as UTF-8 with U+FFFD for bad bytes). ``max_docs``/``max_bytes``/
    ``skip_none``/``stats`` as in :func:`documents`; ``skip_docs`` documents are skipped first.

    Raises:
        InputError: the source cannot be opened; a row is not text (names the row).
    """
    col = text_column or (source.text_column if isinstance(source, TextSource) else "text")
    reader = _open_for_texts(source, col)
    for name, val in (("max_docs", max_docs), ("max_bytes", max_bytes)):
        if val is not None and (not isinstance(val, int) or val < 0):
            raise InputError(f"{name} must be a non-negative int or None, got {val!r}")
    limit = None if max_docs is None else max_docs + skip_docs
    return _texts(reader, limit, max_bytes, skip_docs, skip_none, stats)


def _texts(reader, limit, max_bytes, skip_docs, skip_none, stats):
    seen = 0
    for p in documents(reader, max_docs=limit, skip_none=skip_none, stats=stats):
        raw = p.data.tobytes()
        o = p.offsets.tolist()
        for j in range(len(o) - 1):
            seen += 1
            if seen <= skip_docs:
                continue
            doc = raw[o[j] : o[j + 1]]
            if max_bytes is not None:
                if max_bytes <= 0:
                    return
                if len(doc) >= max_bytes:  # the last document, cut at a character boundary
                    yield doc[: _char_cut(np.frombuffer(doc, np.uint8), 0, max_bytes)].decode(
                        "utf-8", errors="replace")
                    return
                max_bytes -= len(doc)
            yield doc.decode("utf-8", errors="replace")


def _open_for_texts(source: Any, col: str) -> Reader:
    if isinstance(source, (str, os.PathLike)) and not isinstance(source, Reader):
        p = str(source)
        if os.path.isfile(p) or any(ch in p for ch in "*?["):
            return FileReader(p, col)
        try:
            infer_format(p)
            return FileReader(p, col)  # raises "does not exist"
        except InputError as e:
            if "does not exist" in str(e):
                raise
        return _LazyHF(TextSource(dataset=p, text_column=col))
    if isinstance(source, TextSource):
        return source.reader()
    return open_source(source, text_column=col)


def count_utf8_bytes(texts: Sequence[str]) -> int:
    """Total UTF-8 bytes of ``texts`` (lone surrogates count as U+FFFD, as the encoder sees
    them, DESIGN.md §1)."""
    return sum(len(to_bytes(t)) for t in texts)


__all__ = [
    "DEFAULT_SAMPLE_BY", "FORMATS", "SAMPLE_BY", "DocBatch", "FileReader", "HFReader", "Packed",
    "PyReader", "Reader", "TextSource", "arrow_to_packed", "documents", "expand_paths",
    "infer_format", "iter_texts", "open_source", "packed_to_arrow", "prefetch",
]


class TextFiles(FileReader):
    """:class:`FileReader` under its former ``torch_gpubpe.integrations.torch_data`` name and keywords.

    Args:
        paths, text_column: as :class:`FileReader`.
        sample_by: ``"line"`` (default), ``"paragraph"`` or ``"document"`` — the same rule and
            names as the CLI's ``--sample-by``.
        text_documents: former name of ``sample_by`` (``"file"`` = ``"document"``, ``"line"``).
        format: ``"auto"`` (from the extension), ``"jsonl"``, ``"text"`` or any of
            :data:`FORMATS`.
    """

    def __init__(self, paths, text_column: str = "text", text_documents: str | None = None,
                 format: str = "auto", *, sample_by: str | None = None, **kwargs) -> None:
        if text_documents is not None:
            if text_documents not in ("file", "line", "document", "paragraph"):
                raise ValueError(f"text_documents must be 'file' or 'line', got "
                                 f"{text_documents!r}")
            sample_by = sample_by or {"file": "document"}.get(text_documents, text_documents)
        super().__init__(paths, text_column, format, sample_by or DEFAULT_SAMPLE_BY, **kwargs)


__all__ += ["TextFiles"]
