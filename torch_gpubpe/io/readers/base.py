"""The reader interface: :class:`Reader` (a source of documents that can be read by shard), the
:class:`DocBatch` it gives, and :class:`Origin` (where a batch's rows came from, for messages).
DESIGN.md §6; the module docstring of :mod:`torch_gpubpe.io.readers` gives the sources."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from torch_gpubpe._util import prefetch
from torch_gpubpe.io.arrow_pack import arrow_indices, arrow_to_packed
from torch_gpubpe.io.readers.packed import DEFAULT_BATCH_BYTES, documents

DEFAULT_BATCH_ROWS = 1 << 16   # rows per batch from Python iterables and datasets


class Origin:
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
    origin: Origin = field(repr=False)

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

    def missing_field(self, j: int) -> str | None:
        """Where document ``j``'s row is a dict without the text field (a ``"type"`` problem
        of detail ``"dict"``): the fields it has, as :meth:`problem`'s ``"missing"`` says them;
        else None."""
        if self.origin.missing is None or self.origin.bad.get(int(self.rows[j])) != "dict":
            return None
        return self.origin.missing(int(self.rows[j]))

    def take(self, js: np.ndarray) -> DocBatch:
        js = np.asarray(js, np.int64)
        return DocBatch(self.values.take(arrow_indices(js)), self.indices[js], self.rows[js],
                        self.origin)

    def slice(self, a: int, b: int) -> DocBatch:
        return DocBatch(self.values.slice(a, b - a), self.indices[a:b], self.rows[a:b],
                        self.origin)


def shard_of(values: pa.Array, k0: int, origin: Origin, shard: int, num_shards: int,
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
    return DocBatch(values.take(arrow_indices(js)), k0 + js, js, origin)


class Reader:
    """Base class: a source of documents that can be read by shard (see :mod:`torch_gpubpe.io.readers`).

    Subclasses implement :meth:`_global` (batches ``(values, k0, origin)`` in order, where
    ``values[j]`` is document ``k0 + j``; ``first`` is the first global index anyone needs, so
    whole batches before it may be skipped without reading them) or override :meth:`batches`.
    """

    text_column = "text"
    stats: dict
    where_names_file = False
    """Whether :meth:`DocBatch.where` names a file and line: messages about a row then say
    that; other readers' rows are named by their global index (``row N``)."""

    def describe(self) -> str:
        return type(self).__name__

    def _global(self, first: int) -> Iterator[tuple[pa.Array, int, Origin]]:
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
            b = shard_of(values, k0, origin, shard, num_shards, start)
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
