"""One reader layer: documents as Arrow arrays (one data buffer + offsets), from files, Hugging
Face datasets and Python iterables (DESIGN.md §6).

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

from torch_gpubpe._util import Pump, prefetch
from torch_gpubpe.io.arrow_pack import arrow_to_packed, packed_to_arrow, valid_mask
from torch_gpubpe.io.compression import (  # noqa: F401 - re-exported names
    GZIP_WITHOUT_ISAL,
    ISAL_BUFFERED,
    isal_igzip,
    open_raw,
)
from torch_gpubpe.io.formats import (  # noqa: F401 - re-exported names
    DEFAULT_SAMPLE_BY,
    FORMATS,
    MAX_CONTROL_SHARE,
    MAX_NUL_SHARE,
    MIN_SUSPECT_BYTES,
    SAMPLE_BY,
    TEXT_CHECK_BYTES,
    expand_paths,
    infer_format,
    looks_binary,
)
from torch_gpubpe.io.readers.base import DEFAULT_BATCH_ROWS, DocBatch, Reader  # noqa: F401
from torch_gpubpe.io.readers.files import (  # noqa: F401 - re-exported names
    DEFAULT_CHUNK_BYTES,
    DEFAULT_READ_AHEAD_BYTES,
    FileReader,
    TextFiles,
)
from torch_gpubpe.io.readers.hf import HF_STREAM_ROWS, HFReader  # noqa: F401
from torch_gpubpe.io.readers.packed import (  # noqa: F401 - re-exported names
    DEFAULT_BATCH_BYTES,
    MAX_PACKED_BYTES,
    Packed,
    documents,
)
from torch_gpubpe.io.readers.pick import count_utf8_bytes, iter_texts, open_source  # noqa: F401
from torch_gpubpe.io.readers.python import PyReader, items_to_array
from torch_gpubpe.io.readers.text_source import TextSource, explain_load_error

# Former private names that code outside this package imported from here.
_Pump = Pump
_explain_load_error = explain_load_error
_isal_igzip = isal_igzip
_open_raw = open_raw
_to_array = items_to_array
_valid_mask = valid_mask

__all__ = [
    "DEFAULT_SAMPLE_BY", "FORMATS", "SAMPLE_BY", "DocBatch", "FileReader", "HFReader", "Packed",
    "PyReader", "Reader", "TextSource", "arrow_to_packed", "documents", "expand_paths",
    "infer_format", "iter_texts", "open_source", "packed_to_arrow", "prefetch", "TextFiles",
]
