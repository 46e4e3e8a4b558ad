"""GPU BPE training: documents or word counts → :class:`~torch_gpubpe.core.vocab.Vocab`.

What is computed is DESIGN.md §3 exactly (the merges of :func:`torch_gpubpe.core.reference.train`);
how: on the unique words of the corpus, each weighted by its count, with one of two
algorithms that give the same merges, each in its own module and WGSL file, sharing the pair
table (:mod:`~torch_gpubpe.training.pair_table`, ``wgsl/train_table.wgsl``: two-level pair counting,
per-block maxima, the deterministic best):

* ``algorithm="wordlist"`` (default, :mod:`~torch_gpubpe.training.wordlist_loop`): the stream stays in
  place, linked; per merge only the positions in the rarer side's occurrence list are looked
  at, one thread per chain of adjacent occurrences (3 dispatches: ``find_max4 →
  find_max_super → wl_merge``); a chain longer than the per-thread budget is carried to
  continuation dispatches, so every corpus and adapter takes this algorithm;
* ``algorithm="seed"`` (:mod:`~torch_gpubpe.training.seed_loop`): the seed's pipeline, the stream
  compacted every merge (8 dispatches: ``find_max4 → find_max_final_det → setup_merge →
  merge_reduce → scan_pass1 → scan_pass2 → scan_pass3 → finalize_compact``).

Host flow (:class:`_MergeLoop` owns every submit and readback; the kernel classes only
record):

1. count words: on the GPU by default (:func:`torch_gpubpe.training.wordcount.count_words_gpu`; batches,
   up to ``PREFETCH_BYTES``, are packed on the host while a thread opens the device and
   compiles the counting pipelines; the training pipelines compile on that thread while the
   GPU counts), or on the CPU (``count_on="cpu"``); both exact;
2. upload the unique words as one symbol stream (id | bit 31 at word starts), a word index per
   symbol and a 64-bit weight per word (word list: the links and per-byte occurrence lists are
   built from the stream on the GPU); the pair table is sized from the distinct byte pairs;
   pair counts are 32-bit when the corpus's total pair count is below 2^31, else 64-bit;
3. ``clear_table`` + ``pair_count`` once;
4. per merge the algorithm's dispatches, batches of 16, 32, … up to ``batch`` merges recorded
   into one command buffer and one submit (native calls through
   :mod:`~torch_gpubpe.gpu.wgpu_internals`); the merge list stays on the GPU and only the state
   words (+ the batch's merges, for progress) are read back per batch, while the next batch
   already runs;
5. between batches: the pair table recounted (and grown) when half full; a probe sequence that
   ran out restarts training with a 4× table (same result); carried walks continued.

Example::

    >>> from torch_gpubpe.training.trainer import train
    >>> vocab = train(["aaaaa aaaaa"], 258, min_frequency=1)
    >>> vocab.merges   # aa aa a: then (aa, a) and (aa, aa) tie at 2; the smaller pair wins
    ((97, 97), (256, 97))
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from torch_gpubpe.core import cpython_str as _cpython_str
from torch_gpubpe import notices
from torch_gpubpe.gpu.wgpu_internals import fallbacks, map_read_mode
from torch_gpubpe.errors import GPUOperationError, InputError
from torch_gpubpe.core.reference import to_bytes
from torch_gpubpe.core.vocab import MAX_VOCAB_SIZE, Vocab

# train(): documents packed into GPU batches while the device opens, at most this many bytes
# (a fresh process waits ≈1–2 s for the device on the H200; 256 MiB were packed long before).
PREFETCH_BYTES = 512 << 20
ALGORITHMS = ("wordlist", "seed")    # the default first
MAX_CONTINUATIONS_PER_SUBMIT = 64    # wl_continue dispatches per submit (doubling from 1)
# GPU time aimed at per submit of the merge loop: merges per batch and wl_continue dispatches
# per submit are capped by the GPU time measured per merge / per dispatch, so the interval
# between two submits stays near this (issue 17 §1: at most 50 ms on a single 5 MB word, where
# one merge's walk over the word takes many dispatches; 64 of them were 381 ms on the H200).
TARGET_SUBMIT_S = 0.020


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


def _check_sizes(vocab_size: int, special_tokens: Sequence[str], min_frequency: int) -> int:
    # Everything that could fail after hours of training is checked here, first.
    if isinstance(special_tokens, str):
        raise TypeError("special_tokens must be a list of str, not one str: pass [token]")
    specials = list(special_tokens)
    for t in specials:
        if not isinstance(t, str) or not t:
            raise ValueError(f"special tokens must be non-empty str, got {t!r}")
    if len(set(specials)) != len(specials):
        raise ValueError(f"duplicate special tokens in {specials!r}")
    nspecial = len(specials)
    if not isinstance(vocab_size, (int, np.integer)) or isinstance(vocab_size, bool):
        raise TypeError(f"vocab_size must be an int, got {type(vocab_size).__name__}")
    if vocab_size < 256 + nspecial:
        raise ValueError(
            f"vocab_size={vocab_size} is below 256 byte tokens + {nspecial} special tokens "
            f"= {256 + nspecial}"
        )
    if vocab_size > MAX_VOCAB_SIZE:
        raise ValueError(f"vocab_size={vocab_size} is above the maximum {MAX_VOCAB_SIZE}")
    if isinstance(min_frequency, bool) or not isinstance(min_frequency, (int, np.integer)):
        raise TypeError(f"min_frequency must be an int, got {min_frequency!r}")
    if min_frequency < 1:
        raise ValueError(f"min_frequency must be >= 1, got {min_frequency}")
    return int(vocab_size) - 256 - nspecial


def train(
    documents: Iterable[str | bytes],
    vocab_size: int,
    *,
    min_frequency: int = 2,
    special_tokens: Sequence[str] = (),
    progress: ProgressFn | bool | None = None,
    stats: dict | None = None,
    batch: int | None = None,
    profile: bool = False,
    algorithm: str = "wordlist",
    count_on: str = "gpu",
    max_memory: int | None = None,
    prune_below: int = 0,
) -> Vocab:
    """Learn a byte-level BPE vocab from documents on the GPU (DESIGN.md §2–§3; seed training
    pipeline).

    Args:
        documents: iterable of ``str`` (UTF-8; lone surrogates → U+FFFD) or bytes-like items,
            a :class:`~torch_gpubpe.io.readers.Reader`, or a Hugging Face ``Dataset`` /
            ``IterableDataset`` (its ``"text"`` column, read as Arrow batches); consumed once,
            word-counted in batches (64 MiB on the GPU, 4 MiB on the CPU).
        vocab_size: total vocab size in tokens: 256 bytes + merges + special tokens;
            ``256 + len(special_tokens) ≤ vocab_size ≤ 262,144``.
        min_frequency: stop when the best pair's count is below this (counts are sums of word
            counts, exact 64-bit integers).
        special_tokens: spellings given ids after the last merge (they use up merge budget).
        progress: ``True`` shows tqdm progress bars on stderr (documents counted, then
            merges), like Hugging Face's trainers (``show_progress``); a callable is called
            with a :class:`TrainProgress` after each batch of merges; ``None``/``False``:
            nothing.
        stats: if a dict, filled with ``corpus_bytes``, ``num_documents``, ``unique_words``,
            ``stream_symbols``, ``num_merges``, ``count_on``, the time breakdown (seconds, in
            the order they happen): ``seconds_setup`` (before ``seconds_total`` starts:
            imports on the first call, argument checks), ``seconds_count`` (word counting, including
            ``seconds_prefetch``, the first ``prefetch_bytes`` packed while the device opened,
            and, counting on the GPU, ``seconds_count_result``: the distinct words gathered
            from the GPU table at the end; without ``seconds_gpu_init_wait``: waiting for the
            device and the counting pipelines, opened on a thread), ``seconds_compile_wait``
            (after counting, for the training pipelines), ``seconds_prepare`` (the counts
            checked and filtered),
            ``seconds_upload`` (``seconds_upload_host``: the host arrays; then the buffers
            and, ``seconds_upload_gpu``, the GPU set-up and first pair count waited for),
            ``seconds_merge`` (of which ``seconds_rebuilds``), ``seconds_total``; on the
            opening thread ``seconds_gpu_open`` (importing wgpu, opening the device),
            ``seconds_compile_count``, ``seconds_compile_train``, ``seconds_import_arrow``
            (counting on the GPU: pyarrow.compute, which the end of counting uses);
            ``table_slots``, ``distinct_initial_pairs``, ``rebuilds``, ``restarts``,
            ``adapter``, ``merges_per_submit``, ``algorithm``, ``wide_counts``,
            ``gpu_memory_bytes`` (the run's GPU buffers), ``walks_paused`` and
            ``continuation_dispatches`` (word list: walks carried past the per-thread
            budget), ``wgpu_fallbacks`` (speed-only wgpu internals not used, see
            :mod:`~torch_gpubpe.gpu.wgpu_internals`), ``str_fallbacks`` (the str → UTF-8
            packers not used: :mod:`~torch_gpubpe.core.cpython_str`, ``"str_native"``:
            :mod:`~torch_gpubpe.core.str_pack`), ``str_packer`` (the one that packed the
            documents: :func:`~torch_gpubpe.training.wordcount.str_packer`), ``count_pipeline``
            (where counting's time went: :mod:`~torch_gpubpe.training.count_stream`),
            ``count_gpu_memory_bytes``, ``count_table_retries`` (batches counted again
            into a larger word table: its size guess was low, or a probe sequence ran out;
            :data:`~torch_gpubpe.training.wordcount.NEW_WORDS_MARGIN`), and, when counting spilled, ``spilled_runs``, ``spill_bytes``, ``seconds_spill``,
            ``seconds_merge_runs`` (:mod:`~torch_gpubpe.training.budget`), ``submits`` and
            ``max_submit_gap_s`` (merge phase: the longest interval between the starts of two
            submits, and ``max_submit_gap_before`` the kind of submit that ended it) (and
            ``gpu_us_per_merge`` with ``profile``).
        batch: merges per submit (default: 64 on a CPU adapter, 512 otherwise).
        profile: time each kernel with timestamp queries on sampled batches (slower);
            ``stats["gpu_us_per_merge"]`` = mean GPU µs per merge of each kernel; word list:
            also ``walk_entries_per_merge`` (list entries looked at), ``walk_steps_per_merge``
            (occurrences merged + stale links hopped), ``walk_probes_per_merge`` (pair-table
            probes of the deltas) and ``walk_depth_per_merge`` (the longest chain of dependent
            global loads of one wl_merge thread: the merge's latency in memory round trips)
            and ``walk_blocks_per_merge`` (the dirty table blocks find_max4 rescans), means
            over the run.
        algorithm: "wordlist" (default: :mod:`~torch_gpubpe.training.wordlist_loop`, per merge only
            the words holding the pair are walked) or "seed" (the seed's pipeline,
            :mod:`~torch_gpubpe.training.seed_loop`: the stream compacted every merge). Same merges.
        count_on: where the words are counted: "gpu" (default; wgsl/wordcount.wgsl, see
            :func:`~torch_gpubpe.training.wordcount.count_words_gpu`) or "cpu" (vectorised numpy on a
            thread pool, :func:`~torch_gpubpe.training.wordcount.count_words`). Same counts.
        max_memory: host bytes this process may use while counting and merging (default:
            :func:`default_max_memory`, 80% of the machine's RAM); see
            :mod:`~torch_gpubpe.training.budget`: refused at once (``InputError``, nothing read)
            when the counting buffers cannot fit; word tables over the budget's share are
            spilled to sorted runs on disk and merged exactly at the end; without
            ``prune_below``, refused during counting as soon as the distinct words seen prove
            that the merge phase (:func:`estimate_merge_memory`) cannot fit; and checked again
            after counting, before the merge stream is built. Each ``InputError`` names what
            to change instead of the process running out of memory.
        prune_below: drop the words counted fewer than this many times before merging (0:
            none; the default keeps training exact). Pruning is how trainers fit corpora with
            very many rare words; the merges can then differ from exact training:
            ``stats["pruned_words"]`` counts them and a ``RuntimeWarning`` says so once.
    Returns:
        the :class:`~torch_gpubpe.core.vocab.Vocab` (merges equal to ``reference.train`` unless
        ``prune_below`` dropped words).
    Raises:
        ValueError: ``vocab_size`` out of range (names it and the bound), ``min_frequency < 1``,
            ``count_on`` not "gpu"/"cpu", ``algorithm`` not "wordlist"/"seed",
            ``max_memory``/``prune_below`` negative.
        InputError: ``documents`` is one ``str``/``bytes``, or a document is neither ``str``
            nor bytes (names its index), or the corpus is empty (no document, or only empty
            ones: nothing to train on; the CLI refuses it the same way), or the merge phase
            would need more than ``max_memory`` (names the estimate and what to change).
        NoAdapterError, GPUOperationError: no usable GPU / a GPU operation failed.

    Fewer merges than asked (no pair left that occurs ``min_frequency`` times: a tiny corpus)
    is not an error: the vocab is smaller than ``vocab_size`` (never larger), a
    ``RuntimeWarning`` says so and ``stats["stopped_early"]`` gives the reason.
    """
    t_start = time.perf_counter()
    from torch_gpubpe._util import is_hf

    if is_hf(documents, "Dataset") or is_hf(documents, "IterableDataset"):
        from torch_gpubpe.io.readers import open_source

        documents = open_source(documents)   # its "text" column, as Arrow batches
    if progress is True:
        bars = _ProgressBars()
        try:
            return train(bars.documents(documents), vocab_size, min_frequency=min_frequency,
                         special_tokens=special_tokens, progress=bars.merges, stats=stats,
                         batch=batch, profile=profile, algorithm=algorithm, count_on=count_on,
                         max_memory=max_memory, prune_below=prune_below)
        finally:
            bars.close()
    if progress is False:
        progress = None
    from torch_gpubpe.training import wordcount
    from torch_gpubpe.training.wordcount import check_documents

    _check_sizes(vocab_size, special_tokens, min_frequency)
    _check_algorithm(algorithm)
    if count_on not in ("gpu", "cpu"):
        raise ValueError(f"count_on must be 'gpu' or 'cpu', got {count_on!r}")
    if (max_memory is not None and max_memory < 0) or prune_below < 0:
        raise ValueError(f"max_memory and prune_below must be ≥ 0, got {max_memory}, "
                         f"{prune_below}")
    check_documents(documents)
    st = {} if stats is None else stats
    t0 = time.perf_counter()
    st["seconds_setup"] = t0 - t_start     # (imports on the first call, argument checks)
    info: dict = {"num_documents": 0, "corpus_bytes": 0}
    count_stats: dict = {}
    # The memory budget of counting (count_budget): refused at once when it cannot work;
    # tables over its share are spilled to sorted runs on disk and merged at the end (exact).
    from torch_gpubpe.training.budget import CountBudget
    from torch_gpubpe.training.count_stream import STAGES

    limit = default_max_memory() if max_memory is None else int(max_memory)
    room = limit - _rss_bytes()
    gpu_batch = wordcount.DEFAULT_GPU_BATCH_BYTES
    while gpu_batch > (1 << 20) and 16 * gpu_batch > room:   # small budgets: smaller batches
        gpu_batch //= 2
    prefetch = min(PREFETCH_BYTES, max(gpu_batch, room // 8))
    if count_on == "gpu":
        budget = CountBudget(limit, prune_below, batch_bytes=gpu_batch, stages=STAGES,
                             prefetch_bytes=prefetch, stats=st)
    else:
        # (workers + 1) batches of 4 MiB in flight, ~16 bytes per text byte while counted
        cpu_batches = 8 * ((os.cpu_count() or 1) + 1) * wordcount.DEFAULT_BATCH_BYTES
        budget = CountBudget(limit, prune_below, batch_bytes=cpu_batches, stages=0, stats=st)
    budget.check_start()
    # The device opens on a thread from here on (_Opener), while this thread reads and packs
    # the first documents (the CPU counts the words, count_on="cpu"): in a fresh process the
    # opening (importing wgpu, the adapter, the device) is the longest step before counting.
    opener = _Opener(count_on == "gpu")
    pool = ThreadPoolExecutor(1, thread_name_prefix="gpubpe-init")
    fut = pool.submit(opener.run)
    try:
        return _train_budgeted(documents, vocab_size, budget, info, count_stats, st, t0,
                               gpu_batch, prefetch, opener, fut, min_frequency=min_frequency,
                               special_tokens=special_tokens, progress=progress, batch=batch,
                               profile=profile, algorithm=algorithm, count_on=count_on,
                               max_memory=limit, prune_below=prune_below)
    finally:
        pool.shutdown(wait=True)
        budget.close()


def _train_budgeted(documents, vocab_size, budget, info, count_stats, st, t0, gpu_batch,
                    prefetch, opener, fut, *, min_frequency, special_tokens, progress, batch,
                    profile, algorithm, count_on, max_memory, prune_below) -> Vocab:
    """train() after its checks: count under ``budget``, then merge. ``opener`` (_Opener) is
    opening the device on a thread (``fut``): it compiles the counting pipelines first and says
    so, then the training pipelines while the GPU counts."""
    from torch_gpubpe.training import budget as count_budget
    from torch_gpubpe.training import count_stream as count_pipeline
    from torch_gpubpe.training.budget import count_cpu
    from torch_gpubpe.training.wordcount import GPUWordCounter, _batches, str_packer

    if count_on == "cpu":
        counts = count_cpu(documents, budget, info)
        t1 = time.perf_counter()
        trainer = fut.result()
        t2 = time.perf_counter()
        t3 = t4 = t2
    else:
        # Read pieces while the device opens (at least one, at most ``prefetch`` bytes),
        # then count them through mapped staging (count_pipeline: read, pack and count
        # overlap).
        batches = _batches(documents, min(count_pipeline.PIECE_BYTES, gpu_batch), info)
        ready: list = []
        held = 0
        for b in batches:
            ready.append(b)
            held += len(b[0])
            if opener.ready.is_set() or held >= prefetch:
                break
        t1 = time.perf_counter()
        st["seconds_prefetch"], st["prefetch_bytes"] = t1 - t0, held
        gpu = opener.wait_gpu(fut)
        t2 = time.perf_counter()
        counter = GPUWordCounter(gpu, gpu_batch)
        counter.spill = budget.spill
        # (a batch adds at most about gpu_batch / 8 new words before the next check)
        counter.max_words = max(budget.max_table_words - gpu_batch // 8,
                                count_budget.MIN_TABLE_WORDS)
        counter.on_batch = lambda c: budget.on_gpu_batch(c, info["corpus_bytes"])
        if "cpu" in str(gpu.adapter_info.get("adapter_type", "")).lower():
            # A CPU adapter's buffers are host memory: the batch buffers (text, bitmaps:
            # ~1.3 × a batch) come off the budget's share, and the word table (36 B per
            # slot with its backups and compaction output) gets a third of the rest; a
            # batch with more words is split, a full table spilled.
            budget.free -= 2 * gpu_batch
            cap = max(budget.free // 3 // 36, counter.min_slots)
            counter.max_slots = min(counter.max_slots, 1 << (int(cap).bit_length() - 1))
            st["count_table_slots_limit"] = counter.max_slots
        with gpu.operation("counting words"):
            count_pipeline.count_stream(counter, itertools.chain(ready, batches),
                                        stats=count_stats)
            del ready
            t_r = time.perf_counter()
            counts = counter.result()
        st["seconds_count_result"] = time.perf_counter() - t_r
        st["count_gpu_memory_bytes"] = counter.peak_gpu_bytes + count_stats.get(
            "staging_bytes", 0)
        st["count_table_retries"] = counter.estimate_retries
        t3 = time.perf_counter()
        trainer = fut.result()      # the training pipelines (compiled while counting)
        t4 = time.perf_counter()
    st.update(opener.times)
    st.update(info)
    st["str_packer"] = str_packer(documents)
    if not info["corpus_bytes"]:
        raise InputError(
            f"empty corpus: {info['num_documents']} documents and 0 bytes of text; nothing to "
            "train on (check the source, its text column and any max_docs/max_bytes limit)")
    st["seconds_gpu_init_wait"] = t2 - t1
    st["seconds_compile_wait"] = t4 - t3
    st["seconds_count"] = t3 - t0 - (t2 - t1)
    t5 = time.perf_counter()
    st["count_on"] = count_on
    st["count_pipeline"] = {k: (round(v, 4) if isinstance(v, float) else v)
                            for k, v in count_stats.items()}
    spilled = bool(budget.runs)
    # spilled runs merged (a bar with train(progress=True), or a CLI progress callback)
    show = (isinstance(getattr(progress, "__self__", None), _ProgressBars)
            or bool(getattr(progress, "show_bars", False)))
    counts = budget.finish(counts, progress=show)
    if prune_below > 1 and not spilled:
        counts = _prune(counts, prune_below, st)
    _check_memory(counts, max_memory, st)
    st["seconds_prepare"] = time.perf_counter() - t5
    vocab = _train_counts(counts, vocab_size, min_frequency=min_frequency,
                          special_tokens=special_tokens, progress=progress, stats=st,
                          batch=batch, profile=profile, algorithm=algorithm, trainer=trainer,
                          _stacklevel=4)   # (the caller of train)
    st["seconds_total"] = time.perf_counter() - t0
    return vocab


# Host bytes the merge phase adds per unique word and per symbol of the merge stream (word
# index, links, per-token word lists, the counts' copies). Fitted to this project's peak RSS
# measurements: 2,415 MB for 1.58 M unique words / 18.6 M symbols (H200, 868 MB of text), and
# lavapipe's 924 MB at 250 K and 1,465 MB at 1 M unique words (issue 17); on the high side.
MEMORY_PER_WORD = 760
MEMORY_PER_SYMBOL = 40


def default_max_memory() -> int:
    """80% of the machine's physical memory (bytes), the default ``max_memory`` of train()."""
    try:
        return int(0.8 * os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not POSIX: no default limit
        return 1 << 62


def estimate_merge_memory(unique_words: int, symbols: int) -> int:
    """Estimated host bytes the merge phase adds for ``unique_words`` words of ``symbols``
    bytes in all (see ``MEMORY_PER_WORD``/``MEMORY_PER_SYMBOL``: fitted, not a bound)."""
    return MEMORY_PER_WORD * unique_words + MEMORY_PER_SYMBOL * symbols


def _rss_bytes() -> int:
    """This process's resident memory now (0 where /proc is absent)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _check_memory(wc, max_memory: int | None, st: dict) -> None:
    if not len(wc.lengths):     # (pruning dropped every word: nothing to hold; train says so)
        return
    limit = default_max_memory() if max_memory is None else int(max_memory)
    need = _rss_bytes() + estimate_merge_memory(len(wc.lengths), int(wc.lengths.sum()))
    st["estimated_merge_memory_bytes"] = need
    st["max_memory_bytes"] = limit
    if need > limit:
        raise InputError(
            f"training {len(wc.lengths):,} unique words ({int(wc.lengths.sum()):,} bytes) needs "
            f"about {need / 1e9:.2f} GB of host memory (this process's and the merge phase's), "
            f"above max_memory={limit / 1e9:.2f} GB; "
            "raise max_memory (--max-memory), read fewer documents (max_bytes / --max-bytes), "
            "or drop rare words with prune_below=2 (--prune-below 2; the merges can then differ "
            "from exact training)")


def _prune(wc, below: int, st: dict):
    """``wc`` without the words counted fewer than ``below`` times (recorded and warned)."""
    from torch_gpubpe.training.wordcount import WordCounts

    keep = wc.counts >= below
    st["pruned_words"] = int((~keep).sum())
    if keep.all():
        return wc
    notices.warn(f"torch_gpubpe.train: prune_below={below} dropped {st['pruned_words']:,} of "
                 f"{len(keep):,} unique words before merging; the merges can differ from "
                 "training on every word", stacklevel=3)
    return WordCounts(wc.data[np.repeat(keep, wc.lengths)], wc.lengths[keep], wc.counts[keep])


def _train_counts(wc, vocab_size: int, *, min_frequency: int, special_tokens: Sequence[str],
                  progress, stats: dict, batch, profile: bool, algorithm: str = "wordlist",
                  trainer=None, _stacklevel: int = 3) -> Vocab:
    """Train on ``wc`` (:class:`~torch_gpubpe.training.wordcount.WordCounts`, every count ≥ 1)."""
    t0 = time.perf_counter()
    num_merges = _check_sizes(vocab_size, special_tokens, min_frequency)
    st = stats
    lens, counts = wc.lengths, wc.counts
    keep = lens >= 2
    st["unique_words"] = len(lens)
    # Exact bound check of the total pair count (2^64: the GPU's counters); floats first.
    approx = float(np.dot(counts[keep].astype(np.float64), (lens[keep] - 1).astype(np.float64)))
    if approx >= 2.0 ** 63:
        total = sum(int(c) * (int(n) - 1) for c, n in zip(counts[keep], lens[keep]))
        if total >= 1 << 64:
            raise ValueError(
                f"the total pair count {total} reaches 2^64; the GPU counts in 64 bits")
    merges: list[tuple[int, int]] = []
    if num_merges and keep.any():
        if keep.all():
            data, lk, ck = wc.data, lens, counts
        else:
            sel = np.repeat(keep, lens)
            data, lk, ck = wc.data[sel], lens[keep], counts[keep]
        tr = trainer or get_trainer()
        st["seconds_prepare"] = st.get("seconds_prepare", 0.0) + time.perf_counter() - t0
        # A wgpu error (a lost device) becomes a GPUOperationError naming the step; the next
        # call opens a fresh device (issue 17 §4).
        with tr.gpu.operation(f"training {num_merges} merges"):
            merges = tr.run_arrays(
                data, lk, ck, num_merges, int(min_frequency), progress=progress, stats=st,
                batch=batch, profile=profile, algorithm=algorithm)
    else:
        st.update(stream_symbols=0, seconds_merge=0.0, algorithm=algorithm)
    st["num_merges"] = len(merges)
    st["wgpu_fallbacks"] = fallbacks()
    st["str_fallbacks"] = _cpython_str.fallbacks()
    if len(merges) < num_merges:
        st["stopped_early"] = (
            f"training stopped after {len(merges)} of {num_merges} merges: no pair of tokens "
            f"occurs at least min_frequency={min_frequency} times any more (a small corpus); "
            f"the vocab has {256 + len(merges) + len(special_tokens)} ids, not {vocab_size}")
        notices.warn(st["stopped_early"], stacklevel=_stacklevel)
    return Vocab(tuple(merges), tuple(special_tokens))


class _ProgressBars:
    """``train(progress=True)``: a tqdm bar of the documents read and counted, then one of
    the merges (closed when training ends)."""

    def __init__(self) -> None:
        self.docs_bar = self.merge_bar = None

    def documents(self, documents):
        """``documents`` with the bar updated as they are read (per 1,024 documents, or per
        packed batch for a source with ``packed_batches``, kept as fast as it was)."""
        from tqdm.auto import tqdm

        from torch_gpubpe.training.wordcount import check_documents

        check_documents(documents)  # a named error for one str, before any bar
        total = len(documents) if hasattr(documents, "__len__") else None
        self.docs_bar = bar = tqdm(total=total, desc="count words", unit="doc",
                                   dynamic_ncols=True)
        return _Counted(documents, bar)

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


class _Counted:
    """An iterable of documents that advances a tqdm bar (see :class:`_ProgressBars`)."""

    def __init__(self, documents, bar) -> None:
        self._docs, self._bar = documents, bar
        packed = getattr(documents, "packed_batches", None)
        if packed is not None:  # wordcount._batches takes a reader's packed batches as they are
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


def train_from_word_counts(
    word_counts: Mapping[bytes | str, int],
    vocab_size: int,
    *,
    min_frequency: int = 2,
    special_tokens: Sequence[str] = (),
    progress: ProgressFn | None = None,
    stats: dict | None = None,
    batch: int | None = None,
    profile: bool = False,
    algorithm: str = "wordlist",
) -> Vocab:
    """Learn a vocab from a word → count mapping (DESIGN.md §3; words are taken as given, not
    pre-tokenized again). Same arguments, result and errors as :func:`train` (no
    ``count_on``), plus:

    Raises:
        ValueError: a count that is not an integer or is negative (names the word), or the
            total pair count reaching 2^64.
        InputError: a key that is neither ``str`` nor bytes (names it).
    """
    from torch_gpubpe.training.wordcount import WordCounts

    _check_sizes(vocab_size, special_tokens, min_frequency)
    _check_algorithm(algorithm)
    t0 = time.perf_counter()
    st = {} if stats is None else stats
    words: list[bytes] = []
    weights: list[int] = []
    corpus_bytes = 0
    for w, c in word_counts.items():
        try:
            c = int(c)
        except (TypeError, ValueError) as e:
            raise ValueError(f"count of word {w!r} is not an integer: {c!r}") from e
        if c < 0:
            raise ValueError(f"negative count {c} for word {w!r}")
        try:
            b = to_bytes(w)
        except TypeError as e:
            raise InputError(f"word {w!r}: {e}") from e
        corpus_bytes += len(b) * c
        if c and len(b) > 1:
            words.append(b)
            weights.append(c)
    total_pairs = sum(c * (len(w) - 1) for w, c in zip(words, weights))
    if total_pairs >= 1 << 64:
        raise ValueError(
            f"the total pair count {total_pairs} reaches 2^64; the GPU counts in 64 bits"
        )
    st.setdefault("corpus_bytes", corpus_bytes)
    st.setdefault("num_documents", 0)
    wc = WordCounts(np.frombuffer(b"".join(words), np.uint8),
                    np.fromiter((len(w) for w in words), np.int64, len(words)),
                    np.array(weights, np.uint64))
    vocab = _train_counts(wc, vocab_size, min_frequency=min_frequency,
                          special_tokens=special_tokens, progress=progress, stats=st,
                          batch=batch, profile=profile, algorithm=algorithm)
    st["unique_words"] = len(word_counts)
    st.setdefault("seconds_count", 0.0)
    st["seconds_total"] = time.perf_counter() - t0
    return vocab


_trainers: dict[int, GPUTrainer] = {}
_trainers_lock = threading.Lock()


def get_trainer() -> GPUTrainer:
    """The :class:`GPUTrainer` of the process's GPU (pipelines compiled once per device)."""
    from torch_gpubpe.gpu.device import get_gpu

    with _trainers_lock:
        g = get_gpu()
        t = _trainers.get(id(g))
        if t is None or t.gpu is not g:
            _trainers.clear()
            t = _trainers[id(g)] = GPUTrainer(g)
        return t


class _Opener:
    """train()'s device opening on a thread, in the order the run needs it: the device, the
    counting pipelines (then :attr:`ready` is set: the GPU can count), then the training
    pipelines (:func:`get_trainer`, compiled while the GPU counts; on a GPU also the 64-bit
    count variant, which corpora with ≥ 2^31 pairs take), then (counting on the GPU) imports
    pyarrow.compute. :attr:`times`: ``seconds_gpu_open`` (importing wgpu, opening the adapter
    and device), ``seconds_compile_count``, ``seconds_compile_train``,
    ``seconds_import_arrow`` (on the thread)."""

    def __init__(self, count_on_gpu: bool) -> None:
        self.count_on_gpu = count_on_gpu
        self.ready = threading.Event()
        self.gpu = None
        self.times: dict[str, float] = {}

    def run(self) -> GPUTrainer:
        from torch_gpubpe.gpu.device import get_gpu
        from torch_gpubpe.gpu.shaders import shader_info

        try:
            t = time.perf_counter()
            self.gpu = g = get_gpu()
            t1 = time.perf_counter()
            self.times["seconds_gpu_open"] = t1 - t
            if self.count_on_gpu:
                for e in shader_info("wordcount", g.flags).entry_points:
                    g.pipeline("wordcount", e)       # (GPUWordCounter's, from the cache)
                self.times["seconds_compile_count"] = time.perf_counter() - t1
        finally:
            self.ready.set()
        t = time.perf_counter()
        tr = get_trainer()
        if not tr.is_cpu and "wordlist" not in tr.too_many_buffers:
            tr.pipelines("wordlist", wide=True)
        self.times["seconds_compile_train"] = time.perf_counter() - t
        if self.count_on_gpu:
            # The end of counting groups the words too long for the GPU table with
            # pyarrow.compute (wordcount.group_words): imported here while the GPU counts, not
            # on the critical path after it (0.1-0.25 s in a fresh process).
            t = time.perf_counter()
            import pyarrow.compute  # noqa: F401
            self.times["seconds_import_arrow"] = time.perf_counter() - t
        return tr

    def wait_gpu(self, fut):
        """The opened GPU, once the counting pipelines are compiled (the thread's error, if it
        failed)."""
        while not self.ready.wait(0.05):
            if fut.done():
                break
        if self.gpu is None or fut.done():
            fut.result()          # raises the thread's error
        return self.gpu


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, int(x - 1).bit_length())


def _check_algorithm(algorithm: str) -> str:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    return algorithm


_noticed: set[str] = set()


def _notice_once(msg: str) -> None:
    if msg not in _noticed:
        _noticed.add(msg)
        notices.warn(msg)


class GPUTrainer:
    """The training pipelines of one device (``train_wordlist.wgsl``, ``train_seed.wgsl``),
    compiled once each; :meth:`run` trains. One instance may run many trainings
    (sequentially); buffers are per run."""

    def __init__(self, gpu=None) -> None:
        from torch_gpubpe.gpu.device import get_gpu
        from torch_gpubpe.training.pair_table import local_slots, training_shader

        self.gpu = g = gpu or get_gpu()
        self.info = {a: training_shader(g, _module(a).SHADER) for a in ALGORITHMS}
        self.local_slots = local_slots(g, self.info["wordlist"])
        self._pipes: dict[tuple, dict] = {}
        self.is_cpu = "cpu" in str(g.adapter_info.get("adapter_type", "")).lower()
        # An algorithm whose entry points bind more storage buffers than the adapter allows per
        # shader stage (OpenGL's llvmpipe: 16; the word list's wl_merge binds 17) cannot run
        # there: the run takes another one, recorded and said (run_arrays).
        limit = int(g.limits.get("max-storage-buffers-per-shader-stage", 1 << 30))
        self.too_many_buffers = {a: n for a in ALGORITHMS
                                 if (n := self.storage_buffers(a)) > limit}
        self.storage_buffer_limit = limit
        # The default (word lists, 32-bit counts) is compiled up front, while the host counts
        # words; the other variants on first use.
        if "wordlist" not in self.too_many_buffers:
            self.pipelines("wordlist", wide=False)

    def storage_buffers(self, algorithm: str) -> int:
        """The most storage buffers one entry point of ``algorithm``'s shader binds (parsed
        from the WGSL)."""
        info = self.info[algorithm]
        return max(sum(1 for n in info.reachable(ep)
                       if n in info.bindings and "storage" in info.bindings[n][2])
                   for ep in info.entry_points)

    def pipelines(self, algorithm: str, wide: bool, profile: bool = False) -> dict:
        """Entry point → compute pipeline of ``algorithm``, with 64-bit (``wide``) or 32-bit
        pair counts (train_table.wgsl WIDE); ``profile``: the word list's walk counters
        (train_wordlist.wgsl PROFILE)."""
        from torch_gpubpe.training.pair_table import compile_pipelines

        key = (algorithm, bool(wide), bool(profile))
        if key not in self._pipes:
            consts = {"LSLOTS": self.local_slots, "WIDE": int(wide)}
            if profile and "PROFILE" in self.info[algorithm].overrides:
                consts["PROFILE"] = 1
            self._pipes[key] = compile_pipelines(self.gpu, _module(algorithm).SHADER, consts)
        return self._pipes[key]

    # -- one training run ---------------------------------------------------------------------
    def run(self, words: list[bytes], weights: list[int], num_merges: int, min_frequency: int,
            **kw) -> list[tuple[int, int]]:
        """:meth:`run_arrays` on a list of unique ``words`` (each ≥ 2 bytes) with positive
        integer ``weights``."""
        lens = np.fromiter((len(w) for w in words), np.int64, len(words))
        return self.run_arrays(np.frombuffer(b"".join(words), np.uint8), lens,
                               np.array(weights, np.uint64), num_merges, min_frequency, **kw)

    def run_arrays(self, data: np.ndarray, lengths: np.ndarray, weights: np.ndarray,
                   num_merges: int, min_frequency: int, *, algorithm: str = "wordlist",
                   progress: ProgressFn | None = None, stats: dict | None = None,
                   batch: int | None = None, rows: int | None = None, profile: bool = False,
                   budget: int | None = None) -> list[tuple[int, int]]:
        """Learn up to ``num_merges`` merges from unique words as flat arrays
        (``wordcount.WordCounts``' layout): ``data`` uint8 (the words back to back),
        ``lengths`` int64 (each ≥ 2), ``weights`` uint64 (each ≥ 1; total pair count < 2^64).

        Args:
            algorithm: "wordlist" (default, :mod:`~torch_gpubpe.training.wordlist_loop`) or "seed"
                (:mod:`~torch_gpubpe.training.seed_loop`). Same merges.
            batch: most merges per submit (batches start at 16 and double up to it).
            rows: initial pair-table rows (power of two; default from the distinct pairs).
            profile: (adapters with timestamp queries) sampled batches are recorded one pass
                per dispatch with timestamps; ``stats["gpu_us_per_merge"]``.
            budget: word list: walk steps + probes per thread per dispatch (default
                :func:`~torch_gpubpe.training.wordlist_loop.default_budget`; tests force small ones).
        Returns:
            the merges ``(left_id, right_id)``, merge k creating id ``256 + k``.
        Raises:
            InputError: more symbols than one storage binding holds.
            GPUOperationError: the pair table overflowed at its largest size.
        """
        _check_algorithm(algorithm)
        st = {} if stats is None else stats
        t0 = time.perf_counter()
        if algorithm in self.too_many_buffers:
            other = [a for a in ALGORITHMS if a not in self.too_many_buffers]
            why = (f"algorithm={algorithm!r} binds {self.too_many_buffers[algorithm]} storage "
                   f"buffers in one shader stage and {self.gpu.adapter_name} allows "
                   f"{self.storage_buffer_limit}")
            if not other:
                raise GPUOperationError(f"training on this adapter is not possible: {why}")
            st["algorithm_requested"], st["algorithm_changed_because"] = algorithm, why
            _notice_once(f"torch_gpubpe.train: {why}; training with algorithm={other[0]!r} "
                         "(the same merges, slower)")
            algorithm = other[0]
        lens = np.asarray(lengths, np.int64)
        st.update(algorithm=algorithm, restarts=0, rebuilds=0, walks_paused=0,
                  continuation_dispatches=0, continue_submits=0)
        if not len(lens) or num_merges <= 0:
            st.update(stream_symbols=int(lens.sum()), seconds_merge=0.0)
            return []
        g = self.gpu
        info = self.info[algorithm]
        c = info.consts
        data = np.asarray(data, np.uint8)
        sym = np.empty(len(data), np.uint32)
        sym[:] = data
        starts = np.zeros(len(lens), np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        # each symbol's word: a prefix sum of the word starts (4-5x faster than np.repeat)
        wid = np.zeros(len(data), np.uint32)
        wid[starts[1:]] = 1
        np.cumsum(wid, out=wid)
        # Distinct byte pairs inside words (≤ 65,536): sizes the pair table. The pair across
        # each word boundary is replaced by the next word's first pair (words have ≥ 2 bytes).
        pairs = data[:-1].astype(np.uint16) << 8
        pairs |= data[1:]
        pairs[starts[1:] - 1] = pairs[starts[1:]]
        seen = np.zeros(1 << 16, bool)
        seen[pairs] = True
        distinct = int(np.count_nonzero(seen))
        del pairs
        sym[starts] |= np.uint32(c["TWS"])
        wts = np.ascontiguousarray(weights, dtype=np.uint64).view(np.uint32)
        n = len(sym)
        if 4 * (n + 64) > g.binding_bytes(4):
            raise InputError(
                f"the unique words hold {n} symbols; this adapter binds at most "
                f"{g.binding_bytes(4) // 4} (train on fewer/shorter documents)"
            )
        cols = c["COLS"]
        max_rows = max(cols, _pow2_at_least(g.binding_bytes(4) // (8 * cols)) // 2)
        if rows is None:
            rows = max(cols, _pow2_at_least(8 * distinct // cols + 1))
        rows = min(max_rows, rows)
        batch = batch or (64 if self.is_cpu else 512)
        # Pair counts fit 32 bits when the corpus's total pair count is below 2^31 (a float
        # estimate: a margin below 2^32); the seed's pipeline always counts in 64.
        total_pairs = float(np.dot((lens - 1).astype(np.float64),
                                   np.asarray(weights, np.uint64).astype(np.float64)))
        wide = algorithm == "seed" or total_pairs >= 2.0 ** 31
        st.update(stream_symbols=n, distinct_initial_pairs=distinct, adapter=g.adapter_name,
                  merges_per_submit=batch, wide_counts=wide)
        st["seconds_upload_host"] = time.perf_counter() - t0   # the arrays built (numpy)
        while True:
            loop = _MergeLoop(self, algorithm, wide, sym, wid, starts, lens, wts,
                              num_merges, min_frequency, rows, batch, st, profile, budget)
            res = loop.run(progress, t0)
            if res is not None:
                return res
            if rows >= max_rows:
                raise GPUOperationError(
                    f"the pair table overflowed at its largest size ({rows * cols} slots)")
            rows = min(max_rows, rows * 4)
            st["restarts"] += 1


def _module(algorithm: str):
    from torch_gpubpe.training import seed_loop as train_seed
    from torch_gpubpe.training import wordlist_loop as train_wordlist

    return {"wordlist": train_wordlist, "seed": train_seed}[algorithm]


class _MergeLoop:
    """One training run: the algorithm's kernels on a :class:`~torch_gpubpe.training.pair_table.
    PairTable`, driven in batches of merges (this class owns every submit and readback).

    Flow: clear_table + pair_count once; batches of 16, 32, … up to ``batch`` merges recorded
    into one command buffer and one submit each, two in flight; per batch only the state
    words and the batch's merges are read back (the merge list stays on the GPU). Between
    batches: when half the pair table is taken (keys whose count fell to 0 stay) it is
    recounted from the current stream, grown when the live pairs fill a quarter; a probe
    sequence that ran out (S_OVERFLOW) ends the run (the caller retrains with a 4× table: same
    merges); word list: walks carried past their budget (S_PAUSE) are continued
    (wl_continue) before the next batch.
    """

    def __init__(self, trainer: GPUTrainer, algorithm: str, wide: bool, sym, wid, starts, lens,
                 wts, num_merges: int, min_frequency: int, rows: int, batch: int, st: dict,
                 profile: bool, budget: int | None) -> None:
        from torch_gpubpe.training.pair_table import PairTable

        mod = _module(algorithm)
        g = self.g = trainer.gpu
        info = trainer.info[algorithm]
        self.c = c = info.consts
        self.st, self.batch, self.num_merges = st, batch, num_merges
        self.is_cpu = trainer.is_cpu
        self.n = n = len(sym)
        self.max_rows = max(c["COLS"], _pow2_at_least(g.binding_bytes(4) // (8 * c["COLS"]))
                            // 2)
        pipes = trainer.pipelines(algorithm, wide, profile)
        self.walk_counters = profile and "S_WALK_STEPS" in c
        self.walk_totals = dict.fromkeys(("entries", "steps", "probes", "depth", "blocks"), 0)
        # (u32 counters on the GPU, wrapping)
        self.walk_last = dict.fromkeys(self.walk_totals, 0)
        if algorithm == "seed":
            params = {"tile_cap": mod.SeedKernels.tile_cap(n, c["TILE"])}
        else:
            budget = int(budget or mod.default_budget(g, trainer.is_cpu))
            params = {"budget": budget, **mod.long_params(trainer.is_cpu)}
            st["walk_budget"] = budget
        self.table = PairTable(g, info, num_merges, min_frequency, wts, rows, params,
                               f"train_{algorithm}")
        if algorithm == "seed":
            self.k = mod.SeedKernels(g, pipes, info, self.table, sym, wid)
            state = {"S_N": n}
        else:
            wgs = mod.grid_workgroups(len(lens), trainer.is_cpu)
            self.k = mod.WordListKernels(g, pipes, info, self.table, sym, wid, starts, lens,
                                         num_merges, wgs, trainer.is_cpu)
            state = self.k.initial_state()
            st["walk_workgroups"] = self.k.workgroups
        self.table.write_state(**state)
        st["table_slots"] = self.table.slots
        self.profiler = (_Profiler(g, mod.STEP) if profile and g.has_timestamps else None)
        # GPU time of each batch of merges, at least the time between timestamps written at
        # the start and end of its pass (slots 0, 1: the two readback buffers), read back with
        # it: what the TARGET_SUBMIT_S cap divides by. (From wall time alone a CPU adapter
        # misleads: there a batch runs inside the NEXT submit call, the batch then looked
        # free, and the next one was sized for 64 merges: 1.4 s on lavapipe.)
        self.ts = None
        if g.has_timestamps:
            from torch_gpubpe.gpu.wgpu_internals import timestamp_period_ns

            U = g.wgpu.BufferUsage
            self.ts = (g.device.create_query_set(label="train.batch_ts", type="timestamp",
                                                 count=4),
                       g.buffer(256 * 2, U.QUERY_RESOLVE | U.COPY_SRC, "train.batch_ts"),
                       timestamp_period_ns(g.device.queue) / 1e9)
        self.occ_mark = 0       # table occupancy at the last readback / rebuild
        self._last_submit: float | None = None   # perf_counter at the last submit (_submit)
        self._last_cpu = 0.0        # process_time at the last submit
        self._last_kind = "-"       # what the last submit was
        self._waited = 0.0          # seconds blocked on the GPU since the last submit
        self._in_submit = 0.0       # seconds the last queue.submit call took
        self.key_rate = 0.0     # new table keys per step (peak; on a CPU adapter halving)
        self.words = c["STATE_WORDS"]
        self.continue_reps = 1      # wl_continue dispatches in the first submit of a pause
        self.done_word = c.get("S_DONE")   # word list: a recorded merge not yet committed
        self.pause_word = c.get("S_PAUSE")
        self._gpu_bytes()

    def _gpu_bytes(self) -> None:
        b = self.table.gpu_bytes() + self.k.gpu_bytes()
        self.st["gpu_memory_bytes"] = max(self.st.get("gpu_memory_bytes", 0), b)

    # -- submits and readbacks ------------------------------------------------------------------
    def _submit(self, enc, what: str) -> None:
        """Submit ``enc``; keep the largest interval between the starts of two submits of the
        run (``stats["max_submit_gap_s"]``; ``["max_submit_gap_after"]`` / ``["_before"]``, the
        kinds of the submits that opened and ended it: init (a CPU adapter's first writes of
        its buffers, ``WordListKernels.init_pieces``), count, merges, continue;
        ``["max_submit_gap_wait_s"]``, of it the host blocked on GPU readbacks, and
        ``["max_submit_gap_in_submit_s"]``, in the submit call that opened it (a CPU adapter
        runs the work there); the rest is host work; ``["submits"]`` counts them;
        ``["max_submit_gap_cpu_s"]``, the most CPU time this process (all its threads: a CPU
        adapter's work too) spent between two submits): the longest
        the GPU waited for the host or one submit ran (issue 17 §1: at most 50 ms on a single
        5 MB word; :data:`TARGET_SUBMIT_S` caps the GPU work per submit)."""
        t = time.perf_counter()
        cpu = time.process_time()
        st, last = self.st, self._last_submit
        if last is not None:
            # (this process's CPU time over the gap, all threads: on a CPU adapter the GPU
            # work is in it, so it tells a slow submit from a busy machine)
            st["max_submit_gap_cpu_s"] = max(st.get("max_submit_gap_cpu_s", 0.0),
                                             cpu - self._last_cpu)
        self._last_cpu = cpu
        if last is not None and t - last > st.get("max_submit_gap_s", 0.0):
            # (after: the submit that opened the gap; wait: of the gap, the host blocked on
            # the GPU (readbacks: GPU work and latency); in_submit: in that submit call; the
            # rest host work)
            st["max_submit_gap_s"], st["max_submit_gap_before"] = t - last, what
            st["max_submit_gap_after"] = self._last_kind
            st["max_submit_gap_wait_s"] = self._waited
            st["max_submit_gap_in_submit_s"] = self._in_submit
        self._last_submit, self._last_kind, self._waited = t, what, 0.0
        st["submits"] = st.get("submits", 0) + 1
        self.g.device.queue.submit([enc.finish()])
        # (a CPU adapter runs the work inside submit: that time is GPU work there)
        self._in_submit = time.perf_counter() - t

    def _wait(self, promise, what: str) -> None:
        t = time.perf_counter()
        self.g.wait_promise(promise, what)
        self._waited += time.perf_counter() - t

    def _state(self) -> np.ndarray:
        t = time.perf_counter()
        v = self.g.read_u32(self.table.buffers["state"], 0, self.words, what="training state")
        self._waited += time.perf_counter() - t
        return v

    def _count(self, merges_done: int, n: int, setup: bool = False) -> None:
        """clear_table + pair_count over the current stream (``setup``: first the
        algorithm's own set-up dispatches, if it has any, after its buffers' first writes on a
        CPU adapter: bounded submits of their own, ``init_pieces``)."""
        from torch_gpubpe.gpu.wgpu_internals import raw_recorder

        pieces = self.k.init_pieces() if setup and hasattr(self.k, "init_pieces") else []
        for record in pieces:
            enc = self.g.device.create_command_encoder(label="train.init")
            record(enc)
            self._submit(enc, "init")
        if pieces:
            self.st["init_submits"] = self.st.get("init_submits", 0) + len(pieces)
        plans = self.k.count_plans(setup) if hasattr(self.k, "count_plans") else [(None, [])]
        if len(plans) > 1:      # a CPU adapter: the passes over the stream split into submits
            for wg0, steps in plans:
                if wg0 is not None:
                    self.table.set_state_word("S_WG0", wg0)
                enc = self.g.device.create_command_encoder(label="train.count")
                cp = enc.begin_compute_pass(label="train.count")
                raw_recorder().plan(cp, steps)(1)
                cp.end()
                self._submit(enc, "count")
            self.st["count_submits"] = self.st.get("count_submits", 0) + len(plans)
            return
        enc = self.g.device.create_command_encoder(label="train.count")
        cp = enc.begin_compute_pass(label="train.count")
        if setup and hasattr(self.k, "record_setup"):
            self.k.record_setup(cp)
        self.k.record_count(cp, merges_done, n)
        cp.end()
        self._submit(enc, "count")

    def _record(self, k0: int, cnt: int, buf, slot: int = 0):
        """Submit merges k0 .. k0+cnt-1 and the copy of state + their merges (+ the pass's
        two timestamps, query slot ``slot``) into ``buf``; the map's promise, and whether the
        timestamps were written (not in a profiled batch)."""
        from torch_gpubpe.gpu.wgpu_internals import raw_recorder

        g, b = self.g, self.table.buffers
        enc = g.device.create_command_encoder(label="train.merges")
        prof = self.profiler is not None and self.profiler.wants(k0)
        if prof:
            for k in range(k0, k0 + cnt):
                for name, pipe, bg, grid in self.k.steps(k):
                    cp = self.profiler.begin(enc, name, k - k0)
                    raw_recorder().plan(cp, [(pipe, bg, grid)])(1)
                    cp.end()
            self.profiler.resolve(enc)
        else:
            cp = self._timed_pass(enc, "train.merges", slot)
            self.k.record_merges(cp, k0, cnt)
            cp.end()
        nbytes = 4 * self.words
        enc.copy_buffer_to_buffer(b["state"], 0, buf, 0, nbytes)
        enc.copy_buffer_to_buffer(b["merges"], 16 * k0, buf, nbytes, 16 * cnt)
        if not prof:
            self._copy_ts(enc, slot, buf, nbytes + 16 * cnt)
        self._submit(enc, "merges")
        self.st["merge_submits"] = self.st.get("merge_submits", 0) + 1
        if prof:
            self.profiler.collect()
        return buf.map_async(map_read_mode(), 0, nbytes + 16 * cnt + 16), not prof

    def _timed_pass(self, enc, label: str, slot: int):
        """A compute pass, with start/end timestamps into query slot ``slot`` when the
        adapter has them."""
        if self.ts is None:
            return enc.begin_compute_pass(label=label)
        return enc.begin_compute_pass(label=label, timestamp_writes={
            "query_set": self.ts[0], "beginning_of_pass_write_index": 2 * slot,
            "end_of_pass_write_index": 2 * slot + 1})

    def _copy_ts(self, enc, slot: int, dst, offset: int) -> None:
        """Resolve slot ``slot``'s two timestamps and copy them (16 B) to ``dst`` at ``offset``."""
        if self.ts is not None:
            enc.resolve_query_set(self.ts[0], 2 * slot, 2, self.ts[1], 256 * slot)
            enc.copy_buffer_to_buffer(self.ts[1], 256 * slot, dst, offset, 16)

    def _ts_seconds(self, raw: np.ndarray, at: int) -> float | None:
        """The GPU seconds between the two u64 timestamps at u32 index ``at`` of ``raw``, or
        None without timestamps (or a value that cannot be a pass's time)."""
        if self.ts is None:
            return None
        t = raw[at:at + 4].view(np.uint64)
        d = (int(t[1]) - int(t[0])) * self.ts[2]
        return d if 0 <= d < 3600 else None

    def _continue_walks(self) -> np.ndarray:
        """Run wl_continue until no walk is carried (doubling the dispatches per submit up to
        MAX_CONTINUATIONS_PER_SUBMIT, and to what TARGET_SUBMIT_S allows at the GPU time
        measured per dispatch; a pause starts at the last one's count); release the hold; the
        state."""
        reps = self.continue_reps
        self.st["walks_paused"] += 1
        while True:
            enc = self.g.device.create_command_encoder(label="train.continue")
            cp = enc.begin_compute_pass(label="train.continue")
            self.k.record_continue(cp, reps)
            cp.end()
            t = time.perf_counter()
            self._submit(enc, "continue")
            self.st["continuation_dispatches"] += reps
            self.st["continue_submits"] = self.st.get("continue_submits", 0) + 1
            stv = self._state()
            # (submit → state read: the dispatches' GPU time plus one round trip; nothing else
            # is in flight here, so the wall time is right, and on lavapipe 2-3x the pass's
            # timestamps)
            per = (time.perf_counter() - t) / reps
            self.st["continue_s_per_dispatch"] = per
            cap = max(1, int(TARGET_SUBMIT_S / per)) if per > 0 else MAX_CONTINUATIONS_PER_SUBMIT
            if not stv[self.pause_word]:
                break
            reps = max(1, min(2 * reps, MAX_CONTINUATIONS_PER_SUBMIT, cap))
        # the next pause starts where this one's time per dispatch allows
        self.continue_reps = max(1, min(reps, cap))
        self.table.set_state_word("S_HOLD", 0)
        return stv

    def _tally(self, stv: np.ndarray) -> None:
        """Add the walk counters' growth since the last state read (each a wrapping u32;
        a batch adds far less than 2^32)."""
        if not self.walk_counters:
            return
        for key in self.walk_totals:
            v = int(stv[self.c[f"S_WALK_{key.upper()}"]])
            self.walk_totals[key] += (v - self.walk_last[key]) % (1 << 32)
            self.walk_last[key] = v

    def _drain(self, inflight: list) -> None:
        for b2, p2, *_ in inflight:
            self._wait(p2, "training state readback")
            b2.unmap()
        inflight.clear()

    def run(self, progress: ProgressFn | None, t0: float) -> list[tuple[int, int]] | None:
        """The merge loop; None when the pair table overflowed (caller restarts larger)."""
        g, st, c = self.g, self.st, self.c
        t_c = time.perf_counter()
        self._count(0, self.n, setup=True)
        self.occ_mark = int(self._state()[c["S_OCC"]])
        st["table_initial_load"] = self.occ_mark / self.table.slots
        t_up = time.perf_counter()
        st["seconds_upload"] = t_up - t0
        st["seconds_upload_gpu"] = t_up - t_c     # set-up + first pair count, waited for
        U = g.wgpu.BufferUsage
        nbytes = 4 * self.words
        staging = [g.buffer(nbytes + 16 * self.batch + 16, U.MAP_READ | U.COPY_DST,
                            f"train.readback{i}") for i in (0, 1)]
        inflight: list = []   # (buffer, promise, timed, k0, cnt, submitted at), oldest first, ≤ 2
        recorded = done = last_count = nbatches = n_now = 0
        stopped = need_rebuild = False
        size = 1                # doubles per batch (to self.batch) while the GPU time allows
        cap = self.batch        # merges per batch the GPU time per merge allows
        prev_done = 0.0         # when the last batch's readback completed
        while True:
            if need_rebuild and not inflight:
                self._rebuild(done, n_now)
                need_rebuild = False
            if (not stopped and not need_rebuild and recorded < self.num_merges
                    and len(inflight) < 2):
                cnt = min(size, cap, self.num_merges - recorded)
                buf = staging[nbatches % 2]
                t_sub = time.perf_counter()
                inflight.append((buf, *self._record(recorded, cnt, buf, nbatches % 2),
                                 recorded, cnt, t_sub))
                recorded += cnt
                nbatches += 1
                size = min(self.batch, size * 2)
                if len(inflight) < 2 and recorded < self.num_merges:
                    continue        # keep one batch queued behind the one being read
            if not inflight:
                break
            buf, promise, timed, k0, cnt, t_sub = inflight.pop(0)
            self._wait(promise, "training state readback")
            t_done = time.perf_counter()
            # the batch's GPU time: from its submit, or from the end of the one before it
            # (batches queue back to back), to its readback
            gpu_s = t_done - max(t_sub, prev_done)
            prev_done = t_done
            raw = np.frombuffer(buf.read_mapped(0, nbytes + 16 * cnt + 16), np.uint32).copy()
            buf.unmap()
            ts = self._ts_seconds(raw, self.words + 4 * cnt) if timed else None
            if ts is not None:     # (lavapipe: the wall estimate 2-3x the timestamps, or ~0)
                gpu_s = max(gpu_s, ts)
            raw = raw[:self.words + 4 * cnt]
            stv = raw[:self.words]
            if stv[c["S_OVERFLOW"]]:
                self._drain(inflight)
                return None
            if self.pause_word is not None and stv[self.pause_word]:
                # A walk ran out of budget: the queued batch did nothing (S_HOLD); continue
                # the carried walks, then go on from the merges done.
                self._drain(inflight)
                self._tally(stv)
                stv = self._continue_walks()
                recorded = int(stv[c["S_K"]]) + int(stv[self.done_word])
                # A CPU adapter's batches start again at one merge: the rest of a paused
                # batch (and all of the one queued behind it) were held, dispatches that do
                # nothing but still cost there (lavapipe: 2 x 63 held merges, ~110 ms in one
                # submit; a GPU holds a merge in microseconds).
                if self.is_cpu:
                    size = 1
            self._tally(stv)
            done = int(stv[c["S_K"]]) + (int(stv[self.done_word]) if self.done_word else 0)
            stopped = stopped or bool(stv[c["S_STOP"]])
            # A word-list step may make several merges: what is recorded is at least the
            # merges done and one per queued step.
            recorded = max(recorded if "S_SH" not in c else 0,
                           done + sum(f[4] for f in inflight))
            if "S_SH" in c:
                st["merge_steps"] = int(stv[c["S_SH"]])
            got = min(cnt, max(0, done - k0))
            if got == cnt and not (self.pause_word is not None and raw[self.pause_word]):
                per = gpu_s / cnt
                st["seconds_gpu_per_merge_max"] = max(st.get("seconds_gpu_per_merge_max", 0.0),
                                                      per)
                cap = max(1, min(self.batch, int(TARGET_SUBMIT_S / per) if per > 0
                                 else self.batch))
            if got:
                mm = raw[self.words:].reshape(-1, 4)[got - 1]
                last_count = int(mm[2]) | (int(mm[3]) << 32)
            if progress is not None:
                el = time.perf_counter() - t_up
                progress(TrainProgress(done, self.num_merges, last_count,
                                       done / el if el > 0 else 0.0))
            n_now = int(stv[c["S_N"]])
            occ = int(stv[c["S_OCC"]])
            # New keys per step, over the last batch read. Before a rebuild can take effect
            # the queued batch and the next one add keys: the trigger projects them to half
            # the table (a probe sequence runs out only near a full one, MAX_PROBE rows: twice
            # the projection still fits; past that the run restarts larger, exact). On a GPU
            # at the most keys per step seen and two full batches; on a CPU adapter at a peak
            # that halves per batch and the batches' real sizes: the first merges add the
            # most keys (the most frequent pairs), and two full batches at their rate grew a
            # 64 KB base64 word's table 8x, where find_max4's rescans cost with the table
            # (lavapipe: 28-42 ms per step, 7-10 ms at the table the run needed). (On the
            # H200, 868 MB at vocab 65,536, the same table either way, and the GPU rule's
            # extra rebuild, which drops dead keys, 3% faster: 14.3-14.4 against 14.8-15.0 us
            # per merge, 2026-12-03.)
            if occ >= self.occ_mark:
                rate = (occ - self.occ_mark) / max(1, cnt)
                self.key_rate = max(self.key_rate / 2 if self.is_cpu else self.key_rate, rate)
            self.occ_mark = occ
            st["table_max_load"] = max(st.get("table_max_load", 0.0), occ / self.table.slots)
            if self.is_cpu:
                coming = sum(f[4] for f in inflight) + min(size, cap,
                                                           max(0, self.num_merges - recorded))
            else:
                coming = 2 * self.batch
            ahead = int(self.key_rate * coming)
            if not stopped and (occ + ahead) * 2 > self.table.slots:
                need_rebuild = True   # once the queued batch has drained (the final stream)
        merges = g.read_u32(self.table.buffers["merges"], 0, 4 * done, what="merge list readback")
        st["seconds_merge"] = time.perf_counter() - t_up
        steps = st.get("merge_steps") or done
        if done and steps:
            st["merges_per_step"] = done / steps
        if self.profiler is not None:
            # (the profiler times steps: a word-list step may make several merges)
            per_step = self.profiler.per_merge_us()
            st["gpu_us_per_step"] = per_step
            st["gpu_us_per_merge"] = {k: v * steps / max(1, done) for k, v in per_step.items()}
        if hasattr(self.k, "long_stats"):
            st.update(self.k.long_stats())
            if st["long_chains_serial"]:
                _notice_once("torch_gpubpe.train: more long chains than the long-chain table "
                             "holds in one merge; the rest were walked by one thread each "
                             "(stats['long_chains_serial'])")
        if self.walk_counters and done:
            for key, total in self.walk_totals.items():
                st[f"walk_{key}_per_merge"] = total / done
        m = merges.reshape(-1, 4)
        return [(int(a), int(b)) for a, b in zip(m[:, 0], m[:, 1])]

    def _rebuild(self, merges_done: int, n: int) -> None:
        """Recount the pair table from the current stream (drops the keys whose count fell to
        0); grow it first when the live pairs would fill more than a quarter of it."""
        t0 = time.perf_counter()
        try:
            self._rebuild_table(merges_done, n)
        finally:
            self.st["seconds_rebuilds"] = (self.st.get("seconds_rebuilds", 0.0)
                                           + time.perf_counter() - t0)

    def _rebuild_table(self, merges_done: int, n: int) -> None:
        self.st["rebuilds"] += 1
        occ_word = self.c["S_OCC"]
        self._count(merges_done, n)
        occ = int(self._state()[occ_word])
        need = occ + int(self.key_rate * 2 * self.batch)   # live keys + what 2 batches add
        t = self.table
        if need * 4 > t.slots and t.rows < self.max_rows:
            rows = t.rows
            while need * 4 > rows * self.c["COLS"] and rows < self.max_rows:
                rows *= 2
            t.resize(rows)
            self.k.rebind()
            self.st["table_slots"] = t.slots
            self._gpu_bytes()
            self._count(merges_done, n)
            occ = int(self._state()[occ_word])
        self.occ_mark = occ


class _Profiler:
    """Timestamp queries around each dispatch of sampled batches (WGPU_NOTES.md §6)."""

    MAX_MERGES = 64  # per sampled batch (2 timestamps × 8 kernels × 64 = 1024 queries)

    def __init__(self, gpu, steps: tuple) -> None:
        from torch_gpubpe.gpu.wgpu_internals import timestamp_period_ns

        self.g = gpu
        self.steps = steps
        U = gpu.wgpu.BufferUsage
        self.n = 2 * len(steps) * self.MAX_MERGES
        self.qs = gpu.device.create_query_set(label="train.timestamps", type="timestamp",
                                              count=self.n)
        self.resolve_buf = gpu.buffer(8 * self.n, U.QUERY_RESOLVE | U.COPY_SRC, "train.ts")
        self.read_buf = gpu.buffer(8 * self.n, U.MAP_READ | U.COPY_DST, "train.ts_read")
        self.totals = {name: 0.0 for name in steps}
        self.merges = 0
        self.calls = 0
        self.used = 0
        self.names: list[str] = []
        self.ns_per_tick = timestamp_period_ns(gpu.device.queue)

    def wants(self, first_merge: int) -> bool:
        """Sample every 4th batch (the first is skipped: it includes lazy compilation)."""
        self.calls += 1
        return self.calls % 4 == 2

    def begin(self, enc, name: str, j: int):
        if j >= self.MAX_MERGES:
            return enc.begin_compute_pass(label=f"train.{name}")
        i = self.used
        self.used += 2
        self.names.append(name)
        return enc.begin_compute_pass(label=f"train.{name}", timestamp_writes={
            "query_set": self.qs, "beginning_of_pass_write_index": i,
            "end_of_pass_write_index": i + 1})

    def resolve(self, enc) -> None:
        if self.used:
            enc.resolve_query_set(self.qs, 0, self.used, self.resolve_buf, 0)
            enc.copy_buffer_to_buffer(self.resolve_buf, 0, self.read_buf, 0, 8 * self.used)

    def collect(self) -> None:
        if not self.used:
            return
        self.g.wait_map(self.read_buf, map_read_mode(), 0, 8 * self.used, "timestamp readback")
        t = np.frombuffer(self.read_buf.read_mapped(0, 8 * self.used), np.uint64).astype(np.int64)
        self.read_buf.unmap()
        for j, name in enumerate(self.names):
            self.totals[name] += max(0, int(t[2 * j + 1] - t[2 * j])) * self.ns_per_tick / 1e3
        self.merges += len(self.names) // len(self.steps)
        self.used = 0
        self.names = []

    def per_merge_us(self) -> dict[str, float]:
        m = max(1, self.merges)
        return {name: v / m for name, v in self.totals.items()}
