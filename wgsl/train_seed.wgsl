// train_seed.wgsl — the seed's training pipeline (seed "Eğitim Pipeline"; DESIGN.md §3, §7):
// the stream of unique words compacted after every merge, in the seed's ten kernels:
//   clear_table → pair_count        (train_table.wgsl; once, and on a table rebuild)
//   find_max4                        (train_table.wgsl) per dirty 1024-slot block: its best
//   find_max_final_det               one workgroup: best of the blocks → merges[k]; stop when
//                                    < min_frequency
//   setup_merge                      one thread: stream length → indirect dispatch args
//   merge_reduce                     per 2048-symbol tile: last "run break" (A == B only)
//   scan_pass1                       one workgroup: exclusive prefix max of the run breaks
//   scan_pass2                       per tile: merge marks (left to right, non-overlapping),
//                                    keep flags → flags[], kept symbols per tile
//   scan_pass3                       one workgroup: exclusive prefix sum of the kept counts
//   finalize_compact                 per tile: subgroup-cooperative scan + merge apply +
//                                    scatter into the other stream buffer, and the exact
//                                    pair-count deltas (old pairs around each merge out, new in)
// 8 dispatches per merge (all recorded in one command buffer, many merges per submit).
// Deviations from the seed, and why:
//  * pair_count is not re-run per merge: the deltas of finalize_compact keep the table exact
//    and touch only the neighbourhood of each merge;
//  * merge_reduce and scan_pass1 run (indirect args ≠ 0) only when A == B, the one case with
//    overlapping occurrences (runs of A, merged left to right at even offsets from the run
//    start, however long the run: the start comes from a global prefix max).
// Bounded work per thread: tile loops ≤ ITEMS, one-workgroup loops ≤ tiles / 256.
//
// Bindings (group 0) of this file (train_table.wgsl has 0, 1, 7, 10–14):
//   2 args     : storage, read_write array<u32>  indirect dispatch args (3 × u32 at 0, 4, 8)
//   3 sym_in   : storage, read       array<u32>  current stream, symbol | TWS; ≥ S_NCUR
//   4 wid_in   : storage, read       array<u32>  word index of each symbol of sym_in
//   5 sym_out  : storage, read_write array<u32>  compacted stream (next step's sym_in)
//   6 wid_out  : storage, read_write array<u32>  word index of each symbol of sym_out
//   8 flags    : storage, read_write array<u32>  per symbol: bit0 merge starts here, bit1 alive
//                                               (not the right half of a merge), bit2 kept;
//                                               written only when A == B (else recomputed)
//   9 tiles    : storage, read_write array<u32>  [0, tile_cap): per-tile last run break (→ its
//                                               exclusive prefix max); [tile_cap, 2·tile_cap):
//                                               kept symbols per tile (→ exclusive prefix sum)
//#include train_table

@group(0) @binding(2) var<storage, read_write> args: array<u32>;
@group(0) @binding(3) var<storage, read> sym_in: array<u32>;
@group(0) @binding(4) var<storage, read> wid_in: array<u32>;
@group(0) @binding(5) var<storage, read_write> sym_out: array<u32>;
@group(0) @binding(6) var<storage, read_write> wid_out: array<u32>;
@group(0) @binding(8) var<storage, read_write> flags: array<u32>;
@group(0) @binding(9) var<storage, read_write> tiles: array<u32>;

const F_MERGE: u32 = 1u;
const F_ALIVE: u32 = 2u;
const F_KEEP: u32 = 4u;
const S_NCUR: u32 = 1u;     // stream length the running merge reads

var<workgroup> sh_cnt: atomic<u32>;

// ---- hooks of train_table.wgsl -----------------------------------------------------------------
fn stream_pair(i: u32, n: u32) -> vec4<u32> {
    if (i + 1u >= n) { return vec4<u32>(0u); }
    let s1 = sym_in[i + 1u];
    if ((s1 & TWS) != 0u) { return vec4<u32>(0u); }
    return vec4<u32>(sym_in[i] & IDM, s1 & IDM, wid_in[i], 1u);
}

