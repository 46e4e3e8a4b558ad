"""Host side of the GPU merge-order (``mode="bpe"``) encoder: tables, pipeline, walk budget and
the check at a cut inside a word (issue 15). ``encoder.py`` calls these; the kernel is
``wgsl/encode_bpe.wgsl`` (``bpe_tokenizer_chunked``), followed by ``encode.wgsl``'s prefix sum
and compaction, unchanged.

Bounded work (DESIGN.md §8): every loop iteration of the kernel counts against the per-dispatch
``budget`` (a quarter of ``thread_budget``: lavapipe counts more iterations than the kernel
does); one step of the walk (a trie walk, or one candidate tried: pair check, writes, pop)
costs at most ``STEP_MAX`` iterations, computed here from the vocab (longest token, deepest split,
longest hash probe), and a thread stops before a step that could pass the budget, saving
``(position, candidate)``; dead positions live in a per-slice bit array. So the result does not
depend on budget, chunking or slicing.

A word longer than a slice (MBs of one character) is cut at a token boundary as in greedy mode;
the next slice restarts there. The join is exact when the last token kept and the next slice's
first token form a valid pair (a sequence whose pairs are all valid is the BPE encoding, see
:mod:`torch_gpubpe.core.bpe_tables`); otherwise :func:`junction_ok` says so and the encoder drops that last
token and encodes again from its start.

The walk is one loop, as encode.wgsl's greedy walk: an iteration is one trie step, or, in the
iteration that ends a walk, the try of its candidate (the lanes of a subgroup run walks and
tries side by side instead of each waiting for the subgroup's longest walk, then its longest
pair check). :func:`walk_work` counts its work (PROFILE build; benchmarks/bpe_work.py).
"""

from __future__ import annotations

import numpy as np

from torch_gpubpe.core.bpe_tables import NO_TOKEN, RANK_BITS, BpeTables, valid_pair
from torch_gpubpe.gpu.shaders import shader_info

# The walk's work counters (PROFILE builds), read from the WGSL: name -> index in binding 18.
_WGSL = shader_info("encode_bpe", frozenset({"PROFILE"}))
W_COUNT = _WGSL.consts["W_COUNT"]
WORK_COUNTERS = {k[2:].lower(): v for k, v in _WGSL.consts.items()
                 if k.startswith("W_") and k != "W_COUNT"}


