// train.wgsl — GPU BPE training (DESIGN.md §3; seed "Eğitim Pipeline", §2 two-level pair count,
// §3 subgroup-cooperative compaction).
//
// The trainer works on the *unique words* of the corpus (DESIGN.md §3: "words may be
// deduplicated with counts first"), concatenated into one symbol stream:
//   symbol = token id (18 bits, ids < 2^18) | TWS on the first symbol of every word.
// Deviation from the seed/§2: the word-start flag is bit 31 (TWS), not WORD_START_BIT = 0x10000,
// because training ids reach 2^18 - 1 and bit 16 is an id bit above 65,535.
// Every symbol carries the index of its word; the word's weight (its count, a 64-bit integer
// split into lo/hi u32) multiplies every pair the word holds.
//
// Two paths, same merges (the host picks; see "word-list path" at the end of this file):
//  * sparse (default): the stream stays in place, words linked by nxt, and an index of the
//    words each token occurs in; per merge wl_find_max4 → wl_merge walk only the words of the
//    rarer side of the pair (2 dispatches, no pass over the stream);
//  * dense (words longer than the host's SPARSE_MAX_WORD, or on request), described next.
// One dense training step ("merge") is, in order (all recorded into one command buffer, many
// merges per submit, no readback per merge):
//   find_max4          per 1024-slot block of the pair table whose counts changed: the block's
//                      best (count desc, left asc, right asc) → best[]
//   find_max_final_det one workgroup: best of the blocks → merges[k]; stop when < min_frequency
//   setup_merge        one thread: stream length → indirect dispatch args (0 when stopped)
//   merge_reduce       per 2048-symbol tile: last "run break" (runs of A; only when A == B)
//   scan_pass1         one workgroup: exclusive prefix max of the tiles' run breaks (A == B)
//   scan_pass2         per tile: merge marks (left to right, non-overlapping), keep flags → flags[],
//                      kept symbols per tile
//   scan_pass3         one workgroup: exclusive prefix sum of the kept counts → tile offsets
//   finalize_compact   per tile: scan + merge apply + scatter into the other stream buffer, and
//                      the exact pair-count deltas (old pairs around each merge out, new ones in)
// clear_table + pair_count run once at the start (and on a rebuild): afterwards the pair table is
// updated by deltas, which is exact and touches only the neighbourhood of each merge.
// Deviations from the seed, and why:
//  * pair_count is not re-run per merge (the deltas replace it: same counts, far less work);
//  * merge_reduce and scan_pass1 only run (indirect args ≠ 0) when A == B, the only case with
//    overlapping occurrences to resolve (runs of A, merged left to right at even offsets from
//    the run start, however long the run: the start comes from a global prefix max);
//  * with FUSED = 1 (≤ 2048 tiles, the host's choice) scan_pass1 and scan_pass3 are folded into
//    scan_pass2 / finalize_compact, which reduce the earlier tiles' raw values themselves, and
//    setup_merge's work into find_max_final_det: 5 dispatches per merge instead of 8
//    (dispatches, not bytes, bound a merge of a small stream).
// Stream tiles are WG × ITEMS = 2048 consecutive symbols (8 per thread, bounded loops).
// Bounded work per thread everywhere: table probes ≤ MAX_PROBE, tile loops ≤ ITEMS, one-workgroup
// loops ≤ tiles / 256 or blocks / 256 (lavapipe stops a thread's loops after 65,535 iterations).
//
// Pair table: open addressing, 32 "columns" × rows (rows a power of two). A pair (a, b) is
// mapped by an invertible 3-round Feistel mix over 18+18 bits to (stored, col): col = 5 bits,
// stored = the other 31 bits; the pair lives in column col, so the key is recovered exactly
// from (stored, slot % 32) and fits one u32 for atomicCompareExchange. EMPTY = 0xFFFFFFFF
// (never a stored value: stored < 2^31). Rows are probed quadratically (triangular numbers).
// Counts are 64-bit: lo/hi u32 with the carry of every atomicAdd on lo added to hi, so sums
// over 2^32 are exact; subtraction adds the two's complement (mod 2^64).
//
// Bindings (group 0; each entry point uses a subset):
//   0 P        : uniform             Params      run constants (below)
//   1 state    : storage, read_write array<atomic<u32>>  S_* words below; length ≥ 16
//   2 args     : storage, read_write array<u32>  indirect dispatch args (3 × u32 each, at 0, 4,
//                                               8: see setup_merge); length ≥ 12
//   3 sym_in   : storage, read       array<u32>  current stream, symbol | TWS; length ≥ S_NCUR
//   4 wid_in   : storage, read       array<u32>  word index of each symbol of sym_in
//   5 sym_out  : storage, read_write array<u32>  compacted stream (next step's sym_in)
//   6 wid_out  : storage, read_write array<u32>  word index of each symbol of sym_out
//   7 weights  : storage, read       array<u32>  word counts, (lo, hi) per word; length 2·words
//   8 flags    : storage, read_write array<u32>  per symbol: bit0 merge starts here, bit1 alive
//                                               (not the right half of a merge), bit2 kept;
//                                               written only when A == B (else recomputed)
//   9 tiles    : storage, read_write array<u32>  [0, tile_cap): per-tile last run break (→ its
//                                               exclusive prefix max); [tile_cap, 2·tile_cap):
//                                               kept symbols per tile (→ exclusive prefix sum)
//  10 tkeys    : storage, read_write array<atomic<u32>>  pair table keys; length rows·32
//  11 tcounts  : storage, read_write array<atomic<u32>>  pair table counts (lo, hi); 2·rows·32
//  12 dirty    : storage, read_write array<u32>  per 1024-slot block: counts changed; nblocks
//  13 best     : storage, read_write array<u32>  per block: (count lo, count hi, a, b)
//  14 merges   : storage, read_write array<u32>  per merge: (a, b, count lo, count hi)
//  Sparse path only (see "word-list path" below; bindings 17 and 18 are unused):
//  15 lsym     : storage, read_write array<u32>  linked stream: id | TWS, DEAD once merged
//                                               away; length n (fixed for the run)
//  16 nxt      : storage, read_write array<u32>  per symbol: next live symbol of its word, NONE

