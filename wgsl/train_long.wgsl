// train_long.wgsl — long chains of the word-list walk, merged in parallel (one long chain
// would otherwise be millions of serial steps of one thread).
// Included by train_wordlist.wgsl (it uses that file's bindings, Merge, pair_deltas4, and
// train_table.wgsl's table); its entry points run only in the host's continue submits.
//
// A chain of adjacent occurrences (A B A B …, or a run of A == B paired left to right) is
// merged by ONE wl_merge thread, in order (train_wordlist.wgsl). A thread that has merged
// P.long_min occurrences of one chain and finds it going on hands the rest over: it records
// (p, prev, z) — p the next occurrence's A, not merged yet, prev the id left of it (C), z the
// step's member whose occurrences these are (0 in a step of one merge; in a step of several,
// walk_batch counts a run of one member's occurrences; every kernel here takes A, B, C and
// C's list from member z's row of `batch`) — in the chain table `lchain`, counts it in S_PAUSE
// (so the merge loop holds, as for a carried walk) and goes on with its next list entry. The
// host's continue submits then run rounds of
//   lc_plan   (1 workgroup) each chain's next start: its record's `next` (the symbol after the
//             last pair merged) when a round left one; a chain whose start no longer begins an
//             occurrence (p: A, nxt[p]: B) is done (dropped, S_PAUSE − 1), unless it begins
//             another member's occurrence: the serial walk would go on with it (its own list
//             entry left it to this chain), so it becomes a carried walk of wl_continue in a
//             free carry slot (resumed at p; S_PAUSE's count passes to it); the others each get
//             a window of stream positions [p, min(p + P.long_window, n)) cut into blocks of
//             LC_BLK (at most LC_ITEMS blocks per round over all chains; the rest wait).
//   lc_break  per block: the first live position x holding A (or B, A ≠ B) whose live next
//             does not continue the chain (A = B: not A; A ≠ B: not the other one of A, B;
//             or none) → atomicMin into the chain's `brk`; per block the count of the chain's
//             A's up to that position (A = B: x included; A ≠ B: x is a lone A or the last B,
//             left out). Skips blocks past a break already found.
//   lc_scan   per chain (one workgroup): the blocks' counts up to the break's block, exclusive
//             prefix sums in place; the total m → `cnt`.
//   lc_apply  per block: each live A's offset among the chain's A's (block prefix + a
//             workgroup scan), so: A = B: offset even → the left of a pair, odd → the right
//             (left-to-right pairing from p; a run cut by the break leaves an odd last A
//             alone); A ≠ B: every A is a left, every B a right. A left at x with partner
//             q = nxt[x]: lsym[x] = C, nxt[x] = nxt[q], x appended to C's list (one atomicAdd
//             per workgroup); a right sets its own lsym = DEAD | k (the left does it for a
//             partner past the window: no thread owns it). The pair-count deltas are the serial
//             walk's, summed: the first left's −(prev, A) + (prev, C), the interior's
//             (pairs − 1) × (A = B: +(C, C); A ≠ B: −(B, A) + (C, C)) with the word's weight
//             multiplied, and the last left's −(B, Y) + (C, Y) (Y the symbol after its
//             partner; −(A, A) skipped when A = B); the last left also stores `next`.
// and a last lc_plan drops the chains that ended. Each round is a segment of the chain merged
// as the serial walk would merge it (segments meet as the walk's steps do: the (C, A) a
// segment's last pair adds, the next one's first pair takes away), so any split — threshold,
// window, rounds — gives the same counts and merges.
// Race-free: in lc_apply every stream position inside a chain's window up to its break is
// read and written only by the thread that owns it (and nxt[q] of a right q is read by its
// left, never written); positions past the window are touched only by the one left whose
// partner is there. lc_break reads only (nothing is written to the stream in it). `brk` is
// read across workgroups of one dispatch only atomically (atomicMin / atomicLoad). The walk
// reads no prv in this path, and none is written (find_max4's fix-up of C's list repairs
// prv, as after a serial walk).
// Cost per round: O(window) positions per chain (dead ones included: a run merged k times has
// 2^k − 1 dead positions per live one), ~5 dispatches; a 5 MB run takes ceil(5 MB / window)
// rounds per merge instead of ~2.5 M dependent steps of one thread.
//
// Bindings (group 0) of this file:
//  20 lchain : storage, read_write  array<atomic<u32>>  LC_HEAD header words, then LC_CAP
//                                               records of LC_REC words
//  21 lblk   : storage, read_write  array<u32>  per block of the round: its count, then its
//                                               exclusive prefix; LC_ITEMS

