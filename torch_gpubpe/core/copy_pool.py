"""A large host copy split over the shared copy threads (:func:`parallel_copy`).

One host thread copying from or into GPU-mapped memory is the slowest leg of the encoder's and
the pair counter's pipelines (mapped memory reads at a few GB/s per thread); numpy releases the
GIL while it copies, so parts copied by several threads add up. The threads are
:func:`torch_gpubpe.core.cpython_str.copy_pool`'s, shared with the UTF-8 packer.
"""

from __future__ import annotations

import concurrent.futures
import os

import numpy as np

from torch_gpubpe.core.cpython_str import PARALLEL_COPY_MIN, copy_pool

__all__ = ["PARALLEL_COPY_MIN", "parallel_copy"]


def parallel_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` (same shape, 1-D, contiguous) by up to 8 threads in parts of at least
    ``PARALLEL_COPY_MIN`` bytes (numpy releases the GIL while it copies). Used where one host
    thread copying from or into GPU-mapped memory is the slowest leg of a pipeline."""
    n = len(dst)
    parts = min(8, os.cpu_count() or 1, dst.nbytes // PARALLEL_COPY_MIN)
    if parts < 2:
        dst[...] = src
        return
    pool = copy_pool()
    cuts = [n * k // parts for k in range(parts + 1)]

    def part(k: int) -> None:
        a, b = cuts[k], cuts[k + 1]
        dst[a:b] = src[a:b]

    futures = [pool.submit(part, k) for k in range(parts)]
    try:
        for f in futures:
            f.result()
    except BaseException:
        # Interrupted: no part may still read ``src`` (mapped GPU memory, unmapped next).
        for f in futures:
            f.cancel()
        concurrent.futures.wait(futures)
        raise
