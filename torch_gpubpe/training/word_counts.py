"""Word counts as flat arrays (:class:`WordCounts`) and the exact CPU word counter.

The CPU counter (:func:`count_words_cpu`, DESIGN.md §2) is exact and vectorised (numpy):
documents are packed in batches of ~``batch_bytes`` bytes
(:func:`~torch_gpubpe.training.batches.document_batches`), word starts come from
:func:`word_starts_fast` (the §2 rule, equal to
:func:`~torch_gpubpe.encoding.pretokenize.word_start_mask`), and words are grouped without a
Python loop per word:

* words of 1–7 bytes: the bytes and the length packed into one ``uint64`` key → ``np.unique``;
* words of 8–15 bytes: two ``uint64`` keys (bytes 0–7; bytes 8–14 + length) → ``np.lexsort``;
* longer words (rare in text): ``collections.Counter`` over the byte slices.

Batches are counted on a thread pool (numpy releases the GIL) into :class:`PartialCounts`;
their distinct keys and counts are merged once at the end (sort + ``np.add.reduceat``), so no
Python loop runs per word or per batch-distinct word, only once per distinct word of the corpus.
Every key holds the word's bytes themselves, never a hash, so no two words can be confused.

Example::

    >>> from torch_gpubpe.training.word_counts import count_words_cpu
    >>> sorted(count_words_cpu(["a b a", b"a"]).items())
    [(b' a', 1), (b' b', 1), (b'a', 2)]
"""

from __future__ import annotations

import os
from collections import Counter, deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from torch_gpubpe.core.reference import BYTE_CLASS, NEWLINE, SPACE
from torch_gpubpe.training.batches import check_documents, document_batches

DEFAULT_BATCH_BYTES = 4 << 20     # bytes per batch of the CPU counter


@dataclass
class WordCounts:
    """Distinct words and their counts as flat arrays (the GPU counter's output).

    Attributes:
        data: uint8, shape ``(sum(lengths),)``: the words' bytes back to back.
        lengths: int64, shape ``(num_words,)``: bytes per word (≥ 1).
        counts: uint64, shape ``(num_words,)``: occurrences of each word (≥ 1).
    Words come in no particular order; each occurs once.
    """

    data: np.ndarray
    lengths: np.ndarray
    counts: np.ndarray

    def __len__(self) -> int:
        return len(self.lengths)

    def offsets(self) -> np.ndarray:
        """int64, shape ``(num_words + 1,)``: word k is ``data[offsets[k]:offsets[k+1]]``."""
        off = np.zeros(len(self.lengths) + 1, np.int64)
        np.cumsum(self.lengths, out=off[1:])
        return off

    def to_dict(self) -> dict[bytes, int]:
        """``{word bytes: count}`` (a Python loop over the distinct words)."""
        raw = self.data.tobytes()
        off = self.offsets().tolist()
        return {raw[off[k]:off[k + 1]]: c for k, c in enumerate(self.counts.tolist())}

    @classmethod
    def from_dict(cls, counts: dict[bytes, int]) -> WordCounts:
        """From ``{word bytes: count}`` (counts ≥ 1, < 2^64), in the dict's order."""
        words = list(counts)
        lengths = np.fromiter((len(w) for w in words), np.int64, len(words))
        return cls(np.frombuffer(b"".join(words), np.uint8).copy(), lengths,
                   np.array([counts[w] for w in words], np.uint64))


def empty_counts() -> WordCounts:
    """No words (:class:`WordCounts` of empty arrays)."""
    return WordCounts(np.zeros(0, np.uint8), np.zeros(0, np.int64), np.zeros(0, np.uint64))


def concat_counts(parts: list[WordCounts]) -> WordCounts:
    """Word counts of disjoint word sets, concatenated."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty_counts()
    if len(parts) == 1:
        return parts[0]
    return WordCounts(np.concatenate([p.data for p in parts]),
                      np.concatenate([p.lengths for p in parts]),
                      np.concatenate([p.counts for p in parts]))


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


def u64_at(padded: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Little-endian u64 made of bytes ``pos .. pos + 7`` of ``padded`` (8 aligned views)."""
    out = np.empty(len(pos), np.uint64)
    low = pos & 7
    for k in range(8):
        sel = np.flatnonzero(low == k)
        if len(sel):
            view = padded[k : k + (len(padded) - k) // 8 * 8].view("<u8")
            out[sel] = view[pos[sel] >> 3]
    return out


# LEN_MASK[k]: the low k bytes of a u64 (k = 0..8): a key holding the first k bytes of a word.
LEN_MASK = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], np.uint64)