fn step_blocked(first: bool) -> u32 { return atomicLoad(&state[S_STOP]); }

fn block_changed(blk: u32) {}

fn step_thread(t: u32, threads: u32) {}

fn scan_blocks() -> vec2<u32> { return vec2<u32>(P.nblocks, 0u); }   // every block, by index

fn scan_block(i: u32, list: u32) -> u32 { return i; }

fn block_listed(list: u32) -> bool { return false; }         // every block: the flags say

fn block_dirtied(blk: u32) {}

fn block_scanned(i: u32, list: u32, lid: u32, sg: vec3<u32>) {}

// Inclusive prefix max of `v` over the workgroup (Hillis–Steele in workgroup memory).
fn wg_incl_max(lid: u32, v: u32) -> u32 {
    var x = v;
    sh_a[lid] = x;
    workgroupBarrier();
    for (var d = 1u; d < WG; d <<= 1u) {
        var y = 0u;
        if (lid >= d) { y = sh_a[lid - d]; }
        workgroupBarrier();
        x = max(x, y);
        sh_a[lid] = x;
        workgroupBarrier();
    }
    return x;
}

// Inclusive prefix sum of `v` over the workgroup in lid order (Hillis–Steele).
fn wg_incl_add(lid: u32, v: u32) -> u32 {
    var x = v;
    sh_a[lid] = x;
    workgroupBarrier();
    for (var d = 1u; d < WG; d <<= 1u) {
        var y = 0u;
        if (lid >= d) { y = sh_a[lid - d]; }
        workgroupBarrier();
        x = x + y;
        sh_a[lid] = x;
        workgroupBarrier();
    }
    return x;
}


// ---- find_max_final_det: the deterministic global best → merges[k] -----------------------------
// The order (count desc, a asc, b asc) is total, so the result does not depend on slot order or
// thread scheduling.
@compute @workgroup_size(WG)
fn find_max_final_det(l: Lanes) {
    let lid = l.lid;
    let sg = lanes_sg(l);
    if (lid == 0u) { sh_u = atomicLoad(&state[S_STOP]); }
    if (workgroupUniformLoad(&sh_u) != 0u) { return; }
    let r = final_best(lid, sg);
    if (lid == 0u) {
        let k = atomicLoad(&state[S_K]);
        if (training_done(r, k)) {
            atomicStore(&state[S_STOP], 1u);
        } else {
            record_merge(k, r);
            atomicStore(&state[S_K], k + 1u);
        }
    }
}

// ---- setup_merge: size this merge's stream dispatches on the GPU -------------------------------
// Indirect args (u32 offsets into `args`): every tile (scan_pass2, finalize_compact); every tile
// if A == B (runs to resolve: merge_reduce) else none; one workgroup if A == B (scan_pass1)
// else none. Stopped: all none.
const ARGS_TILES: u32 = 0u;
const ARGS_RUN_TILES: u32 = 4u;
const ARGS_RUN_SCAN: u32 = 8u;
fn grid_args(off: u32, tiles_n: u32) {
    // 2-D grid, each side ≤ 65,535 (indirect args above that are silently a no-op).
    var gy = 1u;
    if (tiles_n > 65535u) { gy = (tiles_n + 65534u) / 65535u; }
    args[off] = (tiles_n + gy - 1u) / gy;
    args[off + 1u] = select(0u, gy, tiles_n > 0u);
    args[off + 2u] = 1u;
}

@compute @workgroup_size(1)
fn setup_merge() {
    let n = atomicLoad(&state[S_N]);
    atomicStore(&state[S_NCUR], n);
    var tiles_n = (n + TILE - 1u) / TILE;
    if (atomicLoad(&state[S_STOP]) != 0u) { tiles_n = 0u; }
    let runs = atomicLoad(&state[S_A]) == atomicLoad(&state[S_B]);
    grid_args(ARGS_TILES, tiles_n);
    grid_args(ARGS_RUN_TILES, select(0u, tiles_n, runs));
    grid_args(ARGS_RUN_SCAN, select(0u, 1u, runs && tiles_n > 0u));
}

