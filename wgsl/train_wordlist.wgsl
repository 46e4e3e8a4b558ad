// train_wordlist.wgsl — the default training algorithm: an occurrence-list walk (DESIGN.md §3).
// (The incremental pair-count update of Sennrich et al. 2016, "Neural Machine Translation of Rare
// Words with Subword Units" / subword-nmt, with its token → occurrences index — HF tokenizers'
// `where_to_update`, kept per position instead of per word — made parallel: one thread per
// chain of adjacent occurrences.)
//
// The stream of unique words stays in place: each word's live symbols are linked both ways
// (`nxt`, `prv`), and an inverted index says where each token occurs: per token id t, the list
// of stream positions that held t when it was made (bytes: every position holding the byte;
// merge k's token C = 256 + k: the left position of every occurrence merge k merged), in
// `pool`. A list may hold stale positions (whose t was merged away since): they are looked at
// and found to hold something else. A position is in a list at most once.
// Per merge, 2 dispatches, no pass over the stream:
//   find_max4       (train_table.wgsl) the dirty blocks' bests: the blocks the last merge
//                   listed (`dlist`, each once) grid-stride over ≤ 1,056 workgroups (the host's
//                   grid), not one workgroup per table block (tens of thousands at scale, nearly
//                   all clean). Per group of SUPER = 256 blocks the list holds `scnt` of them;
//                   the workgroup that finishes the group's last one (an atomic count down,
//                   after a storageBarrier: device-scope release/acquire in naga's SPIR-V, as
//                   CUDA's __threadfence in its "last block" reduction) reduces the group's
//                   block bests into its super-block best (once find_max_super, a dispatch of
//                   its own). Its step_blocked hook (below) first commits the last merge
//                   (S_K += 1, the pool top past C's list), and its step_thread hook sets
//                   prv[r] = p for every occurrence p·q·r the last merge made (so `prv` is exact
//                   again: nobody reads it in this dispatch)
//   wl_merge    every workgroup reduces the super-block bests (one load per thread up to
//               2^28 table slots); the last workgroup records the merge; then, grid-stride over the
//               shorter of A's and B's lists, one thread per entry: the entry's occurrence
//               (p, q) of (A, B) is found (A's list: p; B's: q and p = its live left); the
//               thread that holds the FIRST occurrence of a chain of adjacent ones
//               (A B A B …, or a run of A == B, paired left to right) merges the whole chain,
//               in order, with the exact pair-count deltas, and appends each merged p to C's
//               list; the other entries do nothing. Per entry a fixed number of dependent loads
//               (list entry, its symbol, its neighbours' symbols, the deltas' table probes),
//               not a walk of the whole word: the longest word of a list no longer sets the
//               merge's latency (it did: ~2 dependent loads per live symbol of the word).
// The links and byte lists are built on the GPU (wl_links, wl_list_offsets, wl_byte_lists:
// "set-up" below); after clear_table + pair_count the host records find_max4 over every block
// (S_ALL) and find_max_super (every group with a changed block; it clears S_ALL): the merge
// steps then only see lists.
// Race-free without a grid barrier: a thread writes only its own chain's symbols (lsym, nxt of
// the chain's p's) and reads other threads' chain symbols only to learn "is my left neighbour
// part of an occurrence of this merge", which both their old and their new values answer:
// a B merged away in merge k is written DEAD | k (not DEAD alone), a merged A becomes C (a new
// id), and `prv` is not written during a merge (find_max4 repairs it afterwards; a walk that
// meets a stale prv hops left over symbols DEAD in an EARLIER merge and saves the hop).
// Left neighbour L of an occurrence at p ("live left" at the start of merge k):
//   A ≠ B: p leads unless L died in merge k, or L holds B and L's live left holds A or C;
//   A = B: p leads unless L died in merge k or holds A or C (the run begins left of p).
// Long chains: a thread's work is bounded by P.budget steps + hops + table probes per dispatch
// (lavapipe stops loops after 65,535 iterations of a SIMD vector of lanes, silently — the host
// divides its budget by the lanes there; a real GPU may reset a dispatch that runs for seconds). A thread out of budget saves where it is (list entry, symbol, left
// neighbour) in its `carry` slot and counts itself in S_PAUSE; from then on every
// step does nothing (find_max4 latches S_HOLD, wl_merge returns) until the host has run
// wl_continue — same grid, each thread resuming its own slot — until S_PAUSE is 0, as the
// encoder continues a long word. So any word (a 1 MB run of one byte) takes this algorithm.
// A chain longer than P.long_min occurrences (or one resumed from a carry) is not walked on:
// its thread hands the rest to train_long.wgsl (long_handoff, counted in S_PAUSE too), whose
// rounds in the host's continue submits merge it in parallel with the same deltas.
// Deltas of one occurrence X A B Y → X C Y, X the live left neighbour after the previous
// occurrences of the chain were merged (possibly C), Y the right one before: −(X, A) + (X, C),
// −(B, Y) + (C, Y); a pair (X, C) made by one occurrence and undone by the next cancels. Deltas
// to (A, B) itself are skipped: its count is set to 0 (no (A, B) is left after the merge).
// Pool size: n (the byte lists) plus ≤ n − words appended entries (each merged a symbol away).
// PROFILE = 1 (the host's profile runs only): totals over the run of the list entries looked at
// (11), steps: chain steps + prv hops (14), table probes (15), and (17) the sum over merges of
// the longest chain of dependent global loads of one wl_merge thread (16 holds the running
// merge's, folded into 17 when find_max4 commits it): the merge's latency in memory round trips;
// (21) the blocks find_max4 looked at (the dirty ones listed).
//
// Bindings (group 0) of this file (train_table.wgsl has 0, 1, 7, 10–14):
//   2 wid_in : storage, read        array<u32>  word index of each symbol; length n
//   3 lsym   : storage, read_write  array<u32>  linked stream: id | TWS; DEAD | k once merged
//                                               away by merge k; length n (fixed for the run)
//   4 nxt    : storage, read_write  array<u32>  per symbol: next live symbol of its word, NONE
//   5 prv    : storage, read_write  array<u32>  per symbol: a symbol left of it in its word
//                                               with only dead ones between (exact after
//                                               find_max4), NONE at the word's start
//   6 tlist  : storage, read_write  array<atomic<u32>>  per token id: (pool offset, length)
//   8 pool   : storage, read_write  array<u32>  stream positions of the lists
//   9 carry  : storage, read_write  array<u32>  per wl_merge thread: (list entry, symbol, left
//                                               id, bit1 live); 4 × grid threads
//  15 sbest  : storage, read_write  array<u32>  per super-block: (count lo, hi, a, b); nsupers
//  16 sdirty : storage, read_write  array<u32>  per super-block: one of its blocks changed
//  17 dlist  : storage, read_write  array<u32>  the blocks merge k made dirty, in half k & 1
//                                               (count: state S_DLEN + (k & 1)); 2 · nblocks
//  18 dmark  : storage, read_write  array<atomic<u32>>  per block: k + 1 of the last merge k
//                                               that listed it (each block once per merge)
//  19 scnt   : storage, read_write  array<atomic<u32>>  per super-block: its blocks in dlist's
//                                               half h at h · nsupers (counted down by find_max4)
//#include train_table
//#include train_long