@group(0) @binding(20) var<storage, read_write> lchain: array<atomic<u32>>;
@group(0) @binding(21) var<storage, read_write> lblk: array<u32>;

const LC_HEAD: u32 = 16u;       // header words of lchain
const LC_REC: u32 = 9u;         // words per chain record
const LC_CAP: u32 = 4096u;      // chain records (P.long_cap ≤ this; the host sizes the buffer)
const LC_ITEMS: u32 = 131072u;  // blocks per round over all chains (lblk's length)
const LC_PER: u32 = 4u;         // stream positions per thread of a block
const LC_BLK: u32 = 1024u;      // stream positions per block (WG · LC_PER)
// header words
const LH_COUNT: u32 = 0u;       // records in use (registrations append here)
const LH_ITEMS: u32 = 1u;       // blocks of this round (lc_plan)
const LH_CHAINS: u32 = 2u;      // total chains handed over (stats; wraps)
const LH_REFUSED: u32 = 3u;     // total chains walked on serially: the table was full (stats)
const LH_ROUNDS: u32 = 4u;      // total rounds that merged something (stats; wraps)
const LH_RESUMED: u32 = 5u;     // total chains given back to a serial walk: another member's
                                // occurrence followed the run (stats; wraps)
// record fields
const LR_P: u32 = 0u;           // the chain's next occurrence (its A), not merged yet
const LR_PREV: u32 = 1u;        // the id left of p (NONE at a word start)
const LR_NEXT: u32 = 2u;        // set by lc_apply: the symbol after the segment (NONE: a word
                                // end); LC_KEEP: unset
const LR_BRK: u32 = 3u;         // the break position of this round (NONE: not in the window)
const LR_ITEM0: u32 = 4u;       // its first block in this round's block list
const LR_ITEMS: u32 = 5u;       // its blocks this round (0: waits for a later round)
const LR_CNT: u32 = 6u;         // its A's in the window up to the break (lc_scan)
const LR_WEND: u32 = 7u;        // its window's end (exclusive)
const LR_MEM: u32 = 8u;         // the step's member whose chain this is (its ids: `batch`)
const LC_KEEP: u32 = 0xFFFFFFFDu;

var<workgroup> lc_w: array<u32, 16>;
var<workgroup> lc_n: atomic<u32>;
var<workgroup> lc_min: atomic<u32>;

fn lc_get(i: u32) -> u32 { return atomicLoad(&lchain[i]); }
fn lc_set(i: u32, v: u32) { atomicStore(&lchain[i], v); }

// Member z of the running step as a Merge (from `batch`, which wl_select wrote; in a step of
// one merge, z = 0 is that merge).
fn batch_merge(z: u32) -> Merge {
    let r = BATCH_HEAD + min(z, BATCH_MAX - 1u) * BR;
    return new_merge(batch[r + BR_A], batch[r + BR_B], batch[r + BR_C], batch[r + BR_OFF], batch[r + BR_LEN],
                     batch[r + BR_TOP], 1u, batch[r + BR_FROMB] != 0u);
}

// The member other than z whose occurrence p begins (the serial walk goes on with it: a chain
// of occurrences of different members, walk_batch), or NONE.
fn lc_other_member(p: u32, z: u32) -> u32 {
    let kk = min(batch[BH_K], BATCH_MAX);
    let q = nxt[p];
    if (q == NONE) { return NONE; }
    let sp = lsym[p] & LIVE;
    let sq = lsym[q] & LIVE;
    for (var y = 0u; y < kk; y++) {
        let r = BATCH_HEAD + y * BR;
        if (y != z && batch[r + BR_A] == sp && batch[r + BR_B] == sq) { return y; }
    }
    return NONE;
}

