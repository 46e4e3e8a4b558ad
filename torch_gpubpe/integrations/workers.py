"""The start method of DataLoader workers (DESIGN.md §8): ``fork`` is unsafe once this
process has opened the GPU, so workers start by ``spawn`` or ``forkserver``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from typing import Any

from torch_gpubpe.errors import GPUForkError
from torch_gpubpe.gpu.device import touched_pid


def gpu_touched() -> bool:
    """Whether this process has opened a wgpu adapter or device (then ``fork`` is unsafe)."""
    return touched_pid() is not None


def choose_context(num_workers: int, multiprocessing_context: Any = None) -> Any:
    """The multiprocessing start method for DataLoader workers (DESIGN.md §8).

    ``None`` for ``num_workers=0``; a given context is kept, except ``"fork"`` after this
    process opened the GPU, which raises :class:`GPUForkError` here rather than hang in a worker;
    otherwise ``"spawn"`` when this process touched the GPU, else ``"forkserver"`` (a fresh
    server process, safe whatever the parent does later) where available, else ``"spawn"``.
    """
    if num_workers == 0:
        return None
    if multiprocessing_context is not None:
        method = (multiprocessing_context if isinstance(multiprocessing_context, str)
                  else multiprocessing_context.get_start_method())
        if method == "fork" and gpu_touched():
            pid = touched_pid()
            raise GPUForkError(
                f"multiprocessing_context='fork' but this process (pid {os.getpid()}) has opened "
                "the GPU; forked workers cannot use it (DESIGN.md §8). Use 'spawn' or "
                "'forkserver' (make_dataloader's default), or num_workers=0"
                + (f" [GPU opened by pid {pid}]" if pid else "")
            )
        return multiprocessing_context
    if gpu_touched():
        return "spawn"
    if "forkserver" not in mp.get_all_start_methods():
        return "spawn"
    ctx = mp.get_context("forkserver")
    # Workers fork from a fresh server process; preloading torch there saves each worker the
    # torch import (seconds on a small machine). No effect once the server is running.
    ctx.set_forkserver_preload(["torch", "torch_gpubpe.integrations.torch_data"])
    return ctx
