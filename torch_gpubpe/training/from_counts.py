"""Training on word counts: the argument checks every entry point shares (:func:`check_sizes`),
:func:`train_counts` (:class:`~torch_gpubpe.training.word_counts.WordCounts` → Vocab on the GPU),
and :func:`train_from_word_counts` (a word → count mapping → Vocab).

Example::

    >>> from torch_gpubpe.training.from_counts import train_from_word_counts
    >>> train_from_word_counts({"aaaaa": 2}, 257, min_frequency=1).merges
    ((97, 97),)
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np

from torch_gpubpe import notices
from torch_gpubpe.core import str_pack
from torch_gpubpe.core.reference import to_bytes
from torch_gpubpe.core.vocab import MAX_VOCAB_SIZE, Vocab, checked_special_tokens
from torch_gpubpe.errors import InputError
from torch_gpubpe.gpu.wgpu_internals import fallbacks
from torch_gpubpe.training.gpu_trainer import get_trainer
from torch_gpubpe.training.merge_loop import check_algorithm
from torch_gpubpe.training.progress import ProgressFn
from torch_gpubpe.training.word_counts import WordCounts


def check_sizes(vocab_size: int, special_tokens: Sequence[str], min_frequency: int) -> int:
    """The number of merges ``vocab_size`` leaves after the 256 bytes and ``special_tokens``;
    ``TypeError``/``ValueError`` naming the argument when one is out of range. (Everything that
    could fail after hours of training is checked here, first.)"""
    specials = checked_special_tokens(special_tokens)
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


def train_counts(wc, vocab_size: int, *, min_frequency: int, special_tokens: Sequence[str],
                  progress, stats: dict, batch, profile: bool, algorithm: str = "wordlist",
                  trainer=None, _stacklevel: int = 3) -> Vocab:
    """Train on ``wc`` (:class:`~torch_gpubpe.training.word_counts.WordCounts`, every count ≥ 1):
    the merges on the GPU (``trainer``, default :func:`get_trainer`), ``stats`` filled, a
    ``RuntimeWarning`` when fewer merges than asked were found."""
    t0 = time.perf_counter()
    num_merges = check_sizes(vocab_size, special_tokens, min_frequency)
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
        # call opens a fresh device.
        with tr.gpu.operation(f"training {num_merges} merges"):
            merges = tr.run_arrays(
                data, lk, ck, num_merges, int(min_frequency), progress=progress, stats=st,
                batch=batch, profile=profile, algorithm=algorithm)
    else:
        st.update(stream_symbols=0, seconds_merge=0.0, algorithm=algorithm)
    st["num_merges"] = len(merges)
    st["wgpu_fallbacks"] = fallbacks()
    st["str_fallbacks"] = str_pack.fallbacks()
    if len(merges) < num_merges:
        st["stopped_early"] = (
            f"training stopped after {len(merges)} of {num_merges} merges: no pair of tokens "
            f"occurs at least min_frequency={min_frequency} times any more (a small corpus); "
            f"the vocab has {256 + len(merges) + len(special_tokens)} ids, not {vocab_size}")
        notices.warn(st["stopped_early"], stacklevel=_stacklevel)
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
    algorithm: str = "wordlist",
) -> Vocab:
    """Learn a vocab from a word → count mapping (DESIGN.md §3; words are taken as given, not
    pre-tokenized again). Same arguments, result and errors as :func:`~torch_gpubpe.training.api.train` (no
    ``count_on``), plus:

    Raises:
        ValueError: a count that is not an integer or is negative (names the word), or the
            total pair count reaching 2^64.
        InputError: a key that is neither ``str`` nor bytes (names it).
    """
    check_sizes(vocab_size, special_tokens, min_frequency)
    check_algorithm(algorithm)
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
    vocab = train_counts(wc, vocab_size, min_frequency=min_frequency,
                          special_tokens=special_tokens, progress=progress, stats=st,
                          batch=batch, profile=profile, algorithm=algorithm)
    st["unique_words"] = len(word_counts)
    st.setdefault("seconds_count", 0.0)
    st["seconds_total"] = time.perf_counter() - t0
    return vocab

