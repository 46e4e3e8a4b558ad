"""``train()``: documents → :class:`~torch_gpubpe.core.vocab.Vocab` on the GPU (DESIGN.md §2–§3).

The steps: the arguments checked first; the memory budget planned
(:func:`~torch_gpubpe.training.counting.plan_budget`); the device opened on a thread
(:class:`_Opener`) while this thread reads and packs the first documents; the words counted
(:func:`~torch_gpubpe.training.counting.count_budgeted`, GPU or CPU, spilling to disk under
the budget); spilled runs merged, rare words pruned, the merge phase's memory checked
(:mod:`~torch_gpubpe.training.memory`); then the merges learned from the counts
(:func:`~torch_gpubpe.training.from_counts.train_counts`).

Example::

    >>> from torch_gpubpe.training.api import train
    >>> vocab = train(["aaaaa aaaaa"], 258, min_frequency=1)
    >>> vocab.merges   # aa aa a: then (aa, a) and (aa, aa) tie at 2; the smaller pair wins
    ((97, 97), (256, 97))
"""

from __future__ import annotations

import dataclasses

import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch_gpubpe.encoding.regex_pretok as regex_pretok
import torch_gpubpe.training.gpu_counter as gpu_counter
from torch_gpubpe._util import is_hf
from torch_gpubpe.core.patterns import DEFAULT
from torch_gpubpe.core.vocab import Vocab
from torch_gpubpe.errors import InputError
from torch_gpubpe.gpu.device import get_gpu
from torch_gpubpe.training.batches import str_packer
from torch_gpubpe.training.counting import (check_count_args, count_budgeted, plan_budget,
                                            training_split)
