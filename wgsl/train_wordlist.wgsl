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
// Per step (one or more merges: wl_select below), 3 dispatches, no pass over the stream:
//   find_max4       (train_table.wgsl) the dirty blocks' bests: the blocks the last step
//                   listed (`dlist`, each once) grid-stride over ≤ 1,056 workgroups (the host's
//                   grid), not one workgroup per table block (tens of thousands at scale, nearly
//                   all clean). Per group of SUPER = 256 blocks the list holds `scnt` of them;
//                   the workgroup that finishes the group's last one (an atomic count down,
//                   after a storageBarrier: device-scope release/acquire in naga's SPIR-V, as
//                   CUDA's __threadfence in its "last block" reduction) reduces the group's
//                   block bests into its super-block best (once find_max_super, a dispatch of
//                   its own). Its step_blocked hook (below) first commits the last step
//                   (S_K += its merges, each member's C list placed, the pool top past them),
//                   and its step_thread hook moves the members' scratch lists into place and
//                   sets prv[r] = p for every occurrence p·q·r the last step made (so `prv` is
//                   exact again: nobody reads it in this dispatch)
//   wl_select   one workgroup: the step's members, the longest prefix of the pair ranking
//               with distinct ids (at most BATCH_MAX), recorded in `batch` and `merges`, their
//               pair counts set to 0
//   wl_merge    grid-stride over the members' walked lists (each the shorter of its A's and
//               B's), one thread per entry: the entry's occurrence (p, q) of (A, B) is found
//               (A's list: p; B's: q and p = its live left); the thread that holds the FIRST
//               occurrence of a chain of adjacent ones (A B A B …, a run of A == B paired left
//               to right, or occurrences of different members back to back) merges the whole
//               chain, in order, with the exact pair-count deltas, and appends each merged p
//               to its C's list; the other entries do nothing. Per entry a fixed number of
//               dependent loads (list entry, its symbol, its neighbours' symbols, the deltas'
//               table probes), not a walk of the whole word: the longest word of a list no
//               longer sets the merge's latency (it did: ~2 dependent loads per live symbol).
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
//   A step of several members (A ≠ B each, all ids distinct, so occurrences never overlap):
//   p leads unless L died in this step or L holds some member's B and L's live left holds
//   that member's A or C (lead_of); "merge k" above reads "this step" throughout.
// Long chains: a thread's work is bounded by P.budget steps + hops + table probes per dispatch
// (a CPU adapter may stop loops after 65,535 iterations of a SIMD vector of lanes, silently — the host
// divides its budget by the lanes there; a real GPU may reset a dispatch that runs for seconds). A thread out of budget saves where it is (list entry, symbol, left
// neighbour) in its `carry` slot and counts itself in S_PAUSE; from then on every
// step does nothing (find_max4 latches S_HOLD, wl_merge returns) until the host has run
// wl_continue — same grid, each thread resuming its own slot — until S_PAUSE is 0, as the
// encoder continues a long word. So any word (a 1 MB run of one byte) takes this algorithm.
// A chain longer than P.long_min occurrences (or one resumed from a carry) is not walked on:
// its thread hands the rest to train_long.wgsl (long_handoff, counted in S_PAUSE too), whose
// rounds in the host's continue submits merge it in parallel with the same deltas (in a step
// of several merges: a run of one member's occurrences, handed over with that member).
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
//  22 batch  : storage, read_write  array<u32>  the running step's members (BATCH_WORDS)
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
@group(0) @binding(22) var<storage, read_write> batch: array<u32>;
const SUPER: u32 = 256u;    // blocks per super-block (= WG: one per find_max_super thread)

// The running step's merges ("members"), written by wl_select: a header, then BR words per
// member. Member x is merge k0 + x, its token C = 256 + k0 + x; its walked list (the shorter
// of A's and B's) is entries j0 .. j0 + len of the members' lists concatenated; member 0's C
// list is appended at the pool's top (as a lone merge's), the others' in the pool's scratch
// tail at `sbase` (find_max4 places them after member 0's, step_thread).
const BATCH_MAX: u32 = 8u;  // members per step at most
const BH_K: u32 = 0u;       // members (0: none recorded: stopped)
const BH_J: u32 = 1u;       // entries of the members' walked lists
const BH_TOP: u32 = 2u;     // S_TOP when the step was recorded (member 0's C list starts there)
const BH_K0: u32 = 3u;      // merge index of member 0
const BATCH_HEAD: u32 = 4u;
const BR: u32 = 8u;         // words per member:
const BR_A: u32 = 0u;       //   left id, right id, new id
const BR_B: u32 = 1u;
const BR_C: u32 = 2u;
const BR_OFF: u32 = 3u;     //   its walked list: pool[off .. off + len)
const BR_LEN: u32 = 4u;
const BR_FROMB: u32 = 5u;   //   1: the list is B's
const BR_J0: u32 = 6u;      //   its first entry in the concatenation
const BR_TOP: u32 = 7u;     //   where its C list is appended (member 0: the top; others: scratch)
const BATCH_WORDS: u32 = 68u;   // BATCH_HEAD + BATCH_MAX · BR
var<workgroup> sh_bat: array<u32, BATCH_WORDS>;
// The running step's merge indices k0 .. k0 + n - 1 (its tags DEAD | k): set per dispatch.
var<private> step_k0: u32;
var<private> step_n: u32;
// find_max4 places the scratch lists with its first SCATTER_WORKGROUPS workgroups (as it
// numbers them), at most SCATTER_ITEMS entries per thread: P.scatter_cap, the host's bound,
// is at most their product (wl_select keeps a step's scratch lists under it).
const SCATTER_WORKGROUPS: u32 = 64u;
const SCATTER_ITEMS: u32 = 64u;

