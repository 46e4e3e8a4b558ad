// encode_bpe.wgsl — exact merge-order BPE over the flat BFS trie (issue 15): the backtracking
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
// Loads (issue 15: global-memory load instructions dominate; the overrides SHORT_SEARCH,
// FUSED_EDGES, D2_LUT, LAZY_ROWS, TEXT_WINDOW, each exact, cut them; the host turns them on,
// torch_gpubpe/encoding/merge_walk.py, and the benchmarks time each one off): a trie step is one fedges
// row after a search of ceil(log2 nc) steps (the walk's first step: one d2 row); text bytes and
// word-start bits come from a two-word window per thread; a candidate's tokinfo/bounds rows are
// loaded only where a pair check can need them.
//
// Bindings (group 0, layout "auto"): 0..5, 7, 8 as in encode.wgsl, and
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
//                                                         bounds of bpe.py: valid_pair's early
//                                                         exit, its first two steps without a
//                                                         further load
//  18 work      : storage, read_write  array<atomic<u32>>  (PROFILE builds only) work counters,
//                                                         W_* below; cleared by the host
//  19 fedges   : storage, read        array<vec4<u32>>    per trie edge e (FUSED_EDGES): (byte |
//                                                         nc << 8, fc, token, 0) of the edge's
//                                                         byte and its child's node row, so a
//                                                         trie step is one load, not an edge
//                                                         and then a node row
//  20 d2       : storage, read        array<vec4<u32>>    per two bytes b0 << 8 | b1 (D2_LUT): the
//                                                         node spelled by them as in fedges
//                                                         (x = nc << 8 | b1), all NO_TOKEN if none:
//                                                         the depth-1 search (a binary search
//                                                         of up to 256 children) in one load
//  21 spines   : storage, read        array<vec4<u32>>    per token t (SPINE_ROWS): row 2t =
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
@group(0) @binding(2) var<storage, read> nodes: array<u32>;
@group(0) @binding(3) var<storage, read> edges: array<u32>;
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
//#if D1_GLOBAL
// 22 d1rows : storage, read array<vec4<u32>>  per byte b, rows 3b .. 3b + 2 (D1_GLOBAL): the
//             depth-1 node of b as a node record (nc << 8, fc, token, 0), its token's tokinfo
//             and bounds rows: what the workgroup copies d1_* hold otherwise
@group(0) @binding(22) var<storage, read> d1rows: array<vec4<u32>>;
//#endif
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
override PREFETCH_ROWS: bool = true;  // load a longer match's rows in the walk step that finds it
                                      // (else in the try; benchmarks compare the two)
override OVERLAP_TRY: bool = true;    // a try's first pair-check loads issued beside the walking
                                      // lanes' child-row loads (benchmarks compare)
override SHORT_SEARCH: bool = false;  // a child search stops when one edge is left (ceil(log2
                                      // nc) loads, not 8), benchmarks compare
override FUSED_EDGES: bool = false;   // trie steps through fedges (one load per step)
override D2_LUT: bool = false;        // a walk's first trie step through d2 (one load)
override TEXT_WINDOW: bool = false;   // text bytes and word-start bits read through a window of
                                      // two words per thread (win_word), not a load per use
override SPINE_ROWS: bool = false;    // valid_pair through spines (valid_pair_s)
override LAZY_ROWS: bool = false;     // no tokinfo/bounds rows loaded for candidates at a word
                                      // start (no pair check there); an accepted token's rows
                                      // are loaded only if its word goes on
override LANES: u32 = 256u;           // the walk's workgroup size (WALK_WG64: 64); a block is
                                      // still WG chunks, walked by WG / LANES workgroups, so
                                      // that counts and state keep encode.wgsl's layout
override WALK_WG64: bool = false;     // (the host sets LANES from it; kept for the record)
override D1_GLOBAL: bool = false;     // (the host builds with the D1_GLOBAL flag: the depth-1
                                      // rows read from d1rows, no workgroup copies to fill)
override LEAN_STATE: bool = false;    // (with SPINE_ROWS) fewer registers across the walk: prev
                                      // kept as its spines row (4 words, not 8; its tokinfo row
                                      // loaded again on a pop), cand's right-side fields not
                                      // kept (the spines row loaded when cand is accepted and
                                      // its word goes on), no pprev (a pop scans back), no b0
                                      // (the first trie step reads the byte again)
override WORD_BITS: bool = false;     // (the host builds the walk with WORD_MASK and runs
                                      // bpe_word_bits first: the word starts as bits)
