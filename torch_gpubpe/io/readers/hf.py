"""Hugging Face datasets as a reader: :class:`HFReader` (``datasets.Dataset`` zero copy from
its Arrow table, ``datasets.IterableDataset`` in Arrow batches). DESIGN.md §6."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from torch_gpubpe._util import is_hf
from torch_gpubpe.errors import InputError
from torch_gpubpe.io.arrow_pack import arrow_indices, as_binary, is_text_type, valid_mask
from torch_gpubpe.io.readers.base import DEFAULT_BATCH_ROWS, DocBatch, Origin, Reader

HF_STREAM_ROWS = 128           # rows per batch read from a datasets.IterableDataset


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
        self.map_style = is_hf(ds, "Dataset")
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
        col = as_binary(col)
        describe = (lambda j, k0=k0: f"row {k0 + j}")
        if is_text_type(col.type):
            return col, Origin(describe)
        if pa.types.is_null(col.type):
            return pa.nulls(len(col), pa.large_binary()), Origin(describe)
        bad = {int(r): str(col.type) for r in np.flatnonzero(valid_mask(col))}
        return pa.nulls(len(col), pa.large_binary()), Origin(describe, bad)

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
            vals = col if num_shards == 1 else col.take(arrow_indices(js))
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