@group(0) @binding(2) var<storage, read> wid_in: array<u32>;
@group(0) @binding(3) var<storage, read_write> lsym: array<u32>;
@group(0) @binding(4) var<storage, read_write> nxt: array<u32>;
@group(0) @binding(5) var<storage, read_write> prv: array<u32>;
@group(0) @binding(6) var<storage, read_write> tlist: array<atomic<u32>>;
@group(0) @binding(8) var<storage, read_write> pool: array<u32>;
@group(0) @binding(9) var<storage, read_write> carry: array<u32>;
@group(0) @binding(15) var<storage, read_write> sbest: array<u32>;
@group(0) @binding(16) var<storage, read_write> sdirty: array<u32>;
@group(0) @binding(17) var<storage, read_write> dlist: array<u32>;
@group(0) @binding(18) var<storage, read_write> dmark: array<atomic<u32>>;
@group(0) @binding(19) var<storage, read_write> scnt: array<atomic<u32>>;
const SUPER: u32 = 256u;    // blocks per super-block (= WG: one per find_max_super thread)
var<workgroup> sh_heads: array<u32, 4>;   // wl_merge: A's and B's (list offset, length)

const DEAD: u32 = 0x40000000u;   // lsym of a symbol merged away (the right half of a pair),
                                 // | the merge's index k (IDM bits)
const LIVE: u32 = 0x4003FFFFu;   // DEAD | IDM: lsym & LIVE is the id of a live symbol, ≥ DEAD
                                 // for a dead one
const NONE: u32 = 0xFFFFFFFFu;   // no next symbol (nxt), no previous one (prv), no left id
const PAUSED: u32 = 0xFFFFFFFEu; // live_left ran out of budget
const S_PAUSE: u32 = 9u;    // walks carried to wl_continue; nonzero: merge steps do nothing
const S_HOLD: u32 = 10u;    // 1: a step saw S_PAUSE (wl_merge returns); the host clears it
const S_DONE: u32 = 12u;    // 1 = wl_merge recorded a merge whose S_K increment is pending
                            // (done by the next find_max4); merges = S_K + S_DONE
