"""The data path's background reader thread (TokenizedDataset's: a torch_gpubpe._util.Pump made
by prefetch) and the readers' prefetch pump (torch_gpubpe._util.prefetch, re-exported as
torch_gpubpe.io.readers.prefetch):
closing the iterator stops and joins the thread; a garbage-collected one never stalls the
thread that collects it.

The second case once made test_integrations_torch_data.py::test_background_thread_runs_ahead_and_stops_on_close
fail: an earlier test's iterator, left in a reference cycle, was collected inside the new
iterator's reader thread while that thread held the tokenizer's lock; the finalizer joined the
old reader, which needed that lock to finish its in-flight batches, so the new reader sat out
the 60 s join timeout and was still alive after close().
"""

from __future__ import annotations

import gc
import threading
import time

import pytest

from conftest import corpus_docs
from torch_gpubpe.core import reference
from torch_gpubpe.integrations.torch_data import TokenizedDataset
from torch_gpubpe.core.vocab import Vocab

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def docs():
    return corpus_docs("en_fortunes", 12_000, max_doc_bytes=3_000)


@pytest.fixture(scope="module")
def tok(docs):
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    merges = reference.train(docs, vocab_size=400, min_frequency=1, num_special_tokens=1)
    return Tokenizer(Vocab.from_merges(merges, ["<|endoftext|>"]))


def new_readers(before):
    return [t for t in threading.enumerate()
            if t.name.startswith("torch_gpubpe reader") and t not in before]


@pytest.mark.parametrize("mode", ["documents", "packed"])
def test_close_joins_the_reader(docs, tok, mode):
    before = set(threading.enumerate())
    kw = {"seq_len": 64} if mode == "packed" else {}
    it = iter(TokenizedDataset(docs * 50, tok, batch_bytes=500, mode=mode, **kw))
    next(it)
    assert len(new_readers(before)) == 1
    it.close()
    assert new_readers(before) == []
    # exhausted, and ended by an exception in the consumer's loop: no thread left either
    assert len(list(TokenizedDataset(docs[:30], tok, mode=mode, **kw))) > 0
    it = iter(TokenizedDataset(docs * 50, tok, batch_bytes=500, mode=mode, **kw))
    next(it)
    with pytest.raises(KeyError):
        it.throw(KeyError("consumer failed"))
    assert new_readers(before) == []


def test_collected_reader_does_not_stall_the_collecting_thread(docs, tok):
    before = set(threading.enumerate())
    gc.collect()
    gc.disable()  # the collection below must happen where the test says, nowhere else
    try:
        it = iter(TokenizedDataset(docs * 50, tok, batch_bytes=500))
        next(it)  # the reader runs ahead: batches in flight on the GPU, the queue full
        (old,) = new_readers(before)
        cycle: list = [it]
        cycle.append(cycle)
        del it, cycle  # only the garbage collector can free the iterator now
        took: dict = {}

        def reader_like():  # a thread holding the tokenizer's lock when collection runs
            with tok._lock:
                t0 = time.monotonic()
                gc.collect()
                took["s"] = time.monotonic() - t0

        t = threading.Thread(target=reader_like)
        t.start()
        t.join(timeout=120)
        assert not t.is_alive()
        assert took["s"] < 10, f"the collecting thread stalled {took['s']:.0f} s"
        old.join(timeout=30)  # told to stop: it finishes its batches once the lock is free
        assert not old.is_alive()
    finally:
        gc.enable()
    # and the tokenizer still works
    assert tok.encode("hello world") == reference.encode("hello world", tok.vocab.merges)


def test_collected_prefetch_does_not_stall_the_collecting_thread():
    """The same for readers.prefetch: a source whose cleanup waits for the collecting thread
    (before: the finalizer joined the pump for 30 s)."""
    from torch_gpubpe.io.readers import prefetch

    release = threading.Event()

    def source():
        try:
            yield from range(1 << 40)
        finally:
            release.wait(60)

    gc.collect()
    gc.disable()
    try:
        it = prefetch(source(), 2, "torch_gpubpe test pump")
        assert next(it) == 0
        (pump,) = [t for t in threading.enumerate() if t.name == "torch_gpubpe test pump"]
        cycle: list = [it]
        cycle.append(cycle)
        del it, cycle
        took: dict = {}

        def collector():
            t0 = time.monotonic()
            gc.collect()
            took["s"] = time.monotonic() - t0
            release.set()

        t = threading.Thread(target=collector)
        t.start()
        t.join(timeout=120)
        assert took["s"] < 10, f"the collecting thread stalled {took['s']:.0f} s"
        pump.join(timeout=30)
        assert not pump.is_alive()
    finally:
        gc.enable()
    # closed by its consumer: joined at once
    it = prefetch(iter(range(100)), 2, "torch_gpubpe test pump 2")
    next(it)
    it.close()
    assert not [t for t in threading.enumerate() if t.name == "torch_gpubpe test pump 2"]
