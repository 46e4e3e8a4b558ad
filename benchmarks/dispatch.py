"""Benchmark: the fixed cost of a compute dispatch through wgpu-py (host recording, GPU time).

Records N dispatches of a tiny kernel (one atomic add by one thread) into one compute pass
with wgpu-native's raw calls (as the trainer records its merges), submits once and waits:
host µs per dispatch recorded, GPU (submit + wait) µs per dispatch. Consecutive dispatches
that write the same storage buffer are ordered by barriers, as the trainer's are. This is the
floor under a training step's dispatches (torch_gpubpe/trainer.py, "What bounds the time").

Usage::

    python3 benchmarks/dispatch.py                    # grids of 1, 132, 1024 workgroups
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

from benchmarks._report import print_footer, raw_recording_calls  # noqa: E402

SRC = """
@group(0) @binding(0) var<storage, read_write> buf: array<atomic<u32>>;
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    if (lid == 0u && wid.x == 0u) { atomicAdd(&buf[0], 1u); }
}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dispatches", type=int, nargs="+", default=[2000, 20000])
    ap.add_argument("--workgroups", type=int, nargs="+", default=[1, 132, 1024])
    args = ap.parse_args()

    from torch_gpubpe.gpu import get_gpu

    g = get_gpu()
    pipe = g.pipeline("dispatch_bench", "main", workgroup_bytes=0, source=SRC)
    U = g.wgpu.BufferUsage
    buf = g.buffer(64, U.STORAGE | U.COPY_SRC | U.COPY_DST, "bench")
    bg = g.bind_group(pipe, [buf])
    set_pipeline, set_bind_group, dispatch, _, null = raw_recording_calls()
    rows = []
    for wgs in args.workgroups:
        for n in args.dispatches:
            enc = g.device.create_command_encoder()
            cp = enc.begin_compute_pass()
            c = cp._internal
            t0 = time.perf_counter()
            for _ in range(n):
                set_pipeline(c, pipe._internal)
                set_bind_group(c, 0, bg._internal, 0, null)
                dispatch(c, wgs, 1, 1)
            cp.end()
            cb = enc.finish()
            t1 = time.perf_counter()
            g.device.queue.submit([cb])
            g.read_u32(buf, 0, 1)
            t2 = time.perf_counter()
            rows.append((wgs, n, 1e6 * (t1 - t0) / n, 1e6 * (t2 - t1) / n))
    print(f"adapter: {g.adapter_name}")
    print("| workgroups per dispatch | dispatches | host µs to record | GPU µs (submit + wait) |")
    print("|---:|---:|---:|---:|")
    for wgs, n, host, gpu in rows:
        print(f"| {wgs} | {n:,} | {host:.2f} | {gpu:.2f} |")
    print_footer()


if __name__ == "__main__":
    main()
