"""Document packing and GPU pre-tokenization (DESIGN.md §2; seed §1 ``bpe_word_boundary``).

Packing convention shared by every GPU pipeline: a batch of documents is one byte stream
(``uint8``, documents back to back) plus ``offsets`` (``int64``, ``len(docs) + 1``: document k is
``data[offsets[k]:offsets[k+1]]``). On the GPU the bytes travel packed 4 per ``u32``
(little-endian) and document starts as a bitmap (bit i set iff a document starts at byte i).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from . import str_pack
from ._cpython_str import join_parts, utf8_parts
from .errors import InputError
from .reference import WORD_START_BIT

WG = 256


def pack_documents(documents: Iterable[str | bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate documents into one byte stream.

    The UTF-8 is made by several threads without the GIL (:func:`torch_gpubpe.str_pack.pack`;
    where it is not available, :func:`torch_gpubpe._cpython_str.utf8_parts`); the bytes are
    those of
    :func:`~torch_gpubpe.reference.to_bytes` for every item.

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
    parts = utf8_parts(docs)
    lengths = np.fromiter(map(len, parts), np.int64, len(parts))
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
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
    from .reference import BYTE_CLASS, SPACE

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


class GPUPreTokenizer:
    """Runs ``bpe_word_boundary`` (wgsl/pretokenize.wgsl) over packed documents.

    Output symbols are ``byte | WORD_START_BIT`` (uint32), one per input byte. Inputs larger
    than what fits one storage binding are processed in slices with a one-byte halo on each
    side, so slice edges never change the result.
    """

    def __init__(self, gpu=None, max_slice_bytes: int | None = None) -> None:
        from .gpu import get_gpu

        self.gpu = gpu or get_gpu()
        g = self.gpu
        self.pipeline = g.pipeline("pretokenize", "bpe_word_boundary", constants={"WG": WG})
        limit = g.binding_bytes(4) // 4 - 64  # output is 4 B per input byte
        self.max_slice_bytes = min(limit, max_slice_bytes or limit)
        self._cap = 0

    def _ensure(self, n: int) -> None:
        if n <= self._cap:
            return
        g, U = self.gpu, self.gpu.wgpu.BufferUsage
        cap = max(n, int(self._cap * 1.5), 1024)
        cap = min(cap, self.max_slice_bytes + 2)
        self.text_buf = g.buffer(cap + 8, U.STORAGE | U.COPY_DST, "pretok.text")
        self.bits_buf = g.buffer(cap // 8 + 16, U.STORAGE | U.COPY_DST, "pretok.doc_bits")
        self.out_buf = g.buffer(cap * 4, U.STORAGE | U.COPY_SRC, "pretok.symbols")
        self.param_buf = g.buffer(16, U.UNIFORM | U.COPY_DST, "pretok.params")
        self.bind = g.bind_group(
            self.pipeline, [self.text_buf, self.bits_buf, self.out_buf, self.param_buf]
        )
        self._cap = cap

    def symbols(self, data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Word-start-tagged symbols of a packed batch (see :func:`pack_documents`).

        Returns:
            uint32 array of shape ``(len(data),)``: ``byte | WORD_START_BIT`` at word starts.
        """
        data = np.ascontiguousarray(data, np.uint8)
        n = len(data)
        out = np.empty(n, np.uint32)
        s = 0
        while s < n:
            e = min(n, s + self.max_slice_bytes)
            lo, hi = max(0, s - 1), min(n, e + 1)  # one-byte halo each side
            with self.gpu.operation("pre-tokenization (bpe_word_boundary)"):
                res = self._run(data[lo:hi], offsets, lo)
            out[s:e] = res[s - lo : e - lo]
            s = e
        return out

    def _run(self, chunk: np.ndarray, offsets: np.ndarray, first: int) -> np.ndarray:
        g = self.gpu
        n = len(chunk)
        self._ensure(n)
        q = g.device.queue
        q.write_buffer(self.text_buf, 0, pad_to_u32(chunk))
        q.write_buffer(self.bits_buf, 0, doc_start_bitmap(offsets, n, first))
        q.write_buffer(self.param_buf, 0, np.array([n, 0, 0, 0], np.uint32))
        enc = g.device.create_command_encoder()
        cp = enc.begin_compute_pass()
        cp.set_pipeline(self.pipeline)
        cp.set_bind_group(0, self.bind)
        cp.dispatch_workgroups(*g.grid(-(-((n + 3) // 4) // WG)))
        cp.end()
        q.submit([enc.finish()])
        return g.read_u32(self.out_buf, 0, n, what="pre-tokenization readback")


def word_starts_gpu(documents: Sequence[str | bytes]) -> list[list[bool]]:
    """Per document, whether each byte is a word start, computed on the GPU (for tests/demos)."""
    data, offsets = pack_documents(documents)
    sym = GPUPreTokenizer().symbols(data, offsets) if len(data) else np.zeros(0, np.uint32)
    flags = (sym & WORD_START_BIT) != 0
    return [flags[offsets[k] : offsets[k + 1]].tolist() for k in range(len(offsets) - 1)]