def _group(keys: tuple[np.ndarray, ...], counts: np.ndarray | None
           ) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """Distinct rows of the u64 key columns ``keys`` and their summed ``counts`` (1 each if
    None); exact integer sums (sort + ``np.add.reduceat``)."""
    if len(keys) == 1 and counts is None:
        k = np.sort(keys[0])
        order = None
        cols = (k,)
    else:
        order = np.lexsort(keys[::-1])
        cols = tuple(k[order] for k in keys)
    new = np.ones(len(cols[0]), bool)
    if len(new) > 1:
        diff = np.zeros(len(new) - 1, bool)
        for c in cols:
            diff |= c[1:] != c[:-1]
        new[1:] = diff
    heads = np.flatnonzero(new)
    if counts is None:
        summed = np.diff(np.append(heads, len(new))).astype(np.int64)
    else:
        summed = np.add.reduceat(counts[order], heads) if len(heads) else counts[:0]
    return tuple(c[heads] for c in cols), summed


class PartialCounts:
    """Word counts of one batch: short (≤ 7 B) and mid (8–15 B) words as u64 key columns with
    counts, long words in a Counter. Keys hold the bytes themselves (no hashing)."""

    def __init__(self) -> None:
        self.short: list[tuple[np.ndarray, np.ndarray]] = []
        self.mid: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.long: Counter[bytes] = Counter()

    @classmethod
    def from_word_counts(cls, wc: WordCounts) -> PartialCounts:
        """Grouped counts ``wc`` in the batch counter's own key layout (bytes + length in u64
        keys, each word once, weighted), so that more batches can be added to them."""
        p = cls()
        off = wc.offsets()
        data = wc.data
        sel_short = wc.lengths <= 7
        sel_mid = (wc.lengths >= 8) & (wc.lengths <= 15)
        padded = np.zeros(len(data) + 32, np.uint8)
        padded[: len(data)] = data
        top = np.uint64(56)
        starts = off[:-1]
        if sel_short.any():
            s, ln = starts[sel_short], wc.lengths[sel_short]
            key = u64_at(padded, s) & LEN_MASK[ln]
            key |= ln.astype(np.uint64) << top
            p.short.append((key, wc.counts[sel_short].astype(np.int64)))
        if sel_mid.any():
            s, ln = starts[sel_mid], wc.lengths[sel_mid]
            k1 = u64_at(padded, s)
            k2 = u64_at(padded, s + 8) & LEN_MASK[ln - 8]
            k2 |= ln.astype(np.uint64) << top
            p.mid.append((k1, k2, wc.counts[sel_mid].astype(np.int64)))
        for k in np.flatnonzero(wc.lengths >= 16).tolist():
            p.long[data[off[k]:off[k + 1]].tobytes()] += int(wc.counts[k])
        return p

    def add(self, other: PartialCounts) -> None:
        self.short += other.short
        self.mid += other.mid
        self.long.update(other.long)

    def to_counter(self) -> Counter[bytes]:
        out: Counter[bytes] = Counter()
        top = np.uint64(56)
        if self.short:
            (k,), c = _group((np.concatenate([x for x, _ in self.short]),),
                             np.concatenate([y for _, y in self.short]))
            blob = k.astype("<u8").tobytes()
            lens = (k >> top).tolist()
            for j, (ln, cnt) in enumerate(zip(lens, c.tolist())):
                out[blob[8 * j : 8 * j + ln]] = cnt
        if self.mid:
            (k1, k2), c = _group((np.concatenate([x for x, _, _ in self.mid]),
                                  np.concatenate([y for _, y, _ in self.mid])),
                                 np.concatenate([z for _, _, z in self.mid]))
            blob = np.stack([k1, k2], axis=1).astype("<u8").tobytes()
            lens = (k2 >> top).tolist()
            for j, (ln, cnt) in enumerate(zip(lens, c.tolist())):
                out[blob[16 * j : 16 * j + ln]] = cnt
        out.update(self.long)
        return out

    def entries(self) -> int:
        """Key rows held (the partial's host memory is about 24 B per row)."""
        return (sum(len(c) for _, c in self.short) + sum(len(c) for _, _, c in self.mid)
                + len(self.long))

    def to_word_counts(self) -> WordCounts:
        """The partial's words grouped, as :class:`WordCounts` (no Python object per word
        except the long words' Counter)."""
        parts = []
        top = np.uint64(56)
        if self.short:
            (k,), c = _group((np.concatenate([x for x, _ in self.short]),),
                             np.concatenate([y for _, y in self.short]))
            lens = (k >> top).astype(np.int64)
            raw = k.astype("<u8").view(np.uint8).reshape(-1, 8)
            parts.append(WordCounts(raw[np.arange(8) < lens[:, None]], lens,
                                    c.astype(np.uint64)))
        if self.mid:
            (k1, k2), c = _group((np.concatenate([x for x, _, _ in self.mid]),
                                  np.concatenate([y for _, y, _ in self.mid])),
                                 np.concatenate([z for _, _, z in self.mid]))
            lens = (k2 >> top).astype(np.int64)
            raw = np.stack([k1, k2], axis=1).astype("<u8").view(np.uint8).reshape(-1, 16)
            parts.append(WordCounts(raw[np.arange(16) < lens[:, None]], lens,
                                    c.astype(np.uint64)))
        if self.long:
            parts.append(WordCounts.from_dict(dict(self.long)))
        return concat_counts(parts)