// ---- stream helpers ------------------------------------------------------------------------------
// Stream kernels: one tile = WG threads × ITEMS consecutive symbols per thread.
const ITEMS: u32 = 8u;
const TILE: u32 = WG * ITEMS;

// Whether position j is not the continuation of a run of A ("run break"; used when A == B).
fn is_break(j: u32, a: u32) -> bool {
    let s = sym_in[j];
    if ((s & IDM) != a || j == 0u || (s & TWS) != 0u) { return true; }
    return (sym_in[j - 1u] & IDM) != a;
}

// Whether the merge (A, B) starts at position j; rsj = start of j's run (A == B only):
// runs of A are merged left to right, pairs at even offsets from the run start.
fn is_merge(j: u32, rsj: u32, n: u32, a: u32, b: u32) -> bool {
    if (j + 1u >= n) { return false; }
    let s0 = sym_in[j];
    let s1 = sym_in[j + 1u];
    if ((s1 & TWS) != 0u || (s0 & IDM) != a || (s1 & IDM) != b) { return false; }
    return a != b || ((j - rsj) & 1u) == 0u;
}

struct StreamCtx {
    n: u32,
    a: u32,
    b: u32,
    c: u32,
}

fn load_ctx(lid: u32) -> StreamCtx {
    if (lid == 0u) {
        sh_u = atomicLoad(&state[S_NCUR]);
        sh_v = atomicLoad(&state[S_A]);
        sh_w = atomicLoad(&state[S_B]);
    }
    let n = workgroupUniformLoad(&sh_u);
    let a = workgroupUniformLoad(&sh_v);
    let b = workgroupUniformLoad(&sh_w);
    return StreamCtx(n, a, b, atomicLoad(&state[S_C]));
}

// Last run break among this thread's ITEMS positions starting at `first` (0 if none).
fn thread_last_break(first: u32, n: u32, a: u32) -> u32 {
    var v = 0u;
    for (var j = 0u; j < ITEMS; j++) {
        let i = first + j;
        if (i < n && is_break(i, a)) { v = i; }
    }
    return v;
}

// ---- merge_reduce: per tile, the last run break (input of the prefix max; A == B only) ---------
@compute @workgroup_size(WG)
fn merge_reduce(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let t = linear_id(wid, nwg);
    let ctx = load_ctx(lid);
    let ntiles = (ctx.n + TILE - 1u) / TILE;
    if (t >= ntiles) { return; }
    let v = thread_last_break(t * TILE + lid * ITEMS, ctx.n, ctx.a);
    let m = wg_incl_max(lid, v);
    if (lid == WG - 1u) { tiles[t] = m; }
}

// ---- scan_pass1 / scan_pass3: one-workgroup exclusive scans over the tiles ---------------------
// Each thread owns a contiguous chunk of ceil(ntiles / 256) tiles (bounded loop).
fn tile_scan(lid: u32, base: u32, count: u32, use_max: bool) -> u32 {
    let per = (count + WG - 1u) / WG;
    let lo = min(lid * per, count);
    let hi = min(lo + per, count);
    var acc = 0u;
    for (var j = lo; j < hi; j++) {
        let x = tiles[base + j];
        acc = select(acc + x, max(acc, x), use_max);
    }
    var incl: u32;
    if (use_max) { incl = wg_incl_max(lid, acc); } else { incl = wg_incl_add(lid, acc); }
    var run = select(incl - acc, 0u, use_max);
    if (use_max) {
        workgroupBarrier();
        sh_b[lid] = incl;
        workgroupBarrier();
        if (lid > 0u) { run = sh_b[lid - 1u]; }
    }
    for (var j = lo; j < hi; j++) {
        let x = tiles[base + j];
        tiles[base + j] = run;
        run = select(run + x, max(run, x), use_max);
    }
    workgroupBarrier();
    if (lid == WG - 1u) { sh_u = incl; }
    return workgroupUniformLoad(&sh_u);
}

