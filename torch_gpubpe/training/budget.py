"""A host-memory budget for word counting: bounded while counting, exact.

:func:`torch_gpubpe.training.api.train` gives its ``max_memory`` to a :class:`CountBudget`, which

1. **refuses at once** (:class:`~torch_gpubpe.errors.InputError`, before any document is read)
   a budget below what counting needs before its first word: this process's memory now plus
   the staging and read-ahead buffers (:meth:`CountBudget.check_start`; the message names the
   smallest ``max_memory`` that can work);
2. **bounds the word table's host share**: a GPU word table (or a CPU partial count) holding
   more words than the budget allows for reading it back (``SPILL_BYTES_PER_WORD``), or more
   than the adapter's limits let it grow to, is written as a sorted run to a temporary
   directory (:func:`torch_gpubpe.training.counts_format.write_counts`) and emptied; counting goes on. At the
   end the runs are merged by the exact streaming k-way merge of
   :func:`torch_gpubpe.training.counts_merge.iter_merged` with ``prune_below`` applied as they stream, so only
   the words kept are ever held (:meth:`CountBudget.finish`). Words too long for the GPU table
   (or the CPU counter's keys), held as bytes, have their own share (``long_cap``, a sixteenth
   of what the buffers leave): past it they are grouped, checked (3. below) and, still large,
   spilled as a run (:meth:`CountBudget.on_long_words`; e.g. one-word documents of 1 MB).
   Counts stay exact: the result equals counting without a budget. Spilling is recorded in
   ``stats`` (``spilled_runs``, ``spill_bytes``, ``seconds_spill``, ``seconds_merge_runs``,
   ``spilled_long_words``, ``long_word_groupings``) and warned once;
3. **refuses early** what cannot fit: without ``prune_below``, as soon as the words counted so
   far prove that the merge phase (:func:`~torch_gpubpe.training.memory.estimate_merge_memory`) would
   exceed the budget — the table's words are distinct, so they are a lower bound of the
   corpus's; so are the long words once grouped, which is done as soon as their raw bytes
   alone could prove it — the rest of the corpus is not read; with ``prune_below``, when the
   words kept after the merge still do not fit, the message names the ``prune_below`` that
   would fit (from the count histogram of the merged runs).

This is the approach of trainers that count out of core (sorted runs + a k-way merge, as
external sorting does; sentencepiece and HF ``tokenizers`` instead hold every word in memory).

Example::

    >>> from torch_gpubpe.training.budget import CountBudget
    >>> b = CountBudget(1 << 40, prune_below=0, batch_bytes=1 << 20)
    >>> b.check_start()
    >>> b.max_table_words > 0
    True
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from torch_gpubpe import notices
from torch_gpubpe.errors import InputError
import torch_gpubpe.training.word_counts as word_counts
from torch_gpubpe.training.batches import document_batches
from torch_gpubpe.training.counts_format import (DEFAULT_FAN_IN, iter_count_batches, packed,
                                                 write_counts, write_long_counts)
from torch_gpubpe.training.counts_merge import iter_merged, merge_counts
from torch_gpubpe.training.long_words import FEW_LONG_WORDS, LONG_GROUP_BYTES
from torch_gpubpe.training.memory import estimate_merge_memory, rss_bytes
from torch_gpubpe.training.word_counts import PartialCounts, WordCounts, count_batch, empty_counts

# Host bytes per word of a word table while it is read back and written as a sorted run (the
# compacted table 12, store order 8 + 8, lengths and counts 16, WordCounts 16, Arrow's sort
# indices and take 24, ...), plus per byte of the words (the store, its mask, the words, the
# sorted copy, the Parquet writer's buffers). On the high side of what was measured for short
# words (a little below the 214 B these give a 9-byte word).
SPILL_BYTES_PER_WORD = 160
SPILL_BYTES_PER_BYTE = 6
# Host bytes per key row of the CPU counter's partial counts (keys, counts, grouping copies).
CPU_BYTES_PER_ROW = 48
MIN_WORKING_BYTES = 32 << 20      # the least the budget must leave for the words themselves
MIN_TABLE_WORDS = 1 << 12
LONG_ENTRY_BYTES = 100            # a Counter entry of the CPU counter's long words, past its bytes
LONG_SHARE = 4                    # 1/LONG_SHARE of the budget's free part for the long words


def _gb(x: float) -> str:
    return f"{x / 1e9:.2f} GB"


class CountBudget:
    """The memory plan of one training run's counting (module docstring).

    Args:
        max_memory: host bytes the whole process may use (``train(max_memory=)``).
        prune_below: ``train(prune_below=)``: words counted fewer times are dropped (0/1: none).
        batch_bytes: bytes per GPU batch (staging buffers are ``stages`` of them).
        stages: staging buffers (:data:`torch_gpubpe.training.count_stream.STAGES`).
        prefetch_bytes: bytes read ahead while the device opens.
        spill_dir: where runs go (default: ``tempfile.gettempdir()``; a private subdirectory,
            removed by :meth:`close`).
        stats: the ``train`` stats dict.
    """

    def __init__(self, max_memory: int, prune_below: int = 0, *, batch_bytes: int,
                 stages: int = 3, prefetch_bytes: int = 0, spill_dir: str | None = None,
                 stats: dict | None = None) -> None:
        self.limit = int(max_memory)
        self.prune_below = int(prune_below)
        self.rss0 = rss_bytes()
        # staging (text + bitmap) + pieces held by the packer and queued + read-ahead
        self.fixed = int(stages * batch_bytes * 1.13 + 2 * batch_bytes + prefetch_bytes)
        self.free = self.limit - self.rss0 - self.fixed
        # Words longer than the GPU table takes (or than the CPU counter's 15-byte keys) are
        # held as bytes: a share of the budget bounds them (grouping them needs ~4x their bytes
        # for a moment: the held words, their joined copy, Arrow's group-by and its output).
        self.long_cap = max(self.free // (4 * LONG_SHARE), 1 << 20)
        self.long_seen = 1 << 20        # long-word bytes at the last grouping (at least 1 MB)
        self.spill_dir = spill_dir
        self.st = {} if stats is None else stats
        self.runs: list[Path] = []
        self.run_words: list[int] = []
        self.tmp: str | None = None
        self.warned = False

    # -- 1. before anything ----------------------------------------------------------------------
    def check_start(self) -> None:
        """Raise :class:`InputError` when the budget cannot hold even the counting buffers."""
        need = self.rss0 + self.fixed + MIN_WORKING_BYTES
        if self.limit < need:
            raise InputError(
                f"max_memory={_gb(self.limit)} cannot work: this process already uses "
                f"{_gb(self.rss0)} and word counting's staging and read-ahead buffers take "
                f"{_gb(self.fixed)}; raise max_memory (--max-memory) to at least {_gb(need)}")

    @property
    def max_table_words(self) -> int:
        """Words a table may hold before it is spilled (the host's share, for a word of the
        average length 8 B)."""
        per = SPILL_BYTES_PER_WORD + 8 * SPILL_BYTES_PER_BYTE
        return max(MIN_TABLE_WORDS, (self.free - 4 * self.long_cap) // per)

    @property
    def max_cpu_rows(self) -> int:
        """Key rows the CPU counter's partial counts may hold before they are spilled."""
        return max(MIN_TABLE_WORDS, self.free // CPU_BYTES_PER_ROW)

    # -- 3. early refusal --------------------------------------------------------------------------
    def _over(self, words: int, nbytes: int) -> bool:
        return self.rss0 + estimate_merge_memory(words, nbytes) > self.limit

    def check_distinct(self, words: int, nbytes: int, done_bytes: int | None = None) -> None:
        """``words`` distinct words of ``nbytes`` bytes in all are known to be in the corpus:
        without pruning, refuse now if the merge phase cannot take them."""
        if self.prune_below > 1:
            return
        need = self.rss0 + estimate_merge_memory(words, nbytes)
        if need > self.limit:
            where = (f" after {done_bytes / 1e6:,.0f} MB of text" if done_bytes is not None
                     else "")
            raise InputError(
                f"the corpus has at least {words:,} unique words ({nbytes:,} bytes){where}; "
                f"training on all of them needs more than {_gb(need)} of host memory, above "
                f"max_memory={_gb(self.limit)}; raise max_memory (--max-memory), read fewer "
                "documents (max_bytes / --max-bytes), or drop rare words with prune_below=2 "
                "(--prune-below 2; the merges can then differ from exact training)")

    def on_gpu_batch(self, counter, done_bytes: int | None = None) -> None:
        """After each GPU batch: the early refusal, from the table's words; and a spill now
        when this process's measured memory plus the table's readback would pass the limit
        (what the estimates miss: on a CPU adapter the GPU's buffers are host memory too)."""
        nbytes = max(counter.occupied,
                     4 * (counter.store_words - counter.occupied) - 3 * counter.occupied)
        lb = counter.long_bytes
        if lb and (lb > self.long_cap or rss_bytes() + 3 * lb > self.limit
                   or (self.prune_below <= 1 and lb >= 2 * self.long_seen
                       and self._over(counter.occupied, nbytes + lb))):
            # (the last: were the long words distinct, the merge phase could not fit; grouped
            # to see, again only once they doubled)
            self.on_long_words(counter, nbytes, done_bytes)
        if not counter.occupied:
            return
        if self.prune_below <= 1:
            words = max(counter.occupied, max(self.run_words, default=0))
            self.check_distinct(words, max(nbytes, words), done_bytes)
        readback = SPILL_BYTES_PER_WORD * counter.occupied + SPILL_BYTES_PER_BYTE * nbytes
        if counter.spill is not None and rss_bytes() + readback > self.limit:
            counter.spill_table()

    def on_long_words(self, counter, table_bytes: int = 0, done_bytes: int | None = None) -> None:
        """The GPU counter's long words (over ``MAXW`` bytes, held on the host) passed their
        share: grouped (exact); without pruning, refused now if they and the table's words
        prove the merge phase cannot fit; still over half the share once grouped: spilled as
        a sorted run (``stats['spilled_long_words']``)."""
        wc = counter.group_long()
        lb = int(wc.lengths.sum())
        self.long_seen = max(lb, 1 << 20)
        self.st["long_word_groupings"] = self.st.get("long_word_groupings", 0) + 1
        if self.prune_below <= 1:
            words = max(counter.occupied, max(self.run_words, default=0))
            self.check_distinct(words + len(wc), max(table_bytes, words) + lb, done_bytes)
        if lb > self.long_cap // 2:
            wc = counter.take_long()
            self.st["spilled_long_words"] = self.st.get("spilled_long_words", 0) + len(wc)
            self.spill(wc)

    # -- 2. spilling -------------------------------------------------------------------------------
    def spill(self, wc) -> None:
        """Write ``wc`` (:class:`~torch_gpubpe.training.word_counts.WordCounts`, distinct words) as a
        sorted run."""
        if not len(wc):
            return
        self.check_distinct(len(wc), int(wc.lengths.sum()))
        t0 = time.perf_counter()
        if self.tmp is None:
            self.tmp = tempfile.mkdtemp(prefix="torch_gpubpe-counts-", dir=self.spill_dir)
        if not self.warned:
            self.warned = True
            notices.warn(
                f"torch_gpubpe.train: the word counts reached {len(wc):,} words, what "
                f"max_memory={_gb(self.limit)} leaves them (or what the GPU's word table "
                f"holds); they are written as sorted runs to {self.tmp} and merged at the end "
                "(exact, slower; recorded in stats['spilled_runs'])", stacklevel=4)
        path = Path(self.tmp) / f"run-{len(self.runs):05d}.parquet"
        if len(wc) <= FEW_LONG_WORDS and len(wc.data) >= LONG_GROUP_BYTES * len(wc):
            write_long_counts(wc, path)      # MB-long words: row groups of 1 MB, no copies
        else:
            write_counts(wc, path, compression="lz4")
        self.runs.append(path)
        self.run_words.append(len(wc))
        self.st["spilled_runs"] = len(self.runs)
        self.st["spill_bytes"] = self.st.get("spill_bytes", 0) + path.stat().st_size
        self.st["seconds_spill"] = self.st.get("seconds_spill", 0.0) + time.perf_counter() - t0

    # -- the end -----------------------------------------------------------------------------------
    def finish(self, wc, progress: bool = False):
        """The corpus's word counts: ``wc`` (the last table) when nothing was spilled (pruning
        is then the caller's), else the runs and ``wc`` merged, with ``prune_below`` applied
        as they stream (``stats['pruned_words']``, warned once)."""
        if not self.runs:
            return wc
        self.spill(wc)
        del wc
        t0 = time.perf_counter()
        merged = None
        if len(self.runs) <= DEFAULT_FAN_IN:     # merged as they stream, no merged file
            stream = iter_merged(self.runs, 1 << 16)
        else:
            merged = Path(self.tmp) / "merged.parquet"
            merge_counts(self.runs, merged)
            for p in self.runs:
                p.unlink()
            stream = iter_count_batches(merged, 1 << 18)
        keep_from = max(self.prune_below, 1)
        datas, lens, counts = [], [], []
        kept = kept_bytes = total = 0
        # count histogram (counts ≥ 64 in the last bucket): words and bytes per count
        hist_w = np.zeros(65, np.int64)
        hist_b = np.zeros(65, np.float64)
        over = False
        base = rss_bytes()
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=None, desc="merge spilled counts", unit="word", unit_scale=True,
                       dynamic_ncols=True)
        for words, c in stream:
            d, o = packed(words)
            ln = np.diff(o)
            total += len(c)
            b = np.minimum(c, 64).astype(np.int64)
            hist_w += np.bincount(b, minlength=65)
            hist_b += np.bincount(b, weights=ln, minlength=65)
            if bar is not None:
                bar.update(len(c))
            if over:
                continue
            k = c >= keep_from
            if k.all():
                datas.append(d.copy())
                lens.append(ln)
                counts.append(c)
            elif k.any():
                datas.append(d[np.repeat(k, ln)])
                lens.append(ln[k])
                counts.append(c[k])
            kept += int(k.sum())
            kept_bytes += int(ln[k].sum())
            if base + kept_bytes + 16 * kept + estimate_merge_memory(kept, kept_bytes) > self.limit:
                over = True
                datas, lens, counts = [], [], []
        if bar is not None:
            bar.close()
        for p in self.runs if merged is None else [merged]:
            p.unlink()
        self.st["seconds_merge_runs"] = time.perf_counter() - t0
        if over:
            self._refuse(hist_w, hist_b, base)
        pruned = total - kept
        if self.prune_below > 1:
            self.st["pruned_words"] = pruned
            if pruned:
                notices.warn(f"torch_gpubpe.train: prune_below={self.prune_below} dropped "
                             f"{pruned:,} of {total:,} unique words before merging; the merges "
                             "can differ from training on every word", stacklevel=3)
        if not datas:
            return empty_counts()
        return WordCounts(np.concatenate(datas), np.concatenate(lens).astype(np.int64),
                          np.concatenate(counts).astype(np.uint64))

    def _refuse(self, hist_w: np.ndarray, hist_b: np.ndarray, base: int) -> None:
        total = int(hist_w.sum())
        fit = None
        for t in range(max(self.prune_below, 1) + 1, 65):
            w, b = int(hist_w[t:].sum()), int(hist_b[t:].sum())
            if base + b + 16 * w + estimate_merge_memory(w, b) <= self.limit:
                fit = (t, w)
                break
        if fit:
            hint = (f"prune_below={fit[0]} (--prune-below {fit[0]}) would keep {fit[1]:,} words "
                    "and fit")
        elif base >= self.limit:
            hint = (f"this process already uses {_gb(base)} after counting, so no prune_below "
                    "can fit")
        else:
            hint = "no prune_below up to 64 fits"
        raise InputError(
            f"the corpus has {total:,} unique words; those kept with "
            f"prune_below={self.prune_below} need more than max_memory={_gb(self.limit)} for "
            f"the merge phase; {hint}; or raise max_memory (--max-memory), or read fewer "
            "documents (max_bytes / --max-bytes)")

    def close(self) -> None:
        """Remove the spill directory."""
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def count_cpu(documents, budget: CountBudget, info: dict, family: str = "bytes-classes"):
    """The CPU counter (:func:`torch_gpubpe.training.word_counts.count_words_cpu`'s batches and thread
    pool)
    under ``budget``: partial counts over ``budget.max_cpu_rows`` key rows are grouped and
    spilled; words split by ``family`` (:func:`~torch_gpubpe.training.word_counts.split_starts`).
    Returns :class:`~torch_gpubpe.training.word_counts.WordCounts` of what was not spilled."""
    workers = max(1, min(os.cpu_count() or 1, 32))
    total = PartialCounts()
    limit = budget.max_cpu_rows

    long_bytes = 0      # bytes the words of 16+ bytes hold (at most: repeats across batches)

    def take(part) -> None:
        nonlocal total, long_bytes
        total.add(part)
        # (words of 16+ bytes are held as bytes objects in a Counter: their bytes and ~100 B
        # per entry count too; summed per batch, an upper bound until the next grouping)
        long_bytes += sum(map(len, part.long)) + LONG_ENTRY_BYTES * len(part.long)
        if total.entries() > limit or long_bytes > budget.long_cap:
            wc = total.to_word_counts()
            total = PartialCounts()
            long_ = wc.lengths >= 16
            long_bytes = int(wc.lengths[long_].sum()) + LONG_ENTRY_BYTES * int(long_.sum())
            if len(wc) * 2 > limit or long_bytes > budget.long_cap // 2:   # to disk
                budget.spill(wc)
                long_bytes = 0
            else:                           # grouping was enough: keep it as one partial
                total = PartialCounts.from_word_counts(wc)

    with ThreadPoolExecutor(workers, thread_name_prefix="gpubpe-wordcount") as pool:
        pending: deque = deque()
        # (word_counts.DEFAULT_BATCH_BYTES read at call time: tests make it small)
        for data, offsets in document_batches(documents, word_counts.DEFAULT_BATCH_BYTES, info):
            pending.append(pool.submit(count_batch, data, offsets, family))
            while len(pending) > workers:
                take(pending.popleft().result())
        while pending:
            take(pending.popleft().result())
    return total.to_word_counts()

