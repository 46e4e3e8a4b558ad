"""Arrow string/binary arrays ⇄ packed ``(uint8 data, int64 offsets)`` numpy pairs, the form the
GPU encoder and the word counters take (zero copy where the layouts agree). Part of the reader
layer (DESIGN.md §6, :mod:`torch_gpubpe.io.readers`).

Nothing here calls ``is_valid().to_numpy()`` or ``pa.array(numpy)``: in a fresh process (every
DataLoader worker) either imports pandas through pyarrow, 0.3-0.5 s."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from torch_gpubpe.errors import InputError


def is_text_type(t: pa.DataType) -> bool:
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
    if not is_text_type(t):
        raise InputError(f"expected a string or binary Arrow array, got {t}")
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        values = values.cast(pa.large_binary())
    if values.null_count:
        if nulls == "error":
            j = int(np.flatnonzero(~valid_mask(values))[0])
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
        lens[~valid_mask(values)] = 0
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


def arrow_indices(js: np.ndarray) -> pa.Array:
    """int64 indices as an Arrow array without a copy. Not ``pa.array(js)``: in a fresh process
    (every DataLoader worker) that imports pandas, 0.3 s, through pyarrow's pandas check."""
    a = np.ascontiguousarray(js, np.int64)
    return pa.Array.from_buffers(pa.int64(), len(a), [None, pa.py_buffer(a)])


def valid_mask(values: pa.Array) -> np.ndarray:
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


def as_binary(values: pa.Array) -> pa.Array:
    """A string/binary array as is (view types cast to large_binary); chunked → one chunk."""
    if isinstance(values, pa.ChunkedArray):
        values = (values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)) \
            if values.num_chunks else pa.array([], pa.large_binary())
    if pa.types.is_string_view(values.type) or pa.types.is_binary_view(values.type):
        values = values.cast(pa.large_binary())
    return values


def pack_parts(parts: list[bytes], valid: list[bool] | None = None) -> pa.Array:
    """``bytes`` documents as a ``large_binary`` array (null where ``valid`` is False)."""
    lengths = np.fromiter(map(len, parts), np.int64, len(parts))
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.frombuffer(b"".join(parts), np.uint8)
    vbuf = None
    if valid is not None and not all(valid):
        vbuf = pa.py_buffer(np.packbits(np.array(valid, bool), bitorder="little"))
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(parts),
                                            [vbuf, pa.py_buffer(offsets), pa.py_buffer(data)])
