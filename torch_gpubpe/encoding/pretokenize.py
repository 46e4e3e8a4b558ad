"""GPU word starts of this project's byte-class split (DESIGN.md §2; seed §1
``bpe_word_boundary``, ``wgsl/pretokenize.wgsl``). Packing lives in :mod:`torch_gpubpe.core.packing`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from torch_gpubpe.core.packing import (doc_start_bitmap, pack_documents, pad_to_u32,
                                       word_start_mask)
from torch_gpubpe.core.reference import WORD_START_BIT
from torch_gpubpe.encoding.layout import WG

__all__ = ["GPUPreTokenizer", "word_starts_gpu", "pack_documents", "doc_start_bitmap",
           "pad_to_u32", "word_start_mask"]


class GPUPreTokenizer:
    """Runs ``bpe_word_boundary`` (wgsl/pretokenize.wgsl) over packed documents.

    Output symbols are ``byte | WORD_START_BIT`` (uint32), one per input byte. Inputs larger
    than what fits one storage binding are processed in slices with a one-byte halo on each
    side, so slice edges never change the result.
    """

    def __init__(self, gpu=None, max_slice_bytes: int | None = None) -> None:
        from torch_gpubpe.gpu.device import get_gpu

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
