"""Large host copies split over the process's shared copy threads: one array
(:func:`parallel_copy`) or a batch's UTF-8 parts back to back (:func:`copy_parts`,
:func:`join_parts`).

Why threads: one host thread copying from or into GPU-mapped memory is the slowest leg of the
encoder's and the pair counter's pipelines (mapped memory reads at a few GB/s per thread);
numpy and ``ctypes.memmove`` release the GIL while they copy, so parts copied by several
threads add up. The pool (:func:`copy_pool`) is shared with the str → UTF-8 packer
(:mod:`torch_gpubpe.core.str_pack`), whose own pool's threads carry the same name prefix: code
running on either never waits on a pool (:func:`in_pool_thread`).

Example::

    >>> from torch_gpubpe.core.copy_pool import join_parts
    >>> join_parts(["abc", b"\\xff", ""]).tobytes()
    b'abc\\xff'
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import threading

import numpy as np

from torch_gpubpe.core.cpython_layout import bytes_address, str_address

__all__ = ["PARALLEL_COPY_MIN", "POOL_PREFIX", "THREADS", "copy_parts", "copy_pool",
           "in_pool_thread", "join_parts", "parallel_copy"]

THREADS = 8                   # threads of the copy pool
POOL_PREFIX = "torch_gpubpe copy"
COPY_PIECE = 1 << 20          # bytes: parts above this are copied in pieces (by several threads)
PARALLEL_COPY_MIN = 1 << 20   # bytes: below this one memcpy is faster than handing out parts

_pool = None
_pool_lock = threading.Lock()


def copy_pool():
    """The process's pool of :data:`THREADS` threads for host copies (made again after a fork:
    threads do not survive one)."""
    global _pool
    if _pool is None or _pool[0] != os.getpid():
        with _pool_lock:
            if _pool is None or _pool[0] != os.getpid():
                _pool = (os.getpid(),
                         concurrent.futures.ThreadPoolExecutor(THREADS,
                                                               thread_name_prefix=POOL_PREFIX))
    return _pool[1]


def in_pool_thread() -> bool:
    """Whether this thread is one of a torch_gpubpe copy or packing pool's (a task there must
    not wait on a pool: all its threads may be waiting likewise)."""
    return threading.current_thread().name.startswith(POOL_PREFIX)


def parallel_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` (same shape, 1-D, contiguous) by up to 8 threads in parts of at least
    ``PARALLEL_COPY_MIN`` bytes (numpy releases the GIL while it copies). Used where one host
    thread copying from or into GPU-mapped memory is the slowest leg of a pipeline."""
    n = len(dst)
    parts = min(THREADS, os.cpu_count() or 1, dst.nbytes // PARALLEL_COPY_MIN)
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


def copy_parts(dst: np.ndarray, parts: list) -> None:
    """Copy ``parts`` back to back into the 1-D ``uint8`` array ``dst`` (of exactly their total
    size), by up to :data:`THREADS` threads. A part is ``bytes``, an ASCII ``str`` (its
    characters are its UTF-8) or an object that writes itself: ``len(part)`` bytes by
    ``part.copy_into(address, nbytes)`` (:class:`torch_gpubpe.core.str_pack.Packed`, which
    transcodes straight into ``dst`` on its own threads).

    The bytes are read in place: an ASCII ``str``'s characters (``PyUnicode_AsUTF8AndSize``
    returns them without a copy or a cache for compact ASCII strings) and a ``bytes`` object's
    buffer, copied by ``ctypes.memmove`` (which releases the GIL) in pieces of at most 1 MiB,
    each thread a contiguous share of the pieces. ``parts`` must stay alive (the caller holds
    it).

    Raises:
        ValueError: the parts do not add up to ``len(dst)``.
    """
    base = dst.ctypes.data
    pieces, o = [], 0  # (destination address, source address, bytes)
    planned = []       # (destination address, a part that writes itself)
    for p in parts:
        n = len(p)
        if not n:
            continue
        t = type(p)
        if t is bytes:
            src = bytes_address(p)
        elif t is str:
            src = str_address(p)
        else:
            planned.append((base + o, p))
            o += n
            continue
        for a in range(0, n, COPY_PIECE):
            pieces.append((base + o + a, src + a, min(COPY_PIECE, n - a)))
        o += n
    if o != len(dst):
        raise ValueError(f"copy_parts: {o} bytes of parts for {len(dst)} bytes of room")
    for d, p in planned:
        p.copy_into(d, len(p))
    move = ctypes.memmove
    nthreads = min(THREADS, os.cpu_count() or 1, -(-o // PARALLEL_COPY_MIN))
    if nthreads < 2 or in_pool_thread():
        for d, s, k in pieces:
            move(d, s, k)
        return
    ends = np.cumsum([k for _, _, k in pieces])
    cuts = [0, *np.searchsorted(ends, [o * j // nthreads for j in range(1, nthreads)]).tolist(),
            len(pieces)]

    def run(j: int) -> None:
        for d, s, k in pieces[cuts[j]:cuts[j + 1]]:
            move(d, s, k)

    pool = copy_pool()
    for f in [pool.submit(run, j) for j in range(nthreads) if cuts[j] < cuts[j + 1]]:
        f.result()


def join_parts(parts: list) -> np.ndarray:
    """The ``uint8`` array of ``parts`` (see :func:`copy_parts`) back to back."""
    out = np.empty(sum(map(len, parts)), np.uint8)
    if str_address is None:   # (not CPython: no addresses of str and bytes)
        out[:] = np.frombuffer(b"".join(p if type(p) is bytes else p.encode() if type(p) is str
                                        else p.tobytes() for p in parts), np.uint8)
        return out
    copy_parts(out, parts)
    return out