PREFETCH_ROWS = True
"""Whether the walk loads a longer match's tokinfo/bounds rows in the step that finds it (its
loads overlap the next steps'; ``wgsl/encode_bpe.wgsl`` ``PREFETCH_ROWS``) rather than in the
try. Read when a session opens; benchmarks/encode.py times both."""
OVERLAP_TRY = False
"""Whether a lane that tries a candidate issues its pair check's first loads before the walking
lanes' loads of the same iteration (``wgsl/encode_bpe.wgsl`` ``OVERLAP_TRY``), so that they wait
together. Off: on the H200 (2026-12-01 15:15 UTC, GPT-2, 102 MB, ``benchmarks/encode.py``) the
walk took 9.10 ms with it off and 17.8 ms with it on (greedy 3.9 ms); the lockstep model had
predicted a gain. Read when a session opens; benchmarks/encode.py times both."""
# The speed-ups (SPEEDUPS), all but TEXT_WINDOW on by default: together they cut the walk's
# global-memory load instructions per input byte from 19.98 to 4.15 (greedy's walk: 14.89;
# PROFILE counters on lavapipe, GPT-2, 0.3 MB of each of the five corpora of
# benchmarks/encode.py: ``benchmarks/bpe_work.py --mb 0.3 --variants none --gpu``). On the H200
# (2026-12-01 17:15 UTC, benchmarks/encode.py, GPT-2 ranks, 102 MB, SM clock 1,980 MHz) the walk
# took 9.47 ms with all of them off, 8.70 ms with all but TEXT_WINDOW, 11.24 ms with all (greedy
# 3.75 ms); under GPT-2's own split (benchmarks/gpt2.py, 17:45) 35.4 ms without TEXT_WINDOW,
# 38.0 ms with it. So fewer loads are not faster there: TEXT_WINDOW's window registers cost
# more than its loads save (the kernel is near a register limit, as OVERLAP_TRY showed).
SHORT_SEARCH = True
"""Whether a trie child search stops once one edge is left (``ceil(log2 nc)`` edge loads for a
node of ``nc`` children instead of 8; ``wgsl/encode_bpe.wgsl`` ``SHORT_SEARCH``). Read when a
session opens, as the other switches."""
FUSED_EDGES = True
"""Whether the walk steps through ``fedges`` (:func:`fused_edges`: each edge row holds its
child's node row, one 16-byte load per trie step instead of an edge and then a node row;
``FUSED_EDGES``)."""
D2_LUT = True
"""Whether a walk's first trie step (the search among the up to 256 children of the token's
first byte) is one load of the two-byte table :func:`depth2_table` (``D2_LUT``)."""
TEXT_WINDOW = False
"""Whether each thread reads text bytes and word-start bits through a window of two 32-bit
words of each (one load per 4 bytes / 32 bits it moves on, instead of a load per byte read:
the word-start test of every walk step reads 3 bytes and 2 bits; ``TEXT_WINDOW``). Off: slower
on the H200 (above)."""
SPINE_ROWS = True
"""Whether the pair check reads the token each step unwinds to from :func:`spine_rows` (one
16-byte row: the fields of its side of the seam) instead of its tokinfo and bounds rows
(``SPINE_ROWS``)."""
LAZY_ROWS = True
"""Whether a candidate at a word start (no previous token: no pair check) skips its
tokinfo/bounds row loads; an accepted token's rows are then loaded only when its word goes on
(``LAZY_ROWS``)."""
WALK_WG64 = False
"""Whether the walk runs in workgroups of 64 lanes, four per block of 256 chunks, instead of
one of 256 (``wgsl/encode_bpe.wgsl`` ``LANES``; counts and state keep their per-block layout).
Why it may be faster: an SM holds a workgroup's registers until its last lane ends, so a
256-lane workgroup waits for the longest of 256 walks (a long word) with all 8 warps' registers
held, a 64-lane one for the longest of 64; and occupancy comes in steps of 2 warps, not 8 (a
register count between the steps leaves fewer warps idle). Off until measured on the H200
(benchmarks/encode.py times it)."""
D1_GLOBAL = True
"""Whether the single-byte rows (depth-1 node, tokinfo, bounds of each byte's token) are read
from a 256-row global table (:func:`d1_rows`, L1-cached) instead of workgroup copies that every
workgroup fills first (three dependent loads per byte and a barrier; 11 KB of workgroup memory
per workgroup, taken from L1). On: H200, GPT-2's vocab, 102 MB (benchmarks/encode.py, 19:45
UTC, 1,980 MHz): all passes 8.50 ms against 9.17-9.78 ms for the columns without it (greedy
4.40 ms: 1.93x); with WALK_WG64 + LEAN_STATE as well 8.51 ms."""
LEAN_STATE = False
"""Whether the walk keeps fewer registers live across its loop (with SPINE_ROWS; ignored
without it): the previous token as its spines row (4 words instead of its tokinfo and bounds
rows, 8; its tokinfo row loaded again on a pop), the candidate's right-side fields not kept
(the spines row is loaded when the candidate is accepted and its word goes on, overlapping the
next walk's trie steps), no token-before-the-previous (a pop scans back for it) and no first
byte (the walk's first trie step reads it again): about 10 fewer live 32-bit values. Why it may
be faster: TEXT_WINDOW's 6 more registers cost 28% on the H200 (runs of 17:19 and 17:34 UTC),
as if the walk sits at an occupancy step. Off until measured."""
WORD_BITS = True
"""Whether the word starts of this project's split (DESIGN.md §2) are computed first, as bits,
by ``bpe_word_bits`` (one thread per 32 bytes, in the walk's compute pass, so in its time),
and the walk is the WORD_MASK build that regex pre-tokenizers use: each word-start test one
bit instead of two doc_bits bits, three text bytes and the byte-class rule (a trie step tests
the byte after its match; PROFILE counters: ~8 text loads per input byte). No effect with a
regex pre-tokenizer (its mask is used already). On: H200, GPT-2's ranks, 102 MB
(benchmarks/encode.py, 20:25 UTC, every column at 1,980 MHz): all passes 7.47 ms against 8.49
for the default build without it (greedy 4.30 ms: 1.73x against 1.98x)."""
WALK_SWITCHES = ("PREFETCH_ROWS", "OVERLAP_TRY", "SHORT_SEARCH", "FUSED_EDGES", "D2_LUT",
                 "LAZY_ROWS", "TEXT_WINDOW", "SPINE_ROWS", "WALK_WG64", "D1_GLOBAL", "LEAN_STATE",
                 "WORD_BITS")
