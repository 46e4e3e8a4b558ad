"""From anything that holds documents to a reader: :func:`open_source` (the :class:`Reader` of
a path, dataset, Arrow array, list, iterable ...) and :func:`iter_texts` (its documents as
``str``, the slow path for small sources)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from torch_gpubpe._util import is_hf
from torch_gpubpe.core.reference import to_bytes
from torch_gpubpe.errors import InputError
from torch_gpubpe.io.arrow_pack import is_text_type
from torch_gpubpe.io.formats import DEFAULT_SAMPLE_BY, infer_format
from torch_gpubpe.io.readers.base import Reader
from torch_gpubpe.io.readers.files import FileReader
from torch_gpubpe.io.readers.hf import HFReader
from torch_gpubpe.io.readers.packed import char_cut, documents
from torch_gpubpe.io.readers.python import ArrowList, PyReader
from torch_gpubpe.io.readers.text_source import LazyHFReader, TextSource


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
    if is_hf(source, "Dataset") or is_hf(source, "IterableDataset"):
        return HFReader(source, text_column)
    if isinstance(source, (pa.Array, pa.ChunkedArray)):
        _check_arrow_type(source.type, "the Arrow array")
        return PyReader(ArrowList(source), text_column)
    if isinstance(source, (pa.Table, pa.RecordBatch)):
        names = source.schema.names
        if text_column not in names:
            raise InputError(f"the table has no column {text_column!r} (columns: "
                             f"{', '.join(names)}); pass text_column=")
        if names.count(text_column) > 1:
            raise InputError(f"the table has {names.count(text_column)} columns named "
                             f"{text_column!r}; rename them or pass text_column=")
        col = source.column(text_column)
        _check_arrow_type(col.type, f"the table's column {text_column!r}")
        return PyReader(ArrowList(col), text_column)
    if isinstance(source, Mapping):
        raise InputError("source is a mapping; pass a sequence of documents or a dataset")
    if not (isinstance(source, Iterable) or callable(source)):
        raise InputError(f"source of type {type(source).__name__} is not iterable")
    return PyReader(source, text_column)


def _check_arrow_type(t: pa.DataType, what: str) -> None:
    """Refuse, by name, an Arrow type that holds no text (numbers, lists ...): text (string,
    binary and their large and view forms, also dictionary- or run-end-encoded), nulls, or
    structs (rows, read as dicts) are read."""
    encoded = pa.types.is_dictionary(t) or pa.types.is_run_end_encoded(t)
    base = t.value_type if encoded else t
    if not (is_text_type(base) or pa.types.is_null(base) or pa.types.is_struct(base)
            or pa.types.is_fixed_size_binary(base)):
        raise InputError(f"{what} holds {t}, not text: pass a string or binary array")


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
                    yield doc[: char_cut(np.frombuffer(doc, np.uint8), 0, max_bytes)].decode(
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
        return LazyHFReader(TextSource(dataset=p, text_column=col))
    if isinstance(source, TextSource):
        return source.reader()
    return open_source(source, text_column=col)


def count_utf8_bytes(texts: Sequence[str]) -> int:
    """Total UTF-8 bytes of ``texts`` (lone surrogates count as U+FFFD, as the encoder sees
    them, DESIGN.md §1)."""
    return sum(len(to_bytes(t)) for t in texts)
