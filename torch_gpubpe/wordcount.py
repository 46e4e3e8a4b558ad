"""Word counting for training: documents → {word bytes: count} (DESIGN.md §2, §3).

Exact and vectorised (numpy): documents are packed in batches of ~``batch_bytes`` bytes, word
starts come from :func:`~torch_gpubpe.pretokenize.word_start_mask` (the §2 rule), and words are
grouped without a Python loop per word:

* words of 1–7 bytes: the bytes and the length packed into one ``uint64`` key → ``np.unique``;
* words of 8–15 bytes: two ``uint64`` keys (bytes 0–7; bytes 8–14 + length) → ``np.lexsort``;
* longer words (rare in text): ``collections.Counter`` over the byte slices.

Batches are counted on a thread pool (numpy releases the GIL) and merged in order.

Every key holds the word's bytes themselves, never a hash, so no two words can be confused.

Example::

    >>> from torch_gpubpe.wordcount import count_words
    >>> sorted(count_words(["a b a", b"a"]).items())
    [(b' a', 1), (b' b', 1), (b'a', 2)]
"""

from __future__ import annotations

import os
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .errors import InputError
from .reference import BYTE_CLASS, NEWLINE, SPACE, to_bytes

DEFAULT_BATCH_BYTES = 8 << 20


def _batches(documents: Iterable[str | bytes], batch_bytes: int,
             info: dict) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield packed ``(data uint8, offsets int64)`` batches of about ``batch_bytes`` bytes."""
    parts: list[bytes] = []
    size = 0
    for k, doc in enumerate(documents):
        try:
            b = to_bytes(doc)
        except TypeError as e:
            raise InputError(f"document {k}: {e}") from e
        info["num_documents"] = k + 1
        info["corpus_bytes"] = info.get("corpus_bytes", 0) + len(b)
        parts.append(b)
        size += len(b)
        if size >= batch_bytes:
            yield _pack(parts)
            parts, size = [], 0
    if parts:
        yield _pack(parts)


def _pack(parts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter((len(p) for p in parts), np.int64, len(parts))
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return np.frombuffer(b"".join(parts), np.uint8), offsets


def _rule2_table() -> np.ndarray:
    """``T[prev << 8 | cur]``: whether rule 2 of DESIGN.md §2 makes ``cur`` a word start."""
    cls = np.asarray(BYTE_CLASS, np.uint8)
    prev = np.repeat(np.arange(256), 256)
    cur = np.tile(np.arange(256), 256)
    pc, cc = cls[prev], cls[cur]
    wordlike = (cc != SPACE) & (cc != NEWLINE)
    return (pc != cc) & ~((prev == 0x20) & wordlike)


_RULE2 = _rule2_table()
_WORDLIKE = np.array([c not in (SPACE, NEWLINE) for c in BYTE_CLASS])
_IS_SPACE_CLASS = np.array([c == SPACE for c in BYTE_CLASS])


def word_starts_fast(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Indices (int64, ascending) of the word starts of a packed batch (DESIGN.md §2).

    Equal to ``np.flatnonzero(pretokenize.word_start_mask(data, offsets))``; rule 2 is one
    lookup in a 64 K-entry (prev, cur) table, rule 3 is checked at spaces only.
    """
    n = len(data)
    ws = np.zeros(n, bool)
    if n == 0:
        return np.zeros(0, np.int64)
    pair = data[:-1].astype(np.uint16)
    pair <<= 8
    pair |= data[1:]
    ws[1:] = _RULE2[pair]
    del pair
    sp = np.flatnonzero(data[1:-1] == 0x20) + 1          # rule 3 candidates (have prev, next)
    if len(sp):
        ok = _IS_SPACE_CLASS[data[sp - 1]] & _WORDLIKE[data[sp + 1]]
        ws[sp[ok]] = True
    starts = offsets[:-1]
    starts = starts[starts < n]
    ws[starts] = True                                     # rule 1 (and no prev across documents)
    # A space that ends its document has no next byte: rule 3 must not fire there.
    ends = offsets[1:] - 1
    ends = ends[(ends >= 0) & (ends < n - 1)]
    if len(ends):
        bad = ends[(data[ends] == 0x20)]
        if len(bad):
            nxt_doc_start = np.zeros(n + 1, bool)
            nxt_doc_start[starts] = True
            bad = bad[~nxt_doc_start[bad]]               # not itself a document start
            if len(bad):
                ws[bad] = _RULE2[data[bad - 1].astype(np.uint16) << 8 | data[bad]]
    return np.flatnonzero(ws)