struct Params {     // 48 bytes
    num_merges: u32,    // merge budget (vocab_size - 256 - specials)
    min_freq_lo: u32,   // min_frequency, 64-bit
    min_freq_hi: u32,
    rows: u32,          // pair-table rows (power of two); slots = rows * COLS
    nblocks: u32,       // slots / BLOCK
    tile_cap: u32,      // capacity of each half of `tiles` (≥ stream tiles + 1)
    max_walk: u32,      // sparse path: most steps of one word walk (≥ longest word + 1)
    list_iters: u32,    // sparse path: grid-stride rounds of wl_merge over a word list
    _pad3: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read_write> state: array<atomic<u32>>;
@group(0) @binding(2) var<storage, read_write> args: array<u32>;
@group(0) @binding(3) var<storage, read> sym_in: array<u32>;
@group(0) @binding(4) var<storage, read> wid_in: array<u32>;
@group(0) @binding(5) var<storage, read_write> sym_out: array<u32>;
@group(0) @binding(6) var<storage, read_write> wid_out: array<u32>;
@group(0) @binding(7) var<storage, read> weights: array<u32>;
@group(0) @binding(8) var<storage, read_write> flags: array<u32>;
@group(0) @binding(9) var<storage, read_write> tiles: array<u32>;
@group(0) @binding(10) var<storage, read_write> tkeys: array<atomic<u32>>;
@group(0) @binding(11) var<storage, read_write> tcounts: array<atomic<u32>>;
@group(0) @binding(12) var<storage, read_write> dirty: array<u32>;
@group(0) @binding(13) var<storage, read_write> best: array<u32>;
@group(0) @binding(14) var<storage, read_write> merges: array<u32>;
@group(0) @binding(15) var<storage, read_write> lsym: array<u32>;
@group(0) @binding(16) var<storage, read_write> nxt: array<u32>;

// ---- constants -------------------------------------------------------------------------------
const WG: u32 = 256u;              // threads per workgroup = symbols per tile
const TWS: u32 = 0x80000000u;      // word start flag of the training stream (see header)
const IDM: u32 = 0x3FFFFu;         // id bits (vocab ≤ 2^18)
const EMPTY: u32 = 0xFFFFFFFFu;
const COLS: u32 = 32u;             // table columns (5 key bits live in the slot index)
const BLOCK: u32 = 1024u;          // table slots per find_max4 workgroup (4 per thread)
const MAX_PROBE: u32 = 64u;        // bounded probing; past it the overflow flag is raised
const F_MERGE: u32 = 1u;
const F_ALIVE: u32 = 2u;
const F_KEEP: u32 = 4u;

// state words
const S_N: u32 = 0u;        // stream length after the last merge
const S_NCUR: u32 = 1u;     // stream length the running merge reads
const S_K: u32 = 2u;        // merges done
const S_STOP: u32 = 3u;     // 1: finished (budget reached or best count < min_frequency)
const S_A: u32 = 4u;        // running merge: left id
const S_B: u32 = 5u;        //                right id
const S_C: u32 = 6u;        //                new id
const S_OCC: u32 = 7u;      // occupied table slots
const S_OVERFLOW: u32 = 8u; // 1: a probe sequence ran out (host grows the table and restarts)
const S_CAPPED: u32 = 9u;   // sparse path: 1 = a loop of wl_merge stopped before its end (only
                            // lavapipe's 65,535-iteration cap does that): the host retrains on
                            // the dense path. (Words 10 and 11 are unused.)
const S_DONE: u32 = 12u;    // sparse path: 1 = wl_merge committed a merge whose S_K increment
                            // is pending (done by the next wl_find_max4); merges = S_K + S_DONE

// pair_count's workgroup hash table (seed: 1024 slots). 12 B per slot (key + 64-bit count);
// the host picks the largest power of two ≤ 2048 that fits the adapter's workgroup-storage
// limit (2048 on lavapipe's 32 KiB and the H200's 48 KiB): ≤ 1024 pairs per workgroup, so the
// load stays ≤ 1/2. LSLOTS / COLS rows per column.
override LSLOTS: u32 = 2048u;
// FUSED = 1 (host: at most FUSE_MAX_TILES tiles): scan_pass1, scan_pass3 and setup_merge are not
// dispatched; scan_pass2 and finalize_compact reduce the raw per-tile values of all earlier
// tiles themselves (O(tiles) reads per workgroup, cheap for ≤ 2048 tiles) and
// find_max_final_det sizes the dispatches.
override FUSED: u32 = 0u;
// 64-bit pair counts (1) or 32-bit ones (0: the sparse path, when the corpus's total pair count
// is below 2^31 — the host's margin below 2^32; see table_add). The dense path is always 1.
override WIDE: u32 = 1u;
const PC_ITEMS: u32 = 4u;          // symbols per pair_count thread (1024 per workgroup)

// ---- workgroup memory --------------------------------------------------------------------------
var<workgroup> lkeys: array<atomic<u32>, LSLOTS>;
var<workgroup> lcnt: array<atomic<u32>, 2u * LSLOTS>;
var<workgroup> sh_a: array<u32, WG>;
var<workgroup> sh_b: array<u32, WG>;
var<workgroup> sh_c: array<u32, WG>;
var<workgroup> sh_d: array<u32, WG>;
var<workgroup> sh_u: u32;
var<workgroup> sh_v: u32;
var<workgroup> sh_w: u32;
var<workgroup> sh_x: u32;
var<workgroup> sh_cnt: atomic<u32>;
var<workgroup> sh_sg: array<u32, 128>;

// ---- hashing and keys --------------------------------------------------------------------------
// fmix (the Murmur3 finaliser, seed §2) is in common.wgsl.

// (a, b) → (stored, col): invertible Feistel mix over 18 + 18 bits.
fn key_pack(a: u32, b: u32) -> vec2<u32> {
    var l = a;
    var r = b;
    l ^= fmix(r ^ 0x9E3779B9u) & IDM;
    r ^= fmix(l ^ 0x7F4A7C15u) & IDM;
    l ^= fmix(r ^ 0x85EBCA77u) & IDM;
    return vec2<u32>((l << 13u) | (r >> 5u), r & 31u);
}

fn key_unpack(stored: u32, col: u32) -> vec2<u32> {
    var l = stored >> 13u;
    var r = ((stored & 0x1FFFu) << 5u) | col;
    l ^= fmix(r ^ 0x85EBCA77u) & IDM;
    r ^= fmix(l ^ 0x7F4A7C15u) & IDM;
    l ^= fmix(r ^ 0x9E3779B9u) & IDM;
    return vec2<u32>(l, r);
}

fn row_home(stored: u32) -> u32 { return fmix(stored ^ 0x5bd1e995u); }

// Slot of `stored` in column `col` of the global table, inserting it if absent;
// EMPTY (and the overflow flag) when MAX_PROBE rows were all taken by other keys.
fn table_slot(stored: u32, col: u32) -> u32 {
    let mask = P.rows - 1u;
    var row = row_home(stored) & mask;
    for (var p = 1u; p <= MAX_PROBE; p++) {
        let slot = row * COLS + col;
        var cur = atomicLoad(&tkeys[slot]);
        if (cur == EMPTY) {
            let r = atomicCompareExchangeWeak(&tkeys[slot], EMPTY, stored);
            if (r.exchanged) {
                atomicAdd(&state[S_OCC], 1u);
                return slot;
            }
            cur = r.old_value;
            if (cur == EMPTY) {        // spurious weak-CAS failure: try this slot once more
                let r2 = atomicCompareExchangeWeak(&tkeys[slot], EMPTY, stored);
                if (r2.exchanged) {
                    atomicAdd(&state[S_OCC], 1u);
                    return slot;
                }
                cur = r2.old_value;
            }
        }
        if (cur == stored) { return slot; }
        row = (row + p) & mask;
    }
    atomicStore(&state[S_OVERFLOW], 1u);
    return EMPTY;
}

// Add the 64-bit value (lo, hi) to a table slot's count (mod 2^64) and mark its block dirty.
// WIDE = 0 (host: the corpus's total pair count is below 2^31, so no count, whatever the
// order of the adds, ends outside u32): the low word only, its old value unused (the GPU need
// not wait for the atomic), the high word stays 0.
fn table_add(slot: u32, lo: u32, hi: u32) {
    if (WIDE == 0u) {
        atomicAdd(&tcounts[2u * slot], lo);
    } else {
        let old = atomicAdd(&tcounts[2u * slot], lo);
        let h = hi + select(0u, 1u, old + lo < old);
        if (h != 0u) { atomicAdd(&tcounts[2u * slot + 1u], h); }
    }
    dirty[slot / BLOCK] = 1u;
}

// Add (sign=false) or subtract (sign=true) the 64-bit weight (lo, hi) to pair (a, b).
fn pair_delta(a: u32, b: u32, lo: u32, hi: u32, negative: bool) {
    let k = key_pack(a, b);
    let slot = table_slot(k.x, k.y);
    if (slot == EMPTY) { return; }
    if (negative) {
        table_add(slot, 0u - lo, ~hi + select(0u, 1u, lo == 0u));
    } else {
        table_add(slot, lo, hi);
    }
}

// (count desc, a asc, b asc): whether candidate x beats y. Entries are (lo, hi, a, b).
fn better(x: vec4<u32>, y: vec4<u32>) -> bool {
    if (x.y != y.y) { return x.y > y.y; }
    if (x.x != y.x) { return x.x > y.x; }
    if (x.z != y.z) { return x.z < y.z; }
    return x.w < y.w;
}

const NO_BEST: vec4<u32> = vec4<u32>(0u, 0u, 0xFFFFFFFFu, 0xFFFFFFFFu);

// Tree reduction of `v` over the workgroup by `better`; the result is valid in thread 0.
fn wg_best(lid: u32, v: vec4<u32>) -> vec4<u32> {
    sh_a[lid] = v.x;
    sh_b[lid] = v.y;
    sh_c[lid] = v.z;
    sh_d[lid] = v.w;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            let x = vec4<u32>(sh_a[lid], sh_b[lid], sh_c[lid], sh_d[lid]);
            let y = vec4<u32>(sh_a[lid + s], sh_b[lid + s], sh_c[lid + s], sh_d[lid + s]);
            if (better(y, x)) {
                sh_a[lid] = y.x;
                sh_b[lid] = y.y;
                sh_c[lid] = y.z;
                sh_d[lid] = y.w;
            }
        }
        workgroupBarrier();
    }
    return vec4<u32>(sh_a[0], sh_b[0], sh_c[0], sh_d[0]);
}