const S_TOP: u32 = 13u;     // pool entries in use before the running merge's list
override PROFILE: u32 = 0u;
// FIXUP = 0 (tests only): find_max4 leaves prv stale, so every walk hops (same merges).
override FIXUP: u32 = 1u;
const S_WALK_ENTRIES: u32 = 11u;
const S_WALK_STEPS: u32 = 14u;
const S_WALK_PROBES: u32 = 15u;
const S_DEPTH_MAX: u32 = 16u;
const S_WALK_DEPTH: u32 = 17u;
const S_DLEN: u32 = 18u;    // (and 19) entries of dlist's halves
const S_WALK_BLOCKS: u32 = 21u;   // PROFILE: total over merges of the dirty blocks listed
const CARRY_LIVE: u32 = 2u;

// ---- hooks of train_table.wgsl -----------------------------------------------------------------
// pair_count over the linked stream: pairs (i, nxt[i]) of live symbols.
fn stream_pair(i: u32, n: u32) -> vec4<u32> {
    let s0 = lsym[i];
    let j = nxt[i];
    if ((s0 & DEAD) != 0u || j == NONE) { return vec4<u32>(0u); }
    return vec4<u32>(s0 & IDM, lsym[j] & IDM, wid_in[i], 1u);
}

fn step_blocked(first: bool) -> u32 {
    let pause = atomicLoad(&state[S_PAUSE]);     // (both loaded before any branch)
    let stop = atomicLoad(&state[S_STOP]);
    if (pause != 0u) {
        if (first) { atomicStore(&state[S_HOLD], 1u); }
        return 1u;
    }
    if (first && atomicLoad(&state[S_DONE]) != 0u) {
        // Nobody else reads these words in this dispatch.
        if (PROFILE != 0u) {
            let h = atomicLoad(&state[S_K]) & 1u;
            atomicAdd(&state[S_WALK_BLOCKS], atomicLoad(&state[S_DLEN + h]));
        }
        atomicAdd(&state[S_K], 1u);
        atomicStore(&state[S_DONE], 0u);
        let c = atomicLoad(&state[S_C]);
        atomicAdd(&state[S_TOP], atomicLoad(&tlist[2u * c + 1u]));
        if (PROFILE != 0u) {
            atomicAdd(&state[S_WALK_DEPTH], atomicExchange(&state[S_DEPTH_MAX], 0u));
        }
    }
    if (first) {
        // The next merge (S_K) lists its dirty blocks in half S_K & 1; this dispatch reads the
        // other half (the last merge's).
        atomicStore(&state[S_DLEN + (atomicLoad(&state[S_K]) & 1u)], 0u);
    }
    return stop;
}

// find_max4's blocks: every block after clear_table (S_ALL), else the ones the last merge
// listed (its token C = S_C tells which half; none before the first merge).
fn scan_blocks() -> vec2<u32> {
    let all = atomicLoad(&state[S_ALL]);         // (loaded together, branches after)
    let c = atomicLoad(&state[S_C]);
    let h = (c - 256u) & 1u;                     // (any half when c < 256: unused)
    let len = atomicLoad(&state[S_DLEN + h]);
    if (all != 0u) { return vec2<u32>(P.nblocks, NONE); }
    if (c < 256u) { return vec2<u32>(0u, NONE); }
    return vec2<u32>(len, h * P.nblocks);
}

// A listed block was made dirty by the last merge (or, just after a count, rescanned already:
// the same best again).
fn block_listed(list: u32) -> bool { return list != NONE; }

fn scan_block(i: u32, list: u32) -> u32 {
    if (list == NONE) { return i; }
    return dlist[list + i];
}

// The running merge's k + 1 in wl_merge / wl_continue (0: not merging, e.g. pair_count).
var<private> merge_stamp: u32;

fn block_dirtied(blk: u32) {
    let st = merge_stamp;
    if (st == 0u || atomicLoad(&dmark[blk]) == st) { return; }
    list_block(blk);
}

// Block blk into the running merge's list (unless another thread put it there first).
fn list_block(blk: u32) {
    let st = merge_stamp;
    if (atomicExchange(&dmark[blk], st) == st) { return; }
    let h = (st - 1u) & 1u;
    atomicAdd(&scnt[h * P.nsupers + blk / SUPER], 1u);
    dlist[h * P.nblocks + atomicAdd(&state[S_DLEN + h], 1u)] = blk;
}

// After find_max4's i-th listed block (its best written, or it was clean): count its group
// down; the workgroup that takes the count to 0 writes the group's super-block best.
fn block_scanned(i: u32, list: u32, lid: u32, sg: vec3<u32>) {
    if (list == NONE) { return; }          // every block (S_ALL): find_max_super follows
    storageBarrier();                      // release: this block's best before the count
    if (lid == 0u) {
        let s = dlist[list + i] / SUPER;
        let h = select(0u, 1u, list != 0u);
        sh_v = 0u;
        if (atomicSub(&scnt[h * P.nsupers + s], 1u) == 1u) { sh_v = s + 1u; }
    }
    let v = workgroupUniformLoad(&sh_v);
    if (v == 0u) { return; }
    storageBarrier();                      // acquire: the group's other blocks' bests
    super_best(v - 1u, lid, sg);
}

