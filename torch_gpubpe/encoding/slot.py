"""One batch in flight on the GPU: a :class:`Slot` of the encoder's session (DESIGN.md §4–§6:
persistent buffer pool, multi-pass slicing, one submit per slice).

Pipeline per slice (wgsl/encode.wgsl), recorded in ONE command encoder and ONE submit:
``trie_tokenizer_chunked`` (each thread walks the words that start in its 32-byte chunk and writes
each token id at its first byte) → ``trie_prefix_sum`` (block counts → offsets, total) →
``trie_tokenizer_compact`` (coalesced compaction), then the 4-byte total and each document's
first-token index are read back, then exactly ``total`` token ids (``uint16`` when the vocab has
at most 65,536 ids, else ``uint32``).

Long words (MBs of one character, digits, whitespace, CJK text without spaces): a walk
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

The long-word passes' host side is :mod:`torch_gpubpe.encoding.long_words`; the session that
owns two slots is :mod:`torch_gpubpe.encoding.session`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from torch_gpubpe.core.copy_pool import parallel_copy
from torch_gpubpe.core.copy_pool import copy_parts, join_parts
from torch_gpubpe.encoding.layout import (DOC_OFF, INFO_BAD_TOKENS, INFO_CONT_HI, INFO_CONT_LO,
                                          INFO_HEAD, INFO_LONG_ERRORS, INFO_REGIONS, INFO_TOKENS,
                                          INFO_UNFINISHED, MAX_CONTINUATIONS_PER_SUBMIT,
                                          META_HEAD, NO_TOKEN, REG_INLINE, REG_OFF, TS_COUNT,
                                          TS_OFF, WG)
from torch_gpubpe.encoding.long_bpe import AFTER_DISPATCHES, FEW_WALKS, LongBpeWords
from torch_gpubpe.encoding.long_words import LongWordPasses
from torch_gpubpe.core import str_pack
from torch_gpubpe.errors import GPUOperationError, InputError
from torch_gpubpe.gpu import wgpu_internals as _wi


def doc_offsets(first: np.ndarray, total: int) -> np.ndarray:
    """Token offsets from each document's first-token index (-1 for empty documents)."""
    off = np.empty(len(first) + 1, np.int64)
    off[:-1] = np.where(first < 0, np.iinfo(np.int64).max, first)
    off[-1] = total
    # An empty document starts where the next non-empty one does.
    return np.minimum.accumulate(off[::-1])[::-1].copy()


def doc_start_bits(out: np.ndarray, starts: np.ndarray, end: int | None) -> None:
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


