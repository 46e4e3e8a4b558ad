"""Words too long for the GPU word table (over ``MAXW`` bytes), grouped exactly on the host.

The GPU counter finds their positions; their ends come from the word-start bitmap
(:func:`ends_after`), their bytes from the batch (:meth:`~torch_gpubpe.training.batches.HostBatch.words`),
and :func:`group_words` sums their counts by word: Arrow's hash group-by in general, a BLAKE2b
digest with byte-for-byte comparison for few, long words (one-word documents of MBs).
"""

from __future__ import annotations

import numpy as np

from torch_gpubpe.training.word_counts import WordCounts, empty_counts


def ends_after(bits: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """For each position ``p`` (int64), the first set bit of the uint32 bitmap ``bits`` after
    ``p`` (one must exist: wc_starts sets bit n)."""
    j = pos + 1
    w = j >> 5
    x = bits[w].astype(np.uint64) & ((np.uint64(0xFFFFFFFF) << (j & 31).astype(np.uint64))
                                      & np.uint64(0xFFFFFFFF))
    empty = np.flatnonzero(x == 0)
    if len(empty):
        nz = np.flatnonzero(bits)
        w2 = nz[np.searchsorted(nz, w[empty] + 1)]
        w[empty] = w2
        x[empty] = bits[w2]
    low = x & (~x + np.uint64(1))
    return (w << 5) + np.log2(low.astype(np.float64)).astype(np.int64)


def group_words(parts: list[tuple]) -> WordCounts:
    """Exact counts of words given as ``[(bytes back to back, int64 lengths[, uint64
    counts])]`` (a part without counts: each word once): Arrow's hash group-by over the bytes
    (no Python object per word)."""
    if not parts:
        return empty_counts()
    lens = np.concatenate([p[1] for p in parts]).astype(np.int64)
    if not len(lens):
        return empty_counts()
    if len(lens) <= FEW_LONG_WORDS and int(lens.sum()) >= LONG_GROUP_BYTES * len(lens):
        return _group_few(parts)
    import pyarrow as pa    # (here, not above: 0.3-0.6 s in a fresh process, mostly not needed)

    data = np.concatenate([p[0] for p in parts])
    counts = np.concatenate([p[2] if len(p) > 2 else np.ones(len(p[1]), np.uint64)
                             for p in parts]).astype(np.uint64)
    parts.clear()                                   # (the caller's list: its arrays freed)
    off = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    arr = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(lens),
                                           [None, pa.py_buffer(off), pa.py_buffer(data)])
    del data
    # Arrow's hash dictionary encoding (pyarrow.compute), then the counts summed per distinct
    # word in uint64 (exact). Not Table.group_by (it imports pyarrow.acero, and with it
    # pandas: a slow import in a fresh process, on train's critical path), and the indices
    # read from their buffer, not by Array.to_numpy (which imports pandas too).
    enc = arr.dictionary_encode()
    del arr
    ind = enc.indices                               # int32, no nulls
    idx = np.frombuffer(ind.buffers()[1], np.int32, len(ind), ind.offset)
    words = enc.dictionary
    sums = np.zeros(len(words), np.uint64)
    np.add.at(sums, idx, counts)
    del enc, idx, counts
    bufs = words.buffers()
    o = np.frombuffer(bufs[1], np.int64, len(words) + 1, words.offset * 8)
    d = np.frombuffer(bufs[2], np.uint8, int(o[-1] - o[0]), int(o[0])).copy()
    return WordCounts(d, np.diff(o), sums)


# group_words of few, long words (e.g. one-word documents of 1 MB): grouped by a BLAKE2b digest
# of their bytes (hashlib reads the arrays in place), equal digests compared byte for byte
# (exact), the distinct words copied once: about 1x their bytes more, where Arrow's group-by
# takes ~4x (enough to break a memory budget on corpora of MB-long words).
FEW_LONG_WORDS = 1 << 16
LONG_GROUP_BYTES = 4096     # at least this many bytes per word on average


def _group_few(parts: list[tuple]) -> WordCounts:
    import hashlib

    groups: dict[bytes, list] = {}      # digest -> [[word (a view), count], ...]
    for p in parts:
        data = np.asarray(p[0], np.uint8)
        off = np.zeros(len(p[1]) + 1, np.int64)
        np.cumsum(p[1], out=off[1:])
        cnt = p[2] if len(p) > 2 else None
        for k, (a, b) in enumerate(zip(off[:-1].tolist(), off[1:].tolist())):
            w = data[a:b]
            c = 1 if cnt is None else int(cnt[k])
            same = groups.setdefault(hashlib.blake2b(w, digest_size=16).digest(), [])
            for g in same:
                if len(g[0]) == len(w) and np.array_equal(g[0], w):
                    g[1] += c
                    break
            else:
                same.append([w, c])
    parts.clear()                                   # (the caller's list)
    words = [g for same in groups.values() for g in same]
    del groups
    lengths = np.fromiter((len(g[0]) for g in words), np.int64, len(words))
    counts = np.fromiter((g[1] for g in words), np.uint64, len(words))
    data = np.empty(int(lengths.sum()), np.uint8)
    at = 0
    for g, n in zip(words, lengths.tolist()):
        data[at:at + n] = g[0]
        at += n
        g[0] = None                                  # (its part is freed with the last view)
    return WordCounts(data, lengths, counts)