// The best of group s's block bests → sbest[s].
fn super_best(s: u32, lid: u32, sg: vec3<u32>) {
    let j = s * SUPER + lid;
    var b = NO_BEST;
    if (j < P.nblocks) {
        b = load_best(j);
    }
    let r = wg_best_sg(lid, b, sg);
    if (lid == 0u) {
        sbest[4u * s] = r.x;
        sbest[4u * s + 1u] = r.y;
        sbest[4u * s + 2u] = r.z;
        sbest[4u * s + 3u] = r.w;
    }
}

fn block_changed(blk: u32) { sdirty[blk / SUPER] = 1u; }

// Every find_max4 thread t of `threads`, when the step is not blocked (no walk is carried):
// prv[r] = p for the occurrences p of the last merge's list (and of any live p there: always
// true), so that wl_merge finds every live left neighbour in one load. Only the threads of the
// first FIXUP_WORKGROUPS workgroups as find_max4 numbers them (from its second-to-last
// workgroup down; the others do not even read C's list: thousands of workgroups
// reading the same words would queue at one L2 slice); bounded by P.budget per thread: what is
// left (a list longer than threads × budget) the walks hop over instead.
const FIXUP_WORKGROUPS: u32 = 64u;

fn step_thread(t: u32, threads: u32) {
    if (FIXUP == 0u || t >= FIXUP_WORKGROUPS * WG) { return; }
    let stride = min(threads, FIXUP_WORKGROUPS * WG);
    let c = atomicLoad(&state[S_C]);
    let off = atomicLoad(&tlist[2u * c]);
    let len = atomicLoad(&tlist[2u * c + 1u]);
    var i = t;
    for (var it = 0u; it < P.budget; it++) {
        if (i >= len) { break; }
        let p = pool[off + i];
        let r = nxt[p];
        if ((lsym[p] & DEAD) == 0u && r != NONE) { prv[r] = p; }
        i += stride;
    }
}

// ---- set-up: the links and the byte lists, built from lsym (the host uploads only lsym) --------
// Before the first pair count, 3 dispatches over the stream (the buffers are new: tlist is 0):
//   wl_links         nxt/prv of every position (NONE at its word's ends, known from TWS) and,
//                    per workgroup, its byte histogram added into tlist[2·byte];
//   wl_list_offsets  (1 workgroup) the histogram → each byte's list offset (tlist[2·byte]);
//                    the lengths (tlist[2·byte + 1]) to 0;
//   wl_byte_lists    every position into its byte's list: per workgroup a range of each list
//                    reserved with one atomicAdd on its length (which ends at the byte's count),
//                    the positions placed in it by workgroup-memory atomics. The order inside a
//                    list is not stream order (nothing depends on it: a list is a set).
const SETUP_ITEMS: u32 = 4u;       // stream positions per thread of wl_links / wl_byte_lists
var<workgroup> sh_hist: array<atomic<u32>, 256>;

fn setup_clear_hist(lid: u32) {
    for (var b = lid; b < 256u; b += WG) { atomicStore(&sh_hist[b], 0u); }
    workgroupBarrier();
}

@compute @workgroup_size(WG)
fn wl_links(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    setup_clear_hist(lid);
    let n = atomicLoad(&state[S_N]);
    let base = (atomicLoad(&state[S_WG0]) + linear_id(wid, nwg)) * (WG * SETUP_ITEMS);
    for (var it = 0u; it < SETUP_ITEMS; it++) {
        let i = base + it * WG + lid;
        if (i >= n) { continue; }
        let s = lsym[i];
        var r = NONE;
        if (i + 1u < n && (lsym[i + 1u] & TWS) == 0u) { r = i + 1u; }
        nxt[i] = r;
        prv[i] = select(i - 1u, NONE, (s & TWS) != 0u);
        atomicAdd(&sh_hist[s & 0xFFu], 1u);
    }
    workgroupBarrier();
    for (var b = lid; b < 256u; b += WG) {
        let c = atomicLoad(&sh_hist[b]);
        if (c != 0u) { atomicAdd(&tlist[2u * b], c); }
    }
}

@compute @workgroup_size(WG)
fn wl_list_offsets(@builtin(local_invocation_index) lid: u32) {
    for (var b = lid; b < 256u; b += WG) {
        atomicStore(&sh_hist[b], atomicLoad(&tlist[2u * b]));
    }
    workgroupBarrier();
    if (lid == 0u) {
        var off = 0u;
        for (var b = 0u; b < 256u; b++) {
            let c = atomicLoad(&sh_hist[b]);
            atomicStore(&sh_hist[b], off);
            off += c;
        }
    }
    workgroupBarrier();
    for (var b = lid; b < 256u; b += WG) {
        atomicStore(&tlist[2u * b], atomicLoad(&sh_hist[b]));
        atomicStore(&tlist[2u * b + 1u], 0u);
    }
}

