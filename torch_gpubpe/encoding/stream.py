"""Streaming encode: batch ``i`` goes to the GPU while the host handles batch ``i - 2``.

One loop for every caller that encodes a stream of batches: :meth:`Tokenizer.stream
<torch_gpubpe.encoding.tokenizer.Tokenizer.stream>` (and ``encode_batches`` on it), the
``encode`` CLI, :class:`~torch_gpubpe.integrations.torch_data.TokenizedDataset` and the Ray
recipes (:mod:`torch_gpubpe.integrations.ray`).

* :func:`encode_stream`: each batch submitted to the GPU while the previous ones are read back
  (two batches in flight: the Tokenizer's two slots), the results in order, the time of each
  step added to ``stages`` under the names ``encode --debug`` prints; batches of documents
  (``str``/``bytes``) packed on a thread of their own (a :class:`~torch_gpubpe._util.Pump`)
  meanwhile, batches already packed (``data`` + ``offsets``) submitted as they are;
* :func:`in_flight`: the loop itself, over any ``submit(batch)`` (an encoder that has only
  ``submit(texts)``: the dataset's);
* :func:`read_ahead`: a reader's documents packed into batches of about ``batch_bytes``
  (:func:`torch_gpubpe.io.readers.documents`) on a thread of their own (the pack thread, at the
  reader's niceness), two batches ahead, while the reader's own threads
  (:class:`~torch_gpubpe.io.readers.FileReader`: parquet row groups / JSON Lines chunks of all its
  files, read ahead across the files' ends) read and decompress;
* :func:`encode_in_flight`: :func:`encode_stream` of ``Packed`` batches with the CLI's
  argument names (kept for the tests and benchmarks that call it).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from typing import Any

from torch_gpubpe._util import Pump
from torch_gpubpe.encoding.batch_pack import pack_batch

ENCODE_READ_NICE = 10
"""The ``encode`` pipeline's default reader niceness (the CLI's ``--read-nice``, the Ray
actor's ``read_nice``): its reader decompresses and parses ahead on up to 16 + 16 threads
(files x parse pool; GBs of read-ahead) that release the GIL (inflate, JSON parse, UTF-8
check). At niceness 0 they compete for the cores with the threads that feed the GPU, which
then upload and submit more slowly and open the GPU session later. Niced, they use what those
leave; the reader stays ahead (it waits on a full queue, not for a core)."""

STAGES = ("wait_reader", "first_batch_read", "wait_gpu_open", "upload_and_submit",
          "wait_gpu_and_readback", "steady_encode")
"""The keys :func:`in_flight` adds to ``stages`` (seconds; ``encode --debug`` prints them,
benchmarks read them)."""

_END = object()


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
    # (imported here: the readers import pyarrow, which a Tokenizer alone never needs)
    from torch_gpubpe.io.readers import documents

    stream = documents(reader, max_docs=max_docs, max_bytes=max_bytes, stats=stats,
                       batch_bytes=batch_bytes)
    return Pump(_at_reader_priority(reader, stream), 2, name)


def is_packed(batch: object) -> bool:
    """Whether ``batch`` is already packed: it has ``data`` and ``offsets`` (e.g.
    :class:`torch_gpubpe.io.readers.Packed`), not a sequence of documents."""
    return hasattr(batch, "offsets") and hasattr(batch, "data")


def _texts(batch):
    if isinstance(batch, (list, tuple, str, bytes, bytearray)):
        return batch       # (one str/bytes is refused by pack_batch, naming encode())
    return list(batch)


def _packed_on_a_thread(batches: Iterable) -> Iterator[tuple]:
    """``(batch, data, offsets)``: a stream of packed batches as it is (submitted on the
    calling thread, no copy); a stream of document batches packed (``str`` → UTF-8, the part
    that holds the GIL) on a pump thread, up to two batches ahead of the submits. The kind is
    the first batch's; a later batch of the other kind is handled on the same thread."""
    it = iter(batches)
    first = next(it, _END)
    if first is _END:
        return
    if is_packed(first):
        for b in chain((first,), it):
            yield (b, b.data, b.offsets) if is_packed(b) else (b, *_pack(b))
        return
    yield from Pump(((b, *((b.data, b.offsets) if is_packed(b) else _pack(b)))
                     for b in chain((first,), it)), 1, "torch_gpubpe pack")


def _pack(batch) -> tuple:
    # defer=False: the non-ASCII str are transcoded here, on the pack thread, not later on the
    # submitting one
    return pack_batch(_texts(batch), keep_parts=True, defer=False)