// A carry slot of wl_continue that holds no walk, claimed through the workgroup's cursor
// (lc_plan's one workgroup is the only writer of carry in its dispatch), or NONE after
// LC_SLOT_TRIES tries.
const LC_SLOT_TRIES: u32 = 1024u;
var<workgroup> lc_slot: atomic<u32>;
fn lc_free_slot() -> u32 {
    let nslots = arrayLength(&carry) / 4u;
    for (var i = 0u; i < LC_SLOT_TRIES; i++) {
        let t = atomicAdd(&lc_slot, 1u);
        if (t >= nslots) { return NONE; }
        if ((carry[4u * t + 3u] & CARRY_LIVE) == 0u) { return t; }
    }
    return NONE;
}

// The walk's hand-over (train_wordlist.wgsl walk, walk_batch): the chain of member z's
// occurrences from p (an occurrence's A) with the id `prev` left of it goes to this path;
// false when the table is full (the walk goes on).
fn long_handoff(p: u32, prev: u32, z: u32) -> bool {
    let i = atomicAdd(&lchain[LH_COUNT], 1u);
    if (i >= min(P.long_cap, LC_CAP)) {
        atomicSub(&lchain[LH_COUNT], 1u);
        atomicAdd(&lchain[LH_REFUSED], 1u);
        return false;
    }
    let r = LC_HEAD + i * LC_REC;
    lc_set(r + LR_P, p);
    lc_set(r + LR_PREV, prev);
    lc_set(r + LR_NEXT, LC_KEEP);
    lc_set(r + LR_ITEMS, 0u);
    lc_set(r + LR_MEM, z);
    atomicAdd(&lchain[LH_CHAINS], 1u);
    atomicAdd(&state[S_PAUSE], 1u);
    return true;
}

// Exclusive prefix sums of (x, y) over the workgroup in element order e (the caller's lanes_elem:
// sg_id · sg_size + lane with subgroups, else lid), and their totals: (x', y', Σx, Σy). Uniform
// control flow (barriers). With subgroups: lanes by subgroupExclusiveAdd, subgroup totals through
// workgroup memory (2 barriers, not 2 · log2 WG: a barrier is what costs on a CPU adapter, where
// lc_apply spent most of a round in them).
fn lc_scan2(e: u32, sg: vec3<u32>, x: u32, y: u32) -> vec4<u32> {
//#if SUBGROUPS
    let ex = subgroupExclusiveAdd(x);
    let ey = subgroupExclusiveAdd(y);
    let tx = subgroupAdd(x);
    let ty = subgroupAdd(y);
    if (sg.x == 0u) {
        sh_a[sg.z] = tx;
        sh_b[sg.z] = ty;
    }
    workgroupBarrier();
    var bx = 0u;
    var by = 0u;
    var ax = 0u;
    var ay = 0u;
    for (var q = 0u; q < WG / sg.y; q++) {
        let qa = sh_a[q];
        let qb = sh_b[q];
        if (q < sg.z) {
            bx += qa;
            by += qb;
        }
        ax += qa;
        ay += qb;
    }
    workgroupBarrier();
    return vec4<u32>(bx + ex, by + ey, ax, ay);
//#else
    sh_a[e] = x;
    sh_b[e] = y;
    workgroupBarrier();
    for (var s = 1u; s < WG; s <<= 1u) {
        var ax = 0u;
        var ay = 0u;
        if (e >= s) {
            ax = sh_a[e - s];
            ay = sh_b[e - s];
        }
        workgroupBarrier();
        sh_a[e] += ax;
        sh_b[e] += ay;
        workgroupBarrier();
    }
    let r = vec4<u32>(sh_a[e] - x, sh_b[e] - y, sh_a[WG - 1u], sh_b[WG - 1u]);
    workgroupBarrier();
    return r;
//#endif
}

