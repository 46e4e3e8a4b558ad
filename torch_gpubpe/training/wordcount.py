"""Word counting for training: documents → {word bytes: count} (DESIGN.md §2, §3).

The names of this module, kept where they were imported from; the code is in

* :mod:`~torch_gpubpe.training.batches`: documents packed into batches (:func:`document_batches`);
* :mod:`~torch_gpubpe.training.word_counts`: :class:`WordCounts` and the exact CPU counter;
* :mod:`~torch_gpubpe.training.gpu_counter`: the GPU counter (:class:`GPUWordCounter`,
  :func:`count_words_gpu`, ``wgsl/wordcount.wgsl``);
* :mod:`~torch_gpubpe.training.long_words`: words too long for the GPU table, grouped.

:func:`torch_gpubpe.training.count_words` is the one entry point that counts as training does
(GPU or CPU, under a memory budget). :func:`count_words` here is the CPU counter, returning a
``Counter`` (equal to :func:`torch_gpubpe.core.reference.count_words`).

Example::

    >>> from torch_gpubpe.training.wordcount import count_words
    >>> sorted(count_words(["a b a", b"a"]).items())
    [(b' a', 1), (b' b', 1), (b'a', 2)]
"""

from __future__ import annotations

from torch_gpubpe.training.batches import (HostBatch, check_documents, document_batches,
                                           str_packer)
from torch_gpubpe.training.gpu_counter import (DEFAULT_GPU_BATCH_BYTES, FIRST_NEW_WORDS, MAXW,
                                               MIN_NEW_WORDS, NEW_WORDS_MARGIN, GPUWordCounter,
                                               count_words_gpu)
from torch_gpubpe.training.long_words import (FEW_LONG_WORDS, LONG_GROUP_BYTES, ends_after,
                                              group_words)
from torch_gpubpe.training.word_counts import (DEFAULT_BATCH_BYTES, LEN_MASK, PartialCounts,
                                               WordCounts, concat_counts, count_batch,
                                               count_words_cpu, u64_at, word_starts_fast)

count_words = count_words_cpu

__all__ = [
    "DEFAULT_BATCH_BYTES", "DEFAULT_GPU_BATCH_BYTES", "FEW_LONG_WORDS", "FIRST_NEW_WORDS",
    "GPUWordCounter", "HostBatch", "LEN_MASK", "LONG_GROUP_BYTES", "MAXW", "MIN_NEW_WORDS",
    "NEW_WORDS_MARGIN", "PartialCounts", "WordCounts", "check_documents", "concat_counts",
    "count_batch", "count_words", "count_words_cpu", "count_words_gpu", "document_batches",
    "ends_after", "group_words", "str_packer", "u64_at", "word_starts_fast",
]