def _u64_at(padded: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Little-endian u64 made of bytes ``pos .. pos + 7`` of ``padded`` (8 aligned views)."""
    out = np.empty(len(pos), np.uint64)
    low = pos & 7
    for k in range(8):
        sel = np.flatnonzero(low == k)
        if len(sel):
            view = padded[k : k + (len(padded) - k) // 8 * 8].view("<u8")
            out[sel] = view[pos[sel] >> 3]
    return out


_LEN_MASK = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], np.uint64)


def _count_batch(data: np.ndarray, offsets: np.ndarray) -> Counter:
    out: Counter[bytes] = Counter()
    n = len(data)
    if n == 0:
        return out
    starts = word_starts_fast(data, offsets)
    lens = np.diff(np.append(starts, n))
    padded = np.zeros(n + 32, np.uint8)
    padded[:n] = data
    raw = data.tobytes()
    top = np.uint64(56)

    short = lens <= 7
    s, ln = starts[short], lens[short]
    if len(s):
        key = _u64_at(padded, s) & _LEN_MASK[ln]
        key |= ln.astype(np.uint64) << top
        # The key holds the bytes themselves: sort the keys, no argsort, no gather back.
        key.sort()
        new = np.ones(len(key), bool)
        new[1:] = key[1:] != key[:-1]
        heads = np.flatnonzero(new)
        counts = np.diff(np.append(heads, len(key))).tolist()
        uniq = key[heads]
        blob = uniq.astype("<u8").tobytes()
        for j, (l, c) in enumerate(zip((uniq >> top).tolist(), counts)):
            out[blob[8 * j : 8 * j + l]] += c

    mid = (lens >= 8) & (lens <= 15)
    s, ln = starts[mid], lens[mid]
    if len(s):
        k1 = _u64_at(padded, s)
        k2 = _u64_at(padded, s + 8) & _LEN_MASK[ln - 8]
        k2 |= ln.astype(np.uint64) << top
        order = np.lexsort((k2, k1))
        k1, k2 = k1[order], k2[order]
        new = np.ones(len(order), bool)
        new[1:] = (k1[1:] != k1[:-1]) | (k2[1:] != k2[:-1])
        heads = np.flatnonzero(new)
        counts = np.diff(np.append(heads, len(order)))
        firsts = order[heads]
        for st, l, c in zip(s[firsts].tolist(), ln[firsts].tolist(), counts.tolist()):
            out[raw[st : st + l]] += c

    long_ = lens >= 16
    for st, l in zip(starts[long_].tolist(), lens[long_].tolist()):
        out[raw[st : st + l]] += 1
    return out


def count_words(documents: Iterable[str | bytes], *, batch_bytes: int = DEFAULT_BATCH_BYTES,
                info: dict | None = None, threads: int | None = None) -> Counter[bytes]:
    """How often each word (DESIGN.md §2) occurs over all documents; words never span documents.

    Args:
        documents: ``str`` (UTF-8; lone surrogates → U+FFFD) or bytes-like items; consumed once,
            in batches of about ``batch_bytes`` bytes (the corpus is never held whole).
        info: if given, filled with ``num_documents`` and ``corpus_bytes`` (UTF-8 bytes).
        threads: batches counted in parallel (default: the CPU count).
    Returns:
        ``Counter`` word bytes → count; equal to :func:`torch_gpubpe.reference.count_words`.
    Raises:
        InputError: an item is neither ``str`` nor bytes-like (names its index).
    """
    info = {} if info is None else info
    info.setdefault("num_documents", 0)
    info.setdefault("corpus_bytes", 0)
    workers = max(1, min(threads or os.cpu_count() or 1, 32))
    out: Counter[bytes] = Counter()
    if workers == 1:
        for data, offsets in _batches(documents, batch_bytes, info):
            out.update(_count_batch(data, offsets))
        return out
    # numpy releases the GIL in the heavy steps: batches are counted on a thread pool, with
    # at most 2 × workers batches in flight (bounded memory), and merged in submission order.
    with ThreadPoolExecutor(workers, thread_name_prefix="gpubpe-wordcount") as pool:
        pending: deque = deque()
        for data, offsets in _batches(documents, batch_bytes, info):
            pending.append(pool.submit(_count_batch, data, offsets))
            while len(pending) > 2 * workers:
                out.update(pending.popleft().result())
        while pending:
            out.update(pending.popleft().result())
    return out
