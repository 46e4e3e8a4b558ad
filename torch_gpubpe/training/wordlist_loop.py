"""``algorithm="wordlist"`` (the default): the occurrence-list walk (``wgsl/train_wordlist.wgsl``).

The stream of unique words stays in place, each word's live symbols linked both ways, with an
index of where each token occurs (per token a list: the stream positions that held it when it
was made). Per merge the entries of the rarer side of the best pair are looked at, one thread
per entry; the thread holding the first occurrence of a chain of adjacent ones (A B A B, or a
run of A == B paired left to right) merges the chain with its exact pair-count deltas. Work
and latency per merge follow the pair's occurrences, not the length of the words they are in.
Several merges per step: 3 dispatches per step, ``find_max4 → wl_select → wl_merge``.
wl_select (one workgroup) takes the longest prefix of the current pair ranking whose ids are
all distinct (at most :data:`MAX_MERGES_PER_STEP`, the shader's BATCH_MAX = 8; a pair with
A = B alone): such merges touch disjoint positions, no pair they make can outrank a later one
of them (its count is bounded by a pair ranked after the prefix, and on a tie its left id is
not smaller), so they are exactly the next serial merges (the proof is in the shader). wl_merge
walks all their lists at once; occurrences of different members that touch form one chain,
merged in order by the thread of its leftmost one. find_max4 (the seed's kernel, shared in
``train_table.wgsl``) rescans only the blocks the last step listed dirty, over a grid of at
most :data:`FIND_WORKGROUPS`, and keeps a level of super-block bests that wl_select ranks.
(Sennrich et al. 2016's incremental update with its token → occurrences index, made parallel.)

Long walks: a thread's work is bounded by ``budget`` steps + hops + table probes per dispatch
(a CPU adapter may stop a thread's loops at 65,535 iterations). A thread out of budget saves its place
and pauses the merge loop on the GPU; the driver then dispatches :meth:`record_continue` until
every carried walk is done (as the encoder continues a long word), and training goes on: any
word length, any adapter, the same algorithm.

Long chains (``b"a" * 5_000_000`` is ONE chain, 2.5 M serial steps in its first merge): a thread that has merged :data:`LONG_MIN_CHAIN` occurrences of one chain hands the rest
to ``wgsl/train_long.wgsl`` (a table of up to :data:`LONG_CAP` chains at once; past it the walk
goes on serially, ``stats["long_chains_serial"]``), which the continue submits merge in
parallel, in rounds of a window of :data:`LONG_WINDOW` stream positions per chain: a break
search, per-block counts and their prefix sums give each A its offset in the chain (A = B: its
parity is left or right of a pair, left-to-right pairing), then every pair merges at once with
the serial walk's pair-count deltas summed per segment. Same merges; ~5 dispatches per window
instead of one dependent step per occurrence. In a step of several merges the same holds for a
run of one member's occurrences (the record names the member); where another member's
occurrence follows the run, the chain goes back to a carried walk
(``stats["long_chains_resumed"]``).

:class:`WordListKernels` is built once per run; ``record_*`` only record into a compute pass.
"""

from __future__ import annotations

import numpy as np

from torch_gpubpe.gpu.wgpu_internals import raw_recorder
from torch_gpubpe.training.pair_table import PairTable, bind_groups

SHADER = "train_wordlist"
STEP = ("find_max4", "wl_select", "wl_merge")
# Merges per step at most (wl_select's P.batch_max; None: the shader's BATCH_MAX). 1 gives one
# merge per step (the same merges: tests compare the two).
MAX_MERGES_PER_STEP: int | None = None
# Walk steps + table probes per thread per dispatch on a GPU: short enough for a watchdog.
DEFAULT_BUDGET = 32_768
# On a CPU adapter: its 65,535-iteration loop cap (WGPU_NOTES.md §5) counts the loop
# iterations of a whole SIMD vector of lanes (8 on 256-bit AVX), and lanes walking different
# words run their inner loops one after another, so a vector's iterations reach the sum of its
# lanes' budgets: per-thread budgets of 16,384 and more merge a 1 MB word wrong there, 4,096
# right. Budget = CPU_LOOP_ITERATIONS / lanes.
CPU_LOOP_ITERATIONS = 30_000


