// train_wordlist.wgsl — the default training algorithm: a word-list walk (DESIGN.md §3).
// (The incremental pair-count update of Sennrich et al. 2016, "Neural Machine Translation of Rare
// Words with Subword Units" / subword-nmt, with its token → words index — HF tokenizers'
// `where_to_update` — made parallel: one thread per word.)
//
// The stream of unique words stays in place: each word's live symbols are linked by `nxt`, and
// an inverted index says where each token occurs: per token id t, the list of words that held t
// when it was made (bytes: every word holding the byte; merge k's token C = 256 + k: every word
// where merge k applied), in `pool`. A list may hold stale words (whose t was merged away
// since): they are walked and found to hold nothing. A word is in a list at most once.
// Per merge, 3 dispatches, no pass over the stream:
//   find_max4       (train_table.wgsl) the dirty blocks' bests; its step_blocked hook (below)
//                   first commits the last merge (S_K += 1, the pool top past C's list)
//   find_max_super  per group of SUPER = 256 blocks with a changed block: the group's best
//   wl_merge    every workgroup reduces the super-block bests (one load per thread up to
//               2^28 table slots, instead of nblocks / 256 dependent ones: the reduction every
//               workgroup repeats no longer grows with the table); workgroup 0 records the
//               merge; then, grid-stride
//               over the shorter of A's and B's lists, one thread per word walks the word left
//               to right merging (A, B) without overlap (runs of A == B too: the walk is
//               sequential), applies the exact pair-count deltas and appends the word to C's
//               list when it merged there.
// Long words: a thread's walk is bounded by P.budget steps + table probes per dispatch
// (lavapipe stops loops after 65,535 iterations of a SIMD vector of lanes, silently — the host
// divides its budget by the lanes there; a real GPU may reset a dispatch that runs for seconds). A thread out of budget saves where it is (list entry, symbol, left
// neighbour, merged flag) in its `carry` slot and counts itself in S_PAUSE; from then on every
// step does nothing (find_max4 latches S_HOLD, wl_merge returns) until the host has run
// wl_continue — same grid, each thread resuming its own slot — until S_PAUSE is 0, as the
// encoder continues a long word. So any word (a 1 MB run of one byte) takes this algorithm.
// Deltas of one occurrence X A B Y → X C Y, X the live left neighbour after the previous
// occurrences of the word were merged (possibly C), Y the right one before: −(X, A) + (X, C),
// −(B, Y) + (C, Y); a pair (X, C) made by one occurrence and undone by the next cancels. Deltas
// to (A, B) itself are skipped: its count is set to 0 (no (A, B) is left after the merge).
// Pool size: the byte lists plus ≤ n − words appended entries (each entry merged ≥ 1 symbol away).
//
// Bindings (group 0) of this file (train_table.wgsl has 0, 1, 7, 10–14):
//   2 wid_in : storage, read        array<u32>  word index of each symbol; length n
//   3 lsym   : storage, read_write  array<u32>  linked stream: id | TWS, DEAD once merged
//                                               away; length n (fixed for the run)
//   4 nxt    : storage, read_write  array<u32>  per symbol: next live symbol of its word, NONE
//   5 wstart : storage, read        array<u32>  per word: index of its first symbol (never dead)
//   6 tlist  : storage, read_write  array<atomic<u32>>  per token id: (pool offset, length)
//   8 pool   : storage, read_write  array<u32>  word indices of the lists
//   9 carry  : storage, read_write  array<u32>  per wl_merge thread: (list entry, symbol, left
//                                               id, bit0 merged | bit1 live); 4 × grid threads
//  15 sbest  : storage, read_write  array<u32>  per super-block: (count lo, hi, a, b); nsupers
//  16 sdirty : storage, read_write  array<u32>  per super-block: one of its blocks changed
//#include train_table

@group(0) @binding(2) var<storage, read> wid_in: array<u32>;
@group(0) @binding(3) var<storage, read_write> lsym: array<u32>;
@group(0) @binding(4) var<storage, read_write> nxt: array<u32>;
@group(0) @binding(5) var<storage, read> wstart: array<u32>;
@group(0) @binding(6) var<storage, read_write> tlist: array<atomic<u32>>;
@group(0) @binding(8) var<storage, read_write> pool: array<u32>;
@group(0) @binding(9) var<storage, read_write> carry: array<u32>;
@group(0) @binding(15) var<storage, read_write> sbest: array<u32>;
@group(0) @binding(16) var<storage, read_write> sdirty: array<u32>;
const SUPER: u32 = 256u;    // blocks per super-block (= WG: one per find_max_super thread)

