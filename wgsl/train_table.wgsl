// train_table.wgsl — the pair table both training algorithms share (DESIGN.md §3; seed
// "Eğitim Pipeline" §2 two-level pair count, deterministic max). Included by train_seed.wgsl and
// train_wordlist.wgsl (`//#include train_table`), which supply these hooks:
//   fn stream_pair(i: u32, n: u32) -> vec4<u32>   the pair starting at stream position i:
//                                                  (left id, right id, word, 1) or w = 0: none
//   fn step_blocked(first: bool) -> u32           nonzero: this merge step does nothing
//                                                  (stopped, paused); `first`: one thread of
//                                                  the grid's last workgroup, which may
//                                                  commit pending work
//   fn block_changed(blk: u32)                    find_max4 wrote block blk's new best
//   fn step_thread(t: u32, threads: u32)          every find_max4 thread t (of `threads`,
//                                                  numbered from the second-to-last
//                                                  workgroup down) when the step is not blocked
//   fn scan_blocks() -> vec2<u32>                 find_max4's blocks: (count, list) — the
//   fn scan_block(i: u32, list: u32) -> u32       i-th is scan_block(i, list); a grid of
//                                                  fewer workgroups takes them grid-stride
//   fn block_listed(list: u32) -> bool            the blocks of `list` are known to be dirty
//                                                  (their flag is not loaded; a clean one
//                                                  rescanned gives the same best)
//   fn block_dirtied(blk: u32)                    table_add marked block blk dirty
//   fn block_scanned(i: u32, list: u32, lid: u32, sg: vec3<u32>)  after find_max4's i-th block
//                                                  (every thread, uniform control flow)
//
// Symbols: token id (18 bits, ids < 2^18) | TWS on the first symbol of every word. Deviation
// from the seed: the word-start flag is bit 31, not WORD_START_BIT = 0x10000 (bit 16 is an id bit
// above 65,535). Each word's weight (its count, 64-bit as lo/hi u32) multiplies its pairs.
//
// Pair table: open addressing, 32 "columns" × rows (rows a power of two). A pair (a, b) is
// mapped by an invertible 3-round Feistel mix over 18+18 bits to (stored, col): col = 5 bits,
// stored = the other 31 bits; the pair lives in column col, so the key is recovered exactly
// from (stored, slot % 32) and fits one u32 for atomicCompareExchange. EMPTY = 0xFFFFFFFF
// (never a stored value: stored < 2^31). Rows are probed quadratically (triangular numbers).
// Counts are 64-bit: lo/hi u32 with the carry of every atomicAdd on lo added to hi, so sums
// over 2^32 are exact; subtraction adds the two's complement (mod 2^64). WIDE = 0: low words
// only (the host's choice when the corpus's total pair count is below 2^31).
// Kernels here: clear_table, pair_count (per 1024 symbols a workgroup-memory table of LSLOTS
// slots, flushed into the global one), find_max4 (per dirty 1024-slot block its best entry).
// Bounded work per thread: probes ≤ MAX_PROBE, loops ≤ LSLOTS / WG or nblocks / (4·WG).
//
// Bindings (group 0) of this file:
//   0 P        : uniform             Params (below)
//   1 state    : storage, read_write array<atomic<u32>>  state words S_*; STATE_WORDS
//   7 weights  : storage, read       array<u32>  word counts, (lo, hi) per word
//  10 tkeys    : storage, read_write array<atomic<u32>>  pair table keys; rows·32
//  11 tcounts  : storage, read_write array<atomic<u32>>  pair table counts (lo, hi); 2·rows·32
//  12 dirty    : storage, read_write array<u32>  per 1024-slot block: counts changed; nblocks
//  13 best     : storage, read_write array<atomic<u32>>  per block: (count lo, count hi, a, b)
//  14 merges   : storage, read_write array<u32>  per merge: (a, b, count lo, count hi)

