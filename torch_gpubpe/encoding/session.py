"""The encoder's persistent GPU session (DESIGN.md §6): one per :class:`Tokenizer` and process,
opened on the first non-empty encode. It holds the trie buffers, the pipelines of
``wgsl/encode.wgsl`` (or of merge-order mode's walk, :mod:`torch_gpubpe.encoding.merge_walk`, and
a regex pre-tokenizer's, :mod:`torch_gpubpe.encoding.regex_pretok`), the per-dispatch and
per-slice bounds, statistics, and two batch slots (:mod:`torch_gpubpe.encoding.slot`: two
batches in flight).
"""

from __future__ import annotations

import time

import numpy as np

from torch_gpubpe.core.trie import Trie
from torch_gpubpe.encoding.layout import (DEFAULT_LONG_WORD, HOST_STEPS, MAX_LONG_TILE,
                                          MAX_SLICE_POSITIONS, WG)
from torch_gpubpe.encoding.merge_walk import bpe_session_setup
from torch_gpubpe.encoding.regex_pretok import UnicodePreTokenizer
from torch_gpubpe.encoding.slot import Slot
from torch_gpubpe.gpu import wgpu_internals as _wi
from torch_gpubpe.gpu.device import get_gpu
from torch_gpubpe.gpu.shaders import shader_source
from torch_gpubpe.notices import warn_once