@compute @workgroup_size(WG)
fn wl_byte_lists(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    setup_clear_hist(lid);
    let n = atomicLoad(&state[S_N]);
    let base = (atomicLoad(&state[S_WG0]) + linear_id(wid, nwg)) * (WG * SETUP_ITEMS);
    var byt: array<u32, SETUP_ITEMS>;
    var at: array<u32, SETUP_ITEMS>;     // place among this workgroup's positions of the byte
    for (var it = 0u; it < SETUP_ITEMS; it++) {
        let i = base + it * WG + lid;
        at[it] = NONE;
        if (i >= n) { continue; }
        byt[it] = lsym[i] & 0xFFu;
        at[it] = atomicAdd(&sh_hist[byt[it]], 1u);
    }
    workgroupBarrier();
    for (var b = lid; b < 256u; b += WG) {      // this workgroup's range of each list
        let c = atomicLoad(&sh_hist[b]);
        var first = 0u;
        if (c != 0u) { first = atomicLoad(&tlist[2u * b]) + atomicAdd(&tlist[2u * b + 1u], c); }
        atomicStore(&sh_hist[b], first);
    }
    workgroupBarrier();
    for (var it = 0u; it < SETUP_ITEMS; it++) {
        if (at[it] == NONE) { continue; }
        pool[atomicLoad(&sh_hist[byt[it]]) + at[it]] = base + it * WG + lid;
    }
}

// ---- find_max_super: the best of each changed group of SUPER block bests -------------------
// (After a count only: the merge steps update the groups in find_max4.) Clears S_ALL.
@compute @workgroup_size(WG)
fn find_max_super(@builtin(workgroup_id) wid: vec3<u32>,
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
    let s = linear_id(wid, nwg);
    if (lid == 0u) {
        if (s == 0u) { atomicStore(&state[S_ALL], 0u); }
        sh_v = 0u;
        if (s < P.nsupers) { sh_v = sdirty[s]; }
    }
    if (workgroupUniformLoad(&sh_v) == 0u) { return; }
    super_best(s, lid, sg);
    if (lid == 0u) { sdirty[s] = 0u; }
}

// The best of the super-block bests, in every thread.
fn final_best_super(lid: u32, sg: vec3<u32>) -> vec4<u32> {
    var b = NO_BEST;
    for (var j = lid; j < P.nsupers; j += WG) {
        let c = vec4<u32>(sbest[4u * j], sbest[4u * j + 1u], sbest[4u * j + 2u],
                          sbest[4u * j + 3u]);
        if (better(c, b)) { b = c; }
    }
    return wg_best_sg(lid, b, sg);
}

// ---- the walk ----------------------------------------------------------------------------------
// One occurrence's up to 4 deltas (lane i: pair (x[i], y[i]), subtracted when neg[i], when
// on[i]): probed together (table_slots4), counted, and their blocks listed with the 4 stamps
// loaded together: ~2 memory round trips instead of ~8 one key after the other.
fn pair_deltas4(x: vec4<u32>, y: vec4<u32>, neg: vec4<bool>, on: vec4<bool>, lo: u32,
                hi: u32) {
    // The added pairs (X, C), (C, Y) hold the new token C: probed by compare-exchange at once.
    var st = vec4<u32>(0u);
    var col = vec4<u32>(0u);
    for (var i = 0u; i < 4u; i++) {
        let k = key_pack(x[i], y[i]);
        st[i] = k.x;
        col[i] = k.y;
    }
    let slot = table_slots4(st, col, on, !neg);
    var ok = on & (slot != vec4<u32>(EMPTY));
    var mark = vec4<u32>(0u);
    for (var i = 0u; i < 4u; i++) {
        if (ok[i]) {
            let v = signed_weight(lo, hi, neg[i]);
            table_count(slot[i], v.x, v.y);
        }
    }
    for (var i = 0u; i < 4u; i++) {
        if (ok[i]) { mark[i] = atomicLoad(&dmark[slot[i] / BLOCK]); }
    }
    for (var i = 0u; i < 4u; i++) {
        if (ok[i] && mark[i] != merge_stamp) { list_block(slot[i] / BLOCK); }
    }
}

// Where a thread is in its share of a list: entry j (of j0, j0 + stride, …); p = the next
// symbol of the chain it leads, NONE = entry j is not started; prev = the id of the live
// symbol before p after the chain's merges so far (NONE: p starts its word).
struct Walk {
    j: u32,
    p: u32,
    prev: u32,
}

