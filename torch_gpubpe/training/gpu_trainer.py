"""The training pipelines of one device (:class:`GPUTrainer`) and the process's trainer
(:func:`get_trainer`): the words uploaded as one symbol stream, then :class:`~torch_gpubpe.
training.merge_loop.MergeLoop` learns the merges (restarted with a 4× pair table when a probe
sequence ran out: the same merges).

The upload: the unique words as one symbol stream (id | bit 31 at word starts), a word index per
symbol and a 64-bit weight per word (word list: the links and per-byte occurrence lists are
built from the stream on the GPU); the pair table is sized from the distinct byte pairs; pair
counts are 32-bit when the corpus's total pair count is below 2^31, else 64-bit.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from torch_gpubpe.errors import GPUOperationError, InputError
from torch_gpubpe.gpu.device import get_gpu
from torch_gpubpe.training.merge_loop import (ALGORITHMS, MergeLoop, algorithm_module,
                                              check_algorithm, notice_once, pow2_at_least)
import torch_gpubpe.training.pair_table as pair_table
from torch_gpubpe.training.pair_table import local_slots, training_shader
from torch_gpubpe.training.progress import ProgressFn, ProgressReporter

# From this total pair count on, pair counts are 64-bit (train_table.wgsl WIDE): a 32-bit count
# keeps a margin below 2^32 for the float estimate of the total.
WIDE_PAIRS = 2 ** 31

_trainers: dict[int, GPUTrainer] = {}
_trainers_lock = threading.Lock()


def get_trainer() -> GPUTrainer:
    """The :class:`GPUTrainer` of the process's GPU (pipelines compiled once per device)."""
    with _trainers_lock:
        g = get_gpu()
        t = _trainers.get(id(g))
        if t is None or t.gpu is not g:
            _trainers.clear()
            t = _trainers[id(g)] = GPUTrainer(g)
        return t



class GPUTrainer:
    """The training pipelines of one device (``train_wordlist.wgsl``, ``train_seed.wgsl``),
    compiled once each; :meth:`run` trains. One instance may run many trainings
    (sequentially); buffers are per run."""

    def __init__(self, gpu=None) -> None:
        self.gpu = g = gpu or get_gpu()
        self.info = {a: training_shader(g, algorithm_module(a).SHADER) for a in ALGORITHMS}
        self.local_slots = local_slots(g, self.info["wordlist"])
        self._pipes: dict[tuple, dict] = {}
        self._locks: dict[tuple, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self.is_cpu = g.is_cpu
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
        key = (algorithm, bool(wide), bool(profile))
        with self._locks_lock:    # (one lock per variant: train()'s opening thread may be
            lock = self._locks.setdefault(key, threading.Lock())   # compiling this one)
        with lock:
            if key not in self._pipes:
                consts = {"LSLOTS": self.local_slots, "WIDE": int(wide)}
                if profile and "PROFILE" in self.info[algorithm].overrides:
                    consts["PROFILE"] = 1
                # (through the module: tests wrap compile_pipelines)
                self._pipes[key] = pair_table.compile_pipelines(
                    self.gpu, algorithm_module(algorithm).SHADER, consts)
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
            progress: called with a :class:`~torch_gpubpe.training.progress.TrainProgress`
                after each batch (``last_count``; ``merge_counts``: each merge's count, once,
                also through restarts).
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
        check_algorithm(algorithm)
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
            notice_once(f"torch_gpubpe.train: {why}; training with algorithm={other[0]!r} "
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
        max_rows = max(cols, pow2_at_least(g.binding_bytes(4) // (8 * cols)) // 2)
        if rows is None:
            rows = max(cols, pow2_at_least(8 * distinct // cols + 1))
        rows = min(max_rows, rows)
        batch = batch or (64 if self.is_cpu else 512)
        # Pair counts fit 32 bits when the corpus's total pair count is below 2^31 (a float
        # estimate: a margin below 2^32); the seed's pipeline always counts in 64.
        total_pairs = float(np.dot((lens - 1).astype(np.float64),
                                   np.asarray(weights, np.uint64).astype(np.float64)))
        wide = algorithm == "seed" or total_pairs >= WIDE_PAIRS
        st.update(stream_symbols=n, distinct_initial_pairs=distinct, adapter=g.adapter_name,
                  merges_per_submit=batch, wide_counts=wide)
        st["seconds_upload_host"] = time.perf_counter() - t0   # the arrays built (numpy)
        # (one reporter through the restarts: their merges are reported once)
        reporter = None if progress is None else ProgressReporter(progress, num_merges)
        while True:
            loop = MergeLoop(self, algorithm, wide, sym, wid, starts, lens, wts,
                              num_merges, min_frequency, rows, batch, st, profile, budget)
            res = loop.run(reporter, t0)
            if res is not None:
                return res
            if rows >= max_rows:
                raise GPUOperationError(
                    f"the pair table overflowed at its largest size ({rows * cols} slots)")
            rows = min(max_rows, rows * 4)
            st["restarts"] += 1