// wg_best with subgroup reductions where the adapter has them: 2 barriers instead of 9.
// sg = (lane, subgroup size, subgroup id); ignored (0) without subgroups. Result in every thread.
//#if SUBGROUPS
fn sg_best(v: vec4<u32>) -> vec4<u32> {
    let hi = subgroupMax(v.y);
    let lo = subgroupMax(select(0u, v.x, v.y == hi));
    let top = v.y == hi && v.x == lo;
    let a = subgroupMin(select(0xFFFFFFFFu, v.z, top));
    let b = subgroupMin(select(0xFFFFFFFFu, v.w, top && v.z == a));
    return vec4<u32>(lo, hi, a, b);
}
//#endif

fn wg_best_sg(lid: u32, v: vec4<u32>, sg: vec3<u32>) -> vec4<u32> {
//#if SUBGROUPS
    let lane = sg.x;
    let size = sg.y;
    let id = sg.z;
    let nsg = (WG + size - 1u) / size;
    let r = sg_best(v);
    if (lane == 0u) {
        sh_a[id] = r.x;
        sh_b[id] = r.y;
        sh_c[id] = r.z;
        sh_d[id] = r.w;
    }
    workgroupBarrier();
    if (id == 0u) {
        var x = NO_BEST;
        for (var j = lane; j < nsg; j += size) {
            let y = vec4<u32>(sh_a[j], sh_b[j], sh_c[j], sh_d[j]);
            if (better(y, x)) { x = y; }
        }
        let t = sg_best(x);
        if (lane == 0u) {
            sh_sg[0] = t.x;
            sh_sg[1] = t.y;
            sh_sg[2] = t.z;
            sh_sg[3] = t.w;
        }
    }
    workgroupBarrier();
    return vec4<u32>(sh_sg[0], sh_sg[1], sh_sg[2], sh_sg[3]);
//#else
    return wg_best(lid, v);
//#endif
}

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

