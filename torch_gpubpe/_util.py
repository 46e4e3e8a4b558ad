"""Small helpers shared by the readers and the training path that import nothing heavy (no
pyarrow, no wgpu): ``train(list[str])`` reaches them in a fresh process before the device is
open, where an import of pyarrow (0.13-0.26 s) would delay opening it.

The thread helpers: :class:`Pump` (a generator run on a daemon thread, a bounded queue ahead
of its consumer), :func:`prefetch` (the same as a generator) and :func:`ordered` (tasks on a
thread pool, results in order)."""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor


def is_hf(obj: object, kind: str) -> bool:
    """Whether ``obj`` is a Hugging Face ``datasets`` object of class ``kind`` (``"Dataset"``,
    ``"IterableDataset"``) or a subclass, without importing ``datasets``."""
    return any(c.__module__.startswith("datasets") and c.__name__ == kind
               for c in type(obj).__mro__)


def put_unless_stopped(q: queue.Queue, item, stop: threading.Event) -> bool:
    """``q.put(item)``, giving up (False) once ``stop`` is set: a producer thread never blocks
    forever on a consumer that has gone."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


class Pump:
    """``gen`` run on a daemon thread named ``name``, at most ``depth`` items ahead of its
    consumer (a bounded queue). The thread starts at once.

    Iterate the pump (once) for the items; an exception raised by ``gen`` is re-raised in the
    consumer, and a thread that dies without a result raises :class:`RuntimeError`. ``gen``'s
    ``close()``, where it has one, is called on the pump's thread when it ends.

    :meth:`close` (also called when the iteration ends, however it ends) tells the thread to
    stop; called from the consuming thread it also joins it (``join_s`` seconds at most). Closed
    by the garbage collector in another thread (an iteration left in a reference cycle), it only
    tells the thread to stop: a finalizer must not wait, as the collecting thread may hold what
    the stopping one needs to finish (e.g. a tokenizer's lock that the pump's thread needs to
    finish its batches in flight). The thread holds no reference to the iteration, so an
    abandoned one is collected and stops its thread.

    To start the thread only when the first item is asked for (a dataset's ``__iter__``),
    iterate :func:`prefetch` instead: it makes the pump on its first ``next()``.

    Attributes:
        q: the queue of ``(item, None)`` / ``(END, exception or None)`` pairs.
        stop: set to stop the thread (it gives up a blocked put within 0.1 s).
        t: the thread.
    """

    _END = object()

    def __init__(self, gen: Iterator, depth: int, name: str, *, join_s: float = 30.0) -> None:
        self.q: queue.Queue = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.gen = gen
        self.join_s = join_s
        self.t = threading.Thread(target=self._run, name=name, daemon=True)
        self.t.start()

    def _put(self, x) -> bool:
        return put_unless_stopped(self.q, x, self.stop)

    def _run(self) -> None:
        try:
            for x in self.gen:
                if not self._put((x, None)):
                    break
            self._put((self._END, None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            self._put((self._END, e))
        finally:
            close = getattr(self.gen, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> Iterator:
        # (bound here: at interpreter exit an unfinished iteration is closed after the module's
        # globals, threading among them, may be gone)
        get_ident = threading.get_ident
        consumer = get_ident()
        try:
            while True:
                try:
                    x, err = self.q.get(timeout=1.0)
                except queue.Empty:
                    if not self.t.is_alive() and self.q.empty():
                        raise RuntimeError(f"{self.t.name} stopped without a result") from None
                    continue
                if x is self._END:
                    if err is not None:
                        raise err
                    return
                yield x
                consumer = get_ident()
        finally:
            self.close(join=get_ident() == consumer)

    def close(self, join: bool = True) -> None:
        """Tell the thread to stop; with ``join``, wait for it (``join_s`` seconds at most)."""
        self.stop.set()
        if join:
            self.t.join(timeout=self.join_s)


def prefetch(items: Iterator, depth: int = 2, name: str = "torch_gpubpe prefetch", *,
             join_s: float = 30.0) -> Iterator:
    """``items`` computed on a daemon thread, up to ``depth`` ahead (exceptions re-raised here;
    closing the returned generator stops the thread, and joins it when closed by the consuming
    thread). The thread starts on the first ``next()``, not at the call (:class:`Pump`)."""
    yield from Pump(iter(items), depth, name, join_s=join_s)


def ordered(tasks: Iterator[Callable[[], Any]], pool: ThreadPoolExecutor, ahead: int, *,
            sizes: Iterator[int] | None = None, max_size: int | None = None) -> Iterator[Any]:
    """Run the callables of ``tasks`` on ``pool``, at most ``ahead`` at a time, results in
    order. With ``sizes`` (one per task: the bytes its result holds) and ``max_size``, the
    tasks submitted and not yet handed on also hold at most ``max_size`` bytes (one task at
    least), so that a reader faster than its consumer does not hold every file at once. The
    next tasks are submitted before a result is handed on: reading goes on while the consumer
    works, also when one task fills the window."""
    pending: deque = deque()
    held = 0
    ahead = max(1, ahead)
    tasks = iter(tasks)
    sizes = iter(sizes) if sizes is not None else None
    nxt = None  # the next task and its size, made but not yet submitted
    end = object()

    def fill() -> None:
        # Submit while there is room; stop at a ready oldest result (hand it on first: the
        # first result would otherwise wait for `ahead` tasks to be made).
        nonlocal held, nxt
        while len(pending) < ahead and not (pending and pending[0][0].done()):
            if nxt is None:
                t = next(tasks, end)
                if t is end:
                    return
                nxt = (t, next(sizes) if sizes is not None else 0)
            t, size = nxt
            if pending and max_size is not None and held + size > max_size:
                return
            pending.append((pool.submit(t), size))
            held += size
            nxt = None

    try:
        while True:
            fill()
            if not pending:
                return
            f, s = pending.popleft()
            held -= s
            result = f.result()
            fill()
            yield result
    finally:
        for f, _s in pending:
            f.cancel()
