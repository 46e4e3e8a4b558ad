"""The document stream of the CLI and the trainer: a reader's documents as :class:`Packed`
batches of about ``batch_bytes`` (null rows skipped and counted, ``max_docs`` / ``max_bytes``
applied, the last document cut at a UTF-8 character boundary). DESIGN.md §6."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from torch_gpubpe.errors import InputError
from torch_gpubpe.io.arrow_pack import arrow_to_packed, valid_mask

DEFAULT_BATCH_BYTES = 16 << 20
MAX_PACKED_BYTES = 1 << 31     # packed batches stay below 2 GiB (int32-addressable on the GPU)


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


def char_cut(data: np.ndarray, a: int, room: int) -> int:
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


def documents(reader: Any, *,   # a Reader (io.readers.base, which imports this module)
              max_docs: int | None = None, max_bytes: int | None = None,
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
    names_files = getattr(reader, "where_names_file", False)  # file:line, else row N
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
            valid = valid_mask(vals)
            for j in np.flatnonzero(~valid).tolist():
                kind, detail = b.problem(j)
                # "file:line" names the file already: the source's description would repeat it
                loc = b.where(j) if names_files else f"{what}: row {b.indices[j]}"
                if kind == "type":
                    # a row (dict) without the column, or a row whose column holds a dict
                    why = b.missing_field(j)
                    if why is not None:
                        raise InputError(f"{loc} {why}; pass --text-column (text_column=) "
                                         "with one of them")
                    raise InputError(f"{loc}: column {reader.text_column!r} holds {detail}, "
                                     "not text")
                if not skip_none:
                    raise InputError(f"{loc}: column {reader.text_column!r} is None (missing)")
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
            keep = char_cut(data, int(offsets[m - 1]), keep)
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