const DEAD: u32 = 0x40000000u;   // lsym of a symbol merged away (the right half of a pair),
                                 // | the merge's index k (IDM bits)
const LIVE: u32 = 0x4003FFFFu;   // DEAD | IDM: lsym & LIVE is the id of a live symbol, ≥ DEAD
                                 // for a dead one
const NONE: u32 = 0xFFFFFFFFu;   // no next symbol (nxt), no previous one (prv), no left id
const PAUSED: u32 = 0xFFFFFFFEu; // live_left ran out of budget
const S_PAUSE: u32 = 9u;    // walks carried to wl_continue; nonzero: merge steps do nothing
const S_HOLD: u32 = 10u;    // 1: a step saw S_PAUSE (wl_merge returns); the host clears it
const S_DONE: u32 = 12u;    // merges wl_select recorded whose S_K increment is pending
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
const S_SH: u32 = 23u;      // steps recorded (wl_select): the running step's stamp (dmark), and
                            // its dirty blocks go to dlist's half (S_SH - 1) & 1
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
    let done = atomicLoad(&state[S_DONE]);
    let sh = atomicLoad(&state[S_SH]);
    if (first && done != 0u) {
        // The step's commit. Nobody else reads these words in this dispatch (step_thread
        // reads the batch table's top, not S_TOP, and the lists' lengths).
        if (PROFILE != 0u) {
            atomicAdd(&state[S_WALK_BLOCKS], atomicLoad(&state[S_DLEN + ((sh - 1u) & 1u)]));
        }
        atomicAdd(&state[S_K], done);
        atomicStore(&state[S_DONE], 0u);
        // the members' C lists, member 0's first: each one's offset, the pool top past them
        var top = batch[BH_TOP];
        for (var x = 0u; x < min(batch[BH_K], BATCH_MAX); x++) {
            let c = batch[BATCH_HEAD + x * BR + BR_C];
            atomicStore(&tlist[2u * c], top);
            top += atomicLoad(&tlist[2u * c + 1u]);
        }
        atomicStore(&state[S_TOP], top);
        if (PROFILE != 0u) {
            atomicAdd(&state[S_WALK_DEPTH], atomicExchange(&state[S_DEPTH_MAX], 0u));
        }
    }
    if (first) {
        // The next step (stamp S_SH + 1) lists its dirty blocks in half S_SH & 1; this
        // dispatch reads the other half (the last step's).
        atomicStore(&state[S_DLEN + (sh & 1u)], 0u);
    }
    return stop;
}