def encode_groups(submit_parts: Callable[..., Any], groups: list[tuple[int, list]]) -> list:
    """The encoding of each group ``(first, documents)`` of one large call, in order: each
    group packed on a thread ahead (``first``: the index of its first document in the call,
    which errors name), submitted with ``submit_parts(parts, offsets)``, two in flight."""
    packed = Pump(((a, *pack_batch(g, keep_parts=True, defer=False, first=a)) for a, g in groups),
                  1, "torch_gpubpe pack")
    return [enc for _, enc in in_flight(lambda item: submit_parts(item[1], item[2]), packed)]


def encode_stream(tok, batches: Iterable, submit_parts: Callable[..., Any], *,
                  bos_id: int | None = None, eos_id: int | None = None,
                  stages: dict | None = None, t0: float | None = None,
                  before_first: Callable[[], object] | None = None, ahead: int = 2,
                  on_error: Callable[[Any, str, BaseException], object] | None = None
                  ) -> Iterator[tuple]:
    """``(batch, BatchEncoding)`` for each batch of ``batches``, in order, the batch as given
    (to pair the results with what the caller knows of it): the loop of
    :meth:`Tokenizer.stream <torch_gpubpe.encoding.tokenizer.Tokenizer.stream>`, over
    :func:`in_flight`. Two batches are in flight on the GPU while the caller handles a third
    (batch ``i`` is uploaded while the GPU encodes ``i - 1``; ``i - 2`` is read back and handed
    over).

    Args:
        tok: the :class:`~torch_gpubpe.encoding.tokenizer.Tokenizer`.
        batches: each a sequence of ``str``/bytes documents, packed (``str`` → UTF-8,
            ``pack_batch(keep_parts=True)``: the parts, not joined) on a thread of its own up to
            two batches ahead and submitted with ``submit_parts(parts, offsets)`` (the
            Tokenizer's submit of such parts, with these ``bos_id`` / ``eos_id``); or already
            packed (:func:`is_packed`: ``data``, 1-D ``np.uint8``, and ``offsets``, ``np.int64``
            of ``num_docs + 1`` from 0 to ``len(data)``, e.g.
            :class:`torch_gpubpe.io.readers.Packed`), submitted on the calling thread with
            ``tok.submit_packed(data, offsets, bos_id=, eos_id=)`` (checked there; no copy
            before the upload).
        bos_id, eos_id: a token id put before / after every document by the GPU while the ids
            are read back (``Tokenizer.submit``); the offsets include them.
        stages: a dict that gets seconds added per step (:data:`STAGES`, see
            :func:`in_flight`; ``encode --debug`` prints them).
        t0: ``time.perf_counter()`` when reading began (for ``first_batch_read``).
        before_first: called once the first batch is read, before it is submitted (e.g. to
            wait for a GPU session opening on another thread).
        ahead: batches left on the GPU while the caller handles one: 2 (default), 1, or 0
            (each batch read back before the next is submitted).
        on_error: ``on_error(batch, step, exception)`` before an error of ``batch`` propagates
            (``step``: ``"submitting"`` or ``"encoding"``), e.g. to add a note naming it.
    Returns:
        a generator of ``(batch, BatchEncoding)``: ids of ``tok.id_dtype`` (uint16, or uint32
        above 65,536 tokens), int64 token offsets per document (``num_docs + 1``). Closed
        early, it reads back the batches in flight, so the session stays usable.
    Raises:
        InputError: a bad document or packed batch, a bad ``bos_id``/``eos_id`` (when its batch
            comes up; ``Tokenizer.stream`` checks the ids at the call).
        GPUOperationError: the GPU did not answer in time or a readback failed.
    """
    def submit(item):
        b, data, offsets = item
        if is_packed(b):
            return tok.submit_packed(data, offsets, bos_id=bos_id, eos_id=eos_id)
        return submit_parts(data, offsets)

    def noted(item, step, e):
        on_error(item[0], step, e)

    for item, enc in in_flight(submit, _packed_on_a_thread(batches), stages, t0=t0,
                               before_first=before_first, ahead=ahead,
                               on_error=None if on_error is None else noted):
        yield item[0], enc


