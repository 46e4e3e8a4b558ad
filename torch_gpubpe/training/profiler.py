"""Per-kernel GPU times of the merge loop (``train(profile=True)``): timestamp queries around
each dispatch of sampled batches (WGPU_NOTES.md §6), averaged per merge step."""

from __future__ import annotations

import numpy as np

from torch_gpubpe.gpu.wgpu_internals import map_read_mode, timestamp_period_ns


class KernelProfiler:
    """Timestamp queries around each dispatch of sampled batches (WGPU_NOTES.md §6)."""

    MAX_MERGES = 64  # per sampled batch (2 timestamps × 8 kernels × 64 = 1024 queries)

    def __init__(self, gpu, steps: tuple) -> None:
        self.g = gpu
        self.steps = steps
        U = gpu.wgpu.BufferUsage
        self.n = 2 * len(steps) * self.MAX_MERGES
        self.qs = gpu.device.create_query_set(label="train.timestamps", type="timestamp",
                                              count=self.n)
        self.resolve_buf = gpu.buffer(8 * self.n, U.QUERY_RESOLVE | U.COPY_SRC, "train.ts")
        self.read_buf = gpu.buffer(8 * self.n, U.MAP_READ | U.COPY_DST, "train.ts_read")
        self.totals = {name: 0.0 for name in steps}
        self.merges = 0
        self.calls = 0
        self.used = 0
        self.names: list[str] = []
        self.ns_per_tick = timestamp_period_ns(gpu.device.queue)

    def wants(self, first_merge: int) -> bool:
        """Sample every 4th batch (the first is skipped: it includes lazy compilation)."""
        self.calls += 1
        return self.calls % 4 == 2

    def begin(self, enc, name: str, j: int):
        if j >= self.MAX_MERGES:
            return enc.begin_compute_pass(label=f"train.{name}")
        i = self.used
        self.used += 2
        self.names.append(name)
        return enc.begin_compute_pass(label=f"train.{name}", timestamp_writes={
            "query_set": self.qs, "beginning_of_pass_write_index": i,
            "end_of_pass_write_index": i + 1})

    def resolve(self, enc) -> None:
        if self.used:
            enc.resolve_query_set(self.qs, 0, self.used, self.resolve_buf, 0)
            enc.copy_buffer_to_buffer(self.resolve_buf, 0, self.read_buf, 0, 8 * self.used)

    def collect(self) -> None:
        if not self.used:
            return
        self.g.wait_map(self.read_buf, map_read_mode(), 0, 8 * self.used, "timestamp readback")
        t = np.frombuffer(self.read_buf.read_mapped(0, 8 * self.used), np.uint64).astype(np.int64)
        self.read_buf.unmap()
        for j, name in enumerate(self.names):
            self.totals[name] += max(0, int(t[2 * j + 1] - t[2 * j])) * self.ns_per_tick / 1e3
        self.merges += len(self.names) // len(self.steps)
        self.used = 0
        self.names = []

    def per_merge_us(self) -> dict[str, float]:
        m = max(1, self.merges)
        return {name: v / m for name, v in self.totals.items()}