const DEAD: u32 = 0x40000000u;   // lsym of a symbol merged away (the right half of a pair)
const NONE: u32 = 0xFFFFFFFFu;   // no next symbol (nxt), no previous id
const S_PAUSE: u32 = 9u;    // walks carried to wl_continue; nonzero: merge steps do nothing
const S_HOLD: u32 = 10u;    // 1: a step saw S_PAUSE (wl_merge returns); the host clears it
const S_DONE: u32 = 12u;    // 1 = wl_merge recorded a merge whose S_K increment is pending
                            // (done by the next find_max4); merges = S_K + S_DONE
const S_TOP: u32 = 13u;     // pool entries in use before the running merge's list
// PROFILE = 1 (the host's profile runs only): totals over the run of the words walked (11),
// walk steps (14) and table probes (15) of wl_merge + wl_continue.
override PROFILE: u32 = 0u;
const S_WALK_WORDS: u32 = 11u;
const S_WALK_STEPS: u32 = 14u;
const S_WALK_PROBES: u32 = 15u;
const CARRY_MERGED: u32 = 1u;
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
    if (atomicLoad(&state[S_PAUSE]) != 0u) {
        if (first) { atomicStore(&state[S_HOLD], 1u); }
        return 1u;
    }
    if (first && atomicLoad(&state[S_DONE]) != 0u) {
        // Nobody else reads these words in this dispatch.
        atomicAdd(&state[S_K], 1u);
        atomicStore(&state[S_DONE], 0u);
        let c = atomicLoad(&state[S_C]);
        atomicAdd(&state[S_TOP], atomicLoad(&tlist[2u * c + 1u]));
    }
    return atomicLoad(&state[S_STOP]);
}

fn block_changed(blk: u32) { sdirty[blk / SUPER] = 1u; }

// ---- find_max_super: the best of each changed group of SUPER block bests -------------------
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
        sh_v = 0u;
        if (s < P.nsupers) { sh_v = sdirty[s]; }
    }
    if (workgroupUniformLoad(&sh_v) == 0u) { return; }
    let j = s * SUPER + lid;
    var b = NO_BEST;
    if (j < P.nblocks) {
        b = vec4<u32>(best[4u * j], best[4u * j + 1u], best[4u * j + 2u], best[4u * j + 3u]);
    }
    let r = wg_best_sg(lid, b, sg);
    if (lid == 0u) {
        sbest[4u * s] = r.x;
        sbest[4u * s + 1u] = r.y;
        sbest[4u * s + 2u] = r.z;
        sbest[4u * s + 3u] = r.w;
        sdirty[s] = 0u;
    }
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
// Where a thread is in its share of a list: entry j (of j0, j0 + stride, …); p = the next
// symbol of that entry's word to look at, NONE = the word is not started; prev = the id of the
// live symbol before p after this walk's merges; merged = whether the word merged so far.
struct Walk {
    j: u32,
    p: u32,
    prev: u32,
    merged: u32,
}

struct Merge {
    a: u32,
    b: u32,
    c: u32,
    off: u32,      // the walked list: pool[off .. off + len)
    len: u32,
    top: u32,      // C's list starts at pool[top]
    stride: u32,   // threads of the grid
}

// One step of the walk at s.p in word w (weight lo, hi): merge (A, B) → C there if it starts
// there, with its deltas; advance.
fn walk_step(s0: Walk, m: Merge, lo: u32, hi: u32) -> Walk {
    var s = s0;
    let p = s.p;
    let sp = lsym[p];
    let ip = sp & IDM;
    let q = nxt[p];
    if (ip == m.a && q != NONE && (lsym[q] & IDM) == m.b) {
        let r = nxt[q];
        if (s.prev != NONE) {
            if (!(s.prev == m.a && m.a == m.b)) { pair_delta(s.prev, m.a, lo, hi, true); }
            pair_delta(s.prev, m.c, lo, hi, false);
        }
        if (r != NONE) {
            let y = lsym[r] & IDM;
            if (!(y == m.b && m.a == m.b)) { pair_delta(m.b, y, lo, hi, true); }
            pair_delta(m.c, y, lo, hi, false);
        }
        lsym[p] = m.c | (sp & TWS);
        lsym[q] = DEAD;
        nxt[p] = r;
        s.merged = 1u;
        s.prev = m.c;
        s.p = r;
    } else {
        s.prev = ip;
        s.p = q;
    }
    return s;
}