class Slot(LongWordPasses, LongBpeWords):
    """One set of per-batch GPU buffers (two slots → two batches in flight), grown ×1.5."""

    def __init__(self, sess: Any, idx: int) -> None:  # its Session (which imports this module)
        self.sess, self.idx = sess, idx
        self.cap_n = 0
        self.cap_docs = 0
        self.up_promise = None  # pending map_async(WRITE) of the upload staging buffer
        self.meta_promise = None
        self.tok_promise = None
        self.query_set = None
        self.pt_timed = False  # the last slice's submit timed a regex pre-tokenizer's passes
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
        # (read and written by the host for merge-order long words: encoding/long_bpe.py)
        self.state = g.buffer((2 * nchunks + nb) * 4, U.STORAGE | U.COPY_SRC | U.COPY_DST,
                              f"{lab}.state")
        if s.bpe is not None:  # merge-order mode: dead-position bits (wgsl/encode_bpe.wgsl)
            self.dead_bytes = ((cap_n + 1 + 31) // 32 + 1) * 4
            self.dead = g.buffer(self.dead_bytes, U.STORAGE | U.COPY_DST, f"{lab}.dead")
        # info: 8 counters + (first byte, end byte) of each long-word region; a region is a word
        # of more than long_from bytes, so there are fewer than cap_n / long_from of them.
        self.reg_cap = max(REG_INLINE, cap_n // s.long_from + 2) if s.long_from else REG_INLINE
        self.meta = g.buffer(META_HEAD + 8 * self.reg_cap, U.STORAGE | U.COPY_SRC | U.COPY_DST,
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
        self.rb_meta = g.buffer(DOC_OFF + self.docs_bytes, U.MAP_READ | U.COPY_DST,
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
            bind.update(s.bpe_bind)
        walk = s.chunked_bindings
        if s.bpe_bits_pipeline is not None:  # merge order: word starts as bits first
            self.wbits = g.buffer(((cap_n + 31) // 32 + 2) * 4,
                                  U.STORAGE | U.COPY_SRC | U.COPY_DST, f"{lab}.word_bits")
            bind[16] = bind[23] = self.wbits
        if s.pretok:  # the walk reads word starts from the regex pre-tokenizer's mask
            self.pt = s.pretok.scratch(cap_n, self.text, self.bits, f"{lab}.pretok")
            bind[16] = self.pt.mask
            walk = tuple(b for b in walk if b not in (1, 16)) + (16,)  # (doc starts: in the mask)
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
                                                       type="timestamp", count=TS_COUNT)
            self.ts_resolve = g.buffer(8 * TS_COUNT, U.QUERY_RESOLVE | U.COPY_SRC,
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
    def refuse_missing_bytes(self, data: np.ndarray, s: int, e: int) -> None:
        """InputError if bytes ``data[s:e]`` hold a byte value no token spells (vocabularies
        that lack some single bytes): the walk would find no token there. Searched in the
        packed UTF-8 (what the GPU would get) on the packing threads."""
        table = self.sess.missing_bytes
        k = str_pack.find_bytes(data[s:e], table)
        if k >= 0:
            b = int(data[s + k])
            raise InputError(
                f"a document holds the byte 0x{b:02X}, which no token of this vocab spells (it "
                f"has none for {', '.join(f'0x{x:02X}' for x in np.flatnonzero(table))}): "
                "Hugging Face drops such bytes from words; torch_gpubpe refuses the batch "
                "rather than lose text")

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
        if sess.missing_bytes is not None:
            if isinstance(data, list):  # (the check reads the bytes: made here, copied below)
                data = join_parts(data)
            self.refuse_missing_bytes(data, s, e)
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
        doc_start_bits(up[self.off_bits : self.off_bits + 4 * nbits_words].view(np.uint32),
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
        self.write_params(resume=0)
        enc = dev.create_command_encoder(label=f"encode[{self.idx}].slice")
        text_len = (n + 1 + 3) // 4 * 4
        enc.copy_buffer_to_buffer(self.upload, 0, self.text, 0, text_len)
        enc.copy_buffer_to_buffer(self.upload, self.off_bits, self.bits, 0, 4 * nbits_words)
        if ndocs:
            enc.copy_buffer_to_buffer(self.upload, self.off_docs, self.doc_starts, 0, 4 * ndocs)
        if sess.pretok is not None and has_mask:
            enc.copy_buffer_to_buffer(self.upload, self.off_mask, self.pt.mask, 0, -(-n // 32) * 4)
        self.pt_timed = False
        self.record_slice(enc, n, has_mask,
                          None if self.query_set is None else (self.query_set, 0))
        cmd = enc.finish()
        t1 = time.perf_counter()
        hs["record"] += t1 - t
        if before_submit is not None:
            before_submit()
        t2 = time.perf_counter()
        dev.queue.submit([cmd])
        self.up_promise = self.upload.map_async("WRITE")
        self.meta_promise = self.rb_meta.map_async(_wi.map_read_mode(), 0, DOC_OFF + 4 * ndocs)
        hs["previous_readback_submit"] += t2 - t1
        hs["submit"] += time.perf_counter() - t2

    def write_params(self, resume: int, block_base: int = 0) -> None:
        long_from = self.sess.long_from or NO_TOKEN
        p = np.array([self.n, resume, self.sess.budget, self.nb, self.ndocs, block_base,
                      long_from, self.reg_cap], np.uint32)
        self.sess.gpu.device.queue.write_buffer(self.params, 0, p)

    def record_slice(self, enc, n: int, has_mask: bool, ts_at) -> None:
        """Record a fresh slice's passes once: a regex pre-tokenizer's when the split is
        computed on the GPU (no mask uploaded), then the walk, prefix sum and compaction.
        ``ts_at``: (query set, first index) of their timestamps, None: untimed. An extension
        hook (a subclass may record them more than once, e.g. to time repetitions)."""
        sess = self.sess
        if sess.pretok is not None and not has_mask:  # the split is computed here, on the GPU
            self.pt_timed = ts_at is not None
            ts = (ts_at[0], ts_at[1] + 6) if self.pt_timed else None
            sess.pretok.record(enc, self.pt, n, timestamps=ts)
        self.record_passes(enc, first=True, continuations=0, ts_at=ts_at)

    def timed_passes(self) -> list[str]:
        """Names of the passes a timed slice's timestamps measure, in query order."""
        names = ["trie_tokenizer_chunked", "trie_prefix_sum", "trie_tokenizer_compact"]
        if self.pt_timed:  # the regex pre-tokenizer's passes ran too
            names += list(self.sess.pretok.PASSES)
        return names

    def resolve_timestamps(self, enc, ts_at, k: int) -> None:
        """Resolve ``k`` timestamps of ``ts_at`` (see :meth:`record_slice`) into the metadata
        readback (an extension hook: a subclass resolves its own query sets)."""
        enc.resolve_query_set(self.query_set, 0, k, self.ts_resolve, 0)
        enc.copy_buffer_to_buffer(self.ts_resolve, 0, self.rb_meta, TS_OFF, 8 * k)

    def record_passes(self, enc, first: bool, continuations: int,
                       cont_blocks: int = 0, scan: bool = True, ts_at=None) -> None:
        """Record the walk (``first``: one dispatch over the slice; else ``continuations``
        dispatches over ``cont_blocks`` blocks) and, with ``scan``, the prefix sum and the
        compaction (O(slice) each: left out of continuation submits, so that a long word costs
        linear time)."""
        s, g = self.sess, self.sess.gpu
        # info[:INFO_REGIONS] per submit; the rest of the head (long-word regions, errors) once
        # per slice.
        enc.clear_buffer(self.meta, 0, META_HEAD if first else 4 * INFO_REGIONS)
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
        walks = 1 if first else continuations
        if first and s.bpe_bits_pipeline is not None:  # merge order: the walk's word starts
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
            self.resolve_timestamps(enc, ts_at, 6 + 2 * len(s.pretok.PASSES) if self.pt_timed
                                    else 6)
        if self.ndocs:
            enc.copy_buffer_to_buffer(self.doc_tok, 0, self.rb_meta, DOC_OFF, 4 * self.ndocs)

    def _copy_meta(self, enc) -> None:
        enc.copy_buffer_to_buffer(self.meta, 0, self.rb_meta, 0, META_HEAD)
        if self.sess.long_from:
            enc.copy_buffer_to_buffer(self.meta, META_HEAD, self.rb_meta, REG_OFF,
                                      8 * REG_INLINE)

    def read_meta(self) -> tuple[int, int, np.ndarray]:
        g = self.sess.gpu
        t = time.perf_counter()
        g.wait_promise(self.meta_promise, "token-count readback")
        self.sess.host_seconds["wait_token_count"] += time.perf_counter() - t
        self.meta_promise = None
        try:
            raw = self.rb_meta.read_mapped(0, DOC_OFF + 4 * self.ndocs)
        finally:
            self.rb_meta.unmap()
        head = np.frombuffer(raw, np.uint32, INFO_HEAD)
        self.nreg, self.long_errors = int(head[INFO_REGIONS]), int(head[INFO_LONG_ERRORS])
        self.bad_tokens = int(head[INFO_BAD_TOKENS])  # merge-order mode (encode_bpe.wgsl)
        self.reg_inline = np.frombuffer(raw, np.uint32, 2 * REG_INLINE, offset=REG_OFF)
        if self.query_set is not None:
            t = np.frombuffer(raw, np.uint64, TS_COUNT, offset=TS_OFF).astype(np.int64)
            self.sess.last_pass_us = {
                name: (t[2 * k + 1] - t[2 * k]) * self.sess.ns_per_tick / 1e3
                for k, name in enumerate(self.timed_passes())}
        doc_tok = np.frombuffer(raw, np.uint32, self.ndocs, offset=DOC_OFF)
        # Blocks [lo, hi) hold every chunk whose walk ran out of budget.
        self.cont_blocks = (0xFFFFFFFF - int(head[INFO_CONT_LO]), int(head[INFO_CONT_HI]))
        return int(head[INFO_TOKENS]), int(head[INFO_UNFINISHED]), doc_tok

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

        ``specials``: ``(bos, eos)`` ids (``NO_TOKEN`` for none) that the GPU puts before /
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
        total, unfinished, doc_tok = self.read_meta()
        k, dispatches = 1, 0
        self.lw = None
        # merge order: a word of many KB is cut into pieces walked side by side (long_bpe)
        may_cut = self.sess.bpe is not None
        while unfinished:  # a word longer than the per-thread budget: continue (rare)
            if may_cut and (unfinished <= FEW_WALKS or dispatches >= AFTER_DISPATCHES):
                may_cut = False
                cut = self.cut_long_words(*self.cont_blocks)
                if cut is not None:
                    (unfinished, self.cont_blocks), k = cut, 1
            # Each dispatch emits >= 1 token per unfinished walk (merge order: takes >= 1 step
            # of at most max_depth per walk, so allow that many times more).
            if dispatches > (self.n + 8) * self.sess.progress_factor:
                raise GPUOperationError(
                    f"encoding a slice of {self.n} bytes made no progress after {dispatches} "
                    f"continuation dispatches on {g.adapter_name}")
            dispatches += k
            self.sess.continuation_dispatches += k
            # Dispatch only the blocks that still walk: a grid over the whole slice would make
            # a run of MBs of one character quadratic (time must grow linearly).
            lo, hi = self.cont_blocks
            if not 0 <= lo < hi <= self.nb:
                raise GPUOperationError(
                    f"encoding a slice of {self.n} bytes: {unfinished} unfinished walks in an "
                    f"invalid block range [{lo}, {hi}) of {self.nb} on {g.adapter_name}")
            self.sess.continuation_workgroups += k * (hi - lo)
            self.write_params(resume=1, block_base=lo)
            enc = g.device.create_command_encoder(label=f"encode[{self.idx}].continue")
            self.record_passes(enc, first=False, continuations=k, cont_blocks=hi - lo,
                                scan=False)
            g.device.queue.submit([enc.finish()])
            self.meta_promise = self.rb_meta.map_async(_wi.map_read_mode(), 0,
                                                       DOC_OFF + 4 * self.ndocs)
            _, unfinished, _ = self.read_meta()
            k = min(2 * k, MAX_CONTINUATIONS_PER_SUBMIT)
            if not unfinished and self.lw is not None:  # check the cuts; walk moved pieces
                more = self.check_cuts()
                if more is not None:
                    (unfinished, self.cont_blocks), k = more, 1
            if not unfinished and not self.nreg:  # every walk done: prefix sum + compaction
                enc = g.device.create_command_encoder(label=f"encode[{self.idx}].compact")
                self.record_passes(enc, first=False, continuations=0, scan=True)
                g.device.queue.submit([enc.finish()])
                self.meta_promise = self.rb_meta.map_async(_wi.map_read_mode(), 0,
                                                           DOC_OFF + 4 * self.ndocs)
                total, unfinished, doc_tok = self.read_meta()
        if self.nreg:  # long words: the parallel path, then prefix sum + compaction
            total, doc_tok = self.encode_long_words()
        seg, src, n_out = None, self.out, total
        enc = g.device.create_command_encoder(label=f"encode[{self.idx}].readback")
        if specials is not None and self.ndocs:
            k = int(specials[0] != NO_TOKEN) + int(specials[1] != NO_TOKEN)
            seg = doc_offsets(doc_tok.astype(np.int64) - 1, total)
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
        self.readback = (n_out, nbytes, total, doc_tok, seg, specials)
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
        n_out, nbytes, total, doc_tok, seg, specials = self.readback
        if nbytes == 0:
            self.readback = None
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
            # several threads: one thread reads mapped memory at only a few GB/s.
            view = self.rb_tok.read_mapped(0, nbytes, copy=False)
            src = np.frombuffer(view, self.sess.id_dtype, n_out)
            parallel_copy(ids, src)
        finally:
            view = src = None  # no reference into the mapping may outlive it
            hs["ids_copy"] += time.perf_counter() - t1
        self.readback = None
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