# A CPU adapter runs one submit at a time, inside the submit or readback that waits for it, so a
# dispatch's work there is a gap between submits (kept to tens of ms): on a CPU adapter
# every dispatch is bounded by a fixed amount of work, whatever the input, and the host's
# TARGET_SUBMIT_S cap then groups dispatches per submit. Walk steps + probes of one wl_merge /
# wl_continue dispatch over all its threads (each ~1 µs of CPU time there, a chain of
# dependent loads): the per-thread budget is this over the grid's threads (at most
# CPU_WORKGROUPS × WG), at least 8. 2^14 steps keep a submit near TARGET_SUBMIT_S; 2^17 take
# ten times that.
CPU_WALK_STEPS = 1 << 14
# Stream positions per submit of a pass over the stream (the set-up's wl_links and
# wl_byte_lists, pair_count: ~10-15 ms of CPU time), and per long chain per round
# (train_long.wgsl's window: lc_apply ~2 µs of CPU time per position, a round ~15 ms).
CPU_STREAM_SYMBOLS = 1 << 17
CPU_LONG_WINDOW = 1 << 13
# pair_count's share: its table atomics cost 3-5× a set-up pass per position (one 5 MB word,
# a or ab: ~25 ms of CPU time per 2^17 positions, 5-10 ms for wl_links), so half the positions.
CPU_COUNT_SYMBOLS = 1 << 16
# A new buffer's memory is first written inside the first submit that uses it: wgpu copies the
# queued write_buffer data there and zeroes the ranges nothing wrote (its lazy initialisation),
# and on a CPU adapter that memory is the host's, with its page faults on first touch. A 5 MB
# word's stream buffers (lsym, wid, nxt, prv: 80 MB) would be written in the set-up's first
# submit and pool (40 MB) in the first wl_byte_lists one, each a long gap between submits. So
# on a CPU adapter the buffers are uploaded and cleared beforehand, CPU_INIT_BYTES per submit
# (a few ms each).
CPU_INIT_BYTES = 1 << 23