struct Params {     // 64 bytes
    num_merges: u32,    // merge budget (vocab_size - 256 - specials)
    min_freq_lo: u32,   // min_frequency, 64-bit
    min_freq_hi: u32,
    rows: u32,          // pair-table rows (power of two); slots = rows * COLS
    nblocks: u32,       // slots / BLOCK
    tile_cap: u32,      // seed: capacity of each half of `tiles` (≥ stream tiles + 1)
    budget: u32,        // word list: walk steps + table probes per thread per dispatch
    nsupers: u32,       // word list: groups of SUPER blocks (find_max_super)
    long_min: u32,      // word list: a chain's occurrences walked before train_long.wgsl
                        // takes the rest (0xFFFFFFFF: never)
    long_window: u32,   // word list: stream positions per long chain per round
    long_cap: u32,      // word list: long chains at once (≤ LC_CAP)
    batch_max: u32,     // word list: merges per step at most (≤ BATCH_MAX; 1: one per step)
    scatter_cap: u32,   // word list: entries of the pool's scratch (the lists of a step's
                        // members after the first, before find_max4 places them)
    _pad5: u32,
    _pad6: u32,
}

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read_write> state: array<atomic<u32>>;
@group(0) @binding(7) var<storage, read> weights: array<u32>;
@group(0) @binding(10) var<storage, read_write> tkeys: array<atomic<u32>>;
@group(0) @binding(11) var<storage, read_write> tcounts: array<atomic<u32>>;
@group(0) @binding(12) var<storage, read_write> dirty: array<u32>;
@group(0) @binding(13) var<storage, read_write> best: array<atomic<u32>>;
@group(0) @binding(14) var<storage, read_write> merges: array<u32>;

// ---- constants -------------------------------------------------------------------------------
const WG: u32 = 256u;              // threads per workgroup
const TWS: u32 = 0x80000000u;      // word start flag of the training stream (see header)
const IDM: u32 = 0x3FFFFu;         // id bits (vocab ≤ 2^18)
const EMPTY: u32 = 0xFFFFFFFFu;
const COLS: u32 = 32u;             // table columns (5 key bits live in the slot index)
const BLOCK: u32 = 1024u;          // table slots per find_max4 workgroup (4 per thread)
const MAX_PROBE: u32 = 64u;        // bounded probing; past it the overflow flag is raised
const STATE_WORDS: u32 = 24u;      // length of `state`

// state words both algorithms use (each file adds its own)
const S_N: u32 = 0u;        // stream length (seed: after the last merge)
const S_K: u32 = 2u;        // merges done
const S_STOP: u32 = 3u;     // 1: finished (budget reached or best count < min_frequency)
const S_A: u32 = 4u;        // running merge: left id
const S_B: u32 = 5u;        //                right id
const S_C: u32 = 6u;        //                new id
const S_OCC: u32 = 7u;      // occupied table slots
const S_OVERFLOW: u32 = 8u; // 1: a probe sequence ran out (host grows the table and restarts)
const S_ALL: u32 = 20u;     // 1: clear_table ran (every block dirty): the word list's find_max4
                            // scans all blocks, not its list of the last merge's dirty ones
const S_WG0: u32 = 22u;     // first workgroup of a pass over the stream that the host split
                            // into several submits (pair_count, the word list's set-up: a CPU
                            // adapter, to bound each submit's work); 0 otherwise

// pair_count's workgroup hash table (seed: 1024 slots). 12 B per slot (key + 64-bit count);
// the host picks the largest power of two ≤ 2048 that fits the adapter's workgroup-storage
// limit (read from this declaration): ≤ 1024 pairs per workgroup, so the load stays ≤ 1/2.
override LSLOTS: u32 = 2048u;
override WIDE: u32 = 1u;           // 64-bit pair counts (1) or 32-bit ones (0)
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
var<workgroup> sh_sg: array<u32, 128>;