// The record of round block t: the last chain whose first block is ≤ t (chains waiting this
// round have no blocks and share the next one's first block).
fn lc_chain_of(t: u32) -> u32 {
    var lo = 0u;
    var hi = lc_get(LH_COUNT);      // first blocks are non-decreasing in record order
    while (hi - lo > 1u) {
        let mid = (lo + hi) / 2u;
        if (lc_get(LC_HEAD + mid * LC_REC + LR_ITEM0) <= t) { lo = mid; } else { hi = mid; }
    }
    return lo;
}

// (v · k) mod 2^64 of the 64-bit v = (lo, hi).
fn lc_mul64(lo: u32, hi: u32, k: u32) -> vec2<u32> {
    let l0 = lo & 0xFFFFu;
    let l1 = lo >> 16u;
    let k0 = k & 0xFFFFu;
    let k1 = k >> 16u;
    let mid = l0 * k1 + l1 * k0;
    let midc = select(0u, 0x10000u, mid < l0 * k1);
    let low = l0 * k0 + (mid << 16u);
    let lowc = select(0u, 1u, low < l0 * k0);
    return vec2<u32>(low, l1 * k1 + (mid >> 16u) + midc + lowc + hi * k);
}

// Whether p begins an occurrence of (a, b) now.
fn lc_starts(p: u32, a: u32, b: u32) -> bool {
    if ((lsym[p] & LIVE) != a) { return false; }
    let q = nxt[p];
    return q != NONE && (lsym[q] & LIVE) == b;
}

// ---- lc_plan: the round's chains and their blocks ----------------------------------------------
@compute @workgroup_size(WG)
fn lc_plan(l: Lanes) {
    let lid = l.lid;
    let sg = lanes_sg(l);
    let e = lanes_elem(l);      // element order of lc_scan2
    if (lid == 0u) {
        sh_u = min(lc_get(LH_COUNT), LC_CAP);
        atomicStore(&lc_slot, 0u);
        atomicStore(&lc_n, 0u);
    }
    let cnt = workgroupUniformLoad(&sh_u);
    let n = atomicLoad(&state[S_N]);
    let window = max(P.long_window, 1u);
    var kept = 0u;
    var items = 0u;
    for (var i0 = 0u; i0 < cnt; i0 += WG) {
        let i = i0 + e;
        var keep = 0u;
        var p = NONE;
        var prev = NONE;
        var z = 0u;
        var nit = 0u;
        var len = 0u;
        if (i < cnt) {
            let r = LC_HEAD + i * LC_REC;
            p = lc_get(r + LR_P);
            prev = lc_get(r + LR_PREV);
            z = lc_get(r + LR_MEM);
            let m = batch_merge(z);
            let nx = lc_get(r + LR_NEXT);
            if (nx != LC_KEEP) {
                p = nx;
                prev = m.c;
            }
            if (p != NONE && lc_starts(p, m.a, m.b)) {
                keep = 1u;
                nit = (min(window, n - p) + LC_BLK - 1u) / LC_BLK;
                len = min(window, n - p);
            } else if (p != NONE && lc_other_member(p, z) != NONE) {
                // Member z's run ended where another member's occurrence begins: the serial
                // walk merges it next (its own list entry leaves it to this chain, lead_of),
                // so it goes back to one as a carried walk (walk_batch, resumed at p; its entry
                // index the last one, so that it stops after this chain). Its S_PAUSE count
                // passes to the carry. No free slot: kept (no blocks), tried again next round.
                let t = lc_free_slot();
                if (t != NONE) {
                    carry[4u * t] = max(batch[BH_J], 1u) - 1u;
                    carry[4u * t + 1u] = p;
                    carry[4u * t + 2u] = prev;
                    carry[4u * t + 3u] = CARRY_LIVE | (CARRY_RUN_NONE << 24u);
                    atomicAdd(&lc_n, 1u);
                } else {
                    keep = 1u;       // nit = 0: no blocks this round
                }
            }
        }
        let s = lc_scan2(e, sg, keep, nit);
        storageBarrier();        // this chunk's records are read before any is rewritten
        workgroupBarrier();
        if (keep != 0u) {
            let r = LC_HEAD + (kept + s.x) * LC_REC;
            let item0 = min(items + s.y, LC_ITEMS);
            let got = min(nit, LC_ITEMS - item0);
            lc_set(r + LR_P, p);
            lc_set(r + LR_PREV, prev);
            lc_set(r + LR_NEXT, LC_KEEP);
            lc_set(r + LR_BRK, NONE);
            lc_set(r + LR_ITEM0, item0);
            lc_set(r + LR_ITEMS, got);
            lc_set(r + LR_CNT, 0u);
            lc_set(r + LR_WEND, p + min(got * LC_BLK, len));
            lc_set(r + LR_MEM, z);
        }
        kept += s.z;
        items = min(items + s.w, LC_ITEMS);
        storageBarrier();
        workgroupBarrier();
    }
    workgroupBarrier();
    if (lid == 0u) {
        lc_set(LH_COUNT, kept);
        lc_set(LH_ITEMS, items);
        let carried = atomicLoad(&lc_n);     // records that became carried walks
        if (cnt > kept + carried) { atomicSub(&state[S_PAUSE], cnt - kept - carried); }
        atomicAdd(&lchain[LH_RESUMED], carried);
        if (kept != 0u) { atomicAdd(&lchain[LH_ROUNDS], 1u); }
    }
}

