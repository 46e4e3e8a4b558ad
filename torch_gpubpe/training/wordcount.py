"""Word counting for training: documents → {word bytes: count} (DESIGN.md §2, §3).

Two exact counters with the same result:

* on the GPU (:func:`count_words_gpu`, :class:`GPUWordCounter`, ``wgsl/wordcount.wgsl``; what
  :func:`torch_gpubpe.training.trainer.train` uses by default): batches of whole documents (64 MiB) are
  uploaded, word starts marked by the §2 rule, and every word inserted into a hash table that
  lives across batches; a key points at the word's bytes (in the batch, then copied to a word
  store on the GPU) and the bytes are compared on every probe, so equal keys are equal words,
  never just equal hashes; counts are 64-bit. Words over ``MAXW`` bytes, documents larger than
  a storage binding and the other cases listed in :class:`GPUWordCounter` are counted on the
  CPU and merged in.
  Output: :class:`WordCounts` (flat arrays). On the H200, 95 MB of text in 0.27 s, against
  2.54 s for rustbpe's own counting (``benchmarks/train.py``);
* on the CPU (:func:`count_words`), described next.

The CPU counter is exact and vectorised (numpy): documents are packed in batches of
~``batch_bytes`` bytes, word starts come from :func:`~torch_gpubpe.encoding.pretokenize.word_start_mask`
(the §2 rule), and words are grouped without a Python loop per word:

* words of 1–7 bytes: the bytes and the length packed into one ``uint64`` key → ``np.unique``;
* words of 8–15 bytes: two ``uint64`` keys (bytes 0–7; bytes 8–14 + length) → ``np.lexsort``;
* longer words (rare in text): ``collections.Counter`` over the byte slices.

Batches are counted on a thread pool (numpy releases the GIL); their distinct keys and counts
are merged once at the end (sort + ``np.add.reduceat``), so no Python loop runs per word or per
batch-distinct word, only once per distinct word of the corpus.

Every key holds the word's bytes themselves, never a hash, so no two words can be confused.

Example::

    >>> from torch_gpubpe.training.wordcount import count_words
    >>> sorted(count_words(["a b a", b"a"]).items())
    [(b' a', 1), (b' b', 1), (b'a', 2)]
"""

from __future__ import annotations

import os
import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from torch_gpubpe.core import str_pack
from torch_gpubpe.errors import GPUOperationError, InputError
from torch_gpubpe.core.reference import BYTE_CLASS, NEWLINE, SPACE, to_bytes
from torch_gpubpe.gpu.shaders import shader_info

DEFAULT_BATCH_BYTES = 4 << 20