// Walk this thread's list entries from s until they are done (s.j ≥ len) or P.budget steps +
// table probes are spent.
fn walk(s0: Walk, m: Merge) -> Walk {
    var s = s0;
    var spent = 0u;
    var words = 0u;
    var steps = 0u;
    loop {
        if (s.j >= m.len || spent >= P.budget) { break; }
        let w = pool[m.off + s.j];
        let lo = weights[2u * w];
        let hi = weights[2u * w + 1u];
        if (s.p == NONE) {
            s = Walk(s.j, wstart[w], NONE, 0u);
            words += 1u;
        }
        loop {
            if (s.p == NONE || spent >= P.budget) { break; }
            probes = 0u;
            s = walk_step(s, m, lo, hi);
            spent += 1u + probes;
            steps += 1u;
        }
        if (s.p == NONE) {       // the word is done
            if (s.merged != 0u) { pool[m.top + atomicAdd(&tlist[2u * m.c + 1u], 1u)] = w; }
            s = Walk(s.j + m.stride, NONE, NONE, 0u);
        }
    }
    if (PROFILE != 0u && spent != 0u) {
        atomicAdd(&state[S_WALK_WORDS], words);
        atomicAdd(&state[S_WALK_STEPS], steps);
        atomicAdd(&state[S_WALK_PROBES], spent - steps);
    }
    return s;
}

// The list walked for (a, b): the shorter of A's and B's; C's list begins at `top`.
fn merge_of(a: u32, b: u32, c: u32, top: u32, stride: u32) -> Merge {
    let la = atomicLoad(&tlist[2u * a + 1u]);
    let lb = atomicLoad(&tlist[2u * b + 1u]);
    let oa = atomicLoad(&tlist[2u * a]);
    let ob = atomicLoad(&tlist[2u * b]);
    return Merge(a, b, c, select(oa, ob, lb < la), min(la, lb), top, stride);
}

fn save_carry(t: u32, s: Walk) {
    carry[4u * t] = s.j;
    carry[4u * t + 1u] = s.p;
    carry[4u * t + 2u] = s.prev;
    carry[4u * t + 3u] = s.merged | CARRY_LIVE;
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
    if (lid == 0u) {
        sh_u = atomicLoad(&state[S_STOP]) | atomicLoad(&state[S_HOLD]);
        sh_v = atomicLoad(&state[S_K]);
        sh_w = atomicLoad(&state[S_TOP]);
    }
    if (workgroupUniformLoad(&sh_u) != 0u) { return; }
    let k = workgroupUniformLoad(&sh_v);
    let top = workgroupUniformLoad(&sh_w);
    let r = final_best_super(lid, sg);
    let stop = training_done(r, k);
    let wg = linear_id(wid, nwg);
    let a = r.z;
    let b = r.w;
    let c = 256u + k;
    if (wg == 0u && lid == 0u) {
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
            }
        }
    }
    // `stop` is the same in every thread (it comes from the reduction); broadcast through a
    // uniform load so that the barrier is in uniform control flow by WGSL's rules.
    if (lid == 0u) { sh_x = select(0u, 1u, stop); }
    if (workgroupUniformLoad(&sh_x) != 0u) { return; }
    let m = merge_of(a, b, c, top, nwg.x * nwg.y * WG);
    let t = wg * WG + lid;
    let s = walk(Walk(t, NONE, NONE, 0u), m);
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
    let s = walk(Walk(carry[4u * t], carry[4u * t + 1u], carry[4u * t + 2u],
                      f & CARRY_MERGED), m);
    if (s.j < m.len) {
        save_carry(t, s);
    } else {
        carry[4u * t + 3u] = 0u;
        atomicSub(&state[S_PAUSE], 1u);
    }
}
