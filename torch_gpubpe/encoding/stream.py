"""The ``encode`` CLI's reading + encoding pipeline, shared by the CLI (``cli._encode``) and the
Ray actor that reads its files itself (:class:`torch_gpubpe.integrations.ray.TokenizeFiles`): one code path.

* :func:`read_ahead`: a reader's documents packed into batches of about ``batch_bytes``
  (:func:`torch_gpubpe.io.readers.documents`) on a thread of their own (the pack thread, at the
  reader's niceness), two batches ahead, while the reader's own threads
  (:class:`~torch_gpubpe.io.readers.FileReader`: parquet row groups / JSON Lines chunks of all its
  files, read ahead across the files' ends) read and decompress;
* :func:`encode_in_flight`: each batch submitted to the GPU while the previous one is read
  back (two batches in flight: the Tokenizer's two slots), the results in order, the time of
  each step added to ``stages`` under the names ``encode --debug`` prints.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator

ENCODE_READ_NICE = 10
"""The ``encode`` pipeline's default reader niceness (the CLI's ``--read-nice``, the Ray
actor's ``read_nice``): its reader decompresses and parses ahead on up to 16 + 16 threads
(files x parse pool; GBs of read-ahead) that release the GIL (inflate, JSON parse, UTF-8
check). At niceness 0 they compete for the cores with the threads that feed the GPU, which
then upload and submit more slowly and open the GPU session later. Niced, they use what those
leave; the reader stays ahead (it waits on a full queue, not for a core)."""


def _at_reader_priority(reader, stream):
    """``stream`` on a thread with the reader threads' niceness (``nice=``): joining a batch's
    pieces is reading too, and runs ahead like it."""
    lower = getattr(reader, "_lower_priority", None)
    if lower is not None:
        lower()
    yield from stream


def read_ahead(reader, *, batch_bytes: int, stats: dict | None = None,
               max_docs: int | None = None, max_bytes: int | None = None,
               name: str = "torch_gpubpe encode read"):
    """Start reading: :func:`~torch_gpubpe.io.readers.documents` of ``reader`` (``Packed``
    batches of about ``batch_bytes`` text bytes; rows whose text is None skipped and counted
    in ``stats``; ``max_docs`` / ``max_bytes`` as there) on a daemon thread named ``name``, two
    batches ahead. Returns the :class:`~torch_gpubpe._util.Pump`: iterate it for the
    batches (its errors, e.g. :class:`~torch_gpubpe.errors.InputError` naming a file and row,
    are raised there); ``close()`` it when done (stops the thread and the reader)."""
    from torch_gpubpe._util import Pump
    from torch_gpubpe.io.readers import documents

    stream = documents(reader, max_docs=max_docs, max_bytes=max_bytes, stats=stats,
                       batch_bytes=batch_bytes)
    return Pump(_at_reader_priority(reader, stream), 2, name)


def _add(stages: dict, key: str, dt: float) -> None:
    stages[key] = stages.get(key, 0.0) + dt


def encode_in_flight(tok, batches: Iterator, stages: dict, *, specials: dict | None = None,
                     t0: float | None = None, before_first: Callable[[], object] | None = None
                     ) -> Iterator:
    """``(batch, BatchEncoding)`` for each ``Packed`` batch of ``batches``, in order: batch
    ``i`` is submitted (``tok.submit_packed(data, offsets, **specials)``: ``bos_id`` / ``eos_id``
    put in by the GPU) while batches ``i - 1`` and ``i - 2`` are pending, so the submit writes
    batch ``i`` into the upload buffer while the GPU encodes ``i - 1``, then reads ``i - 2``
    back (``Tokenizer.submit_packed``: two slots), and the caller handles ``i - 2`` (writes
    it, makes a table of it) between the yields.

    ``before_first`` is called once the first batch is read, before it is submitted (the
    CLI's and the actor's wait for the GPU session that opens meanwhile). Seconds added to
    ``stages``: ``wait_reader`` (for ``batches``), ``first_batch_read`` (from ``t0``, default
    the call), ``wait_gpu_open`` (``before_first``), ``upload_and_submit``,
    ``wait_gpu_and_readback`` (what is left of it after a submit read the batch back;
    ``Tokenizer.host_seconds`` splits both), and ``steady_encode``: the steady state, from the first
    batch's submit to the return of the last batch's ids, the caller's work between the
    yields included (every batch's text went through the GPU in it).
    """
    specials = specials or {}
    t_start = time.perf_counter() if t0 is None else t0
    pending: deque = deque()
    first = True
    t_steady = None
    while True:
        t = time.perf_counter()
        p = next(batches, None)
        t1 = time.perf_counter()
        _add(stages, "wait_reader", t1 - t)
        if p is None:
            break
        if first:
            first = False
            stages["first_batch_read"] = t1 - t_start      # since reading began
            if before_first is not None:
                before_first()                   # the GPU session, opened while it was read
            t2 = time.perf_counter()
            stages["wait_gpu_open"] = t2 - t1
            t1 = t_steady = t2
        fut = tok.submit_packed(p.data, p.offsets, **specials)
        _add(stages, "upload_and_submit", time.perf_counter() - t1)
        pending.append((p, fut))
        if len(pending) > 2:
            yield _done(pending.popleft(), stages)
    while pending:
        yield _done(pending.popleft(), stages)
    if t_steady is not None:
        stages["steady_encode"] = time.perf_counter() - t_steady


def _done(pending, stages: dict):
    p, fut = pending
    t = time.perf_counter()
    enc = fut.result()
    _add(stages, "wait_gpu_and_readback", time.perf_counter() - t)
    return p, enc