override ALL_REACHABLE: bool = false;  // no unreachable token (GPT-2, Qwen2, vocabs trained by
                                       // merges): skip the per-node check and whole-word rule

const NO_TOKEN: u32 = 0xFFFFFFFFu;
const BAD_TOKEN: u32 = 0xFFFFFFFEu;  // no valid encoding found (vocab outside the supported set)
const RANK_BITS: u32 = 18u;
const RANK_MASK: u32 = 0x3FFFFu;
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
const W_LD_TRIE: u32 = 12u;    // nodes, edges, fedges, d2
const W_LD_ROWS: u32 = 13u;    // tokinfo, bounds
const W_LD_PAIRS: u32 = 14u;   // pairs
const W_LD_TEXT: u32 = 15u;    // text, doc_bits, word_mask, scratch, dead
const W_COUNT: u32 = 16u;

//#if D1_GLOBAL
fn d1_node(b: u32) -> vec4<u32> { work_count(W_LD_TRIE, 1u); return d1rows[3u * b]; }
fn d1_info(b: u32) -> vec4<u32> { work_count(W_LD_ROWS, 1u); return d1rows[3u * b + 1u]; }
fn d1_bounds(b: u32) -> vec4<u32> { work_count(W_LD_ROWS, 1u); return d1rows[3u * b + 2u]; }
//#else
var<workgroup> d1_fc: array<u32, 256>;
var<workgroup> d1_nc: array<u32, 256>;
var<workgroup> d1_tid: array<u32, 256>;
var<workgroup> d1_ci: array<vec4<u32>, 256>;  // tokinfo and bounds rows of the single bytes
var<workgroup> d1_cb: array<vec4<u32>, 256>;
fn d1_node(b: u32) -> vec4<u32> { return vec4<u32>(d1_nc[b] << 8u, d1_fc[b], d1_tid[b], 0u); }
fn d1_info(b: u32) -> vec4<u32> { return d1_ci[b]; }
fn d1_bounds(b: u32) -> vec4<u32> { return d1_cb[b]; }
//#endif
var<workgroup> wg_count: atomic<u32>;
//#if PROFILE
var<workgroup> wg_work: array<atomic<u32>, 16>;
var<private> pw: array<u32, 16>;   // this thread's counters
fn work_count(k: u32, v: u32) { pw[k] += v; }
//#else
fn work_count(k: u32, v: u32) {}
//#endif

// TEXT_WINDOW: this thread's copies of text words tw_base, tw_base + 1 and of bit-array
// (doc_bits, or word_mask) words bw_base, bw_base + 1. The walk reads bytes q - 1 .. q + 1
// as q moves forward (and jumps back after a pop or a shorter token), so one word load per
// 4 bytes of text and per 32 bits replaces a load per byte read.
var<private> tw_base: u32 = 0xFFFFFFF0u;  // (no word: k - tw_base >= 2 for every index k)
var<private> tw0: u32;
var<private> tw1: u32;
var<private> bw_base: u32 = 0xFFFFFFF0u;
var<private> bw0: u32;
var<private> bw1: u32;

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
    let k = i >> 2u;
    var w = 0u;
    if (TEXT_WINDOW) {
        if (k == tw_base + 2u) {  // one word on: slide
            tw0 = tw1;
            tw1 = text_word(k);
            tw_base = k - 1u;
        } else if (k - tw_base >= 2u) {
            tw_base = k;
            tw0 = text_word(k);
            tw1 = text_word(k + 1u);
        }
        w = select(tw1, tw0, k == tw_base);
    } else {
        w = text_word(k);
    }
    return (w >> ((i & 3u) * 8u)) & 0xFFu;
}

// Bit i of doc_bits (or, WORD_MASK builds, of word_mask).
fn bit_at(i: u32) -> bool {
    let k = i >> 5u;
    var w = 0u;
    if (TEXT_WINDOW) {
        if (k == bw_base + 2u) {
            bw0 = bw1;
            bw1 = bits_word(k);
            bw_base = k - 1u;
        } else if (k - bw_base >= 2u) {
            bw_base = k;
            bw0 = bits_word(k);
            bw1 = bits_word(k + 1u);
        }
        w = select(bw1, bw0, k == bw_base);
    } else {
        w = bits_word(k);
    }
    return ((w >> (i & 31u)) & 1u) != 0u;
}
//#if WORD_MASK
//#else
fn doc_start(i: u32) -> bool { return bit_at(i); }
//#endif
fn ld_node(i: u32) -> u32 { work_count(W_LD_TRIE, 1u); return nodes[i]; }
fn ld_edge(i: u32) -> u32 { work_count(W_LD_TRIE, 1u); return edges[i]; }
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

