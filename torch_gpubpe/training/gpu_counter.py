"""The GPU word counter (``wgsl/wordcount.wgsl``; DESIGN.md §2, §3).

Batches of whole documents (64 MiB) are uploaded, word starts marked by the §2 rule, and
every word inserted into a hash table that lives across batches; a key points at the word's
bytes (in the batch, then copied to a word store on the GPU) and the bytes are compared on every
probe, so equal keys are equal words, never just equal hashes; counts are 64-bit. Words over
``MAXW`` bytes (:mod:`~torch_gpubpe.training.long_words`), documents larger than a storage
binding and the other cases listed in :class:`GPUWordCounter` are counted on the CPU
(:func:`~torch_gpubpe.training.word_counts.count_batch`) and merged in. Output:
:class:`~torch_gpubpe.training.word_counts.WordCounts`; the same counts as the CPU counter.

Example::

    >>> from torch_gpubpe.training.gpu_counter import count_words_gpu
    >>> sorted(count_words_gpu(["a b a", b"a"]).to_dict().items())
    [(b' a', 1), (b' b', 1), (b'a', 2)]
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable

import numpy as np

from torch_gpubpe.core.patterns import DEFAULT, resolve
from torch_gpubpe.errors import GPUOperationError, InputError
from torch_gpubpe.gpu.shaders import shader_info
import torch_gpubpe.training.count_stream as count_stream
from torch_gpubpe.training.batches import HostBatch, check_documents, document_batches
from torch_gpubpe.training.long_words import ends_after, group_words
from torch_gpubpe.training.word_counts import WordCounts, concat_counts, count_batch

# Constants and state-word indices read from wgsl/wordcount.wgsl (no hand copies).
_WC = shader_info("wordcount").consts
MAXW = _WC["MAXW"]            # longest word the GPU table takes (bytes)
DEFAULT_GPU_BATCH_BYTES = 64 << 20
# The word table's size per batch. A batch of w word starts adds at most w new words, but text
# adds far fewer (real text: about a tenth of the word starts of the first batch are new words,
# fewer later), and sizing for w takes several times the GPU memory needed. The table is sized for
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


def pipeline_specs(gpu, constants: dict | None = None) -> list[tuple[str, str, dict]]:
    """``(shader, entry point, constants)`` of the word counter's pipelines on ``gpu`` (for
    :meth:`~torch_gpubpe.gpu.device.GPU.compile_pipelines`)."""
    return [("wordcount", e, dict(constants or {}))
            for e in shader_info("wordcount", gpu.flags).entry_points]


class GPUWordCounter:
    """Counts words on the GPU into a hash table that lives across batches (wordcount.wgsl).

    Exact: table keys point at the words' bytes, which are compared on every probe (never only
    hashes); counts are 64-bit. Counted on the CPU instead (:func:`count_batch`) and merged
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
                 max_batch_bytes: int | None = None, max_slots: int | None = None,
                 family: str = "bytes-classes") -> None:
        """
        Args:
            gpu: the :class:`~torch_gpubpe.gpu.device.GPU` (default: the process's).
            family: the word split: DESIGN.md §2's, or a regex family
                (:func:`torch_gpubpe.core.patterns.resolve`), whose word starts
                wgsl/pretokenize_unicode.wgsl computes on the same text (wc_starts reads them).
            batch_bytes: target bytes per batch that :func:`count_words_gpu` assembles
                (default 64 MiB; at most half of ``max_batch_bytes``).
        Test hooks (defaults are the real sizes): ``min_slots`` / ``max_slots`` table slots
        (powers of two: the shader masks with slots − 1), ``min_store`` word-store size in
        u32, ``max_probe`` probes per word (wordcount.wgsl MAX_PROBE), ``max_batch_bytes``
        the hard batch limit in bytes (default: the adapter's storage binding).
        """
        from torch_gpubpe.gpu.device import get_gpu

        self.g = g = gpu or get_gpu()
        self.family = resolve(family)
        self._pre = self._pre_sc = None
        if self.family != DEFAULT:
            from torch_gpubpe.encoding.regex_pretok import UnicodePreTokenizer

            self._pre = UnicodePreTokenizer(self.family, gpu=g)
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
        specs = pipeline_specs(g, consts)
        self.pipes = {s[1]: p for s, p in zip(specs, g.compile_pipelines(specs))}
        U = g.wgpu.BufferUsage
        self.U = U
        self.params = g.buffer(16, U.UNIFORM | U.COPY_DST, "wc.params")
        self._end_word = g.buffer(16, U.COPY_SRC | U.COPY_DST, "wc.end_word")
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
        if self._pre is not None:   # its passes over this text, their word starts in .mask
            self._pre_sc = self._pre.scratch(cap, self.text, self.doc_bits, "wc.pretok")

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
            pmask = self._pre_sc.mask if self._pre_sc is not None else self.longs  # (unread)
            b = {"P": self.params, "text": self.text, "doc_bits": self.doc_bits,
                 "starts": self.starts, "keys": self.keys, "counts": self.counts,
                 "store": self.store, "state": self.state, "longs": self.longs, "out": self.out,
                 "pmask": pmask}
            info = shader_info("wordcount", self.g.flags)
            self._bind = {
                name: self.g.bind_group(self.pipes[name], {n: b[v] for v, n in
                                                           info.entry_bindings(name).items()},
                                        label=f"wc.{name}")
                for name in self.pipes}
        return self._bind

    # -- GPU steps -------------------------------------------------------------------------------
    def _params(self, n: int, nout: int = 0) -> None:
        from_mask = int(self._pre is not None)   # (wc_starts reads the regex word starts)
        self.g.device.queue.write_buffer(self.params, 0,
                                         np.array([n, self.slots, nout, from_mask], np.uint32))

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
        self.extra.update(count_batch(data, offsets, self.family).to_counter())
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
        """Count the words of one packed batch (:func:`document_batches`), uploaded with
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

    def _regex_starts(self, enc, host: HostBatch) -> None:
        """Record the regex family's passes over the batch in ``text`` (its last document ends
        at byte n: that bit of ``doc_bits`` is set here, after the upload in ``enc``); wc_starts
        then reads their word starts."""
        from torch_gpubpe.core.packing import doc_start_bitmap

        n = host.n
        w = n >> 5
        word = doc_start_bitmap(host.offsets, n)[w] | np.uint32(1 << (n & 31))
        self.g.device.queue.write_buffer(self._end_word, 0, np.array([word], np.uint32))
        enc.copy_buffer_to_buffer(self._end_word, 0, self.doc_bits, 4 * w, 4)
        self._pre.record(enc, self._pre_sc, n)

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
            self.spill_table()        # the host's share of the budget: words go to disk
        self._set_state(nwords=0, nlong=0, overflow=0, need=0)
        self._params(n)
        if enc is None:
            enc = g.device.create_command_encoder(label="wordcount")
        if self._pre is not None:
            self._regex_starts(enc, host)
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
                self.spill_table()
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
                self.spill_table()
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
            words = host.words(np.sort(pos), ends_after(bits, np.sort(pos)))
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

    def spill_table(self) -> None:
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
    counter = GPUWordCounter(gpu, batch_bytes, **(_counter_kw or {}))
    with counter.g.operation("counting words"):
        # (count_stream.PIECE_BYTES read at call time: tests make it small)
        piece = min(count_stream.PIECE_BYTES, counter.batch_bytes)
        count_stream.count_stream(counter, document_batches(documents, piece, info))
        return counter.result()
