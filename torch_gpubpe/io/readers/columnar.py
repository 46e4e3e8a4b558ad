"""Parquet, Arrow IPC/feather and CSV/TSV files, the columnar formats of
:class:`~torch_gpubpe.io.readers.files.FileReader` (a mixin of it: it uses the reader's
``text_column``, ``threads``, ``chunk_bytes``, ``_file``, ``_missing_column`` and ``_typed``)."""

from __future__ import annotations

import pyarrow as pa

from torch_gpubpe._util import ordered
from torch_gpubpe.errors import InputError
from torch_gpubpe.io.compression import split_ext
from torch_gpubpe.io.formats import FORMATS
from torch_gpubpe.io.readers.base import Origin


class ColumnarFormats:
    """The parquet, Arrow and CSV readers of :class:`~torch_gpubpe.io.readers.files.FileReader`:
    each yields ``(values, origin)`` for consecutive rows of ``paths``."""

    def _parquet(self, paths, pool, skip):
        import pyarrow.parquet as pq  # (lazy, as pyarrow.csv: only sources of the format import it)

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
            # (the text column's decoded bytes per row group: what a read one holds until
            # handed on; 0 where the column is nested, not one leaf)
            col = next((i for i in range(md.num_columns)
                        if md.schema.column(i).path == self.text_column), None)
            base = 0
            for g in range(md.num_row_groups):
                rg = md.row_group(g)
                size = rg.column(col).total_uncompressed_size if col is not None else 0
                tasks.append((t, p, md, g, rg.num_rows, base, size))
                base += rg.num_rows

        def read(p, md, g):
            f = pq.ParquetFile(p, metadata=md)
            # decoded on this (the pool's) thread: Arrow's own pool may have 1 thread
            # (FileReader's ``threads``)
            return f.read_row_group(g, columns=[self.text_column], use_threads=False).column(0)

        def gen():
            nonlocal skip
            for _t, p, md, g, n, base, _size in tasks:
                if skip >= n:  # a resumed shard: this row group is before anything needed
                    skip -= n
                    yield (lambda n=n: n)
                    continue
                skip = 0
                yield (lambda p=p, md=md, g=g: read(p, md, g))

        results = ordered(gen(), pool, 2 * self.threads, sizes=(task[6] for task in tasks),
                          max_size=self.read_ahead_bytes)
        for (t, p, md, g, n, base, _size), col in zip(tasks, results):
            self._file = t
            if isinstance(col, int):
                yield pa.nulls(col, pa.large_binary()), Origin(lambda j: "")
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
            ext, _ = split_ext(p)
            popts = pcsv.ParseOptions(delimiter="\t" if ext == ".tsv" else ",",
                                      newlines_in_values=True)
            copts = pcsv.ConvertOptions(column_types={self.text_column: pa.large_string()},
                                        include_columns=[self.text_column],
                                        strings_can_be_null=False)
            try:
                rd = pcsv.open_csv(p, parse_options=popts, convert_options=copts,
                                   read_options=pcsv.ReadOptions(block_size=self.chunk_bytes))
            except (pa.ArrowInvalid, pa.ArrowKeyError) as e:  # (a missing column: KeyError)
                if "include_columns" in str(e) or "does not exist" in str(e):
                    try:
                        hdr = pcsv.open_csv(p, parse_options=popts).schema.names
                    except pa.ArrowException as e2:
                        raise InputError(f"{p}: cannot be read as CSV ({e2})") from e2
                    raise self._missing_column(p, hdr) from e
                raise InputError(f"{p}: cannot be read as CSV ({e})") from e
            base = 0
            for rb in rd:
                col = rb.column(0)
                yield col, Origin(lambda j, p=p, base=base: f"{p}:row {base + j}")
                base += len(col)
