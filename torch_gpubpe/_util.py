"""Small helpers shared by the readers and the training path that import nothing heavy (no
pyarrow, no wgpu): ``train(list[str])`` reaches them in a fresh process before the device is
open, where an import of pyarrow (0.13-0.26 s) would delay opening it."""

from __future__ import annotations

import queue
import threading


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