def split_starts(data: np.ndarray, offsets: np.ndarray, family: str) -> np.ndarray:
    """Word starts (int64, ascending) of a packed batch under a regex family's split
    (:func:`torch_gpubpe.core.patterns.reference_word_starts` per document: ``regex`` itself,
    the exact and slow path), or DESIGN.md §2's for ``"bytes-classes"``."""
    from torch_gpubpe.core.patterns import DEFAULT, reference_word_starts

    if family == DEFAULT:
        return word_starts_fast(data, offsets)
    raw = data.tobytes()
    o = np.asarray(offsets, np.int64).tolist()
    parts = [np.flatnonzero(reference_word_starts(raw[a:b], family)) + a
             for a, b in zip(o, o[1:]) if b > a]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def count_batch(data: np.ndarray, offsets: np.ndarray, family: str = "bytes-classes"
                ) -> PartialCounts:
    """The words of one packed batch (``data`` uint8, ``offsets`` int64 document bounds) under
    ``family``'s split (:func:`split_starts`), counted into a :class:`PartialCounts` (keys hold
    the bytes: exact)."""
    part = PartialCounts()
    n = len(data)
    if n == 0:
        return part
    starts = split_starts(data, offsets, family)
    lens = np.diff(np.append(starts, n))
    padded = np.zeros(n + 32, np.uint8)
    padded[:n] = data
    top = np.uint64(56)

    short = lens <= 7
    s, ln = starts[short], lens[short]
    if len(s):
        key = u64_at(padded, s) & LEN_MASK[ln]
        key |= ln.astype(np.uint64) << top
        (k,), c = _group((key,), None)
        part.short.append((k, c))

    mid = (lens >= 8) & (lens <= 15)
    s, ln = starts[mid], lens[mid]
    if len(s):
        k1 = u64_at(padded, s)
        k2 = u64_at(padded, s + 8) & LEN_MASK[ln - 8]
        k2 |= ln.astype(np.uint64) << top
        (k1, k2), c = _group((k1, k2), None)
        part.mid.append((k1, k2, c))

    long_ = np.flatnonzero(lens >= 16)
    if len(long_):
        raw = data.tobytes()
        for st, ln in zip(starts[long_].tolist(), lens[long_].tolist()):
            part.long[raw[st : st + ln]] += 1
    return part


def count_words_cpu(documents: Iterable[str | bytes], *, batch_bytes: int = DEFAULT_BATCH_BYTES,
                info: dict | None = None, threads: int | None = None,
                family: str = "bytes-classes") -> Counter[bytes]:
    """How often each word (DESIGN.md §2, or a regex family's split: ``family``, see
    :func:`split_starts`) occurs over all documents; words never span documents.

    Args:
        documents: ``str`` (UTF-8; lone surrogates → U+FFFD) or bytes-like items; consumed once,
            in batches of about ``batch_bytes`` bytes (the corpus is never held whole).
        info: if given, filled with ``num_documents`` and ``corpus_bytes`` (UTF-8 bytes).
        threads: batches counted in parallel (default: the CPU count).
    Returns:
        ``Counter`` word bytes → count; equal to :func:`torch_gpubpe.core.reference.count_words`.
    Raises:
        InputError: ``documents`` is one ``str``/``bytes`` instead of an iterable of documents,
            or an item is neither ``str`` nor bytes-like (names its index).
    """
    check_documents(documents)
    info = {} if info is None else info
    info.setdefault("num_documents", 0)
    info.setdefault("corpus_bytes", 0)
    workers = max(1, min(threads or os.cpu_count() or 1, 32))
    total = PartialCounts()
    if workers == 1:
        for data, offsets in document_batches(documents, batch_bytes, info):
            total.add(count_batch(data, offsets, family))
        return total.to_counter()
    # numpy releases the GIL in the heavy steps: batches are counted on a thread pool, with
    # at most workers + 1 batches in flight (bounded memory); the per-batch key arrays are
    # merged once at the end (sort + reduceat), not word by word.
    with ThreadPoolExecutor(workers, thread_name_prefix="gpubpe-wordcount") as pool:
        pending: deque = deque()
        for data, offsets in document_batches(documents, batch_bytes, info):
            pending.append(pool.submit(count_batch, data, offsets, family))
            while len(pending) > workers:
                total.add(pending.popleft().result())
        while pending:
            total.add(pending.popleft().result())
    return total.to_counter()
