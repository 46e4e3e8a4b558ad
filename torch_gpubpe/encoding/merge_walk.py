"""Host side of the GPU merge-order (``mode="bpe"``) encoder: tables, pipeline, walk budget and
the check at a cut inside a word. The session (:mod:`torch_gpubpe.encoding.session`) calls
these; the kernel is
``wgsl/encode_bpe.wgsl`` (``bpe_tokenizer_chunked``), followed by ``encode.wgsl``'s prefix sum
and compaction, unchanged.

Bounded work (DESIGN.md §8): every loop iteration of the kernel counts against the per-dispatch
``budget`` (a quarter of ``thread_budget`` on a CPU adapter: lavapipe counts more iterations
than the kernel does; :data:`GPU_BUDGET` on a GPU); one step of the walk (a trie walk, or one
candidate tried: pair check, writes, pop) costs at most ``STEP_MAX`` iterations, computed here from the vocab (longest token, deepest split,
longest hash probe), and a thread stops before a step that could pass the budget, saving
``(position, candidate)``; dead positions live in a per-slice bit array. So the result does not
depend on budget, chunking or slicing.

A word of many KB is cut into pieces walked side by side, each cut's pair checked
(:mod:`torch_gpubpe.encoding.long_bpe`). A word longer than a slice is cut at a token boundary
as in greedy mode; the next slice restarts there. The join is exact when the last token kept
and the next slice's first token form a valid pair (a sequence whose pairs are all valid is the
BPE encoding, see :mod:`torch_gpubpe.core.bpe_tables`); otherwise :func:`junction_ok` says so
and the encoder drops that last token and encodes again from its start.

The walk is one loop, as encode.wgsl's greedy walk: an iteration is one trie step, or, in the
iteration that ends a walk, the try of its candidate (the lanes of a subgroup run walks and
tries side by side instead of each waiting for the subgroup's longest walk, then its longest
pair check). Its loads are few (global-memory load instructions dominate its time): a trie
step is one :func:`fused_edges` row after a search that stops once one edge is left; the first
step is one :func:`depth2_table` row; single bytes' rows come from :func:`d1_rows`, which also
holds the nodes of each byte's run, so that a walk over a run of one byte (indentation,
`` ----``, ``////``: vocabs such as Llama 3's have dozens of such tokens, and the walk passes the
run again after every token and pop) jumps to the run's deepest node in one load; a pair check
reads the token it unwinds to as one :func:`spine_rows` row; a candidate at a word start loads
no rows unless they are needed. The word starts of this project's split are computed first, as
bits, by ``bpe_word_bits`` (in the walk's compute pass), so that a word-start test is one bit.
"""

from __future__ import annotations

import functools

import numpy as np

from torch_gpubpe.core.bpe_tables import NO_TOKEN, RANK_BITS, BpeTables, valid_pair
from torch_gpubpe.encoding.layout import DEFAULT_BUDGET, WG
from torch_gpubpe.gpu.shaders import shader_info, shader_source
from torch_gpubpe.errors import UnsupportedVocabError


GPU_BUDGET = 1 << 16
"""The walk's steps per thread per dispatch on a GPU (not a CPU adapter) with the default
``thread_budget``: enough that words of runs in code-heavy text need no continuation round, and
no more (larger budgets measured slower; docs/PERFORMANCE.md)."""


RUN_MIN_DEPTH = 4
"""A byte whose run of this many bytes or more is a trie path gets the walk's run jump
(:func:`d1_rows`); shorter runs are walked step by step."""


@functools.cache
def run_depth_bits() -> int:
    """Bits of a run header's depth, read from the WGSL (``RUN_DEPTH_BITS``): a run path is
    jumped over to at most ``2 ** bits - 1`` bytes and walked on from there."""
    return shader_info("encode_bpe").consts["RUN_DEPTH_BITS"]


def step_max(t: BpeTables, max_depth: int) -> tuple[int, int]:
    """(UNWIND, STEP_MAX): iterations of ``valid_pair``'s loop, and the most loop iterations one
    step of the walk can take (see the module docstring): a trie walk, with the run jump's scan
    and clears of up to ``min(max_depth, 2 ** run_depth_bits() - 1)`` bytes each, and a try."""
    unwind = 2 * t.max_height + 4
    walk = max_depth + 2 * min(max_depth, (1 << run_depth_bits()) - 1) + 2
    tried = unwind * (t.max_probe + 1) + 2 * max_depth + 4
    return unwind, walk + tried + 1  # one iteration may walk and then try