// Workgroup-wide max / sum of `v`, returned to every thread.
fn wg_total_max(lid: u32, v: u32) -> u32 {
    _ = wg_incl_max(lid, v);
    let total = sh_a[WG - 1u];
    workgroupBarrier();
    return total;
}

fn wg_total_add(lid: u32, v: u32) -> u32 {
    _ = wg_incl_add(lid, v);
    let total = sh_a[WG - 1u];
    workgroupBarrier();
    return total;
}

fn linear_id(wid: vec3<u32>, nwg: vec3<u32>) -> u32 { return linear_workgroup(wid, nwg); }

// ---- clear_table: empty the pair table, mark every block dirty ---------------------------------
@compute @workgroup_size(WG)
fn clear_table(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let slot = linear_id(wid, nwg) * WG + lid;
    if (slot == 0u) {
        atomicStore(&state[S_OCC], 0u);
        atomicStore(&state[S_OVERFLOW], 0u);
    }
    if (slot >= P.rows * COLS) { return; }
    atomicStore(&tkeys[slot], EMPTY);
    atomicStore(&tcounts[2u * slot], 0u);
    atomicStore(&tcounts[2u * slot + 1u], 0u);
    if (slot % BLOCK == 0u) { dirty[slot / BLOCK] = 1u; }
}

// ---- pair_count: two-level counting of every pair of the stream (seed §2) ----------------------
// Each workgroup aggregates 1024 symbols' pairs in a workgroup-memory table (same key packing,
// LSLOTS / COLS rows per column), then adds its totals to the global table.
// Workgroup table helpers of pair_count / pair_count_linked.
fn local_table_clear(lid: u32) {
    for (var j = lid; j < LSLOTS; j += WG) {
        atomicStore(&lkeys[j], EMPTY);
        atomicStore(&lcnt[2u * j], 0u);
        atomicStore(&lcnt[2u * j + 1u], 0u);
    }
    workgroupBarrier();
}