// The round's block t: (record, first position, end position (exclusive), skip) in lc_w,
// loaded by thread 0; `skip` (past the chain's break as far as it is known) returned to all.
fn lc_block(t: u32, lid: u32, with_prefix: bool) -> u32 {
    if (lid == 0u) {
        let i = lc_chain_of(t);
        let r = LC_HEAD + i * LC_REC;
        let p = lc_get(r + LR_P);
        let start = p + (t - lc_get(r + LR_ITEM0)) * LC_BLK;
        let brk = lc_get(r + LR_BRK);
        lc_w[0] = r;
        lc_w[1] = start;
        lc_w[2] = min(start + LC_BLK, lc_get(r + LR_WEND));
        lc_w[3] = brk;
        lc_w[4] = p;
        lc_w[8] = lc_get(r + LR_WEND);
        lc_w[9] = lc_get(r + LR_MEM);
        sh_v = select(0u, 1u, brk != NONE && start > brk);
        if (with_prefix && sh_v == 0u) {
            lc_w[5] = lblk[t];
            lc_w[6] = lc_get(r + LR_CNT);
            lc_w[7] = lc_get(r + LR_PREV);
        }
        atomicStore(&lc_min, NONE);
        atomicStore(&lc_n, 0u);
    }
    return workgroupUniformLoad(&sh_v);
}

// ---- lc_break: each chain's break in its window, and per block its A's up to it ---------------
@compute @workgroup_size(WG)
fn lc_break(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    if (lid == 0u) { sh_u = lc_get(LH_ITEMS); }
    let nitems = workgroupUniformLoad(&sh_u);
    let groups = nwg.x * nwg.y;
    for (var t = linear_id(wid, nwg); t < nitems; t += groups) {
        if (lc_block(t, lid, false) != 0u) { continue; }
        let mz = batch_merge(lc_w[9]);       // the chain's member: its ids
        let a = mz.a;
        let b = mz.b;
        let start = lc_w[1];
        let end = lc_w[2];
        let x0 = start + LC_PER * lid;
        var first = NONE;
        var amask = 0u;               // my positions holding A (before my first break)
        for (var u = 0u; u < LC_PER; u++) {
            let x = x0 + u;
            if (x >= end) { break; }
            let s = lsym[x] & LIVE;
            if (s != a && s != b) { continue; }     // dead, or not the chain's (past it)
            if (s == a) { amask |= 1u << u; }
            let y = nxt[x];
            var brk = y == NONE;
            if (!brk) {
                let sy = lsym[y] & LIVE;
                brk = (sy != a && sy != b) || (a != b && sy == s);
            }
            if (brk) {
                first = x;
                break;
            }
        }
        if (first != NONE) { atomicMin(&lc_min, first); }
        workgroupBarrier();
        let lb = atomicLoad(&lc_min);
        var k = 0u;
        for (var u = 0u; u < LC_PER; u++) {
            let x = x0 + u;
            if ((amask & (1u << u)) != 0u && (x < lb || (x == lb && a == b))) { k += 1u; }
        }
        atomicAdd(&lc_n, k);
        workgroupBarrier();
        if (lid == 0u) {
            lblk[t] = atomicLoad(&lc_n);
            if (lb != NONE) { atomicMin(&lchain[lc_w[0] + LR_BRK], lb); }
        }
        workgroupBarrier();      // lc_w, lc_min and lc_n are rewritten for the next block
    }
}

