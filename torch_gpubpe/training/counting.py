"""Counting the words of documents as training does: on the GPU or the CPU, under a memory
budget (DESIGN.md §2).

:func:`count_words` is the one entry point: documents → :class:`~torch_gpubpe.training.
word_counts.WordCounts`, exact, whichever counter runs. :func:`~torch_gpubpe.training.api.train`
counts through the same steps (:func:`plan_budget`, :func:`count_budgeted`), with the device
opening on a thread meanwhile; the counts-file path (:func:`~torch_gpubpe.training.counts_file.
count_to_file`) calls :func:`count_words`.

Example::

    >>> from torch_gpubpe.training import count_words
    >>> sorted(count_words(["a b a", b"a"], count_on="cpu").to_dict().items())
    [(b' a', 1), (b' b', 1), (b'a', 2)]
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterable

from torch_gpubpe.core.patterns import DEFAULT, PATTERN_OF, resolve
from torch_gpubpe.errors import InputError
from torch_gpubpe.gpu.device import get_gpu
import torch_gpubpe.training.budget as count_budget
import torch_gpubpe.training.count_stream as count_stream
import torch_gpubpe.training.gpu_counter as gpu_counter
import torch_gpubpe.training.word_counts as word_counts
from torch_gpubpe.training.batches import check_documents, document_batches
from torch_gpubpe.training.budget import CountBudget, count_cpu
from torch_gpubpe.training.memory import prune_words, rss_bytes
from torch_gpubpe.training.word_counts import WordCounts

# Documents packed into GPU batches while the device opens, at most this many bytes (in a fresh
# process the device takes a second or two to open; far less than this is packed by then).
PREFETCH_BYTES = 512 << 20
# What the ``train`` command lets its file reader hold ahead of counting: the reader decodes
# parquet several times faster than the GPU counts, so a larger window only holds memory (a
# corpus of a few large row groups would be held whole).
READ_AHEAD_BYTES = 256 << 20
NO_LIMIT = 1 << 62      # count_words(max_memory=None): a budget that never spills nor refuses


def check_count_on(count_on: str) -> str:
    """``count_on`` if it is "gpu" or "cpu", else ``ValueError``."""
    if count_on not in ("gpu", "cpu"):
        raise ValueError(f"count_on must be 'gpu' or 'cpu', got {count_on!r}")
    return count_on


def check_count_args(documents: object, count_on: str, max_memory: int | None,
                     prune_below: int) -> None:
    """The argument checks counting shares with ``train`` (``ValueError`` / ``InputError``)."""
    check_count_on(count_on)
    if (max_memory is not None and max_memory < 0) or prune_below < 0:
        raise ValueError(f"max_memory and prune_below must be ≥ 0, got {max_memory}, "
                         f"{prune_below}")
    check_documents(documents)


def plan_budget(max_memory: int, prune_below: int, count_on: str,
                stats: dict) -> tuple[CountBudget, int, int]:
    """The :class:`~torch_gpubpe.training.budget.CountBudget` of one count under
    ``max_memory`` bytes (refused at once, ``InputError``, when its buffers cannot fit), the
    GPU batch size (halved for small budgets) and the bytes to read ahead while the device
    opens: ``(budget, gpu_batch, prefetch)``."""
    limit = int(max_memory)
    room = limit - rss_bytes()
    # (module attributes read at call time: tests make them small)
    gpu_batch = gpu_counter.DEFAULT_GPU_BATCH_BYTES
    while gpu_batch > (1 << 20) and 16 * gpu_batch > room:   # small budgets: smaller batches
        gpu_batch //= 2
    prefetch = min(PREFETCH_BYTES, max(gpu_batch, room // 8))
    if count_on == "gpu":
        budget = CountBudget(limit, prune_below, batch_bytes=gpu_batch,
                             stages=count_stream.STAGES, prefetch_bytes=prefetch, stats=stats)
    else:
        # (workers + 1) batches of 4 MiB in flight, ~16 bytes per text byte while counted
        cpu_batches = 8 * ((os.cpu_count() or 1) + 1) * word_counts.DEFAULT_BATCH_BYTES
        budget = CountBudget(limit, prune_below, batch_bytes=cpu_batches, stages=0, stats=stats)
    budget.check_start()
    return budget, gpu_batch, prefetch


def count_budgeted(documents: Iterable[str | bytes], budget: CountBudget, *, count_on: str,
                   info: dict, stats: dict, count_stats: dict, gpu_batch: int, prefetch: int,
                   open_gpu: Callable, gpu_ready: Callable[[], bool] = lambda: True,
                   t0: float | None = None, family: str = "bytes-classes"
                   ) -> tuple[WordCounts, float]:
    """Count ``documents`` under ``budget`` (tables over its share spilled as sorted runs;
    :meth:`CountBudget.finish` merges them after): ``(counts of what was not spilled, seconds
    waited for the GPU)``.

    On the GPU, pieces are read (up to ``prefetch`` bytes, at least one) until ``gpu_ready()``,
    then ``open_gpu()`` gives the device and the pieces are counted through mapped staging
    (:mod:`~torch_gpubpe.training.count_stream`: read, pack and count overlap). ``info`` gets
    ``num_documents`` and ``corpus_bytes``; ``stats`` the ``seconds_prefetch`` (from ``t0``),
    ``prefetch_bytes``, ``seconds_count_result``, ``count_gpu_memory_bytes``,
    ``count_table_retries``; ``count_stats`` the pipeline's timings.
    """
    if count_on == "cpu":
        return count_cpu(documents, budget, info, family), 0.0
    t0 = time.perf_counter() if t0 is None else t0
    batches = document_batches(documents, min(count_stream.PIECE_BYTES, gpu_batch), info)
    ready: list = []
    held = 0
    for b in batches:
        ready.append(b)
        held += len(b[0])
        if gpu_ready() or held >= prefetch:
            break
    t1 = time.perf_counter()
    stats["seconds_prefetch"], stats["prefetch_bytes"] = t1 - t0, held
    gpu = open_gpu()
    waited = time.perf_counter() - t1
    counter = gpu_counter.GPUWordCounter(gpu, gpu_batch, family=family)
    counter.spill = budget.spill
    # (a batch adds at most about gpu_batch / 8 new words before the next check)
    counter.max_words = max(budget.max_table_words - gpu_batch // 8,
                            count_budget.MIN_TABLE_WORDS)
    counter.on_batch = lambda c: budget.on_gpu_batch(c, info["corpus_bytes"])
    if gpu.is_cpu:
        # A CPU adapter's buffers are host memory: the batch buffers (text, bitmaps:
        # ~1.3 × a batch) come off the budget's share, and the word table (36 B per
        # slot with its backups and compaction output) gets a third of the rest; a
        # batch with more words is split, a full table spilled.
        budget.free -= 2 * gpu_batch
        cap = max(budget.free // 3 // 36, counter.min_slots)
        counter.max_slots = min(counter.max_slots, 1 << (int(cap).bit_length() - 1))
        stats["count_table_slots_limit"] = counter.max_slots
    with gpu.operation("counting words"):
        count_stream.count_stream(counter, itertools.chain(ready, batches), stats=count_stats)
        del ready
        t_r = time.perf_counter()
        counts = counter.result()
    stats["seconds_count_result"] = time.perf_counter() - t_r
    stats["count_gpu_memory_bytes"] = counter.peak_gpu_bytes + count_stats.get(
        "staging_bytes", 0)
    stats["count_table_retries"] = counter.estimate_retries
    return counts, waited


def count_words(documents: Iterable[str | bytes], *, count_on: str = "gpu",
                max_memory: int | None = None, prune_below: int = 0,
                stats: dict | None = None, gpu=None, pre_tokenizer: str = "bytes-classes"
                ) -> WordCounts:
    """How often each word (DESIGN.md §2) occurs over all documents, counted as
    :func:`~torch_gpubpe.training.api.train` counts them; words never span documents.

    Args:
        documents: iterable of ``str`` (UTF-8; lone surrogates → U+FFFD) or bytes-like items,
            or a :class:`~torch_gpubpe.io.readers.Reader`; consumed once, in batches.
        count_on: "gpu" (default; :mod:`~torch_gpubpe.training.gpu_counter`) or "cpu"
            (:mod:`~torch_gpubpe.training.word_counts`, numpy on a thread pool). Same counts.
        max_memory: host bytes this process may use (:mod:`~torch_gpubpe.training.budget`):
            word tables over its share are spilled to sorted runs on disk and merged exactly
            at the end; without ``prune_below``, refused (``InputError``) as soon as the words
            counted prove that training on them could not fit. None (default): no limit.
        prune_below: drop the words counted fewer than this many times (0: none; exact).
        stats: if a dict, filled with ``num_documents``, ``corpus_bytes``, ``num_words``,
            ``count_on``, ``seconds_count``, ``count_pipeline`` (GPU) and, when counting
            spilled, the budget's keys (``spilled_runs``, ``spill_bytes``, ...), and
            ``pruned_words`` with ``prune_below``.
        gpu: the :class:`~torch_gpubpe.gpu.device.GPU` to count on (default: the process's).
        pre_tokenizer: the word split: DESIGN.md §2's (default) or a regex family of
            :func:`torch_gpubpe.core.patterns.resolve` (its words are ``regex.findall``'s).
    Returns:
        :class:`~torch_gpubpe.training.word_counts.WordCounts` (each word once, in no
        particular order).
    Raises:
        ValueError: ``count_on`` not "gpu"/"cpu", ``max_memory``/``prune_below`` negative.
        InputError: ``documents`` is one ``str``/``bytes``, or an item is neither ``str`` nor
            bytes-like (names its index), or the budget's refusals (what to change).
        NoAdapterError, GPUOperationError: (GPU) no usable GPU / a GPU operation failed.
    """
    check_count_args(documents, count_on, max_memory, prune_below)
    st = {} if stats is None else stats
    t0 = time.perf_counter()
    info: dict = {"num_documents": 0, "corpus_bytes": 0}
    count_stats: dict = {}
    limit = NO_LIMIT if max_memory is None else max_memory
    budget, gpu_batch, prefetch = plan_budget(limit, prune_below, count_on, st)
    try:
        counts, _ = count_budgeted(documents, budget, count_on=count_on, info=info, stats=st,
                                   count_stats=count_stats, gpu_batch=gpu_batch,
                                   prefetch=prefetch, t0=t0, family=resolve(pre_tokenizer),
                                   open_gpu=get_gpu if gpu is None else (lambda: gpu))
        spilled = bool(budget.runs)
        counts = budget.finish(counts)
        if prune_below > 1 and not spilled:
            counts = prune_words(counts, prune_below, st)
    finally:
        budget.close()
    st.update(info)
    st["count_on"] = count_on
    if count_stats:
        st["count_pipeline"] = {k: (round(v, 4) if isinstance(v, float) else v)
                                for k, v in count_stats.items()}
    st["num_words"] = len(counts)
    st["seconds_count"] = time.perf_counter() - t0
    return counts


__all__ = ["PREFETCH_BYTES", "READ_AHEAD_BYTES", "check_count_on", "count_budgeted",
           "count_words", "plan_budget", "training_split"]


def training_split(pre_tokenizer: str | None) -> str:
    """The family ``train(pre_tokenizer=...)`` counts words with.

    Raises:
        InputError: a pattern the GPU cannot split, or one with no ``pat_str`` to record
            (DeepSeek's and SentencePiece's steps: their vocabularies are not trained here).
    """
    fam = resolve(pre_tokenizer or DEFAULT)
    if fam != DEFAULT and fam not in PATTERN_OF:
        raise InputError(f"pre_tokenizer={pre_tokenizer!r}: training takes DESIGN.md §2's split "
                         f"or one of {sorted(PATTERN_OF)} (a split with a pat_str)")
    return fam