// One step of the binary search for byte b among edges [base, base + len) (sorted by byte);
// with SHORT_SEARCH none once one edge is left (it would load that edge's byte again).
fn bs_step(base: ptr<function, u32>, len: ptr<function, u32>, b: u32) {
    if (SHORT_SEARCH && *len <= 1u) { return; }
    let half = *len >> 1u;
    let eb = ld_edge(2u * (*base + half));
    *base = select(*base, *base + half, eb <= b);
    *len = *len - half;
}

fn find_child(fc: u32, nc: u32, b: u32) -> u32 {
    if (nc <= 1u) {
        return select(NO_TOKEN, ld_edge(2u * fc + 1u), nc == 1u && ld_edge(2u * fc) == b);
    }
    var base = fc;
    var len = nc;
    bs_step(&base, &len, b); bs_step(&base, &len, b); bs_step(&base, &len, b);
    bs_step(&base, &len, b); bs_step(&base, &len, b); bs_step(&base, &len, b);
    bs_step(&base, &len, b); bs_step(&base, &len, b);
    return select(NO_TOKEN, ld_edge(2u * base + 1u), ld_edge(2u * base) == b);
}

// find_child over fedges: the same search, reading the byte from x & 0xFF.
fn fbs_step(base: ptr<function, u32>, len: ptr<function, u32>, b: u32) {
    if (SHORT_SEARCH && *len <= 1u) { return; }
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
    if (D2_LUT && first) { return ld_d2((b0 << 8u) | b); }
    if (FUSED_EDGES) { return find_child_fused(fc, nc, b); }
    let child = find_child(fc, nc, b);
    if (child == NO_TOKEN) { return vec4<u32>(NO_TOKEN); }
    return vec4<u32>(ld_node(3u * child + 1u) << 8u, ld_node(3u * child), ld_node(3u * child + 2u),
                     0u);
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

// Whether BPE of bytes(t1) + bytes(t2) gives [t1, t2] (bpe.valid_pair; rust-gems
// is_valid_token_pair with ranks): unwind the later-ranked token's last merge, and fail when a
// merge across the seam would have come before what is still allowed (limit); stop (valid) when
// no merge across the seam can rank below the limit any more (spine bounds). i1, b1, i2, b2:
// the tokens' tokinfo and bounds rows (the caller has them). Each step is ONE round of loads:
// which token unwinds (and the limit after) follows from the ranks in the rows at hand, so the
// pair's hash slot (token and rank in one row) and the rows of the token unwound to are loaded
// together, before any branch on them; the bound test after an unwinding reads the spine bounds
// of the unwound part from the rows already there (b1.z = R[right(t1)], b2.w = L[left(t2)]). The
// first step has limit = NO_TOKEN, so any merge (t1, t2) fails the pair without its rank. Most
// pairs end in 1 step.
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

// pre: the first step's loads (e0: the pair's slot row, ni0/nb0: the rows of the token unwound
// to, as plan_step says) were issued by the caller.
fn valid_pair(t1_in: u32, i1_in: vec4<u32>, b1_in: vec4<u32>, t2_in: u32, i2_in: vec4<u32>,
              b2_in: vec4<u32>, pre: bool, e0: vec4<u32>, ni0: vec4<u32>, nb0: vec4<u32>,
              steps: ptr<function, u32>) -> bool {
    work_count(W_CHECKS, 1u);
    var t1 = t1_in;
    var t2 = t2_in;
    var i1 = i1_in;
    var i2 = i2_in;
    var b1 = b1_in;
    var b2 = b2_in;
    if (max(b1.x, b2.y) == NO_TOKEN) { return true; }  // bpe.py's first bound test
    var limit = NO_TOKEN;
    for (var g = 0u; g < UNWIND; g++) {
        *steps += 1u;
        if (g == 1u) { work_count(W_CHECK_LOOP, 1u); }
        if (g >= 1u) { work_count(W_UNWIND, 1u); }
        let p = plan_step(t1, i1, t2, i2);
        var e = e0;
        var ni = ni0;
        var nb = nb0;
        if (g != 0u || !pre) {
            e = ld_pair(p.h);
            ni = ld_info(p.nt);
            nb = ld_bounds(p.nt);
        }
        let c = pair_find(t1, t2, p.h, e, steps);
        if (c.x != NO_TOKEN && (limit == NO_TOKEN || c.y < limit)) { return false; }
        if (p.last) { return true; }
        limit = p.next_limit;
        var bound = 0u;
        if (p.move1) {
            bound = max(b1.z, b2.y);
            t1 = p.nt;
            i1 = ni;
            b1 = nb;
        } else {
            bound = max(b1.x, b2.w);
            t2 = p.nt;
            i2 = ni;
            b2 = nb;
        }
        if (bound >= limit) { return true; }
    }
    return true;  // not reached: UNWIND bounds the unwinding (host)
}

// valid_pair with the tokens' spine rows (SPINE_ROWS): s1 = (right, rank, R, R[right]) of t1
// (the left token), s2 = (left, rank, L, L[left]) of t2: the same steps and loads, but the
// token unwound to is one spines row (its side's), not its tokinfo and bounds rows.
fn spine_r(i: vec4<u32>, b: vec4<u32>) -> vec4<u32> {
    return vec4<u32>(i.z, i.w & RANK_MASK, b.x, b.z);
}
fn spine_l(i: vec4<u32>, b: vec4<u32>) -> vec4<u32> {
    return vec4<u32>(i.y, i.w & RANK_MASK, b.y, b.w);
}
// The spines row of the token a step unwinds to (plan_step's p).
fn spine_row(p: Step) -> u32 { return 2u * p.nt + select(1u, 0u, p.move1); }

fn valid_pair_s(t1_in: u32, s1_in: vec4<u32>, t2_in: u32, s2_in: vec4<u32>, pre: bool,
                e0: vec4<u32>, ns0: vec4<u32>, steps: ptr<function, u32>) -> bool {
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
        var e = e0;
        var ns = ns0;
        if (g != 0u || !pre) {
            e = ld_pair(p.h);
            ns = ld_spine(spine_row(p));
        }
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
// then its longest pair check (issue 15: 2.8x greedy's kernel time before).
@compute @workgroup_size(LANES)
fn bpe_tokenizer_chunked(@builtin(workgroup_id) wid: vec3<u32>,
                         @builtin(num_workgroups) nwg: vec3<u32>,
//#if SUBGROUPS
                         @builtin(subgroup_invocation_id) lane: u32,
//#endif
                         @builtin(local_invocation_index) lane_wg: u32) {
    // Block (WG chunks) and the chunk's index in it: LANES < WG splits a block over WG / LANES
    // workgroups (the host dispatches that many per block).
    let lw = linear_workgroup(wid, nwg);
    let lid = (lw % (WG / LANES)) * LANES + lane_wg;
//#if D1_GLOBAL
//#else
    let root_fc = ld_node(0u);
    for (var b = lane_wg; b < 256u; b += LANES) {
        var r: vec4<u32>;  // the depth-1 node of byte b, as a node record
        if (FUSED_EDGES) {
            r = ld_fedge(root_fc + b);
        } else {
            let d1 = ld_edge(2u * (root_fc + b) + 1u);
            r = vec4<u32>(ld_node(3u * d1 + 1u) << 8u, ld_node(3u * d1), ld_node(3u * d1 + 2u), 0u);
        }
        d1_fc[b] = r.y;
        d1_nc[b] = r.x >> 8u;
        d1_tid[b] = r.z;
        d1_ci[b] = ld_info(r.z);
        d1_cb[b] = ld_bounds(r.z);
    }
//#endif
    if (lane_wg == 0u) { atomicStore(&wg_count, 0u); }
//#if PROFILE
    if (lane_wg < W_COUNT) { atomicStore(&wg_work[lane_wg], 0u); }
    for (var k = 0u; k < W_COUNT; k++) { pw[k] = 0u; }
//#endif
    workgroupBarrier();

    let n = params.n;
    let block = params.block_base + lw / (WG / LANES);
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
    var rows_ok = true;  // ci, cb are cand's (always, with PREFETCH_ROWS)
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
    // LEAN_STATE (SPINE_ROWS only): prev's spines row (right, rank | len << 18, R, R[right])
    // instead of prev_i, prev_b
    let lean = LEAN_STATE && SPINE_ROWS;
    var prev_s = vec4<u32>(0u);
    if (walking) {
        prev = prev_token(pos, &steps);
        if (prev != NO_TOKEN) {
            if (lean) {
                prev_s = ld_spine(2u * prev);
            } else {
                prev_i = ld_info(prev);
                prev_b = ld_bounds(prev);
            }
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
    if (walking && cand == NO_TOKEN) {
        b0 = text_byte(pos);
        let d1 = d1_node(b0);
        fc = d1.y;
        nc = d1.x >> 8u;
        cand = d1.z;  // single bytes are always reachable
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
            atomicAdd(&info[1], 1u);
            atomicMax(&info[2], 0xFFFFFFFFu - block);
            atomicMax(&info[3], block + 1u);
            break;
        }
        iters += 1u;
        // One trie step: the longest reachable token at pos so far (cand); the whole word if it
        // is a token and pos starts the word.
        var child = vec4<u32>(NO_TOKEN);  // the child's node record (child_node)
        var ws_q = false;
        if (in_walk) {
            ws_q = q >= n || word_start_at(q);
            if (!ws_q) {
                let first = q == pos + 1u;
                var bw = b0;
                if (lean && first) { bw = text_byte(pos); }  // (LEAN_STATE: b0 not kept)
                child = child_node(fc, nc, bw, first, text_byte(q));
            }
        }
        let found = child.x != NO_TOKEN;
        // A lane that tries in this iteration issues its pair check's first loads here, before
        // the walking lanes' loads of their child's row and cand's rows below: the two wait
        // together, not one after the other (issue 15: lanes walking and lanes trying share
        // each iteration).
        var pre = false;
        var pe = vec4<u32>(0u);
        var pni = vec4<u32>(0u);
        var pnb = vec4<u32>(0u);
        if (OVERLAP_TRY && !found && prev != NO_TOKEN && rows_ok) {
            var pi = prev_i;
            if (lean) { pi = vec4<u32>(0u, 0u, prev_s.x, prev_s.y); }
            let p = plan_step(prev, pi, cand, ci);
            pe = ld_pair(p.h);
            if (SPINE_ROWS) {
                pni = ld_spine(spine_row(p));
            } else {
                pni = ld_info(p.nt);
                pnb = ld_bounds(p.nt);
            }
            pre = true;
        }
        // LAZY_ROWS: a candidate at a word start needs no rows unless it is rejected (a dead
        // end) or its word goes on after it (then it is the next check's prev).
        let lazy = LAZY_ROWS && prev == NO_TOKEN;
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
                        if (PREFETCH_ROWS && !lazy) {
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
                        if (PREFETCH_ROWS && !lazy) {
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
            if (!ALL_REACHABLE && prev == NO_TOKEN && last_tid != NO_TOKEN && ws_q
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
            if (SPINE_ROWS) {
                var s1 = spine_r(prev_i, prev_b);
                if (lean) { s1 = prev_s; }
                ok = valid_pair_s(prev, s1, cand, spine_l(ci, cb), pre, pe, pni, &steps);
            } else {
                ok = valid_pair(prev, prev_i, prev_b, cand, ci, cb, pre, pe, pni, pnb, &steps);
            }
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
            if (!ok) {  // nothing fits at a word start: report (info[6], read by the host), go on
                emit = BAD_TOKEN;
                atomicAdd(&info[6], 1u);
            }
            scratch[pos] = emit;
            if (pos < block_end) { own_count += 1u; } else { atomicAdd(&counts[pos / (WG * CHUNK)], 1u); }
            if (!lean) {
                pprev = prev;
                pprev_known = true;
            }
            prev = select(NO_TOKEN, emit, ok);
            if (!lean) {
                prev_i = ci;
                prev_b = cb;
            }
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
                } else if (lean) {  // the word goes on: prev's spines row (its latency
                    // overlaps the next walk's trie steps)
                    if (prev != NO_TOKEN) { prev_s = ld_spine(2u * prev); }
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
            var prow = prev_i;  // prev's tokinfo row
            if (lean) { prow = ld_info(prev); }
            cand_len = prow.w >> RANK_BITS;
            let ps = pos - cand_len;
            scratch[ps] = NO_TOKEN;
            if (ps < block_end) { own_count -= 1u; } else { atomicSub(&counts[ps / (WG * CHUNK)], 1u); }
            cand = prev;
            ci = prow;
            cb = prev_b;
            if (lean) { cb = ld_bounds(prev); }
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
                if (lean) {
                    prev_s = ld_spine(2u * prev);
                } else {
                    prev_i = ld_info(prev);
                    prev_b = ld_bounds(prev);
                }
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
// WORD_BITS (torch_gpubpe/encoding/merge_walk.py): this project's word starts (DESIGN.md §2) of the
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