// ---- lc_scan: per chain, its blocks' exclusive prefix counts ----------------------------------
@compute @workgroup_size(WG)
fn lc_scan(@builtin(workgroup_id) wid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>,
           l: Lanes) {
    let lid = l.lid;
    let sg = lanes_sg(l);
    let e = lanes_elem(l);      // element order of lc_scan2
    if (lid == 0u) { sh_u = select(0u, lc_get(LH_COUNT), lc_get(LH_ITEMS) != 0u); }
    let cnt = workgroupUniformLoad(&sh_u);
    let groups = nwg.x * nwg.y;
    for (var i = linear_id(wid, nwg); i < cnt; i += groups) {
        let r = LC_HEAD + i * LC_REC;
        if (lid == 0u) {
            let brk = lc_get(r + LR_BRK);
            var used = lc_get(r + LR_ITEMS);
            if (brk != NONE) { used = min(used, (brk - lc_get(r + LR_P)) / LC_BLK + 1u); }
            lc_w[0] = lc_get(r + LR_ITEM0);
            sh_v = used;
        }
        let used = workgroupUniformLoad(&sh_v);
        let t0 = lc_w[0];
        var run = 0u;
        for (var j0 = 0u; j0 < used; j0 += WG) {
            let j = j0 + e;
            var v = 0u;
            if (j < used) { v = lblk[t0 + j]; }
            let s = lc_scan2(e, sg, v, 0u);
            if (j < used) { lblk[t0 + j] = run + s.x; }
            run += s.z;
        }
        if (lid == 0u) { lc_set(r + LR_CNT, run); }
        workgroupBarrier();      // lc_w is rewritten for the next chain
    }
}

// The serial walk's deltas of a segment of `pairs` pairs, summed (train_wordlist.wgsl walk):
// pair j = 0 adds −(prev, A) + (prev, C) and the interior's (pairs − 1) × (A = B: +(C, C);
// A ≠ B: −(B, A) + (C, C)), the pair j = pairs − 1 −(B, Y) + (C, Y), Y = the symbol at rr
// (none at a word end); (A, B) itself is skipped (its count is 0 after the merge).
fn lc_ends(m: Merge, j: u32, pairs: u32, prev: u32, rr: u32, lo: u32, hi: u32) {
    let same = m.a == m.b;
    let neg = vec4<bool>(true, false, false, false);
    if (j == 0u) {
        let left = prev != NONE;
        pair_deltas4(vec4<u32>(prev, prev, 0u, 0u), vec4<u32>(m.a, m.c, 0u, 0u), neg,
                     vec4<bool>(left && !(prev == m.a && same), left, false, false), lo, hi);
        if (pairs > 1u) {
            let v = lc_mul64(lo, hi, pairs - 1u);
            pair_deltas4(vec4<u32>(m.b, m.c, 0u, 0u), vec4<u32>(m.a, m.c, 0u, 0u), neg,
                         vec4<bool>(!same, true, false, false), v.x, v.y);
        }
    }
    if (j + 1u == pairs && rr != NONE) {
        let y = lsym[rr] & IDM;
        pair_deltas4(vec4<u32>(m.b, m.c, 0u, 0u), vec4<u32>(y, y, 0u, 0u), neg,
                     vec4<bool>(!(y == m.b && same), true, false, false), lo, hi);
    }
}