def _batches(documents: Iterable[str | bytes], batch_bytes: int,
             info: dict) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield packed ``(data uint8, offsets int64)`` batches of about ``batch_bytes`` bytes.

    A source with a ``packed_batches(batch_bytes)`` method (a
    :class:`torch_gpubpe.io.readers.Reader`, the CLI's corpus reader) gives its batches as they
    are: no Python object per document. Other documents are packed by
    :func:`torch_gpubpe.core.str_pack.pack_batches` (one compiled, GIL-free call per batch on a
    pool thread, ``str_pack.BATCH_THREADS`` batches in flight); where that is not available, one
    ``to_bytes`` per document on this thread (570 MB/s on the H200 host; the iconv packer of
    :mod:`._cpython_str` packed the trainer's 868 MB of 11 KB documents at 115-210 MB/s there,
    its per-document Python work in the threads queueing on the GIL). :func:`str_packer` says
    which."""
    packed = getattr(documents, "packed_batches", None)
    if packed is not None:
        for data, offsets in packed(batch_bytes):
            info["num_documents"] = info.get("num_documents", 0) + len(offsets) - 1
            info["corpus_bytes"] = info.get("corpus_bytes", 0) + int(offsets[-1])
            yield data, offsets
        return
    if str_pack.available():   # (the compiled packer: one pool task per batch, GIL-free)
        yield from str_pack.pack_batches(documents, batch_bytes, info)
        return
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


def str_packer(documents) -> str:
    """Which packer :func:`_batches` takes for ``documents`` (``train()``'s
    ``stats["str_packer"]``)."""
    if getattr(documents, "packed_batches", None) is not None:
        return "the source's packed batches"
    if str_pack.available():
        return f"str_pack, {str_pack.BATCH_THREADS} threads"
    return "to_bytes per document"


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


class _Partial:
    """Word counts of one batch: short (≤ 7 B) and mid (8–15 B) words as u64 key columns with
    counts, long words in a Counter. Keys hold the bytes themselves (no hashing)."""

    def __init__(self) -> None:
        self.short: list[tuple[np.ndarray, np.ndarray]] = []
        self.mid: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.long: Counter[bytes] = Counter()

    def add(self, other: _Partial) -> None:
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


def _count_batch(data: np.ndarray, offsets: np.ndarray) -> _Partial:
    part = _Partial()
    n = len(data)
    if n == 0:
        return part
    starts = word_starts_fast(data, offsets)
    lens = np.diff(np.append(starts, n))
    padded = np.zeros(n + 32, np.uint8)
    padded[:n] = data
    top = np.uint64(56)

    short = lens <= 7
    s, ln = starts[short], lens[short]
    if len(s):
        key = _u64_at(padded, s) & _LEN_MASK[ln]
        key |= ln.astype(np.uint64) << top
        (k,), c = _group((key,), None)
        part.short.append((k, c))

    mid = (lens >= 8) & (lens <= 15)
    s, ln = starts[mid], lens[mid]
    if len(s):
        k1 = _u64_at(padded, s)
        k2 = _u64_at(padded, s + 8) & _LEN_MASK[ln - 8]
        k2 |= ln.astype(np.uint64) << top
        (k1, k2), c = _group((k1, k2), None)
        part.mid.append((k1, k2, c))

    long_ = np.flatnonzero(lens >= 16)
    if len(long_):
        raw = data.tobytes()
        for st, l in zip(starts[long_].tolist(), lens[long_].tolist()):
            part.long[raw[st : st + l]] += 1
    return part


def check_documents(documents) -> None:
    """Raise :class:`InputError` when ``documents`` is one ``str``/``bytes`` (an iterable of
    documents is expected)."""
    if isinstance(documents, (str, bytes, bytearray, memoryview)):
        hint = "pass [text] for one document"
        if isinstance(documents, str) and len(documents) < 4096:
            import glob
            import os

            if os.path.exists(documents) or glob.glob(documents):
                hint = (f"{documents!r} names files: pass "
                        f"torch_gpubpe.io.readers.FileReader({documents!r}) to read them")
        raise InputError(
            "expected an iterable of documents, got one str/bytes (it would be read as one "
            f"document per character); {hint}"
        )
    try:
        iter(documents)
    except TypeError:
        raise InputError(
            f"expected an iterable of documents (str or bytes), got {type(documents).__name__}"
        ) from None


def count_words(documents: Iterable[str | bytes], *, batch_bytes: int = DEFAULT_BATCH_BYTES,
                info: dict | None = None, threads: int | None = None) -> Counter[bytes]:
    """How often each word (DESIGN.md §2) occurs over all documents; words never span documents.

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
    total = _Partial()
    if workers == 1:
        for data, offsets in _batches(documents, batch_bytes, info):
            total.add(_count_batch(data, offsets))
        return total.to_counter()
    # numpy releases the GIL in the heavy steps: batches are counted on a thread pool, with
    # at most workers + 1 batches in flight (bounded memory); the per-batch key arrays are
    # merged once at the end (sort + reduceat), not word by word.
    with ThreadPoolExecutor(workers, thread_name_prefix="gpubpe-wordcount") as pool:
        pending: deque = deque()
        for data, offsets in _batches(documents, batch_bytes, info):
            pending.append(pool.submit(_count_batch, data, offsets))
            while len(pending) > workers:
                total.add(pending.popleft().result())
        while pending:
            total.add(pending.popleft().result())
    return total.to_counter()


# -- counting on the GPU (wgsl/wordcount.wgsl) ---------------------------------------------------
# Constants and state-word indices read from wgsl/wordcount.wgsl (no hand copies).
_WC = shader_info("wordcount").consts
MAXW = _WC["MAXW"]            # longest word the GPU table takes (bytes)
DEFAULT_GPU_BATCH_BYTES = 64 << 20
# The word table's size per batch. A batch of w word starts adds at most w new words, but text
# adds far fewer (868 MB of real text: 1.58 M distinct words in 64 MiB batches of 13-25 M word
# starts), and sizing for w took 2.76 GB of GPU memory there. The table is sized for
# NEW_WORDS_MARGIN × the highest share of new words per word start seen in a batch so far
# (FIRST_NEW_WORDS before the first), at least MIN_NEW_WORDS; a batch that overfills it (a probe
# sequence ran out, or the table ended more than half full) is undone and counted again into a
# table sized for every word start being new: exact either way, one more pass when the guess
# was low or a probe sequence ran out for other reasons (colliding hashes), counted in
# GPUWordCounter.estimate_retries; each retry at least doubles the next guess.
FIRST_NEW_WORDS = 0.125
NEW_WORDS_MARGIN = 2.0
MIN_NEW_WORDS = 1 << 14
_S_TOP, _S_OCC, _S_NLONG, _S_OVERFLOW, _S_NWORDS, _S_NOUT, _S_NEED = (
    _WC[k] for k in ("S_TOP", "S_OCC", "S_NLONG", "S_OVERFLOW", "S_NWORDS", "S_NOUT", "S_NEED"))
_WC_WG = _WC["WG"]


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


class GPUWordCounter:
    """Counts words on the GPU into a hash table that lives across batches (wordcount.wgsl).

    Exact: table keys point at the words' bytes, which are compared on every probe (never only
    hashes); counts are 64-bit. Counted on the CPU instead (:func:`_count_batch`) and merged
    in by word (slower, never lost): words longer than ``MAXW`` bytes; a document larger than
    one storage binding (the hard batch limit); a document whose words alone could overfill
    the table; a whole batch should a probe sequence ever run out; and every batch once the
    table (a quarter of the largest binding's slots: ≈33 M distinct words on a 2 GiB binding)
    or the word store is full — unless ``spill`` is set (``train`` does:
    :mod:`~torch_gpubpe.training.budget`), which takes the full table's words as a sorted run on disk
    and empties the table, so the GPU keeps counting. (Open addressing with a CAS on the key: Alcantara et al. 2009,
    "Real-time parallel hashing on the GPU".)
    """

    def __init__(self, gpu=None, batch_bytes: int | None = None, *, min_slots: int = 1 << 16,
                 min_store: int = 1 << 16, max_probe: int | None = None,
                 max_batch_bytes: int | None = None, max_slots: int | None = None) -> None:
        """
        Args:
            gpu: the :class:`~torch_gpubpe.gpu.device.GPU` (default: the process's).
            batch_bytes: target bytes per batch that :func:`count_words_gpu` assembles
                (default 64 MiB; at most half of ``max_batch_bytes``).
        Test hooks (defaults are the real sizes): ``min_slots`` / ``max_slots`` table slots
        (powers of two: the shader masks with slots − 1), ``min_store`` word-store size in
        u32, ``max_probe`` probes per word (wordcount.wgsl MAX_PROBE), ``max_batch_bytes``
        the hard batch limit in bytes (default: the adapter's storage binding).
        """
        from torch_gpubpe.gpu.device import get_gpu

        self.g = g = gpu or get_gpu()
        # The table's counts (8 B per slot) must fit one binding; a batch of b bytes has at most
        # b words and the table is kept at most half full.
        self.max_slots = min(1 << ((g.binding_bytes(4) // 8).bit_length() - 1),
                             max_slots or 1 << 62)
        # Hard limit of one GPU batch (its text must fit one binding); batches are assembled to
        # at most half of it (whole documents, so a batch may overshoot its target by one).
        # A batch whose words would overfill the table is split (add_batch).
        # (Text positions + 1 are table keys below bit 31: a batch stays under 2^31 bytes.)
        self.max_batch = min(g.max_storage_binding - 64, (1 << 31) - 64,
                             max_batch_bytes or 1 << 62)
        self.batch_bytes = min(batch_bytes or DEFAULT_GPU_BATCH_BYTES, self.max_batch // 2)
        self.min_slots = min_slots     # (tests: small tables and stores to force growth)
        self.min_store = min_store
        consts = {} if max_probe is None else {"MAX_PROBE": max_probe}
        self.pipes = {name: g.pipeline("wordcount", name, constants=consts)
                      for name in shader_info("wordcount", g.flags).entry_points}
        U = g.wgpu.BufferUsage
        self.U = U
        self.params = g.buffer(16, U.UNIFORM | U.COPY_DST, "wc.params")
        self.state = g.buffer(64, U.STORAGE | U.COPY_DST | U.COPY_SRC, "wc.state")
        self.readback = g.buffer(64, U.MAP_READ | U.COPY_DST, "wc.state_read")
        g.device.queue.write_buffer(self.state, 0, np.zeros(16, np.uint32))
        self.slots = 0
        self.store_cap = 0
        self.text_cap = 0
        self.extra: Counter[bytes] = Counter()   # counted on the CPU (long words, fallbacks)
        self.cpu_has_short_words = False                  # whether extra may hold words ≤ MAXW bytes
        self.table_full = False                   # GPU table/store full: the rest on the CPU
        self._bind = None
        # Words longer than MAXW, per batch: (bytes back to back, lengths) — grouped at the end
        # (result), never one Python object per word.
        self.long_words: list[tuple] = []     # (bytes, lengths[, counts]) per batch/group
        self.long_bytes = 0                   # bytes of the words in long_words
        # Spilling (count_budget): with ``spill`` set, a table that holds more than ``max_words``
        # words, or that the adapter's limits stop from growing, is handed to ``spill`` (a
        # sorted run on disk) and emptied, instead of counting the rest on the CPU.
        self.spill = None
        self.max_words = 1 << 62
        self.occupied = 0          # words in the table after the last batch
        self.store_words = 0       # u32 of the word store in use (length + bytes per word)
        self.spilled_runs = 0
        self.peak_gpu_bytes = 0
        self.seconds_wait = 0.0    # blocked on state readbacks (GPU work + submit latency)
        self.new_words_rate = None  # the highest new words / word starts of a batch so far
        self.estimate_retries = 0   # batches counted again at full size: a low size guess or
                                    # a probe sequence that ran out
        self._every_start_new = False   # (the retry of such a batch: size for every start)
        self.round_trips = 0
        self.on_batch = None       # called with the counter after each batch counted on the GPU

    # -- buffers ---------------------------------------------------------------------------------
    def _buf(self, size: int, label: str, extra: int = 0):
        U = self.U
        return self.g.buffer(size, U.STORAGE | U.COPY_DST | U.COPY_SRC | extra, label)

    def _ensure_text(self, n: int) -> None:
        if n <= self.text_cap:
            return
        cap = max(n, 1 << 16)
        self.text = self._buf(cap + 64, "wc.text")
        self.doc_bits = self._buf(cap // 8 + 64, "wc.doc_bits")
        self.starts = self._buf(cap // 8 + 128, "wc.starts")
        self.longs = self._buf(4 * (cap // MAXW + 2), "wc.longs")
        self.text_cap = cap
        self._bind = None

    def gpu_bytes(self) -> int:
        """Bytes of the counter's GPU buffers now (table, backups, compaction output, word
        store, batch buffers)."""
        return (36 * self.slots + 4 * self.store_cap
                + (self.text_cap * 5 // 4 + self.text_cap // MAXW * 4 if self.text_cap else 0))

    def _new_table(self, slots: int) -> None:
        self.slots = slots
        self.keys = self._buf(4 * slots, "wc.keys")
        self.counts = self._buf(8 * slots, "wc.counts")
        self.keys_bak = self._buf(4 * slots, "wc.keys_backup")
        self.counts_bak = self._buf(8 * slots, "wc.counts_backup")
        # wc_compact's output: (store offset, count lo, hi) per word; the table is kept at most
        # half full.
        self.out = self._buf(12 * (slots // 2 + 16), "wc.out")
        self._bind = None

    def _ensure_store(self, need: int) -> None:
        if need <= self.store_cap:
            return
        limit = self.g.binding_bytes(4)
        cap = max(need, min(int(self.store_cap * 1.5), limit // 4), self.min_store)
        if 4 * cap > limit:
            raise InputError(f"the distinct words need {4 * need} bytes of GPU word store; this "
                             f"adapter binds at most {limit}; count on the CPU (count_on='cpu')")
        new = self._buf(4 * cap, "wc.store")
        if self.store_cap:
            enc = self.g.device.create_command_encoder(label="wordcount")
            enc.copy_buffer_to_buffer(self.store, 0, new, 0, 4 * self.store_cap)
            self.g.device.queue.submit([enc.finish()])
        self.store = new
        self.store_cap = cap
        self._bind = None

    def _bg(self):
        if self._bind is None:
            b = {"P": self.params, "text": self.text, "doc_bits": self.doc_bits,
                 "starts": self.starts, "keys": self.keys, "counts": self.counts,
                 "store": self.store, "state": self.state, "longs": self.longs, "out": self.out}
            info = shader_info("wordcount", self.g.flags)
            self._bind = {
                name: self.g.bind_group(self.pipes[name], {n: b[v] for v, n in
                                                           info.entry_bindings(name).items()},
                                        label=f"wc.{name}")
                for name in self.pipes}
        return self._bind

    # -- GPU steps -------------------------------------------------------------------------------
    def _params(self, n: int, nout: int = 0) -> None:
        self.g.device.queue.write_buffer(self.params, 0,
                                         np.array([n, self.slots, nout, 0], np.uint32))

    def _dispatch(self, enc, name: str, threads: int) -> None:
        cp = enc.begin_compute_pass(label=name)
        cp.set_pipeline(self.pipes[name])
        cp.set_bind_group(0, self._bg()[name])
        cp.dispatch_workgroups(*self.g.grid(-(-max(threads, 1) // _WC_WG)))
        cp.end()

    def _state(self, enc, what: str) -> np.ndarray:
        enc.copy_buffer_to_buffer(self.state, 0, self.readback, 0, 64)
        self.g.device.queue.submit([enc.finish()])
        t0 = time.perf_counter()
        self.g.wait_map(self.readback, "READ", 0, 64, what)
        self.seconds_wait += time.perf_counter() - t0      # blocked on the GPU
        self.round_trips += 1
        st = np.frombuffer(self.readback.read_mapped(0, 64), np.uint32).copy()
        self.readback.unmap()
        return st

    def _set_state(self, **words: int) -> None:
        q = self.g.device.queue
        for i, v in ((_S_NWORDS, words.get("nwords")), (_S_NLONG, words.get("nlong")),
                     (_S_NEED, words.get("need")),
                     (_S_OVERFLOW, words.get("overflow")), (_S_NOUT, words.get("nout")),
                     (_S_OCC, words.get("occ"))):
            if v is not None:
                q.write_buffer(self.state, 4 * i, np.array([v], np.uint32))

    def _compact(self) -> int:
        """(store offset, count lo, count hi) of every word → ``out``; their number."""
        self._set_state(nout=0)
        self._params(0)
        enc = self.g.device.create_command_encoder(label="wordcount")
        self._dispatch(enc, "wc_compact", self.slots)
        return int(self._state(enc, "word table compaction")[_S_NOUT])

    def _grow(self, slots: int) -> None:
        """Rehash every stored word into an empty table of ``slots`` slots."""
        if not self.slots:
            self._new_table(slots)
            return
        nout = self._compact()
        old_out = self.out
        self._new_table(slots)
        enc = self.g.device.create_command_encoder(label="wordcount")
        enc.copy_buffer_to_buffer(old_out, 0, self.out, 0, 12 * nout)
        self.g.device.queue.submit([enc.finish()])
        self._set_state(occ=0, overflow=0)
        self._params(0, nout)
        enc = self.g.device.create_command_encoder(label="wordcount")
        self._dispatch(enc, "wc_rehash", nout)
        st = self._state(enc, "word table rehash")
        if st[_S_OVERFLOW]:
            # A probe sequence ran out while moving the words (crafted collisions): the words
            # counted so far go to the CPU counter, and so does everything after (table_full).
            self.extra.update(self._table_words(nout).to_dict())
            self.cpu_has_short_words = True
            self.table_full = True
            self._new_table(self.min_slots)
            self._set_state(occ=0, overflow=0)

    def _cpu(self, data: np.ndarray, offsets: np.ndarray) -> None:
        """Count a packed batch on the CPU (merged into the result by word)."""
        self.extra.update(_count_batch(data, offsets).to_counter())
        self.cpu_has_short_words = True

    def _split(self, data: np.ndarray, offsets: np.ndarray, limit: int) -> None:
        """Count a batch as parts of at most ``limit`` bytes, split at document boundaries. A
        document alone above ``limit`` is counted on the GPU by itself when it fits a batch
        (never split again: if its words overfill the table it goes to the CPU), else on the
        CPU."""
        ndocs = len(offsets) - 1
        k = 0
        while k < ndocs:
            j = int(np.searchsorted(offsets, offsets[k] + limit, side="right")) - 1
            s0 = int(offsets[k])
            if j <= k:
                doc = data[s0:int(offsets[k + 1])]
                one = np.array([0, len(doc)], np.int64)
                if len(doc) <= self.max_batch:
                    self.add_batch(doc, one, _split=False)
                else:
                    self._cpu(doc, one)
                k += 1
            else:
                self.add_batch(data[s0:int(offsets[j])], offsets[k:j + 1] - s0)
                k = j

    # -- one batch -------------------------------------------------------------------------------
    def add_batch(self, data: np.ndarray, offsets: np.ndarray, _split: bool = True) -> None:
        """Count the words of one packed batch (:func:`_batches`), uploaded with
        ``queue.write_buffer`` (:meth:`add_staged` takes a batch already in a mapped staging
        buffer: no host copy).

        Args:
            data: uint8, shape ``(n,)``: the documents' bytes back to back.
            offsets: int64, shape ``(num_docs + 1,)``: document k is
                ``data[offsets[k]:offsets[k+1]]``.
        """
        from torch_gpubpe.core.packing import doc_start_bitmap, pad_to_u32

        n = len(data)
        if n == 0:
            return
        if self.table_full:
            self._cpu(data, offsets)
            return
        if n > self.max_batch:
            self._split(data, offsets, self.max_batch)
            return
        q = self.g.device.queue
        self._ensure_text(n)
        self._ensure_table()
        # The text as is (no padded copy): whole u32 words, then the last 1–3 bytes padded.
        whole = n // 4 * 4
        if whole:
            q.write_buffer(self.text, 0, np.ascontiguousarray(data[:whole]))
        if whole < n:
            q.write_buffer(self.text, whole, pad_to_u32(data[whole:], 0))
        q.write_buffer(self.doc_bits, 0, doc_start_bitmap(offsets, n))
        self._count_uploaded(HostBatch(data, offsets), None, _split)

    def add_staged(self, stage, bits_offset: int, host: HostBatch) -> None:
        """Count a batch whose bytes (zero-padded to whole u32 + 4 bytes) are at offset 0 of the
        unmapped ``MAP_WRITE | COPY_SRC`` buffer ``stage`` and whose document-start bitmap
        (:func:`~torch_gpubpe.encoding.pretokenize.doc_start_bitmap`) is at ``bits_offset``; the two are
        copied on the GPU in the same submit as the first pass (``count_pipeline``).

        ``host``: the same batch on the host (its pieces, not joined) for the CPU paths and
        the long words. ``host.n`` ≤ ``batch_bytes``.
        """
        n = host.n
        if self.table_full:
            self._cpu(host.array(), host.offsets)
            return
        self._ensure_text(n)
        self._ensure_table()
        enc = self.g.device.create_command_encoder(label="wordcount")
        enc.copy_buffer_to_buffer(stage, 0, self.text, 0, (n + 3) // 4 * 4 + 4)
        enc.copy_buffer_to_buffer(stage, bits_offset, self.doc_bits, 0,
                                  4 * ((n + 1 + 31) // 32))
        self._count_uploaded(host, enc, True)

    def _ensure_table(self) -> None:
        if not self.slots:
            self._new_table(self.min_slots)
            self._ensure_store(16)

    def _count_uploaded(self, host: HostBatch, enc, _split: bool) -> None:
        """The GPU passes over the batch now in ``text``/``doc_bits`` (``enc``: an encoder
        holding the upload copies, or None)."""
        g = self.g
        n = host.n
        if self.spill is not None and self.occupied > self.max_words:
            self._spill_table()        # the host's share of the budget: words go to disk
        self._set_state(nwords=0, nlong=0, overflow=0, need=0)
        self._params(n)
        if enc is None:
            enc = g.device.create_command_encoder(label="wordcount")
        self._dispatch(enc, "wc_starts", n // 32 + 1)
        st = self._state(enc, "word starts")
        occ, nwords = int(st[_S_OCC]), int(st[_S_NWORDS])
        if nwords > n:  # every word has a byte: a broken kernel or driver, not the input
            raise GPUOperationError(f"word counting: the GPU found {nwords} word starts in a "
                                    f"batch of {n} bytes (a driver or shader fault; please "
                                    "report it)")
        # New words this batch may add: every word start (the bound), or the guess of
        # NEW_WORDS_MARGIN (checked after the insert; a low guess is undone and recounted).
        new = nwords
        if not self._every_start_new:
            rate = FIRST_NEW_WORDS if self.new_words_rate is None else self.new_words_rate
            new = min(nwords, max(MIN_NEW_WORDS, int(NEW_WORDS_MARGIN * rate * nwords)))
        guessed = new < nwords
        need = 2 * (occ + new)
        if need > self.slots:
            slots = max(self.min_slots, 1 << (need - 1).bit_length())
            if slots > self.max_slots and occ and self.spill is not None:
                # The GPU table cannot take this batch's words too: its words go to a sorted
                # run on disk (exact: runs are merged by word at the end) and the batch is
                # counted into an empty table.
                self._spill_table()
                occ = 0
                slots = max(self.min_slots, 1 << (2 * new - 1).bit_length())
                st[_S_TOP] = 0
                if slots <= self.max_slots:
                    self._new_table(slots)
                    self._params(n)
                    slots = self.slots
            if slots > self.max_slots:
                data, offsets = host.array(), host.offsets
                if 4 * occ > self.max_slots:
                    # The table is full of distinct words: this batch and the rest are
                    # counted on the CPU (nothing is lost; slower).
                    self.table_full = True
                    self._cpu(data, offsets)
                    return
                if _split and len(offsets) > 2:
                    self._split(data, offsets, max(1, n // 2))   # fewer words per batch
                else:
                    self._cpu(data, offsets)    # one document with too many words
                return
            if slots > self.slots:
                self._grow(slots)
            if self.table_full:
                self._cpu(host.array(), host.offsets)
                return
            self._params(n)
        top = int(st[_S_TOP])
        enc = g.device.create_command_encoder(label="wordcount")
        enc.copy_buffer_to_buffer(self.keys, 0, self.keys_bak, 0, 4 * self.slots)
        enc.copy_buffer_to_buffer(self.counts, 0, self.counts_bak, 0, 8 * self.slots)
        self._dispatch(enc, "wc_insert", n)
        st = self._state(enc, "word counting")
        if guessed and (st[_S_OVERFLOW] or 2 * int(st[_S_OCC]) > self.slots):
            # More new words than guessed: undo the batch and count it again into a table
            # sized for every word start being new (its text is still in `text`).
            self._undo_batch(occ)
            self.estimate_retries += 1
            # the next guess at least doubles (NEW_WORDS_MARGIN × the share just guessed), even
            # when this batch ends on the CPU and teaches no share: a few retries at most
            self.new_words_rate = max(self.new_words_rate or 0.0, new / max(1, nwords))
            self._every_start_new = True
            try:
                self._count_uploaded(host, None, _split)
            finally:
                self._every_start_new = False
            return
        if (not st[_S_OVERFLOW] and 4 * (top + int(st[_S_NEED]) + 16) > g.binding_bytes(4)):
            st[_S_OVERFLOW] = 1             # the word store would outgrow a binding
            if self.spill is not None and occ:
                spill_retry = True
            else:
                self.table_full = True
                spill_retry = False
        else:
            spill_retry = False
        if not st[_S_OVERFLOW]:
            # The store grows to what this batch's new words take (S_NEED), then they move in.
            self._ensure_store(top + int(st[_S_NEED]) + 16)
            enc = g.device.create_command_encoder(label="wordcount")
            self._dispatch(enc, "wc_persist", self.slots)
            g.device.queue.submit([enc.finish()])
        if st[_S_OVERFLOW]:
            # A probe sequence ran out (adversarial hash collisions), or the store is full:
            # undo the batch; count it on the CPU instead (or, store full with spilling on,
            # spill the table and count the batch again on the GPU).
            self._undo_batch(occ)
            if spill_retry:
                self._spill_table()
                self._retry_text(host)
                return
            self._cpu(host.array(), host.offsets)
            return
        if nwords:
            rate = (int(st[_S_OCC]) - occ) / nwords
            self.new_words_rate = max(self.new_words_rate or 0.0, rate)
        self.occupied = int(st[_S_OCC])
        self.store_words = top + int(st[_S_NEED])
        nlong = int(st[_S_NLONG])
        if nlong:
            # Words longer than MAXW: their ends from the word-start bitmap (bit n is set).
            pos = g.read_u32(self.longs, 0, nlong, what="long words").astype(np.int64)
            bits = g.read_u32(self.starts, 0, n // 32 + 1, what="word starts")
            words = host.words(np.sort(pos), _ends_after(bits, np.sort(pos)))
            self.long_words.append(words)
            self.long_bytes += len(words[0])
        self.peak_gpu_bytes = max(self.peak_gpu_bytes, self.gpu_bytes())
        if self.on_batch is not None:
            self.on_batch(self)

    def _undo_batch(self, occ: int) -> None:
        """The table as it was before the last wc_insert (from its backups), ``occ`` words."""
        enc = self.g.device.create_command_encoder(label="wordcount")
        enc.copy_buffer_to_buffer(self.keys_bak, 0, self.keys, 0, 4 * self.slots)
        enc.copy_buffer_to_buffer(self.counts_bak, 0, self.counts, 0, 8 * self.slots)
        self.g.device.queue.submit([enc.finish()])
        self._set_state(occ=occ, overflow=0)

    def _retry_text(self, host: HostBatch) -> None:
        """Count ``host`` again into the (now empty) table: its text is still in ``text``."""
        self._count_uploaded(host, None, True)

    def _spill_table(self) -> None:
        """The table's words and counts → ``self.spill`` (a sorted run on disk), then an empty
        table and word store."""
        nout = self._compact()
        wc = self._table_words(nout)
        self.spill(wc)
        self.spilled_runs += 1
        self._new_table(self.min_slots)
        self.g.device.queue.write_buffer(self.state, 0, np.zeros(16, np.uint32))
        self.occupied = self.store_words = 0

    def _table_words(self, nout: int) -> WordCounts:
        """The ``nout`` words wc_compact wrote to ``out``, with their bytes from the store."""
        if not nout:
            return WordCounts(np.zeros(0, np.uint8), np.zeros(0, np.int64),
                              np.zeros(0, np.uint64))
        out = self.g.read_u32(self.out, 0, 3 * nout, what="word table readback").reshape(-1, 3)
        top = int(self._state(self.g.device.create_command_encoder(label="wordcount"), "store size")[_S_TOP])
        store = self.g.read_u32(self.store, 0, top, what="word store readback")
        # In store order, the words' bytes are one boolean selection of the store's bytes (1 B
        # of mask per store byte, not an int64 index per byte: this runs on tables of 10^7+
        # words under a memory budget).
        # rows in store order: the keys are distinct store offsets < top, so a scatter into
        # a top-long array and a selection sort them in O(top) (argsort: 3-10x slower)
        slot = np.zeros(top, np.int32)
        slot[out[:, 0]] = np.arange(1, nout + 1, dtype=np.int32)
        order = slot[slot > 0] - 1
        del slot
        o = out[order, 0].astype(np.int64)
        counts = (out[order, 1].astype(np.uint64)
                  | (out[order, 2].astype(np.uint64) << np.uint64(32)))
        del out
        lengths = store[o].astype(np.int64)
        mark = np.zeros(4 * top + 1, np.int8)
        first = 4 * (o + 1)
        mark[first] = 1
        mark[first + lengths] -= 1     # < the next word's first byte (its length word between)
        np.cumsum(mark, dtype=np.int8, out=mark)      # (in place: no second 4·top array)
        return WordCounts(store.view(np.uint8)[mark[:-1].view(bool)], lengths, counts)

    def group_long(self) -> WordCounts:
        """Group the long words held (words over ``MAXW`` bytes, exact counts) and keep them
        grouped; returns them (:class:`WordCounts`, distinct words). ``long_bytes`` is then
        their distinct bytes (count_budget: what they prove about the corpus)."""
        wc = group_words(self.long_words)
        self.long_words = [(wc.data, wc.lengths, wc.counts)] if len(wc) else []
        self.long_bytes = len(wc.data)
        return wc

    def take_long(self) -> WordCounts:
        """The long words held, grouped, and no longer held (count_budget spills them)."""
        if len(self.long_words) == 1 and len(self.long_words[0]) == 3:   # grouped already
            wc = WordCounts(*self.long_words[0])
            self.long_words = []
        else:
            wc = group_words(self.long_words)
        self.long_bytes = 0
        return wc

    def result(self) -> WordCounts:
        """The distinct words counted so far with their counts (those not handed to ``spill``)."""
        if self.slots:
            nout = self._compact()
        else:
            nout = 0
        wc = self._table_words(nout)
        parts, self.long_words, self.long_bytes = self.long_words, [], 0
        longs = group_words(parts)                  # > MAXW bytes: not in the table
        if not self.extra:
            return concat_counts([wc, longs])
        if self.cpu_has_short_words:   # the CPU counted words the table may hold too: merge by key
            merged = Counter(wc.to_dict())
            merged.update(longs.to_dict())
            merged.update(self.extra)
            return WordCounts.from_dict(merged)
        merged = Counter(longs.to_dict())           # only words > MAXW bytes: disjoint
        merged.update(self.extra)
        return concat_counts([wc, WordCounts.from_dict(merged)])


class HostBatch:
    """One batch on the host, as the pieces it was assembled from (never joined unless a CPU
    path needs it): ``pieces`` = ``[(start in the batch, uint8 data, int64 offsets from 0)]``.

    Attributes:
        n: bytes in the batch.
        offsets: int64, shape ``(num_docs + 1,)``: the documents of the whole batch.
    """

    def __init__(self, data: np.ndarray | None = None, offsets: np.ndarray | None = None,
                 pieces: list | None = None) -> None:
        if pieces is None:
            pieces = [(0, data, np.asarray(offsets, np.int64))]
        self.pieces = pieces
        self.n = sum(len(d) for _, d, _ in pieces)
        self._array = data
        self._offsets = None if pieces is not None and data is None else offsets

    @property
    def offsets(self) -> np.ndarray:
        if self._offsets is None:
            parts = [o[:-1] + b for b, _, o in self.pieces] + [np.array([self.n], np.int64)]
            self._offsets = np.concatenate(parts)
        return self._offsets

    def array(self) -> np.ndarray:
        """The batch's bytes, joined (a copy unless it is one piece)."""
        if self._array is None:
            self._array = (self.pieces[0][1] if len(self.pieces) == 1
                           else np.concatenate([d for _, d, _ in self.pieces]))
        return self._array

    def words(self, pos: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The words ``[pos[k], ends[k])`` (sorted, each inside one document) as (bytes back to
        back, int64 lengths)."""
        bases = np.array([b for b, _, _ in self.pieces], np.int64)
        which = np.searchsorted(bases, pos, side="right") - 1
        out = []
        for i in np.unique(which).tolist():
            b, d, _ = self.pieces[i]
            sel = which == i
            out.append(_gather_runs(d, pos[sel] - b, ends[sel] - b))
        return (np.concatenate(out) if out else np.zeros(0, np.uint8)), ends - pos


def _gather_runs(data: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """``data[s[0]:e[0]] + data[s[1]:e[1]] + ...`` for sorted, disjoint runs."""
    if len(s) <= 1024:          # long words are ≥ MAXW bytes: few per batch
        return np.concatenate([data[a:b] for a, b in zip(s.tolist(), e.tolist())])
    mark = np.zeros(len(data) + 1, np.int8)
    mark[s] = 1
    mark[e] -= 1
    return data[np.cumsum(mark[:-1], dtype=np.int8).view(bool)]


def _ends_after(bits: np.ndarray, pos: np.ndarray) -> np.ndarray:
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
        return _empty_counts()
    lens = np.concatenate([p[1] for p in parts]).astype(np.int64)
    if not len(lens):
        return _empty_counts()
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
    # pandas: 0.3-0.5 s in a fresh process, measured on the H200 in train's count), and the
    # indices read from their buffer, not by Array.to_numpy (which imports pandas too).
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
# took ~4x (issue 17 §2: the budget's peak with prune_below was 1.04 GB under 0.8 GB).
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


def _empty_counts() -> WordCounts:
    return WordCounts(np.zeros(0, np.uint8), np.zeros(0, np.int64), np.zeros(0, np.uint64))


def concat_counts(parts: list[WordCounts]) -> WordCounts:
    """Word counts of disjoint word sets, concatenated."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return _empty_counts()
    if len(parts) == 1:
        return parts[0]
    return WordCounts(np.concatenate([p.data for p in parts]),
                      np.concatenate([p.lengths for p in parts]),
                      np.concatenate([p.counts for p in parts]))


def count_words_gpu(documents: Iterable[str | bytes], *, batch_bytes: int | None = None,
                    info: dict | None = None, gpu=None, _counter_kw: dict | None = None
                    ) -> WordCounts:
    """How often each word (DESIGN.md §2) occurs over all documents, counted on the GPU
    (wgsl/wordcount.wgsl); the same counts as :func:`count_words`, as flat arrays.

    Args:
        documents: ``str`` (UTF-8; lone surrogates → U+FFFD) or bytes-like items; consumed
            once, in batches of about ``batch_bytes`` bytes (default 64 MiB, less where the
            adapter's bindings are smaller).
        info: if given, filled with ``num_documents`` and ``corpus_bytes`` (UTF-8 bytes).
        gpu: the :class:`~torch_gpubpe.gpu.device.GPU` to use (default: the process's).
        _counter_kw: test hooks passed to :class:`GPUWordCounter` (small tables, stores and
            batches).
    Returns:
        :class:`WordCounts` (words in no particular order).
    Raises:
        InputError: ``documents`` is one ``str``/``bytes``, or an item is neither ``str`` nor
            bytes-like (names its index).
        NoAdapterError, GPUOperationError: no usable GPU / a GPU operation failed.
    """
    check_documents(documents)
    info = {} if info is None else info
    info.setdefault("num_documents", 0)
    info.setdefault("corpus_bytes", 0)
    from torch_gpubpe.training.count_stream import PIECE_BYTES, count_stream

    counter = GPUWordCounter(gpu, batch_bytes, **(_counter_kw or {}))
    with counter.g.operation("counting words"):
        piece = min(PIECE_BYTES, counter.batch_bytes)
        count_stream(counter, _batches(documents, piece, info))
        return counter.result()