// Dispatched (indirectly) only when A == B.
@compute @workgroup_size(WG)
fn scan_pass1(@builtin(local_invocation_index) lid: u32) {
    let ctx = load_ctx(lid);
    let ntiles = (ctx.n + TILE - 1u) / TILE;
    tile_scan(lid, 0u, ntiles, true);
}

@compute @workgroup_size(WG)
fn scan_pass3(@builtin(local_invocation_index) lid: u32) {
    if (lid == 0u) { sh_x = atomicLoad(&state[S_STOP]); }
    let stop = workgroupUniformLoad(&sh_x);
    let ctx = load_ctx(lid);
    if (stop != 0u) { return; }
    let ntiles = (ctx.n + TILE - 1u) / TILE;
    let total = tile_scan(lid, P.tile_cap, ntiles, false);
    if (lid == 0u) { atomicStore(&state[S_N], total); }
}

// Flags of position i from its merge marks: alive = not the right half of a merge; kept =
// alive and not a word that is one symbol after this merge (it has no pairs: dropped).
fn make_flags(i: u32, n: u32, m_i: bool, m_prev: bool) -> u32 {
    let alive = !m_prev;
    var keep = alive;
    if (alive && (sym_in[i] & TWS) != 0u) {
        let k = i + select(1u, 2u, m_i);
        keep = k < n && (sym_in[k] & TWS) == 0u;
    }
    return select(0u, F_MERGE, m_i) | select(0u, F_ALIVE, alive) | select(0u, F_KEEP, keep);
}

// ---- scan_pass2: merge marks and keep flags per symbol, kept count per tile --------------------
@compute @workgroup_size(WG)
fn scan_pass2(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let t = linear_id(wid, nwg);
    let ctx = load_ctx(lid);
    let n = ctx.n;
    let ntiles = (n + TILE - 1u) / TILE;
    if (t >= ntiles) { return; }
    if (lid == 0u) { atomicStore(&sh_cnt, 0u); }
    let first = t * TILE + lid * ITEMS;
    let same = ctx.a == ctx.b;
    // rs = start of the current run of A: the last break before this thread's first position
    // (carried in from earlier tiles and earlier threads of this tile), then updated per item.
    var rs = 0u;
    if (same) {
        let carry = tiles[t];
        let v = thread_last_break(first, n, ctx.a);
        let incl = wg_incl_max(lid, v);
        workgroupBarrier();
        sh_b[lid] = incl;
        workgroupBarrier();
        rs = carry;
        if (lid > 0u) { rs = max(carry, sh_b[lid - 1u]); }
    } else {
        workgroupBarrier();
    }
    var m_prev = false;
    if (first > 0u && first - 1u < n) { m_prev = is_merge(first - 1u, rs, n, ctx.a, ctx.b); }
    var kept = 0u;
    for (var j = 0u; j < ITEMS; j++) {
        let i = first + j;
        if (i >= n) { break; }
        if (same && is_break(i, ctx.a)) { rs = i; }
        let m_i = is_merge(i, rs, n, ctx.a, ctx.b);
        let f = make_flags(i, n, m_i, m_prev);
        // A != B: finalize_compact recomputes the flags from the symbols (no run state), so
        // they are stored only for A == B: 8 bytes per symbol less traffic for most merges.
        if (same) { flags[i] = f; }
        kept += select(0u, 1u, (f & F_KEEP) != 0u);
        m_prev = m_i;
    }
    if (kept != 0u) { atomicAdd(&sh_cnt, kept); }
    workgroupBarrier();
    if (lid == 0u) { tiles[P.tile_cap + t] = atomicLoad(&sh_cnt); }
}

