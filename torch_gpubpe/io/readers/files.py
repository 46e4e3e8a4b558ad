"""Documents from local files: :class:`FileReader` (parquet, Arrow IPC/feather, JSON Lines
plain or compressed, CSV/TSV, plain text; DESIGN.md §6) and :class:`TextFiles`, its former name.

A run of consecutive files of one format is read together on one thread pool; the format
readers are mixins, one module per format family (:mod:`~torch_gpubpe.io.readers.columnar`,
:mod:`~torch_gpubpe.io.readers.jsonl`, :mod:`~torch_gpubpe.io.readers.text`)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from torch_gpubpe import notices
from torch_gpubpe.errors import InputError
from torch_gpubpe.io.arrow_pack import as_binary, is_text_type, valid_mask
from torch_gpubpe.io.formats import (DEFAULT_SAMPLE_BY, SAMPLE_BY, expand_paths, infer_format,
                                     normal_format)
from torch_gpubpe.io.readers.base import Origin, Reader
from torch_gpubpe.io.readers.columnar import ColumnarFormats
from torch_gpubpe.io.readers.jsonl import JsonLinesFormat
from torch_gpubpe.io.readers.text import PlainTextFormat

DEFAULT_CHUNK_BYTES = 8 << 20  # JSON Lines / text: decompressed bytes parsed per task


def _ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


DEFAULT_READ_AHEAD_BYTES = min(4 << 30, _ram_bytes() // 8)


class FileReader(ColumnarFormats, JsonLinesFormat, PlainTextFormat, Reader):
    """Documents from local files of one or several formats (see :mod:`torch_gpubpe.io.readers`).

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
            may hold ahead (their threads decompress in parallel), and that parquet row groups
            read ahead of the consumer may hold (default :data:`DEFAULT_READ_AHEAD_BYTES`, 1/8
            of the RAM, at most 4 GiB).
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

    where_names_file = True

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
        self.format = normal_format(format)
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

    def _global(self, first: int) -> Iterator[tuple[pa.Array, int, Origin]]:
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
            notices.warn_once(f"torch_gpubpe.io.readers: nice={self.nice} not applied to the "
                              f"reader threads ({e})", stacklevel=2)

    # Each format reader yields (values, origin) for consecutive rows; ``skip`` rows at the start
    # may be returned as arrays of nulls (cheap) instead of read: nobody looks at them.
    def _missing_column(self, path: str, names: Sequence[str]) -> InputError:
        return InputError(
            f"{path}: no column {self.text_column!r} (columns: {', '.join(map(str, names))}); "
            f"pass --text-column (text_column=) with one of them")

    def _typed(self, col: pa.Array, path: str, describe) -> tuple[pa.Array, Origin]:
        """A column as text (or nulls + type names when it holds something else)."""
        col = as_binary(col)
        if is_text_type(col.type):
            return col, Origin(describe)
        if pa.types.is_null(col.type):
            return pa.nulls(len(col), pa.large_binary()), Origin(describe)
        valid = np.flatnonzero(valid_mask(col))
        bad = {int(r): str(col.type) for r in valid}
        return pa.nulls(len(col), pa.large_binary()), Origin(describe, bad)


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
