"""Benchmark: the floor under one sequential merge step — dispatches vs an in-kernel grid barrier.

A BPE merge step needs the whole device to agree twice: on the best pair (every workgroup
reduces the per-block maxima) and on the counts after the merge (before the next maxima). The
trainer gets that agreement from dispatch boundaries (2 dispatches per merge, train.wgsl
"word-list path"). This script measures the same step with no word walked:

* ``dispatch``: per step, ``step_reduce`` (every workgroup reduces ``nblocks`` block maxima;
  the step's workgroup records the winner) then ``step_touch`` (one thread lowers the winner and
  raises another block) — two dispatches, as the trainer records them (raw wgpu-native calls, one submit);
* ``persistent``: one dispatch of ``nwg`` workgroups that loops over the steps and separates
  the two phases with a grid barrier (an atomic arrival counter + generation word, spun on by one
  thread per workgroup); all shared data is read with atomics (L2, coherent between SMs);
* ``barrier``: the persistent loop with no reduction (two grid barriers per step only).

Both variants compute the same winners (checked: the per-step records must be equal).

The persistent variant is an experiment, not a path the trainer can take: WebGPU promises no
forward progress between workgroups (a grid barrier hangs when not every workgroup is resident;
lavapipe runs workgroups a few at a time), so a spin that exceeds ``--max-spins`` sets a flag
and the result is reported as invalid rather than hanging.

Usage::

    python3 benchmarks/step_floor.py                       # 16,384 steps, 1,024 block maxima
    python3 benchmarks/step_floor.py --nblocks 64 4096 --workgroups 66 132
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

from benchmarks._report import print_footer, raw_recording_calls  # noqa: E402

SRC = """
struct Params { steps: u32, nblocks: u32, nwg: u32, max_spins: u32, mode: u32, k0: u32,
                p1: u32, p2: u32 }
@group(0) @binding(0) var<storage, read_write> bar: array<atomic<u32>>;   // arrivals, generation, timed out
@group(0) @binding(1) var<storage, read_write> best: array<atomic<u32>>;  // per block: value
@group(0) @binding(2) var<storage, read_write> rec: array<atomic<u32>>;   // per step: winner
@group(0) @binding(3) var<uniform> P: Params;

const WG: u32 = 256u;
var<workgroup> sh_v: array<u32, 256>;
var<workgroup> sh_i: array<u32, 256>;

// Larger value wins; ties to the smaller block index (a total order, as the trainer's).
fn better(v: u32, i: u32, bv: u32, bi: u32) -> bool {
    return v > bv || (v == bv && i < bi);
}

// Every thread: (value, block) of the best block maximum.
fn reduce_best(lid: u32) -> vec2<u32> {
    var bv = 0u;
    var bi = 0xFFFFFFFFu;
    for (var j0 = 0u; j0 < P.nblocks; j0 += 4u * WG) {
        var v: array<u32, 4>;
        for (var u = 0u; u < 4u; u++) {
            let j = j0 + u * WG + lid;
            v[u] = 0u;
            if (j < P.nblocks) { v[u] = atomicLoad(&best[j]); }
        }
        for (var u = 0u; u < 4u; u++) {
            let j = j0 + u * WG + lid;
            if (j < P.nblocks && better(v[u], j, bv, bi)) { bv = v[u]; bi = j; }
        }
    }
    sh_v[lid] = bv;
    sh_i[lid] = bi;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s && better(sh_v[lid + s], sh_i[lid + s], sh_v[lid], sh_i[lid])) {
            sh_v[lid] = sh_v[lid + s];
            sh_i[lid] = sh_i[lid + s];
        }
        workgroupBarrier();
    }
    let r = vec2<u32>(sh_v[0], sh_i[0]);
    workgroupBarrier();
    return r;
}

// The step's effect (after every workgroup has reduced): lower the recorded winner and raise a
// pseudo-random other block (as a merge lowers its pair and raises new ones).
fn apply(k: u32) {
    let w = atomicLoad(&rec[k]);
    atomicStore(&best[w], atomicLoad(&best[w]) / 2u);
    let o = (w * 2654435761u + k) % P.nblocks;
    atomicStore(&best[o], atomicLoad(&best[o]) + 1u);
}

var<workgroup> sh_flag: u32;