def fused_edges(trie) -> np.ndarray:
    """``(max(edges, 1), 4)`` uint32 rows, one per trie edge ``e``: ``(byte | nc << 8, fc,
    token, 0)`` with ``(fc, nc, token)`` the node row of the edge's child
    (:mod:`torch_gpubpe.core.trie`), so that the walk's trie step is one load."""
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
    with them. The root's children are edges ``nodes[0] .. + 256``, one per byte."""
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
    """``(768 + runs, 4)`` uint32: rows ``3b .. 3b + 2`` for byte ``b``: its depth-1 node as a
    :func:`fused_edges` row (``x = b | nc << 8``, ``fc``, token, run header), the token's
    tokinfo row and its bounds row (one global table, L1-cached: no per-workgroup copies to
    fill). A byte with no token (the encoder refuses text holding it) gets ``NO_TOKEN`` rows.

    Then, for each byte ``b`` whose run ``b * k`` is a trie path to a depth ``D`` of at least
    :data:`RUN_MIN_DEPTH`, the nodes of that path at depths ``1 .. D`` (at most
    ``2 ** run_depth_bits() - 1``) as :func:`fused_edges` rows whose ``w`` is ``best | len << 18``: the
    longest reachable token among the path's first ``k`` bytes and its length. The run header
    of ``b`` is ``first row << run_depth_bits() | D`` (0: no such run): the walk's jump over a run."""
    nodes = trie.nodes.reshape(-1, 3)
    edges = trie.edges.reshape(-1, 2)
    fe = fused_edges(trie)
    root_fc = int(nodes[0, 0])
    node = fe[root_fc : root_fc + 256].copy()
    tid = node[:, 2].astype(np.int64)
    has = tid != NO_TOKEN
    info = np.full((256, 4), NO_TOKEN, np.uint32)
    bounds = np.full((256, 4), NO_TOKEN, np.uint32)
    info[has], bounds[has] = t.gpu_info[tid[has]], t.gpu_bounds[tid[has]]
    bits = run_depth_bits()
    runs: list[np.ndarray] = []
    first = 768
    for b in np.flatnonzero(has).tolist():
        path = [root_fc + b]   # the edge of each node of the run's path
        while len(path) < (1 << bits) - 1:
            fc, nc = (int(x) for x in nodes[int(edges[path[-1], 1]), :2])
            k = fc + int(np.searchsorted(edges[fc : fc + nc, 0], b))
            if k >= fc + nc or int(edges[k, 0]) != b:
                break
            path.append(k)
        if len(path) < RUN_MIN_DEPTH:
            continue
        rows = fe[path].copy()
        tok = rows[:, 2].astype(np.int64)
        ok = tok != NO_TOKEN
        ok[ok] = t.gpu_info[tok[ok], 1] != NO_TOKEN   # reachable (single bytes: left = itself)
        depth = np.arange(1, len(path) + 1)
        last = np.maximum.accumulate(np.where(ok, depth, 0))   # the deepest reachable so far
        rows[:, 3] = tok[last - 1] | (last << RANK_BITS)
        node[b, 3] = first << bits | len(path)
        runs.append(rows)
        first += len(path)
    out = np.stack([node, info, bounds], axis=1).reshape(-1, 4)
    return np.ascontiguousarray(np.concatenate([out, *runs]), dtype=np.uint32)


def spine_rows(t: BpeTables) -> np.ndarray:
    """``(2 * num_tokens, 4)`` uint32: row ``2t`` = ``(right, rank, R[t], R[right])``, row
    ``2t + 1`` = ``(left, rank, L[t], L[left])`` (``split``, dense rank, the spine bounds of
    :mod:`torch_gpubpe.core.bpe_tables`): what the pair check reads of a token on the left / right of the
    seam."""
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