// find_max4's blocks: every block after clear_table (S_ALL), else the ones the last step
// listed (S_SH tells which half; none before the first step).
fn scan_blocks() -> vec2<u32> {
    let all = atomicLoad(&state[S_ALL]);         // (loaded together, branches after)
    let sh = atomicLoad(&state[S_SH]);
    let h = (sh - 1u) & 1u;                      // (any half when sh = 0: unused)
    let len = atomicLoad(&state[S_DLEN + h]);
    if (all != 0u) { return vec2<u32>(P.nblocks, NONE); }
    if (sh == 0u) { return vec2<u32>(0u, NONE); }
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

// A step of several members: their scratch lists are moved after member 0's (all of them:
// the next wl_merge may walk them), with the same prv repair, by the first SCATTER_WORKGROUPS
// workgroups (each list's length and place computed by every thread: ≤ BATCH_MAX loads).
// Run again (after a recount's find_max4) it writes the same words again.
fn step_thread(t: u32, threads: u32) {
    let kk = min(batch[BH_K], BATCH_MAX);
    if (kk == 0u) { return; }
    let top = batch[BH_TOP];
    let c0 = batch[BATCH_HEAD + BR_C];
    let len0 = atomicLoad(&tlist[2u * c0 + 1u]);
    if (FIXUP != 0u && t < FIXUP_WORKGROUPS * WG) {
        let stride = min(threads, FIXUP_WORKGROUPS * WG);
        var i = t;
        for (var it = 0u; it < P.budget; it++) {
            if (i >= len0) { break; }
            let p = pool[top + i];
            let r = nxt[p];
            if ((lsym[p] & DEAD) == 0u && r != NONE) { prv[r] = p; }
            i += stride;
        }
    }
    if (kk < 2u || t >= SCATTER_WORKGROUPS * WG) { return; }
    let stride = min(threads, SCATTER_WORKGROUPS * WG);
    var base = top + len0;
    for (var x = 1u; x < kk; x++) {
        let row = BATCH_HEAD + x * BR;
        let len = atomicLoad(&tlist[2u * batch[row + BR_C] + 1u]);
        let src = batch[row + BR_TOP];
        // (≤ P.scatter_cap / stride + 1 iterations over all members: SCATTER_ITEMS + BATCH_MAX)
        for (var i = t; i < len; i += stride) {
            let p = pool[src + i];
            pool[base + i] = p;
            let r = nxt[p];
            if (FIXUP != 0u && (lsym[p] & DEAD) == 0u && r != NONE) { prv[r] = p; }
        }
        base += len;
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
    let sl = stream_slice(wid, nwg, SETUP_ITEMS);
    for (var it = 0u; it < SETUP_ITEMS; it++) {
        let i = sl.base + it * WG + lid;
        if (i >= sl.n) { continue; }
        let s = lsym[i];
        var r = NONE;
        if (i + 1u < sl.n && (lsym[i + 1u] & TWS) == 0u) { r = i + 1u; }
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
    let sl = stream_slice(wid, nwg, SETUP_ITEMS);
    var byt: array<u32, SETUP_ITEMS>;
    var at: array<u32, SETUP_ITEMS>;     // place among this workgroup's positions of the byte
    for (var it = 0u; it < SETUP_ITEMS; it++) {
        let i = sl.base + it * WG + lid;
        at[it] = NONE;
        if (i >= sl.n) { continue; }
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
        pool[atomicLoad(&sh_hist[byt[it]]) + at[it]] = sl.base + it * WG + lid;
    }
}

// ---- find_max_super: the best of each changed group of SUPER block bests -------------------
// (After a count only: the merge steps update the groups in find_max4.) Clears S_ALL.
@compute @workgroup_size(WG)
fn find_max_super(@builtin(workgroup_id) wid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>,
                  l: Lanes) {
    let lid = l.lid;
    let sg = lanes_sg(l);
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

// Whether lsym value v is a symbol merged away in the running step (DEAD | k, k one of its
// merges).
fn in_step(v: u32) -> bool {
    return (v & DEAD) != 0u && (((v & IDM) - step_k0) & IDM) < step_n;
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
        if ((sy & DEAD) == 0u || in_step(sy)) {
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
// In a step of kk members (sh_bat) with A ≠ B, L ending an occurrence means: L holds some
// member z's B and L's live left holds A_z or C_z (for kk = 1, z is this merge).
fn lead_of(e: u32, se: u32, pe: u32, ne: u32, m: Merge, kk: u32, cost: ptr<function, Cost>)
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
    if (in_step(l.y)) { return none; }             // L merged away now: part of an occurrence
    if (m.a == m.b) {
        if (id == m.a || id == m.c) { return none; }   // the run begins left of p
        return vec4<u32>(p, id, sp, np);
    }
    let z = member_b(id, kk);
    if (z != NONE) {
        let ll = live_left(l.x, l.z, m, cost);
        if (ll.x == PAUSED) { return vec4<u32>(PAUSED, 0u, 0u, 0u); }
        let r = BATCH_HEAD + z * BR;
        let lid = ll.y & LIVE;
        if (ll.x != NONE && (lid == sh_bat[r + BR_A] || lid == sh_bat[r + BR_C])) {
            return none;
        }
    }
    return vec4<u32>(p, id, sp, np);
}

// Merge the occurrence p·q (A B) with live left id `prev` (NONE: word start), q's next r and
// its lsym sr (Y), of a word weighing (lo, hi): −(X, A) + (X, C), −(B, Y) + (C, Y) ((A, B)
// itself skipped in A = B runs), p → C, q → DEAD | k, p appended to C's list. C's list entry
// is taken before the probes: the atomic's round trip overlaps theirs (nobody reads C's list
// in this step). Adds the probes (private `probes`) and the steps to cost.
fn merge_occurrence(p: u32, q: u32, r: u32, sp: u32, sr: u32, prev: u32, m: Merge, lo: u32,
                    hi: u32, cost: ptr<function, Cost>) {
    let at = atomicAdd(&tlist[2u * m.c + 1u], 1u);
    probes = 0u;
    probe_rounds = 0u;
    var y = 0u;
    if (r != NONE) { y = sr & IDM; }
    let left = prev != NONE;
    let right = r != NONE;
    pair_deltas4(vec4<u32>(prev, prev, m.b, m.c), vec4<u32>(m.a, m.c, y, y),
                 vec4<bool>(true, false, true, false),
                 vec4<bool>(left && !(prev == m.a && m.a == m.b), left,
                            right && !(y == m.b && m.a == m.b), right), lo, hi);
    lsym[p] = m.c | (sp & TWS);
    lsym[q] = m.tag;
    nxt[p] = r;
    pool[m.top + at] = p;
    (*cost).spent += 1u + probes;
    (*cost).steps += 1u;
    (*cost).depth += 3u + probe_rounds;     // lsym[r]; probes; stamps; append
}

// PROFILE: a walk's counters into the state words.
fn walk_counters(cost: Cost, entries: u32, probes_all: u32) {
    if (PROFILE != 0u && cost.spent != 0u) {
        atomicAdd(&state[S_WALK_ENTRIES], entries);
        atomicAdd(&state[S_WALK_STEPS], cost.steps);
        atomicAdd(&state[S_WALK_PROBES], probes_all);
        atomicMax(&state[S_DEPTH_MAX], cost.depth);
    }
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
            let l = lead_of(e, se, pe, ne, m, 1u, &cost);
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
            if (chain == P.long_min && chain != NONE && long_handoff(p, s.prev, 0u)) {
                s.p = NONE;    // the rest of this long chain is merged in parallel
                break;
            }
            chain += 1u;
            let rr = select(r, 0u, r == NONE);
            let sr = lsym[rr];          // Y, and whether r starts the chain's next occurrence
            let nr = nxt[rr];
            merge_occurrence(p, q, r, sp, sr, s.prev, m, lo, hi, &cost);
            probes_all += probes;
            s.prev = m.c;
            s.p = r;
            sp = sr;                    // r is this chain's (or nobody's): still current
            q = nr;
        }
        if (s.p == NONE) { s.j += m.stride; }     // the chain is done
    }
    walk_counters(cost, entries, probes_all);
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
    return new_merge(a, b, c, select(oa, ob, from_b), min(la, lb), top, stride, from_b);
}

// The Merge of A + B -> C walking pool[off .. off + len) (from_b: B's list), C's list at `top`:
// the only place its tag (the mark a symbol merged away by it gets) is made, for merge_with,
// member_merge (a step's member from sh_bat) and train_long's batch_merge (from `batch`).
fn new_merge(a: u32, b: u32, c: u32, off: u32, len: u32, top: u32, stride: u32,
             from_b: bool) -> Merge {
    return Merge(a, b, c, DEAD | ((c - 256u) & IDM), off, len, top, stride, from_b);
}

// walk_batch's member run where it stopped mid-chain (occurrences of one member merged last in
// a row, bits 8-23, and that member, bits 24-31, CARRY_RUN_NONE: none), kept in a carry's flag
// word beside CARRY_LIVE so that a resumed walk counts on (a budget smaller than P.long_min
// would otherwise restart the count in every dispatch and never hand a long run over). Set by
// wl_continue before a resumed walk_batch, left by walk_batch for save_carry; 0 in a step of
// one merge.
var<private> bat_run: u32;
const CARRY_RUN_NONE: u32 = 0xFFu;

fn save_carry(t: u32, s: Walk) {
    carry[4u * t] = s.j;
    carry[4u * t + 1u] = s.p;
    carry[4u * t + 2u] = s.prev;
    carry[4u * t + 3u] = CARRY_LIVE | bat_run;
}

// Member x of the running step (sh_bat loaded) as a Merge, the grid's `stride` threads.
fn member_merge(x: u32, stride: u32) -> Merge {
    let r = BATCH_HEAD + x * BR;
    return new_merge(sh_bat[r + BR_A], sh_bat[r + BR_B], sh_bat[r + BR_C], sh_bat[r + BR_OFF],
                     sh_bat[r + BR_LEN], sh_bat[r + BR_TOP], stride, sh_bat[r + BR_FROMB] != 0u);
}

// The member whose walked list holds concatenated entry j.
fn member_of_entry(j: u32, kk: u32) -> u32 {
    var x = kk - 1u;
    loop {
        if (x == 0u || j >= sh_bat[BATCH_HEAD + x * BR + BR_J0]) { break; }
        x -= 1u;
    }
    return x;
}

// The member with left id `id` (resp. right id), or NONE (ids ≥ DEAD match none).
fn member_a(id: u32, kk: u32) -> u32 {
    for (var x = 0u; x < kk; x++) {
        if (sh_bat[BATCH_HEAD + x * BR + BR_A] == id) { return x; }
    }
    return NONE;
}

fn member_b(id: u32, kk: u32) -> u32 {
    for (var x = 0u; x < kk; x++) {
        if (sh_bat[BATCH_HEAD + x * BR + BR_B] == id) { return x; }
    }
    return NONE;
}

// walk for a step of kk ≥ 2 members: entries j of the concatenated walked lists (`total`),
// grid-stride; each occurrence of a chain merged with its own member's ids. A chain that has
// merged P.long_min occurrences of one member in a row and goes on with that member is handed
// to train_long.wgsl with it, as walk does (that path gives the chain back to a carried walk
// when another member's occurrence follows the run, lc_plan).
fn walk_batch(s0: Walk, kk: u32, total: u32, stride: u32) -> Walk {
    var s = s0;
    var cost = Cost(0u, 0u, 0u);
    var entries = 0u;
    var probes_all = 0u;
    var run = 0u;              // occurrences of member `runm` merged last in a row
    var runm = NONE;
    loop {
        if (s.j >= total || cost.spent >= P.budget) { break; }
        var sp = 0u;
        var q = NONE;
        var w = 0u;
        if (s.p == NONE) {
            run = 0u;
            runm = NONE;
            let x = member_of_entry(s.j, kk);
            let m = member_merge(x, stride);
            let e = pool[m.off + s.j - sh_bat[BATCH_HEAD + x * BR + BR_J0]];
            entries += 1u;
            cost.spent += 1u;
            let se = lsym[e];
            let pe = prv[e];
            let ne = nxt[e];
            w = wid_in[e];
            cost.depth += 2u;
            let l = lead_of(e, se, pe, ne, m, kk, &cost);
            if (l.x == PAUSED) { break; }
            if (l.x == NONE) {
                s.j += stride;
                continue;
            }
            s.p = l.x;
            s.prev = l.y;
            sp = l.z;
            q = l.w;
        } else {               // resumed from a carry: its run goes on
            sp = lsym[s.p];
            q = nxt[s.p];
            w = wid_in[s.p];
            run = (bat_run >> 8u) & 0xFFFFu;
            runm = select(bat_run >> 24u, NONE, (bat_run >> 24u) == CARRY_RUN_NONE);
            // (as walk's: a run that took a whole budget is long: handed over if it goes on)
            if (runm != NONE && P.long_min != NONE) { run = max(run, P.long_min); }
        }
        let lo = weights[2u * w];
        let hi = weights[2u * w + 1u];
        loop {
            if (s.p == NONE || cost.spent >= P.budget) { break; }
            let p = s.p;
            let y = member_a(sp & LIVE, kk);
            let qq = select(q, 0u, q == NONE);
            let sq = lsym[qq];
            let r = nxt[qq];
            cost.depth += 1u;
            if (y == NONE || q == NONE || (sq & LIVE) != sh_bat[BATCH_HEAD + y * BR + BR_B]) {
                s.p = NONE;
                break;
            }
            if (y != runm) {
                runm = y;
                run = 0u;
            }
            if (run == P.long_min && long_handoff(p, s.prev, y)) {
                s.p = NONE;    // the rest of this member's run is merged in parallel
                break;
            }
            run = min(run + 1u, 0xFFFFu);
            let m = member_merge(y, stride);
            let rr = select(r, 0u, r == NONE);
            let sr = lsym[rr];
            let nr = nxt[rr];
            merge_occurrence(p, q, r, sp, sr, s.prev, m, lo, hi, &cost);
            probes_all += probes;
            s.prev = m.c;
            s.p = r;
            sp = sr;
            q = nr;
        }
        if (s.p == NONE) { s.j += stride; }
    }
    bat_run = 0u;
    if (s.p != NONE) {         // stopped mid-chain: its run, for save_carry
        bat_run = (run << 8u) | (select(runm, CARRY_RUN_NONE, runm == NONE) << 24u);
    }
    walk_counters(cost, entries, probes_all);
    return s;
}

// ---- wl_select: the step's merges (one workgroup) -----------------------------------------------
// Several merges in one step are exactly the serial ones when they are a prefix p_1 … p_K of
// the current ranking (count desc, A asc, B asc) whose 2K ids are distinct (so A ≠ B): merge i
// only changes pairs holding A_i or B_i, so the later members' counts stay; an old pair only
// loses count; a new pair (X, C_i) counts at most (X, A_i), (C_i, Y) at most (B_i, Y) and
// (C_i, C_i) at most (B_i, A_i), none of them a member, so ranked after p_K (by induction for
// pairs holding earlier C's), and on a tie with p_k, (X, C_i) has X ≥ A_K ≥ A_k (its (X, A_i)
// ranked after p_K) and C's ids exceed every old id, so p_k still wins. A pair with A = B
// (whose C_i A_i can count as much as itself) is a step of its own.
// The ranking's prefix from the table's levels, in three rounds of the same exact top-9
// (sel_top9): the 9 best super-blocks (by their best); the 9 best blocks of the first 8 of
// them; the 9 best entries of the first 8 of those blocks. Every entry outside those blocks
// ranks at most U, the better of the 9th super-block's and the 9th block's best, so the
// entries found that beat U are the ranking's prefix. The step is that prefix, cut at a
// shared id, the merge budget, min_frequency, P.batch_max, and where the members after the
// first would walk more than P.scatter_cap entries.
const SEL_SUPERS: u32 = 4u;     // super-block bests per thread (nsupers ≤ SEL_SUPERS · WG)
const SEL_TOP: u32 = 9u;        // BATCH_MAX + 1
const SEL_ITEMS: u32 = 32u;     // a thread's candidates at most (4 slots of 8 blocks)
const SEL_LIST: u32 = 288u;     // SEL_TOP · SEL_ITEMS
var<workgroup> sel_list: array<vec4<u32>, SEL_LIST>;
var<workgroup> sel_lid: array<u32, SEL_LIST>;
var<workgroup> sel_n: atomic<u32>;
var<workgroup> sel_theta: vec4<u32>;
var<workgroup> sel_cnt: u32;
var<workgroup> sel_top: array<vec4<u32>, SEL_TOP>;
var<workgroup> sel_topid: array<u32, SEL_TOP>;
var<workgroup> sel_heads: array<u32, 32>;        // per ranked entry: A's and B's (offset, length)
var<workgroup> sel_m: array<u32, 16>;            // the members' ids (a, b)

fn is_empty(v: vec4<u32>) -> bool { return (v.x | v.y) == 0u; }

// The 9 best of every thread's first q `vals` that are ≥ `thr` (NO_BEST: none; thr = NO_BEST:
// all) → sel_top[0..9) in rank order (NO_BEST past the last), their `ids` → sel_topid. The
// entries ≥ thr go to sel_list (a known bound: few of them at scale), each ranked by counting
// the better ones. When more than SEL_LIST are ≥ thr, the bound is raised to θ = the 9th best
// of the threads' maxima (9 distinct entries are ≥ θ, so the 9 best all are), and only the
// ≤ 9 threads whose maximum is ≥ θ hold entries ≥ θ (≤ SEL_LIST). Every thread, uniform
// control flow (keys are distinct pairs: no two entries tie).
fn sel_top9(lid: u32, vals: ptr<function, array<vec4<u32>, SEL_ITEMS>>,
            ids: ptr<function, array<u32, SEL_ITEMS>>, q: u32, thr: vec4<u32>) {
    workgroupBarrier();        // (the last round's results are read before this one writes)
    if (lid == 0u) { atomicStore(&sel_n, 0u); }
    if (lid < SEL_TOP) {
        sel_top[lid] = NO_BEST;
        sel_topid[lid] = NONE;
    }
    workgroupBarrier();
    sel_gather(vals, ids, q, thr);
    workgroupBarrier();
    if (lid == 0u) { sel_cnt = atomicLoad(&sel_n); }
    if (workgroupUniformLoad(&sel_cnt) > SEL_LIST) {
        var mx = NO_BEST;
        for (var i = 0u; i < SEL_ITEMS; i++) {
            let v = (*vals)[i];
            if (i < q && !better(thr, v) && better(v, mx)) { mx = v; }
        }
        sh_a[lid] = mx.x;
        sh_b[lid] = mx.y;
        sh_c[lid] = mx.z;
        sh_d[lid] = mx.w;
        if (lid == 0u) {
            atomicStore(&sel_n, 0u);
            sel_theta = thr;
        }
        workgroupBarrier();
        if (!is_empty(mx)) {
            var r = 0u;
            for (var j = 0u; j < WG; j++) {
                if (better(vec4<u32>(sh_a[j], sh_b[j], sh_c[j], sh_d[j]), mx)) { r += 1u; }
            }
            if (r == SEL_TOP - 1u) { sel_theta = mx; }
        }
        workgroupBarrier();
        let theta = sel_theta;
        sel_gather(vals, ids, q, theta);
        workgroupBarrier();
    }
    let n = min(atomicLoad(&sel_n), SEL_LIST);
    for (var i = lid; i < n; i += WG) {
        let v = sel_list[i];
        var r = 0u;
        for (var j = 0u; j < n; j++) {
            if (better(sel_list[j], v)) { r += 1u; }
        }
        if (r < SEL_TOP) {
            sel_top[r] = v;
            sel_topid[r] = sel_lid[i];
        }
    }
    workgroupBarrier();
}

// This thread's first q `vals` that are ≥ thr (and not empty) into sel_list (while it has room).
fn sel_gather(vals: ptr<function, array<vec4<u32>, SEL_ITEMS>>,
              ids: ptr<function, array<u32, SEL_ITEMS>>, q: u32, thr: vec4<u32>) {
    for (var i = 0u; i < SEL_ITEMS; i++) {
        let v = (*vals)[i];
        if (i < q && !is_empty(v) && !better(thr, v)) {
            let at = atomicAdd(&sel_n, 1u);
            if (at < SEL_LIST) {
                sel_list[at] = v;
                sel_lid[at] = (*ids)[i];
            }
        }
    }
}

@compute @workgroup_size(WG)
fn wl_select(@builtin(local_invocation_index) lid: u32) {
    if (lid == 0u) {
        sh_u = atomicLoad(&state[S_STOP]) | atomicLoad(&state[S_HOLD]);
        sh_v = atomicLoad(&state[S_K]);
        sh_w = atomicLoad(&state[S_TOP]);
        sh_x = atomicLoad(&state[S_SH]);
    }
    var vals: array<vec4<u32>, SEL_ITEMS>;
    var ids: array<u32, SEL_ITEMS>;
    // 1. the 9 best super-blocks
    for (var q = 0u; q < SEL_SUPERS; q++) {
        let j = q * WG + lid;
        vals[q] = NO_BEST;
        ids[q] = j;
        if (j < P.nsupers) {
            vals[q] = vec4<u32>(sbest[4u * j], sbest[4u * j + 1u], sbest[4u * j + 2u],
                                sbest[4u * j + 3u]);
        }
    }
    if (workgroupUniformLoad(&sh_u) != 0u) { return; }
    let k0 = workgroupUniformLoad(&sh_v);
    let top = workgroupUniformLoad(&sh_w);
    let sh = workgroupUniformLoad(&sh_x);
    sel_top9(lid, &vals, &ids, SEL_SUPERS, NO_BEST);
    var u = sel_top[BATCH_MAX];
    // 2. the 9 best blocks of the first 8 of them (block lid of each)
    for (var x = 0u; x < BATCH_MAX; x++) {
        vals[x] = NO_BEST;
        ids[x] = NONE;
        if (!is_empty(sel_top[x])) {
            let j = sel_topid[x] * SUPER + lid;
            ids[x] = j;
            if (j < P.nblocks) { vals[x] = load_best(j); }
        }
    }
    sel_top9(lid, &vals, &ids, BATCH_MAX, u);
    if (better(sel_top[BATCH_MAX], u)) { u = sel_top[BATCH_MAX]; }
    // 3. the 9 best entries of the first 8 of those blocks (4 slots of each per thread)
    for (var x = 0u; x < BATCH_MAX; x++) {
        let ok = !is_empty(sel_top[x]);
        let blk = sel_topid[x];
        for (var j = 0u; j < 4u; j++) {
            let slot = blk * BLOCK + j * WG + lid;
            var c = NO_BEST;
            if (ok) {
                let st = atomicLoad(&tkeys[slot]);
                let lo = atomicLoad(&tcounts[2u * slot]);
                var hi = 0u;
                if (WIDE != 0u) { hi = atomicLoad(&tcounts[2u * slot + 1u]); }
                if (st != EMPTY && (lo | hi) != 0u) {
                    let ab = key_unpack(st, slot % COLS);
                    c = vec4<u32>(lo, hi, ab.x, ab.y);
                }
            }
            vals[4u * x + j] = c;
            ids[4u * x + j] = slot;
        }
    }
    sel_top9(lid, &vals, &ids, SEL_ITEMS, u);
    // 4. the ranked entries' list heads (one thread each), then the prefix (thread 0)
    if (lid < BATCH_MAX) {
        let c = sel_top[lid];
        if (!is_empty(c)) {
            sel_heads[4u * lid] = atomicLoad(&tlist[2u * c.z]);
            sel_heads[4u * lid + 1u] = atomicLoad(&tlist[2u * c.z + 1u]);
            sel_heads[4u * lid + 2u] = atomicLoad(&tlist[2u * c.w]);
            sel_heads[4u * lid + 3u] = atomicLoad(&tlist[2u * c.w + 1u]);
        }
    }
    workgroupBarrier();
    if (lid == 0u) {
        var kk = 0u;
        var jsum = 0u;
        var scat = 0u;
        let scratch = arrayLength(&pool) - P.scatter_cap;
        let kmax = clamp(P.batch_max, 1u, BATCH_MAX);
        for (var ci = 0u; ci < kmax; ci++) {
            let c = sel_top[ci];
            if (is_empty(c) || !better(c, u) || training_done(c, k0 + kk)) { break; }
            let a = c.z;
            let b = c.w;
            let la = sel_heads[4u * ci + 1u];
            let lb = sel_heads[4u * ci + 3u];
            let len = min(la, lb);
            if (kk > 0u) {
                var clash = a == b || scat + len > P.scatter_cap;
                for (var v = 0u; v < 2u * kk; v++) {
                    clash = clash || sel_m[v] == a || sel_m[v] == b;
                }
                if (clash) { break; }
            }
            let from_b = lb < la && a != b;
            let row = BATCH_HEAD + kk * BR;
            batch[row + BR_A] = a;
            batch[row + BR_B] = b;
            batch[row + BR_C] = 256u + k0 + kk;
            batch[row + BR_OFF] = select(sel_heads[4u * ci], sel_heads[4u * ci + 2u], from_b);
            batch[row + BR_LEN] = len;
            batch[row + BR_FROMB] = select(0u, 1u, from_b);
            batch[row + BR_J0] = jsum;
            batch[row + BR_TOP] = select(scratch + scat, top, kk == 0u);
            if (kk > 0u) { scat += len; }
            jsum += len;
            merges[4u * (k0 + kk)] = a;
            merges[4u * (k0 + kk) + 1u] = b;
            merges[4u * (k0 + kk) + 2u] = c.x;
            merges[4u * (k0 + kk) + 3u] = c.y;
            sel_m[2u * kk] = a;
            sel_m[2u * kk + 1u] = b;
            kk += 1u;
            if (a == b) { break; }      // a run merge goes alone
        }
        batch[BH_K] = kk;
        batch[BH_J] = jsum;
        batch[BH_TOP] = top;
        batch[BH_K0] = k0;
        if (kk == 0u) {
            atomicStore(&state[S_STOP], 1u);
        } else {
            atomicStore(&state[S_DONE], kk);
            atomicStore(&state[S_A], sel_m[0]);
            atomicStore(&state[S_B], sel_m[1]);
            atomicStore(&state[S_C], 256u + k0);
            atomicStore(&tlist[2u * (256u + k0)], top);
            atomicStore(&state[S_SH], sh + 1u);
        }
        sh_v = kk;
    }
    // 5. the members' pair counts to 0 (no occurrence is left after the step), their blocks
    // listed dirty under the step's stamp (their slots are the ranked entries' ids)
    let kk = workgroupUniformLoad(&sh_v);
    merge_stamp = sh + 1u;
    if (lid < kk) {
        let slot = sel_topid[lid];
        atomicStore(&tcounts[2u * slot], 0u);
        atomicStore(&tcounts[2u * slot + 1u], 0u);
        dirty[slot / BLOCK] = 1u;
        block_dirtied(slot / BLOCK);
    }
}

@compute @workgroup_size(WG)
fn wl_merge(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    // S_HOLD and the batch table were set by earlier dispatches (S_PAUSE may rise during this
    // one: it is not read here).
    if (lid == WG - 1u) {
        sh_u = atomicLoad(&state[S_STOP]) | atomicLoad(&state[S_HOLD]);
        sh_v = atomicLoad(&state[S_SH]);
    }
    if (lid < BATCH_WORDS) { sh_bat[lid] = batch[lid]; }
    if (workgroupUniformLoad(&sh_u) != 0u) { return; }
    let kk = min(workgroupUniformLoad(&sh_bat[BH_K]), BATCH_MAX);
    if (kk == 0u) { return; }
    merge_stamp = workgroupUniformLoad(&sh_v);
    step_k0 = sh_bat[BH_K0];
    step_n = kk;
    let stride = nwg.x * nwg.y * WG;
    let t = linear_id(wid, nwg) * WG + lid;
    if (kk == 1u) {
        let m = member_merge(0u, stride);
        let s = walk(Walk(t, NONE, NONE), m);
        if (s.j < m.len) {
            save_carry(t, s);
            atomicAdd(&state[S_PAUSE], 1u);
        }
    } else {
        let total = sh_bat[BH_J];
        let s = walk_batch(Walk(t, NONE, NONE), kk, total, stride);
        if (s.j < total) {
            save_carry(t, s);
            atomicAdd(&state[S_PAUSE], 1u);
        }
    }
}

// The walks wl_merge (or an earlier wl_continue) carried: each thread resumes its own slot.
// Dispatched by the host, with wl_merge's grid, until S_PAUSE is 0.
@compute @workgroup_size(WG)
fn wl_continue(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    if (lid == 0u) { sh_v = atomicLoad(&state[S_SH]); }
    if (lid < BATCH_WORDS) { sh_bat[lid] = batch[lid]; }
    let stamp = workgroupUniformLoad(&sh_v);
    let t = linear_id(wid, nwg) * WG + lid;
    let f = carry[4u * t + 3u];
    if ((f & CARRY_LIVE) == 0u) { return; }
    let kk = min(sh_bat[BH_K], BATCH_MAX);
    merge_stamp = stamp;
    step_k0 = sh_bat[BH_K0];
    step_n = kk;
    let stride = nwg.x * nwg.y * WG;
    let s0 = Walk(carry[4u * t], carry[4u * t + 1u], carry[4u * t + 2u]);
    bat_run = f & 0xFFFFFF00u;
    var s: Walk;
    var total = 0u;
    if (kk == 1u) {
        let m = member_merge(0u, stride);
        total = m.len;
        s = walk(s0, m);
    } else {
        total = sh_bat[BH_J];
        s = walk_batch(s0, kk, total, stride);
    }
    if (s.j < total) {
        save_carry(t, s);
    } else {
        carry[4u * t + 3u] = 0u;
        atomicSub(&state[S_PAUSE], 1u);
    }
}
