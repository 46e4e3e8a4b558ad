"""GPU greedy longest-match encoder in a persistent session (DESIGN.md §4–§6; seed §4 and
"Host Mimarisi": persistent buffer pool, multi-pass slicing, one submit per slice).

Pipeline per slice (wgsl/encode.wgsl), recorded in ONE command encoder and ONE submit:
``trie_tokenizer_chunked`` (each thread walks the words that start in its 32-byte chunk and writes
each token id at its first byte) → ``trie_prefix_sum`` (block counts → offsets, total) →
``trie_tokenizer_compact`` (coalesced compaction), then the 4-byte total and each document's
first-token index are read back, then exactly ``total`` token ids (``uint16`` when the vocab has
at most 65,536 ids, else ``uint32``).

Long words (issue 17: MBs of one character, digits, whitespace, CJK text without spaces): a walk
that gets ``long_word_bytes`` (2,048) past its chunk stops at a token start p and records the
region [p, end of the word); ``long_word_ends`` finds each end in the same submit. The host then
records one more submit for the slice: ``long_periods`` (bytes whose next max_depth bytes repeat
those 1–4 bytes back copy that match) → ``long_match`` (every other byte's longest match)
→ ``long_exits`` (per tile of ``lc`` bytes, each byte's first chain position past the tile) →
ceil(log2(tiles)) × ``long_jump`` (pointer jumping marks the token chain p → p + len → …) →
``long_emit`` (token ids at the chain's positions), then the prefix sum and the compaction. Same
ids as one walk (the chain IS the greedy walk), O(n log n) work over the regions only. A walk
that runs out of its step budget before that (an adversarial trie) is continued by further
``trie_tokenizer_chunked`` dispatches over only the blocks that still walk.

Bounded work per dispatch (DESIGN.md §8: lavapipe stops a thread's loops after 65,535
iterations; a real GPU resets a dispatch that runs for seconds). Loop iterations per thread:

==========================  ====================================  ===============================
kernel                      threads                               iterations per thread
==========================  ====================================  ===============================
trie_tokenizer_chunked      one per CHUNK bytes                   CHUNK + ``thread_budget``
                                                                  (32,768) walk steps; ≤ 64
                                                                  continuation dispatches/submit
long_word_ends              one per region (< n / 2,048)          256 + blocks (n / 8 KiB) / 8
long_periods                one per tile (``lc`` bytes)           ≤ 32 + ``lc`` + longest token
long_match                  one per byte of the regions           ≤ 32 + longest token
long_exits, long_emit       one per tile (``lc`` bytes)           ≤ 32 + 2 ``lc`` + longest token
                                                                  (``lc`` ≤ 16,384)
long_jump                   one per window node; ≤ 31 dispatches  1
trie_prefix_sum             one workgroup                         2 × blocks / 256 + subgroups
trie_tokenizer_compact      one per CHUNK bytes                   CHUNK / 4 × (4 + 32)
==========================  ====================================  ===============================

A walk step is a binary search of at most 8 steps (unrolled). A slice is at most
``max_slice_bytes`` (default: the storage-binding limit / 4, at most 2^31 bytes: every u32
position, size and offset in the shaders stays below 2^32, host sizes are Python ints); larger
batches are sliced at word starts. Every wgpu error becomes a
:class:`~torch_gpubpe.errors.GPUOperationError` naming the step; after a lost device or a
readback timeout (``TORCH_GPUBPE_TIMEOUT``) the next call opens a fresh session.

Example::

    >>> from torch_gpubpe import Vocab
    >>> from torch_gpubpe.core import reference
    >>> from torch_gpubpe.encoding.tokenizer import Tokenizer
    >>> merges = reference.train(["yakınlık ve yakınlık"], vocab_size=270, min_frequency=1)
    >>> tok = Tokenizer(Vocab.from_merges(merges))
    >>> ids = tok.encode("yakınlık ve")
    >>> ids == reference.encode("yakınlık ve", merges), tok.decode(ids)
    (True, 'yakınlık ve')
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from collections import deque
from collections.abc import Collection, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from typing import Literal, Union

import numpy as np

from torch_gpubpe.core import cpython_str as _cs
from torch_gpubpe.core import str_pack as _sp
from torch_gpubpe.gpu import wgpu_internals as _wi
from torch_gpubpe.core.cpython_str import PARALLEL_COPY_MIN, copy_parts, join_parts
from torch_gpubpe.errors import GPUOperationError, InputError
from torch_gpubpe.core.packing import word_start_mask
from torch_gpubpe.core.trie import Trie, cached_trie
from torch_gpubpe.core.vocab import Vocab

WG = 256
EOT = "<|endoftext|>"
SpecialSet = Union[Literal["all"], AbstractSet[str], Collection[str]]
"""``allowed_special`` / ``disallowed_special``: ``"all"`` or a collection of spellings."""
DEFAULT_CHUNK = 32
DEFAULT_BUDGET = 1 << 15  # walk steps per thread per dispatch (lavapipe stops loops at 65,535)
MAX_CONTINUATIONS_PER_SUBMIT = 64
DEFAULT_LONG_WORD = 2048  # a walk this many bytes past its chunk hands the word to the long path
MAX_LONG_TILE = 16384  # bytes per long-word tile (>= the longest token; lavapipe's loop cap)
MAX_SLICE_POSITIONS = 1 << 31  # byte positions of a slice stay far below 2^32 (u32 in WGSL)
_NO_TOKEN = 0xFFFFFFFF
HOST_STEPS = ("wait_upload_map", "upload_copy", "upload_doc_starts", "record",
              "previous_readback_submit", "wait_token_count", "submit", "wait_ids", "ids_copy")
"""The steps of :attr:`Tokenizer.host_seconds` (host seconds per step of a batch)."""
# Layout of the metadata readback (rb_meta): info[0:8], pass timestamps (3 walk passes, then 3
# of a regex pre-tokenizer), the first regions (first byte, end byte) of info[8:], then each
# document's first-token index.
_META_HEAD = 32
_TS_OFF = 32
_TS_COUNT = 12
_REP_STRIDE = 32  # timestamp queries per repetition of profile_repeat (256-byte resolve offsets)
_REG_OFF = _TS_OFF + 8 * _TS_COUNT
_REG_INLINE = 256
_DOC_OFF = _REG_OFF + 8 * _REG_INLINE


_PARTS_MIN_AVG_BYTES = 4096


DEFER_STR = False
"""Whether ``_pack(keep_parts=True)`` defers the transcoding of non-ASCII ``str`` to the copy
into the upload buffer (written once, exact). Off: on the 2-core VM it moved the same CPU work
from one pass to the other (0.209 vs 0.211 s per 102 MB) and it has no H200 measurement; the
scratch-then-copy path it replaces measured 0.046-0.049 s of packing for 102 MB there."""


def _pack(texts: Sequence[str | bytes], *, keep_parts: bool = False, defer: bool | None = None
          ) -> tuple[np.ndarray | list[str | bytes | _cs.Span | _cs.Deferred], np.ndarray]:
    """``pack_documents`` of a sequence: the UTF-8 of non-ASCII ``str`` made by several
    threads without the GIL (:func:`torch_gpubpe.core.cpython_str.utf8_parts`).

    With ``keep_parts`` and documents of at least 4 KiB on average, the UTF-8 parts are returned
    unjoined: a list of ASCII ``str`` (their characters are their UTF-8, so they are not
    encoded at all), ``bytes`` and spans of transcoded UTF-8; the session copies them straight
    into its mapped upload buffer with several threads (:func:`copy_parts`), which saves one
    pass over the batch on the host. With ``defer`` (default :data:`DEFER_STR`) the non-ASCII
    ``str`` are only measured here (:class:`torch_gpubpe.core.cpython_str.Deferred`) and
    transcoded by ``copy_parts`` straight into the upload buffer: their UTF-8 is written once
    (``encode_batches`` packs on a thread ahead, without ``defer``: the transcoding stays
    there, off the main thread). Where the compiled packer is available
    (:mod:`torch_gpubpe.core.str_pack`), ``keep_parts`` gives one part, a
    :class:`~torch_gpubpe.core.str_pack.Packed` (measured here, transcoded by ``copy_parts``
    straight into the upload buffer) unless ``defer`` is False, and otherwise one array.
    """
    if isinstance(texts, (str, bytes, bytearray, memoryview)):
        raise InputError("encode_batch expects a sequence of documents, not one str/bytes; "
                         "use encode() for one document")
    if _sp.available():   # (the compiled packer: one task per thread, no Python per document)
        if keep_parts and defer is not False:
            packed = _sp.Packed(texts)   # (measured; transcoded by copy_parts into the upload)
            return [packed], packed.offsets
        return _sp.pack(texts)
    parts = _cs.utf8_parts(texts, defer=keep_parts and (DEFER_STR if defer is None else defer))
    # (InputError naming a bad item's index)
    lengths = np.fromiter(map(len, parts), np.int64, len(parts))
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if (keep_parts and _cs.str_address is not None and len(parts)
            and offsets[-1] >= _PARTS_MIN_AVG_BYTES * len(parts)):
        return parts, offsets
    return join_parts(parts), offsets


class BatchEncoding:
    """Token ids of a batch of documents, stored flat.

    Attributes:
        ids: 1-D ``np.uint16`` or ``np.uint32`` array of every document's ids, back to back.
        offsets: ``np.int64`` array of shape ``(num_docs + 1,)``; document k is
            ``ids[offsets[k]:offsets[k+1]]`` (units: tokens).
    """

    __slots__ = ("ids", "offsets")

    def __init__(self, ids: np.ndarray, offsets: np.ndarray) -> None:
        self.ids = ids
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, k: int) -> np.ndarray:
        n = len(self)
        if not -n <= k < n:
            raise IndexError(f"document {k} out of range for a batch of {n}")
        k %= n
        return self.ids[self.offsets[k] : self.offsets[k + 1]]

    def __iter__(self):
        return (self[k] for k in range(len(self)))

    def tolist(self) -> list[list[int]]:
        """Per-document ids as Python lists."""
        flat = self.ids.tolist()
        o = self.offsets.tolist()
        return [flat[o[k] : o[k + 1]] for k in range(len(self))]

    def __repr__(self) -> str:
        return (f"BatchEncoding(num_docs={len(self)}, num_tokens={len(self.ids)}, "
                f"dtype={self.ids.dtype})")


def _doc_start_bits(out: np.ndarray, starts: np.ndarray, end: int | None) -> None:
    """Write the document-start bitmap into ``out`` (uint32 words, bit ``p & 31`` of word
    ``p >> 5`` set for each start ``p``, and for ``end`` when given), with writes only.

    ``out`` is mapped staging memory: it is filled and then written word by word, never read
    (host reads of write-combined memory are slow), and no bitmap is allocated per batch (a
    fresh zeroed array is faulted in page by page with the GIL held: 2 MiB per 16 MB batch).
    ``starts`` are non-decreasing (documents in order; empty ones repeat a start)."""
    out.fill(0)
    pos = starts.astype(np.int64)
    if end is not None:
        pos = np.append(pos, end)
    if not len(pos):
        return
    word = pos >> 5
    if len(word) > 1 and not (np.diff(word) >= 0).all():
        raise AssertionError("document starts are not in order")
    first = np.flatnonzero(np.diff(word, prepend=-1))  # the first start in each word
    out[word[first]] = np.bitwise_or.reduceat(np.uint32(1) << (pos & 31).astype(np.uint32),
                                              first)


class _Slot:
    """One set of per-batch GPU buffers (two slots → two batches in flight), grown ×1.5."""

    def __init__(self, sess: _Session, idx: int) -> None:
        self.sess, self.idx = sess, idx
        self.cap_n = 0
        self.cap_docs = 0
        self.up_promise = None  # pending map_async(WRITE) of the upload staging buffer
        self.meta_promise = None
        self.tok_promise = None
        self.query_set = None
        self.pt_timed = False  # the last slice's submit timed a regex pre-tokenizer's passes
        self.reps_timed = 0  # repetitions before the last timed too (profile_repeat)
        self.cap_long = 0  # long-word buffers: bytes (long indices) and regions per group
        self.cap_lreg = 0
        self.lbg = None
        self.nreg = self.long_errors = 0
        self._staged = None  # (n, ndocs, bitmap words, mask given) of a staged batch

    # -- buffers -------------------------------------------------------------------------
    def ensure(self, n: int, ndocs: int) -> None:
        if n <= self.cap_n and ndocs <= self.cap_docs:
            return
        s = self.sess
        g, U = s.gpu, s.gpu.wgpu.BufferUsage
        self._drop_upload_mapping()
        cap_n = self.cap_n if n <= self.cap_n else min(max(n, int(self.cap_n * 1.5), 4096), s.limit)
        cap_d = (self.cap_docs if ndocs <= self.cap_docs
                 else max(ndocs, int(self.cap_docs * 1.5), 64))
        self.cap_n, self.cap_docs = cap_n, cap_d
        lab = f"encode[{self.idx}]"
        nb = -(-cap_n // s.block)
        nchunks = nb * WG
        self.text_bytes = (cap_n + 1 + 3) // 4 * 4 + 4
        self.bits_bytes = ((cap_n + 1 + 31) // 32 + 1) * 4
        self.docs_bytes = cap_d * 4
        self.text = g.buffer(self.text_bytes, U.STORAGE | U.COPY_DST, f"{lab}.text")
        self.bits = g.buffer(self.bits_bytes, U.STORAGE | U.COPY_DST, f"{lab}.doc_bits")
        self.scratch = g.buffer(cap_n * 4, U.STORAGE, f"{lab}.scratch")
        self.counts = g.buffer(nb * 4, U.STORAGE | U.COPY_DST, f"{lab}.counts")
        self.block_off = g.buffer(nb * 4, U.STORAGE, f"{lab}.block_off")
        self.state = g.buffer((2 * nchunks + nb) * 4, U.STORAGE, f"{lab}.state")
        if s.bpe is not None:  # merge-order mode: dead-position bits (wgsl/encode_bpe.wgsl)
            self.dead_bytes = ((cap_n + 1 + 31) // 32 + 1) * 4
            self.dead = g.buffer(self.dead_bytes, U.STORAGE | U.COPY_DST, f"{lab}.dead")
        # info: 8 counters + (first byte, end byte) of each long-word region; a region is a word
        # of more than long_from bytes, so there are fewer than cap_n / long_from of them.
        self.reg_cap = max(_REG_INLINE, cap_n // s.long_from + 2) if s.long_from else _REG_INLINE
        self.meta = g.buffer(_META_HEAD + 8 * self.reg_cap, U.STORAGE | U.COPY_SRC | U.COPY_DST,
                             f"{lab}.meta")
        self.params = g.buffer(32, U.UNIFORM | U.COPY_DST, f"{lab}.params")
        self.out_bytes = cap_n * s.id_size + 8
        self.out = g.buffer(self.out_bytes, U.STORAGE | U.COPY_SRC | U.COPY_DST, f"{lab}.out")
        self.doc_starts = g.buffer(self.docs_bytes, U.STORAGE | U.COPY_DST, f"{lab}.doc_starts")
        self.doc_tok = g.buffer(self.docs_bytes, U.STORAGE | U.COPY_SRC | U.COPY_DST,
                                f"{lab}.doc_tok")
        self.off_bits = self.text_bytes
        self.off_docs = self.off_bits + self.bits_bytes
        self.off_mask = self.off_docs + self.docs_bytes  # a regex pre-tokenizer's word starts
        self.upload = g.device.create_buffer(
            label=f"{lab}.upload", size=self.off_mask + (self.bits_bytes if s.pretok else 0),
            usage=U.MAP_WRITE | U.COPY_SRC, mapped_at_creation=True)
        self.rb_meta = g.buffer(_DOC_OFF + self.docs_bytes, U.MAP_READ | U.COPY_DST,
                                f"{lab}.rb_meta")
        # Room for two special tokens per document (wgsl/specials.wgsl) in the readback.
        self.sp_bytes = (cap_n + 2 * cap_d) * s.id_size + 8
        self.rb_tok = g.buffer(self.sp_bytes, U.MAP_READ | U.COPY_DST, f"{lab}.rb_tokens")
        self.sp_bg = None  # specials.wgsl's buffers and bind group, made on first use
        bind = {0: self.text, 1: self.bits, 2: s.nodes, 3: s.edges, 4: self.scratch,
                5: self.counts, 6: self.state, 7: self.meta, 8: self.params, 9: self.block_off,
                10: self.out, 11: self.doc_starts, 12: self.doc_tok}
        if s.bpe is not None:
            bind.update({13: s.tokinfo, 14: s.pairs, 15: self.dead, 17: s.bounds, 19: s.fedges,
                         20: s.d2, 21: s.spines})
            if s.bpe_work is not None:  # work counters (encoder_bpe.walk_work)
                bind[18] = s.bpe_work
            bind.update(s.bpe_bind)
        walk = s.chunked_bindings
        if s.bpe_bits_pipeline is not None:  # merge-order WORD_BITS: word starts as bits first
            self.wbits = g.buffer(((cap_n + 31) // 32 + 2) * 4, U.STORAGE, f"{lab}.word_bits")
            bind[16] = bind[23] = self.wbits
        if s.pretok:  # the walk reads word starts from the regex pre-tokenizer's mask
            self.pt = s.pretok.scratch(cap_n, self.text, self.bits, f"{lab}.pretok")
            bind[16] = self.pt.mask
            walk = tuple(b for b in walk if b != 1) + (16,)  # document starts are in the mask
        self.bg = {}
        uses_of = {"chunked": walk, "prefix": (5, 7, 8, 9),
                   "compact": (1, 4, 7, 8, 9, 10, 11, 12)}
        if s.long_from:
            uses_of["ends"] = (6, 7, 8)
        if s.bpe_bits_pipeline is not None:
            uses_of["wbits"] = (0, 1, 8, 23)
        for name, uses in uses_of.items():
            self.bg[name] = g.bind_group(s.pipes[name], {b: bind[b] for b in uses},
                                         label=f"{lab}.{name}")
        self.lbg = None  # bind groups of the long-word passes (they bind scratch and counts)
        if s.profile and self.query_set is None:
            self.query_set = g.device.create_query_set(label=f"{lab}.timestamps",
                                                       type="timestamp", count=_TS_COUNT)
            self.ts_resolve = g.buffer(8 * _TS_COUNT, U.QUERY_RESOLVE | U.COPY_SRC,
                                       f"{lab}.ts_resolve")

    def _settle(self) -> None:
        """Finish a readback that an exception (e.g. KeyboardInterrupt) left half done: the
        next submit copies into these staging buffers, and a copy into a mapped buffer aborts
        the process inside ``queue.submit`` (WGPU_NOTES.md §0.2)."""
        if not self.cap_n:  # no buffers yet
            return
        for attr, buf in (("meta_promise", self.rb_meta), ("tok_promise", self.rb_tok)):
            promise = getattr(self, attr)
            if promise is not None:
                setattr(self, attr, None)
                self.sess.gpu.wait_promise(promise, f"left-over {buf.label} map")
            if buf.map_state != "unmapped":
                buf.unmap()

    def _drop_upload_mapping(self) -> None:
        if self.up_promise is not None:
            self.sess.gpu.wait_promise(self.up_promise, "upload staging map")
            self.up_promise = None

    def _mapped_upload(self) -> np.ndarray:
        """The upload staging buffer, mapped for writing, as a uint8 array (valid until unmap)."""
        t = time.perf_counter()
        try:
            return self._mapped_upload_view()
        finally:
            self.sess.host_seconds["wait_upload_map"] += time.perf_counter() - t

    def _mapped_upload_view(self) -> np.ndarray:
        if self.up_promise is not None:
            self.sess.gpu.wait_promise(self.up_promise, "upload staging map")
            self.up_promise = None
        if self.upload.map_state != "mapped":
            self.sess.gpu.wait_map(self.upload, "WRITE", what="upload staging map")
        view = _wi.mapped_array(self.upload)
        if view is None:   # (recorded and warned by _wi) written with write_mapped at unmap
            view = self._host_upload = np.zeros(self.upload.size, np.uint8)
        return view

    # -- one slice -----------------------------------------------------------------------
    def start(self, data: np.ndarray, s: int, e: int, doc_rel: np.ndarray, end_bit: bool,
              mask: np.ndarray | None = None, before_submit=None) -> None:
        """Upload bytes ``data[s:e]`` (+ halo) and submit the three passes (no wait):
        :meth:`stage`, then :meth:`launch`.

        ``data``: uint8 array of the batch, or the batch's unjoined UTF-8 parts (a list of
        bytes; then ``s == 0`` and ``e`` is the batch size).

        ``doc_rel``: uint32 starts (relative to ``s``) of the documents starting in ``[s, e)``;
        ``end_bit``: byte ``e`` does not continue the last document (or does not exist).
        ``before_submit``: called once the upload is staged, right before the submit (the
        Tokenizer queues the readback of the batch in flight there).
        """
        self._settle()
        self.ensure(e - s, len(doc_rel))
        self.stage(data, s, e, doc_rel, end_bit, mask)
        self.launch(before_submit)

    def can_stage(self, n: int, ndocs: int) -> bool:
        """Whether a slice of ``n`` bytes and ``ndocs`` documents fits the buffers as they are:
        then it can be staged while this slot's previous batch is still in flight."""
        return 0 < n <= self.cap_n and ndocs <= self.cap_docs

    def stage(self, data: np.ndarray, s: int, e: int, doc_rel: np.ndarray, end_bit: bool,
              mask: np.ndarray | None = None) -> None:
        """The upload half of :meth:`start`: bytes, document-start bitmap, document starts
        (and a pre-tokenizer's mask) written into the mapped upload buffer, nothing submitted.
        Touches only the upload buffer, so it may run while the slot's previous batch is still
        being read back (its ids, token counts and sizes are other buffers and fields), once
        :meth:`can_stage` says the buffers are big enough; :meth:`launch` submits it."""
        sess = self.sess
        n = e - s
        ndocs = len(doc_rel)
        self._staged = None
        # Upload: bytes + halo, document-start bitmap, document starts; one staging buffer.
        up = self._mapped_upload()
        hs, t = sess.host_seconds, time.perf_counter()
        up[n : n + 8] = 0
        if isinstance(data, list):  # unjoined UTF-8 parts of the whole batch (see _pack)
            copy_parts(up[:n], data)
        else:
            parallel_copy(up[:n], data[s:e])
            if e < len(data):
                up[n] = data[e]
        t1 = time.perf_counter()
        hs["upload_copy"] += t1 - t
        nbits_words = (n + 1 + 31) // 32 + 1
        _doc_start_bits(up[self.off_bits : self.off_bits + 4 * nbits_words].view(np.uint32),
                        doc_rel, n if end_bit else None)
        up[self.off_docs : self.off_docs + 4 * ndocs] = doc_rel.view(np.uint8)
        if mask is not None:  # word starts of a regex pre-tokenizer, computed for the batch
            mbits = np.packbits(mask, bitorder="little")
            mbits[:1] |= 1  # a slice starts a walk at byte 0 (a word start or a token boundary)
            up[self.off_mask : self.off_mask + len(mbits)] = mbits
        del up
        hs["upload_doc_starts"] += time.perf_counter() - t1
        self._staged = (n, ndocs, nbits_words, mask is not None)

    def launch(self, before_submit=None) -> None:
        """The submit half of :meth:`start`, for the batch :meth:`stage` wrote: the upload
        copied to the slot's buffers and the passes recorded and submitted (no wait). The
        slot's previous batch must have been read back (its ``result()``) first."""
        sess, g = self.sess, self.sess.gpu
        if self._staged is None:
            raise RuntimeError("encoder slot: launch() without a staged batch")
        n, ndocs, nbits_words, has_mask = self._staged
        self._staged = None
        self._settle()
        self.n, self.ndocs = n, ndocs
        sess.slices += 1
        self.nb = -(-n // sess.block)
        hs, t = sess.host_seconds, time.perf_counter()
        if getattr(self, "_host_upload", None) is not None:
            self.upload.write_mapped(self._host_upload)
            self._host_upload = None
        self.upload.unmap()  # unmapped before the submit that reads it (WGPU_NOTES §0.2)
        dev = g.device
        self._write_params(resume=0)
        enc = dev.create_command_encoder(label=f"encode[{self.idx}].slice")
        text_len = (n + 1 + 3) // 4 * 4
        enc.copy_buffer_to_buffer(self.upload, 0, self.text, 0, text_len)
        enc.copy_buffer_to_buffer(self.upload, self.off_bits, self.bits, 0, 4 * nbits_words)
        if ndocs:
            enc.copy_buffer_to_buffer(self.upload, self.off_docs, self.doc_starts, 0, 4 * ndocs)
        if sess.pretok is not None and has_mask:
            enc.copy_buffer_to_buffer(self.upload, self.off_mask, self.pt.mask, 0, -(-n // 32) * 4)
        # (benchmarks: the passes recorded ``profile_repeat`` times back to back, so that the
        # GPU runs at its loaded clock; each repetition starts afresh and each is timed: the
        # last in ``last_pass_us``, all of them in ``session.rep_pass_us``)
        reps = sess.profile_repeat if self.query_set is not None else 1
        self.pt_timed = False
        self.reps_timed = reps - 1 if reps > 1 else 0
        if self.reps_timed:
            self._ensure_rep_queries(self.reps_timed)
        for r in range(reps):
            at = (self.query_set, 0) if r == reps - 1 else (self.rep_qs, _REP_STRIDE * r)
            if self.query_set is None:
                at = None
            if sess.pretok is not None and not has_mask:  # the split is computed here, on the GPU
                self.pt_timed = self.query_set is not None
                ts = (at[0], at[1] + 6) if self.pt_timed else None
                sess.pretok.record(enc, self.pt, n, timestamps=ts)
            self._record_passes(enc, first=True, continuations=0, ts_at=at)
        cmd = enc.finish()
        t1 = time.perf_counter()
        hs["record"] += t1 - t
        if before_submit is not None:
            before_submit()
        t2 = time.perf_counter()
        dev.queue.submit([cmd])
        self.up_promise = self.upload.map_async("WRITE")
        self.meta_promise = self.rb_meta.map_async(_wi.map_read_mode(), 0, _DOC_OFF + 4 * ndocs)
        hs["previous_readback_submit"] += t2 - t1
        hs["submit"] += time.perf_counter() - t2

    def _write_params(self, resume: int, block_base: int = 0) -> None:
        long_from = self.sess.long_from or _NO_TOKEN
        p = np.array([self.n, resume, self.sess.budget, self.nb, self.ndocs, block_base,
                      long_from, self.reg_cap], np.uint32)
        self.sess.gpu.device.queue.write_buffer(self.params, 0, p)

    def _ensure_rep_queries(self, k: int) -> None:
        """Timestamp queries for ``k`` untimed-before repetitions (benchmarks' profile_repeat):
        repetition ``r`` writes at ``_REP_STRIDE * r`` (256-byte aligned when resolved)."""
        if getattr(self, "rep_cap", 0) >= k:
            return
        g, U = self.sess.gpu, self.sess.gpu.wgpu.BufferUsage
        if k * _REP_STRIDE > 4096:
            raise ValueError(f"profile_repeat {k + 1}: at most {4096 // _REP_STRIDE + 1}")
        lab = f"encode[{self.idx}]"
        self.rep_qs = g.device.create_query_set(label=f"{lab}.rep_timestamps", type="timestamp",
                                                count=k * _REP_STRIDE)
        self.rep_resolve = g.buffer(8 * _REP_STRIDE * k, U.QUERY_RESOLVE | U.COPY_SRC,
                                    f"{lab}.rep_resolve")
        self.rb_reps = g.buffer(8 * _REP_STRIDE * k, U.MAP_READ | U.COPY_DST, f"{lab}.rb_reps")
        self.rep_cap = k

    def _record_passes(self, enc, first: bool, continuations: int,
                       cont_blocks: int = 0, scan: bool = True, ts_at=None) -> None:
        """Record the walk (``first``: one dispatch over the slice; else ``continuations``
        dispatches over ``cont_blocks`` blocks) and, with ``scan``, the prefix sum and the
        compaction (O(slice) each: left out of continuation submits, so that a long word costs
        linear time)."""
        s, g = self.sess, self.sess.gpu
        # info[0:4] per submit; info[4:8] (long-word regions, errors) once per slice.
        enc.clear_buffer(self.meta, 0, _META_HEAD if first else 16)
        if first:
            enc.clear_buffer(self.counts, 0, self.nb * 4)
            if s.bpe is not None:
                enc.clear_buffer(self.dead, 0, ((self.n + 1 + 31) // 32 + 1) * 4)
        if scan and self.ndocs:
            enc.clear_buffer(self.doc_tok, 0, 4 * self.ndocs)
        if scan and s.id_size == 2:
            enc.clear_buffer(self.out, 0, (self.n * 2 + 4 + 3) // 4 * 4)
        grid = g.grid(self.nb)
        # ts_at: (query set, first index) of this first walk's timestamps; None: untimed
        ts = ts_at is not None and first

        def begin(k: int, label: str):
            kw = {}
            if ts:
                kw["timestamp_writes"] = {"query_set": ts_at[0],
                                          "beginning_of_pass_write_index": ts_at[1] + 2 * k,
                                          "end_of_pass_write_index": ts_at[1] + 2 * k + 1}
            return enc.begin_compute_pass(label=label, **kw)

        cp = begin(0, "trie_tokenizer_chunked")
        cont_grid = grid if first else g.grid(cont_blocks)
        if s.walk_sub > 1:  # merge-order walk in workgroups smaller than a block (WALK_WG64)
            cont_grid = g.grid((self.nb if first else cont_blocks) * s.walk_sub)
        walks = 1 if first else continuations
        if first and s.bpe_bits_pipeline is not None:  # (WORD_BITS) the walk's word starts
            s.dispatch(cp, "wbits", self.bg["wbits"], g.grid(-(-(self.n // 32 + 2) // WG)))
        for _ in range(walks):
            s.dispatch(cp, "chunked", self.bg["chunked"], cont_grid)
        if walks and s.long_from:  # (re)find the ends of the long-word regions
            s.dispatch(cp, "ends", self.bg["ends"], g.grid(-(-self.reg_cap // WG)))
        cp.end()
        if not scan:
            self._copy_meta(enc)
            return
        cp = begin(1, "trie_prefix_sum")
        s.dispatch(cp, "prefix", self.bg["prefix"], (1, 1))
        cp.end()
        cp = begin(2, "trie_tokenizer_compact")
        s.dispatch(cp, "compact", self.bg["compact"], grid)
        cp.end()
        self._copy_meta(enc)
        if ts:
            k = 6 + 2 * len(s.pretok.PASSES) if self.pt_timed else 6
            if ts_at[0] is self.query_set:
                enc.resolve_query_set(self.query_set, 0, k, self.ts_resolve, 0)
                enc.copy_buffer_to_buffer(self.ts_resolve, 0, self.rb_meta, _TS_OFF, 8 * k)
            else:  # a repetition before the last (profile_repeat)
                enc.resolve_query_set(ts_at[0], ts_at[1], k, self.rep_resolve, 8 * ts_at[1])
                enc.copy_buffer_to_buffer(self.rep_resolve, 8 * ts_at[1], self.rb_reps,
                                          8 * ts_at[1], 8 * k)
        if self.ndocs:
            enc.copy_buffer_to_buffer(self.doc_tok, 0, self.rb_meta, _DOC_OFF, 4 * self.ndocs)

    def _copy_meta(self, enc) -> None:
        enc.copy_buffer_to_buffer(self.meta, 0, self.rb_meta, 0, _META_HEAD)
        if self.sess.long_from:
            enc.copy_buffer_to_buffer(self.meta, _META_HEAD, self.rb_meta, _REG_OFF,
                                      8 * _REG_INLINE)

    def _read_meta(self) -> tuple[int, int, np.ndarray]:
        g = self.sess.gpu
        t = time.perf_counter()
        g.wait_promise(self.meta_promise, "token-count readback")
        self.sess.host_seconds["wait_token_count"] += time.perf_counter() - t
        self.meta_promise = None
        try:
            raw = self.rb_meta.read_mapped(0, _DOC_OFF + 4 * self.ndocs)
        finally:
            self.rb_meta.unmap()
        head = np.frombuffer(raw, np.uint32, 8)
        self.nreg, self.long_errors = int(head[4]), int(head[5])
        self.bad_tokens = int(head[6])  # merge-order mode: BAD_TOKENs written (encode_bpe.wgsl)
        self.reg_inline = np.frombuffer(raw, np.uint32, 2 * _REG_INLINE, offset=_REG_OFF)
        if self.query_set is not None:
            t = np.frombuffer(raw, np.uint64, _TS_COUNT, offset=_TS_OFF).astype(np.int64)
            names = ["trie_tokenizer_chunked", "trie_prefix_sum", "trie_tokenizer_compact"]
            if self.pt_timed:  # the regex pre-tokenizer's passes ran too
                names += list(self.sess.pretok.PASSES)
            self.sess.last_pass_us = {
                name: (t[2 * k + 1] - t[2 * k]) * self.sess.ns_per_tick / 1e3
                for k, name in enumerate(names)}
            reps = []
            if self.reps_timed:  # benchmarks' profile_repeat: the repetitions before the last
                nb = 8 * _REP_STRIDE * self.reps_timed
                g.wait_map(self.rb_reps, _wi.map_read_mode(), 0, nb, what="repeated pass timestamps")
                try:
                    rt = np.frombuffer(self.rb_reps.read_mapped(0, nb), np.uint64).astype(np.int64)
                finally:
                    self.rb_reps.unmap()
                for r in range(self.reps_timed):
                    b = _REP_STRIDE * r
                    reps.append({name: (rt[b + 2 * k + 1] - rt[b + 2 * k]) * self.sess.ns_per_tick
                                 / 1e3 for k, name in enumerate(names)})
            self.sess.rep_pass_us = reps + [dict(self.sess.last_pass_us)]
        doc_tok = np.frombuffer(raw, np.uint32, self.ndocs, offset=_DOC_OFF)
        # Blocks [lo, hi) hold every chunk whose walk ran out of budget (info[2], info[3]).
        self.cont_blocks = (0xFFFFFFFF - int(head[2]), int(head[3]))
        return int(head[0]), int(head[1]), doc_tok

    # -- long words (DESIGN.md §8) ----------------------------------------------------------
    def _regions(self) -> np.ndarray:
        """int64 ``(R, 2)``: first byte and end byte of each long-word region, ascending."""
        g = self.sess.gpu
        if self.long_errors or self.nreg > self.reg_cap:
            raise GPUOperationError(
                f"encoding a slice of {self.n} bytes: the long-word path reported "
                f"{self.long_errors} errors ({self.nreg} regions, room for {self.reg_cap}) on "
                f"{g.adapter_name}")
        if self.nreg <= _REG_INLINE:
            flat = self.reg_inline[: 2 * self.nreg]
        else:
            flat = g.read_u32(self.meta, _META_HEAD, 2 * self.nreg,
                              what="long-word regions readback")
        reg = flat.astype(np.int64).reshape(-1, 2)
        if not ((reg[:, 0] < reg[:, 1]) & (reg[:, 1] <= self.n)).all():
            raise GPUOperationError(
                f"encoding a slice of {self.n} bytes: invalid long-word regions on "
                f"{g.adapter_name}")
        return reg[np.argsort(reg[:, 0], kind="stable")]

    def _ensure_long(self, positions: int, nreg: int) -> None:
        """Buffers of the long-word passes for ``positions`` long indices and ``nreg`` regions
        (grown ×1.5, at most ``sess.long_cap`` positions), and their bind groups."""
        s = self.sess
        g, U = s.gpu, s.gpu.wgpu.BufferUsage
        lab = f"encode[{self.idx}].long"
        if positions > self.cap_long or nreg > self.cap_lreg:
            self.cap_long = min(max(positions, int(self.cap_long * 1.5), 1 << 16), s.long_cap)
            self.cap_lreg = max(nreg, int(self.cap_lreg * 1.5), 64)
            nodes = self.cap_long // s.lc * s.ldw
            self.llen = g.buffer(4 * self.cap_long, U.STORAGE, f"{lab}.len")
            self.lexit = g.buffer(4 * self.cap_long, U.STORAGE, f"{lab}.exit")
            self.lptr = [g.buffer(4 * nodes, U.STORAGE, f"{lab}.ptr{k}") for k in (0, 1)]
            self.lmark = g.buffer(4 * nodes, U.STORAGE, f"{lab}.mark")
            self.ltab = g.buffer(16 * self.cap_lreg, U.STORAGE | U.COPY_DST, f"{lab}.regions")
            self.lparams = g.buffer(32, U.UNIFORM | U.COPY_DST, f"{lab}.params")
            self.lbg = None
        if self.lbg is not None:
            return
        b = {0: self.text, 2: s.nodes, 3: s.edges, 4: self.scratch, 5: self.counts, 7: self.meta,
             24: self.ltab, 25: self.lparams, 26: self.llen, 27: self.lexit, 28: self.lptr[0],
             29: self.lptr[1], 30: self.lmark}

        def bg(name, uses, **swap):
            return g.bind_group(s.pipes[name], {k: swap.get(f"b{k}", b[k]) for k in uses},
                                label=f"{lab}.{name}")

        self.lbg = {
            "lperiods": bg("lperiods", (0, 24, 25, 26)),
            "lmatch": bg("lmatch", (0, 2, 3, 4, 24, 25, 26)),
            "lexits": bg("lexits", (4, 24, 25, 26, 27, 28, 30)),
            "ljump": [bg("ljump", (25, 28, 29, 30)),
                      bg("ljump", (25, 28, 29, 30), b28=self.lptr[1], b29=self.lptr[0])],
            "lemit": bg("lemit", (4, 5, 7, 24, 25, 26, 30)),
        }

    def _encode_long_words(self) -> tuple[int, np.ndarray]:
        """Encode the slice's long-word regions in parallel (wgsl/encode.wgsl, long_periods →
        long_match →
        long_exits → ceil(log2(tiles)) × long_jump → long_emit), then the prefix sum and the
        compaction; one submit per group of regions that fits ``sess.long_cap`` (one group unless
        the slice is near the binding limit). Returns ``(total, doc_tok)`` as ``_read_meta``."""
        s, g = self.sess, self.sess.gpu
        reg = self._regions()
        tiles = -(-(reg[:, 1] - reg[:, 0]) // s.lc)
        if int(tiles.max()) * s.lc > s.long_cap:  # a region is at most a slice (limit + lc)
            raise RuntimeError(f"long-word region of {int(tiles.max()) * s.lc} B above the "
                               f"group capacity {s.long_cap} B")
        groups, a, acc = [], 0, 0
        for i, t in enumerate(tiles.tolist()):
            if acc and acc + t * s.lc > s.long_cap:
                groups.append((a, i))
                a, acc = i, 0
            acc += t * s.lc
        groups.append((a, len(tiles)))
        s.long_regions += len(reg)
        for gi, (a, b) in enumerate(groups):
            tl = tiles[a:b]
            ntiles = int(tl.sum())
            tab = np.zeros((b - a, 4), np.uint32)
            tab[:, 0], tab[:, 1] = reg[a:b, 0], reg[a:b, 1]
            tab[:, 2] = np.cumsum(tl) - tl
            rounds = int(tl.max() - 1).bit_length()  # 2^rounds >= tiles of the longest region
            self._ensure_long(ntiles * s.lc, b - a)
            q = g.device.queue
            q.write_buffer(self.ltab, 0, tab)
            q.write_buffer(self.lparams, 0, np.array(
                [self.n, b - a, ntiles, ntiles * s.ldw, 0, 0, 0, 0], np.uint32))
            if gi == len(groups) - 1:
                self._write_params(resume=2)  # the compaction after the last group runs
            enc = g.device.create_command_encoder(label=f"encode[{self.idx}].long_words")
            cp = enc.begin_compute_pass(label="long_words")
            s.dispatch(cp, "lperiods", self.lbg["lperiods"], g.grid(-(-ntiles // WG)))
            s.dispatch(cp, "lmatch", self.lbg["lmatch"], g.grid(-(-ntiles * s.lc // WG)))
            s.dispatch(cp, "lexits", self.lbg["lexits"], g.grid(-(-ntiles // WG)))
            for r in range(rounds):
                s.dispatch(cp, "ljump", self.lbg["ljump"][r % 2],
                           g.grid(-(-ntiles * s.ldw // WG)))
            s.dispatch(cp, "lemit", self.lbg["lemit"], g.grid(-(-ntiles // WG)))
            cp.end()
            if gi == len(groups) - 1:
                self._record_passes(enc, first=False, continuations=0, scan=True)
            q.submit([enc.finish()])
            s.long_submits += 1
            s.long_dispatches += 4 + rounds
        self.meta_promise = self.rb_meta.map_async(_wi.map_read_mode(), 0,
                                                   _DOC_OFF + 4 * self.ndocs)
        total, _, doc_tok = self._read_meta()
        if self.long_errors:
            raise GPUOperationError(
                f"encoding a slice of {self.n} bytes: {self.long_errors} long-word tiles found "
                f"no token chain on {g.adapter_name}")
        return total, doc_tok

    def _specials_bind_group(self):
        if self.sp_bg is None:
            s, g = self.sess, self.sess.gpu
            U = g.wgpu.BufferUsage
            lab = f"encode[{self.idx}].specials"
            self.sp_dst = g.buffer(self.sp_bytes, U.STORAGE | U.COPY_SRC, f"{lab}.dst")
            self.sp_seg = g.buffer(4 * (self.cap_docs + 1), U.STORAGE | U.COPY_DST, f"{lab}.seg")
            self.sp_params = g.buffer(16, U.UNIFORM | U.COPY_DST, f"{lab}.params")
            self.sp_bg = g.bind_group(s.specials_pipeline(), {
                0: self.out, 1: self.sp_dst, 2: self.sp_seg, 3: self.sp_params}, label=lab)
        return self.sp_bg

    def finish(self, specials: tuple[int, int] | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Wait for the slice; continue out-of-budget walks; read the ids.

        ``specials``: ``(bos, eos)`` ids (``_NO_TOKEN`` for none) that the GPU puts before /
        after every document of the slice while reading back (wgsl/specials.wgsl).

        Returns:
            ``(ids, doc_tok, seg)``: ids (id dtype, shape ``(total,)``, with the specials);
            per document of the slice, 1 + the index of its first token (0 for an empty
            document; without specials); with specials, ``seg`` (int64, ``ndocs + 1``): each
            document's first position in ``ids`` (its offsets, specials included), else None.
        """
        self.submit_readback(specials)
        return self.read_ids()

    def submit_readback(self, specials: tuple[int, int] | None = None) -> None:
        """:meth:`finish` up to the copy of the ids into the readback buffer, which is submitted
        but not waited for (:meth:`read_ids` does that): waits for the slice's token count,
        continues out-of-budget walks and long words."""
        g = self.sess.gpu
        total, unfinished, doc_tok = self._read_meta()
        k, dispatches = 1, 0
        while unfinished:  # a word longer than the per-thread budget: continue (rare)
            # Each dispatch emits >= 1 token per unfinished walk (merge order: takes >= 1 step
            # of at most max_depth per walk, so allow that many times more).
            if dispatches > (self.n + 8) * self.sess.progress_factor:
                raise GPUOperationError(
                    f"encoding a slice of {self.n} bytes made no progress after {dispatches} "
                    f"continuation dispatches on {g.adapter_name}")
            dispatches += k
            self.sess.continuation_dispatches += k
            # Dispatch only the blocks that still walk: a grid over the whole slice would make
            # a run of MBs of one character quadratic (issue 7: time must grow linearly).
            lo, hi = self.cont_blocks
            if not 0 <= lo < hi <= self.nb:
                raise GPUOperationError(
                    f"encoding a slice of {self.n} bytes: {unfinished} unfinished walks in an "
                    f"invalid block range [{lo}, {hi}) of {self.nb} on {g.adapter_name}")
            self.sess.continuation_workgroups += k * (hi - lo)
            self._write_params(resume=1, block_base=lo)
            enc = g.device.create_command_encoder(label=f"encode[{self.idx}].continue")
            self._record_passes(enc, first=False, continuations=k, cont_blocks=hi - lo,
                                scan=False)
            g.device.queue.submit([enc.finish()])
            self.meta_promise = self.rb_meta.map_async(_wi.map_read_mode(), 0,
                                                       _DOC_OFF + 4 * self.ndocs)
            _, unfinished, _ = self._read_meta()
            k = min(2 * k, MAX_CONTINUATIONS_PER_SUBMIT)
            if not unfinished and not self.nreg:  # every walk done: prefix sum + compaction
                enc = g.device.create_command_encoder(label=f"encode[{self.idx}].compact")
                self._record_passes(enc, first=False, continuations=0, scan=True)
                g.device.queue.submit([enc.finish()])
                self.meta_promise = self.rb_meta.map_async(_wi.map_read_mode(), 0,
                                                           _DOC_OFF + 4 * self.ndocs)
                total, unfinished, doc_tok = self._read_meta()
        if self.nreg:  # long words: the parallel path, then prefix sum + compaction
            total, doc_tok = self._encode_long_words()
        seg, src, n_out = None, self.out, total
        enc = g.device.create_command_encoder(label=f"encode[{self.idx}].readback")
        if specials is not None and self.ndocs:
            k = int(specials[0] != _NO_TOKEN) + int(specials[1] != _NO_TOKEN)
            seg = Tokenizer._doc_offsets(doc_tok.astype(np.int64) - 1, total)
            seg += np.arange(self.ndocs + 1, dtype=np.int64) * k
            n_out = int(seg[-1])
            bg = self._specials_bind_group()
            q = g.device.queue
            q.write_buffer(self.sp_seg, 0, seg.astype(np.uint32))
            q.write_buffer(self.sp_params, 0, np.array(
                [n_out, self.ndocs, specials[0], specials[1]], np.uint32))
            words = -(-n_out // 2) if self.sess.id_size == 2 else n_out
            cp = enc.begin_compute_pass(label=f"encode[{self.idx}].specials")
            cp.set_pipeline(self.sess.specials_pipeline())
            cp.set_bind_group(0, bg)
            cp.dispatch_workgroups(*g.grid(-(-words // WG)))
            cp.end()
            src = self.sp_dst
        nbytes = (n_out * self.sess.id_size + 3) // 4 * 4
        self._readback = (n_out, nbytes, total, doc_tok, seg, specials)
        if nbytes == 0:
            return
        enc.copy_buffer_to_buffer(src, 0, self.rb_tok, 0, nbytes)
        g.device.queue.submit([enc.finish()])
        self.tok_promise = self.rb_tok.map_async(_wi.map_read_mode(), 0, (nbytes + 7) // 8 * 8)

    def read_ids(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Wait for the readback that :meth:`submit_readback` queued; returns what
        :meth:`finish` returns. Interrupted (an exception while it waits or copies), it can be
        called again: the readback stays queued, the buffer mapped, until the copy succeeded
        (:meth:`_settle` unmaps it before the slot's next submit)."""
        g = self.sess.gpu
        n_out, nbytes, total, doc_tok, seg, specials = self._readback
        if nbytes == 0:
            self._readback = None
            return np.zeros(0, self.sess.id_dtype), doc_tok, seg
        hs, t = self.sess.host_seconds, time.perf_counter()
        if self.tok_promise is not None:  # None: waited for already by an interrupted call
            g.wait_promise(self.tok_promise, "token readback")
            self.tok_promise = None
        t1 = time.perf_counter()
        hs["wait_ids"] += t1 - t
        ids = np.empty(n_out, self.sess.id_dtype)
        view = src = None
        try:
            # The mapped range itself (no intermediate copy), copied once into ``ids`` by
            # several threads: one thread reads mapped memory at only 3–4 GB/s on the H200.
            view = self.rb_tok.read_mapped(0, nbytes, copy=False)
            src = np.frombuffer(view, self.sess.id_dtype, n_out)
            parallel_copy(ids, src)
        finally:
            view = src = None  # no reference into the mapping may outlive it
            hs["ids_copy"] += time.perf_counter() - t1
        self._readback = None
        self.rb_tok.unmap()
        if self.sess.bpe is not None and self.bad_tokens and int(ids.max()) >= self.sess.num_tokens:
            bad = ids >= self.sess.num_tokens
            if seg is not None:  # the specials put in are not the encoder's ids
                bad &= (ids != specials[0]) & (ids != specials[1])
            if bad.any():
                raise GPUOperationError(
                    f"merge-order encoding of a slice of {self.n} bytes found no valid token "
                    f"sequence for a word (id {int(ids[bad].max())}): the vocab breaks the "
                    "assumptions of torch_gpubpe.core.bpe_tables (please report it)")
        return ids, doc_tok, seg


_shader_override = None  # test hook: flags -> encode.wgsl source (e.g. POISON_WORKGROUP builds)


class _Session:
    """Device-side state of one :class:`Tokenizer`: trie buffers, pipelines, two slots."""

    def __init__(self, trie: Trie, id_size: int, chunk: int, max_slice_bytes: int | None,
                 budget: int, profile: bool, pre_tokenizer: str = "bytes-classes",
                 long_word_bytes: int | None = DEFAULT_LONG_WORD, bpe=None,
                 num_tokens: int = 0, bpe_work: bool = False) -> None:
        from torch_gpubpe.gpu.device import get_gpu

        t_open = time.perf_counter()
        self.gpu = g = get_gpu()
        # Seconds of this session's opening (Tokenizer.open_seconds; the CLI's --debug line)
        self.open_seconds = {"gpu": time.perf_counter() - t_open}
        t_open = time.perf_counter()
        U = g.wgpu.BufferUsage
        self.trie = trie
        self.id_size = id_size
        self.id_dtype = np.uint16 if id_size == 2 else np.uint32
        self.chunk = chunk
        self.block = WG * chunk
        # A walk needs max_depth extension steps + 1 emit to make progress in one dispatch.
        self.budget = max(budget, trie.max_depth + 2)
        self.bpe, self.num_tokens = bpe, num_tokens
        self.progress_factor = 1
        self.chunked_bindings = (0, 1, 2, 3, 4, 5, 6, 7, 8)
        if self.budget > 65535 - chunk - 64:
            raise ValueError(
                f"the vocab's longest token ({trie.max_depth} bytes) needs more walk steps per "
                "thread than lavapipe's 65,535-iteration loop cap allows")
        self.profile = bool(profile) and g.has_timestamps
        self.profile_repeat = 1  # benchmarks: times each slice's passes are run (see Slot.start)
        self.last_pass_us: dict[str, float] = {}
        self.rep_pass_us: list[dict[str, float]] = []  # every repetition's last_pass_us
        # Host seconds per step of a batch (Tokenizer.host_seconds; the CLI's --debug line)
        self.host_seconds = dict.fromkeys(HOST_STEPS, 0.0)
        self.continuation_dispatches = 0  # statistics (tests, benchmarks)
        self.continuation_workgroups = 0
        self.slices = 0
        self.staged_ahead = 0  # batches staged before the oldest in flight was read back
        self.long_regions = 0  # long-word regions encoded in parallel
        self.long_submits = 0
        self.long_dispatches = 0
        self.poison = None  # test hook: (pipeline, bind group, grid) dispatched before each pass
        # Long words: tiles of lc >= max_depth bytes (a power of two, ~4 tokens of the longest
        # kind), windows of ldw = max_depth nodes per tile.
        md = trie.max_depth
        self.ldw = md
        self.lc = min(max(64, 1 << (8 * md - 1).bit_length()), max(MAX_LONG_TILE, md))
        self.long_from = 0 if long_word_bytes is None else max(int(long_word_bytes), chunk)
        if self.long_from and md > MAX_LONG_TILE:
            from torch_gpubpe.gpu.device import _warn_once

            _warn_once("long_words", f"torch_gpubpe: the vocab's longest token ({md} bytes) is "
                       f"above {MAX_LONG_TILE} bytes: long words are walked by one GPU thread "
                       "each (slow for MB-long words)")
            self.long_from = 0
        self.ns_per_tick = 1.0
        if self.profile:
            self.ns_per_tick = _wi.timestamp_period_ns(g.device.queue)
        # Scratch and out are 4 B per input byte: they bound the slice (DESIGN.md §6), with room
        # for one long-word tile more (llen, lexit: 4 B per byte of the regions, padded to whole
        # tiles). Byte positions stay below 2^31, so no u32 position or size in WGSL overflows;
        # larger inputs are sliced.
        binding = min(g.max_storage_binding, g.max_buffer_size)
        limit = min((binding - 1024 - 4 * self.lc) // 4, MAX_SLICE_POSITIONS)
        if max_slice_bytes is not None:
            limit = min(limit, int(max_slice_bytes))
        limit = max(limit, 2 * trie.max_depth + 8, 64)
        self.limit = limit // 4 * 4
        self.long_cap = self.limit + self.lc  # long indices per group of regions (one submit)
        # doc_starts / doc_tok hold 4 B per document of a slice: bound the documents too (a
        # batch of millions of empty documents has few bytes but would exceed the binding).
        self.max_docs = (g.binding_bytes(4) - 1024) // 4
        self.nodes = g.buffer(trie.nodes.nbytes, U.STORAGE | U.COPY_DST, "encode.trie_nodes")
        self.edges = g.buffer(trie.edges.nbytes, U.STORAGE | U.COPY_DST, "encode.trie_edges")
        with g.operation("uploading the trie"):
            g.device.queue.write_buffer(self.nodes, 0, trie.nodes)
            g.device.queue.write_buffer(self.edges, 0, trie.edges)
        self.open_seconds["trie_upload"] = time.perf_counter() - t_open
        t_open = time.perf_counter()
        consts = {"WG": WG, "CHUNK": chunk, "OUT16": int(id_size == 2), "LC": self.lc,
                  "LDW": self.ldw}
        from torch_gpubpe.gpu.shaders import shader_source

        def source(flags):  # None: the default build (cached under the shader's name)
            if _shader_override is not None:
                return _shader_override(flags)
            return None if flags == g.flags else shader_source("encode", flags)

        self.pretok = None
        self.walk_sub = 1  # walk workgroups per block (merge-order mode: encoder_bpe.WALK_WG64)
        self.bpe_bind: dict = {}
        self.bpe_bits_pipeline = None  # merge-order mode's WORD_BITS pass (encoder_bpe)
        walk_flags = g.flags
        if pre_tokenizer != "bytes-classes":  # a regex split (torch_gpubpe.encoding.regex_pretok)
            from torch_gpubpe.encoding.regex_pretok import UnicodePreTokenizer

            self.pretok = UnicodePreTokenizer(pre_tokenizer, gpu=g)
            walk_flags = g.flags | {"WORD_MASK"}
        self.open_seconds["pre_tokenizer"] = time.perf_counter() - t_open
        t_open = time.perf_counter()
        if bpe is not None:  # merge-order mode: its own walk (torch_gpubpe.encoding.merge_walk)
            from torch_gpubpe.encoding.merge_walk import bpe_session_setup

            self.long_from = 0  # the parallel long-word path is greedy longest match
            bpe_session_setup(self, g, trie, chunk, budget, work=bpe_work)
        self.open_seconds["bpe_tables"] = time.perf_counter() - t_open
        t_open = time.perf_counter()
        kw = {"constants": consts, "source": source(g.flags)}
        self.pipes = {
            "chunked": (g.pipeline("encode", "trie_tokenizer_chunked", constants=consts,
                                   source=source(walk_flags)) if bpe is None
                        else self.bpe_pipeline),
            "prefix": g.pipeline("encode", "trie_prefix_sum", **kw),
            "compact": g.pipeline("encode", "trie_tokenizer_compact", **kw),
        }
        if self.bpe_bits_pipeline is not None:
            self.pipes["wbits"] = self.bpe_bits_pipeline
        if self.long_from:
            for name, entry in (("ends", "long_word_ends"), ("lperiods", "long_periods"),
                                ("lmatch", "long_match"),
                                ("lexits", "long_exits"), ("ljump", "long_jump"),
                                ("lemit", "long_emit")):
                self.pipes[name] = g.pipeline("encode", entry, **kw)
        self.open_seconds["pipelines"] = time.perf_counter() - t_open
        t_open = time.perf_counter()
        self.slots = [_Slot(self, 0), _Slot(self, 1)]
        self.open_seconds["slots"] = time.perf_counter() - t_open

    def specials_pipeline(self):
        """wgsl/specials.wgsl's pipeline (compiled on first use, cached by the GPU object)."""
        return self.gpu.pipeline("specials", "insert_specials",
                                 constants={"WG": WG, "OUT16": int(self.id_size == 2)})

    def dispatch(self, cp, name: str, bind_group, grid: tuple[int, int]) -> None:
        """Record one dispatch of pipeline ``name`` (after the test hook ``poison``'s, if set)."""
        if self.poison is not None:
            pipe, pbg, pgrid = self.poison
            cp.set_pipeline(pipe)
            cp.set_bind_group(0, pbg)
            cp.dispatch_workgroups(*pgrid)
        cp.set_pipeline(self.pipes[name])
        cp.set_bind_group(0, bind_group)
        cp.dispatch_workgroups(*grid)


class PendingEncoding:
    """A batch submitted with :meth:`Tokenizer.submit`; :meth:`result` waits and reads back."""

    def __init__(self, tok: Tokenizer, specials: tuple[int, int] | None = None) -> None:
        self._tok = tok
        self._result: BatchEncoding | None = None
        self._slot: _Slot | None = None
        self._specials = specials
        self._readback_queued = False  # the slot's submit_readback ran (see Tokenizer)
        self._error: Exception | None = None  # raised by result(): its readback failed early

    def done(self) -> bool:
        """Whether the result has been read back already."""
        return self._result is not None

    def result(self) -> BatchEncoding:
        """Wait (bounded by ``TORCH_GPUBPE_TIMEOUT``) and return the :class:`BatchEncoding`.

        Raises:
            GPUOperationError: the GPU did not answer in time or a readback failed.
        """
        return self._result if self._result is not None else self._tok._complete(self)


class Tokenizer:
    """Greedy longest-match BPE encoder on the GPU, exact w.r.t. ``reference.encode``
    (DESIGN.md §4), with a persistent GPU session opened on the first encode.

    Args:
        vocab: the :class:`~torch_gpubpe.core.vocab.Vocab`, or the path of a ``vocab.json`` (or of
            the folder ``python -m torch_gpubpe train --out`` wrote). Special tokens are emitted
            only where :meth:`encode`'s ``allowed_special`` asks.
        chunk_bytes: bytes each GPU thread starts words in (multiple of 4, 4..1024).
        max_slice_bytes: cap on bytes per GPU pass (default: what the storage-binding limit
            allows, 1/4 of it); a batch above it is sliced at word starts.
        thread_budget: walk steps per GPU thread per dispatch (default 32,768; raised to the
            longest token + 2); a word that needs more continues in further dispatches with the
            same result. For tests.
        long_word_bytes: a word whose walk gets this many bytes past the walking thread's
            chunk (default 2,048; at least ``chunk_bytes``) is finished by the parallel
            long-word path (every byte's longest match at once, the token chain marked by
            pointer jumping: same ids). ``None`` walks every word with one thread (slow for
            MB-long words; for tests and comparisons).
        profile: record per-pass GPU times (µs) in :attr:`last_pass_us` (timestamp queries).
        pre_tokenizer: how text is split into words: ``"bytes-classes"`` (DESIGN.md §2, the
            default) or a regex family of :mod:`torch_gpubpe.core.patterns` (``"gpt2"``,
            ``"cl100k"``, ``"qwen2"``, ``"o200k"`` or their ``pat_str``), split exactly on the GPU
            (:mod:`torch_gpubpe.encoding.regex_pretok`).
        mode: ``"greedy"`` (longest match, DESIGN.md §4) or ``"bpe"`` (exact merge-order BPE,
            ids identical to tiktoken's ``encode_ordinary`` over the same words; the
            backtracking walk of ``wgsl/encode_bpe.wgsl``, tables in :mod:`torch_gpubpe.core.bpe_tables`);
            default: the vocab's ``mode`` (``"bpe"`` for tiktoken / Hugging Face vocabularies).
    Attributes:
        n_vocab: number of ids, special tokens included (tiktoken's ``n_vocab``; = ``len(vocab)``).
    Raises:
        ValueError: bad ``chunk_bytes``, ``thread_budget``, ``long_word_bytes`` or ``mode``,
            or a vocab that merge-order mode does not support
            (:func:`torch_gpubpe.core.bpe_tables.bpe_tables`).
        InputError: a ``pre_tokenizer`` the GPU cannot split exactly (named).
        VocabFormatError, OSError: ``vocab`` is a path that does not hold a vocab file.
    """

    def __init__(self, vocab: Vocab | str | os.PathLike, *, chunk_bytes: int = DEFAULT_CHUNK,
                 max_slice_bytes: int | None = None, thread_budget: int | None = None,
                 profile: bool = False, pre_tokenizer: str = "bytes-classes",
                 long_word_bytes: int | None = DEFAULT_LONG_WORD,
                 mode: str | None = None) -> None:
        from torch_gpubpe.core.patterns import resolve

        if isinstance(vocab, (str, os.PathLike)):
            vocab = Vocab.load(vocab)
        if not isinstance(vocab, Vocab):
            raise TypeError(f"vocab must be a torch_gpubpe.Vocab or the path of a vocab file, "
                            f"got {type(vocab).__name__}")
        if chunk_bytes % 4 or not 4 <= chunk_bytes <= 1024:
            raise ValueError(f"chunk_bytes must be a multiple of 4 in 4..1024, got {chunk_bytes}")
        budget = DEFAULT_BUDGET if thread_budget is None else int(thread_budget)
        if not 1 <= budget <= 65535 - chunk_bytes - 64:
            raise ValueError(f"thread_budget must be in 1..{65535 - chunk_bytes - 64} "
                             f"(lavapipe stops loops at 65,535 iterations), got {budget}")
        self.mode = vocab.mode if mode is None else mode
        if self.mode not in ("greedy", "bpe"):
            raise ValueError(f"mode must be 'greedy' or 'bpe', got {mode!r}")
        self._bpe = None
        if self.mode == "bpe":
            from torch_gpubpe.core.bpe_tables import bpe_tables

            self._bpe = bpe_tables(vocab)
        self.vocab = vocab
        self.n_vocab = len(vocab)
        self.id_dtype = np.uint16 if len(vocab) <= 1 << 16 else np.uint32
        self._chunk, self._max_slice, self._budget = chunk_bytes, max_slice_bytes, budget
        self._profile = profile
        self.pre_tokenizer = resolve(pre_tokenizer)
        if long_word_bytes is not None and (not isinstance(long_word_bytes, int)
                                            or isinstance(long_word_bytes, bool)
                                            or long_word_bytes < 1):
            raise ValueError(f"long_word_bytes must be a positive int or None, got "
                             f"{long_word_bytes!r}")
        self._long_word = long_word_bytes
        self._trie: Trie | None = None
        self._sess: _Session | None = None
        self._sess_pid: int | None = None
        self._inflight: deque[PendingEncoding] = deque()
        self._lock = threading.RLock()  # one GPU session; callers may share it across threads
        tb = vocab.token_bytes
        self._tok_len = np.fromiter(map(len, tb), np.int64, len(tb))
        self._flat_bytes: np.ndarray | None = None

    def __getstate__(self) -> dict:
        """Pickles without the GPU session (e.g. to a spawned DataLoader worker), which opens
        its own on first use (DESIGN.md §6, §8)."""
        state = self.__dict__.copy()
        state.update(_sess=None, _sess_pid=None, _inflight=deque(), _lock=None, _trie=None)
        return state

    def __setstate__(self, state: dict) -> None:
        state.setdefault("_long_word", DEFAULT_LONG_WORD)
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def open(self) -> Tokenizer:
        """Open the GPU session now (adapter, device, pipelines, trie upload) instead of on the
        first non-empty encode — e.g. on another thread while the first batch is being read.
        Thread-safe; returns ``self``.

        Raises:
            NoAdapterError: no GPU adapter; GPUOperationError: the device failed.
        """
        with self._lock:
            self._session()
        return self

    def close(self) -> None:
        """Finish the batches in flight and drop this Tokenizer's GPU buffers now (not when it
        is garbage-collected). The process's device stays open, shared by every Tokenizer and
        the trainer; a later encode opens a new session. Also ``with Tokenizer(v) as tok:``."""
        with self._lock:
            try:
                while self._inflight:
                    self._inflight[0].result()
            finally:
                self._inflight.clear()
                self._sess = None
                self._sess_pid = None

    def __enter__(self) -> Tokenizer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @classmethod
    def from_file(cls, path: str | os.PathLike, **kwargs) -> Tokenizer:
        """``Tokenizer(Vocab.load(path), **kwargs)``; raises ``VocabFormatError``/``OSError``."""
        return cls(Vocab.load(path), **kwargs)

    @classmethod
    def from_tiktoken(cls, path: str | os.PathLike, *, pattern: str | None = None,
                      **kwargs) -> Tokenizer:
        """A model's tokenizer from its tiktoken file: merge-order ranks
        (:func:`torch_gpubpe.core.vocab_files.load_tiktoken`) and its split, ``pattern`` or else the
        sidecar's (``path + ".json"``: ``"pattern"``), done exactly on the GPU.

        Example: ``Tokenizer.from_tiktoken("gpt2.tiktoken", pattern="gpt2")`` gives
        tiktoken's ``encode_ordinary`` ids for GPT-2.

        Raises:
            InputError: no pattern given nor in a sidecar, or one the GPU cannot split exactly.
            VocabFormatError, OSError: see :func:`~torch_gpubpe.core.vocab_files.load_tiktoken`.
        """
        from torch_gpubpe.core.vocab_files import load_tiktoken, tiktoken_metadata

        vocab = load_tiktoken(path)  # first: a missing file is named as such (OSError)
        if pattern is None:
            pattern = tiktoken_metadata(path).get("pattern")
            if pattern is None:
                raise InputError(f"{path}: no split pattern (no sidecar {path}.json with "
                                 "\"pattern\"); pass pattern='gpt2', 'cl100k', 'qwen2', "
                                 "'o200k' or a pat_str, or 'bytes-classes' for a file that "
                                 "`train --out` wrote (this project's split, DESIGN.md §2)")
        return cls(vocab, pre_tokenizer=pattern, **kwargs)

    @classmethod
    def from_hf(cls, path: str | os.PathLike, *, pattern: str | None = None,
                **kwargs) -> Tokenizer:
        """A model's tokenizer from its Hugging Face ``tokenizer.json`` (byte-level BPE,
        :func:`torch_gpubpe.core.vocab_files.vocab_from_hf_dict`) with the split its pre-tokenizer
        implies (:func:`torch_gpubpe.core.patterns.from_hf_pre_tokenizer`), or ``pattern``.

        Raises:
            InputError: a pre-tokenizer (or ``pattern``) the GPU cannot split exactly.
            VocabFormatError, OSError: the file is not a supported ``tokenizer.json``.
        """
        import json

        from torch_gpubpe.core.patterns import from_hf_pre_tokenizer

        if os.path.isdir(path):
            path = os.path.join(path, "tokenizer.json")
        vocab = Vocab.load(path)
        if pattern is None:
            with open(path, encoding="utf-8") as f:
                pattern = from_hf_pre_tokenizer(json.load(f).get("pre_tokenizer"))
        return cls(vocab, pre_tokenizer=pattern, **kwargs)

    @property
    def trie(self) -> Trie:
        """The compiled trie (DESIGN.md §5), built on first use (or loaded from the disk cache
        of :func:`~torch_gpubpe.core.trie.cached_trie`)."""
        if self._trie is None:
            self._trie = cached_trie(self.vocab.token_bytes)
        return self._trie

    @property
    def host_seconds(self) -> dict[str, float]:
        """Host seconds spent per step of the batches so far (:data:`HOST_STEPS`): waiting for
        the upload staging buffer, copying the text into it, writing the document starts,
        recording the passes, queueing the readback of the batch in flight before the next
        batch's submit, submitting, waiting for the ids, copying them out; and
        ``wait_token_count``, waiting for a batch's token count (the GPU finishing its passes):
        inside ``previous_readback_submit`` when the next batch's submit queues the readback,
        else inside ``result()`` (the last batch). Empty before the first batch."""
        return dict(self._sess.host_seconds) if self._sess else {}

    @property
    def open_seconds(self) -> dict[str, float]:
        """Host seconds the GPU session's opening took, per step: ``gpu`` (waiting for the
        process's device), ``trie_upload``, ``pre_tokenizer`` (a regex split's tables and
        pipeline), ``bpe_tables`` (merge-order mode's tables and walk pipeline), ``pipelines``
        (the walk, prefix-sum, compaction and long-word pipelines), ``slots`` (the two batch
        slots). Empty before the session opens."""
        return dict(self._sess.open_seconds) if self._sess else {}

    @property
    def last_pass_us(self) -> dict[str, float]:
        """GPU time per pass (µs) of the last slice, when ``profile=True`` and supported."""
        return dict(self._sess.last_pass_us) if self._sess else {}

    def _session(self) -> _Session:
        if self._sess is None or self._sess_pid != os.getpid() or self._sess.gpu.lost:
            self._inflight.clear()
            self._sess = None
            args = (self.trie, np.dtype(self.id_dtype).itemsize, self._chunk, self._max_slice,
                    self._budget, self._profile, self.pre_tokenizer)
            kw = {"long_word_bytes": self._long_word, "bpe": self._bpe,
                  "num_tokens": self.vocab.num_tokens,
                  "bpe_work": getattr(self, "_bpe_work", False)}
            try:
                sess = _Session(*args, **kw)
            except GPUOperationError:
                from torch_gpubpe.gpu import device as gpumod

                if gpumod._gpu is None or not gpumod._gpu.lost:
                    raise
                # The device was lost before this call (nothing of ours in flight): open a
                # fresh one once rather than fail this call too.
                sess = _Session(*args, **kw)
            self._sess = sess
            self._sess_pid = os.getpid()
        return self._sess

    # -- encoding ------------------------------------------------------------------------
    def encode(self, text: str | bytes, *, allowed_special: SpecialSet = (),
               disallowed_special: SpecialSet = ()) -> list[int]:
        """Token ids of one document (DESIGN.md §4); ``str`` is UTF-8 encoded first (lone
        surrogates replaced), ``bytes`` may be any bytes.

        Special tokens, with tiktoken's argument names (``tiktoken.Encoding.encode``):

        * default (``allowed_special=()``, ``disallowed_special=()``): a special token's
          spelling in ``text`` is ordinary text and never gives a special id (DESIGN.md §1).
          **This default differs from tiktoken's**, whose ``disallowed_special="all"`` raises
          when the text spells a special token; pass ``disallowed_special="all"`` to get that.
        * ``allowed_special``: a set of special-token spellings, or ``"all"``: those spellings
          in ``text`` become their special ids; the text between them is encoded as separate
          pieces (as tiktoken does: a word never spans a special token).
        * ``disallowed_special``: a set, or ``"all"`` (every special token not allowed): a
          spelling of one of them in ``text`` raises :class:`InputError`.

        Returns:
            ``list[int]``.
        Raises:
            InputError: ``text`` is neither ``str`` nor bytes-like; a name in the two sets is
                not a special token of the vocab; ``text`` spells a disallowed special token
                (names it and its position).
        """
        return self.encode_to_numpy(text, allowed_special=allowed_special,
                                    disallowed_special=disallowed_special).tolist()

    def encode_ordinary(self, text: str | bytes) -> list[int]:
        """Token ids of ``text`` with special spellings taken as text (tiktoken's
        ``encode_ordinary``; here the same as :meth:`encode` with its defaults)."""
        return self.encode_to_numpy(text).tolist()

    def encode_to_numpy(self, text: str | bytes, *, allowed_special: SpecialSet = (),
                        disallowed_special: SpecialSet = ()) -> np.ndarray:
        """:meth:`encode` as a 1-D array of :attr:`id_dtype`."""
        if not isinstance(text, (str, bytes, bytearray, memoryview)):
            raise InputError(f"text must be str or bytes, got {type(text).__name__}")
        return self.encode_batch([text], allowed_special=allowed_special,
                                 disallowed_special=disallowed_special).ids

    def encode_batch(self, texts: Sequence[str | bytes], *, allowed_special: SpecialSet = (),
                     disallowed_special: SpecialSet = ()) -> BatchEncoding:
        """Encode many documents with one GPU round trip per slice (not per document).

        Args:
            texts: ``str`` or bytes-like documents; empty documents are allowed (an empty
                batch or one of empty documents never opens the GPU).
            allowed_special, disallowed_special: as in :meth:`encode`, for every document.
        Returns:
            :class:`BatchEncoding` (flat ids + int64 token offsets). Unlike tiktoken's
            ``encode_batch`` (a list of lists) it is a sequence of 1-D arrays; ``.tolist()``
            gives tiktoken's form.
        Raises:
            InputError: an item is neither ``str`` nor bytes-like (names its index), or as in
                :meth:`encode`.
            GPUOperationError: the GPU did not answer in time.
        """
        allowed, disallowed = self._special_sets(allowed_special, disallowed_special)
        if not allowed and not disallowed:
            return self.submit(texts).result()
        return self._encode_with_specials(texts, allowed, disallowed)

    def encode_ordinary_batch(self, texts: Sequence[str | bytes]) -> BatchEncoding:
        """:meth:`encode_batch` with special spellings taken as text (tiktoken's name)."""
        return self.submit(texts).result()

    # -- special tokens (tiktoken's names) ---------------------------------------------------
    @property
    def special_tokens_set(self) -> set[str]:
        """The spellings of the vocab's special tokens (tiktoken's ``special_tokens_set``)."""
        return set(self.vocab.special_tokens)

    @property
    def eot_token(self) -> int:
        """Id of ``<|endoftext|>`` (tiktoken's ``eot_token``).

        Raises:
            KeyError: the vocab has no ``<|endoftext|>`` special token.
        """
        return self.vocab.token_to_id(EOT)

    @property
    def max_token_value(self) -> int:
        """The largest id (``n_vocab - 1``; tiktoken's ``max_token_value``)."""
        return self.n_vocab - 1

    def _special_sets(self, allowed: SpecialSet, disallowed: SpecialSet
                      ) -> tuple[frozenset[str], frozenset[str]]:
        known = frozenset(self.vocab.special_tokens)

        def named(arg, what: str) -> frozenset[str]:
            if isinstance(arg, str):
                if arg == "all":
                    return known
                raise InputError(f"{what} must be 'all' or a set of special tokens, got {arg!r} "
                                 f"(a str; write {{{arg!r}}} for one token)")
            out = frozenset(arg)
            unknown = sorted(out - known)
            if unknown:
                raise InputError(f"{what}: {unknown} are not special tokens of this vocab "
                                 f"(its special tokens: {sorted(known)})")
            return out

        a = named(allowed, "allowed_special")
        d = known - a if isinstance(disallowed, str) and disallowed == "all" else (
            named(disallowed, "disallowed_special") - a)
        return a, d

    def _encode_with_specials(self, texts, allowed: frozenset[str], disallowed: frozenset[str]
                              ) -> BatchEncoding:
        """Split each document at its allowed special spellings, encode the text pieces in one
        batch, and put the special ids between them."""
        import re

        if isinstance(texts, (str, bytes, bytearray, memoryview)):
            raise InputError("encode_batch expects a sequence of documents, not one str/bytes; "
                             "use encode() for one document")
        ids_of = self.vocab.special_token_ids
        order = sorted(allowed, key=lambda t: (-len(t), t))  # longest spelling first
        pat_s = re.compile("|".join(map(re.escape, order))) if order else None
        pat_b = re.compile(b"|".join(re.escape(t.encode()) for t in order)) if order else None
        bad_s = re.compile("|".join(map(re.escape, sorted(disallowed, key=len, reverse=True))))
        bad_b = re.compile(b"|".join(re.escape(t.encode()) for t in sorted(disallowed, key=len,
                                                                           reverse=True)))
        pieces: list = []
        plan: list[list[int]] = []  # per document: >= 0 a special id, -1 the next text piece
        for k, text in enumerate(texts):
            if isinstance(text, (bytearray, memoryview)):
                text = bytes(text)
            if not isinstance(text, (str, bytes)):
                raise InputError(f"document {k}: text must be str or bytes, got "
                                 f"{type(text).__name__}")
            is_str = isinstance(text, str)
            pat, bad = (pat_s, bad_s) if is_str else (pat_b, bad_b)
            steps: list[int] = []
            pos = 0
            for m in (pat.finditer(text) if pat is not None else ()):
                if disallowed:
                    self._refuse(bad, text, pos, m.start(), k)
                if m.start() > pos:
                    pieces.append(text[pos : m.start()])
                    steps.append(-1)
                steps.append(ids_of[m.group() if is_str else m.group().decode()])
                pos = m.end()
            if disallowed:
                self._refuse(bad, text, pos, len(text), k)
            if pos < len(text):
                pieces.append(text[pos:])
                steps.append(-1)
            plan.append(steps)
        be = self.submit(pieces).result()
        out: list[np.ndarray] = []
        offsets = np.zeros(len(plan) + 1, np.int64)
        j = 0
        for k, steps in enumerate(plan):
            n = 0
            for st in steps:
                if st < 0:
                    a = be[j]
                    j += 1
                else:
                    a = np.array([st], self.id_dtype)
                out.append(a)
                n += len(a)
            offsets[k + 1] = offsets[k] + n
        ids = np.concatenate(out) if out else np.zeros(0, self.id_dtype)
        return BatchEncoding(ids.astype(self.id_dtype, copy=False), offsets)

    @staticmethod
    def _refuse(bad, text, lo: int, hi: int, k: int) -> None:
        m = bad.search(text, lo, hi)
        if m is not None:
            is_str = isinstance(text, str)
            tok = m.group() if is_str else m.group().decode()
            raise InputError(
                f"document {k} contains the special token {tok!r} at "
                f"{'character' if is_str else 'byte'} {m.start()}, which disallowed_special "
                f"refuses; pass allowed_special={{{tok!r}}} to encode it as its id, or "
                "disallowed_special=() to encode it as text")

    def submit(self, texts: Sequence[str | bytes], *, bos_id: int | None = None,
               eos_id: int | None = None) -> PendingEncoding:
        """Pack, upload and submit a batch; return at once (at most 2 batches in flight).

        Calling it with two batches pending first completes the oldest (its ``result()`` still
        works). A batch larger than one slice is encoded at once (one submit per slice).

        ``bos_id`` / ``eos_id``: a token id put before / after every document (e.g. llm.c's
        ``<|endoftext|>`` before each document, Megatron's end-of-document after it), by the
        GPU while the ids are read back; the result's offsets then include them.

        Raises:
            InputError: a bad document, or a ``bos_id``/``eos_id`` outside the id range.
        """
        if not isinstance(texts, (list, tuple)):
            texts = list(texts) if not isinstance(texts, (str, bytes, bytearray)) else texts
        data, offsets = _pack(texts, keep_parts=True)
        specials = self._specials_arg(bos_id, eos_id)
        with self._lock:
            return self._submit_packed(data, offsets, specials)

    def encode_batches(self, batches: Iterable[Sequence[str | bytes]], *,
                       bos_id: int | None = None, eos_id: int | None = None
                       ) -> Iterator[BatchEncoding]:
        """Encode a stream of batches (each a sequence of documents, as :meth:`submit` takes),
        yielding one :class:`BatchEncoding` per batch, in order. Two batches are in flight on
        the GPU, as with :meth:`submit`/``result()``, and the next batch is packed (``str`` →
        UTF-8, the part that holds the GIL) on a thread meanwhile, while the main thread waits
        for the GPU or the copies. ``bos_id`` / ``eos_id`` as in :meth:`submit`.

        Raises:
            InputError: a bad document or ``bos_id``/``eos_id`` (when its batch comes up).
        """
        from concurrent.futures import ThreadPoolExecutor

        specials = self._specials_arg(bos_id, eos_id)

        def pack(texts):
            if not isinstance(texts, (list, tuple)):
                texts = list(texts) if not isinstance(texts, (str, bytes, bytearray)) else texts
            return _pack(texts, keep_parts=True, defer=False)   # (transcoded on this thread)

        packs: deque = deque()
        pending: deque[PendingEncoding] = deque()
        with ThreadPoolExecutor(1, thread_name_prefix="torch_gpubpe pack") as ex:
            it = iter(batches)
            while True:
                b = next(it, None)
                if b is not None:
                    packs.append(ex.submit(pack, b))  # packed while the GPU works
                if not packs:
                    break
                if b is not None and len(packs) < 2:
                    continue
                data, offsets = packs.popleft().result()
                with self._lock:
                    pending.append(self._submit_packed(data, offsets, specials))
                if len(pending) == 2:
                    yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def _specials_arg(self, bos_id, eos_id) -> tuple[int, int] | None:
        if bos_id is None and eos_id is None:
            return None
        top = self.n_vocab - 1   # ≤ the output dtype's maximum
        for name, v in (("bos_id", bos_id), ("eos_id", eos_id)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))
                                  or not 0 <= int(v) <= top):
                raise InputError(f"{name} must be a token id of this vocab, 0..{top} "
                                 f"(n_vocab {self.n_vocab}), got {v!r}")
        return (_NO_TOKEN if bos_id is None else int(bos_id),
                _NO_TOKEN if eos_id is None else int(eos_id))

    def submit_packed(self, data: np.ndarray, offsets: np.ndarray, *, bos_id: int | None = None,
                      eos_id: int | None = None) -> PendingEncoding:
        """:meth:`submit` for documents already packed: ``data`` (1-D ``np.uint8``, any bytes)
        and ``offsets`` (``np.int64``, shape ``(num_docs + 1,)``, from 0 to ``len(data)``,
        non-decreasing; document k is ``data[offsets[k]:offsets[k+1]]``). No per-document
        Python objects; the bytes are copied once, into the mapped upload buffer.
        ``bos_id`` / ``eos_id`` as in :meth:`submit`.

        Raises:
            InputError: bad dtypes, shapes or offsets, or a bad ``bos_id``/``eos_id``.
        """
        data = np.asarray(data)
        offsets = np.asarray(offsets)
        if data.dtype != np.uint8 or data.ndim != 1 or offsets.ndim != 1 or len(offsets) < 1 \
                or offsets.dtype.kind not in "iu":
            raise InputError("submit_packed expects 1-D uint8 data and 1-D integer offsets, got "
                             f"{data.dtype}{data.shape} and {offsets.dtype}{offsets.shape}")
        offsets = offsets.astype(np.int64, copy=False)
        if offsets[0] != 0 or offsets[-1] != len(data) or (np.diff(offsets) < 0).any():
            raise InputError(f"offsets must go from 0 to len(data)={len(data)} without "
                             f"decreasing (got {offsets[0]}..{offsets[-1]})")
        specials = self._specials_arg(bos_id, eos_id)
        with self._lock:
            return self._submit_packed(data, offsets, specials)

    def submit_arrow(self, values, *, bos_id: int | None = None,
                     eos_id: int | None = None) -> PendingEncoding:
        """:meth:`submit` for a ``pyarrow`` string/binary array (or chunked array) of
        documents, read zero copy (:func:`torch_gpubpe.io.readers.arrow_to_packed`).

        Raises:
            InputError: a null document (names its index) or a non-text array type.
        """
        from torch_gpubpe.io.readers import arrow_to_packed

        return self.submit_packed(*arrow_to_packed(values), bos_id=bos_id, eos_id=eos_id)

    def encode_arrow(self, values, *, bos_id: int | None = None,
                     eos_id: int | None = None) -> BatchEncoding:
        """:meth:`encode_batch` for a ``pyarrow`` string/binary array (:meth:`submit_arrow`)."""
        return self.submit_arrow(values, bos_id=bos_id, eos_id=eos_id).result()

    def _submit_packed(self, data: np.ndarray | list[bytes], offsets: np.ndarray,
                       specials: tuple[int, int] | None = None) -> PendingEncoding:
        p = PendingEncoding(self, specials)
        total = int(offsets[-1])
        if total == 0:  # before the session: empty input never opens the GPU (issue 17 §3)
            p._result = _add_specials(BatchEncoding(np.zeros(0, self.id_dtype),
                                                    np.zeros(len(offsets), np.int64)), specials)
            return p
        sess = self._session()
        ndocs = len(offsets) - 1
        staged = None
        if len(self._inflight) >= 2 and ndocs <= sess.max_docs and total <= sess.limit \
                and self._inflight[0]._slot.can_stage(total, ndocs):
            # Both slots are in flight: this batch is written into the oldest one's upload
            # buffer first, while the GPU still runs the newest, and the oldest is read back
            # after that. Read back first, the host would wait for the newest batch's passes
            # there (the map of the oldest's ids resolves only in a device poll that waits for
            # every submit, WGPU_NOTES.md §1) with nothing to do.
            staged = self._inflight[0]._slot
            with sess.gpu.operation(f"encoding a batch of {ndocs} documents ({total} bytes): "
                                    "upload"):
                staged.stage(data, 0, total, offsets[:-1].astype(np.uint32), True)
            sess.staged_ahead += 1
        while len(self._inflight) >= 2:
            old = self._inflight[0]
            old.result()  # removes itself from _inflight
        if ndocs > sess.max_docs:  # more documents than one slice can index
            p._result = _add_specials(self._encode_by_documents(data, offsets, sess.max_docs),
                                      specials)
            return p
        # Any wgpu error (validation, lost device) becomes a GPUOperationError naming the step
        # and marks a lost device, so that the next call opens a fresh session (issue 7).
        if total <= sess.limit:
            busy = {q._slot for q in self._inflight}
            p._slot = next(s for s in sess.slots if s not in busy)
            with sess.gpu.operation(f"encoding a batch of {ndocs} documents "
                                    f"({total} bytes): upload and submit"):
                if staged is p._slot:
                    p._slot.launch(before_submit=self._queue_readbacks)
                else:
                    p._slot.start(data, 0, total, offsets[:-1].astype(np.uint32), True,
                                  before_submit=self._queue_readbacks)
            self._inflight.append(p)
        else:
            if isinstance(data, list):
                data = join_parts(data)
            with sess.gpu.operation(f"encoding a batch of {len(offsets) - 1} documents "
                                    f"({total} bytes) in slices of {sess.limit} bytes"):
                p._result = _add_specials(self._encode_sliced(data, offsets), specials)
        return p

    def _encode_by_documents(self, data: np.ndarray | list[bytes], offsets: np.ndarray,
                             max_docs: int) -> BatchEncoding:
        """Encode a batch of more than ``max_docs`` documents as consecutive sub-batches."""
        if isinstance(data, list):
            data = join_parts(data)
        ids, offs, base = [], [np.zeros(1, np.int64)], 0
        for a in range(0, len(offsets) - 1, max_docs):
            b = min(a + max_docs, len(offsets) - 1)
            be = self._submit_packed(data[offsets[a] : offsets[b]],
                                     offsets[a : b + 1] - offsets[a]).result()
            ids.append(be.ids)
            offs.append(be.offsets[1:] + base)
            base += len(be.ids)
        return BatchEncoding(np.concatenate(ids), np.concatenate(offs))

    def _queue_readbacks(self) -> None:
        """Queue the id readback of each batch in flight before the next batch's passes are
        submitted: queued after them (by ``result()``), it would wait for all of them, and the
        GPU would idle while the host copies ids out and stages uploads. An error is kept for
        that batch's ``result()``."""
        for q in self._inflight:
            if q._readback_queued or q._error is not None:
                continue
            try:
                with q._slot.sess.gpu.operation(f"encoding a batch ({q._slot.n} bytes): "
                                                "readback"):
                    q._slot.submit_readback(q._specials)
                q._readback_queued = True
            except Exception as e:  # noqa: BLE001 (re-raised by q.result())
                q._error = e

    def _complete(self, p: PendingEncoding) -> BatchEncoding:
        with self._lock:
            if p._result is not None:  # completed meanwhile by submit() in another thread
                return p._result
            try:
                if p._error is not None:
                    raise p._error
                with p._slot.sess.gpu.operation(f"encoding a batch ({p._slot.n} bytes): "
                                                "readback"):
                    if not p._readback_queued:
                        p._slot.submit_readback(p._specials)
                    p._readback_queued = True
                    ids, doc_tok, seg = p._slot.read_ids()
            except BaseException as e:
                if not isinstance(e, Exception) and p._readback_queued \
                        and p._slot._readback is not None:
                    # Interrupted (KeyboardInterrupt) while waiting for or copying the ids: the
                    # batch keeps its slot, and result() again goes on from there.
                    raise
                if not isinstance(e, Exception):  # interrupted inside its passes' readback
                    err = GPUOperationError(
                        f"the readback of a batch ({p._slot.n} bytes) was interrupted "
                        f"({type(e).__name__}) before its ids were read; submit it again")
                    err.__cause__ = e
                    e = err
                p._error = e  # result() again raises the same error
                if p in self._inflight:
                    self._inflight.remove(p)
                raise
            if p in self._inflight:
                self._inflight.remove(p)
            if seg is None:
                seg = self._doc_offsets(doc_tok.astype(np.int64) - 1, len(ids))
            p._result = BatchEncoding(ids, seg)
            return p._result

    @staticmethod
    def _doc_offsets(first: np.ndarray, total: int) -> np.ndarray:
        """Token offsets from each document's first-token index (-1 for empty documents)."""
        off = np.empty(len(first) + 1, np.int64)
        off[:-1] = np.where(first < 0, np.iinfo(np.int64).max, first)
        off[-1] = total
        # An empty document starts where the next non-empty one does.
        return np.minimum.accumulate(off[::-1])[::-1].copy()

    def _encode_sliced(self, data: np.ndarray, offsets: np.ndarray) -> BatchEncoding:
        """Multi-pass encoding of a batch above the slice limit (cut at word starts)."""
        sess = self._session()
        slot = next(s for s in sess.slots if s not in {q._slot for q in self._inflight})
        total = len(data)
        starts = offsets[:-1]
        first = np.full(len(starts), -1, np.int64)
        pieces: list[np.ndarray] = []
        base = 0
        s = 0
        # A regex pre-tokenizer splits the whole batch first (on the GPU, in its own slices):
        # the cuts and each slice's walk need the split of the documents around them.
        words = sess.pretok.mask(data, offsets) if sess.pretok is not None else None
        mid_word = False  # this slice starts inside a word (the previous one was cut in it)
        while s < total:
            e, truncated = self._cut(data, offsets, s, sess.limit, words)
            k0, k1 = np.searchsorted(starts, [s, e], side="left")
            end_bit = e == total or bool(np.isin(e, starts[k1:k1 + 1]).any())
            slot.start(data, s, e, (starts[k0:k1] - s).astype(np.uint32), end_bit,
                       None if words is None else words[s:e])
            ids, doc_tok, _ = slot.finish()
            if mid_word and self._bpe is not None and len(ids):
                from torch_gpubpe.encoding.merge_walk import junction_ok

                if not junction_ok(self, pieces, ids):  # pop the token before the cut, redo
                    s, base = self._pop_last_token(pieces, s, base)
                    mid_word = not (bool(words[s]) if words is not None
                                    else self._at_word_start(data, offsets, s))
                    continue
            if truncated:  # keep the tokens that the cut cannot have changed (see _cut)
                lens = self._tok_len[ids]
                tstart = np.cumsum(lens) - lens
                keep = int(np.searchsorted(tstart, (e - s) - self.trie.max_depth, side="right"))
                e = s + int(tstart[keep]) if keep < len(ids) else e
                ids = ids[:keep]
            got = doc_tok.astype(np.int64) - 1
            first[k0:k1] = np.where(got >= 0, got + base, -1)
            pieces.append(ids.copy())
            base += len(ids)
            s = e
            mid_word = truncated
        ids = np.concatenate(pieces) if pieces else np.zeros(0, self.id_dtype)
        return BatchEncoding(ids, self._doc_offsets(first, len(ids)))

    def _pop_last_token(self, pieces: list[np.ndarray], s: int, base: int) -> tuple[int, int]:
        """Drop the last token kept so far (merge-order slicing); returns the new (s, base)."""
        k = max(i for i, p in enumerate(pieces) if len(p))
        s -= int(self._tok_len[int(pieces[k][-1])])
        pieces[k] = pieces[k][:-1]
        return s, base - 1

    @staticmethod
    def _at_word_start(data: np.ndarray, offsets: np.ndarray, pos: int) -> bool:
        """Whether byte ``pos`` of the packed batch starts a word (DESIGN.md §2)."""
        lo, hi = max(pos - 1, 0), min(pos + 2, len(data))
        st = offsets[:-1]
        rel = st[(st >= lo) & (st < hi)] - lo
        return bool(word_start_mask(data[lo:hi], np.append(rel, hi - lo))[pos - lo])

    def _cut(self, data: np.ndarray, offsets: np.ndarray, s: int, limit: int,
             words: np.ndarray | None = None) -> tuple[int, bool]:
        """End of the slice starting at ``s``: the last word start in ``(s, s + limit]``, or
        ``(s + limit, True)`` when one word covers all of it (then the caller keeps only tokens
        starting at least ``max_depth`` bytes before the end, and the next slice resumes at the
        first dropped token: greedy matching restarted at a token boundary gives the same ids)."""
        total = len(data)
        if total - s <= limit:
            return total, False
        hi = s + limit
        width = 4096
        while True:
            a = max(s + 1, hi - width)
            lo_ = a - 1
            hi_ = min(total, hi + 2)
            sub = data[lo_:hi_]
            st = offsets[:-1]
            rel = st[(st >= lo_) & (st < hi_)] - lo_
            mask = (word_start_mask(sub, np.append(rel, len(sub))) if words is None
                    else words[lo_:hi_])
            idx = np.flatnonzero(mask[1 : hi - lo_ + 1])
            if len(idx):
                return lo_ + 1 + int(idx[-1]), False
            if a == s + 1:
                return hi, True
            width *= 4

    # -- decoding ------------------------------------------------------------------------
    def decode_bytes(self, ids: Iterable[int] | np.ndarray) -> bytes:
        """Bytes spelled by ``ids`` (special ids give their spelling).

        Args:
            ids: a list (or any iterable) of ints, a 1-D integer ``numpy`` array, or a 1-D
                integer ``torch`` tensor (on any device; copied to the host).
        Raises:
            ValueError: an id outside ``[0, n_vocab)``, naming the id and its position.
            TypeError: an id that is not an integer (float, bool, str), naming its position.
            InputError: an array or tensor that is not 1-D (use :meth:`decode_batch`).
        """
        ids = _as_id_array(ids)
        if isinstance(ids, np.ndarray) and ids.dtype.kind in "iu":
            if len(ids) == 0:
                return b""
            a = ids.astype(np.int64)
            if a.min() >= 0 and a.max() < self.vocab.num_ordinary_tokens:
                if self._flat_bytes is None:
                    self._flat_bytes = np.frombuffer(b"".join(self.vocab.token_bytes), np.uint8)
                    self._tok_start = np.cumsum(self._tok_len) - self._tok_len
                lens = self._tok_len[a]
                ends = np.cumsum(lens)
                idx = np.arange(ends[-1]) - np.repeat(ends - lens - self._tok_start[a], lens)
                return self._flat_bytes[idx].tobytes()
        return self.vocab.decode_bytes(ids)

    def decode(self, ids: Iterable[int] | np.ndarray, errors: str = "replace") -> str:
        """:meth:`decode_bytes` as text (invalid UTF-8 → U+FFFD unless ``errors`` says else).
        ``ids`` as in :meth:`decode_bytes` (list, numpy array or torch tensor)."""
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    def decode_batch(self, batch, errors: str = "replace") -> list[str]:
        """:meth:`decode` of each sequence of ``batch`` (tiktoken's ``decode_batch``): a
        :class:`BatchEncoding`, a list of id lists, or a 2-D array/tensor (one row per text;
        padding ids are decoded too: slice them off first)."""
        return [b.decode("utf-8", errors=errors) for b in self.decode_bytes_batch(batch)]

    def decode_bytes_batch(self, batch) -> list[bytes]:
        """:meth:`decode_bytes` of each sequence of ``batch`` (as in :meth:`decode_batch`)."""
        if not isinstance(batch, BatchEncoding):
            batch = _as_id_array(batch, ndim=2)
        return [self.decode_bytes(row) for row in batch]

    def decode_single_token_bytes(self, token: int) -> bytes:
        """The bytes of one id (a special id gives its spelling; tiktoken's name).

        Raises:
            ValueError: ``token`` is outside ``[0, n_vocab)`` (tiktoken raises KeyError).
            TypeError: ``token`` is not an integer.
        """
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)):
            raise TypeError(f"a token id must be an integer, got {type(token).__name__}")
        return self.vocab.id_to_bytes(int(token))

    def decode_tokens_bytes(self, tokens: Iterable[int]) -> list[bytes]:
        """The bytes of each id (tiktoken's ``decode_tokens_bytes``)."""
        return [self.decode_single_token_bytes(t) for t in _as_id_array(tokens)]


_copy_pool = _cs.copy_pool


def parallel_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` (same shape, 1-D, contiguous) by up to 8 threads in parts of at least
    ``PARALLEL_COPY_MIN`` bytes (numpy releases the GIL while it copies). Used where one host
    thread copying from or into GPU-mapped memory is the slowest leg of a pipeline."""
    n = len(dst)
    parts = min(8, os.cpu_count() or 1, dst.nbytes // PARALLEL_COPY_MIN)
    if parts < 2:
        dst[...] = src
        return
    pool = _copy_pool()
    cuts = [n * k // parts for k in range(parts + 1)]

    def part(k: int) -> None:
        a, b = cuts[k], cuts[k + 1]
        dst[a:b] = src[a:b]

    futures = [pool.submit(part, k) for k in range(parts)]
    try:
        for f in futures:
            f.result()
    except BaseException:
        # Interrupted: no part may still read ``src`` (mapped GPU memory, unmapped next).
        for f in futures:
            f.cancel()
        concurrent.futures.wait(futures)
        raise


def insert_special_tokens(ids: np.ndarray, offsets: np.ndarray, bos_id: int | None,
                          eos_id: int | None, dtype=None) -> tuple[np.ndarray, np.ndarray]:
    """``bos_id`` before and/or ``eos_id`` after every document of a flat batch, on the host
    (the same result as wgsl/specials.wgsl, which the GPU path is tested against).

    Args:
        ids: token ids of all documents back to back, shape ``(n_tokens,)``.
        offsets: int64, shape ``(num_docs + 1,)``; document k is ``ids[offsets[k]:offsets[k+1]]``.
        dtype: of the returned ids (default: ``ids``'s).
    Returns:
        ``(ids, offsets)`` in the same layout, the specials included.
    """
    offsets = np.asarray(offsets, np.int64)
    nb, ne = int(bos_id is not None), int(eos_id is not None)
    seg = offsets + np.arange(len(offsets), dtype=np.int64) * (nb + ne)
    out = np.empty(int(seg[-1]), ids.dtype if dtype is None else dtype)
    keep = np.ones(len(out), bool)
    if nb:
        out[seg[:-1]] = bos_id
        keep[seg[:-1]] = False
    if ne:
        out[seg[1:] - 1] = eos_id
        keep[seg[1:] - 1] = False
    out[keep] = ids[: int(offsets[-1])]
    return out, seg


def _add_specials(be: BatchEncoding, specials: tuple[int, int] | None) -> BatchEncoding:
    """``be`` with ``specials = (bos, eos)`` (``_NO_TOKEN``: none) put in on the host (batches
    encoded in several slices or sub-batches)."""
    if specials is None:
        return be
    bos, eos = (None if x == _NO_TOKEN else x for x in specials)
    return BatchEncoding(*insert_special_tokens(be.ids, be.offsets, bos, eos))


def _as_id_array(ids, ndim: int = 1):
    """``ids`` as a numpy array when it is an array or a tensor (duck-typed: torch is not
    imported here), else unchanged (an iterable of ints, checked by the caller).

    Raises:
        InputError: an array or tensor with other than ``ndim`` dimensions.
    """
    if not isinstance(ids, np.ndarray):
        if hasattr(ids, "detach") and hasattr(ids, "numpy"):  # a torch.Tensor, on any device
            ids = ids.detach().cpu().numpy()
        elif hasattr(ids, "__array__") and not isinstance(ids, (list, tuple)):
            ids = np.asarray(ids)
        else:
            return ids
    if ids.ndim != ndim:
        hint = "; use decode_batch for a batch" if ids.ndim == 2 and ndim == 1 else ""
        raise InputError(f"expected a {ndim}-D sequence of token ids, got an array of shape "
                         f"{tuple(ids.shape)}{hint}")
    return ids