from torch_gpubpe.training.from_counts import check_sizes, train_counts
from torch_gpubpe.training.gpu_trainer import WIDE_PAIRS, GPUTrainer, get_trainer
from torch_gpubpe.training.memory import check_merge_memory, default_max_memory, prune_words
from torch_gpubpe.training.merge_loop import check_algorithm
from torch_gpubpe.training.progress import ProgressBars, ProgressFn


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
    pre_tokenizer: str | None = None,
) -> Vocab:
    """Learn a byte-level BPE vocab from documents on the GPU (DESIGN.md §2–§3; seed training
    pipeline).

    Args:
        documents: iterable of ``str`` (UTF-8; lone surrogates → U+FFFD) or bytes-like items,
            a :class:`~torch_gpubpe.io.readers.Reader`, a Hugging Face ``Dataset`` /
            ``IterableDataset`` or a ``pyarrow`` table (its ``"text"`` column), or a
            ``pyarrow`` string / binary array (read as Arrow batches); consumed once,
            word-counted in batches (64 MiB on the GPU, 4 MiB on the CPU).
        vocab_size: total vocab size in tokens: 256 bytes + merges + special tokens;
            ``256 + len(special_tokens) ≤ vocab_size ≤ 262,144``.
        min_frequency: stop when the best pair's count is below this (counts are sums of word
            counts, exact 64-bit integers).
        special_tokens: spellings given ids after the last merge (they use up merge budget).
        progress: ``True`` shows tqdm progress bars on stderr (documents counted, then
            merges), like Hugging Face's trainers (``show_progress``); a callable is called
            with a :class:`~torch_gpubpe.training.progress.TrainProgress` after each batch of merges; ``None``/``False``:
            nothing. Each report's ``last_count`` is the count of the last merge learned so
            far and its ``merge_counts`` (uint64 array) the counts of the merges learned since
            the previous report, in order: concatenated over the reports, every merge's count
            (the pair's frequency when it was merged), e.g.
            ``np.concatenate([p.merge_counts for p in reports])``.
        stats: if a dict, filled with ``corpus_bytes``, ``num_documents`` (and, from a
            :class:`~torch_gpubpe.io.readers.Reader`, ``skipped_none``: its rows whose text is
            None, skipped, not counted as documents), ``unique_words``,
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
            (counting on the GPU: pyarrow.compute, which the end of counting uses),
            ``seconds_compile_wide`` (only where 2^31 bytes or more were counted: the 64-bit
            count variant);
            ``table_slots``, ``distinct_initial_pairs``, ``rebuilds``, ``restarts``,
            ``adapter``, ``merges_per_submit``, ``algorithm``, ``wide_counts``,
            ``gpu_memory_bytes`` (the run's GPU buffers), ``walks_paused`` and
            ``continuation_dispatches`` (word list: walks carried past the per-thread
            budget), ``wgpu_fallbacks`` (speed-only wgpu internals not used, see
            :mod:`~torch_gpubpe.gpu.wgpu_internals`), ``str_fallbacks`` (the str → UTF-8
            packers not used: :mod:`~torch_gpubpe.core.cpython_str`, ``"str_native"``:
            :mod:`~torch_gpubpe.core.str_pack`), ``str_packer`` (the one that packed the
            documents: :func:`~torch_gpubpe.training.batches.str_packer`), ``count_pipeline``
            (where counting's time went: :mod:`~torch_gpubpe.training.count_stream`),
            ``count_gpu_memory_bytes``, ``count_table_retries`` (batches counted again
            into a larger word table: its size guess was low, or a probe sequence ran out;
            :data:`~torch_gpubpe.training.gpu_counter.NEW_WORDS_MARGIN`), and, when counting spilled,
            ``spilled_runs``, ``spill_bytes``, ``seconds_spill``,
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
            :func:`~torch_gpubpe.training.gpu_counter.count_words_gpu`) or "cpu" (vectorised numpy
            on a thread pool, :func:`~torch_gpubpe.training.word_counts.count_words_cpu`). Same
            counts; both through :func:`~torch_gpubpe.training.counting.count_words`' steps.
        max_memory: host bytes this process may use while counting and merging (default:
            :func:`~torch_gpubpe.training.memory.default_max_memory`, 80% of the machine's RAM); see
            :mod:`~torch_gpubpe.training.budget`: refused at once (``InputError``, nothing read)
            when the counting buffers cannot fit; word tables over the budget's share are
            spilled to sorted runs on disk and merged exactly at the end; without
            ``prune_below``, refused during counting as soon as the distinct words seen prove
            that the merge phase (:func:`~torch_gpubpe.training.memory.estimate_merge_memory`) cannot fit; and checked again
            after counting, before the merge stream is built. Each ``InputError`` names what
            to change instead of the process running out of memory.
        prune_below: drop the words counted fewer than this many times before merging (0:
            none; the default keeps training exact). Pruning is how trainers fit corpora with
            very many rare words; the merges can then differ from exact training:
            ``stats["pruned_words"]`` counts them and a ``RuntimeWarning`` says so once.
        pre_tokenizer: the word split: DESIGN.md §2's (default) or a model's regex split by
            name or ``pat_str`` (``"gpt2"``, ``"cl100k"``, ``"o200k"``, ``"qwen2"``, ``"llama3"``,
            ``"qwen35"``, ``"starcoder"``: :data:`torch_gpubpe.core.patterns.PATTERN_OF`), done
            on the GPU before counting (the words are ``regex.findall``'s; ``count_on="cpu"``:
            ``regex`` itself). The vocab records it (:attr:`Vocab.pre_tokenizer`): its
            tokenizers, files and exports use it; the merges are rustbpe's with that pattern.
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
    if (is_hf(documents, "Dataset") or is_hf(documents, "IterableDataset")
            or _is_arrow(documents)):
        from torch_gpubpe.io.readers import open_source   # (lazy: only these need it)

        documents = open_source(documents)   # its "text" column, as Arrow batches
    if progress is True:
        bars = ProgressBars()
        try:
            return train(bars.documents(documents), vocab_size, min_frequency=min_frequency,
                         special_tokens=special_tokens, progress=bars.merges, stats=stats,
                         batch=batch, profile=profile, algorithm=algorithm, count_on=count_on,
                         max_memory=max_memory, prune_below=prune_below,
                         pre_tokenizer=pre_tokenizer)
        finally:
            bars.close()
            if stats is not None:   # (the bars' wrapper hides the reader's own stats)
                _note_skipped(documents, stats)
    if progress is False:
        progress = None
    check_sizes(vocab_size, special_tokens, min_frequency)
    check_algorithm(algorithm)
    check_count_args(documents, count_on, max_memory, prune_below)
    family = training_split(pre_tokenizer)
    st = {} if stats is None else stats
    t0 = time.perf_counter()
    st["seconds_setup"] = t0 - t_start     # (imports on the first call, argument checks)
    # The memory budget of counting: refused at once when it cannot work; tables over its
    # share are spilled to sorted runs on disk and merged at the end (exact).
    limit = default_max_memory() if max_memory is None else int(max_memory)
    budget, gpu_batch, prefetch = plan_budget(limit, prune_below, count_on, st)
    # The device opens on a thread from here on (_Opener), while this thread reads and packs
    # the first documents (the CPU counts the words, count_on="cpu"): in a fresh process the
    # opening (importing wgpu, the adapter, the device) is the longest step before counting.
    opener = _Opener(count_on == "gpu", family)
    info: dict = {"num_documents": 0, "corpus_bytes": 0}
    pool = ThreadPoolExecutor(1, thread_name_prefix="gpubpe-init")
    fut = pool.submit(opener.run)
    # (then, on the same thread, the 64-bit variant if the corpus grows large enough for it)
    pool.submit(lambda: opener.compile_wide(fut.result(), info))
    try:
        return _count_and_train(documents, vocab_size, budget, st, t0, gpu_batch, prefetch,
                                opener, fut, info, min_frequency=min_frequency,
                                special_tokens=special_tokens, progress=progress, batch=batch,
                                profile=profile, algorithm=algorithm, count_on=count_on,
                                max_memory=limit, prune_below=prune_below, family=family)
    finally:
        opener.counted.set()
        pool.shutdown(wait=True)
        st.update(opener.times)   # (with seconds_compile_wide, which may end during the merges)
        budget.close()


def _count_and_train(documents, vocab_size, budget, st, t0, gpu_batch, prefetch, opener, fut,
                     info, *, min_frequency, special_tokens, progress, batch, profile,
                     algorithm, count_on, max_memory, prune_below, family) -> Vocab:
    """train() after its checks: count under ``budget`` (``info``: the documents and bytes
    counted so far), then merge. ``opener`` (_Opener) is opening the device on a thread
    (``fut``): it compiles the counting pipelines first and says so, then the training
    pipelines while the GPU counts, then the 64-bit variant if the corpus grows large enough
    to need it."""
    count_stats: dict = {}
    counts, gpu_wait = count_budgeted(
        documents, budget, count_on=count_on, info=info, stats=st, count_stats=count_stats,
        gpu_batch=gpu_batch, prefetch=prefetch, open_gpu=lambda: opener.wait_gpu(fut),
        gpu_ready=opener.ready.is_set, t0=t0, family=family)
    opener.counted.set()        # (and in train()'s finally, when counting raised)
    t3 = time.perf_counter()
    trainer = fut.result()      # the training pipelines (compiled while counting)
    # (the 64-bit variant is not waited for here: a compile that started late goes on during
    # the merges, and a run that takes that variant waits for it in GPUTrainer.pipelines)
    t4 = time.perf_counter()
    if count_on == "cpu":       # (the device opened while the CPU counted: waited for here)
        gpu_wait, t3 = t4 - t3, t4
    st.update(opener.times)
    st.update(info)
    st["str_packer"] = str_packer(documents)
    nulls = _note_skipped(documents, st)
    if not info["corpus_bytes"]:
        raise InputError(
            f"empty corpus: {info['num_documents']} documents and 0 bytes of text"
            + (f" ({nulls:,} null rows skipped)" if nulls else "") + "; nothing to train on "
            "(check the source, its text column and any max_docs/max_bytes limit)")
    st["seconds_gpu_init_wait"] = gpu_wait
    st["seconds_compile_wait"] = t4 - t3
    st["seconds_count"] = t3 - t0 - gpu_wait
    t5 = time.perf_counter()
    st["count_on"] = count_on
    st["count_pipeline"] = {k: (round(v, 4) if isinstance(v, float) else v)
                            for k, v in count_stats.items()}
    spilled = bool(budget.runs)
    # spilled runs merged (a bar with train(progress=True), or a CLI progress callback)
    show = (isinstance(getattr(progress, "__self__", None), ProgressBars)
            or bool(getattr(progress, "show_bars", False)))
    counts = budget.finish(counts, progress=show)
    if prune_below > 1 and not spilled:
        counts = prune_words(counts, prune_below, st)
    check_merge_memory(counts, max_memory, st)
    st["seconds_prepare"] = time.perf_counter() - t5
    vocab = train_counts(counts, vocab_size, min_frequency=min_frequency,
                         special_tokens=special_tokens, progress=progress, stats=st,
                         batch=batch, profile=profile, algorithm=algorithm, trainer=trainer,
                         _stacklevel=4)   # (the caller of train)
    if family != "bytes-classes":
        vocab = dataclasses.replace(vocab, pre_tokenizer=family)
    st["seconds_total"] = time.perf_counter() - t0
    return vocab


def _is_arrow(obj: object) -> bool:
    """Whether ``obj`` is a ``pyarrow`` array, chunked array, table or record batch, without
    importing pyarrow (iterating one yields Arrow scalars, not ``str``)."""
    name = type(obj).__name__
    return type(obj).__module__.startswith("pyarrow") and (
        name.endswith("Array") or name in ("Table", "RecordBatch"))


def _note_skipped(documents, st: dict) -> int:
    """``st["skipped_none"]``: the rows a reader source skipped because their text is None
    (null, a missing field; :func:`~torch_gpubpe.io.readers.documents` counts them in the
    reader's ``stats``), when the source counts them; returns that count (0 otherwise)."""
    src = getattr(documents, "stats", None)
    if not isinstance(src, dict) or "skipped_none" not in src:
        return 0
    st["skipped_none"] = int(src["skipped_none"])
    return st["skipped_none"]


class _Opener:
    """train()'s device opening on a thread, in the order the run needs it: the device, the
    counting pipelines (then :attr:`ready` is set: the GPU can count), then the training
    pipelines (:func:`get_trainer`, compiled while the GPU counts), then (counting on the GPU)
    imports pyarrow.compute. :attr:`times`: ``seconds_gpu_open`` (importing wgpu, opening the
    adapter and device), ``seconds_compile_count``, ``seconds_compile_train``,
    ``seconds_import_arrow`` (on the thread), ``seconds_compile_wide`` (where
    :meth:`compile_wide` compiled).

    The 64-bit count variant of the training pipelines (corpora of ≥ 2^31 pairs) is compiled
    by :meth:`compile_wide` only once the bytes counted reach its threshold
    (:data:`~torch_gpubpe.training.gpu_trainer.WIDE_PAIRS`: a word has fewer pairs than
    bytes): a smaller corpus never uses it, and on a machine whose driver has no cache of it,
    compiling it competed with the counting."""

    def __init__(self, count_on_gpu: bool, family: str = DEFAULT) -> None:
        self.count_on_gpu = count_on_gpu
        self.family = family
        self.ready = threading.Event()
        self.counted = threading.Event()    # set by train() when counting has ended
        self.gpu = None
        self.times: dict[str, float] = {}

    def run(self) -> GPUTrainer:
        try:
            t = time.perf_counter()
            self.gpu = g = get_gpu()
            t1 = time.perf_counter()
            self.times["seconds_gpu_open"] = t1 - t
            if self.count_on_gpu:   # (GPUWordCounter's, then from the cache)
                specs = gpu_counter.pipeline_specs(g)
                if self.family != DEFAULT:
                    specs += regex_pretok.pipeline_specs(self.family)
                g.compile_pipelines(specs)
                self.times["seconds_compile_count"] = time.perf_counter() - t1
        finally:
            self.ready.set()
        t = time.perf_counter()
        tr = get_trainer()          # (the 32-bit count variant, compiled in its constructor)
        self.times["seconds_compile_train"] = time.perf_counter() - t
        if self.count_on_gpu:
            # The end of counting groups the words too long for the GPU table with
            # pyarrow.compute (long_words.group_words): imported here while the GPU counts, not
            # on the critical path after it (0.1-0.25 s in a fresh process).
            t = time.perf_counter()
            import pyarrow.compute  # noqa: F401
            self.times["seconds_import_arrow"] = time.perf_counter() - t
        return tr

    def compile_wide(self, tr: GPUTrainer, info: dict) -> None:
        """Compile the 64-bit count variant while counting goes on, once ``info``'s
        ``corpus_bytes`` reach ``WIDE_PAIRS``; nothing if counting ends first
        (the merge phase compiles it where a run needs it)."""
        if tr.is_cpu or "wordlist" in tr.too_many_buffers:
            return  # (a CPU adapter's compiling would take the cores that count)
        while info["corpus_bytes"] < WIDE_PAIRS:
            if self.counted.wait(0.05):
                return
        t = time.perf_counter()
        tr.pipelines("wordlist", wide=True)
        self.times["seconds_compile_wide"] = time.perf_counter() - t

    def wait_gpu(self, fut):
        """The opened GPU, once the counting pipelines are compiled (the thread's error, if it
        failed)."""
        while not self.ready.wait(0.05):
            if fut.done():
                break
        if self.gpu is None or fut.done():
            fut.result()          # raises the thread's error
        return self.gpu
