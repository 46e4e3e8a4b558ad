"""Documents → packed batches on the host (DESIGN.md §2's input to both word counters).

:func:`document_batches` packs an iterable of documents (or takes a reader's own packed batches)
into ``(uint8 data, int64 offsets)`` batches; :class:`HostBatch` is one GPU batch held as the
pieces it was assembled from (never joined unless a CPU path needs it);
:func:`check_documents` is the named error for one ``str`` passed where documents are expected.

Example::

    >>> from torch_gpubpe.training.batches import document_batches
    >>> [(d.tobytes(), o.tolist()) for d, o in document_batches(["ab", "c"], 1 << 20, {})]
    [(b'abc', [0, 2, 3])]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from torch_gpubpe.core import str_pack
from torch_gpubpe.core.reference import to_bytes
from torch_gpubpe.errors import InputError


def document_batches(documents: Iterable[str | bytes], batch_bytes: int,
             info: dict) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield packed ``(data uint8, offsets int64)`` batches of about ``batch_bytes`` bytes.

    A source with a ``packed_batches(batch_bytes)`` method (a
    :class:`torch_gpubpe.io.readers.Reader`, the CLI's corpus reader) gives its batches as they
    are: no Python object per document. Other documents are packed by
    :func:`torch_gpubpe.core.str_pack.pack_batches` (one compiled, GIL-free call per batch on a
    pool thread, ``str_pack.BATCH_THREADS`` batches in flight); where that is not available, one
    ``to_bytes`` per document on this thread. :func:`str_packer` says which.

    ``info`` is updated with ``num_documents`` and ``corpus_bytes`` as batches are yielded."""
    packed = getattr(documents, "packed_batches", None)
    if packed is not None:
        for data, offsets in packed(batch_bytes):
            info["num_documents"] = info.get("num_documents", 0) + len(offsets) - 1
            info["corpus_bytes"] = info.get("corpus_bytes", 0) + int(offsets[-1])
            yield data, offsets
        return
    if str_pack.available():   # (the compiled packer: one pool task per batch, GIL-free)
        yield from str_pack.pack_batches(documents, batch_bytes, info)
        return
    parts: list[bytes] = []
    size = 0
    for k, doc in enumerate(documents):
        try:
            b = to_bytes(doc)
        except TypeError as e:
            raise InputError(f"document {k}: {e}") from e
        info["num_documents"] = k + 1
        info["corpus_bytes"] = info.get("corpus_bytes", 0) + len(b)
        parts.append(b)
        size += len(b)
        if size >= batch_bytes:
            yield _pack(parts)
            parts, size = [], 0
    if parts:
        yield _pack(parts)


def str_packer(documents) -> str:
    """Which packer :func:`document_batches` takes for ``documents`` (``train()``'s
    ``stats["str_packer"]``)."""
    if getattr(documents, "packed_batches", None) is not None:
        return "the source's packed batches"
    if str_pack.available():
        return f"str_pack, {str_pack.BATCH_THREADS} threads"
    return "to_bytes per document"


def _pack(parts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter((len(p) for p in parts), np.int64, len(parts))
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return np.frombuffer(b"".join(parts), np.uint8), offsets



def check_documents(documents) -> None:
    """Raise :class:`InputError` when ``documents`` is one ``str``/``bytes`` (an iterable of
    documents is expected)."""
    if isinstance(documents, (str, bytes, bytearray, memoryview)):
        hint = "pass [text] for one document"
        if isinstance(documents, str) and len(documents) < 4096:
            import glob
            import os

            if os.path.exists(documents) or glob.glob(documents):
                hint = (f"{documents!r} names files: pass "
                        f"torch_gpubpe.io.readers.FileReader({documents!r}) to read them")
        raise InputError(
            "expected an iterable of documents, got one str/bytes (it would be read as one "
            f"document per character); {hint}"
        )
    try:
        iter(documents)
    except TypeError:
        raise InputError(
            f"expected an iterable of documents (str or bytes), got {type(documents).__name__}"
        ) from None


class HostBatch:
    """One batch on the host, as the pieces it was assembled from (never joined unless a CPU
    path needs it): ``pieces`` = ``[(start in the batch, uint8 data, int64 offsets from 0)]``.

    Attributes:
        n: bytes in the batch.
        offsets: int64, shape ``(num_docs + 1,)``: the documents of the whole batch.
    """

    def __init__(self, data: np.ndarray | None = None, offsets: np.ndarray | None = None,
                 pieces: list | None = None) -> None:
        if pieces is None:
            pieces = [(0, data, np.asarray(offsets, np.int64))]
        self.pieces = pieces
        self.n = sum(len(d) for _, d, _ in pieces)
        self._array = data
        self._offsets = None if pieces is not None and data is None else offsets

    @property
    def offsets(self) -> np.ndarray:
        if self._offsets is None:
            parts = [o[:-1] + b for b, _, o in self.pieces] + [np.array([self.n], np.int64)]
            self._offsets = np.concatenate(parts)
        return self._offsets

    def array(self) -> np.ndarray:
        """The batch's bytes, joined (a copy unless it is one piece)."""
        if self._array is None:
            self._array = (self.pieces[0][1] if len(self.pieces) == 1
                           else np.concatenate([d for _, d, _ in self.pieces]))
        return self._array

    def words(self, pos: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The words ``[pos[k], ends[k])`` (sorted, each inside one document) as (bytes back to
        back, int64 lengths)."""
        bases = np.array([b for b, _, _ in self.pieces], np.int64)
        which = np.searchsorted(bases, pos, side="right") - 1
        out = []
        for i in np.unique(which).tolist():
            b, d, _ = self.pieces[i]
            sel = which == i
            out.append(gather_runs(d, pos[sel] - b, ends[sel] - b))
        return (np.concatenate(out) if out else np.zeros(0, np.uint8)), ends - pos


def gather_runs(data: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """``data[s[0]:e[0]] + data[s[1]:e[1]] + ...`` for sorted, disjoint runs."""
    if len(s) <= 1024:          # long words are ≥ MAXW bytes: few per batch
        return np.concatenate([data[a:b] for a, b in zip(s.tolist(), e.tolist())])
    mark = np.zeros(len(data) + 1, np.int8)
    mark[s] = 1
    mark[e] -= 1
    return data[np.cumsum(mark[:-1], dtype=np.int8).view(bool)]