"""The module-level build switches of the walk (each exact; tests flip each one)."""
SPEEDUPS = ("SHORT_SEARCH", "FUSED_EDGES", "D2_LUT", "LAZY_ROWS", "TEXT_WINDOW",
            "SPINE_ROWS")
"""The switches that cut the walk's loads (issue 15: kernels within 2x of greedy's); the
benchmarks also time them all off (all on, when they are not the default)."""
OCCUPANCY = ("WALK_WG64", "D1_GLOBAL", "LEAN_STATE", "WORD_BITS")
"""The switches of 19:00-20:00 UTC 2026-12-01 (occupancy, the workgroup tail, the word-start
tests); the benchmarks also time them together."""

DEFAULTS = {k: globals()[k] for k in WALK_SWITCHES}
"""The switches' defaults (before TORCH_GPUBPE_WALK_SWITCHES)."""


def _switches_from_env() -> None:
    """Test and benchmark hook: ``TORCH_GPUBPE_WALK_SWITCHES="FUSED_EDGES=1,LAZY_ROWS=0"``
    sets those switches when this module is imported (so a whole test run can use a build
    other than the default). Raises ValueError on a name not in :data:`WALK_SWITCHES`."""
    import os

    spec = os.environ.get("TORCH_GPUBPE_WALK_SWITCHES", "").strip()
    for item in filter(None, (x.strip() for x in spec.split(","))):
        name, _, val = item.partition("=")
        name = name.strip().upper()
        if name not in WALK_SWITCHES or val.strip() not in ("0", "1"):
            raise ValueError(f"TORCH_GPUBPE_WALK_SWITCHES: {item!r} is not NAME=0 or NAME=1 "
                             f"with NAME one of {', '.join(WALK_SWITCHES)}")
        globals()[name] = val.strip() == "1"


_switches_from_env()


def step_max(t: BpeTables, max_depth: int) -> tuple[int, int]:
    """(UNWIND, STEP_MAX): iterations of ``valid_pair``'s loop, and the most loop iterations one
    step of the walk can take (see the module docstring)."""
    unwind = 2 * t.max_height + 4
    walk = max_depth + 2
    tried = unwind * (t.max_probe + 1) + 2 * max_depth + 4
    return unwind, walk + tried + 1  # one iteration may walk and then try


def fused_edges(trie) -> np.ndarray:
    """``(max(edges, 1), 4)`` uint32 rows, one per trie edge ``e``: ``(byte | nc << 8, fc,
    token, 0)`` with ``(fc, nc, token)`` the node row of the edge's child
    (:mod:`torch_gpubpe.core.trie`), so that the walk's trie step is one load (``FUSED_EDGES``)."""
    e = trie.edges.reshape(-1, 2)
    out = np.zeros((max(len(e), 1), 4), np.uint32)
    if len(e):
        nodes = trie.nodes.reshape(-1, 3)
        child = nodes[e[:, 1].astype(np.int64)]
        out[: len(e), 0] = e[:, 0] | (child[:, 1] << np.uint32(8))
        out[: len(e), 1] = child[:, 0]
        out[: len(e), 2] = child[:, 2]
    return out