struct Merge {
    a: u32,
    b: u32,
    c: u32,
    tag: u32,      // DEAD | k: a symbol merged away by this merge
    off: u32,      // the walked list: pool[off .. off + len)
    len: u32,
    top: u32,      // C's list starts at pool[top]
    stride: u32,   // threads of the grid
    from_b: bool,  // the list is B's (entries are q's), else A's (p's)
}

// Per-thread counters of one dispatch (PROFILE), and its budget spent.
struct Cost {
    spent: u32,
    steps: u32,
    depth: u32,
}

// The live symbol left of x when merge m began: (position, its lsym now, its prv), position
// NONE at the word's start, PAUSED when the budget ran out (the hops so far are saved in
// prv[x]). y0 = prv[x] (the caller loads it beside its other loads). prv[x] hops over symbols
// dead since an earlier merge; one merged away by m itself (DEAD | k) is still "there" (it
// answers the occurrence tests). Hops found are saved (prv[x] := result): any value of prv[x]
// another thread reads meanwhile leads to the same answer. A symbol's lsym and prv are loaded
// together (one round trip per hop).
fn live_left(x: u32, y0: u32, m: Merge, cost: ptr<function, Cost>) -> vec3<u32> {
    var y = y0;
    var hops = 0u;
    (*cost).depth += 1u;
    loop {
        if (y == NONE) { return vec3<u32>(NONE, 0u, NONE); }
        let sy = lsym[y];
        let py = prv[y];
        if ((sy & DEAD) == 0u || sy == m.tag) {
            if (hops != 0u) { prv[x] = y; }
            return vec3<u32>(y, sy, py);
        }
        if ((*cost).spent >= P.budget) {
            prv[x] = y;
            return vec3<u32>(PAUSED, 0u, 0u);
        }
        y = py;
        hops += 1u;
        (*cost).spent += 1u;
        (*cost).steps += 1u;
        (*cost).depth += 1u;
    }
    return vec3<u32>(NONE, 0u, NONE);    // (not reached)
}

// List entry e (se = lsym[e], pe = prv[e], ne = nxt[e], loaded together by the caller): the
// chain of occurrences this thread leads, as (p, the id of p's live left neighbour or NONE at
// a word start, lsym[p], nxt[p]); p = NONE when it leads none, PAUSED when the budget ran out
// (the entry is started again later). Whether (p, nxt[p]) is an occurrence at all the chain
// loop checks (only the leader may use nxt[p]: its own).
fn lead_of(e: u32, se: u32, pe: u32, ne: u32, m: Merge, cost: ptr<function, Cost>)
        -> vec4<u32> {
    let none = vec4<u32>(NONE, NONE, 0u, NONE);
    var p = e;
    var sp = se;
    var pp = pe;
    var np = ne;
    if (m.from_b) {
        if ((se & LIVE) != m.b) { return none; }
        let l = live_left(e, pe, m, cost);
        if (l.x == PAUSED) { return vec4<u32>(PAUSED, 0u, 0u, 0u); }
        // C: the chain's leader merged it already; A: (p, e) is an occurrence
        if (l.x == NONE || (l.y & LIVE) != m.a) { return none; }
        p = l.x;
        sp = l.y;
        pp = l.z;
        np = e;            // p's live right neighbour when the merge began: e
    } else if ((se & LIVE) != m.a) {
        return none;
    }
    let l = live_left(p, pp, m, cost);
    if (l.x == PAUSED) { return vec4<u32>(PAUSED, 0u, 0u, 0u); }
    if (l.x == NONE) { return vec4<u32>(p, NONE, sp, np); }
    let id = l.y & LIVE;
    if (l.y == m.tag) { return none; }             // L merged away now: part of an occurrence
    if (m.a == m.b) {
        if (id == m.a || id == m.c) { return none; }   // the run begins left of p
    } else if (id == m.b) {
        let ll = live_left(l.x, l.z, m, cost);
        if (ll.x == PAUSED) { return vec4<u32>(PAUSED, 0u, 0u, 0u); }
        if (ll.x != NONE && ((ll.y & LIVE) == m.a || (ll.y & LIVE) == m.c)) { return none; }
    }
    return vec4<u32>(p, id, sp, np);
}

