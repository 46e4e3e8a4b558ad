"""Python objects as a reader: :class:`PyReader` (a sequence, iterable or callable of ``str``,
bytes-like, ``None`` or row dicts, packed once per batch) and :class:`ArrowList` (an Arrow
array read like a list). DESIGN.md §6."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from torch_gpubpe.core.packing import pack_documents
from torch_gpubpe.core.reference import to_bytes
from torch_gpubpe.errors import InputError
from torch_gpubpe.io.arrow_pack import as_binary, pack_parts
from torch_gpubpe.io.readers.base import DEFAULT_BATCH_ROWS, DocBatch, Origin, Reader
from torch_gpubpe.io.readers.packed import DEFAULT_BATCH_BYTES


def items_to_array(items: list, text_column: str
                   ) -> tuple[pa.Array, dict[int, str], dict[int, str]]:
    """A list of documents (str, bytes-like, None, row dicts, ...) packed into one array;
    ``(values, bad types by index, missing-column messages by index)``."""
    if all(type(x) is str for x in items):
        # (UTF-8 by several threads: core.str_pack; lone surrogates → U+FFFD, as to_bytes)
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
    return pack_parts(parts, valid), bad, miss


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

    def _origin(self, k0: int, bad, miss) -> Origin:
        return Origin(lambda j, k0=k0: f"item {k0 + j}", bad,
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
                    vals, bad, miss = items_to_array(items, self.text_column)
                    idx = np.asarray(sub[: len(items)], np.int64)
                    origin = Origin(lambda j, idx=idx: f"item {idx[j]}", bad,
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
                    vals, bad, miss = items_to_array(items, self.text_column)
                    yield vals, k, self._origin(k, bad, miss)
                raise
            items.append(x)
            size += len(x) if isinstance(x, (str, bytes, bytearray)) else 0
            if len(items) >= self.batch_rows or size >= self.batch_bytes:
                vals, bad, miss = items_to_array(items, self.text_column)
                yield vals, k, self._origin(k, bad, miss)
                k += len(items)
                items, size = [], 0
        if items:
            vals, bad, miss = items_to_array(items, self.text_column)
            yield vals, k, self._origin(k, bad, miss)


class ArrowList(Sequence):
    """An Arrow array seen as a sequence (so that it shards like a list), read as Arrow."""

    def __init__(self, arr) -> None:
        self.arr = as_binary(arr)

    def __len__(self) -> int:
        return len(self.arr)

    def __getitem__(self, k):
        try:
            return self.arr[k].as_py()
        except UnicodeDecodeError as e:  # string bytes that are not UTF-8 (a bad file, a view)
            raise InputError(f"row {k} of the Arrow {self.arr.type} array is not valid UTF-8 "
                             f"({e.reason} at byte {e.start}); read the column as binary "
                             "(e.g. .cast(pa.binary())) to take its bytes as they are") from e
