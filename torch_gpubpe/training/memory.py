"""Host memory of training: the merge phase's estimate, this process's RSS, the checks.

:func:`estimate_merge_memory` is what the merge phase adds per unique word and per symbol
(fitted to measured peaks, on the high side); :func:`check_merge_memory` refuses, with what to
change, a run whose merge phase cannot fit ``max_memory``; :func:`prune_words` drops rare words
(``prune_below``). :mod:`~torch_gpubpe.training.budget` uses the same estimate while counting.
"""

from __future__ import annotations

import os

import numpy as np

from torch_gpubpe import notices
from torch_gpubpe.errors import InputError
from torch_gpubpe.training.word_counts import WordCounts

# Host bytes the merge phase adds per unique word and per symbol of the merge stream (word
# index, links, per-token word lists, the counts' copies). Fitted to measured peak RSS of
# training runs from 250 K to 1.6 M unique words, on GPU and CPU adapters; on the high side.
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


def rss_bytes() -> int:
    """This process's resident memory now (0 where /proc is absent)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def check_merge_memory(wc, max_memory: int | None, st: dict) -> None:
    """Raise :class:`InputError` when training ``wc`` (:class:`WordCounts`) would take this
    process past ``max_memory`` (None: :func:`default_max_memory`); the estimate and the limit
    go to ``st``."""
    if not len(wc.lengths):     # (pruning dropped every word: nothing to hold; train says so)
        return
    limit = default_max_memory() if max_memory is None else int(max_memory)
    need = rss_bytes() + estimate_merge_memory(len(wc.lengths), int(wc.lengths.sum()))
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


def prune_words(wc, below: int, st: dict):
    """``wc`` without the words counted fewer than ``below`` times (recorded and warned)."""
    keep = wc.counts >= below
    st["pruned_words"] = int((~keep).sum())
    if keep.all():
        return wc
    notices.warn(f"torch_gpubpe.train: prune_below={below} dropped {st['pruned_words']:,} of "
                 f"{len(keep):,} unique words before merging; the merges can differ from "
                 "training on every word", stacklevel=3)
    return WordCounts(wc.data[np.repeat(keep, wc.lengths)], wc.lengths[keep], wc.counts[keep])