// Walk this thread's list entries from s until they are done (s.j ≥ len) or P.budget steps +
// hops + table probes are spent. Loads that do not depend on each other are issued together
// (an entry's symbol, links and word; a pair's right half and what follows it): the depth of
// the chain of dependent loads is what a merge's latency is made of.
fn walk(s0: Walk, m: Merge) -> Walk {
    var s = s0;
    var cost = Cost(0u, 0u, 0u);
    var entries = 0u;
    var probes_all = 0u;
    loop {
        if (s.j >= m.len || cost.spent >= P.budget) { break; }
        var sp = 0u;           // lsym[s.p] and nxt[s.p] (carried along the chain)
        var chain = 0u;        // occurrences of this chain merged here (train_long.wgsl)
        var q = NONE;
        var w = 0u;
        // lsym[q] and nxt[q] of the chain's first occurrence when already loaded (`known`):
        // B's list: the entry is q; A's list: loaded beside lead_of's loads. Nobody else
        // writes them in this merge while q holds B (q is then only this chain's), and
        // whether q holds B does not change during it (other threads write C or DEAD | k only
        // into symbols of their own occurrences, which hold A or B: q holds neither, or B).
        var known = false;
        var sq0 = 0u;
        var r0 = NONE;
        if (s.p == NONE) {
            let e = pool[m.off + s.j];
            entries += 1u;
            cost.spent += 1u;
            let se = lsym[e];
            let pe = prv[e];
            let ne = nxt[e];
            w = wid_in[e];     // p is in e's word
            cost.depth += 2u;  // the entry, its loads
            if (m.from_b) {
                sq0 = se;
                r0 = ne;
            } else if (ne != NONE && (se & LIVE) == m.a) {
                sq0 = lsym[ne];
                r0 = nxt[ne];
            }
            let l = lead_of(e, se, pe, ne, m, &cost);
            if (l.x == PAUSED) { break; }
            if (l.x == NONE) {
                s.j += m.stride;
                continue;
            }
            s.p = l.x;
            s.prev = l.y;
            sp = l.z;
            q = l.w;
            known = true;
        } else {               // resumed from a carry
            chain = P.long_min;    // (a chain that took a whole budget is long)
            sp = lsym[s.p];
            q = nxt[s.p];
            w = wid_in[s.p];
        }
        // the chain from s.p: merge while s.p starts an occurrence
        let lo = weights[2u * w];
        let hi = weights[2u * w + 1u];
        loop {
            if (s.p == NONE || cost.spent >= P.budget) { break; }
            let p = s.p;
            var sq = sq0;
            var r = r0;
            if (!known) {
                let qq = select(q, 0u, q == NONE);
                sq = lsym[qq];
                r = nxt[qq];
                cost.depth += 1u;
            }
            known = false;
            if ((sp & LIVE) != m.a || q == NONE || (sq & LIVE) != m.b) {
                s.p = NONE;
                break;
            }
            if (chain == P.long_min && chain != NONE && long_handoff(p, s.prev)) {
                s.p = NONE;    // the rest of this long chain is merged in parallel
                break;
            }
            chain += 1u;
            let rr = select(r, 0u, r == NONE);
            let sr = lsym[rr];          // Y, and whether r starts the chain's next occurrence
            let nr = nxt[rr];
            // C's list entry taken before the probes: the atomic's round trip overlaps theirs
            // (nobody reads C's list in this merge).
            let at = atomicAdd(&tlist[2u * m.c + 1u], 1u);
            probes = 0u;
            probe_rounds = 0u;
            // −(X, A) + (X, C), −(B, Y) + (C, Y); (A, B) itself skipped (A = B runs)
            var y = 0u;
            if (r != NONE) { y = sr & IDM; }
            let left = s.prev != NONE;
            let right = r != NONE;
            pair_deltas4(vec4<u32>(s.prev, s.prev, m.b, m.c), vec4<u32>(m.a, m.c, y, y),
                         vec4<bool>(true, false, true, false),
                         vec4<bool>(left && !(s.prev == m.a && m.a == m.b), left,
                                    right && !(y == m.b && m.a == m.b), right), lo, hi);
            lsym[p] = m.c | (sp & TWS);
            lsym[q] = m.tag;
            nxt[p] = r;
            pool[m.top + at] = p;
            s.prev = m.c;
            s.p = r;
            sp = sr;                    // r is this chain's (or nobody's): still current
            q = nr;
            cost.spent += 1u + probes;
            cost.steps += 1u;
            cost.depth += 3u + probe_rounds;     // lsym[r]; probes; stamps; append
            probes_all += probes;
        }
        if (s.p == NONE) { s.j += m.stride; }     // the chain is done
    }
    if (PROFILE != 0u && cost.spent != 0u) {
        atomicAdd(&state[S_WALK_ENTRIES], entries);
        atomicAdd(&state[S_WALK_STEPS], cost.steps);
        atomicAdd(&state[S_WALK_PROBES], probes_all);
        atomicMax(&state[S_DEPTH_MAX], cost.depth);
    }
    return s;
}

// The list walked for (a, b): the shorter of A's and B's; C's list begins at `top`.
fn merge_of(a: u32, b: u32, c: u32, top: u32, stride: u32) -> Merge {
    return merge_with(a, b, c, top, stride, atomicLoad(&tlist[2u * a]),
                      atomicLoad(&tlist[2u * a + 1u]), atomicLoad(&tlist[2u * b]),
                      atomicLoad(&tlist[2u * b + 1u]));
}

