"""The pair table both training algorithms share (``wgsl/train_table.wgsl``).

Holds what :mod:`~torch_gpubpe.training.seed_loop` and :mod:`~torch_gpubpe.training.wordlist_loop` have in
common: the run's params, state words, word weights and merge list, the open-addressing pair
table (keys, 64-bit counts, per-1024-slot dirty flags and block bests), the pipelines of a
training shader and the bind groups built from it. Every binding number, state index, struct
field and workgroup-memory size is read from the WGSL (:func:`~torch_gpubpe.gpu.shaders.parse_wgsl`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from torch_gpubpe.gpu.shaders import ShaderInfo, shader_info


def training_shader(gpu, name: str) -> ShaderInfo:
    """The parsed ``wgsl/<name>.wgsl`` (with train_table.wgsl) for ``gpu``'s flags."""
    return shader_info(name, gpu.flags)


def local_slots(gpu, info: ShaderInfo) -> int:
    """pair_count's workgroup hash-table slots (override LSLOTS): the largest power of two
    ≤ its default whose parsed workgroup memory fits the adapter."""
    slots = int(info.overrides["LSLOTS"])
    while slots > 64 and info.workgroup_bytes("pair_count", {"LSLOTS": slots}) \
            > gpu.max_workgroup_storage:
        slots //= 2
    return slots


def compile_pipelines(gpu, name: str, constants: Mapping[str, int]) -> dict:
    """Entry point → compute pipeline for every entry point of training shader ``name``
    (compiled several at once; gpu.pipeline caches them and checks each one's parsed
    workgroup memory)."""
    info = training_shader(gpu, name)
    return dict(zip(info.entry_points, gpu.compile_pipelines(
        (name, e, constants) for e in info.entry_points)))


def bind_groups(gpu, pipes: Mapping, info: ShaderInfo, buffers: Mapping, label: str) -> dict:
    """Entry point → bind group 0, each holding exactly the WGSL globals the entry point
    reaches (``buffers``: WGSL variable name → buffer)."""
    return {e: gpu.bind_group(pipes[e], {b: buffers[v] for v, b in
                                         info.entry_bindings(e).items()},
                              label=f"{label}.{e}")
            for e in pipes}


class PairTable:
    """Params, state, weights, merges and the pair table of one training run.

    Args:
        gpu: the :class:`~torch_gpubpe.gpu.device.GPU`.
        info: the parsed training shader (state indices, Params fields, COLS, BLOCK).
        num_merges: merge budget; min_frequency: the stop count (< 2^64).
        weights: uint32, shape ``(2·words,)``: each word's count as (lo, hi).
        rows: table rows (a power of two ≥ COLS).
        params: the algorithm's own Params fields (name → value).
    Attributes:
        buffers: WGSL variable name → buffer (``P``, ``state``, ``weights``, ``merges``,
            ``tkeys``, ``tcounts``, ``dirty``, ``best``).
        slots, nblocks: table slots (rows·COLS) and 1024-slot blocks.
    """

    def __init__(self, gpu, info: ShaderInfo, num_merges: int, min_frequency: int,
                 weights: np.ndarray, rows: int, params: Mapping[str, int], label: str) -> None:
        self.g, self.info, self.label = gpu, info, label
        self.c = info.consts
        self.num_merges = num_merges
        mf = min(int(min_frequency), (1 << 64) - 1)
        self.params = dict(params, num_merges=num_merges, min_freq_lo=mf & 0xFFFFFFFF,
                           min_freq_hi=mf >> 32)
        U = gpu.wgpu.BufferUsage
        S, C = U.STORAGE, U.COPY_DST | U.COPY_SRC
        nparams = len(info.structs["Params"])
        self.buffers = {
            "P": gpu.buffer(4 * nparams, U.UNIFORM | U.COPY_DST, f"{label}.params"),
            "state": gpu.buffer(4 * self.c["STATE_WORDS"], S | C, f"{label}.state"),
            "merges": gpu.buffer(16 * max(1, num_merges), S | C, f"{label}.merges"),
            "weights": gpu.buffer(4 * len(weights), S | C, f"{label}.weights"),
        }
        gpu.device.queue.write_buffer(self.buffers["weights"], 0, weights)
        self.resize(rows)

    def resize(self, rows: int) -> None:
        """(Re)create the table's buffers for ``rows`` rows (contents undefined: clear_table
        runs next) and write the params."""
        g, S = self.g, self.g.wgpu.BufferUsage.STORAGE
        self.rows = rows
        self.slots = rows * self.c["COLS"]
        self.nblocks = max(1, self.slots // self.c["BLOCK"])
        self.buffers.update(
            tkeys=g.buffer(4 * self.slots, S, f"{self.label}.table_keys"),
            tcounts=g.buffer(8 * self.slots, S, f"{self.label}.table_counts"),
            dirty=g.buffer(4 * self.nblocks, S, f"{self.label}.dirty"),
            best=g.buffer(16 * self.nblocks, S, f"{self.label}.block_best"),
        )
        if "SUPER" in self.c:      # word list: a level of super-block bests (SUPER blocks)
            self.nsupers = -(-self.nblocks // self.c["SUPER"])
            self.buffers.update(
                sbest=g.buffer(16 * self.nsupers, S, f"{self.label}.super_best"),
                sdirty=g.buffer(4 * self.nsupers, S, f"{self.label}.super_dirty"),
                # and the list of the blocks each merge made dirty (two halves), a stamp each
                dlist=g.buffer(8 * self.nblocks, S, f"{self.label}.dirty_list"),
                dmark=g.buffer(4 * self.nblocks, S, f"{self.label}.dirty_mark"),
                scnt=g.buffer(8 * self.nsupers, S, f"{self.label}.super_pending"))
            self.params["nsupers"] = self.nsupers
        self.params.update(rows=rows, nblocks=self.nblocks)
        fields = self.info.structs["Params"]
        unknown = set(self.params) - set(fields)
        if unknown:
            raise KeyError(f"Params has no fields {sorted(unknown)}")
        g.device.queue.write_buffer(self.buffers["P"], 0, np.array(
            [int(self.params.get(f, 0)) for f in fields], np.uint32))

    def write_state(self, **words: int) -> None:
        """Set state words by their WGSL names (``S_N=...``); the rest become 0."""
        state = np.zeros(self.c["STATE_WORDS"], np.uint32)
        for name, v in words.items():
            state[self.c[name]] = v
        self.g.device.queue.write_buffer(self.buffers["state"], 0, state)

    def set_state_word(self, name: str, value: int) -> None:
        self.g.device.queue.write_buffer(self.buffers["state"], 4 * self.c[name],
                                         np.array([value], np.uint32))

    def set_param(self, name: str, value: int) -> None:
        """Set one Params field (by its WGSL name) on the GPU and in :attr:`params`."""
        self.params[name] = int(value)
        at = list(self.info.structs["Params"]).index(name)
        self.g.device.queue.write_buffer(self.buffers["P"], 4 * at,
                                         np.array([int(value)], np.uint32))

    def count_grids(self, n: int) -> dict:
        """Grids of clear_table (one thread per slot) and pair_count (1024 symbols per
        workgroup) over a stream of ``n`` symbols."""
        wg, per = self.c["WG"], self.c["WG"] * self.c["PC_ITEMS"]
        return {"clear_table": self.g.grid(-(-self.slots // wg)),
                "pair_count": self.g.grid(-(-max(n, 1) // per))}

    def gpu_bytes(self) -> int:
        return sum(int(b.size) for b in self.buffers.values())