class Session:
    """Device-side state of one :class:`Tokenizer`: trie buffers, pipelines, two slots.

    Extension hooks, for instrumented builds (the test suite's, the benchmarks' work counters
    and repeated timings) made by subclassing, with :attr:`Tokenizer.session_class` naming the
    subclass: :attr:`slot_class`, :meth:`encode_source`, :attr:`walk_flags`,
    :meth:`walk_bindings` and :meth:`dispatch`.
    """

    slot_class = Slot
    """The class of the two batch slots."""
    walk_flags: frozenset[str] = frozenset()
    """WGSL build flags added to merge-order mode's walk (``wgsl/encode_bpe.wgsl``)."""

    def __init__(self, trie: Trie, id_size: int, chunk: int, max_slice_bytes: int | None,
                 budget: int, profile: bool, pre_tokenizer: str = "bytes-classes",
                 long_word_bytes: int | None = DEFAULT_LONG_WORD, bpe=None,
                 num_tokens: int = 0, whole_words: bool = True,
                 missing_bytes: tuple[int, ...] = ()) -> None:
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
        # merge-order mode: a word that spells a token BPE does not build is that token
        # (tiktoken; Hugging Face's ignore_merges), or else only what merges build
        self.whole_words = whole_words
        # byte values with no token (the vocab never saw them): a slice holding one is
        # refused before upload (Slot.stage)
        self.missing_bytes = None
        if missing_bytes:
            self.missing_bytes = np.zeros(256, bool)
            self.missing_bytes[list(missing_bytes)] = True
        self.progress_factor = 1
        self.chunked_bindings = (0, 1, 2, 3, 4, 5, 6, 7, 8)
        if self.budget > 65535 - chunk - 64:
            raise ValueError(
                f"the vocab's longest token ({trie.max_depth} bytes) needs more walk steps per "
                "thread than lavapipe's 65,535-iteration loop cap allows")
        self.profile = bool(profile) and g.has_timestamps
        self.last_pass_us: dict[str, float] = {}
        # Host seconds per step of a batch (Tokenizer.host_seconds; the CLI's --debug line)
        self.host_seconds = dict.fromkeys(HOST_STEPS, 0.0)
        self.continuation_dispatches = 0  # statistics (tests, benchmarks)
        self.continuation_workgroups = 0
        self.slices = 0
        self.staged_ahead = 0  # batches staged before the oldest in flight was read back
        self.long_regions = 0  # long-word regions encoded in parallel
        self.long_submits = 0
        self.long_dispatches = 0
        self.junction_checks = 0  # merge-order slicing: joins checked, and redone
        self.junction_retries = 0
        # merge-order long words cut into pieces (torch_gpubpe.encoding.long_bpe): words, their
        # pieces, cut pairs checked, failed, cuts moved and removed, pieces walked again; words
        # walked on by one thread after their cuts kept failing, and words left uncut (above
        # the per-slice cap): the slower paths, each said once
        self.long_bpe_words = self.long_bpe_pieces = self.long_bpe_checks = 0
        self.long_bpe_failed = self.long_bpe_moved = self.long_bpe_removed = 0
        self.long_bpe_rewalks = self.long_bpe_walked_on = self.long_bpe_uncut = 0
        self.long_bpe_args = None  # (constants, flags) of its pass, set by bpe_session_setup
        # Long words: tiles of lc >= max_depth bytes (a power of two, ~4 tokens of the longest
        # kind), windows of ldw = max_depth nodes per tile.
        md = trie.max_depth
        self.ldw = md
        self.lc = min(max(64, 1 << (8 * md - 1).bit_length()), max(MAX_LONG_TILE, md))
        self.long_from = 0 if long_word_bytes is None else max(int(long_word_bytes), chunk)
        if self.long_from and md > MAX_LONG_TILE:
            warn_once("long_words", f"torch_gpubpe: the vocab's longest token ({md} bytes) is "
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
        source = self.encode_source
        self.pretok = None
        self.bpe_bind: dict = {}
        self.bpe_bits_pipeline = None  # merge-order mode's word-start bits pass (merge_walk)
        walk_flags = g.flags
        if pre_tokenizer != "bytes-classes":  # a regex split (torch_gpubpe.encoding.regex_pretok)
            self.pretok = UnicodePreTokenizer(pre_tokenizer, gpu=g)
            walk_flags = g.flags | {"WORD_MASK"}
        self.open_seconds["pre_tokenizer"] = time.perf_counter() - t_open
        t_open = time.perf_counter()
        if bpe is not None:  # merge-order mode: its own walk (torch_gpubpe.encoding.merge_walk)
            self.long_from = 0  # the parallel long-word path is greedy longest match
            bpe_session_setup(self, g, trie, chunk, budget)
        self.open_seconds["bpe_tables"] = time.perf_counter() - t_open
        t_open = time.perf_counter()
        base = source(g.flags)
        specs = {"prefix": ("encode", "trie_prefix_sum", consts, base),
                 "compact": ("encode", "trie_tokenizer_compact", consts, base)}
        if bpe is None:
            specs["chunked"] = ("encode", "trie_tokenizer_chunked", consts, source(walk_flags))
        if self.long_from:
            for name, entry in (("ends", "long_word_ends"), ("lperiods", "long_periods"),
                                ("lmatch", "long_match"),
                                ("lexits", "long_exits"), ("ljump", "long_jump"),
                                ("lemit", "long_emit")):
                specs[name] = ("encode", entry, consts, base)
        self.pipes = dict(zip(specs, g.compile_pipelines(specs.values())))
        if bpe is not None:
            self.pipes["chunked"] = self.bpe_pipeline
        if self.bpe_bits_pipeline is not None:
            self.pipes["wbits"] = self.bpe_bits_pipeline
        self.open_seconds["pipelines"] = time.perf_counter() - t_open
        t_open = time.perf_counter()
        self.slots = [self.slot_class(self, 0), self.slot_class(self, 1)]
        self.open_seconds["slots"] = time.perf_counter() - t_open

    def encode_source(self, flags: frozenset[str]) -> str | None:
        """Source of ``wgsl/encode.wgsl`` built with ``flags``; None for the GPU's default
        build (compiled once per process, cached under the shader's name)."""
        return None if flags == self.gpu.flags else shader_source("encode", flags)

    def walk_bindings(self, g) -> dict:
        """Further buffers of merge-order mode's walk, by binding number (none here): called
        once its tables are uploaded; what it returns is bound to every slot's walk."""
        return {}

    def specials_pipeline(self):
        """wgsl/specials.wgsl's pipeline (compiled on first use, cached by the GPU object)."""
        return self.gpu.pipeline("specials", "insert_specials",
                                 constants={"WG": WG, "OUT16": int(self.id_size == 2)})

    def long_bpe_pipeline(self):
        """The pass of merge-order long words (``bpe_long_aux``), compiled on first use: most
        sessions never need it."""
        p = self.pipes.get("long_bpe_aux")
        if p is None:
            consts, flags = self.long_bpe_args
            p = self.pipes["long_bpe_aux"] = self.gpu.pipeline(
                "encode_bpe", "bpe_long_aux", constants=consts,
                source=shader_source("encode_bpe", flags))
        return p

    def dispatch(self, cp, name: str, bind_group, grid: tuple[int, int]) -> None:
        """Record one dispatch of pipeline ``name`` into compute pass ``cp`` (every dispatch of
        the encoder's passes goes through here)."""
        cp.set_pipeline(self.pipes[name])
        cp.set_bind_group(0, bind_group)
        cp.dispatch_workgroups(*grid)


def precompile(pre_tokenizer: str = "bytes-classes", gpu=None) -> None:
    """Compile what every greedy-mode session with the split ``pre_tokenizer`` shares, into the
    GPU's caches: the shader modules of ``wgsl/encode.wgsl`` and, for a regex split, its
    pre-tokenizer's pipelines and tables. A :class:`Session` opened afterwards finds them made;
    its walk pipelines, whose constants depend on the vocab, are its own. For work known to
    come before a vocab exists (the ``train`` command compiles them while it merges).

    Raises:
        NoAdapterError, GPUOperationError: as :class:`Session`.
    """
    g = gpu or get_gpu()
    g.module("encode")
    if pre_tokenizer != "bytes-classes":
        g.module("encode", shader_source("encode", g.flags | {"WORD_MASK"}))
        UnicodePreTokenizer(pre_tokenizer, gpu=g)