// ---- finalize_compact: scan + merge apply + scatter, and the pair-count deltas (seed §3) -------
// Merge mark / flags of position j < n: stored by scan_pass2 when A == B, else recomputed
// (for A != B occurrences cannot overlap, so the marks are local).
fn merged(j: u32, ctx: StreamCtx) -> bool {
    if (j >= ctx.n) { return false; }
    if (ctx.a == ctx.b) { return (flags[j] & F_MERGE) != 0u; }
    return is_merge(j, 0u, ctx.n, ctx.a, ctx.b);
}

fn flags_at(i: u32, ctx: StreamCtx) -> u32 {
    if (ctx.a == ctx.b) { return flags[i]; }
    let m_prev = i > 0u && is_merge(i - 1u, 0u, ctx.n, ctx.a, ctx.b);
    return make_flags(i, ctx.n, is_merge(i, 0u, ctx.n, ctx.a, ctx.b), m_prev);
}

@compute @workgroup_size(WG)
fn finalize_compact(@builtin(workgroup_id) wid: vec3<u32>,
                    @builtin(num_workgroups) nwg: vec3<u32>,
                    l: Lanes) {
    let lid = l.lid;
    let t = linear_id(wid, nwg);
    let ctx = load_ctx(lid);
    let n = ctx.n;
    let ntiles = (n + TILE - 1u) / TILE;
    if (t >= ntiles) { return; }
    let e = lanes_elem(l);
    let first = t * TILE + e * ITEMS;
    let tile_off = tiles[P.tile_cap + t];
    var kept = 0u;
    var fl: array<u32, ITEMS>;
    for (var j = 0u; j < ITEMS; j++) {
        let i = first + j;
        fl[j] = 0u;
        if (i < n) { fl[j] = flags_at(i, ctx); }
        if ((fl[j] & F_KEEP) != 0u) { kept += 1u; }
    }
//#if SUBGROUPS
    // Subgroup-cooperative exclusive scan (seed §3): lanes by subgroupExclusiveAdd, subgroup
    // totals through workgroup memory (any subgroup size: ≤ 128 totals summed serially).
    let local_excl = subgroupExclusiveAdd(kept);
    let sg_total = subgroupAdd(kept);
    if (l.lane == 0u) { sh_sg[l.sg_id] = sg_total; }
    workgroupBarrier();
    var base = 0u;
    for (var q = 0u; q < l.sg_id; q++) { base += sh_sg[q]; }
    var dst = tile_off + base + local_excl;
//#else
    var dst = tile_off + wg_incl_add(lid, kept) - kept;
//#endif
    for (var j = 0u; j < ITEMS; j++) {
        let i = first + j;
        if (i >= n) { break; }
        let f = fl[j];
        let s = sym_in[i];
        let id = s & IDM;
        let m_i = (f & F_MERGE) != 0u;
        let w = wid_in[i];
        if ((f & F_KEEP) != 0u) {
            sym_out[dst] = select(id, ctx.c, m_i) | (s & TWS);
            wid_out[dst] = w;
            dst += 1u;
        }
        // Pair-count deltas. Old pair (i, i+1) disappears if i or i+1 is part of a merge; new
        // pair (new(i), new(k)) appears if either side is a new symbol; the rest is unchanged.
        // Only symbols next to a merge change anything: the flags decide before any weight
        // or neighbour symbol is read.
        let m_next = merged(i + 1u, ctx);
        let m_before = i > 0u && merged(i - 1u, ctx);
        if (!(m_i || m_next || m_before)) { continue; }
        let lo = weights[2u * w];
        let hi = weights[2u * w + 1u];
        if (i + 1u < n) {
            let s1 = sym_in[i + 1u];
            if ((s1 & TWS) == 0u) { pair_delta(id, s1 & IDM, lo, hi, true); }
        }
        if ((f & F_ALIVE) != 0u) {
            let k = i + select(1u, 2u, m_i);
            if (k < n) {
                let sk = sym_in[k];
                let m_k = merged(k, ctx);
                if ((sk & TWS) == 0u && (m_i || m_k)) {
                    pair_delta(select(id, ctx.c, m_i), select(sk & IDM, ctx.c, m_k), lo, hi,
                               false);
                }
            }
        }
    }
}