// Add weight (lo, hi) to pair (a, b) in the workgroup table (the global one if its column is full).
fn local_table_add(a: u32, b: u32, lo: u32, hi: u32) {
    let lrows = LSLOTS / COLS;
    let k = key_pack(a, b);
    var row = row_home(k.x) & (lrows - 1u);
    for (var p = 1u; p <= lrows; p++) {
        let slot = row * COLS + k.y;
        var cur = atomicLoad(&lkeys[slot]);
        if (cur == EMPTY) {
            let r = atomicCompareExchangeWeak(&lkeys[slot], EMPTY, k.x);
            cur = select(r.old_value, k.x, r.exchanged);
        }
        if (cur == k.x) {
            let old = atomicAdd(&lcnt[2u * slot], lo);
            let h = hi + select(0u, 1u, old + lo < old);
            if (h != 0u) { atomicAdd(&lcnt[2u * slot + 1u], h); }
            return;
        }
        if (cur != EMPTY) { row = (row + p) & (lrows - 1u); }
    }
    // local column full: count straight into the global table
    let g = table_slot(k.x, k.y);
    if (g != EMPTY) { table_add(g, lo, hi); }
}

fn local_table_flush(lid: u32) {
    workgroupBarrier();
    for (var j = lid; j < LSLOTS; j += WG) {
        let st = atomicLoad(&lkeys[j]);
        if (st == EMPTY) { continue; }
        let g = table_slot(st, j % COLS);
        if (g != EMPTY) {
            table_add(g, atomicLoad(&lcnt[2u * j]), atomicLoad(&lcnt[2u * j + 1u]));
        }
    }
}

@compute @workgroup_size(WG)
fn pair_count(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    local_table_clear(lid);
    let n = atomicLoad(&state[S_N]);
    let base = linear_id(wid, nwg) * (WG * PC_ITEMS);
    for (var it = 0u; it < PC_ITEMS; it++) {
        let i = base + it * WG + lid;
        if (i + 1u >= n) { continue; }
        let s1 = sym_in[i + 1u];
        if ((s1 & TWS) != 0u) { continue; }
        let w = wid_in[i];
        local_table_add(sym_in[i] & IDM, s1 & IDM, weights[2u * w], weights[2u * w + 1u]);
    }
    local_table_flush(lid);
}

// pair_count over the linked stream (sparse path, below): pairs (i, nxt[i]) of live symbols.
@compute @workgroup_size(WG)
fn pair_count_linked(@builtin(workgroup_id) wid: vec3<u32>,
                     @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    local_table_clear(lid);
    let n = atomicLoad(&state[S_N]);
    let base = linear_id(wid, nwg) * (WG * PC_ITEMS);
    for (var it = 0u; it < PC_ITEMS; it++) {
        let i = base + it * WG + lid;
        if (i >= n) { continue; }
        let s0 = lsym[i];
        let j = nxt[i];
        if ((s0 & DEAD) != 0u || j == NONE) { continue; }
        let w = wid_in[i];
        local_table_add(s0 & IDM, lsym[j] & IDM, weights[2u * w], weights[2u * w + 1u]);
    }
    local_table_flush(lid);
}

// ---- find_max4: best entry of each dirty 1024-slot block (4 slots per thread) ------------------
@compute @workgroup_size(WG)
fn find_max4(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32,
//#if SUBGROUPS
             @builtin(subgroup_invocation_id) lane: u32,
             @builtin(subgroup_size) sg_size: u32,
             @builtin(subgroup_id) sg_id: u32,
//#endif
             ) {
    let blk = linear_id(wid, nwg);
    if (blk >= P.nblocks) { return; }
//#if SUBGROUPS
    find_max4_block(blk, lid, vec3<u32>(lane, sg_size, sg_id));
//#else
    find_max4_block(blk, lid, vec3<u32>(0u));
//#endif
}

fn find_max4_block(blk: u32, lid: u32, sg: vec3<u32>) {
    if (lid == 0u) {
        sh_u = atomicLoad(&state[S_STOP]);
        sh_v = dirty[blk];
    }
    let stop = workgroupUniformLoad(&sh_u);
    let is_dirty = workgroupUniformLoad(&sh_v);
    if (stop != 0u || is_dirty == 0u) { return; }
    block_best(blk, lid, sg);
}

// The best entry of block blk → best[blk]; the block's dirty flag cleared.
fn block_best(blk: u32, lid: u32, sg: vec3<u32>) {
    var b = NO_BEST;
    for (var j = 0u; j < 4u; j++) {
        let slot = blk * BLOCK + j * WG + lid;
        let st = atomicLoad(&tkeys[slot]);       // key and count loaded together
        let lo = atomicLoad(&tcounts[2u * slot]);
        let hi = atomicLoad(&tcounts[2u * slot + 1u]);
        if (st == EMPTY || (lo | hi) == 0u) { continue; }
        let ab = key_unpack(st, slot % COLS);
        let c = vec4<u32>(lo, hi, ab.x, ab.y);
        if (better(c, b)) { b = c; }
    }
    let r = wg_best_sg(lid, b, sg);
    if (lid == 0u) {
        best[4u * blk] = r.x;
        best[4u * blk + 1u] = r.y;
        best[4u * blk + 2u] = r.z;
        best[4u * blk + 3u] = r.w;
        dirty[blk] = 0u;
    }
}

