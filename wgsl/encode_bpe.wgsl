// encode_bpe.wgsl — exact merge-order BPE over the flat BFS trie: the backtracking
// encoder of github/rust-gems crates/bpe (MIT; own code), one thread per word as in
// encode.wgsl's trie_tokenizer_chunked, whose output format it shares (a token id at each token's
// first byte in `scratch`), so encode.wgsl's trie_prefix_sum and trie_tokenizer_compact finish
// the slice unchanged. Tables: torch_gpubpe/core/bpe_tables.py (module docstring explains the walk).
//
// Per word: at position pos, walk the trie for the longest REACHABLE token (cand); accept it if
// the position after it is not dead and (prev, cand) is a valid pair (valid_pair); else
// cand = next_prefix[cand]; when no shorter token is left, mark pos dead, pop prev and retry it
// (its end is now dead, so its next prefix comes next). A whole word that is a token is taken
// at once (tiktoken looks a whole piece up before merging).
//
// Loads (global-memory load instructions dominate the walk's time): a trie step is one fedges
// row after a search of ceil(log2 nc) steps (the walk's first step: one d2 row; single bytes:
// d1rows); a candidate's tokinfo/bounds rows are loaded only where a pair check can need them,
// and a pair check reads the token it unwinds to as one spines row. The walk reads word starts
// as bits (word_mask: a regex pre-tokenizer's, or bpe_word_bits' for this project's split).
//
// Bindings (group 0, layout "auto"): 0, 4, 5, 7, 8 as in encode.wgsl, and
//   6 state    : storage, read_write  array<u32>          2 per chunk: 1 + pos of a walk that ran
//                                                         out of budget (0 = done), its cand
//  13 tokinfo  : storage, read        array<vec4<u32>>    per token id: (next_prefix, split left,
//                                                         split right, rank | len << 18); split
//                                                         left = NO_TOKEN: unreachable token
//  14 pairs    : storage, read        array<vec4<u32>>    hash table, one row per slot: (left,
//                                                         right, token, rank of token)
//  15 dead     : storage, read_write  array<atomic<u32>>  bit i: byte i of the slice is dead (no
//                                                         token may end there); cleared by host
//  17 bounds   : storage, read        array<vec4<u32>>    per token id t: (R[t], L[t],
//                                                         R[right(t)], L[left(t)]), the spine
//                                                         bounds of bpe.py (spine_r, spine_l)
//  18 work      : storage, read_write  array<atomic<u32>>  (PROFILE builds only) work counters,
//                                                         W_* below; cleared by the host
//  19 fedges   : storage, read        array<vec4<u32>>    per trie edge e: (byte |
//                                                         nc << 8, fc, token, 0) of the edge's
//                                                         byte and its child's node row, so a
//                                                         trie step is one load, not an edge
//                                                         and then a node row
//  20 d2       : storage, read        array<vec4<u32>>    per two bytes b0 << 8 | b1: the
//                                                         node spelled by them as in fedges
//                                                         (x = nc << 8 | b1), all NO_TOKEN if none:
//                                                         the depth-1 search (a binary search
//                                                         of up to 256 children) in one load
//  21 spines   : storage, read        array<vec4<u32>>    per token t: row 2t =
//                                                         (right, rank, R[t], R[right]), row
//                                                         2t + 1 = (left, rank, L[t], L[left]):
//                                                         all valid_pair reads of a token on
//                                                         the left / right of the seam, so an
//                                                         unwinding step loads one row, not
//                                                         its tokinfo and bounds rows

