"""Document packing: documents -> one byte stream + offsets, and the bitmaps the GPU reads (DESIGN.md §2).

Packing convention shared by every GPU pipeline: a batch of documents is one byte stream
(``uint8``, documents back to back) plus ``offsets`` (``int64``, ``len(docs) + 1``: document k is
``data[offsets[k]:offsets[k+1]]``). On the GPU the bytes travel packed 4 per ``u32``
(little-endian) and document starts as a bitmap (bit i set iff a document starts at byte i).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from torch_gpubpe.core import str_pack
from torch_gpubpe.core.copy_pool import join_parts


def pack_documents(documents: Iterable[str | bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate documents into one byte stream.

    The UTF-8 is made by several threads without the GIL (:func:`torch_gpubpe.core.str_pack.pack`;
    where it is not available, one document at a time:
    :func:`~torch_gpubpe.core.str_pack.encode_each`); the bytes are those of
    :func:`~torch_gpubpe.core.reference.to_bytes` for every item.

    Args:
        documents: ``str`` (UTF-8 encoded; lone surrogates → U+FFFD) or bytes-like items.
    Returns:
        ``(data, offsets)``: ``data`` uint8 of shape ``(total_bytes,)``; ``offsets`` int64 of
        shape ``(num_docs + 1,)``.
    Raises:
        InputError: an item is neither ``str`` nor bytes-like (names its index).
    """
    docs = documents if isinstance(documents, (list, tuple)) else list(documents)
    packed = str_pack.pack(docs)   # (None where the compiled packer is not available)
    if packed is not None:
        return packed
    parts, offsets = str_pack.encode_each(docs)
    return join_parts(parts), offsets


def doc_start_bitmap(offsets: np.ndarray, n: int, first: int = 0) -> np.ndarray:
    """uint32 bitmap over bytes ``[first, first + n)`` (+1 spare bit): bit i set iff a document
    starts at byte ``first + i``. Shape ``(ceil((n + 1) / 32),)``."""
    words = np.zeros((n + 1 + 31) // 32, np.uint32)
    starts = np.asarray(offsets[:-1], np.int64) - first
    starts = starts[(starts >= 0) & (starts <= n)]
    # Set bit i of word i // 32 for every start (O(documents), not O(bytes)).
    np.bitwise_or.at(words, starts >> 5, (np.uint32(1) << (starts & 31).astype(np.uint32)))
    return words


def pad_to_u32(data: np.ndarray, extra_words: int = 1) -> np.ndarray:
    """``data`` (uint8) zero-padded to whole u32 words (+ ``extra_words``), viewed as uint32."""
    nwords = (len(data) + 3) // 4 + extra_words
    buf = np.zeros(nwords * 4, np.uint8)
    buf[: len(data)] = data
    return buf.view(np.uint32)


def word_start_mask(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Vectorised CPU version of the §2 rule over a packed batch: bool array, shape ``data``."""
    from torch_gpubpe.core.reference import BYTE_CLASS, SPACE

    cls = np.asarray(BYTE_CLASS, np.uint8)[data]
    n = len(data)
    doc_start = np.zeros(n + 1, bool)
    doc_start[offsets[:-1][offsets[:-1] <= n]] = True
    prev_cls = np.empty_like(cls)
    prev_cls[1:], prev_cls[:1] = cls[:-1], 255
    prev_byte = np.empty_like(data)
    prev_byte[1:], prev_byte[:1] = data[:-1], 0
    next_cls = np.empty_like(cls)
    next_cls[:-1], next_cls[-1:] = cls[1:], SPACE
    wordlike = (cls != SPACE) & (cls != 4)
    has_next = ~doc_start[1:]
    has_next[-1:] = False
    rule2 = (cls != prev_cls) & ~((prev_byte == 0x20) & wordlike)
    rule3 = (data == 0x20) & (prev_cls == SPACE) & has_next & (next_cls != SPACE) & (next_cls != 4)
    return doc_start[:n] | rule2 | rule3
