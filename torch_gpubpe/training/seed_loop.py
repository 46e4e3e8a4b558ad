"""``algorithm="seed"``: the seed's training pipeline (``wgsl/train_seed.wgsl``; seed
"Eğitim Pipeline", DESIGN.md §7).

The stream of unique words (symbol | bit 31 at word starts, a word index per symbol) is compacted
after every merge, in the seed's kernels and order: ``clear_table → pair_count`` once, then per
merge ``find_max4 → find_max_final_det → setup_merge → merge_reduce → scan_pass1 → scan_pass2 →
scan_pass3 → finalize_compact`` (8 dispatches; the stream kernels sized on the GPU through
indirect dispatch). The pair table is kept exact by finalize_compact's deltas (the seed re-counts
it per merge). Each merge walks the whole stream, so its cost grows with the corpus's unique
words; the default :mod:`~torch_gpubpe.training.wordlist_loop` walks only the words that hold the pair.

:class:`SeedKernels` is built once per run (buffers, bind groups); :meth:`record_merges` and
:meth:`record_count` only record into a compute pass: the driver
(:mod:`torch_gpubpe.training.trainer`) owns submits and readbacks.
"""

from __future__ import annotations

import numpy as np

from torch_gpubpe.gpu.wgpu_internals import raw_recorder
from torch_gpubpe.training.pair_table import PairTable, bind_groups

SHADER = "train_seed"
STEP = ("find_max4", "find_max_final_det", "setup_merge", "merge_reduce", "scan_pass1",
        "scan_pass2", "scan_pass3", "finalize_compact")
# Which indirect-args triple (train_seed.wgsl ARGS_*) sizes each stream kernel.
_INDIRECT = {"merge_reduce": "ARGS_RUN_TILES", "scan_pass1": "ARGS_RUN_SCAN",
             "scan_pass2": "ARGS_TILES", "finalize_compact": "ARGS_TILES"}


class SeedKernels:
    """The seed pipeline's buffers and bind groups for one run.

    Args:
        gpu, pipes, info: the device, entry point → pipeline, the parsed shader.
        table: the run's :class:`~torch_gpubpe.training.pair_table.PairTable`.
        sym: uint32, shape ``(n,)``: the stream, id | TWS at word starts.
        wid: uint32, shape ``(n,)``: the word of each symbol.
    """

    STEP = STEP
    name = "seed"
    merges_per_step = 1

    def __init__(self, gpu, pipes: dict, info, table: PairTable, sym: np.ndarray,
                 wid: np.ndarray) -> None:
        self.g, self.pipes, self.info, self.table = gpu, pipes, info, table
        c = info.consts
        self.n = n = len(sym)
        self.tile = c["TILE"]
        U = gpu.wgpu.BufferUsage
        S, C = U.STORAGE, U.COPY_DST | U.COPY_SRC
        self.own = {
            "sym0": gpu.buffer(4 * n + 16, S | C, "train_seed.sym0"),
            "sym1": gpu.buffer(4 * n + 16, S | C, "train_seed.sym1"),
            "wid0": gpu.buffer(4 * n + 16, S | C, "train_seed.wid0"),
            "wid1": gpu.buffer(4 * n + 16, S | C, "train_seed.wid1"),
            "flags": gpu.buffer(4 * n + 16, S, "train_seed.flags"),
            "tiles": gpu.buffer(8 * table.params["tile_cap"], S, "train_seed.tiles"),
            "args": gpu.buffer(48, S | U.INDIRECT | C, "train_seed.args"),
        }
        q = gpu.device.queue
        q.write_buffer(self.own["sym0"], 0, sym)
        q.write_buffer(self.own["wid0"], 0, wid)
        self.indirect = {k: 4 * c[v] for k, v in _INDIRECT.items()}
        self.rebind()

    @staticmethod
    def tile_cap(n: int, tile: int) -> int:
        return (n + tile - 1) // tile + 1

    def rebind(self) -> None:
        """Bind groups for both stream parities (after the table's buffers changed)."""
        o = self.own
        self.bgs = []
        for p in (0, 1):
            bufs = dict(self.table.buffers, args=o["args"], flags=o["flags"], tiles=o["tiles"],
                        sym_in=o[f"sym{p}"], wid_in=o[f"wid{p}"],
                        sym_out=o[f"sym{1 - p}"], wid_out=o[f"wid{1 - p}"])
            self.bgs.append(bind_groups(self.g, self.pipes, self.info, bufs, f"train_seed.{p}"))

    def gpu_bytes(self) -> int:
        return sum(int(b.size) for b in self.own.values())

    def record_count(self, cp, merges_done: int, n: int) -> None:
        """clear_table + pair_count over the current stream of ``n`` symbols (its buffer
        follows from ``merges_done``)."""
        bg = self.bgs[merges_done % 2]
        grids = self.table.count_grids(n)
        raw_recorder().plan(cp, [(self.pipes[e], bg[e], grids[e])
                                 for e in ("clear_table", "pair_count")])(1)

    def steps(self, k: int) -> list:
        """Merge k's dispatches: ``(entry, pipeline, bind group, grid)``; an indirect grid is
        ``(args buffer, byte offset)``."""
        bg = self.bgs[k % 2]
        out = []
        for e in STEP:
            if e in self.indirect:
                grid = (self.own["args"], self.indirect[e])
            elif e == "find_max4":
                grid = self.g.grid(self.table.nblocks)
            else:
                grid = (1, 1)
            out.append((e, self.pipes[e], bg[e], grid))
        return out

    def record_merges(self, cp, k0: int, cnt: int) -> None:
        """Record merges ``k0 .. k0+cnt-1`` into the compute pass ``cp``."""
        rec = raw_recorder()
        first = [s[1:] for s in self.steps(k0)]
        second = [s[1:] for s in self.steps(k0 + 1)]
        rec.plan(cp, first + second)(cnt // 2)
        if cnt & 1:
            rec.plan(cp, first)(1)
