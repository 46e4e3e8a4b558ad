"""GPU BPE training: documents or word counts → :class:`~torch_gpubpe.vocab.Vocab`.

What is computed is DESIGN.md §3 exactly (the merges of :func:`torch_gpubpe.reference.train`);
how: ``wgsl/train.wgsl`` (see its header), run on the unique words of the corpus, each weighted
by its count, on one of two paths with the same merges:

* **sparse** (default): the stream of unique words stays in place, each word's live symbols
  linked by next indices, with an index of the words each token occurs in (per token a list:
  the words that held it when it was made); per merge the words of the rarer side of the best
  pair are walked, one thread per word, left to right (runs of A == B too), and only they are
  rewritten. 2 dispatches per merge: ``wl_find_max4 → wl_merge``. Words longer than
  ``SPARSE_MAX_WORD`` bytes (lavapipe's loop cap) send the run to the dense path;
* **dense**: the seed's ten-kernel pipeline, the stream compacted every merge
  (``find_max4 → find_max_final_det → [setup_merge] → merge_reduce → [scan_pass1] →
  scan_pass2 → [scan_pass3] → finalize_compact``).

On the H200 (95 MB of text, vocab 32,768: 32,512 merges) the merge loop took 0.75–0.80 s on
the sparse path and 2.11–2.14 s on the dense one (``benchmarks/train.py --compare-dense``).

Host flow:

1. count words: on the GPU by default (:func:`torch_gpubpe.wordcount.count_words_gpu`, a hash
   table keyed by the words' bytes; batches, up to ``PREFETCH_BYTES``, are packed on the host
   while a thread opens the device and compiles the pipelines), or on the CPU
   (``count_on="cpu"``: vectorised numpy on a thread pool); both exact;
2. upload the unique words as one symbol stream (id | bit 31 at word starts), a word index per
   symbol and a 64-bit weight per word (sparse: and the next links, the words' starts and the
   byte lists); the pair table is sized from the distinct byte pairs; pair counts are 32-bit
   when the corpus's total pair count is below 2^31 (train.wgsl WIDE), else 64-bit;
3. ``clear_table`` + ``pair_count`` (sparse: ``pair_count_linked``) once;
4. per merge the path's dispatches (above; dense: setup_merge and scan_pass1/3 folded away for
   streams of at most 2048 tiles: 5 dispatches per merge), batches of 16, 32, … up to
   ``batch`` merges recorded into one command buffer and one submit (native calls, no Python
   wrapper per dispatch); dense: the stream kernels are dispatched indirectly, sized on the
   GPU; the merge list stays on the GPU and only a 64-byte state (+ the batch's merges, for
   progress) is read back per batch, while the next batch already runs;
5. between batches, when half the pair table is taken (keys whose count fell to 0 stay), it is
   recounted from the current stream (grown when the live pairs fill a quarter); if a probe
   sequence ever ran out within a batch (overflow flag), training restarts with a 4× table
   (same result, only slower).

What bounds the time (H200, measured): a merge takes 21–38 µs (38 early, when lists are long;
21 late), of which ≈12–17 µs is the chain without any word walked (two dispatches of ≈2 µs
each, the dirty-block maxima, every workgroup's reduction of the block maxima, reading the
lists' heads) and the rest the word walks: latency-bound chains of dependent loads, not
bandwidth. The host records 2 dispatches per merge (≈2–4 µs each) while the GPU runs the
previous batch. No readback per merge. Before the merge loop: opening the device (≈0.2–1.4 s
in a fresh process: Vulkan, wgpu-py's cffi set-up, pipelines) and counting the words.

Example::

    >>> from torch_gpubpe.trainer import train
    >>> vocab = train(["aaaaa aaaaa"], 258, min_frequency=1)
    >>> vocab.merges   # aa aa a: then (aa, a) and (aa, aa) tie at 2; the smaller pair wins
    ((97, 97), (256, 97))
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ._wgpu_internals import fallbacks, map_read_mode
from .errors import GPUOperationError, InputError
from .reference import to_bytes
from .vocab import MAX_VOCAB_SIZE, Vocab

WG = 256
COLS = 32
BLOCK = 1024
TWS = 0x80000000
PC_SYMBOLS_PER_WG = 1024
STATE_WORDS = 16
S_N, S_NCUR, S_K, S_STOP, S_A, S_B, S_C, S_OCC, S_OVERFLOW = range(9)
S_CAPPED, S_DONE, S_TOP = 9, 12, 13   # (sparse path; words 10, 11 unused)
SMALL_WG_BYTES = 4 * WG * 4 + 128 * 4 + 64  # sh_a..sh_d, sh_sg, scalars: upper bound

# Bindings each entry point uses (layout="auto" holds exactly these).
_P, _STATE, _ARGS, _SYM_IN, _WID_IN, _SYM_OUT, _WID_OUT, _WEIGHTS = range(8)
_FLAGS, _TILES, _TKEYS, _TCOUNTS, _DIRTY, _BEST, _MERGES = range(8, 15)
_LSYM, _NXT = 15, 16
_WSTART, _TLIST, _POOL = range(19, 22)
ENTRY_BINDINGS = {
    "clear_table": (_P, _STATE, _TKEYS, _TCOUNTS, _DIRTY),
    "pair_count": (_P, _STATE, _SYM_IN, _WID_IN, _WEIGHTS, _TKEYS, _TCOUNTS, _DIRTY),
    "find_max4": (_P, _STATE, _TKEYS, _TCOUNTS, _DIRTY, _BEST),
    "find_max_final_det": (_P, _STATE, _ARGS, _BEST, _MERGES),
    "setup_merge": (_STATE, _ARGS),
    "merge_reduce": (_STATE, _SYM_IN, _TILES),
    "scan_pass1": (_STATE, _TILES),
    "scan_pass2": (_P, _STATE, _SYM_IN, _FLAGS, _TILES),
    "scan_pass3": (_P, _STATE, _TILES),
    "finalize_compact": (_P, _STATE, _SYM_IN, _WID_IN, _SYM_OUT, _WID_OUT, _WEIGHTS, _FLAGS,
                         _TILES, _TKEYS, _TCOUNTS, _DIRTY),
}
# The sparse path (train.wgsl "word-list path"): the linked stream, and per token the words it
# occurs in; per merge the block maxima, then one thread per word of the rarer side's list.
# 2 dispatches per merge.
SPARSE_BINDINGS = {
    "clear_table": ENTRY_BINDINGS["clear_table"],
    "pair_count_linked": (_P, _STATE, _WID_IN, _WEIGHTS, _TKEYS, _TCOUNTS, _DIRTY, _LSYM, _NXT),
    "wl_find_max4": (_P, _STATE, _TKEYS, _TCOUNTS, _DIRTY, _BEST, _TLIST),
    "wl_merge": (_P, _STATE, _WEIGHTS, _TKEYS, _TCOUNTS, _DIRTY, _BEST, _MERGES, _LSYM, _NXT,
                 _WSTART, _TLIST, _POOL),
}
SPARSE_STEP = ("wl_find_max4", "wl_merge")
# train(): documents packed into GPU batches while the device opens, at most this many bytes.
PREFETCH_BYTES = 256 << 20
# wl_merge's grid on a GPU (a sweep of 66–528 on the H200: 66–132 best, 528 22% slower; every
# workgroup reduces the block maxima itself, so more cost more).
SPARSE_WGS = 132
# Longest word (bytes) the sparse path takes: a word is walked by one thread per merge, and
# lavapipe stops a thread's loops after 65,535 iterations summed (WGPU_NOTES.md §5); a walk
# costs one iteration per live symbol plus the probe loops of its occurrences' deltas (a
# 12,000-byte run of one byte passed there). Longer words take the dense path.
SPARSE_MAX_WORD = 8_000
WALK_ITERS_PER_SYMBOL = 6   # estimate used to size wl_merge's grid for lavapipe (see S_CAPPED)
MERGE_STEP = ("find_max4", "find_max_final_det", "setup_merge", "merge_reduce", "scan_pass1",
              "scan_pass2", "scan_pass3", "finalize_compact")
# With at most FUSE_MAX_TILES stream tiles the one-workgroup scans are folded into the tile
# kernels and setup_merge into find_max_final_det (train.wgsl, override FUSED): 5 dispatches
# per merge instead of 8.
FUSE_MAX_TILES = 2048
MERGE_STEP_FUSED = tuple(n for n in MERGE_STEP
                         if n not in ("setup_merge", "scan_pass1", "scan_pass3"))
# Indirect dispatches: byte offset of their args (written by setup_merge).
INDIRECT = {"merge_reduce": 16, "scan_pass1": 32, "scan_pass2": 0, "finalize_compact": 0}
TILE = WG * 8  # symbols per stream workgroup (ITEMS = 8 per thread)


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
    progress: ProgressFn | None = None,
    stats: dict | None = None,
    batch: int | None = None,
    profile: bool = False,
    sparse: bool | None = None,
    count_on: str = "gpu",
) -> Vocab:
    """Learn a byte-level BPE vocab from documents on the GPU (DESIGN.md §2–§3; seed training
    pipeline).

    Args:
        documents: iterable of ``str`` (UTF-8; lone surrogates → U+FFFD) or bytes-like items;
            consumed once, word-counted in batches (64 MiB on the GPU, 4 MiB on the CPU).
        vocab_size: total vocab size in tokens: 256 bytes + merges + special tokens;
            ``256 + len(special_tokens) ≤ vocab_size ≤ 262,144``.
        min_frequency: stop when the best pair's count is below this (counts are sums of word
            counts, exact 64-bit integers).
        special_tokens: spellings given ids after the last merge (they use up merge budget).
        progress: called with a :class:`TrainProgress` after each batch of merges.
        stats: if a dict, filled with ``corpus_bytes``, ``num_documents``, ``unique_words``,
            ``stream_symbols``, ``num_merges``, ``count_on``, ``seconds_count`` (word
            counting, without ``seconds_gpu_init_wait``: the time spent waiting for the device
            to open and the pipelines to compile on a thread), ``seconds_upload``, ``seconds_merge``, ``seconds_total``,
            ``table_slots``, ``distinct_initial_pairs``, ``rebuilds``, ``restarts``,
            ``adapter``, ``merges_per_submit``, ``sparse`` (the path taken), ``fused_scans``
            (dense path) (and ``gpu_us_per_merge`` with ``profile``).
        batch: merges per submit (default: 64 on a CPU adapter, 512 otherwise).
        profile: time each kernel with timestamp queries on sampled batches (slower);
            ``stats["gpu_us_per_merge"]`` = mean GPU µs per merge of each kernel.
        sparse: force the sparse path (True; words of at most ``SPARSE_MAX_WORD`` bytes) or
            the dense one (False); default: sparse unless a word is longer (same merges).
        count_on: where the words are counted: "gpu" (default; wgsl/wordcount.wgsl, see
            :func:`~torch_gpubpe.wordcount.count_words_gpu`) or "cpu" (vectorised numpy on a
            thread pool, :func:`~torch_gpubpe.wordcount.count_words`). Same counts.
    Returns:
        the :class:`~torch_gpubpe.vocab.Vocab` (merges equal to ``reference.train``).
    Raises:
        ValueError: ``vocab_size`` out of range (names it and the bound), ``min_frequency < 1``,
            ``count_on`` not "gpu"/"cpu".
        InputError: ``documents`` is one ``str``/``bytes``, or a document is neither ``str``
            nor bytes (names its index).
        NoAdapterError, GPUOperationError: no usable GPU / a GPU operation failed.
    """
    from .wordcount import (DEFAULT_GPU_BATCH_BYTES, GPUWordCounter, WordCounts, _batches,
                            check_documents, count_words)

    _check_sizes(vocab_size, special_tokens, min_frequency)
    if count_on not in ("gpu", "cpu"):
        raise ValueError(f"count_on must be 'gpu' or 'cpu', got {count_on!r}")
    check_documents(documents)
    t0 = time.perf_counter()
    info: dict = {"num_documents": 0, "corpus_bytes": 0}
    # Open the device and compile the pipelines on a thread meanwhile: the CPU counts the words
    # (count_on="cpu") or packs the first batch for the GPU counter.
    with ThreadPoolExecutor(1, thread_name_prefix="gpubpe-init") as pool:
        fut = pool.submit(get_trainer)
        if count_on == "cpu":
            counts = WordCounts.from_dict(count_words(documents, info=info))
            t1 = time.perf_counter()
            trainer = fut.result()
            t2 = time.perf_counter()
        else:
            # Pack batches while the device opens (at least one, at most PREFETCH_BYTES).
            batches = _batches(documents, DEFAULT_GPU_BATCH_BYTES, info)
            ready: list = []
            held = 0
            for b in batches:
                ready.append(b)
                held += len(b[0])
                if fut.done() or held >= PREFETCH_BYTES:
                    break
            t1 = time.perf_counter()
            trainer = fut.result()
            t2 = time.perf_counter()
            counter = GPUWordCounter(trainer.gpu)
            with trainer.gpu.operation("counting words"):
                while ready:
                    counter.add_batch(*ready.pop(0))
                for data, offsets in batches:
                    counter.add_batch(data, offsets)
                counts = counter.result()
    st = {} if stats is None else stats
    st.update(info)
    st["seconds_gpu_init_wait"] = t2 - t1
    st["seconds_count"] = time.perf_counter() - t0 - (t2 - t1)
    st["count_on"] = count_on
    vocab = _train_counts(counts, vocab_size, min_frequency=min_frequency,
                          special_tokens=special_tokens, progress=progress, stats=st,
                          batch=batch, profile=profile, sparse=sparse, trainer=trainer)
    st["seconds_total"] = time.perf_counter() - t0
    return vocab


def _train_counts(wc, vocab_size: int, *, min_frequency: int, special_tokens: Sequence[str],
                  progress, stats: dict, batch, profile: bool, sparse, trainer=None) -> Vocab:
    """Train on ``wc`` (:class:`~torch_gpubpe.wordcount.WordCounts`, every count ≥ 1)."""
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
        merges = (trainer or get_trainer()).run_arrays(
            data, lk, ck, num_merges, int(min_frequency), progress=progress, stats=st,
            batch=batch, profile=profile, sparse=sparse)
    else:
        st.update(stream_symbols=0, seconds_merge=0.0)
    st["num_merges"] = len(merges)
    st["wgpu_fallbacks"] = fallbacks()
    return Vocab(tuple(merges), tuple(special_tokens))


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
    sparse: bool | None = None,
) -> Vocab:
    """Learn a vocab from a word → count mapping (DESIGN.md §3; words are taken as given, not
    pre-tokenized again). Same arguments, result and errors as :func:`train` (no
    ``count_on``), plus:

    Raises:
        ValueError: a count that is not an integer or is negative (names the word), or the
            total pair count reaching 2^64.
        InputError: a key that is neither ``str`` nor bytes (names it).
    """
    from .wordcount import WordCounts

    _check_sizes(vocab_size, special_tokens, min_frequency)
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
                          batch=batch, profile=profile, sparse=sparse)
    st["unique_words"] = len(word_counts)
    st.setdefault("seconds_count", 0.0)
    st["seconds_total"] = time.perf_counter() - t0
    return vocab


_trainers: dict[int, GPUTrainer] = {}
_trainers_lock = threading.Lock()


def get_trainer() -> GPUTrainer:
    """The :class:`GPUTrainer` of the process's GPU (pipelines compiled once per device)."""
    from .gpu import get_gpu

    with _trainers_lock:
        g = get_gpu()
        t = _trainers.get(id(g))
        if t is None or t.gpu is not g:
            _trainers.clear()
            t = _trainers[id(g)] = GPUTrainer(g)
        return t


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, int(x - 1).bit_length())