// Table probes made by this invocation (table_slot adds its probe count): the word-list walk
// charges them to its per-thread budget.
var<private> probes: u32;
// Rounds of table_slots4's probe loop (each one memory round trip for up to 4 keys).
var<private> probe_rounds: u32;

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
        probes += 1u;
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
    table_count(slot, lo, hi);
    block_dirtied(slot / BLOCK);
}

// table_add without the block_dirtied hook.
fn table_count(slot: u32, lo: u32, hi: u32) {
    if (WIDE == 0u) {
        atomicAdd(&tcounts[2u * slot], lo);
    } else {
        let old = atomicAdd(&tcounts[2u * slot], lo);
        let h = hi + select(0u, 1u, old + lo < old);
        if (h != 0u) { atomicAdd(&tcounts[2u * slot + 1u], h); }
    }
    dirty[slot / BLOCK] = 1u;
}

// The 64-bit weight (lo, hi), or its two's complement (negative).
fn signed_weight(lo: u32, hi: u32, negative: bool) -> vec2<u32> {
    if (negative) { return vec2<u32>(0u - lo, ~hi + select(0u, 1u, lo == 0u)); }
    return vec2<u32>(lo, hi);
}

// Add (sign=false) or subtract (sign=true) the 64-bit weight (lo, hi) to pair (a, b).
fn pair_delta(a: u32, b: u32, lo: u32, hi: u32, negative: bool) {
    let k = key_pack(a, b);
    let slot = table_slot(k.x, k.y);
    if (slot == EMPTY) { return; }
    let v = signed_weight(lo, hi, negative);
    table_add(slot, v.x, v.y);
}