// The best of the block bests (count desc, a asc, b asc), in every thread.
fn final_best(lid: u32, sg: vec3<u32>) -> vec4<u32> {
    var b = NO_BEST;
    // Four independent loads per iteration (memory-level parallelism for one workgroup).
    for (var j0 = 0u; j0 < P.nblocks; j0 += 4u * WG) {
        var c: array<vec4<u32>, 4>;
        for (var u = 0u; u < 4u; u++) {
            let j = j0 + u * WG + lid;
            c[u] = NO_BEST;
            if (j < P.nblocks) {
                c[u] = vec4<u32>(best[4u * j], best[4u * j + 1u], best[4u * j + 2u],
                                 best[4u * j + 3u]);
            }
        }
        for (var u = 0u; u < 4u; u++) {
            if (better(c[u], b)) { b = c[u]; }
        }
    }
    return wg_best_sg(lid, b, sg);
}

// ---- find_max_final_det: the deterministic global best → merges[k] -----------------------------
// The order (count desc, a asc, b asc) is total, so the result does not depend on slot order or
// thread scheduling.
@compute @workgroup_size(WG)
fn find_max_final_det(@builtin(local_invocation_index) lid: u32,
//#if SUBGROUPS
                      @builtin(subgroup_invocation_id) lane: u32,
                      @builtin(subgroup_size) sg_size: u32,
                      @builtin(subgroup_id) sg_id: u32,
//#endif
                      ) {
//#if SUBGROUPS
    let sg = vec3<u32>(lane, sg_size, sg_id);
//#else
    let sg = vec3<u32>(0u);
//#endif
    if (lid == 0u) { sh_u = atomicLoad(&state[S_STOP]); }
    if (workgroupUniformLoad(&sh_u) != 0u) { return; }
    let r = final_best(lid, sg);
    if (lid == 0u) {
        let k = atomicLoad(&state[S_K]);
        let below = r.y < P.min_freq_hi || (r.y == P.min_freq_hi && r.x < P.min_freq_lo);
        if (k >= P.num_merges || (r.x | r.y) == 0u || below) {
            atomicStore(&state[S_STOP], 1u);
        } else {
            merges[4u * k] = r.z;
            merges[4u * k + 1u] = r.w;
            merges[4u * k + 2u] = r.x;
            merges[4u * k + 3u] = r.y;
            atomicStore(&state[S_A], r.z);
            atomicStore(&state[S_B], r.w);
            atomicStore(&state[S_C], 256u + k);
            atomicStore(&state[S_K], k + 1u);
        }
        // FUSED: setup_merge's one thread of work is done here (one dispatch fewer per merge).
        if (FUSED != 0u) { setup_args(); }
    }
}

// ---- setup_merge: size this merge's stream dispatches on the GPU -------------------------------
// args[0..3): every tile; args[4..7): every tile if A == B (runs to resolve) else none;
// args[8..11): one workgroup if A == B else none. Stopped: all none.
fn grid_args(off: u32, tiles_n: u32) {
    // 2-D grid, each side ≤ 65,535 (indirect args above that are silently a no-op).
    var gy = 1u;
    if (tiles_n > 65535u) { gy = (tiles_n + 65534u) / 65535u; }
    args[off] = (tiles_n + gy - 1u) / gy;
    args[off + 1u] = select(0u, gy, tiles_n > 0u);
    args[off + 2u] = 1u;
}

@compute @workgroup_size(1)
fn setup_merge() { setup_args(); }