// ---- lc_apply: the merges, the appends to C's list, the summed deltas ---------------------------
@compute @workgroup_size(WG)
fn lc_apply(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>,
            l: Lanes) {
    let lid = l.lid;
    let sg = lanes_sg(l);
    let e = lanes_elem(l);      // element order of lc_scan2
    if (lid == 0u) { sh_u = lc_get(LH_ITEMS); }
    let nitems = workgroupUniformLoad(&sh_u);
    merge_stamp = atomicLoad(&state[S_SH]);
    step_k0 = batch[BH_K0];
    step_n = max(min(batch[BH_K], BATCH_MAX), 1u);
    let groups = nwg.x * nwg.y;
    for (var t = linear_id(wid, nwg); t < nitems; t += groups) {
        if (lc_block(t, lid, true) != 0u) { continue; }
        let m = batch_merge(lc_w[9]);        // the chain's member (its C list's top: BR_TOP)
        let same = m.a == m.b;
        let r = lc_w[0];
        let end = lc_w[2];
        let brk = lc_w[3];
        let p = lc_w[4];
        let prefix = lc_w[5];
        let cnt = lc_w[6];
        let prev = lc_w[7];
        let wend = lc_w[8];
        let x0 = lc_w[1] + LC_PER * e;
        let done = brk != NONE;
        // pairs of this segment (A = B: a run ended by the break leaves an odd last A alone;
        // one cut by the window pairs its last A with the next, past the window)
        let pairs = select(cnt, select((cnt + 1u) / 2u, cnt / 2u, done), same);
        let lim = select(end, min(end, brk + 1u), done);   // positions < lim are the chain's
        var sx = array<u32, 4>(NONE, NONE, NONE, NONE);
        var k = 0u;
        for (var u = 0u; u < LC_PER; u++) {
            let x = x0 + u;
            if (x >= lim) { break; }
            sx[u] = lsym[x];
            if ((sx[u] & LIVE) == m.a && (same || x != brk)) { k += 1u; }
        }
        var o = lc_scan2(e, sg, k, 0u).x + prefix;       // my first A's offset in the segment
        var left = array<u32, 4>(NONE, NONE, NONE, NONE);
        var nl = 0u;
        for (var u = 0u; u < LC_PER; u++) {
            let x = x0 + u;
            if (sx[u] == NONE) { continue; }
            let s = sx[u] & LIVE;
            if (s == m.a && (same || x != brk)) {
                let j = select(o, o / 2u, same);      // its pair
                if (j < pairs) {
                    if (!same || o % 2u == 0u) {
                        left[u] = j;
                        nl += 1u;
                    } else {
                        lsym[x] = m.tag;              // a right (A = B)
                    }
                }
                o += 1u;
            } else if (!same && s == m.b && x != p) {
                lsym[x] = m.tag;                      // a right (A ≠ B)
            }
        }
        let base = atomicAdd(&lc_n, nl);
        workgroupBarrier();
        if (lid == 0u) { sh_w = atomicAdd(&tlist[2u * m.c + 1u], atomicLoad(&lc_n)); }
        var slot = m.top + workgroupUniformLoad(&sh_w) + base;
        for (var u = 0u; u < LC_PER; u++) {
            let j = left[u];
            if (j == NONE) { continue; }
            let x = x0 + u;
            let q = nxt[x];
            let rr = nxt[q];
            lsym[x] = m.c | (sx[u] & TWS);
            nxt[x] = rr;
            if (q >= wend) { lsym[q] = m.tag; }      // past the window: no thread owns it
            pool[slot] = x;
            slot += 1u;
            if (j == 0u || j + 1u == pairs) {
                let w = wid_in[x];
                lc_ends(m, j, pairs, prev, rr, weights[2u * w], weights[2u * w + 1u]);
            }
            // the symbol after the segment: the chain's next start (past a break it begins
            // no occurrence of this member, lc_plan drops it or gives it to another member's)
            if (j + 1u == pairs) { lc_set(r + LR_NEXT, rr); }
        }
        workgroupBarrier();      // lc_w, lc_n and sh_w are rewritten for the next block
    }
}