// table_slot of up to 4 keys (stored, col) at once, lane i when on[i]: their probe sequences
// advance together, so a round's loads of different keys are in flight together (one memory
// round trip per probe step, not one per key). Keys may repeat (the first lane inserts, the
// other finds it). A lane with cas[i] (a key that is most likely new: the caller knows) probes
// with atomicCompareExchange straight away, which inserts it or returns the slot's key in the
// same round trip (a load first would see EMPTY and need a second one). EMPTY for a lane that
// is off or ran out of probes (overflow flag raised).
fn table_slots4(st: vec4<u32>, col: vec4<u32>, on: vec4<bool>, cas: vec4<bool>) -> vec4<u32> {
    let mask = P.rows - 1u;
    var row = vec4<u32>(row_home(st.x), row_home(st.y), row_home(st.z), row_home(st.w))
              & vec4<u32>(mask);
    var slot = vec4<u32>(EMPTY);
    var todo = on;
    for (var p = 1u; p <= MAX_PROBE; p++) {
        if (!any(todo)) { break; }
        probe_rounds += 1u;
        var cur = vec4<u32>(EMPTY);
        var ins = vec4<bool>(false);      // lane i inserted its key this round
        for (var i = 0u; i < 4u; i++) {
            if (todo[i]) {
                let s = row[i] * COLS + col[i];
                if (cas[i]) {
                    let r = atomicCompareExchangeWeak(&tkeys[s], EMPTY, st[i]);
                    cur[i] = r.old_value;
                    ins[i] = r.exchanged;
                } else {
                    cur[i] = atomicLoad(&tkeys[s]);
                }
                probes += 1u;
            }
        }
        for (var i = 0u; i < 4u; i++) {
            if (!todo[i]) { continue; }
            let s = row[i] * COLS + col[i];
            var c = cur[i];
            if (ins[i]) {
                atomicAdd(&state[S_OCC], 1u);
                c = st[i];
            } else if (c == EMPTY) {          // a load saw EMPTY, or a spurious weak-CAS failure
                let r = atomicCompareExchangeWeak(&tkeys[s], EMPTY, st[i]);
                c = r.old_value;
                if (r.exchanged) {
                    atomicAdd(&state[S_OCC], 1u);
                    c = st[i];
                } else if (c == EMPTY) {      // spurious weak-CAS failure: once more
                    let r2 = atomicCompareExchangeWeak(&tkeys[s], EMPTY, st[i]);
                    c = r2.old_value;
                    if (r2.exchanged) {
                        atomicAdd(&state[S_OCC], 1u);
                        c = st[i];
                    }
                }
            }
            if (c == st[i]) {
                slot[i] = s;
                todo[i] = false;
            } else {
                row[i] = (row[i] + p) & mask;
            }
        }
    }
    if (any(todo)) { atomicStore(&state[S_OVERFLOW], 1u); }
    return slot;
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


fn linear_id(wid: vec3<u32>, nwg: vec3<u32>) -> u32 { return linear_workgroup(wid, nwg); }

// A workgroup's part of a pass over the stream (pair_count, the word list's set-up), which the
// host may split into several submits (S_WG0): `items` positions per thread from `base`, those
// at or past the stream length n being none.
struct StreamSlice {
    n: u32,
    base: u32,
}

fn stream_slice(wid: vec3<u32>, nwg: vec3<u32>, items: u32) -> StreamSlice {
    let n = atomicLoad(&state[S_N]);
    return StreamSlice(n, (atomicLoad(&state[S_WG0]) + linear_id(wid, nwg)) * (WG * items));
}

// ---- clear_table: empty the pair table, mark every block dirty ---------------------------------
@compute @workgroup_size(WG)
fn clear_table(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let slot = linear_id(wid, nwg) * WG + lid;
    if (slot == 0u) {
        atomicStore(&state[S_OCC], 0u);
        atomicStore(&state[S_OVERFLOW], 0u);
        atomicStore(&state[S_ALL], 1u);
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
// Workgroup table helpers of pair_count.
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
    let sl = stream_slice(wid, nwg, PC_ITEMS);
    for (var it = 0u; it < PC_ITEMS; it++) {
        let i = sl.base + it * WG + lid;
        if (i >= sl.n) { continue; }
        let p = stream_pair(i, sl.n);    // (a, b, word, valid): the including file's stream
        if (p.w == 0u) { continue; }
        local_table_add(p.x, p.y, weights[2u * p.z], weights[2u * p.z + 1u]);
    }
    local_table_flush(lid);
}

// ---- find_max4: best entry of each dirty 1024-slot block (4 slots per thread) ------------------
// The blocks looked at are the hooks' (the seed: all, one workgroup each; the word list: the
// last merge's dirty ones, grid-stride over a small grid); those not dirty are skipped.
@compute @workgroup_size(WG)
fn find_max4(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             l: Lanes) {
    let lid = l.lid;
    let sg = lanes_sg(l);
    let g = linear_id(wid, nwg);
    let groups = nwg.x * nwg.y;
    var first_blk = 0u;
    if (lid == 0u) {
        // The grid's last workgroup is the hook's `first`: the one with the fewest blocks to
        // scan (grid-stride), so its extra work is not in series with block 0's.
        // The blocks first: their loads need not wait for step_blocked's branches (the two
        // hooks read and write disjoint state words); this workgroup's first block is looked
        // up beside them (unused when g ≥ the count).
        let sb = scan_blocks();
        first_blk = scan_block(g, sb.y);
        sh_u = step_blocked(g == groups - 1u);
        sh_w = sb.x;
        sh_x = sb.y;
    }
    let blocked = workgroupUniformLoad(&sh_u);
    let nscan = workgroupUniformLoad(&sh_w);
    let list = workgroupUniformLoad(&sh_x);
    if (blocked != 0u) { return; }
    for (var i = g; i < nscan; i += groups) {
        if (lid == 0u) {
            var blk = first_blk;
            if (i != g) { blk = scan_block(i, list); }
            sh_v = 0u;
            if (blk < P.nblocks && (block_listed(list) || dirty[blk] != 0u)) { sh_v = blk + 1u; }
        }
        let v = workgroupUniformLoad(&sh_v);
        if (v != 0u) { block_best(v - 1u, lid, sg); }
        block_scanned(i, list, lid, sg);
    }
    // Threads numbered from the grid's second-to-last workgroup down (a permutation): a hook
    // that uses only the first threads (the word list's prv fix-up) runs in workgroups with
    // no block to scan (grid-stride gives blocks to the first ones) and not in the last one
    // (which commits the merge), not in series with their work.
    let tg = (2u * groups - 2u - g) % groups;
    step_thread(tg * WG + lid, groups * WG);
}

// Block j's best (count lo, hi, a, b). `best` is atomic: the word list's find_max4 reads other
// workgroups' block bests in the same dispatch (the group's last block, block_scanned), and a
// plain load there can be served stale from a non-coherent cache (a device-scope storageBarrier
// does not order it on every GPU: wrong merges; atomics are coherent).
fn load_best(j: u32) -> vec4<u32> {
    return vec4<u32>(atomicLoad(&best[4u * j]), atomicLoad(&best[4u * j + 1u]),
                     atomicLoad(&best[4u * j + 2u]), atomicLoad(&best[4u * j + 3u]));
}

// The best entry of block blk → best[blk]; the block's dirty flag cleared.
fn block_best(blk: u32, lid: u32, sg: vec3<u32>) {
    var b = NO_BEST;
    for (var j = 0u; j < 4u; j++) {
        let slot = blk * BLOCK + j * WG + lid;
        let st = atomicLoad(&tkeys[slot]);       // key and count loaded together
        let lo = atomicLoad(&tcounts[2u * slot]);
        var hi = 0u;                              // (always 0 with 32-bit counts)
        if (WIDE != 0u) { hi = atomicLoad(&tcounts[2u * slot + 1u]); }
        if (st == EMPTY || (lo | hi) == 0u) { continue; }
        let ab = key_unpack(st, slot % COLS);
        let c = vec4<u32>(lo, hi, ab.x, ab.y);
        if (better(c, b)) { b = c; }
    }
    let r = wg_best_sg(lid, b, sg);
    if (lid == 0u) {
        atomicStore(&best[4u * blk], r.x);
        atomicStore(&best[4u * blk + 1u], r.y);
        atomicStore(&best[4u * blk + 2u], r.z);
        atomicStore(&best[4u * blk + 3u], r.w);
        dirty[blk] = 0u;
        block_changed(blk);
    }
}

// The best of the block bests (count desc, a asc, b asc), in every thread (the seed's
// find_max_final_det; the word list reduces a level of super-block bests instead).
fn final_best(lid: u32, sg: vec3<u32>) -> vec4<u32> {
    var b = NO_BEST;
    // Four independent loads per iteration (memory-level parallelism for one workgroup).
    for (var j0 = 0u; j0 < P.nblocks; j0 += 4u * WG) {
        var c: array<vec4<u32>, 4>;
        for (var u = 0u; u < 4u; u++) {
            let j = j0 + u * WG + lid;
            c[u] = NO_BEST;
            if (j < P.nblocks) {
                c[u] = load_best(j);
            }
        }
        for (var u = 0u; u < 4u; u++) {
            if (better(c[u], b)) { b = c[u]; }
        }
    }
    return wg_best_sg(lid, b, sg);
}

// Whether the best count r (lo, hi) ends training: the merge budget k is spent, nothing is
// left, or it is below min_frequency.
fn training_done(r: vec4<u32>, k: u32) -> bool {
    let below = r.y < P.min_freq_hi || (r.y == P.min_freq_hi && r.x < P.min_freq_lo);
    return k >= P.num_merges || (r.x | r.y) == 0u || below;
}

// merges[k] = (a, b, count lo, count hi) of the best r.
fn record_merge(k: u32, r: vec4<u32>) {
    merges[4u * k] = r.z;
    merges[4u * k + 1u] = r.w;
    merges[4u * k + 2u] = r.x;
    merges[4u * k + 3u] = r.y;
    atomicStore(&state[S_A], r.z);
    atomicStore(&state[S_B], r.w);
    atomicStore(&state[S_C], 256u + k);
}
