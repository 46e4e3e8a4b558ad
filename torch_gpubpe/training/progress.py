"""Training progress: the :class:`TrainProgress` callback record and ``train(progress=True)``'s
tqdm bars (documents counted, then merges)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from torch_gpubpe.training.batches import check_documents


@dataclass
class TrainProgress:
    """Progress report passed to the ``progress`` callback after each batch of merges.

    Attributes:
        merges_done: merges learned so far.
        total_merges: the merge budget (``vocab_size - 256 - len(special_tokens)``); training
            may stop earlier when the best count falls below ``min_frequency``.
        last_count: the count (sum of word weights) of the last merge learned so far (merge
            ``merges_done - 1``), 0 if none.
        merges_per_s: merges per second of wall time since the merge loop started.
        merge_counts: uint64 array, the counts of the merges learned since the previous report,
            in merge order (empty when the batch learned none; a word-list step learns up to 8).
            The arrays of all reports, concatenated, are the count of every merge once, in
            order: ``merge_counts[k]`` of the whole run is the frequency of merge ``k``'s pair
            in the word counts after merges ``0 .. k-1`` (what
            :func:`torch_gpubpe.core.reference.train` ranks by). They come with the merges the
            loop reads back per batch anyway: no extra readback.

    A progress bar for a CLI (batches of merges arrive every few milliseconds)::

        bar = tqdm(total=vocab_size - 256, unit="merge")
        def show(p: TrainProgress) -> None:
            bar.total = p.total_merges
            bar.update(p.merges_done - bar.n)
            bar.set_postfix(count=p.last_count, rate=f"{p.merges_per_s:.0f}/s")
        vocab = train(docs, vocab_size, progress=show)
    """

    merges_done: int
    total_merges: int
    last_count: int
    merges_per_s: float
    merge_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))


ProgressFn = Callable[[TrainProgress], None]


class ProgressReporter:
    """The merge loop's readbacks as :class:`TrainProgress` reports to ``fn``, one per batch.

    One reporter lasts through the restarts of a training run (a pair table that overflowed:
    the run starts again with a larger one and learns the same merges): merges already
    reported are not reported again, so ``merges_done`` never goes back and the reports'
    ``merge_counts`` stay one array of every merge's count, split in order.
    """

    def __init__(self, fn: ProgressFn, total_merges: int) -> None:
        self.fn, self.total = fn, total_merges
        self.done = 0           # merges reported
        self.last_count = 0

    def batch(self, done_before: int, done: int, lo: int, window: np.ndarray,
              rate: float) -> None:
        """Report a batch: ``done_before`` merges learned before it, ``done`` after it;
        ``window``: uint32 rows ``(a, b, count lo, count hi)`` of merges ``lo, lo+1, …``, at
        least those the batch learned."""
        if done < self.done:
            return      # relearning merges reported before a restart
        first = max(done_before, self.done)
        if done > first and not (lo <= first and done <= lo + len(window)):
            # the window is sized so that this cannot happen: a count must not be made up
            raise RuntimeError(f"merges {first}..{done - 1} are not all in the window read back "
                               f"(merges {lo}..{lo + len(window) - 1})")
        rows = window[first - lo:done - lo] if done > first else window[:0]
        counts = rows[:, 2].astype(np.uint64) | (rows[:, 3].astype(np.uint64) << np.uint64(32))
        if len(counts):
            self.last_count = int(counts[-1])
        self.done = done
        self.fn(TrainProgress(done, self.total, self.last_count, rate, counts))


class ProgressBars:
    """``train(progress=True)``: a tqdm bar of the documents read and counted, then one of
    the merges (closed when training ends)."""

    def __init__(self) -> None:
        self.docs_bar = self.merge_bar = None

    def documents(self, documents):
        """``documents`` with the bar updated as they are read (per 1,024 documents, or per
        packed batch for a source with ``packed_batches``, kept as fast as it was)."""
        from tqdm.auto import tqdm

        check_documents(documents)  # a named error for one str, before any bar
        total = len(documents) if hasattr(documents, "__len__") else None
        self.docs_bar = bar = tqdm(total=total, desc="count words", unit="doc",
                                   dynamic_ncols=True)
        return CountedDocuments(documents, bar)

    def merges(self, p: TrainProgress) -> None:
        if self.merge_bar is None:
            from tqdm.auto import tqdm

            self.merge_bar = tqdm(total=p.total_merges, desc="merge", unit="merge",
                                  dynamic_ncols=True)
        self.merge_bar.update(p.merges_done - self.merge_bar.n)
        self.merge_bar.set_postfix_str(f"last count {p.last_count:,}", refresh=False)

    def close(self) -> None:
        for bar in (self.docs_bar, self.merge_bar):
            if bar is not None:
                bar.close()


class CountedDocuments:
    """An iterable of documents that advances a tqdm bar (see :class:`ProgressBars`)."""

    def __init__(self, documents, bar) -> None:
        self._docs, self._bar = documents, bar
        packed = getattr(documents, "packed_batches", None)
        if packed is not None:  # document_batches takes a reader's packed batches as they are
            def packed_batches(batch_bytes: int):
                for data, offsets in packed(batch_bytes):
                    bar.update(len(offsets) - 1)
                    yield data, offsets
                bar.close()

            self.packed_batches = packed_batches

    def __iter__(self):
        n = 0
        for d in self._docs:
            yield d
            n += 1
            if n == 1024:  # tqdm's update costs ~1 µs: not per document
                self._bar.update(n)
                n = 0
        self._bar.update(n)
        self._bar.close()