def bpe_session_setup(sess, g, trie, chunk: int, budget: int) -> None:
    """Upload the tables of ``sess.bpe`` and create the walk pipeline; set the session's budget,
    state size and bindings for merge-order mode. The walk is built with the session's
    ``walk_flags`` too and binds what its ``walk_bindings`` returns (extension hooks of
    :class:`~torch_gpubpe.encoding.session.Session`).

    Raises:
        ValueError: the vocab needs more loop iterations per step than lavapipe's cap allows.
    """
    t: BpeTables = sess.bpe
    U = g.wgpu.BufferUsage
    unwind, smax = step_max(t, trie.max_depth)
    floor = smax + chunk + trie.max_depth + 8  # one step per dispatch after the start-up loops
    if not g.is_cpu and budget == DEFAULT_BUDGET:
        # No loop cap on a GPU, and a continuation round (submit, dispatch, readback) costs
        # more than the steps it saves: a word of runs (" ----...", indentation) can take
        # tens of thousands of steps (docs/PERFORMANCE.md).
        sess.budget = max(GPU_BUDGET, floor)
    else:
        # lavapipe counts up to ~2.7x the iterations the kernel counts (loop exits, inlined
        # calls; measured: GPT-2, 9,000 spaces, cut short at a counted budget of 32,768 but not
        # 24,000) and stops a loop at 65,535: count a quarter of thread_budget (and so does a
        # GPU given another thread_budget: tests of the continuations).
        sess.budget = max(budget // 4, floor)
    cap = (65535 - chunk - trie.max_depth - 64) // 4
    if g.is_cpu and sess.budget > cap:
        if floor > cap:
            raise UnsupportedVocabError(
                f"merge-order mode: one step of this vocab's walk may take {smax} loop "
                "iterations, more than lavapipe's 65,535-iteration cap leaves")
        sess.budget = cap
    sess.progress_factor = 4 * (trie.max_depth + 2)
    # (no 1: the walk reads word starts from binding 16; no 2, 3: the trie is read as fedges,
    # d2 and d1rows)
    sess.chunked_bindings = (0, 4, 5, 6, 7, 8, 13, 14, 15, 16, 17, 19, 20, 21, 22)
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
    consts = {"WG": WG, "CHUNK": chunk, "PAIR_MASK": t.pair_mask, "PAIR_PROBES": t.max_probe,
              "UNWIND": unwind, "STEP_MAX": smax, "ALL_REACHABLE": int(not t.unreachable),
              "WHOLE_WORDS": int(sess.whole_words)}
    flags = set(g.flags) | sess.walk_flags
    # the single-byte rows (binding 22)
    d1 = d1_rows(trie, t)
    sess.d1rows = g.buffer(d1.nbytes, U.STORAGE | U.COPY_DST, "encode_bpe.d1rows")
    g.device.queue.write_buffer(sess.d1rows, 0, d1)
    sess.bpe_bind = {22: sess.d1rows}  # further walk bindings, by number (the slot's bind groups)
    extra = sess.walk_bindings(g)
    sess.bpe_bind.update(extra)
    sess.chunked_bindings += tuple(extra)
    # The walk reads word starts as bits (binding 16, WORD_MASK build): a regex pre-tokenizer's
    # mask, or this project's split computed first by bpe_word_bits.
    flags.add("WORD_MASK")
    sess.bpe_bits_pipeline = None
    walk = ("encode_bpe", "bpe_tokenizer_chunked", consts,
            shader_source("encode_bpe", frozenset(flags)))
    bits = None
    if sess.pretok is None:
        bits_flags = frozenset(flags - {"WORD_MASK"} - sess.walk_flags)
        bsrc = None if bits_flags == frozenset(g.flags) else shader_source("encode_bpe", bits_flags)
        bits = ("encode_bpe", "bpe_word_bits", {"WG": WG}, bsrc)
    made = g.compile_pipelines([walk] + ([bits] if bits else []))
    sess.bpe_pipeline = made[0]
    if bits is not None:
        sess.bpe_bits_pipeline = made[1]
    sess.long_bpe_args = (consts, frozenset(flags))
    sess.bpe_steps = {"unwind": unwind, "step_max": smax, "budget": sess.budget}


def junction_ok(t: BpeTables, pieces: list[np.ndarray], ids: np.ndarray) -> bool:
    """Whether the last token kept so far and the first token of a slice that starts inside the
    same word form a valid pair (then the join is the merge-order result)."""
    last = next((int(p[-1]) for p in reversed(pieces) if len(p)), None)
    return last is None or valid_pair(t, last, int(ids[0]))