def depth2_table(trie) -> np.ndarray:
    """``(65536, 4)`` uint32: row ``b0 << 8 | b1`` is the node spelled by the bytes ``b0 b1`` as
    a :func:`fused_edges` row (``x = nc << 8 | b1``), all ``NO_TOKEN`` where no token starts
    with them (``D2_LUT``). The root's children are edges ``nodes[0] .. + 256``, one per byte."""
    out = np.full((65536, 4), NO_TOKEN, np.uint32)
    nodes = trie.nodes.reshape(-1, 3)
    e = trie.edges.reshape(-1, 2)
    fe = fused_edges(trie)
    root_fc = int(nodes[0, 0])
    for b0 in range(256):
        d1 = int(e[root_fc + b0, 1])
        fc, nc = int(nodes[d1, 0]), int(nodes[d1, 1])
        if nc:
            rows = fe[fc : fc + nc]
            out[(b0 << 8) | (rows[:, 0] & 0xFF).astype(np.int64)] = rows
    return out


def d1_rows(trie, t: BpeTables) -> np.ndarray:
    """``(768, 4)`` uint32: rows ``3b .. 3b + 2`` for byte ``b``: its depth-1 node as a
    :func:`fused_edges` row (``x = b | nc << 8``, ``fc``, token), the token's tokinfo row and
    its bounds row (``D1_GLOBAL``: what the walk's workgroup copies hold otherwise)."""
    nodes = trie.nodes.reshape(-1, 3)
    fe = fused_edges(trie)
    root_fc = int(nodes[0, 0])
    node = fe[root_fc : root_fc + 256]
    tid = node[:, 2].astype(np.int64)
    out = np.stack([node, t.gpu_info[tid], t.gpu_bounds[tid]], axis=1)
    return np.ascontiguousarray(out.reshape(-1, 4), dtype=np.uint32)


def spine_rows(t: BpeTables) -> np.ndarray:
    """``(2 * num_tokens, 4)`` uint32: row ``2t`` = ``(right, rank, R[t], R[right])``, row
    ``2t + 1`` = ``(left, rank, L[t], L[left])`` (``split``, dense rank, the spine bounds of
    :mod:`torch_gpubpe.core.bpe_tables`): what the pair check reads of a token on the left / right of the
    seam (``SPINE_ROWS``)."""
    info, gb = t.gpu_info, t.gpu_bounds
    rank = info[:, 3] & np.uint32((1 << RANK_BITS) - 1)
    out = np.empty((len(info), 2, 4), np.uint32)
    out[:, 0] = np.stack([info[:, 2], rank, gb[:, 0], gb[:, 2]], axis=1)
    out[:, 1] = np.stack([info[:, 1], rank, gb[:, 1], gb[:, 3]], axis=1)
    return out.reshape(-1, 4)


def gpu_pairs(t: BpeTables) -> np.ndarray:
    """The pair hash table as the walk reads it: ``(slots, 4)`` uint32 rows ``(left, right,
    token, rank of token)`` (``t.pairs`` plus the rank, so that one load answers a probe);
    empty slots are all ``NO_TOKEN``."""
    tab = t.pairs.reshape(-1, 3)
    out = np.full((len(tab), 4), NO_TOKEN, np.uint32)
    out[:, :3] = tab
    full = tab[:, 0] != NO_TOKEN
    out[full, 3] = t.rank[tab[full, 2].astype(np.int64)]
    return out