fn setup_args() {
    let n = atomicLoad(&state[S_N]);
    atomicStore(&state[S_NCUR], n);
    var tiles_n = (n + TILE - 1u) / TILE;
    if (atomicLoad(&state[S_STOP]) != 0u) { tiles_n = 0u; }
    let runs = atomicLoad(&state[S_A]) == atomicLoad(&state[S_B]);
    grid_args(0u, tiles_n);
    grid_args(4u, select(0u, tiles_n, runs));
    grid_args(8u, select(0u, 1u, runs && tiles_n > 0u));
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
        var carry = 0u;
        if (FUSED != 0u) {
            var mx = 0u;
            for (var j = lid; j < t; j += WG) { mx = max(mx, tiles[j]); }
            carry = wg_total_max(lid, mx);
        } else {
            carry = tiles[t];
        }
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
                    @builtin(local_invocation_index) lid: u32,
//#if SUBGROUPS
                    @builtin(subgroup_invocation_id) lane: u32,
                    @builtin(subgroup_size) sg_size: u32,
                    @builtin(subgroup_id) sg_id: u32,
//#endif
                    ) {
    let t = linear_id(wid, nwg);
    let ctx = load_ctx(lid);
    let n = ctx.n;
    let ntiles = (n + TILE - 1u) / TILE;
    if (t >= ntiles) { return; }
//#if SUBGROUPS
    // Element order follows (subgroup, lane), whatever the hardware's lid ↔ lane mapping.
    let e = sg_id * sg_size + lane;
//#else
    let e = lid;
//#endif
    let first = t * TILE + e * ITEMS;
    var tile_off = 0u;
    if (FUSED != 0u) {
        var sum = 0u;
        for (var j = lid; j < t; j += WG) { sum += tiles[P.tile_cap + j]; }
        tile_off = wg_total_add(lid, sum);
        if (t + 1u == ntiles && lid == 0u) {
            atomicStore(&state[S_N], tile_off + tiles[P.tile_cap + t]);
        }
    } else {
        tile_off = tiles[P.tile_cap + t];
    }
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
    if (lane == 0u) { sh_sg[sg_id] = sg_total; }
    workgroupBarrier();
    var base = 0u;
    for (var q = 0u; q < sg_id; q++) { base += sh_sg[q]; }
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

// ==== constants of the linked stream (word-list path, pair_count_linked) =====================
const DEAD: u32 = 0x40000000u;   // lsym of a symbol merged away (the right half of a pair)
const NONE: u32 = 0xFFFFFFFFu;   // no next symbol (nxt), no previous id

// ==== word-list path =============================================================================
// (The incremental pair-count update of Sennrich et al. 2016, "Neural Machine Translation of Rare
// Words with Subword Units" / subword-nmt, with its token → words index — HF tokenizers'
// `where_to_update` — made parallel: one thread per word.)
// The linked stream of the sparse path (lsym / nxt), with an inverted index (postings: `tlist`
// heads into `pool`) of where each token occurs:
// per token id t, the list of words that held t when it was made (bytes: every word holding
// the byte; merge k's token C = 256 + k: every word where merge k applied), in `pool`. A list
// may hold stale words (whose t was merged away since): they are walked and found to hold
// nothing. A word is in a list at most once (each list is filled once, one entry per word).
// Per merge (2 dispatches, no pass over the stream):
//   wl_find_max4  find_max4 over the dirty blocks; thread 0 first commits the last merge
//                 (S_K += 1, the pool top past C's list)
//   wl_merge      every workgroup reduces the block bests (final_best; one dispatch fewer
//                 than a separate final max); workgroup 0 records the merge; then, grid-stride over the shorter of A's and B's lists,
//                 one thread per word walks the word left to right, merging (A, B) without
//                 overlap (runs of A == B too: the walk is sequential), applying the exact
//                 pair-count deltas, and appending the word to C's list when it merged there.
// Deltas of one occurrence X A B Y → X C Y, X the live left neighbour after the previous
// occurrences of the word were merged (possibly C), Y the right one before: −(X, A) + (X, C),
// −(B, Y) + (C, Y); a pair (X, C) made by one occurrence and undone by the next cancels. Deltas
// to (A, B) itself are skipped: its count is set to 0 (no (A, B) is left after the merge).
// Pool size: the byte lists plus ≤ n − words appended entries (each entry merged ≥ 1 symbol away).
// Bindings 19–21 (with 15 lsym, 16 nxt of the sparse path):
//  19 wstart : storage, read        array<u32>  per word: index of its first symbol (never
//                                               dead)
//  20 tlist  : storage, read_write  array<atomic<u32>>  per token id: (pool offset, length)
//  21 pool   : storage, read_write  array<u32>  word indices of the lists
// Params: max_walk ≥ longest word + 1 (steps of one word walk); list_iters = grid-stride rounds
// of wl_merge over the longest list (≤ words).
@group(0) @binding(19) var<storage, read> wstart: array<u32>;
@group(0) @binding(20) var<storage, read_write> tlist: array<atomic<u32>>;
@group(0) @binding(21) var<storage, read_write> pool: array<u32>;
const S_TOP: u32 = 13u;     // word-list path: pool entries in use before the running merge's list

@compute @workgroup_size(WG)
fn wl_find_max4(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32,
//#if SUBGROUPS
                @builtin(subgroup_invocation_id) lane: u32,
                @builtin(subgroup_size) sg_size: u32,
                @builtin(subgroup_id) sg_id: u32,
//#endif
                ) {
//#if SUBGROUPS
    let sg = vec3<u32>(lane, sg_size, sg_id);
//#else
    let sg = vec3<u32>(0u);
//#endif
    let w = linear_id(wid, nwg);
    if (w == 0u && lid == 0u && atomicLoad(&state[S_DONE]) != 0u) {
        // Nobody else reads these words in this dispatch.
        atomicAdd(&state[S_K], 1u);
        atomicStore(&state[S_DONE], 0u);
        let c = atomicLoad(&state[S_C]);
        atomicAdd(&state[S_TOP], atomicLoad(&tlist[2u * c + 1u]));
    }
    if (w < P.nblocks) { find_max4_block(w, lid, sg); }
}

// Merge (A, B) → C in word w (weight lo, hi) left to right, following the links of its live
// symbols; whether it applied anywhere. A merge's right-hand deltas use Y, the symbol after B
// before any later occurrence of the word is merged; its left-hand ones X, the live symbol
// before A after the earlier ones were. (Tried on the H200 and not faster, so not kept: reading
// the word in place in chunks of 8 (slower: 1.08 vs 0.83 s for 32,512 merges), issuing the next
// symbol's loads early and an occurrence's four table-key loads together (0.77 vs 0.77 s).)
fn wl_merge_word(w: u32, a: u32, b: u32, c: u32) -> bool {
    let lo = weights[2u * w];
    let hi = weights[2u * w + 1u];
    var p = wstart[w];
    var prev_id = NONE;     // id of the live symbol before p (after this walk's merges)
    var merged = false;
    for (var step = 0u; step < P.max_walk; step++) {
        if (p == NONE) { break; }
        let sp = lsym[p];
        let ip = sp & IDM;
        let q = nxt[p];
        if (ip == a && q != NONE && (lsym[q] & IDM) == b) {
            let r = nxt[q];
            if (prev_id != NONE) {
                if (!(prev_id == a && a == b)) { pair_delta(prev_id, a, lo, hi, true); }
                pair_delta(prev_id, c, lo, hi, false);
            }
            if (r != NONE) {
                let y = lsym[r] & IDM;
                if (!(y == b && a == b)) { pair_delta(b, y, lo, hi, true); }
                pair_delta(c, y, lo, hi, false);
            }
            lsym[p] = c | (sp & TWS);
            lsym[q] = DEAD;
            nxt[p] = r;
            merged = true;
            prev_id = c;
            p = r;
        } else {
            prev_id = ip;
            p = q;
        }
    }
    if (p != NONE) { atomicStore(&state[S_CAPPED], 1u); }   // the walk did not reach the end
    return merged;
}

@compute @workgroup_size(WG)
fn wl_merge(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32,
//#if SUBGROUPS
            @builtin(subgroup_invocation_id) lane: u32,
            @builtin(subgroup_size) sg_size: u32,
            @builtin(subgroup_id) sg_id: u32,
//#endif
            ) {
//#if SUBGROUPS
    let sg = vec3<u32>(lane, sg_size, sg_id);
//#else
    let sg = vec3<u32>(0u);
//#endif
    // S_K, S_STOP, S_TOP and the lists of A and B only change in this dispatch to what every
    // workgroup derives itself (or not at all: appends go to C's list only).
    if (lid == 0u) {
        sh_u = atomicLoad(&state[S_STOP]);
        sh_v = atomicLoad(&state[S_K]);
        sh_w = atomicLoad(&state[S_TOP]);
    }
    if (workgroupUniformLoad(&sh_u) != 0u) { return; }
    let k = workgroupUniformLoad(&sh_v);
    let top = workgroupUniformLoad(&sh_w);
    let r = final_best(lid, sg);
    let below = r.y < P.min_freq_hi || (r.y == P.min_freq_hi && r.x < P.min_freq_lo);
    let stop = k >= P.num_merges || (r.x | r.y) == 0u || below;
    let wg = linear_id(wid, nwg);
    let a = r.z;
    let b = r.w;
    let c = 256u + k;
    if (wg == 0u && lid == 0u) {
        if (stop) {
            atomicStore(&state[S_STOP], 1u);
        } else {
            merges[4u * k] = a;
            merges[4u * k + 1u] = b;
            merges[4u * k + 2u] = r.x;
            merges[4u * k + 3u] = r.y;
            atomicStore(&state[S_A], a);
            atomicStore(&state[S_B], b);
            atomicStore(&state[S_C], c);
            atomicStore(&state[S_DONE], 1u);
            atomicStore(&tlist[2u * c], top);
            let kp = key_pack(a, b);
            let slot = table_slot(kp.x, kp.y);
            if (slot != EMPTY) {
                atomicStore(&tcounts[2u * slot], 0u);
                atomicStore(&tcounts[2u * slot + 1u], 0u);
                dirty[slot / BLOCK] = 1u;
            }
        }
    }
    // `stop` is the same in every thread (it comes from the reduction); broadcast through a
    // uniform load so that the barriers below are in uniform control flow by WGSL's rules.
    if (lid == 0u) { sh_x = select(0u, 1u, stop); }
    if (workgroupUniformLoad(&sh_x) != 0u) { return; }
    if (lid == 0u) {
        let la = atomicLoad(&tlist[2u * a + 1u]);
        let lb = atomicLoad(&tlist[2u * b + 1u]);
        let oa = atomicLoad(&tlist[2u * a]);
        let ob = atomicLoad(&tlist[2u * b]);
        sh_u = select(oa, ob, lb < la);
        sh_v = min(la, lb);
    }
    let off = workgroupUniformLoad(&sh_u);
    let len = workgroupUniformLoad(&sh_v);
    let stride = nwg.x * nwg.y * WG;
    let g0 = wg * WG + lid;
    var j = g0;         // the next list entry of this thread (list_iters · stride ≥ any list)
    for (var it = 0u; it < P.list_iters; it++) {
        if (j >= len) { break; }
        let w = pool[off + j];
        if (wl_merge_word(w, a, b, c)) {
            pool[top + atomicAdd(&tlist[2u * c + 1u], 1u)] = w;
        }
        j += stride;
    }
    if (j < len) { atomicStore(&state[S_CAPPED], 1u); }   // the loop stopped early
}