// merge_of with A's and B's list heads (offset, length) given.
fn merge_with(a: u32, b: u32, c: u32, top: u32, stride: u32, oa: u32, la: u32, ob: u32,
              lb: u32) -> Merge {
    let from_b = lb < la && a != b;
    return Merge(a, b, c, DEAD | ((c - 256u) & IDM), select(oa, ob, from_b), min(la, lb), top,
                 stride, from_b);
}

fn save_carry(t: u32, s: Walk) {
    carry[4u * t] = s.j;
    carry[4u * t + 1u] = s.p;
    carry[4u * t + 2u] = s.prev;
    carry[4u * t + 3u] = CARRY_LIVE;
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
    // workgroup derives itself (or not at all: appends go to C's list only). S_HOLD was set by
    // an earlier dispatch (S_PAUSE may rise during this one: it is not read here).
    // The state is loaded by the last thread (which has no super-block best to load while
    // there are fewer than WG groups) and the bests reduced before it is looked at: the two
    // round trips overlap (a stopped or held step reduces for nothing).
    if (lid == WG - 1u) {
        sh_u = atomicLoad(&state[S_STOP]) | atomicLoad(&state[S_HOLD]);
        sh_v = atomicLoad(&state[S_K]);
        sh_w = atomicLoad(&state[S_TOP]);
    }
    let r = final_best_super(lid, sg);
    if (workgroupUniformLoad(&sh_u) != 0u) { return; }
    let k = workgroupUniformLoad(&sh_v);
    let top = workgroupUniformLoad(&sh_w);
    let stop = training_done(r, k);
    let wg = linear_id(wid, nwg);
    let a = r.z;
    let b = r.w;
    let c = 256u + k;
    merge_stamp = k + 1u;
    // The merge is recorded by the grid's last workgroup: the one with the fewest list
    // entries (none unless the list is longer than the grid's other threads), so that its
    // dependent stores are not in series with a walk.
    if (wg == nwg.x * nwg.y - 1u && lid == 0u) {
        if (stop) {
            atomicStore(&state[S_STOP], 1u);
        } else {
            record_merge(k, r);
            atomicStore(&state[S_DONE], 1u);
            atomicStore(&tlist[2u * c], top);
            let kp = key_pack(a, b);
            let slot = table_slot(kp.x, kp.y);
            if (slot != EMPTY) {
                atomicStore(&tcounts[2u * slot], 0u);
                atomicStore(&tcounts[2u * slot + 1u], 0u);
                dirty[slot / BLOCK] = 1u;
                block_dirtied(slot / BLOCK);
            }
        }
    }
    // `stop` is the same in every thread (it comes from the reduction); broadcast through a
    // uniform load so that the barrier is in uniform control flow by WGSL's rules.
    // The list heads are loaded by one thread and shared: every thread loading them would be
    // (workgroups × WG / subgroup size) requests for the same 4 words at one L2 slice.
    if (lid == 0u) {
        sh_x = select(0u, 1u, stop);
        if (!stop) {
            sh_heads[0] = atomicLoad(&tlist[2u * a]);
            sh_heads[1] = atomicLoad(&tlist[2u * a + 1u]);
            sh_heads[2] = atomicLoad(&tlist[2u * b]);
            sh_heads[3] = atomicLoad(&tlist[2u * b + 1u]);
        }
    }
    if (workgroupUniformLoad(&sh_x) != 0u) { return; }
    let m = merge_with(a, b, c, top, nwg.x * nwg.y * WG, sh_heads[0], sh_heads[1], sh_heads[2],
                       sh_heads[3]);
    let t = wg * WG + lid;
    let s = walk(Walk(t, NONE, NONE), m);
    if (s.j < m.len) {
        save_carry(t, s);
        atomicAdd(&state[S_PAUSE], 1u);
    }
}

// The walks wl_merge (or an earlier wl_continue) carried: each thread resumes its own slot.
// Dispatched by the host, with wl_merge's grid, until S_PAUSE is 0.
@compute @workgroup_size(WG)
fn wl_continue(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let t = linear_id(wid, nwg) * WG + lid;
    let f = carry[4u * t + 3u];
    if ((f & CARRY_LIVE) == 0u) { return; }
    let m = merge_of(atomicLoad(&state[S_A]), atomicLoad(&state[S_B]), atomicLoad(&state[S_C]),
                     atomicLoad(&state[S_TOP]), nwg.x * nwg.y * WG);
    merge_stamp = m.c - 255u;
    let s = walk(Walk(carry[4u * t], carry[4u * t + 1u], carry[4u * t + 2u]), m);
    if (s.j < m.len) {
        save_carry(t, s);
    } else {
        carry[4u * t + 3u] = 0u;
        atomicSub(&state[S_PAUSE], 1u);
    }
}