def bpe_session_setup(sess, g, trie, chunk: int, budget: int, work: bool = False) -> None:
    """Upload the tables of ``sess.bpe`` and create the walk pipeline; set the session's budget,
    state size and bindings for merge-order mode. ``work``: the PROFILE build of the walk, with
    its work counters in ``sess.bpe_work`` (:func:`walk_work`).

    Raises:
        ValueError: the vocab needs more loop iterations per step than lavapipe's cap allows.
    """
    t: BpeTables = sess.bpe
    U = g.wgpu.BufferUsage
    unwind, smax = step_max(t, trie.max_depth)
    # lavapipe counts up to ~2.7x the iterations the kernel counts (loop exits, inlined calls;
    # measured: GPT-2, 9,000 spaces, cut short at a counted budget of 32,768 but not 24,000):
    # count a quarter of thread_budget, and at least one step per dispatch after the start-up
    # loops (chunk scan, prev_token).
    sess.budget = max(budget // 4, smax + chunk + trie.max_depth + 8)
    cap = (65535 - chunk - trie.max_depth - 64) // 4
    if sess.budget > cap:
        if smax + chunk + trie.max_depth + 8 > cap:
            raise ValueError(
                f"merge-order mode: one step of this vocab's walk may take {smax} loop "
                "iterations, more than lavapipe's 65,535-iteration cap leaves")
        sess.budget = cap
    sess.progress_factor = 4 * (trie.max_depth + 2)
    sess.chunked_bindings = (0, 1, 2, 3, 4, 5, 6, 7, 8, 13, 14, 15, 17, 19, 20, 21)
    info = np.ascontiguousarray(t.gpu_info)
    sess.tokinfo = g.buffer(info.nbytes, U.STORAGE | U.COPY_DST, "encode_bpe.tokinfo")
    pairs = gpu_pairs(t)
    sess.pairs = g.buffer(pairs.nbytes, U.STORAGE | U.COPY_DST, "encode_bpe.pairs")
    bounds = np.ascontiguousarray(t.gpu_bounds)
    sess.bounds = g.buffer(bounds.nbytes, U.STORAGE | U.COPY_DST, "encode_bpe.bounds")
    fe = fused_edges(trie)
    sess.fedges = g.buffer(fe.nbytes, U.STORAGE | U.COPY_DST, "encode_bpe.fedges")
    d2 = depth2_table(trie)
    sess.d2 = g.buffer(d2.nbytes, U.STORAGE | U.COPY_DST, "encode_bpe.d2")
    sp = spine_rows(t)
    sess.spines = g.buffer(sp.nbytes, U.STORAGE | U.COPY_DST, "encode_bpe.spines")
    with g.operation("uploading the merge-order tables"):
        g.device.queue.write_buffer(sess.tokinfo, 0, info)
        g.device.queue.write_buffer(sess.pairs, 0, pairs)
        g.device.queue.write_buffer(sess.bounds, 0, bounds)
        g.device.queue.write_buffer(sess.fedges, 0, fe)
        g.device.queue.write_buffer(sess.d2, 0, d2)
        g.device.queue.write_buffer(sess.spines, 0, sp)
    lanes = 64 if WALK_WG64 else 256
    sess.walk_sub = 256 // lanes  # workgroups per block of the walk (encoder.py's grid)
    consts = {"WG": 256, "CHUNK": chunk, "PAIR_MASK": t.pair_mask, "PAIR_PROBES": t.max_probe,
              "UNWIND": unwind, "STEP_MAX": smax, "ALL_REACHABLE": int(not t.unreachable),
              "LANES": lanes, **{k: int(bool(globals()[k])) for k in WALK_SWITCHES}}
    src = None
    flags = set(g.flags)
    sess.bpe_bind = {}  # further walk bindings, by number (encoder.py's bind groups)
    if D1_GLOBAL:
        flags.add("D1_GLOBAL")
        d1 = d1_rows(trie, t)
        sess.d1rows = g.buffer(d1.nbytes, U.STORAGE | U.COPY_DST, "encode_bpe.d1rows")
        g.device.queue.write_buffer(sess.d1rows, 0, d1)
        sess.chunked_bindings += (22,)
        sess.bpe_bind[22] = sess.d1rows
    if sess.pretok is not None:  # word starts from a regex pre-tokenizer's mask (binding 16)
        flags.add("WORD_MASK")
    sess.bpe_work = None
    if work:
        flags.add("PROFILE")
        sess.chunked_bindings += (18,)
        sess.bpe_work = g.buffer(4 * W_COUNT, U.STORAGE | U.COPY_SRC | U.COPY_DST,
                                 "encode_bpe.work")
        g.device.queue.write_buffer(sess.bpe_work, 0, np.zeros(W_COUNT, np.uint32))
    sess.bpe_bits_pipeline = None
    if WORD_BITS and sess.pretok is None:  # word starts as bits first (bpe_word_bits)
        flags.add("WORD_MASK")
        sess.chunked_bindings = tuple(b for b in sess.chunked_bindings if b != 1) + (16,)
        bits_flags = frozenset(flags - {"WORD_MASK", "D1_GLOBAL", "PROFILE"})
        bsrc = None  # (the default build's module, cached under the shader's name)
        if bits_flags != frozenset(g.flags):
            from torch_gpubpe.gpu.shaders import shader_source

            bsrc = shader_source("encode_bpe", bits_flags)
        sess.bpe_bits_pipeline = g.pipeline("encode_bpe", "bpe_word_bits",
                                            constants={"WG": 256}, source=bsrc)
    if flags != set(g.flags):
        from torch_gpubpe.gpu.shaders import shader_source

        src = shader_source("encode_bpe", frozenset(flags))
    sess.bpe_pipeline = g.pipeline("encode_bpe", "bpe_tokenizer_chunked",
                                   constants=consts, source=src)
    sess.bpe_steps = {"unwind": unwind, "step_max": smax, "budget": sess.budget,
                      **{k.lower(): bool(globals()[k]) for k in WALK_SWITCHES}}


def junction_ok(t: BpeTables, pieces: list[np.ndarray], ids: np.ndarray) -> bool:
    """Whether the last token kept so far and the first token of a slice that starts inside the
    same word form a valid pair (then the join is the merge-order result)."""
    last = next((int(p[-1]) for p in reversed(pieces) if len(p)), None)
    return last is None or valid_pair(t, last, int(ids[0]))


def walk_work(tokenizer, documents, ids_out: list | None = None) -> dict[str, int]:
    """Work counts of the merge-order walk over ``documents`` (a hardware-independent cost
    measure, issue 15): encodes them once with the PROFILE build of ``wgsl/encode_bpe.wgsl``
    in a fresh session of ``tokenizer`` (mode ``"bpe"``), then restores the normal session.

    Returns the totals of :data:`WORK_COUNTERS` (``iters``: walk-loop iterations summed over
    threads; ``steps``: trie steps; ``tries``: candidates tried; ``checks``: pair checks;
    ``check_loop``: those not decided in their first step (one round of loads each); ``unwind``:
    their further steps; ``probes``: hash probes; ``shorter``: candidates rejected for a shorter
    one; ``pops``: backtracks; ``scan``: steps of the scan back for the previous token;
    ``tokens``: tokens accepted, pops not subtracted; ``lockstep``: the sum over subgroups of
    their longest lane's iterations, 0 without subgroups), plus ``bytes``, ``output_tokens``,
    ``subgroup_size`` (0: none) and ``dispatches`` (walk dispatches, continuations included).
    ``ids_out``: a list that receives the ids of each document (those of the PROFILE build).

    Raises:
        ValueError: ``tokenizer`` is not in merge-order mode.
    """
    if tokenizer.mode != "bpe":
        raise ValueError("walk_work needs a Tokenizer with mode='bpe'")
    docs = list(documents)
    saved = tokenizer._sess
    tokenizer._sess, tokenizer._bpe_work = None, True
    try:
        sess = tokenizer._session()
        ids = tokenizer.encode_batch(docs)
        g = sess.gpu
        raw = np.frombuffer(g.device.queue.read_buffer(sess.bpe_work), np.uint32)
        out = {k: int(raw[i]) for k, i in WORK_COUNTERS.items()}
        out["bytes"] = sum(len(d.encode() if isinstance(d, str) else d) for d in docs)
        out["output_tokens"] = sum(len(x) for x in ids)
        out["subgroup_size"] = int(g.subgroup_size or 0) if "SUBGROUPS" in g.flags else 0
        out["dispatches"] = sess.slices + sess.continuation_dispatches
        if ids_out is not None:
            ids_out.extend(ids)
        return out
    finally:
        tokenizer._bpe_work = False
        tokenizer._sess = saved
