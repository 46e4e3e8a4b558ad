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

The code is in modules of one step each, and their public names are re-exported here:
:mod:`~torch_gpubpe.training.api` (:func:`train`), :mod:`~torch_gpubpe.training.from_counts`
(:func:`train_from_word_counts`), :mod:`~torch_gpubpe.training.counting` (word counting as
training does it), :mod:`~torch_gpubpe.training.memory`, :mod:`~torch_gpubpe.training.progress`,
:mod:`~torch_gpubpe.training.gpu_trainer` (:class:`GPUTrainer`) and
:mod:`~torch_gpubpe.training.merge_loop` (:class:`~torch_gpubpe.training.merge_loop.MergeLoop`
owns every submit and readback; the kernel classes only record).

Host flow:

1. count words: on the GPU by default (:mod:`torch_gpubpe.training.gpu_counter`; batches,
   up to :data:`~torch_gpubpe.training.counting.PREFETCH_BYTES`, are packed on the host while a thread opens the device and
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
   words (+ for progress, the merges the batch may have learned) are read back per
   batch, while the next batch already runs;
5. between batches: the pair table recounted (and grown) when half full; a probe sequence that
   ran out restarts training with a 4× table (same result); carried walks continued.

Example::

    >>> from torch_gpubpe.training.trainer import train
    >>> vocab = train(["aaaaa aaaaa"], 258, min_frequency=1)
    >>> vocab.merges   # aa aa a: then (aa, a) and (aa, aa) tie at 2; the smaller pair wins
    ((97, 97), (256, 97))
"""

from __future__ import annotations

from torch_gpubpe.training.api import train
from torch_gpubpe.training.counting import PREFETCH_BYTES
from torch_gpubpe.training.from_counts import train_from_word_counts
from torch_gpubpe.training.gpu_trainer import GPUTrainer, get_trainer
from torch_gpubpe.training.memory import (MEMORY_PER_SYMBOL, MEMORY_PER_WORD, default_max_memory,
                                          estimate_merge_memory)
from torch_gpubpe.training.merge_loop import (ALGORITHMS, MAX_CONTINUATIONS_PER_SUBMIT,
                                              TARGET_SUBMIT_S)
from torch_gpubpe.training.progress import ProgressFn, TrainProgress

__all__ = [
    "ALGORITHMS", "MAX_CONTINUATIONS_PER_SUBMIT", "MEMORY_PER_SYMBOL", "MEMORY_PER_WORD",
    "PREFETCH_BYTES", "TARGET_SUBMIT_S", "GPUTrainer", "ProgressFn", "TrainProgress",
    "default_max_memory", "estimate_merge_memory", "get_trainer", "train",
    "train_from_word_counts",
]
