"""A generator run on a daemon thread a few items ahead of its consumer: the data path's
background reader (:class:`~torch_gpubpe.integrations.torch_data.TokenizedDataset` reads,
batches, submits and reads back there while the consumer builds tensors; DESIGN.md §6).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from torch_gpubpe._util import put_unless_stopped

_END = object()


class BackgroundIterator:
    """``items`` run on a daemon thread, ``depth`` results ahead; exceptions are re-raised in
    the consumer. :meth:`close` stops the thread and, called from the consuming thread, joins
    it (so a closed iterator leaves no thread behind).

    Garbage collection of an unclosed one (a reference cycle) only tells the thread to stop:
    a finalizer runs in whatever thread triggered the collection, e.g. another dataset's
    reader while it holds the tokenizer's lock, which this thread needs to finish its
    in-flight batches; joining there would stall that reader for the whole join timeout and
    leave it alive after its own ``close``.
    """

    def __init__(self, items: Iterator, name: str, depth: int = 2) -> None:
        self._q: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._items, self._name = items, name
        self._t: threading.Thread | None = None
        self._consumer: int | None = None
        self._done = False

    @staticmethod
    def _run(items: Iterator, q: queue.Queue, stop: threading.Event) -> None:
        # No reference to self here: the thread must not keep its iterator alive.
        def put(x) -> bool:
            return put_unless_stopped(q, x, stop)

        try:
            for x in items:
                if not put((x, None)):
                    break
            put((_END, None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            put((_END, e))
        finally:
            items.close()

    def __iter__(self) -> BackgroundIterator:
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        self._consumer = threading.get_ident()
        if self._t is None:
            self._t = threading.Thread(target=self._run, name=self._name, daemon=True,
                                       args=(self._items, self._q, self._stop))
            self._items = None
            self._t.start()
        while True:
            try:
                x, err = self._q.get(timeout=1.0)
            except queue.Empty:
                if not self._t.is_alive() and self._q.empty():
                    self.close()
                    raise RuntimeError(f"{self._name} stopped without a result") from None
                continue
            if x is _END:
                self.close()
                if err is not None:
                    raise err
                raise StopIteration
            return x

    def close(self, _get_ident=threading.get_ident) -> None:
        """Stop the thread; join it when called from the thread that consumed the items.
        (``_get_ident`` bound at definition: at interpreter exit a generator left unfinished is
        closed after the module's globals, ``threading`` among them, are gone.)"""
        self._done = True
        self._stop.set()
        if self._t is not None and _get_ident() == self._consumer:
            self._t.join(timeout=60)

    def __del__(self) -> None:
        self._stop.set()  # never join in a finalizer (see the class docstring)


def closing(gen: Iterator, inner: BackgroundIterator) -> Iterator:
    """``gen``, then ``inner.close()`` however ``gen`` ends (exhausted, closed, raised)."""
    try:
        yield from gen
    finally:
        inner.close()