class GPUTrainer:
    """The ``train.wgsl`` pipelines of one device, compiled once; :meth:`run` trains.

    One instance may run many trainings (sequentially); buffers are per run.
    """

    def __init__(self, gpu=None) -> None:
        from .gpu import get_gpu

        self.gpu = g = gpu or get_gpu()
        lslots = 2048
        while lslots > 64 and 12 * lslots + SMALL_WG_BYTES > g.max_workgroup_storage:
            lslots //= 2
        self.local_slots = lslots
        self._pipes: dict[object, dict] = {}
        # Only the default path (word lists, 32-bit counts) is compiled up front, while the host
        # counts words; the other variants are compiled on first use (fewer pipelines competing
        # with counting).
        self.sparse_pipelines(wide=False)
        self.is_cpu = "cpu" in str(g.adapter_info.get("adapter_type", "")).lower()

    def _compile(self, key, names, counting_entry: str, constants: dict) -> dict:
        """Entry point → compute pipeline for ``names``, compiled once per ``key``."""
        if key not in self._pipes:
            g, lslots = self.gpu, self.local_slots
            self._pipes[key] = {
                name: g.pipeline("train", name,
                                 workgroup_bytes=12 * lslots if name == counting_entry
                                 else SMALL_WG_BYTES,
                                 constants={"LSLOTS": lslots, **constants})
                for name in names
            }
        return self._pipes[key]

    def pipelines(self, fused: bool) -> dict:
        """Entry point → compute pipeline, for the FUSED or the separate-scan variant."""
        return self._compile(fused, ENTRY_BINDINGS, "pair_count", {"FUSED": int(fused)})

    def sparse_pipelines(self, wide: bool = True) -> dict:
        """Entry point → compute pipeline of the sparse path, with 64-bit (``wide``) or
        32-bit pair counts (train.wgsl WIDE)."""
        return self._compile(("sparse", wide), SPARSE_BINDINGS, "pair_count_linked",
                             {"WIDE": int(wide)})

    # -- one training run ---------------------------------------------------------------------
    def run(self, words: list[bytes], weights: list[int], num_merges: int, min_frequency: int,
            *, progress: ProgressFn | None = None, stats: dict | None = None,
            batch: int | None = None, rows: int | None = None,
            profile: bool = False, fused: bool | None = None,
            sparse: bool | None = None) -> list[tuple[int, int]]:
        """Learn up to ``num_merges`` merges from unique ``words`` (each ≥ 2 bytes) with
        positive integer ``weights`` (< 2^64 in total pair count).

        Args:
            batch: most merges per submit (batches start at 16 and double up to it).
            rows: initial pair-table rows (power of two; default from the distinct pairs).
            fused: fold the one-workgroup scans into the tile kernels (default: when the
                stream has at most ``FUSE_MAX_TILES`` tiles of 2048 symbols); dense path only.
            sparse: use the sparse path (linked stream, per-token word lists; default
                when ``fused`` is None and no word is longer than ``SPARSE_MAX_WORD`` bytes)
                or the dense one (the stream compacted every merge). Same merges.
            profile: (adapters with timestamp queries) sampled batches are recorded one pass
                per dispatch with timestamps; ``stats["gpu_us_per_merge"]`` gets the mean GPU
                µs per merge of each kernel.
        Returns:
            the merges ``(left_id, right_id)``, merge k creating id ``256 + k``.
        """
        lens = np.fromiter((len(w) for w in words), np.int64, len(words))
        return self.run_arrays(
            np.frombuffer(b"".join(words), np.uint8), lens, np.array(weights, np.uint64),
            num_merges, min_frequency, progress=progress, stats=stats, batch=batch, rows=rows,
            profile=profile, fused=fused, sparse=sparse)

    def run_arrays(self, data: np.ndarray, lengths: np.ndarray, weights: np.ndarray,
                   num_merges: int, min_frequency: int, *, progress: ProgressFn | None = None,
                   stats: dict | None = None, batch: int | None = None, rows: int | None = None,
                   profile: bool = False, fused: bool | None = None,
                   sparse: bool | None = None) -> list[tuple[int, int]]:
        """:meth:`run` on words as flat arrays (``wordcount.WordCounts``' layout): ``data``
        uint8 (the words back to back), ``lengths`` int64 (each ≥ 2), ``weights`` uint64 (each
        ≥ 1); same arguments otherwise."""
        st = {} if stats is None else stats
        t0 = time.perf_counter()
        lens = np.asarray(lengths, np.int64)
        if not len(lens) or num_merges <= 0:
            st.update(stream_symbols=int(lens.sum()), seconds_merge=0.0,
                      sparse=bool(sparse), fused_scans=fused, restarts=0, rebuilds=0)
            return []
        sym = np.asarray(data, np.uint8).astype(np.uint32)
        starts = np.zeros(len(lens), np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        wid = np.repeat(np.arange(len(lens), dtype=np.uint32), lens)
        # Distinct byte pairs inside words (≤ 65,536): sizes the pair table.
        inner = np.ones(len(sym), bool)
        inner[starts] = False
        pairs = (sym[:-1] << 8 | sym[1:])[inner[1:]]
        distinct = int(np.count_nonzero(np.bincount(pairs, minlength=1 << 16)))
        sym[starts] |= np.uint32(TWS)
        wts = np.ascontiguousarray(weights, dtype=np.uint64).view(np.uint32)
        n = len(sym)
        g = self.gpu
        if 4 * (n + 64) > g.max_storage_binding:
            raise InputError(
                f"the unique words hold {n} symbols; this adapter binds at most "
                f"{g.max_storage_binding // 4} (train on fewer/shorter documents)"
            )
        max_rows = max(COLS, _pow2_at_least(g.max_storage_binding // (8 * COLS)) // 2)
        if rows is None:
            rows = max(COLS, _pow2_at_least(8 * distinct // COLS + 1))
        rows = min(max_rows, rows)
        batch = batch or (64 if self.is_cpu else 512)
        max_len = int(lens.max()) if len(lens) else 0
        if sparse is None:
            sparse = fused is None and max_len <= SPARSE_MAX_WORD
        elif sparse and max_len > SPARSE_MAX_WORD:
            raise ValueError(f"sparse=True takes words of at most {SPARSE_MAX_WORD} bytes; "
                             f"the longest has {max_len}")
        if fused is None:
            fused = (n + TILE - 1) // TILE <= FUSE_MAX_TILES
        st.update(stream_symbols=n, distinct_initial_pairs=distinct, restarts=0, rebuilds=0,
                  adapter=g.adapter_name, merges_per_submit=batch,
                  fused_scans=None if sparse else fused, sparse=sparse)
        while True:
            if not sparse:
                cls, extra = _Run, {}
            else:
                cls, extra = _SparseRun, {"max_len": max_len, "word_starts": starts,
                                          "word_lens": lens}
            run = cls(self, sym, wid, wts, n, num_merges, min_frequency, rows, batch,
                      max_rows, st, profile, fused, **extra)
            res = run.train(progress, t0)
            if res is not None:
                return res
            if getattr(run, "capped", False):
                # lavapipe's loop cap cut a word walk short (S_CAPPED): the dense path's loops
                # are bounded by construction; same merges.
                sparse = False
                st.update(sparse=False, fused_scans=fused, walk_capped=True)
                continue
            if rows >= max_rows:
                raise GPUOperationError(
                    f"the pair table overflowed at its largest size ({rows * COLS} slots)"
                )
            rows = min(max_rows, rows * 4)
            st["restarts"] += 1

    # -- recording --------------------------------------------------------------------------------
    def record_merges(self, cp, pipes: dict, bgs: list[dict], steps: tuple, args, k0: int,
                      cnt: int, grid_blocks) -> None:
        """Record merges ``k0 .. k0+cnt-1`` (``steps`` each) into the compute pass ``cp``.

        wgpu-py's host cost per dispatch (13–36 µs, WGPU_NOTES.md §10) would dominate 32k merges
        × 8 dispatches; the three native calls per dispatch are made directly through wgpu-py's
        cffi library (the same calls its own methods make, minus argument checking), with the
        wrappers as a fallback.
        """
        from ._wgpu_internals import raw_recorder

        plans = []
        for p in (0, 1):
            row = []
            for name in steps:
                grid = grid_blocks if name == "find_max4" else (1, 1)
                if name in INDIRECT:
                    grid = (args, INDIRECT[name])
                row.append((pipes[name], bgs[p][name], grid))
            plans.append(row)
        rec = raw_recorder()
        first, second = plans[k0 & 1], plans[(k0 + 1) & 1]
        rec.plan(cp, first + second)(cnt // 2)
        if cnt & 1:
            rec.plan(cp, first)(1)

    @staticmethod
    def dispatch(cp, pipe, bind_group, grid) -> None:
        cp.set_pipeline(pipe)
        cp.set_bind_group(0, bind_group)
        cp.dispatch_workgroups(grid[0], grid[1], 1)

    @staticmethod
    def dispatch_indirect(cp, pipe, bind_group, args, offset: int = 0) -> None:
        cp.set_pipeline(pipe)
        cp.set_bind_group(0, bind_group)
        cp.dispatch_workgroups_indirect(args, offset)


class _Run:
    """Buffers and state of one training run (see the module docstring for the flow)."""

    def __init__(self, trainer: GPUTrainer, sym, wid, wts, n, num_merges, min_frequency, rows,
                 batch, max_rows, st, profile, fused) -> None:
        self._init_common(trainer, n, len(wts), num_merges, min_frequency, batch, max_rows, st)
        self.pipes = trainer.pipelines(fused)
        self.steps = MERGE_STEP_FUSED if fused else MERGE_STEP
        g, U = self.g, self.g.wgpu.BufferUsage
        S, C = U.STORAGE, U.COPY_DST | U.COPY_SRC
        self.b.update({
            "sym0": g.buffer(4 * n + 16, S | C, "train.sym0"),
            "sym1": g.buffer(4 * n + 16, S | C, "train.sym1"),
            "wid0": g.buffer(4 * n + 16, S | C, "train.wid0"),
            "wid1": g.buffer(4 * n + 16, S | C, "train.wid1"),
            "flags": g.buffer(4 * n + 16, S, "train.flags"),
            "tiles": g.buffer(8 * self.tile_cap, S, "train.tiles"),
        })
        self._upload(rows, profile, weights=wts, sym0=sym, wid0=wid)

    def _init_common(self, trainer: GPUTrainer, n, num_weights, num_merges, min_frequency, batch,
                     max_rows, st) -> None:
        """State and buffers both paths share (params, state, args, weights, merges)."""
        self.t, self.g = trainer, trainer.gpu
        self.n, self.num_merges, self.batch, self.max_rows = n, num_merges, batch, max_rows
        self.st = st
        self.tile_cap = (n + TILE - 1) // TILE + 1
        mf = min(int(min_frequency), (1 << 64) - 1)
        self.min_freq = (mf & 0xFFFFFFFF, mf >> 32)
        g, U = self.g, self.g.wgpu.BufferUsage
        S, C = U.STORAGE, U.COPY_DST | U.COPY_SRC
        self.b = {
            "params": g.buffer(48, U.UNIFORM | U.COPY_DST, "train.params"),
            "state": g.buffer(4 * STATE_WORDS, S | C, "train.state"),
            "args": g.buffer(48, S | U.INDIRECT | C, "train.args"),
            "merges": g.buffer(16 * num_merges, S | C, "train.merges"),
            "weights": g.buffer(4 * num_weights, S | C, "train.weights"),
        }

    def _upload(self, rows: int, profile: bool, **arrays: np.ndarray) -> None:
        """Write the initial state and ``arrays`` (buffer name → data), then build the table."""
        q = self.g.device.queue
        state = np.zeros(STATE_WORDS, np.uint32)
        state[S_N] = self.n
        q.write_buffer(self.b["state"], 0, state)
        for name, a in arrays.items():
            q.write_buffer(self.b[name], 0, a)
        self._table(rows)
        self.profiler = _Profiler(self.g, self.steps) if profile and self.g.has_timestamps \
            else None
        self.occ_mark = 0       # table occupancy at the last readback / rebuild
        self.key_rate = 0.0     # most new table keys per merge seen in a batch

    def _table_buffers(self, rows: int, params_tail: tuple) -> None:
        """(Re)create the pair table's buffers for ``rows`` rows and write the params."""
        g, S = self.g, self.g.wgpu.BufferUsage.STORAGE
        self.rows = rows
        self.slots = rows * COLS
        self.nblocks = max(1, self.slots // BLOCK)
        self.b.update(
            tkeys=g.buffer(4 * self.slots, S, "train.table_keys"),
            tcounts=g.buffer(8 * self.slots, S, "train.table_counts"),
            dirty=g.buffer(4 * self.nblocks, S, "train.dirty"),
            best=g.buffer(16 * self.nblocks, S, "train.block_best"),
        )
        params = [self.num_merges, *self.min_freq, rows, self.nblocks, self.tile_cap, *params_tail]
        g.device.queue.write_buffer(self.b["params"], 0, np.array(
            params + [0] * (12 - len(params)), np.uint32))
        self.st["table_slots"] = self.slots

    def _table(self, rows: int) -> None:
        """(Re)create the pair table with ``rows`` rows, its params and the bind groups."""
        g = self.g
        self._table_buffers(rows, ())
        self.bgs = []
        b = self.b
        for p in (0, 1):
            res = {
                _P: b["params"], _STATE: b["state"], _ARGS: b["args"],
                _SYM_IN: b[f"sym{p}"], _WID_IN: b[f"wid{p}"],
                _SYM_OUT: b[f"sym{1 - p}"], _WID_OUT: b[f"wid{1 - p}"],
                _WEIGHTS: b["weights"], _FLAGS: b["flags"], _TILES: b["tiles"],
                _TKEYS: b["tkeys"], _TCOUNTS: b["tcounts"], _DIRTY: b["dirty"],
                _BEST: b["best"], _MERGES: b["merges"],
            }
            self.bgs.append({
                name: g.bind_group(self.pipes[name], {k: res[k] for k in binds},
                                   label=f"train.{name}.{p}")
                for name, binds in ENTRY_BINDINGS.items()
            })

    def _count(self, merges_done: int, n: int) -> None:
        """clear_table + pair_count over the current stream (``merges_done`` fixes its buffer)."""
        g = self.g
        bg = self.bgs[merges_done % 2]
        enc = g.device.create_command_encoder(label="train.count")
        cp = enc.begin_compute_pass(label="train.count")
        self.t.dispatch(cp, self.pipes["clear_table"], bg["clear_table"],
                        g.grid(-(-self.slots // WG)))
        self.t.dispatch(cp, self.pipes["pair_count"], bg["pair_count"],
                        g.grid(-(-max(n, 1) // PC_SYMBOLS_PER_WG)))
        cp.end()
        g.device.queue.submit([enc.finish()])

    def _record(self, k0: int, cnt: int, buf) -> object:
        """Record merges k0 .. k0+cnt-1 and the readback of state + their merges into ``buf``."""
        g, t, b = self.g, self.t, self.b
        enc = g.device.create_command_encoder(label="train.merges")
        prof = self.profiler is not None and self.profiler.wants(k0)
        grid_blocks = g.grid(self.nblocks)
        if prof:
            for k in range(k0, k0 + cnt):
                bg = self.bgs[k % 2]
                for name in self.steps:
                    cp = self.profiler.begin(enc, name, k - k0)
                    pipe = self.pipes[name]
                    if name in INDIRECT:
                        t.dispatch_indirect(cp, pipe, bg[name], b["args"], INDIRECT[name])
                    elif name == "find_max4":
                        t.dispatch(cp, pipe, bg[name], grid_blocks)
                    else:
                        t.dispatch(cp, pipe, bg[name], (1, 1))
                    cp.end()
            self.profiler.resolve(enc)
        else:
            cp = enc.begin_compute_pass(label="train.merges")
            t.record_merges(cp, self.pipes, self.bgs, self.steps, b["args"], k0, cnt,
                            grid_blocks)
            cp.end()
        enc.copy_buffer_to_buffer(b["state"], 0, buf, 0, 4 * STATE_WORDS)
        enc.copy_buffer_to_buffer(b["merges"], 16 * k0, buf, 4 * STATE_WORDS, 16 * cnt)
        g.device.queue.submit([enc.finish()])
        if prof:
            self.profiler.collect()
        return buf.map_async(map_read_mode(), 0, 4 * STATE_WORDS + 16 * cnt)

    def train(self, progress: ProgressFn | None, t0: float) -> list[tuple[int, int]] | None:
        """Run the merge loop; None when the pair table overflowed (caller restarts larger)."""
        g, st = self.g, self.st
        self._count(0, self.n)
        self.occ_mark = int(g.read_u32(self.b["state"], 4 * S_OCC, 1, what="table occupancy")[0])
        st["table_initial_load"] = self.occ_mark / self.slots
        t_up = time.perf_counter()
        st["seconds_upload"] = t_up - t0
        U = g.wgpu.BufferUsage
        staging = [g.buffer(4 * STATE_WORDS + 16 * self.batch, U.MAP_READ | U.COPY_DST,
                            f"train.readback{i}") for i in (0, 1)]
        inflight: list = []   # (buffer, promise, k0, cnt), oldest first, at most 2
        recorded = done = last_count = nbatches = 0
        stopped = need_rebuild = False
        size = min(16, self.batch)
        while True:
            if need_rebuild and not inflight:
                self._rebuild(done, n_now)
                need_rebuild = False
            if (not stopped and not need_rebuild and recorded < self.num_merges
                    and len(inflight) < 2):
                cnt = min(size, self.num_merges - recorded)
                buf = staging[nbatches % 2]
                inflight.append((buf, self._record(recorded, cnt, buf), recorded, cnt))
                recorded += cnt
                nbatches += 1
                size = min(self.batch, size * 2)
                if len(inflight) < 2 and recorded < self.num_merges:
                    continue        # keep one batch queued behind the one being read
            if not inflight:
                break
            buf, promise, k0, cnt = inflight.pop(0)
            g.wait_promise(promise, "training state readback")
            raw = np.frombuffer(buf.read_mapped(0, 4 * STATE_WORDS + 16 * cnt), np.uint32).copy()
            buf.unmap()
            stv = raw[:STATE_WORDS]
            if stv[S_OVERFLOW] or (self.steps == SPARSE_STEP and stv[S_CAPPED]):
                for b2, p2, _, _ in inflight:
                    g.wait_promise(p2, "training state readback")
                    b2.unmap()
                self.capped = self.steps == SPARSE_STEP and bool(stv[S_CAPPED])
                return None
            done = int(stv[S_K]) + int(stv[S_DONE])   # S_DONE: sparse path, see train.wgsl
            stopped = stopped or bool(stv[S_STOP])
            got = min(cnt, max(0, done - k0))
            if got:
                mm = raw[STATE_WORDS:].reshape(-1, 4)[got - 1]
                last_count = int(mm[2]) | (int(mm[3]) << 32)
            if progress is not None:
                el = time.perf_counter() - t_up
                progress(TrainProgress(done, self.num_merges, last_count,
                                       done / el if el > 0 else 0.0))
            n_now = int(stv[S_N])
            occ = int(stv[S_OCC])
            # New keys per merge, over the last batch read: the queued batch and the next one
            # will add about as many again before a rebuild can take effect.
            if occ >= self.occ_mark:
                self.key_rate = max(self.key_rate, (occ - self.occ_mark) / max(1, cnt))
            self.occ_mark = occ
            st["table_max_load"] = max(st.get("table_max_load", 0.0), occ / self.slots)
            ahead = int(self.key_rate * 2 * self.batch)
            if not stopped and (occ + ahead) * 2 > self.slots:
                # Rebuild once the queued batch has drained (it must see the final stream).
                need_rebuild = True
        merges = g.read_u32(self.b["merges"], 0, 4 * done, what="merge list readback")
        st["seconds_merge"] = time.perf_counter() - t_up
        if self.profiler is not None:
            st["gpu_us_per_merge"] = self.profiler.per_merge_us()
        m = merges.reshape(-1, 4)
        return [(int(a), int(c)) for a, c in zip(m[:, 0], m[:, 1])]

    def _rebuild(self, merges_done: int, n: int) -> None:
        """Recount the pair table from the current stream (drops the keys whose count fell to
        0); grow it first when the live pairs would fill more than a quarter of it."""
        self.st["rebuilds"] += 1
        self._count(merges_done, n)
        occ = int(self.g.read_u32(self.b["state"], 4 * S_OCC, 1, what="table occupancy")[0])
        need = occ + int(self.key_rate * 2 * self.batch)   # live keys + what 2 batches add
        if need * 4 > self.slots and self.rows < self.max_rows:
            rows = self.rows
            while need * 4 > rows * COLS and rows < self.max_rows:
                rows *= 2
            self._table(rows)
            self._count(merges_done, n)
            occ = int(self.g.read_u32(self.b["state"], 4 * S_OCC, 1, what="table occupancy")[0])
        self.occ_mark = occ


class _SparseRun(_Run):
    """One training run on the sparse path (train.wgsl "word-list path"): the stream stays in
    place, words linked by nxt; per token, the words it occurs in; per merge only the words of
    the rarer side's list are walked. Same flow (batches, readback, rebuilds, restarts) as
    :class:`_Run`."""

    def __init__(self, trainer: GPUTrainer, sym, wid, wts, n, num_merges, min_frequency, rows,
                 batch, max_rows, st, profile, fused, *, max_len: int, word_starts: np.ndarray,
                 word_lens: np.ndarray) -> None:
        self._init_common(trainer, n, len(wts), num_merges, min_frequency, batch, max_rows, st)
        total_pairs = float(np.dot((word_lens - 1).astype(np.float64),
                                   wts.view(np.uint64).astype(np.float64)))
        self.wide = total_pairs >= 2.0 ** 31   # float estimate: a margin below 2^32
        st["wide_counts"] = self.wide
        self.pipes = trainer.sparse_pipelines(self.wide)
        self.steps = SPARSE_STEP
        nwords = len(wts) // 2
        self.max_walk = int(max_len) + 1
        g, U = self.g, self.g.wgpu.BufferUsage
        S, C = U.STORAGE, U.COPY_DST | U.COPY_SRC
        wstart = word_starts.astype(np.uint32)
        nxt = np.arange(1, n + 1, dtype=np.uint32)
        nxt[word_starts + word_lens - 1] = 0xFFFFFFFF      # the last symbol of every word
        # Byte lists: the words holding each byte value, each word once (stable radix sort of
        # the bytes keeps the word order inside a byte's group, so duplicates are adjacent).
        byte = (sym & np.uint32(0xFF)).astype(np.uint8)
        order = np.argsort(byte, kind="stable")
        bs, ws = byte[order], wid[order]
        keep = np.ones(n, bool)
        keep[1:] = (bs[1:] != bs[:-1]) | (ws[1:] != ws[:-1])
        base = ws[keep]
        lens = np.bincount(bs[keep], minlength=256).astype(np.uint32)
        tlist = np.zeros(2 * (256 + num_merges), np.uint32)
        tlist[1:512:2] = lens
        tlist[2:512:2] = np.cumsum(lens[:-1], dtype=np.uint32)
        pool_size = len(base) + (n - nwords) + 16
        # wl_merge: grid-stride over a list (≤ words). On a CPU adapter (lavapipe: 65,535 loop
        # iterations per thread, all loops summed) the grid is widened so that rounds × a word
        # walk's iterations stay under the cap (WALK_ITERS_PER_SYMBOL is an estimate: a walk
        # cut short raises S_CAPPED and the run is retrained on the dense path); on a GPU the
        # grid stays SPARSE_WGS (more workgroups cost more: each reduces the block maxima).
        if trainer.is_cpu:
            iters_cap = max(1, 60_000 // (WALK_ITERS_PER_SYMBOL * (self.max_walk + 8)))
            self.list_wgs = max(4, -(-nwords // (WG * iters_cap)))
        else:
            self.list_wgs = SPARSE_WGS
        self.list_iters = -(-nwords // (WG * self.list_wgs))
        self.b.update({
            "lsym": g.buffer(4 * n + 16, S | C, "train.lsym"),
            "nxt": g.buffer(4 * n + 16, S | C, "train.nxt"),
            "wid0": g.buffer(4 * n + 16, S | C, "train.wid"),
            "wstart": g.buffer(4 * nwords + 16, S | C, "train.wstart"),
            "tlist": g.buffer(4 * len(tlist), S | C, "train.tlist"),
            "pool": g.buffer(4 * pool_size, S | C, "train.pool"),
        })
        self._top = len(base)
        self._upload(rows, profile, weights=wts, lsym=sym, nxt=nxt, wid0=wid, wstart=wstart,
                     tlist=tlist, pool=base)

    def _upload(self, rows: int, profile: bool, **arrays: np.ndarray) -> None:
        super()._upload(rows, profile, **arrays)
        self.g.device.queue.write_buffer(self.b["state"], 4 * S_TOP,
                                         np.array([self._top], np.uint32))

    def _table(self, rows: int) -> None:
        g = self.g
        self._table_buffers(rows, (self.max_walk, self.list_iters, 0))
        b = self.b
        res = {
            _P: b["params"], _STATE: b["state"], _WID_IN: b["wid0"], _WEIGHTS: b["weights"],
            _TKEYS: b["tkeys"], _TCOUNTS: b["tcounts"], _DIRTY: b["dirty"], _BEST: b["best"],
            _MERGES: b["merges"], _LSYM: b["lsym"], _NXT: b["nxt"], _WSTART: b["wstart"],
            _TLIST: b["tlist"], _POOL: b["pool"],
        }
        bg = {name: g.bind_group(self.pipes[name], {k: res[k] for k in binds},
                                 label=f"train.{name}")
              for name, binds in SPARSE_BINDINGS.items()}
        self.bgs = [bg, bg]

    def _grids(self) -> dict:
        g = self.g
        return {"wl_find_max4": g.grid(self.nblocks), "wl_merge": g.grid(self.list_wgs)}

    def _count(self, merges_done: int, n: int) -> None:
        """clear_table + pair_count_linked over the whole (linked) stream."""
        g = self.g
        bg = self.bgs[0]
        enc = g.device.create_command_encoder(label="train.count")
        cp = enc.begin_compute_pass(label="train.count")
        self.t.dispatch(cp, self.pipes["clear_table"], bg["clear_table"],
                        g.grid(-(-self.slots // WG)))
        self.t.dispatch(cp, self.pipes["pair_count_linked"], bg["pair_count_linked"],
                        g.grid(-(-max(self.n, 1) // PC_SYMBOLS_PER_WG)))
        cp.end()
        g.device.queue.submit([enc.finish()])

    def _record(self, k0: int, cnt: int, buf) -> object:
        """Record merges k0 .. k0+cnt-1 and the readback of state + their merges into ``buf``."""
        g, t, b = self.g, self.t, self.b
        enc = g.device.create_command_encoder(label="train.merges")
        prof = self.profiler is not None and self.profiler.wants(k0)
        grids = self._grids()
        bg = self.bgs[0]
        if prof:
            for k in range(k0, k0 + cnt):
                for name in self.steps:
                    cp = self.profiler.begin(enc, name, k - k0)
                    t.dispatch(cp, self.pipes[name], bg[name], grids[name])
                    cp.end()
            self.profiler.resolve(enc)
        else:
            cp = enc.begin_compute_pass(label="train.merges")
            from ._wgpu_internals import raw_recorder

            plan = [(self.pipes[name], bg[name], grids[name]) for name in self.steps]
            raw_recorder().plan(cp, plan)(cnt)
            cp.end()
        enc.copy_buffer_to_buffer(b["state"], 0, buf, 0, 4 * STATE_WORDS)
        enc.copy_buffer_to_buffer(b["merges"], 16 * k0, buf, 4 * STATE_WORDS, 16 * cnt)
        g.device.queue.submit([enc.finish()])
        if prof:
            self.profiler.collect()
        return buf.map_async(map_read_mode(), 0, 4 * STATE_WORDS + 16 * cnt)


class _Profiler:
    """Timestamp queries around each dispatch of sampled batches (WGPU_NOTES.md §6)."""

    MAX_MERGES = 64  # per sampled batch (2 timestamps × 8 kernels × 64 = 1024 queries)

    def __init__(self, gpu, steps: tuple) -> None:
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
        from ._wgpu_internals import timestamp_period_ns

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
