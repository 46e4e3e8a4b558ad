"""Training progress: the :class:`TrainProgress` callback record and ``train(progress=True)``'s
tqdm bars (documents counted, then merges)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch_gpubpe.training.batches import check_documents


@dataclass
class TrainProgress:
    """Progress report passed to the ``progress`` callback after each batch of merges.

    Attributes:
        merges_done: merges learned so far.
        total_merges: the merge budget (``vocab_size - 256 - len(special_tokens)``); training
            may stop earlier when the best count falls below ``min_frequency``.
        last_count: the count (sum of word weights) of the last merge learned, 0 if none.
        merges_per_s: merges per second of wall time since the merge loop started.

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


ProgressFn = Callable[[TrainProgress], None]


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

