"""Word counting fed through persistent mapped staging buffers: the GPU stays busy while the
host reads and packs the next batch.

:func:`count_stream` drives a :class:`~torch_gpubpe.training.gpu_counter.GPUWordCounter` from a stream of
packed pieces (``(uint8 data, int64 offsets)``, e.g. a :class:`~torch_gpubpe.io.readers.Reader`'s
``packed_batches``: parquet row groups read and decoded on its thread pool). Three threads
take part:

* the source's own readers (row groups decoded ahead, on the reader's pool);
* a packer thread copies each piece once (:func:`~torch_gpubpe.encoding.tokenizer.parallel_copy`: by
  several threads), straight into a mapped ``MAP_WRITE | COPY_SRC``
  staging buffer (``STAGES`` of them, each one GPU batch: ``batch_bytes`` of text, then its
  document-start bitmap), and hands the filled stage over; pieces are never joined on the
  host, no Python object is made per document, and the pieces are kept (not copied) for the
  CPU paths and the long words;
* the calling thread (the only one making wgpu calls) unmaps a filled stage, records the two
  copies into the counter's text and bitmap buffers in the same submit as the first pass
  (:meth:`~torch_gpubpe.training.gpu_counter.GPUWordCounter.add_staged`), and maps the stage again for
  writing; while the GPU counts one batch, the packer fills the next.

A piece larger than a stage (one huge document) is counted through
:meth:`~torch_gpubpe.training.gpu_counter.GPUWordCounter.add_batch` (split or CPU paths there).

Timings go to ``stats``: ``seconds_wait_input`` (the GPU thread waiting for a filled stage:
the host is the bottleneck), ``seconds_gpu`` (in the counter's GPU steps, which wait for the
GPU), ``seconds_gpu_wait`` (of which blocked on the GPU's state readbacks: the kernels and
the submit/map latency; the rest is Python), ``gpu_round_trips``, ``seconds_pack`` (the packer copying), ``seconds_wait_source`` (the packer waiting for
the source: reading is the bottleneck), ``staged_batches``, ``direct_batches``, and the
steady state: ``seconds_to_first_batch`` (from the call to the first filled batch at the GPU
thread: the source's start), ``steady_bytes`` (text bytes of every later batch) over
``seconds_steady`` (from the first batch's arrival to the last batch's submit returning).

Example::

    >>> from torch_gpubpe.training.count_stream import count_stream
    >>> from torch_gpubpe.training.batches import document_batches
    >>> from torch_gpubpe.training.gpu_counter import GPUWordCounter
    >>> c = GPUWordCounter()
    >>> count_stream(c, document_batches(["a b a"], 1 << 20, {}))
    >>> sorted(c.result().to_dict().items())
    [(b' a', 1), (b' b', 1), (b'a', 1)]
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Iterable, Iterator

import numpy as np

from torch_gpubpe.gpu import wgpu_internals as _wi
from torch_gpubpe._util import put_unless_stopped
from torch_gpubpe.training.batches import HostBatch

STAGES = 3                 # mapped staging buffers (one GPU batch each) in rotation
PIECE_BYTES = 8 << 20      # what count_stream's callers ask the source for per piece
_END = object()


class _Stage:
    """One persistent staging buffer: the batch's text at 0 (zero-padded to whole u32 + 4
    bytes), its document-start bitmap at ``bits_off``."""

    def __init__(self, g, cap: int, idx: int) -> None:
        U = g.wgpu.BufferUsage
        self.cap = cap
        self.bits_off = (cap + 8 + 255) // 256 * 256
        size = self.bits_off + 4 * ((cap + 1 + 31) // 32 + 1)
        self.buf = g.device.create_buffer(label=f"wc.stage[{idx}]", size=(size + 15) // 16 * 16,
                                          usage=U.MAP_WRITE | U.COPY_SRC,
                                          mapped_at_creation=True)
        self.view: np.ndarray | None = None
        self.host: np.ndarray | None = None
        self.promise = None

    def open(self) -> None:
        """(GPU thread, buffer mapped) a writable uint8 view of the mapped range."""
        v = _wi.mapped_array(self.buf)
        if v is None:      # recorded and warned by _wi: written with write_mapped at close
            v = self.host = np.zeros(self.buf.size, np.uint8)
        self.view = v

    def close(self) -> None:
        """(GPU thread) unmap before the submit that copies from it (WGPU_NOTES §0.2)."""
        self.view = None
        if self.host is not None:
            self.buf.write_mapped(self.host, 0)
            self.host = None
        self.buf.unmap()


def _bitmap_into(bits: np.ndarray, starts: np.ndarray) -> None:
    """Set bit ``s`` of the uint32 ``bits`` for every ``s`` of sorted ``starts`` (zeroed first)."""
    bits[:] = 0
    if not len(starts):
        return
    w = starts >> 5
    b = np.left_shift(np.uint32(1), (starts & 31).astype(np.uint32))
    heads = np.flatnonzero(np.r_[True, w[1:] != w[:-1]])
    bits[w[heads]] = np.bitwise_or.reduceat(b, heads)


class _Packer(threading.Thread):
    """Copies pieces into free stages; hands ``(stage, HostBatch)`` (or ``(None, HostBatch)``
    for a piece larger than a stage) to ``filled``."""

    def __init__(self, pieces: Iterator, free: queue.Queue, filled: queue.Queue,
                 cap: int, stats: dict) -> None:
        super().__init__(name="gpubpe-count-pack", daemon=True)
        self.pieces, self.free, self.filled, self.cap, self.st = pieces, free, filled, cap, stats
        self.stop = threading.Event()

    def _get_free(self):
        while not self.stop.is_set():
            try:
                return self.free.get(timeout=0.1)
            except queue.Empty:
                continue
        return None

    def _put(self, item) -> bool:
        return put_unless_stopped(self.filled, item, self.stop)

    def _hand(self, stage, pos: int, pieces: list, starts: list) -> bool:
        v = stage.view
        v[pos : (pos + 3) // 4 * 4 + 4] = 0
        nw = (pos + 1 + 31) // 32
        bits = v[stage.bits_off : stage.bits_off + 4 * nw].view(np.uint32)
        s = np.concatenate(starts)
        _bitmap_into(bits, s[s <= pos])
        return self._put((stage, HostBatch(pieces=pieces)))

    def run(self) -> None:
        err = None
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - handed to the GPU thread
            err = e
        finally:
            close = getattr(self.pieces, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001
                    pass
        self._put((_END, err))

    def _run(self) -> None:
        from torch_gpubpe.core.copy_pool import parallel_copy   # (imported here, on this thread: off the start-up path)

        st = self.st
        stage, pos, pieces, starts = None, 0, [], []
        it = iter(self.pieces)
        while not self.stop.is_set():
            t0 = time.perf_counter()
            try:
                data, offsets = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            st["seconds_wait_source"] += t1 - t0
            n = len(data)
            if n == 0:
                continue
            if n > self.cap:               # one huge document: not through a stage
                if stage is not None and pos and not self._hand(stage, pos, pieces, starts):
                    return
                if stage is not None and not pos:
                    self.free.put(stage)
                stage, pos, pieces, starts = None, 0, [], []
                if not self._put((None, HostBatch(data, offsets))):
                    return
                continue
            if stage is not None and pos + n > self.cap:
                if not self._hand(stage, pos, pieces, starts):
                    return
                stage, pos, pieces, starts = None, 0, [], []
            if stage is None:
                t2 = time.perf_counter()
                stage = self._get_free()
                st["seconds_wait_stage"] += time.perf_counter() - t2
                if stage is None:
                    return
            t1 = time.perf_counter()
            parallel_copy(stage.view[pos : pos + n], data)   # (mapped memory: several threads)
            offsets = np.asarray(offsets, np.int64)
            pieces.append((pos, data, offsets))
            starts.append(offsets[:-1] + pos)
            pos += n
            st["seconds_pack"] += time.perf_counter() - t1
        if stage is not None and pos:
            self._hand(stage, pos, pieces, starts)


def count_stream(counter, pieces: Iterable[tuple[np.ndarray, np.ndarray]], *,
                 stages: int = STAGES, stats: dict | None = None) -> None:
    """Count every piece of ``pieces`` into ``counter`` (a
    :class:`~torch_gpubpe.training.gpu_counter.GPUWordCounter`) through mapped staging buffers (module
    docstring); the counts equal ``counter.add_batch`` of each piece.

    Args:
        pieces: ``(data, offsets)``: ``data`` uint8 shape ``(n,)`` (the documents' bytes back
            to back), ``offsets`` int64 shape ``(num_docs + 1,)`` from 0. Any size; pieces of
            a few MB (``PIECE_BYTES``) keep the source's batches zero copy.
        stages: staging buffers of ``counter.batch_bytes`` each (≥ 2).
        stats: if a dict, the timings of the module docstring are added to it.
    Raises:
        whatever the source raises (re-raised here), GPUOperationError from the GPU steps.
    """
    g = counter.g
    st = {} if stats is None else stats
    for k in ("seconds_wait_input", "seconds_gpu", "seconds_pack", "seconds_wait_source",
              "seconds_wait_stage"):
        st.setdefault(k, 0.0)
    st.setdefault("staged_batches", 0)
    st.setdefault("direct_batches", 0)
    # Stages as large as a GPU batch, or as the whole input when it is smaller (looked at
    # first: a small corpus does not map hundreds of MB).
    cap = counter.batch_bytes
    it = iter(pieces)
    head, held = [], 0
    for p in it:
        head.append(p)
        held += len(p[0])
        if held >= cap:
            break
    else:
        cap = min(cap, max(held, 1 << 16))
    pieces = itertools.chain(head, it)
    bufs = [_Stage(g, cap, i) for i in range(max(2, stages))]
    st["staging_bytes"] = max(st.get("staging_bytes", 0), sum(s.buf.size for s in bufs))
    free: queue.Queue = queue.Queue()
    filled: queue.Queue = queue.Queue(maxsize=len(bufs) + 1)
    for s in bufs:
        s.open()
        free.put(s)
    pending: list[_Stage] = []
    packer = _Packer(pieces, free, filled, cap, st)
    packer.start()

    def settle(block: bool) -> None:
        # Stages whose write-map completed go back to the packer (map resolves once the GPU
        # is done with the batch that copied from it).
        while pending:
            s = pending[0]
            if not block and not _wi.wait_promise(s.promise, 0):
                return
            g.wait_promise(s.promise, "word-count staging map")
            s.promise = None
            pending.pop(0)
            s.open()
            free.put(s)

    t_start = time.perf_counter()
    t_first = None  # when the first batch reached the GPU thread (the steady state's start)
    steady_bytes = 0
    try:
        while True:
            settle(block=filled.empty())
            t0 = time.perf_counter()
            while True:
                try:
                    stage, host = filled.get(timeout=1.0)
                    break
                except queue.Empty:
                    if not packer.is_alive() and filled.empty():
                        raise RuntimeError("the word-count packer thread stopped") from None
            t1 = time.perf_counter()
            st["seconds_wait_input"] += t1 - t0
            if stage is _END:
                if host is not None:
                    raise host
                break
            if t_first is None:
                t_first = t1
                st["seconds_to_first_batch"] = st.get("seconds_to_first_batch", 0.0) + (
                    t1 - t_start)
            else:
                steady_bytes += host.n
            if stage is None:
                counter.add_batch(host.array(), host.offsets)
                st["direct_batches"] += 1
            else:
                stage.close()
                counter.add_staged(stage.buf, stage.bits_off, host)
                stage.promise = stage.buf.map_async("WRITE")
                pending.append(stage)
                st["staged_batches"] += 1
            del host
            st["seconds_gpu"] += time.perf_counter() - t1
        st["seconds_gpu_wait"] = counter.seconds_wait
        st["gpu_round_trips"] = counter.round_trips
        if t_first is not None:  # every batch after the first, first batch in → last one out
            st["steady_bytes"] = st.get("steady_bytes", 0) + steady_bytes
            st["seconds_steady"] = st.get("seconds_steady", 0.0) + (
                time.perf_counter() - t_first)
    finally:
        packer.stop.set()
        packer.join(timeout=30)
        for s in pending:           # leave no map in flight behind
            try:
                g.wait_promise(s.promise, "word-count staging map")
            except Exception:  # noqa: BLE001 - already failing
                pass
        for s in bufs:
            s.view = None
            s.buf.destroy()