struct Params {
    n: u32,
    resume: u32,
    budget: u32,       // loop iterations per thread per dispatch, all loops summed (lavapipe)
    num_blocks: u32,
    num_docs: u32,
    block_base: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> text: array<u32>;
@group(0) @binding(1) var<storage, read> doc_bits: array<u32>;
@group(0) @binding(4) var<storage, read_write> scratch: array<u32>;
@group(0) @binding(5) var<storage, read_write> counts: array<atomic<u32>>;
@group(0) @binding(6) var<storage, read_write> state: array<u32>;
@group(0) @binding(7) var<storage, read_write> info: array<atomic<u32>>;
@group(0) @binding(8) var<uniform> params: Params;
@group(0) @binding(13) var<storage, read> tokinfo: array<vec4<u32>>;
@group(0) @binding(14) var<storage, read> pairs: array<vec4<u32>>;
@group(0) @binding(15) var<storage, read_write> dead: array<atomic<u32>>;
@group(0) @binding(17) var<storage, read> bounds: array<vec4<u32>>;
@group(0) @binding(19) var<storage, read> fedges: array<vec4<u32>>;
@group(0) @binding(20) var<storage, read> d2: array<vec4<u32>>;
@group(0) @binding(21) var<storage, read> spines: array<vec4<u32>>;
//#if PROFILE
@group(0) @binding(18) var<storage, read_write> work: array<atomic<u32>>;
//#endif
// 22 d1rows : storage, read array<vec4<u32>>  per byte b, rows 3b .. 3b + 2: the depth-1 node
//             of b as a node record (nc << 8, fc, token, run header: run_hdr below), its
//             token's tokinfo and bounds rows (a global table, L1-cached: no per-workgroup
//             copies to fill); then the nodes of the runs of bytes (ld_run)
@group(0) @binding(22) var<storage, read> d1rows: array<vec4<u32>>;
//#if WORD_MASK
// 16 word_mask : as in encode.wgsl (a regex pre-tokenizer's word starts; bit 0 set)
@group(0) @binding(16) var<storage, read> word_mask: array<u32>;
//#endif

override WG: u32 = 256u;
override CHUNK: u32 = 32u;
override PAIR_MASK: u32 = 15u;     // hash slots - 1
override PAIR_PROBES: u32 = 1u;    // most probes of any lookup
override UNWIND: u32 = 4u;         // most iterations of valid_pair (2 * max split height + 2)
override STEP_MAX: u32 = 64u;      // most loop iterations of one step of the walk (a trie walk
                                   // and its try, or one try): host bound
override ALL_REACHABLE: bool = false;  // no unreachable token (GPT-2, Qwen2, vocabs trained by
                                       // merges): skip the per-node check and whole-word rule
override WHOLE_WORDS: bool = true;  // a word spelling an unreachable token is that token
                                    // (tiktoken; Hugging Face's ignore_merges), else never

const BAD_TOKEN: u32 = 0xFFFFFFFEu;  // no valid encoding found (vocab outside the supported set)
const RANK_BITS: u32 = 18u;
const RANK_MASK: u32 = (1u << RANK_BITS) - 1u;
// A run header (d1rows row 3b's w): first run row << RUN_DEPTH_BITS | the run path's depth
// (merge_walk.d1_rows reads this constant).
const RUN_DEPTH_BITS: u32 = 9u;
// Work counters of PROFILE builds (binding 18; torch_gpubpe.encoding.merge_walk.walk_work): totals over
// the threads of a run, and W_LOCKSTEP: the sum over subgroups of the most walk-loop iterations
// any lane of the subgroup ran (what the subgroup runs in lockstep; subgroup builds only).
const W_ITERS: u32 = 0u;       // iterations of the walk loop (= W_STEPS + W_TRIES)
const W_STEPS: u32 = 1u;       // trie steps (a child found)
const W_TRIES: u32 = 2u;       // candidates tried
const W_CHECKS: u32 = 3u;      // pair checks (valid_pair calls)
const W_CHECK_LOOP: u32 = 4u;  // pair checks not decided in their first step
const W_UNWIND: u32 = 5u;      // their further steps
const W_PROBES: u32 = 6u;      // hash probes
const W_SHORTER: u32 = 7u;     // candidates rejected for a shorter one
const W_POPS: u32 = 8u;        // backtracks (a token popped)
const W_SCAN: u32 = 9u;        // prev_token's scan steps
const W_TOKENS: u32 = 10u;     // tokens accepted (pops not subtracted)
const W_LOCKSTEP: u32 = 11u;
// Global-memory loads (one per load instruction and lane; a vec4 row is one), by table:
const W_LD_TRIE: u32 = 12u;    // fedges, d2, d1rows (node rows)
const W_LD_ROWS: u32 = 13u;    // tokinfo, bounds, spines, d1rows (token rows)
const W_LD_PAIRS: u32 = 14u;   // pairs
const W_LD_TEXT: u32 = 15u;    // text, doc_bits, word_mask, scratch, dead
const W_COUNT: u32 = 16u;

fn d1_node(b: u32) -> vec4<u32> { work_count(W_LD_TRIE, 1u); return d1rows[3u * b]; }
fn d1_info(b: u32) -> vec4<u32> { work_count(W_LD_ROWS, 1u); return d1rows[3u * b + 1u]; }
fn d1_bounds(b: u32) -> vec4<u32> { work_count(W_LD_ROWS, 1u); return d1rows[3u * b + 2u]; }
// The node of a run of m bytes (2 <= m <= depth) whose d1 row's w is hdr, as a fused edge row
// (nc << 8 | byte, fc, token at the node, best | len << RANK_BITS): best, the longest reachable
// token of the run's first m bytes.
fn ld_run(hdr: u32, m: u32) -> vec4<u32> {
    work_count(W_LD_TRIE, 1u);
    return d1rows[(hdr >> RUN_DEPTH_BITS) + m - 1u];
}
var<workgroup> wg_count: atomic<u32>;
//#if PROFILE
var<workgroup> wg_work: array<atomic<u32>, 16>;
var<private> pw: array<u32, 16>;   // this thread's counters
fn work_count(k: u32, v: u32) { pw[k] += v; }
//#else
fn work_count(k: u32, v: u32) {}
//#endif

fn text_word(k: u32) -> u32 { work_count(W_LD_TEXT, 1u); return text[k]; }
fn bits_word(k: u32) -> u32 {
    work_count(W_LD_TEXT, 1u);
//#if WORD_MASK
    return word_mask[k];
//#else
    return doc_bits[k];
//#endif
}

fn text_byte(i: u32) -> u32 {
    return (text_word(i >> 2u) >> ((i & 3u) * 8u)) & 0xFFu;
}

// Bit i of doc_bits (or, WORD_MASK builds, of word_mask).
fn bit_at(i: u32) -> bool {
    return ((bits_word(i >> 5u) >> (i & 31u)) & 1u) != 0u;
}
//#if WORD_MASK
//#else
fn doc_start(i: u32) -> bool { return bit_at(i); }
//#endif
fn ld_fedge(i: u32) -> vec4<u32> { work_count(W_LD_TRIE, 1u); return fedges[i]; }
fn ld_fedge_x(i: u32) -> u32 { work_count(W_LD_TRIE, 1u); return fedges[i].x; }
fn ld_d2(i: u32) -> vec4<u32> { work_count(W_LD_TRIE, 1u); return d2[i]; }
fn ld_info(t: u32) -> vec4<u32> { work_count(W_LD_ROWS, 1u); return tokinfo[t]; }
fn ld_bounds(t: u32) -> vec4<u32> { work_count(W_LD_ROWS, 1u); return bounds[t]; }
fn ld_spine(i: u32) -> vec4<u32> { work_count(W_LD_ROWS, 1u); return spines[i]; }
fn ld_pair(h: u32) -> vec4<u32> { work_count(W_LD_PAIRS, 1u); return pairs[h]; }
fn ld_scratch(i: u32) -> u32 { work_count(W_LD_TEXT, 1u); return scratch[i]; }

fn word_start_at(i: u32) -> bool {
//#if WORD_MASK
    return bit_at(i);
//#else
    let has_prev = i > 0u && !doc_start(i);
    let has_next = !doc_start(i + 1u);
    var prev = 0u;
    if (has_prev) { prev = text_byte(i - 1u); }
    var next = 0u;
    if (has_next) { next = text_byte(i + 1u); }
    return is_word_start(prev, text_byte(i), next, has_prev, has_next);
//#endif
}

// One step of the binary search for byte b among the fedges rows [base, base + len) (sorted by
// byte, in x & 0xFF); none once one row is left (it would load that row's byte again).
fn fbs_step(base: ptr<function, u32>, len: ptr<function, u32>, b: u32) {
    if (*len <= 1u) { return; }
    let half = *len >> 1u;
    let eb = ld_fedge_x(*base + half) & 0xFFu;
    *base = select(*base, *base + half, eb <= b);
    *len = *len - half;
}

fn find_child_fused(fc: u32, nc: u32, b: u32) -> vec4<u32> {
    var base = fc;
    var len = nc;
    if (nc > 1u) {
        fbs_step(&base, &len, b); fbs_step(&base, &len, b); fbs_step(&base, &len, b);
        fbs_step(&base, &len, b); fbs_step(&base, &len, b); fbs_step(&base, &len, b);
        fbs_step(&base, &len, b); fbs_step(&base, &len, b);
    }
    let e = ld_fedge(base);
    return select(vec4<u32>(NO_TOKEN), e, nc >= 1u && (e.x & 0xFFu) == b);
}

// The child along byte b of the node (fc, nc) (first: the node of the single byte b0, a
// walk's first step) as a node record (nc << 8 | .., fc, token, ..); x = NO_TOKEN: none.
fn child_node(fc: u32, nc: u32, b0: u32, first: bool, b: u32) -> vec4<u32> {
    if (first) { return ld_d2((b0 << 8u) | b); }
    return find_child_fused(fc, nc, b);
}

fn is_dead(i: u32) -> bool {
    work_count(W_LD_TEXT, 1u);
    return ((atomicLoad(&dead[i >> 5u]) >> (i & 31u)) & 1u) != 0u;
}

// The home slot of pair (a, b): bpe.pair_hash.
fn pair_home(a: u32, b: u32) -> u32 { return fmix(a * 0x9E3779B1u ^ b) & PAIR_MASK; }

// (token, rank) merged from (a, b), or NO_TOKEN's, given the home slot's row e0 (which the
// caller loaded together with its other loads); a collision loads the next slots here.
fn pair_find(a: u32, b: u32, h: u32, e0: vec4<u32>, steps: ptr<function, u32>) -> vec2<u32> {
    var e = e0;
    for (var k = 0u; k < PAIR_PROBES; k++) {
        *steps += 1u;
        work_count(W_PROBES, 1u);
        if (e.x == NO_TOKEN) { break; }
        if (e.x == a && e.y == b) { return e.zw; }
        e = ld_pair((h + k + 1u) & PAIR_MASK);
    }
    return vec2<u32>(NO_TOKEN, NO_TOKEN);
}

// Whether BPE of bytes(t1) + bytes(t2) gives [t1, t2] (valid_pair below; bpe.valid_pair;
// rust-gems is_valid_token_pair with ranks): unwind the later-ranked token's last merge, and fail
// when a merge across the seam would have come before what is still allowed (limit); stop
// (valid) when no merge across the seam can rank below the limit any more (spine bounds). Each
// step is ONE round of loads: which token unwinds (and the limit after) follows from the ranks in
// the rows at hand, so the pair's hash slot (token and rank in one row) and the spines row of the
// token unwound to are loaded together, before any branch on them; the bound test after an
// unwinding reads the spine bounds of the unwound part from the rows already there. The first
// step has limit = NO_TOKEN, so any merge (t1, t2) fails the pair without its rank. Most pairs
// end in 1 step.
struct Step {
    h: u32,           // the home slot of pair (t1, t2)
    nt: u32,          // the token unwound to
    next_limit: u32,  // the limit after this step
    move1: bool,      // unwind t1 (to its right part), else t2 (to its left part)
    last: bool,       // neither can unwind: valid unless (t1, t2) merges too early
}

// What one step of valid_pair loads and does next, from the rows at hand (ALU only).
fn plan_step(t1: u32, i1: vec4<u32>, t2: u32, i2: vec4<u32>) -> Step {
    let q1 = i1.w & RANK_MASK;
    let q2 = i2.w & RANK_MASK;
    var p: Step;
    p.last = false;
    if (q1 > q2) {
        p.next_limit = q1;
        p.move1 = i1.z != t1;
        if (!p.move1) {
            p.next_limit = q2 + 1u;
            p.last = i2.y == t2;
        }
    } else {
        p.next_limit = q2 + 1u;
        p.move1 = i2.y == t2;
        if (p.move1) {
            p.next_limit = q1;
            p.last = i1.z == t1;
        }
    }
    p.nt = select(i2.y, i1.z, p.move1);
    p.h = pair_home(t1, t2);
    return p;
}

// The tokens' spine rows: s1 = (right, rank, R, R[right]) of t1 (the left token), s2 = (left,
// rank, L, L[left]) of t2 (the right token); the token unwound to is one spines row (its side's).
fn spine_r(i: vec4<u32>, b: vec4<u32>) -> vec4<u32> {
    return vec4<u32>(i.z, i.w & RANK_MASK, b.x, b.z);
}
fn spine_l(i: vec4<u32>, b: vec4<u32>) -> vec4<u32> {
    return vec4<u32>(i.y, i.w & RANK_MASK, b.y, b.w);
}
// The spines row of the token a step unwinds to (plan_step's p).
fn spine_row(p: Step) -> u32 { return 2u * p.nt + select(1u, 0u, p.move1); }

fn valid_pair(t1_in: u32, s1_in: vec4<u32>, t2_in: u32, s2_in: vec4<u32>,
              steps: ptr<function, u32>) -> bool {
    work_count(W_CHECKS, 1u);
    var t1 = t1_in;
    var t2 = t2_in;
    var s1 = s1_in;
    var s2 = s2_in;
    if (max(s1.z, s2.z) == NO_TOKEN) { return true; }  // bpe.py's first bound test
    var limit = NO_TOKEN;
    for (var g = 0u; g < UNWIND; g++) {
        *steps += 1u;
        if (g == 1u) { work_count(W_CHECK_LOOP, 1u); }
        if (g >= 1u) { work_count(W_UNWIND, 1u); }
        // plan_step on the spine rows (s1.x = right(t1), s2.x = left(t2), .y = ranks)
        let i1 = vec4<u32>(0u, 0u, s1.x, s1.y);
        let i2 = vec4<u32>(0u, s2.x, 0u, s2.y);
        let p = plan_step(t1, i1, t2, i2);
        let e = ld_pair(p.h);
        let ns = ld_spine(spine_row(p));
        let c = pair_find(t1, t2, p.h, e, steps);
        if (c.x != NO_TOKEN && (limit == NO_TOKEN || c.y < limit)) { return false; }
        if (p.last) { return true; }
        limit = p.next_limit;
        var bound = 0u;
        if (p.move1) {
            bound = max(s1.w, s2.z);
            t1 = p.nt;
            s1 = ns;
        } else {
            bound = max(s1.z, s2.w);
            t2 = p.nt;
            s2 = ns;
        }
        if (bound >= limit) { return true; }
    }
    return true;  // not reached: UNWIND bounds the unwinding (host)
}

// The token ending at pos (pos inside a word: the nearest token start before it), or NO_TOKEN
// at a word start. Token interiors hold NO_TOKEN in scratch.
fn prev_token(pos: u32, steps: ptr<function, u32>) -> u32 {
    if (word_start_at(pos)) { return NO_TOKEN; }
    var j = pos - 1u;
    var v = NO_TOKEN;
    loop {
        *steps += 1u;
        work_count(W_SCAN, 1u);
        v = ld_scratch(j);
        if (v != NO_TOKEN || j == 0u) { break; }
        j -= 1u;
    }
    return v;
}

// One loop for the whole walk (no inner trie-walk loop): an iteration is one trie step of the
// walk at pos, or, when the walk has ended (no child, or a word start next), the try of the
// candidate — lanes of a subgroup walking and lanes trying run the same iteration, as in
// encode.wgsl's greedy walk, instead of every lane waiting for the subgroup's longest walk and
// then its longest pair check (several times greedy's kernel time).
@compute @workgroup_size(WG)
fn bpe_tokenizer_chunked(@builtin(workgroup_id) wid: vec3<u32>,
                         @builtin(num_workgroups) nwg: vec3<u32>,
//#if SUBGROUPS
                         @builtin(subgroup_invocation_id) lane: u32,
//#endif
                         @builtin(local_invocation_index) lane_wg: u32) {
    // Block (WG chunks) and the chunk's index in it.
    let lw = linear_workgroup(wid, nwg);
    let lid = lane_wg;
    if (lane_wg == 0u) { atomicStore(&wg_count, 0u); }
//#if PROFILE
    if (lane_wg < W_COUNT) { atomicStore(&wg_work[lane_wg], 0u); }
    for (var k = 0u; k < W_COUNT; k++) { pw[k] = 0u; }
//#endif
    workgroupBarrier();

    let n = params.n;
    let block = params.block_base + lw;
    let c = block * WG + lid;
    let cs = c * CHUNK;
    let ce = min(cs + CHUNK, n);
    let block_end = (block + 1u) * WG * CHUNK;
    var steps = 0u;
    var walking = false;
    var pos = 0u;
    var cand = NO_TOKEN;
    var cand_len = 0u;  // bytes of cand; 0: read them from its tokinfo row
    // cand's tokinfo and bounds rows, loaded where cand is set (the walk's loads of a longer
    // match, or the next iteration's, overlap them), so that the try waits for no row of cand.
    var ci = vec4<u32>(0u);
    var cb = vec4<u32>(0u);
    var rows_ok = true;  // ci, cb are cand's (not yet, for a candidate at a word start)
    if (cs < n) {
        if (params.resume == 0u) {
            state[2u * c] = 0u;
            for (var i = cs; i < ce; i++) {
                steps += 1u;
                if (word_start_at(i)) { pos = i; walking = true; break; }
            }
        } else {
            let st = state[2u * c];
            walking = st != 0u;
            pos = st - 1u;
            cand = state[2u * c + 1u];
            if (walking && cand != NO_TOKEN) {
                ci = ld_info(cand);
                cb = ld_bounds(cand);
            }
        }
    }
    var prev = NO_TOKEN;
    var prev_i = vec4<u32>(0u);  // prev's tokinfo and bounds rows
    var prev_b = vec4<u32>(0u);
    var pprev = NO_TOKEN;        // the token before prev (= prev_token(prev's start)), if known
    var pprev_known = false;
    if (walking) {
        prev = prev_token(pos, &steps);
        if (prev != NO_TOKEN) {
            prev_i = ld_info(prev);
            prev_b = ld_bounds(prev);
        }
    }
    // The walk at pos: its first byte b0, next byte q, trie node (fc, nc), the last node's
    // token (last_tid).
    var in_walk = false;
    var b0 = 0u;
    var q = 0u;
    var fc = 0u;
    var nc = 0u;
    var last_tid = NO_TOKEN;
    var stop = NO_TOKEN;   // where the last walk stopped, and whether a word starts there
    var stop_ws = false;
    // Runs of one byte (indentation, " ----", "////"): a vocab with many tokens of one repeated
    // byte makes the walk pass the same run nodes again after each token and each pop, one
    // child search each. The walk's first byte's d1 row says (run_hdr: row << RUN_DEPTH_BITS | depth,
    // 0: no such run) where the nodes of its run lie in d1rows; the walk then jumps to the deepest
    // node the run reaches, with the candidate the step-by-step walk would have. The run
    // [run_lo, run_hi) of byte run_c (no word start after run_lo; run_open: it may go on past
    // run_hi) is scanned once, not at every position in it.
    var run_hdr = 0u;
    var run_c = 256u;
    var run_lo = 0u;
    var run_hi = 0u;
    var run_open = false;
    if (walking && cand == NO_TOKEN) {
        b0 = text_byte(pos);
        let d1 = d1_node(b0);
        fc = d1.y;
        nc = d1.x >> 8u;
        cand = d1.z;  // single bytes are always reachable
        run_hdr = d1.w;
        ci = d1_info(b0);
        cb = d1_bounds(b0);
        cand_len = 1u;
        last_tid = cand;
        q = pos + 1u;
        in_walk = true;
    }
    var own_count = 0u;  // wraps below 0 when a pop removes a token of an earlier dispatch
    // Whether a dead bit may be set in this thread's words: only the walking thread marks its
    // words' positions, so until it pops (or when it resumes an earlier dispatch's walk) none is.
    var dead_any = params.resume != 0u;
    let budget = params.budget;
    var iters = 0u;
    loop {
        if (!walking) { break; }
        steps += 1u;
        // A new step (a walk from its start, or a try): it fits in the budget (STEP_MAX), else
        // stop before it.
        if ((!in_walk || q == pos + 1u) && steps + STEP_MAX > budget) {
            state[2u * c] = pos + 1u;
            state[2u * c + 1u] = select(cand, NO_TOKEN, in_walk);
            atomicAdd(&info[INFO_UNFINISHED], 1u);
            atomicMax(&info[INFO_CONT_LO], 0xFFFFFFFFu - block);
            atomicMax(&info[INFO_CONT_HI], block + 1u);
            break;
        }
        iters += 1u;
        let lazy = prev == NO_TOKEN;
        if (in_walk && q == pos + 1u && run_hdr != 0u) {
            // The run jump (run_hdr above): the scan and the clears are within STEP_MAX.
            let dmax = run_hdr & ((1u << RUN_DEPTH_BITS) - 1u);
            if (b0 != run_c || pos < run_lo || pos >= run_hi) {
                run_c = b0;
                run_lo = pos;
                run_hi = pos + 1u;
                run_open = true;
            }
            while (run_open && run_hi < pos + dmax) {
                steps += 1u;
                if (run_hi >= n || word_start_at(run_hi) || text_byte(run_hi) != b0) {
                    run_open = false;
                } else {
                    run_hi += 1u;
                }
            }
            let m = min(run_hi - pos, dmax);
            if (m >= 2u) {
                let r = ld_run(run_hdr, m);
                for (var j = pos + 1u; j < pos + m; j++) {
                    steps += 1u;
                    scratch[j] = NO_TOKEN;
                }
                q = pos + m;
                fc = r.y;
                nc = r.x >> 8u;
                last_tid = r.z;
                let best = r.w & RANK_MASK;
                if (best != cand) {
                    cand = best;
                    cand_len = r.w >> RANK_BITS;
                    if (!lazy) {
                        ci = ld_info(cand);
                        cb = ld_bounds(cand);
                    } else {
                        rows_ok = false;
                    }
                }
            }
        }
        // One trie step: the longest reachable token at pos so far (cand); the whole word if it
        // is a token and pos starts the word.
        var child = vec4<u32>(NO_TOKEN);  // the child's node record (child_node)
        var ws_q = false;
        if (in_walk) {
            ws_q = q >= n || word_start_at(q);
            if (!ws_q) {
                child = child_node(fc, nc, b0, q == pos + 1u, text_byte(q));
            }
        }
        let found = child.x != NO_TOKEN;
        // (lazy, above: a candidate at a word start needs no rows unless it is rejected (a dead
        // end) or its word goes on after it (then it is the next check's prev); other
        // candidates' rows are loaded in the step that finds them, their loads overlapping the
        // next steps'.)
        if (in_walk) {
            if (found) {
                work_count(W_STEPS, 1u);
                // Interiors of tokens hold NO_TOKEN: every byte inside an accepted token was
                // passed by the walk from its start, and a token start written since then was
                // cleared again when that token was popped.
                scratch[q] = NO_TOKEN;
                q += 1u;
                let next_fc = child.y;
                let next_nc = child.x >> 8u;
                last_tid = child.z;
                if (ALL_REACHABLE) {
                    if (last_tid != NO_TOKEN) {
                        cand = last_tid;
                        cand_len = q - pos;
                        if (!lazy) {
                            ci = ld_info(cand);
                            cb = ld_bounds(cand);
                        } else {
                            rows_ok = false;
                        }
                    }
                } else if (last_tid != NO_TOKEN) {
                    let li = ld_info(last_tid);
                    if (li.y != NO_TOKEN) {  // reachable
                        cand = last_tid;
                        cand_len = q - pos;
                        ci = li;
                        if (!lazy) {
                            cb = ld_bounds(cand);
                        } else {
                            rows_ok = false;
                        }
                    }
                }
                fc = next_fc;
                nc = next_nc;
                continue;
            }
            in_walk = false;
            stop = q;
            stop_ws = ws_q;
            // q is where the walk stopped; the word ends there if no child could follow
            // because of a word start (or the slice end) and the node spells a token.
            if (!ALL_REACHABLE && WHOLE_WORDS && prev == NO_TOKEN && last_tid != NO_TOKEN && ws_q
                && cand != last_tid) {
                cand = last_tid;
                cand_len = q - pos;
                ci = ld_info(cand);
                cb = ld_bounds(cand);
                rows_ok = true;
            }
        }
        // Try cand (in the iteration that ended its walk: lanes stay in step).
        work_count(W_TRIES, 1u);
        if (!rows_ok && !lazy) {
            ci = ld_info(cand);
            cb = ld_bounds(cand);
            rows_ok = true;
        }
        // (cand_len is 0 only after a shorter candidate or a pop, whose rows are loaded)
        if (cand_len == 0u) { cand_len = ci.w >> RANK_BITS; }
        let end = pos + cand_len;
        var ok = !(dead_any && is_dead(end));
        if (ok && prev != NO_TOKEN) {
            ok = valid_pair(prev, spine_r(prev_i, prev_b), cand, spine_l(ci, cb), &steps);
        }
        if (!ok && !rows_ok) {  // (lazy) a dead end at a word start: its next shorter token
            ci = ld_info(cand);
            cb = ld_bounds(cand);
            rows_ok = true;
        }
        let shorter = ci.x;
        if (ok || (prev == NO_TOKEN && shorter == NO_TOKEN)) {
            work_count(W_TOKENS, 1u);
            var emit = cand;
            if (!ok) {  // nothing fits at a word start: report (INFO_BAD_TOKENS, read by the host), go on
                emit = BAD_TOKEN;
                atomicAdd(&info[INFO_BAD_TOKENS], 1u);
            }
            scratch[pos] = emit;
            if (pos < block_end) { own_count += 1u; } else { atomicAdd(&counts[pos / (WG * CHUNK)], 1u); }
            pprev = prev;
            pprev_known = true;
            prev = select(NO_TOKEN, emit, ok);
            prev_i = ci;
            prev_b = cb;
            pos = end;
            cand = NO_TOKEN;
            // Whether pos starts a word (or ends the slice): known when the walk stopped there.
            var ws = stop_ws;
            if (pos != stop) { ws = pos >= n || word_start_at(pos); }
            if (pos >= n || (pos >= ce && ws)) {
                if (params.resume != 0u) { state[2u * c] = 0u; }
                walking = false;
            } else {
                if (ws) {
                    prev = NO_TOKEN;
                } else if (!rows_ok) {  // (lazy) the word goes on: the token's rows are needed
                    prev_i = ld_info(prev);
                    prev_b = ld_bounds(prev);
                }
                rows_ok = true;
                b0 = text_byte(pos);
                let d1 = d1_node(b0);
                fc = d1.y;
                nc = d1.x >> 8u;
                cand = d1.z;
                run_hdr = d1.w;
                ci = d1_info(b0);
                cb = d1_bounds(b0);
                cand_len = 1u;
                last_tid = cand;
                q = pos + 1u;
                in_walk = true;
            }
        } else if (shorter != NO_TOKEN) {
            work_count(W_SHORTER, 1u);
            cand = shorter;
            cand_len = 0u;
            ci = ld_info(cand);
            cb = ld_bounds(cand);
        } else {
            // No token fits at pos after prev: pos is dead; pop prev and retry from its start
            // with prev's next shorter token (prev itself ends at the dead pos: it would fail).
            work_count(W_POPS, 1u);
            atomicOr(&dead[pos >> 5u], 1u << (pos & 31u));
            dead_any = true;
            let prow = prev_i;  // prev's tokinfo row
            cand_len = prow.w >> RANK_BITS;
            let ps = pos - cand_len;
            scratch[ps] = NO_TOKEN;
            if (ps < block_end) { own_count -= 1u; } else { atomicSub(&counts[ps / (WG * CHUNK)], 1u); }
            cand = prev;
            ci = prow;
            cb = prev_b;
            if (prow.x != NO_TOKEN) {
                work_count(W_SHORTER, 1u);
                cand = prow.x;
                cand_len = 0u;
                ci = ld_info(cand);
                cb = ld_bounds(cand);
            }
            pos = ps;
            if (pprev_known) {  // the token before the popped one, kept: no scan back
                prev = pprev;
            } else {
                prev = prev_token(pos, &steps);
            }
            pprev_known = false;
            if (prev != NO_TOKEN) {
                prev_i = ld_info(prev);
                prev_b = ld_bounds(prev);
            }
        }
    }
    atomicAdd(&wg_count, own_count);
//#if PROFILE
    work_count(W_ITERS, iters);
//#if SUBGROUPS
    let most = subgroupMax(iters);
    if (lane == 0u) { atomicAdd(&wg_work[W_LOCKSTEP], most); }
//#endif
    for (var k = 0u; k < W_COUNT; k++) {
        if (pw[k] != 0u) { atomicAdd(&wg_work[k], pw[k]); }
    }
//#endif
    workgroupBarrier();
    if (lane_wg == 0u && block * WG * CHUNK < n) {
        atomicAdd(&counts[block], atomicLoad(&wg_count));
    }
//#if PROFILE
    if (lane_wg < W_COUNT) { atomicAdd(&work[lane_wg], atomicLoad(&wg_work[lane_wg])); }
//#endif
}

//#if WORD_MASK
//#else
// This project's word starts (DESIGN.md §2) of the
// slice as bits, for the walk's WORD_MASK build, which then reads one bit per word-start test
// (a trie step tests the byte after its match) instead of doc_bits bits and three text bytes.
// One thread per 32 bytes: word w of starts_out holds bits 32w .. 32w + 31 (word_start_at of
// each byte below n; 0 above). Run in the walk's compute pass, before its first dispatch.
//  23 starts_out : storage, read_write  array<u32>  ((n + 31) / 32 words, and one more)
@group(0) @binding(23) var<storage, read_write> starts_out: array<u32>;

@compute @workgroup_size(WG)
fn bpe_word_bits(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let n = params.n;
    let w = linear_workgroup(wid, nwg) * WG + lid;
    if (w > (n + 31u) / 32u) { return; }
    var bits = 0u;
    for (var k = 0u; k < 32u; k++) {
        let i = 32u * w + k;
        if (i < n && word_start_at(i)) { bits |= 1u << k; }
    }
    starts_out[w] = bits;
}
//#endif

// Merge-order long words (torch_gpubpe/encoding/long_bpe.py): a word of many KB is cut into
// pieces, each walked as a word of its own by the walk above; these passes check and move the
// cuts. One thread per item of aux_in (AUX_PAIR, AUX_BOUNDARY) or one workgroup per block
// (AUX_RECOUNT), after the walks:
//   AUX_PAIR      aux_in[i] = a cut v: aux_out[i] = 1 iff the token ending at v and the token
//                 at v form a valid pair (then the join is the merge-order result)
//   AUX_BOUNDARY  aux_in[i] = a position t: aux_out[i] = the first token start >= t within
//                 aux.reach bytes, else NO_TOKEN
//   AUX_RECOUNT   counts[block] = the token starts of the block (walks of re-walked pieces
//                 counted their tokens again)
//  24 aux     : uniform                                 (mode, items, n, reach)
//  25 aux_in  : storage, read        array<u32>
//  26 aux_out : storage, read_write  array<u32>
struct AuxParams {
    mode: u32,
    count: u32,
    n: u32,
    reach: u32,
}
@group(0) @binding(24) var<uniform> aux: AuxParams;
@group(0) @binding(25) var<storage, read> aux_in: array<u32>;
@group(0) @binding(26) var<storage, read_write> aux_out: array<u32>;
const AUX_PAIR: u32 = 0u;
const AUX_BOUNDARY: u32 = 1u;
const AUX_RECOUNT: u32 = 2u;

@compute @workgroup_size(WG)
fn bpe_long_aux(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let lw = linear_workgroup(wid, nwg);
    if (aux.mode == AUX_RECOUNT) {
        if (lid == 0u) { atomicStore(&wg_count, 0u); }
        workgroupBarrier();
        let cs = (lw * WG + lid) * CHUNK;
        let ce = min(cs + CHUNK, aux.n);
        var own = 0u;
        for (var q = cs; q < ce; q++) {
            if (ld_scratch(q) != NO_TOKEN) { own += 1u; }
        }
        atomicAdd(&wg_count, own);
        workgroupBarrier();
        if (lid == 0u && lw * WG * CHUNK < aux.n) {
            atomicStore(&counts[lw], atomicLoad(&wg_count));
        }
        return;
    }
    let i = lw * WG + lid;
    if (i >= aux.count) { return; }
    var steps = 0u;
    if (aux.mode == AUX_PAIR) {
        let v = aux_in[i];
        let r = ld_scratch(v);
        var l = NO_TOKEN;
        var j = v;
        for (var k = 0u; k < aux.reach && j > 0u; k++) {
            j -= 1u;
            l = ld_scratch(j);
            if (l != NO_TOKEN) { break; }
        }
        var ok = 0u;
        if (l < BAD_TOKEN && r < BAD_TOKEN) {
            let li = ld_info(l);
            let ri = ld_info(r);
            // the token before v must end at v (it does: v is a word start for its walk)
            if (j + (li.w >> RANK_BITS) == v
                && valid_pair(l, spine_r(li, ld_bounds(l)), r, spine_l(ri, ld_bounds(r)),
                              &steps)) {
                ok = 1u;
            }
        }
        aux_out[i] = ok;
    } else {
        let t = aux_in[i];
        var p = NO_TOKEN;
        for (var k = 0u; k < aux.reach; k++) {
            let q = t + k;
            if (q >= aux.n) { break; }
            if (ld_scratch(q) != NO_TOKEN) { p = q; break; }
        }
        aux_out[i] = p;
    }
}