def encode_in_flight(tok, batches: Iterator, stages: dict, *, specials: dict | None = None,
                     t0: float | None = None, before_first: Callable[[], object] | None = None
                     ) -> Iterator:
    """``(batch, BatchEncoding)`` for each ``Packed`` batch of ``batches``: ``tok.stream(batches,
    stages=stages, t0=t0, before_first=before_first, **specials)`` (``specials``: ``bos_id`` /
    ``eos_id``, put in by the GPU)."""
    return tok.stream(batches, stages=stages, t0=t0, before_first=before_first,
                      **(specials or {}))


def in_flight(submit: Callable[[Any], Any], batches: Iterable, stages: dict | None = None, *,
              t0: float | None = None, before_first: Callable[[], object] | None = None,
              ahead: int = 2,
              on_error: Callable[[Any, str, BaseException], object] | None = None
              ) -> Iterator[tuple]:
    """``(batch, BatchEncoding)`` for each batch of ``batches``, in order, ``submit(batch)``
    (a ``PendingEncoding``; ``None``: nothing to encode, handed back with ``None``) called for
    each. With ``ahead=2`` batch ``i`` is submitted while batches ``i - 1`` and ``i - 2`` are
    pending, so the submit writes batch ``i`` into the upload buffer while the GPU encodes
    ``i - 1``, then reads ``i - 2`` back (``Tokenizer.submit_packed``: two slots), and the
    caller handles ``i - 2`` (writes it, makes tensors of it) between the yields, the GPU busy
    with the two others. ``ahead=1``: the caller handles ``i - 1`` while the GPU encodes ``i``;
    ``0``: each batch is read back before the next is submitted (no overlap).

    ``before_first`` is called once the first batch is read, before it is submitted (the
    CLI's and the actor's wait for the GPU session that opens meanwhile). ``on_error(batch,
    step, exception)`` is called before an exception of ``submit`` (step ``"submitting"``) or
    of the readback (``"encoding"``) propagates (e.g. to add a note naming the documents).
    Batches still pending when the iteration stops early are read back (errors ignored), so
    the encoder is left idle for its next use.

    Seconds added to ``stages`` (:data:`STAGES`): ``wait_reader`` (for ``batches``),
    ``first_batch_read`` (from ``t0``, default the call), ``wait_gpu_open`` (``before_first``),
    ``upload_and_submit``, ``wait_gpu_and_readback`` (what is left of it after a submit read
    the batch back; ``Tokenizer.host_seconds`` splits both), and ``steady_encode``: the steady
    state, from the first batch's submit to the return of the last batch's ids, the caller's
    work between the yields included (every batch's text went through the GPU in it).
    """
    if ahead not in (0, 1, 2):
        raise ValueError(f"ahead must be 0, 1 or 2 (batches left on the GPU), got {ahead!r}")
    stages = {} if stages is None else stages
    t_start = time.perf_counter() if t0 is None else t0
    it = iter(batches)
    pending: deque = deque()
    first = True
    t_steady = None
    try:
        while True:
            t = time.perf_counter()
            b = next(it, _END)
            t1 = time.perf_counter()
            _add(stages, "wait_reader", t1 - t)
            if b is _END:
                break
            if first:
                first = False
                stages["first_batch_read"] = t1 - t_start      # since reading began
                if before_first is not None:
                    before_first()               # the GPU session, opened while it was read
                t2 = time.perf_counter()
                stages["wait_gpu_open"] = t2 - t1
                t1 = t_steady = t2
            try:
                fut = submit(b)
            except Exception as e:
                if on_error is not None:
                    on_error(b, "submitting", e)
                raise
            _add(stages, "upload_and_submit", time.perf_counter() - t1)
            pending.append((b, fut))
            if len(pending) > ahead:
                yield _done(pending.popleft(), stages, on_error)
        while pending:
            yield _done(pending.popleft(), stages, on_error)
        if t_steady is not None:
            stages["steady_encode"] = time.perf_counter() - t_steady
    finally:
        for _, fut in pending:   # stopped early: leave the encoder idle for its next use
            try:
                if fut is not None:
                    fut.result()
            except Exception:  # noqa: BLE001 - already failing or closing
                pass


def _add(stages: dict, key: str, dt: float) -> None:
    stages[key] = stages.get(key, 0.0) + dt


def _done(pending, stages: dict, on_error):
    p, fut = pending
    if fut is None:
        return p, None
    t = time.perf_counter()
    try:
        enc = fut.result()
    except Exception as e:
        if on_error is not None:
            on_error(p, "encoding", e)
        raise
    _add(stages, "wait_gpu_and_readback", time.perf_counter() - t)
    return p, enc
