"""Arrow columns in and out of the Ray actors (zero copy both ways): a text column as packed
UTF-8 bytes + offsets for the GPU encoder, the encoder's ids as a ``list<id dtype>`` column.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from torch_gpubpe.errors import InputError


def packed(column) -> tuple[np.ndarray, np.ndarray]:
    """An Arrow string/binary column → ``(uint8 data, int64 offsets from 0)``, zero copy
    (:func:`torch_gpubpe.io.readers.arrow_to_packed`).

    Raises:
        InputError: a null document (names its row in the batch) or a non-text column.
    """
    from torch_gpubpe.io.readers import arrow_to_packed

    return arrow_to_packed(column, nulls="error")


def packed_chunks(column) -> list[tuple[np.ndarray, np.ndarray]]:
    """An Arrow string/binary column → its chunks as :func:`packed` pairs, each zero copy
    (a batch Ray joined from several blocks stays in pieces; empty chunks dropped).

    Raises:
        InputError: as :func:`packed` (a null's row counted over the whole column).
    """
    import pyarrow as pa

    if not isinstance(column, pa.ChunkedArray) or column.num_chunks <= 1 or column.null_count:
        return [packed(column)]       # one piece, or the null's row named over the column
    return [packed(c) for c in column.chunks if len(c)]


def table_with(batch, column: str, option: str):
    """A Ray batch (``pyarrow.Table`` or ``RecordBatch``) as a ``pyarrow.Table``, checked to hold
    ``column``.

    Raises:
        InputError: the batch has no ``column`` (names the batch's columns and ``option=``, the
            argument to pass).
    """
    import pyarrow as pa

    if isinstance(batch, pa.RecordBatch):
        batch = pa.Table.from_batches([batch])
    if column not in batch.column_names:
        raise InputError(f"the batch has no column {column!r} (columns: "
                         f"{batch.column_names}); pass {option}=")
    return batch


def token_column(parts: Sequence[tuple[np.ndarray, np.ndarray]], id_dtype):
    """Sub-batches' (flat ids, int64 token offsets from 0) → one ``list<id dtype>`` chunked
    array, a chunk per sub-batch over its ids without a copy (``large_list`` when a sub-batch
    passes 2^31 tokens)."""
    import pyarrow as pa

    large = any(int(o[-1]) >= 1 << 31 for _, o in parts)
    make = pa.LargeListArray if large else pa.ListArray
    chunks = [make.from_arrays(pa.array(o if large else o.astype(np.int32)), pa.array(i))
              for i, o in parts]
    typ = (pa.large_list if large else pa.list_)(pa.from_numpy_dtype(np.dtype(id_dtype)))
    return pa.chunked_array(chunks, typ)


def ids_and_offsets(enc) -> tuple[np.ndarray, np.ndarray]:
    """A ``BatchEncoding``'s flat ids and int64 token offsets as numpy arrays (no copy when
    they are already)."""
    return np.asarray(enc.ids), np.asarray(enc.offsets, np.int64)