// Grid barrier number `k` (1, 2, ...): arrivals only grow, so no reset races.
fn grid_barrier(lid: u32, k: u32) {
    workgroupBarrier();
    if (lid == 0u) {
        let n = atomicAdd(&bar[0], 1u) + 1u;
        if (n == k * P.nwg) {
            atomicStore(&bar[1], k);
        } else {
            for (var s = 0u; s < P.max_spins; s++) {
                if (atomicLoad(&bar[1]) >= k) { break; }
            }
            if (atomicLoad(&bar[1]) < k) { atomicStore(&bar[2], 1u); }
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(256)
fn persistent(@builtin(local_invocation_index) lid: u32,
              @builtin(workgroup_id) wid: vec3<u32>) {
    var nb = 0u;
    for (var k = 0u; k < P.steps; k++) {
        if (P.mode == 1u) {
            let r = reduce_best(lid);
            if (wid.x == k % P.nwg && lid == 0u) { atomicStore(&rec[k], r.y); }
        }
        nb += 1u;
        grid_barrier(lid, nb);
        if (P.mode == 1u && wid.x == 0u && lid == 0u) { apply(k); }
        nb += 1u;
        grid_barrier(lid, nb);
    }
}

@compute @workgroup_size(256)
fn step_reduce(@builtin(local_invocation_index) lid: u32,
               @builtin(workgroup_id) wid: vec3<u32>) {
    if (lid == 0u) { sh_flag = atomicLoad(&bar[3]); }
    let k = workgroupUniformLoad(&sh_flag);
    let r = reduce_best(lid);
    if (wid.x == k % P.nwg && lid == 0u) { atomicStore(&rec[k], r.y); }
}

@compute @workgroup_size(1)
fn step_touch() { apply(atomicAdd(&bar[3], 1u)); }
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=16384)
    ap.add_argument("--nblocks", type=int, nargs="+", default=[64, 1024, 4096])
    ap.add_argument("--workgroups", type=int, nargs="+", default=[132])
    ap.add_argument("--max-spins", type=int, default=1 << 22)
    args = ap.parse_args()

    from torch_gpubpe.gpu import get_gpu

    g = get_gpu()
    wg_bytes = 2 * 256 * 4 + 4
    pipes = {e: g.pipeline("step_floor", e, workgroup_bytes=wg_bytes, source=SRC)
             for e in ("persistent", "step_reduce", "step_touch")}
    U = g.wgpu.BufferUsage
    S = U.STORAGE | U.COPY_SRC | U.COPY_DST
    set_pipeline, set_bind_group, dispatch, _, null = raw_recording_calls()
    rng = np.random.default_rng(0)
    rows = []
    for nwg in args.workgroups:
        for nblocks in args.nblocks:
            init = rng.integers(1, 1 << 20, nblocks, dtype=np.uint32)
            recs = {}
            for variant in ("dispatch", "persistent", "barrier"):
                bar = g.buffer(16, S, "bar")
                best = g.buffer(4 * nblocks, S, "best")
                rec = g.buffer(4 * args.steps, S, "rec")
                par = g.buffer(32, U.UNIFORM | U.COPY_DST, "params")
                g.device.queue.write_buffer(best, 0, init)
                mode = 0 if variant == "barrier" else 1
                g.device.queue.write_buffer(par, 0, np.array(
                    [args.steps, nblocks, nwg, args.max_spins, mode, 0, 0, 0], np.uint32))
                bgs = {e: g.bind_group(p, {0: bar, 1: best, 2: rec, 3: par})
                       for e, p in pipes.items() if e != "step_touch"}
                bgs["step_touch"] = g.bind_group(pipes["step_touch"], {0: bar, 1: best, 2: rec, 3: par})
                g.read_u32(bar, 0, 1)                 # idle before timing
                enc = g.device.create_command_encoder()
                cp = enc.begin_compute_pass()
                c = cp._internal
                t0 = time.perf_counter()
                if variant == "dispatch":
                    plan = [(pipes[e]._internal, bgs[e]._internal, n)
                            for e, n in (("step_reduce", nwg), ("step_touch", 1))]
                    for _ in range(args.steps):
                        for p, b, n in plan:
                            set_pipeline(c, p)
                            set_bind_group(c, 0, b, 0, null)
                            dispatch(c, n, 1, 1)
                else:
                    set_pipeline(c, pipes["persistent"]._internal)
                    set_bind_group(c, 0, bgs["persistent"]._internal, 0, null)
                    dispatch(c, nwg, 1, 1)
                cp.end()
                cb = enc.finish()
                t1 = time.perf_counter()
                g.device.queue.submit([cb])
                state = g.read_u32(bar, 0, 4)
                t2 = time.perf_counter()
                ok = not state[2]
                if variant != "barrier":
                    recs[variant] = g.read_u32(rec, 0, args.steps)
                rows.append([nwg, nblocks, variant, 1e6 * (t2 - t1) / args.steps,
                             1e6 * (t1 - t0) / args.steps, ok])
            same = bool(np.array_equal(recs["dispatch"], recs["persistent"]))
            for r in rows[-3:]:
                r.append(same if r[2] != "barrier" else "")
    print(f"adapter: {g.adapter_name}")
    print("| workgroups | block maxima | variant | GPU µs per step (submit + wait) "
          "| host µs per step to record | barrier held | same winners |")
    print("|---:|---:|---|---:|---:|---|---|")
    for nwg, nb, v, gpu, host, ok, same in rows:
        print(f"| {nwg} | {nb:,} | {v} | {gpu:.2f} | {host:.2f} | {'yes' if ok else 'NO'} "
              f"| {same if same == '' else ('yes' if same else 'NO')} |")
    print(f"\nsteps: {args.steps:,}", end="")
    print_footer()


if __name__ == "__main__":
    main()
