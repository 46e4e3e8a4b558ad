"""Word counts as files: count per shard, merge many, train from the merged counts.

The format and its reading and writing are in :mod:`~torch_gpubpe.training.counts_format`, the
merge in :mod:`~torch_gpubpe.training.counts_merge` (their names are re-exported here); this
module counts into a file and trains from one.

A vocabulary of a corpus too large for one machine: word counting (DESIGN.md §2) is the part
that grows with the data, and counts add up. So each machine counts its shards into a counts
file (:func:`count_to_file`, GPU or CPU counter), the files are merged by a streaming k-way
merge (:func:`merge_counts`: bounded memory, exact 64-bit sums), and one GPU learns the merges
from the result (:func:`train_from_counts_file`). The merges equal those of training on the
whole corpus at once (DESIGN.md §3: training depends only on the word counts). The same idea as
sentencepiece's ``word\\tcount`` input.

The file format (a sorted Parquet file of ``word``, ``count``) is documented in
:mod:`~torch_gpubpe.training.counts_format`.

Example::

    >>> import os, tempfile
    >>> from torch_gpubpe.training.counts_file import count_to_file, merge_counts, read_counts
    >>> d = tempfile.mkdtemp()
    >>> a = count_to_file(["a b a"], os.path.join(d, "a.parquet"), count_on="cpu")
    >>> b = count_to_file(["b b"], os.path.join(d, "b.parquet"), count_on="cpu")
    >>> m = merge_counts([a, b], os.path.join(d, "all.parquet"))
    >>> sorted(read_counts(m).to_dict().items())
    [(b' a', 1), (b' b', 2), (b'a', 1), (b'b', 1)]
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from torch_gpubpe.core.patterns import DEFAULT
from torch_gpubpe.core.vocab import PRE_TOKENIZER, TRAINED_SPLITS
from torch_gpubpe.errors import InputError
from torch_gpubpe.training.count_stream import count_stream
from torch_gpubpe.training.counting import count_words, training_split
from torch_gpubpe.training.counts_format import (DEFAULT_BATCH_ROWS, DEFAULT_FAN_IN, FORMAT_NAME,
                                                 FORMAT_VERSION, META_KEY, ROW_GROUP_ROWS,
                                                 PathLike, iter_count_batches, read_counts,
                                                 read_metadata, sort_order, to_table,
                                                 write_counts, write_long_counts)
from torch_gpubpe.training.counts_merge import BATCH_BYTES, iter_merged, merge_counts
from torch_gpubpe.training.from_counts import check_sizes, train_counts
from torch_gpubpe.training.gpu_counter import GPUWordCounter
from torch_gpubpe.training.word_counts import PartialCounts, WordCounts, count_batch

__all__ = [
    "BATCH_BYTES", "DEFAULT_BATCH_ROWS", "DEFAULT_FAN_IN", "FORMAT_NAME", "FORMAT_VERSION",
    "META_KEY", "ROW_GROUP_ROWS", "PathLike", "count_packed", "count_to_file",
    "iter_count_batches", "iter_merged", "merge_counts", "read_counts", "read_metadata",
    "sort_order", "to_table", "train_from_counts_file", "write_counts", "write_long_counts",
]


# -- counting -----------------------------------------------------------------------------------
def count_packed(batches: Iterable[tuple[np.ndarray, np.ndarray]], *, count_on: str = "gpu",
                 gpu=None, pre_tokenizer: str | None = None):
    """Word counts of packed document batches (DESIGN.md §2), GPU or CPU; same counts.

    Args:
        batches: ``(data, offsets)`` pairs: ``data`` uint8, shape ``(n,)``, the documents'
            bytes back to back; ``offsets`` int64, shape ``(num_docs + 1,)``, document k is
            ``data[offsets[k]:offsets[k+1]]`` (offsets[0] == 0).
        count_on: "gpu" (:class:`~torch_gpubpe.training.gpu_counter.GPUWordCounter`) or "cpu"
            (the vectorised numpy counter of :mod:`torch_gpubpe.training.word_counts`).
        pre_tokenizer: the word split, as :func:`~torch_gpubpe.training.api.train`'s.
    Returns:
        :class:`~torch_gpubpe.training.word_counts.WordCounts` (words in no particular order).
    Raises:
        ValueError: ``count_on`` is neither "gpu" nor "cpu".
        NoAdapterError, GPUOperationError: (GPU) no usable GPU / a GPU operation failed.
    """
    if count_on not in ("gpu", "cpu"):
        raise ValueError(f"count_on must be 'gpu' or 'cpu', got {count_on!r}")
    fam = training_split(pre_tokenizer)
    if count_on == "cpu":
        total = PartialCounts()
        for data, offsets in batches:
            total.add(count_batch(np.asarray(data, np.uint8), np.asarray(offsets, np.int64),
                                  fam))
        return WordCounts.from_dict(total.to_counter())
    counter = GPUWordCounter(gpu, family=fam)
    with counter.g.operation("counting words"):   # through mapped staging (count_stream)
        count_stream(counter, ((np.asarray(d, np.uint8), np.asarray(o, np.int64))
                               for d, o in batches))
        return counter.result()


def count_to_file(documents: Iterable[str | bytes], path: PathLike, *, count_on: str = "gpu",
                  stats: dict | None = None, pre_tokenizer: str | None = None) -> Path:
    """Count the words of ``documents`` (one shard of a corpus) into a counts file
    (:func:`~torch_gpubpe.training.counting.count_words`, no memory limit: a shard's counts are
    not trained on here).

    Args:
        documents: ``str`` (UTF-8; lone surrogates → U+FFFD) or bytes-like items, consumed
            once in batches.
        path: the counts file to write (format: module docstring).
        count_on: "gpu" (default) or "cpu"; same counts.
        stats: if a dict, filled with ``num_documents``, ``corpus_bytes``, ``num_words``,
            ``seconds_count``, ``seconds_write``.
        pre_tokenizer: the word split, as :func:`~torch_gpubpe.training.api.train`'s; the file
            records it (merging files of different splits is refused).
    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    Raises:
        InputError: ``documents`` is one ``str``/``bytes``, or an item is neither (names it).
        ValueError: ``count_on`` is neither "gpu" nor "cpu".
    """
    t0 = time.perf_counter()
    fam = training_split(pre_tokenizer)
    cst: dict = {}
    wc = count_words(documents, count_on=count_on, stats=cst, pre_tokenizer=fam)
    t1 = time.perf_counter()
    out = write_counts(wc, path, num_documents=cst["num_documents"],
                       corpus_bytes=cst["corpus_bytes"],
                       pre_tokenizer=PRE_TOKENIZER if fam == DEFAULT else fam)
    if stats is not None:
        stats.update(num_documents=cst["num_documents"], corpus_bytes=cst["corpus_bytes"],
                     num_words=len(wc), seconds_count=t1 - t0,
                     seconds_write=time.perf_counter() - t1)
    return out


# -- training -----------------------------------------------------------------------------------
def train_from_counts_file(path: PathLike, vocab_size: int, *, min_frequency: int = 2,
                           special_tokens: Sequence[str] = (), progress=None,
                           stats: dict | None = None, batch: int | None = None,
                           algorithm: str = "wordlist"):
    """Learn a vocab on the GPU from a counts file (DESIGN.md §3): the merges of
    :func:`torch_gpubpe.training.api.train` on the documents that were counted into it.

    Args:
        path: a counts file (:func:`count_to_file` or :func:`merge_counts`).
        vocab_size, min_frequency, special_tokens, progress, batch, algorithm: as
            :func:`~torch_gpubpe.training.trainer.train`.
        stats: as :func:`~torch_gpubpe.training.trainer.train` (``corpus_bytes`` and
            ``num_documents`` from the file's metadata; ``seconds_count`` is the read time).
    Returns:
        the :class:`~torch_gpubpe.core.vocab.Vocab`.
    Raises:
        InputError: not a valid counts file, one with no words, or one of a pre-tokenizer this package does not
            know (the vocab records the file's split).
        ValueError: ``vocab_size``/``min_frequency`` out of range.
        NoAdapterError, GPUOperationError: no usable GPU / a GPU operation failed.
    """
    check_sizes(vocab_size, special_tokens, min_frequency)
    t0 = time.perf_counter()
    meta = read_metadata(path)
    split = meta.get("pre_tokenizer")
    if split != PRE_TOKENIZER and split not in TRAINED_SPLITS:
        raise InputError(f"{str(path)!r}: counts of pre-tokenizer {split!r}; this trainer's "
                         f"vocabularies use {PRE_TOKENIZER!r} or one of {TRAINED_SPLITS}")
    if not meta.get("num_words"):
        raise InputError(f"empty corpus: the counts file {str(path)!r} holds no words "
                         f"({int(meta.get('num_documents', 0)):,} documents counted, "
                         f"{int(meta.get('corpus_bytes', 0)):,} bytes)")
    wc = read_counts(path)
    st = {} if stats is None else stats
    st.update(num_documents=int(meta.get("num_documents", 0)),
              corpus_bytes=int(meta.get("corpus_bytes", 0)), count_on="file",
              seconds_count=time.perf_counter() - t0)
    vocab = train_counts(wc, vocab_size, min_frequency=min_frequency,
                         special_tokens=special_tokens, progress=progress, stats=st,
                         batch=batch, profile=False, algorithm=algorithm)
    if split != PRE_TOKENIZER:   # (the split the words were counted with)
        vocab = dataclasses.replace(vocab, pre_tokenizer=split)
    st["seconds_total"] = time.perf_counter() - t0
    return vocab