def default_budget(gpu, is_cpu: bool) -> int:
    """Walk steps + probes per thread per dispatch for ``gpu`` (see CPU_LOOP_ITERATIONS and
    CPU_WALK_STEPS: on a CPU adapter the smaller of the two)."""
    if not is_cpu:
        return DEFAULT_BUDGET
    lanes = gpu.subgroup_size or 16   # (no subgroups requested: assume a wide vector)
    return max(8, min(CPU_LOOP_ITERATIONS // lanes, CPU_WALK_STEPS // (CPU_WORKGROUPS * 256)))
# Long chains (train_long.wgsl): a chain's occurrences one thread merges before it hands the
# rest over (a few ms of serial steps on a GPU at ~1 µs each; tests force small values;
# NEVER: off), the stream positions per chain per round, and the chains handed over at once
# (≤ the shader's LC_CAP). Read at each run (tests monkeypatch them).
LONG_MIN_CHAIN = 1024
LONG_WINDOW = 1 << 20
LONG_CAP = 4096
NEVER = 0xFFFFFFFF
# The long-chain kernels' grid (grid-stride over the round's blocks: ≤ LC_ITEMS / grid
# iterations per thread, under a CPU adapter's loop cap).
LONG_WORKGROUPS = 1056
CPU_LONG_WORKGROUPS = 16


def long_params(is_cpu: bool = False) -> dict:
    """The Params fields of the long-chain path (module constants, read now; a CPU adapter's
    window at most CPU_LONG_WINDOW)."""
    window = min(LONG_WINDOW, CPU_LONG_WINDOW) if is_cpu else LONG_WINDOW
    return {"long_min": int(LONG_MIN_CHAIN), "long_window": int(window),
            "long_cap": int(LONG_CAP)}


# wl_merge's grid on a GPU: at least 132 workgroups (about one per SM of a large GPU: when
# every workgroup still reduced all the block maxima, many more were slower); with the
# super-block level a workgroup's share of that reduction is one load per thread, so large
# corpora (long word lists) get one workgroup per WORDS_PER_WORKGROUP unique words, up to
# 1,056 (a resident wave of 8 per SM), to shorten each thread's chain of dependent loads. On a
# CPU adapter fewer.
GPU_WORKGROUPS = 132
GPU_MAX_WORKGROUPS = 1056
WORDS_PER_WORKGROUP = 4096
CPU_WORKGROUPS = 8


# find_max4's grid: the last merge's dirty blocks grid-stride over at most this many workgroups
# (about one resident wave of a large GPU: 132 SMs × 8), not one workgroup per table block
# (16 K and more on large corpora, nearly all of them launched only to find their block clean).
# Also bounds a thread's loop after clear_table (every block) to nblocks / 1,056 iterations (a
# CPU adapter's loop cap).
FIND_WORKGROUPS = 1056


def grid_workgroups(nwords: int, is_cpu: bool) -> int:
    """wl_merge's (and wl_continue's) workgroups for a run of ``nwords`` unique words."""
    if is_cpu:
        return CPU_WORKGROUPS
    return max(GPU_WORKGROUPS, min(GPU_MAX_WORKGROUPS, nwords // WORDS_PER_WORKGROUP))


class WordListKernels:
    """The word-list walk's buffers and bind groups for one run.

    Args:
        gpu, pipes, info: the device, entry point → pipeline, the parsed shader.
        table: the run's :class:`~torch_gpubpe.training.pair_table.PairTable` (params ``budget``).
        sym: uint32, shape ``(n,)``: the stream, id | TWS at word starts.
        wid: uint32, shape ``(n,)``: the word of each symbol.
        starts, lens: int64, shape ``(words,)``: each word's first symbol and length (≥ 2).
        num_merges: the merge budget (sizes the token lists' index).
        workgroups: wl_merge's (and wl_continue's) grid.
    """

    STEP = STEP
    name = "wordlist"

    def __init__(self, gpu, pipes: dict, info, table: PairTable, sym: np.ndarray,
                 wid: np.ndarray, starts: np.ndarray, lens: np.ndarray, num_merges: int,
                 workgroups: int, is_cpu: bool = False) -> None:
        self.g, self.pipes, self.info, self.table = gpu, pipes, info, table
        c = info.consts
        self.n = n = len(sym)
        nwords = len(lens)
        # ≤ 1 thread per word, or per 64 symbols where that is more: one word of 5 MB has lists
        # of millions of entries, one workgroup would look at them for tens of ms per merge
        self.workgroups = max(1, min(workgroups, -(-max(nwords, n // 64) // c["WG"])))
        self.long_grid = gpu.grid(CPU_LONG_WORKGROUPS if is_cpu else LONG_WORKGROUPS)
        self.is_cpu = is_cpu
        # The links (nxt, prv) and the byte lists (tlist, pool) are built on the GPU from lsym
        # (record_setup); tlist and carry start as new buffers do: zero.
        # the lists, then the scratch of a step's members after the first (wl_select)
        self.scratch = c["SCATTER_WORKGROUPS"] * c["WG"] * c["SCATTER_ITEMS"]
        assert c["BATCH_WORDS"] == c["BATCH_HEAD"] + c["BATCH_MAX"] * c["BR"]
        assert table.nsupers <= c["SEL_SUPERS"] * c["WG"], "pair table too large for wl_select"
        pool_size = n + (n - nwords) + 16 + self.scratch
        self.top = n
        U = gpu.wgpu.BufferUsage
        S, C = U.STORAGE, U.COPY_DST | U.COPY_SRC
        threads = self.workgroups * c["WG"]
        self.own = {
            "lsym": gpu.buffer(4 * n + 16, S | C, "train_wordlist.lsym"),
            "nxt": gpu.buffer(4 * n + 16, S | C, "train_wordlist.nxt"),
            "prv": gpu.buffer(4 * n + 16, S | C, "train_wordlist.prv"),
            "wid_in": gpu.buffer(4 * n + 16, S | C, "train_wordlist.wid"),
            "tlist": gpu.buffer(8 * (256 + num_merges), S | C, "train_wordlist.tlist"),
            "pool": gpu.buffer(4 * pool_size, S | C, "train_wordlist.pool"),
            "carry": gpu.buffer(16 * threads, S | C, "train_wordlist.carry"),
            "batch": gpu.buffer(4 * c["BATCH_WORDS"], S | C, "train_wordlist.batch"),
        }
        self.own.update(
            lchain=gpu.buffer(4 * (c["LC_HEAD"] + c["LC_REC"] * c["LC_CAP"]), S | C,
                              "train_long.lchain"),
            lblk=gpu.buffer(4 * c["LC_ITEMS"], S | C, "train_long.lblk"))
        gpu.device.queue.write_buffer(self.own["lchain"], 0, np.zeros(c["LC_HEAD"], np.uint32))
        uploads = {"lsym": sym, "wid_in": wid}
        # (buffer, offset, bytes or None: clear); on a GPU the whole upload now, no clears
        self.init: list = []
        for name, buf in self.own.items():
            data = uploads.get(name)
            if not is_cpu:
                if data is not None:
                    gpu.device.queue.write_buffer(buf, 0, data)
                continue
            raw = memoryview(np.ascontiguousarray(data)).cast("B") if data is not None else None
            end = int(buf.size) if raw is None else len(raw)
            self.init += [(buf, o, None if raw is None else raw[o:o + CPU_INIT_BYTES])
                          for o in range(0, end, CPU_INIT_BYTES)]
        self.rebind()

    def rebind(self) -> None:
        """Bind groups (after the table's buffers changed: its dirty-block lists are new and
        empty, so their lengths are set to 0 too), and the params that follow the table's size:
        the scratch entries find_max4's grid places per step (P.scatter_cap), merges per step."""
        c = self.info.consts
        self.bg = bind_groups(self.g, self.pipes, self.info, dict(self.table.buffers, **self.own),
                              "train_wordlist")
        groups = min(self.table.nblocks, FIND_WORKGROUPS, c["SCATTER_WORKGROUPS"])
        self.table.set_param("scatter_cap", min(self.scratch,
                                                groups * c["WG"] * c["SCATTER_ITEMS"]))
        most = MAX_MERGES_PER_STEP or c["BATCH_MAX"]
        # (the merge loop sizes the merges it reads back per batch by it)
        self.merges_per_step = max(1, min(int(most), c["BATCH_MAX"]))
        self.table.set_param("batch_max", self.merges_per_step)
        self.g.device.queue.write_buffer(self.table.buffers["state"], 4 * self.info.consts["S_DLEN"],
                                         np.zeros(2, np.uint32))

    def gpu_bytes(self) -> int:
        return sum(int(b.size) for b in self.own.values())

    def initial_state(self) -> dict:
        return {"S_N": self.n, "S_TOP": self.top}

    def init_pieces(self) -> list:
        """On a CPU adapter, the uploads of the stream (lsym, wid) and the clears of the other
        buffers, as functions of a command encoder, one submit each (CPU_INIT_BYTES: what a
        buffer's first use would otherwise write in one submit); on a GPU none (written at
        construction; wgpu zeroes the rest in the first submit)."""
        q = self.g.device.queue

        def piece(buf, off, data):
            def record(enc) -> None:
                if data is None:
                    enc.clear_buffer(buf, off, min(CPU_INIT_BYTES, int(buf.size) - off))
                else:
                    q.write_buffer(buf, off, data)   # (copied in the coming submit)
            return record

        todo, self.init = self.init, []      # (once; the stream's arrays let go)
        return [piece(*p) for p in todo]

    def record_setup(self, cp) -> None:
        """The links and byte lists from lsym (once, before the first count): wl_links,
        wl_list_offsets, wl_byte_lists."""
        per = self.info.consts["WG"] * self.info.consts["SETUP_ITEMS"]
        grid = self.g.grid(-(-self.n // per))
        raw_recorder().plan(cp, [(self.pipes[e], self.bg[e], g) for e, g in (
            ("wl_links", grid), ("wl_list_offsets", (1, 1)), ("wl_byte_lists", grid))])(1)

    def record_count(self, cp, merges_done: int, n: int) -> None:
        """clear_table + pair_count over the linked stream (its live pairs), then find_max4 over
        every block and find_max_super over every group (the merge steps keep them)."""
        grids = dict(self.table.count_grids(self.n),
                     find_max4=self.g.grid(min(self.table.nblocks, FIND_WORKGROUPS)),
                     find_max_super=self.g.grid(self.table.nsupers))
        raw_recorder().plan(cp, [(self.pipes[e], self.bg[e], grids[e]) for e in
                                 ("clear_table", "pair_count", "find_max4", "find_max_super")])(1)

    def count_plans(self, setup: bool) -> list[tuple[int | None, list]]:
        """The set-up (``setup``: before the first count) and the pair count as submits:
        ``[(S_WG0 or None, [(pipeline, bind group, grid), ...]), ...]``, one submit each. On a
        GPU one submit (:meth:`record_setup` + :meth:`record_count`); on a CPU adapter the
        passes over the stream are cut into submits of CPU_STREAM_SYMBOLS positions
        (pair_count's: CPU_COUNT_SYMBOLS), each at the state word S_WG0 = its first workgroup
        (a dispatch's work is a gap there), and find_max4 + find_max_super over the table are
        a submit of their own."""
        p, bg, c = self.pipes, self.bg, self.info.consts
        per = c["WG"] * c["SETUP_ITEMS"]
        total = -(-self.n // per)
        if not self.is_cpu:
            return [(None, [])]    # (recorded by record_setup / record_count)
        assert c["WG"] * c["PC_ITEMS"] == per   # the same positions per workgroup in all three

        def cut(symbols: int) -> list:
            step = max(1, symbols // per)
            return [(w, self.g.grid(min(step, total - w))) for w in range(0, total, step)]

        pieces = cut(CPU_STREAM_SYMBOLS)
        plans: list[tuple[int | None, list]] = []
        if setup:
            plans += [(w, [(p["wl_links"], bg["wl_links"], gr)]) for w, gr in pieces]
            plans += [(w, ([(p["wl_list_offsets"], bg["wl_list_offsets"], (1, 1))] if not w
                           else []) + [(p["wl_byte_lists"], bg["wl_byte_lists"], gr)])
                      for w, gr in pieces]
        grids = dict(self.table.count_grids(self.n),
                     find_max4=self.g.grid(min(self.table.nblocks, FIND_WORKGROUPS)),
                     find_max_super=self.g.grid(self.table.nsupers))
        plans += [(w, ([(p["clear_table"], bg["clear_table"], grids["clear_table"])] if not w
                       else []) + [(p["pair_count"], bg["pair_count"], gr)])
                  for w, gr in cut(CPU_COUNT_SYMBOLS)]
        plans.append((0, [(p[e], bg[e], grids[e]) for e in ("find_max4", "find_max_super")]))
        return plans

    def steps(self, k: int) -> list:
        """One step's dispatches (one or more merges): ``(entry, pipeline, bind group, grid)``."""
        grids = {"find_max4": self.g.grid(min(self.table.nblocks, FIND_WORKGROUPS)),
                 "wl_select": (1, 1), "wl_merge": self.g.grid(self.workgroups)}
        return [(e, self.pipes[e], self.bg[e], grids[e]) for e in STEP]

    def record_merges(self, cp, k0: int, cnt: int) -> None:
        """Record ``cnt`` steps (at least ``cnt`` merges from merge ``k0`` on) into the compute
        pass ``cp``."""
        raw_recorder().plan(cp, [s[1:] for s in self.steps(k0)])(cnt)

    def record_continue(self, cp, reps: int) -> None:
        """Record ``reps`` × (wl_continue: each carried walk resumed; a round of the long
        chains: lc_plan, lc_break, lc_scan, lc_apply), then lc_plan (drops the chains that
        ended, so S_PAUSE says whether anything is left)."""
        p, bg, lg = self.pipes, self.bg, self.long_grid
        plan = (p["lc_plan"], bg["lc_plan"], (1, 1))
        rec = raw_recorder()
        rec.plan(cp, [(p["wl_continue"], bg["wl_continue"], self.g.grid(self.workgroups)),
                      plan, *((p[e], bg[e], lg) for e in ("lc_break", "lc_scan", "lc_apply"))]
                 )(reps)
        rec.plan(cp, [plan])(1)

    def long_stats(self) -> dict:
        """The long-chain path's totals of the run (u32 counters, wrapping): chains handed
        over, chains walked serially because the table was full, rounds that merged, and
        chains given back to a carried walk (in a step of several merges: another member's
        occurrence followed the run)."""
        c = self.info.consts
        h = self.g.read_u32(self.own["lchain"], 0, c["LC_HEAD"], what="long-chain counters")
        return {"long_chains": int(h[c["LH_CHAINS"]]),
                "long_chains_serial": int(h[c["LH_REFUSED"]]),
                "long_rounds": int(h[c["LH_ROUNDS"]]),
                "long_chains_resumed": int(h[c["LH_RESUMED"]])}
