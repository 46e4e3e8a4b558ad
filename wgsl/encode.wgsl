// encode.wgsl — greedy longest-match encoding over a flat BFS trie (DESIGN.md §4–§5; seed §4,
// inference pipeline `trie_tokenizer_chunked → trie_prefix_sum → trie_tokenizer_compact`).
//
// One slice of a packed batch (DESIGN.md §6): n bytes, documents back to back, plus a one-byte
// halo at index n (the byte after the slice, when it continues the same document).
//
// Bindings (group 0; each entry point uses a subset, layouts are "auto"):
//   0 text       : storage, read        array<u32>          bytes packed 4 per u32 (LE); covers
//                                                          n + 1 bytes (the halo), zero padded
//   1 doc_bits   : storage, read        array<u32>          bit i set iff a document starts at
//                                                          byte i; bit n set iff byte n is not
//                                                          part of the last document (or absent)
//   2 nodes      : storage, read        array<u32>          trie nodes, 3 u32 each (first_edge,
//                                                          num_children, token_id | NO_TOKEN)
//   3 edges      : storage, read        array<u32>          trie edges, 2 u32 each (byte, child)
//   4 scratch    : storage, read_write  array<u32>          one per byte: token id at a token's
//                                                          first byte, NO_TOKEN elsewhere; length n
//   5 counts     : storage, read_write  array<atomic<u32>>  tokens starting in each block of
//                                                          BLOCK = WG * CHUNK bytes; cleared by host
//   6 state      : storage, read_write  array<u32>          [0, C) per chunk: 0 = done, else 1 +
//                                                          byte where an out-of-budget walk
//                                                          resumes; [C, 2C) per chunk: its first
//                                                          word start, NO_TOKEN if none; [2C,
//                                                          2C + B) the same per block (C chunks,
//                                                          B blocks of the slice; C = B * WG)
//   7 info       : storage, read_write  array<atomic<u32>>  [0] tokens in the slice (written by
//                                                          trie_prefix_sum), [1] chunks that ran
//                                                          out of budget, [2] 0xFFFFFFFF - the
//                                                          lowest block of such a chunk, [3] 1 +
//                                                          the highest; [4] long-word regions,
//                                                          [5] errors of the long-word path
//                                                          (must stay 0); [8 + 2r], [9 + 2r]:
//                                                          region r's first and end byte. [0, 8)
//                                                          cleared by the host (INFO_*: common.wgsl)
//   8 params     : uniform              Params
//   9 block_off  : storage, read_write  array<u32>          exclusive prefix sum of counts; length
//                                                          number of blocks
//  10 out        : storage, read_write  array<atomic<u32>>  token ids, u32 each, or (OUT16) two u16
//                                                          per u32, little-endian; OUT16 needs the
//                                                          buffer cleared by the host
//  11 doc_starts : storage, read        array<u32>          slice-relative first byte of each
//                                                          document of the slice, ascending;
//                                                          length params.num_docs
//  12 doc_tok    : storage, read_write  array<u32>          per document: 1 + index (in the slice's
//                                                          output) of its first token; 0 = none
//
// Long words (DESIGN.md §8: one thread must not walk MBs). A walk that gets params.long_from bytes
// past its chunk's end inside one word stops at a token start p and records the region [p, end)
// of that word (end: the next word start, found by long_word_ends from the per-chunk and
// per-block first word starts). The regions are then encoded in parallel (long_periods →
// long_match → long_exits → ceil(log2(tiles)) × long_jump → long_emit, one submit): every byte's longest
// match is independent; the tokens are the chain p → p + len → …, which pointer jumping marks.
//  24 ltab       : storage, read        array<u32>          4 per region of the group: first byte,
//                                                          end byte, first tile, 0
//  25 lparams    : uniform              LParams
//  26 llen       : storage, read_write  array<u32>          per long index (tile * LC + offset):
//                                                          bytes of the longest match there
//  27 lexit      : storage, read_write  array<u32>          per long index: the first chain
//                                                          position at or past its tile's end
//  28 lptr0      : storage, read_write  array<u32>          per window node (tile * LDW + offset <
//  29 lptr1      : storage, read_write  array<u32>          LDW): the node of its exit, TERM at the
//                                                          region's end (ping-pong pair)
//  30 lmark      : storage, read_write  array<atomic<u32>>  per node: 1 = on the token chain

struct Params {
    n: u32,            // bytes in the slice (halo excluded)
    resume: u32,       // 0: first walk of the slice; 1: continue the chunks of `state`
    budget: u32,       // walk steps per thread per dispatch (lavapipe caps loops at 65,535)
    num_blocks: u32,   // ceil(n / BLOCK)
    num_docs: u32,     // documents starting in the slice (length of doc_starts)
    block_base: u32,   // resume = 1: the dispatch covers blocks block_base.. only
    long_from: u32,    // a walk this many bytes past its chunk's end hands the word over
                       // (0xFFFFFFFF: never)
    reg_cap: u32,      // region slots in info
}

struct LParams {
    n: u32,            // bytes in the slice
    nreg: u32,         // regions in this group (rows of ltab)
    ntiles: u32,       // tiles of LC bytes over the group's regions
    nnodes: u32,       // ntiles * LDW
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    _pad3: u32,
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
@group(0) @binding(9) var<storage, read_write> block_off: array<u32>;
@group(0) @binding(10) var<storage, read_write> out: array<atomic<u32>>;
@group(0) @binding(11) var<storage, read> doc_starts: array<u32>;
@group(0) @binding(12) var<storage, read_write> doc_tok: array<u32>;
//#if WORD_MASK
// 16 word_mask : storage, read        array<u32>          bit i set iff byte i of the slice starts
//                                                          a word (a regex pre-tokenizer's split,
//                                                          wgsl/pretokenize_unicode.wgsl); bit 0 set
@group(0) @binding(16) var<storage, read> word_mask: array<u32>;
//#endif
@group(0) @binding(24) var<storage, read> ltab: array<u32>;
@group(0) @binding(25) var<uniform> lparams: LParams;
@group(0) @binding(26) var<storage, read_write> llen: array<u32>;
@group(0) @binding(27) var<storage, read_write> lexit: array<u32>;
@group(0) @binding(28) var<storage, read_write> lptr0: array<u32>;
@group(0) @binding(29) var<storage, read_write> lptr1: array<u32>;
@group(0) @binding(30) var<storage, read_write> lmark: array<atomic<u32>>;

override WG: u32 = 256u;        // threads per workgroup (a multiple of every subgroup size)
override CHUNK: u32 = 32u;      // bytes per thread in trie_tokenizer_chunked; a multiple of 4
override OUT16: bool = false;   // write ids as u16 (vocab of at most 65,536 ids)
override LC: u32 = 64u;         // long words: bytes per tile (>= the longest token)
override LDW: u32 = 16u;        // long words: window nodes per tile (= the longest token, <= LC)

const TERM: u32 = 0xFFFFFFFFu;  // long words: the chain has reached its region's end
const COPY: u32 = 0x80000000u;  // long words: llen = COPY | P: the match is the one P bytes back

// Workgroup memory of trie_tokenizer_chunked (4,104 B): root LUT and depth-1 node metadata,
// the block's token count and first word start. Every entry is written before it is read
// (workgroup memory is not zeroed: WGPU_NOTES.md §0.3; tests poison it between dispatches).
var<workgroup> root_lut: array<u32, 256>;
var<workgroup> d1_fc: array<u32, 256>;
var<workgroup> d1_nc: array<u32, 256>;
var<workgroup> d1_tid: array<u32, 256>;
var<workgroup> wg_count: atomic<u32>;
var<workgroup> wg_first: atomic<u32>;
// Workgroup memory of the scans (1,024 B): subgroup totals, or the whole scan without subgroups.
var<workgroup> scan_buf: array<u32, 256>;
// trie_tokenizer_compact: whether to skip (long-word regions are still to be encoded).
var<workgroup> wg_skip: u32;

// Test builds (flag POISON_WORKGROUP): every entry point first fills its workgroup memory with
// 0xDEADBEEF, so that a read before the kernel's own initialisation gives garbage on every
// adapter (tests/test_encode_long_words.py checks exact results, and that a removed initialisation
// is caught).
//#if POISON_WORKGROUP
const POISON: u32 = 0xDEADBEEFu;
fn poison_lut(lid: u32) {
    for (var b = lid; b < 256u; b += WG) {
        root_lut[b] = POISON;
        d1_fc[b] = POISON;
        d1_nc[b] = POISON;
        d1_tid[b] = POISON;
    }
    if (lid == 0u) {
        atomicStore(&wg_count, POISON);
        atomicStore(&wg_first, POISON);
    }
    workgroupBarrier();
}
fn poison_scan(rank: u32) {
    for (var b = rank; b < 256u; b += WG) { scan_buf[b] = POISON; }
    if (rank == 0u) { wg_skip = POISON; }
    workgroupBarrier();
}
//#endif

fn text_byte(i: u32) -> u32 { return (text[i >> 2u] >> ((i & 3u) * 8u)) & 0xFFu; }
fn doc_start(i: u32) -> bool { return ((doc_bits[i >> 5u] >> (i & 31u)) & 1u) != 0u; }

// Whether byte i (< n) of the slice starts a word (DESIGN.md §2). Byte 0 of a slice always
// does: slices begin at word starts or, inside a very long word, at a token boundary, where
// greedy matching restarts with the same result.
fn word_start_at(i: u32) -> bool {
//#if WORD_MASK
    return ((word_mask[i >> 5u] >> (i & 31u)) & 1u) != 0u;
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

// One step of the branch-free binary search: keep the upper half when its first byte <= b.
fn bs_step(base: ptr<function, u32>, len: ptr<function, u32>, b: u32) {
    let half = *len >> 1u;
    let eb = edges[2u * (*base + half)];
    *base = select(*base, *base + half, eb <= b);
    *len = *len - half;
}

// Child of a node with children edges[fc .. fc+nc) (sorted by byte) along byte b, or NO_TOKEN.
// Unrolled to 8 steps (nc <= 256), so it adds no loop iterations (lavapipe's cap).
fn find_child(fc: u32, nc: u32, b: u32) -> u32 {
    if (nc <= 1u) {  // most deep nodes: one child, no search
        return select(NO_TOKEN, edges[2u * fc + 1u], nc == 1u && edges[2u * fc] == b);
    }
    var base = fc;
    var len = nc;
    bs_step(&base, &len, b); bs_step(&base, &len, b); bs_step(&base, &len, b);
    bs_step(&base, &len, b); bs_step(&base, &len, b); bs_step(&base, &len, b);
    bs_step(&base, &len, b); bs_step(&base, &len, b);
    return select(NO_TOKEN, edges[2u * base + 1u], edges[2u * base] == b);
}

// Pass 1. Thread c owns bytes [c*CHUNK, (c+1)*CHUNK): it starts at the first word start in
// its chunk and walks greedily, word after word, until the next token would start at a word
// start at or past its chunk's end, so it finishes the word that crosses the end and every
// word is walked by exactly one thread. A walk step either extends the current match by one
// byte or emits the longest token seen; after `budget` steps the thread saves where its next
// token starts in `state`, counts itself in info[1], and a later dispatch (resume = 1) goes on.
@compute @workgroup_size(WG)
fn trie_tokenizer_chunked(@builtin(workgroup_id) wid: vec3<u32>,
                          @builtin(num_workgroups) nwg: vec3<u32>,
                          @builtin(local_invocation_index) lid: u32) {
//#if POISON_WORKGROUP
    poison_lut(lid);
//#endif
    // Root LUT and depth-1 cache (seed §4); the root's children are edges 0..255, one per byte.
    let root_fc = nodes[0];
    for (var b = lid; b < 256u; b += WG) {
        let d1 = edges[2u * (root_fc + b) + 1u];
        root_lut[b] = d1;
        d1_fc[b] = nodes[3u * d1];
        d1_nc[b] = nodes[3u * d1 + 1u];
        d1_tid[b] = nodes[3u * d1 + 2u];
    }
    if (lid == 0u) {
        atomicStore(&wg_count, 0u);
        atomicStore(&wg_first, NO_TOKEN);
    }
    workgroupBarrier();

    let n = params.n;
    let block = params.block_base + linear_workgroup(wid, nwg);
    let c = block * WG + lid;
    let cs = c * CHUNK;
    let ce = min(cs + CHUNK, n);
    let block_end = (block + 1u) * WG * CHUNK;
    var walking = false;
    var p = 0u;
    if (cs < n) {
        if (params.resume == 0u) {
            state[c] = 0u;
            for (var i = cs; i < ce; i++) {
                if (word_start_at(i)) { p = i; walking = true; break; }
            }
            state[params.num_blocks * WG + c] = select(NO_TOKEN, p, walking);
            if (walking) { atomicMin(&wg_first, p); }
        } else {
            let st = state[c];
            walking = st != 0u;
            p = st - 1u;
        }
    }
    // Current match: token start p, next byte to try q, trie node (fc, nc), best (len, id).
    var q = p + 1u;
    var fc = 0u;
    var nc = 0u;
    var best_len = 1u;
    var best_tid = NO_TOKEN;
    if (walking) {
        let b0 = text_byte(p);
        fc = d1_fc[b0];
        nc = d1_nc[b0];
        best_tid = d1_tid[b0];
    }
    var own_count = 0u;
    let budget = params.budget;
    for (var it = 0u; walking; it++) {
        if (it >= budget) {
            state[c] = p + 1u;
            atomicAdd(&info[INFO_UNFINISHED], 1u);
            atomicMax(&info[INFO_CONT_LO], 0xFFFFFFFFu - block);
            atomicMax(&info[INFO_CONT_HI], block + 1u);
            break;
        }
        var child = NO_TOKEN;
        if (q < n && !word_start_at(q)) { child = find_child(fc, nc, text_byte(q)); }
        if (child != NO_TOKEN) {
            scratch[q] = NO_TOKEN;  // overwritten later if a token starts here
            q += 1u;
            let t = nodes[3u * child + 2u];
            if (t != NO_TOKEN) { best_len = q - p; best_tid = t; }
            fc = nodes[3u * child];
            nc = nodes[3u * child + 1u];
        } else {
            scratch[p] = best_tid;
            if (p < block_end) { own_count += 1u; } else { atomicAdd(&counts[p / (WG * CHUNK)], 1u); }
            p += best_len;
            if (p >= n || (p >= ce && word_start_at(p))) {
                if (params.resume != 0u) { state[c] = 0u; }
                walking = false;
            } else if (p >= ce && p - ce >= params.long_from) {
                // A long word: the rest of it, from the token start p, goes to the parallel
                // path (long_word_ends finds its end).
                let r = atomicAdd(&info[INFO_REGIONS], 1u);
                if (r < params.reg_cap) {
                    atomicStore(&info[INFO_HEAD + 2u * r], p);
                } else {
                    atomicAdd(&info[INFO_LONG_ERRORS], 1u);  // cannot happen: reg_cap > n / long_from
                }
                if (params.resume != 0u) { state[c] = 0u; }
                walking = false;
            } else {
                let b = text_byte(p);
                fc = d1_fc[b];
                nc = d1_nc[b];
                best_len = 1u;
                best_tid = d1_tid[b];
                q = p + 1u;
            }
        }
    }
    atomicAdd(&wg_count, own_count);
    workgroupBarrier();
    if (lid == 0u && block * WG * CHUNK < n) {
        atomicAdd(&counts[block], atomicLoad(&wg_count));
        if (params.resume == 0u) { state[2u * params.num_blocks * WG + block] = atomicLoad(&wg_first); }
    }
}

// Long words, step 1 (one thread per region, after every walk of the slice): the region's end
// is the first word start after its first byte p: in p's block, the first chunk at or after p's
// chunk with a word start (after p: no word starts between the word's start and p, which are at
// least long_from >= CHUNK bytes apart); else the first later block with one; else the slice end.
// First word starts increase with the chunk / block index, so the first one of a group is
// the group's minimum: the later blocks are read 8 at a time (independent loads). At most WG +
// num_blocks / 8 loop iterations.
@compute @workgroup_size(WG)
fn long_word_ends(@builtin(workgroup_id) wid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let r = linear_workgroup(wid, nwg) * WG + lid;
    if (r >= min(atomicLoad(&info[INFO_REGIONS]), params.reg_cap)) { return; }
    let p = atomicLoad(&info[INFO_HEAD + 2u * r]);
    let nb = params.num_blocks;
    let nchunks = nb * WG;
    let c0 = p / CHUNK;
    let blk = c0 / WG;
    var end = NO_TOKEN;
    for (var c = c0; c < min((blk + 1u) * WG, nchunks); c++) {
        let f = state[nchunks + c];
        if (f != NO_TOKEN && f > p) { end = f; break; }
    }
    let bf = 2u * nchunks;  // per-block first word starts
    for (var b = blk + 1u; end == NO_TOKEN && b < nb; b += 8u) {
        var m = NO_TOKEN;
        for (var k = 0u; k < 8u; k++) {
            if (b + k < nb) { m = min(m, state[bf + b + k]); }
        }
        end = m;
    }
    atomicStore(&info[INFO_HEAD + 1u + 2u * r], min(end, params.n));
}

// The region (row of ltab) holding tile t: the last row whose first tile is <= t.
fn region_of_tile(t: u32) -> u32 {
    var lo = 0u;
    var hi = lparams.nreg;
    for (var k = 0u; k < 32u && hi - lo > 1u; k++) {
        let mid = (lo + hi) >> 1u;
        if (ltab[4u * mid + 2u] <= t) { lo = mid; } else { hi = mid; }
    }
    return lo;
}

// Long-word tile t: its region, the region's end, the tile's first byte, its end (the region's
// end cuts the last tile short) and first entry (base).
struct LongTile {
    r: u32,
    first: u32,   // the region's first tile
    end: u32,
    cs: u32,
    ce: u32,
    base: u32,
}
fn long_tile(t: u32) -> LongTile {
    let r = region_of_tile(t);
    let first = ltab[4u * r + 2u];
    let end = ltab[4u * r + 1u];
    let cs = ltab[4u * r] + (t - first) * LC;
    return LongTile(r, first, end, cs, min(cs + LC, end), t * LC);
}

fn global_id(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return linear_workgroup(wid, nwg) * WG + lid;
}

// Long words, step 2 (one thread per tile of LC bytes): periods. The longest match at byte i
// depends only on the LDW bytes from i (no token is longer; i + LDW <= end), so when they equal
// the LDW bytes from i - P (P = 1..4, i - P in the tile) the match is the one at i - P:
// llen = COPY | P (long_exits copies it), else 0 (long_match walks the trie). Runs of one byte
// and short periodic patterns (ab, 2- and 4-byte characters) then walk only a few bytes per
// tile. A backward scan counts, per P, the equal pairs (text[q], text[q - P]) from each byte on.
// At most LC + LDW loop iterations.
@compute @workgroup_size(WG)
fn long_periods(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let t = global_id(wid, nwg, lid);
    if (t >= lparams.ntiles) { return; }
    let tile = long_tile(t);
    var run = vec4<u32>(0u);
    for (var q = min(tile.ce + LDW, tile.end); q > tile.cs; q--) {
        let i = q - 1u;
        let b = text_byte(i);
        var eq = vec4<bool>(false);
        if (i >= tile.cs + 1u) { eq.x = b == text_byte(i - 1u); }
        if (i >= tile.cs + 2u) { eq.y = b == text_byte(i - 2u); }
        if (i >= tile.cs + 3u) { eq.z = b == text_byte(i - 3u); }
        if (i >= tile.cs + 4u) { eq.w = b == text_byte(i - 4u); }
        run = select(vec4<u32>(0u), min(run + 1u, vec4<u32>(LDW)), eq);
        if (i < tile.ce) {
            var flag = 0u;
            if (i + LDW <= tile.end) {
                if (run.w >= LDW) { flag = COPY | 4u; }
                if (run.z >= LDW) { flag = COPY | 3u; }
                if (run.y >= LDW) { flag = COPY | 2u; }
                if (run.x >= LDW) { flag = COPY | 1u; }
            }
            llen[tile.base + (i - tile.cs)] = flag;
        }
    }
}

// Long words, step 3 (one thread per byte of the regions, not copied by step 2): the longest
// token that is a prefix of the region's rest at this byte (a trie walk of at most the longest
// token's length); its id goes to scratch, its length to llen.
@compute @workgroup_size(WG)
fn long_match(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let li = global_id(wid, nwg, lid);
    if (li >= lparams.ntiles * LC) { return; }
    let r = region_of_tile(li / LC);
    let end = ltab[4u * r + 1u];
    let pos = ltab[4u * r] + (li - ltab[4u * r + 2u] * LC);
    if (pos >= end || llen[li] != 0u) { return; }
    let b0 = text_byte(pos);
    let d1 = edges[2u * (nodes[0] + b0) + 1u];
    var fc = nodes[3u * d1];
    var nc = nodes[3u * d1 + 1u];
    var best_tid = nodes[3u * d1 + 2u];
    var best_len = 1u;
    for (var q = pos + 1u; q < end; q++) {
        let child = find_child(fc, nc, text_byte(q));
        if (child == NO_TOKEN) { break; }
        let t = nodes[3u * child + 2u];
        if (t != NO_TOKEN) { best_len = q + 1u - pos; best_tid = t; }
        fc = nodes[3u * child];
        nc = nodes[3u * child + 1u];
    }
    scratch[pos] = best_tid;
    llen[li] = best_len;
}

// Long words, step 4 (one thread per tile of LC bytes): the copied matches of step 2, forwards;
// then for every byte of the tile, backwards, the first chain position at or past the tile's
// end (its exit); then the window nodes (the first LDW bytes: every exit of the previous tile
// lands there, as no token is longer than LDW) point to the node of their exit, and the
// region's first byte is marked. At most 2 LC + LDW loop iterations.
@compute @workgroup_size(WG)
fn long_exits(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let t = global_id(wid, nwg, lid);
    if (t >= lparams.ntiles) { return; }
    let tile = long_tile(t);
    let len = tile.ce - tile.cs;
    for (var o = 0u; o < len; o++) {
        let v = llen[tile.base + o];
        if (v >= COPY) {
            let src = o - (v & 7u);
            llen[tile.base + o] = llen[tile.base + src];
            scratch[tile.cs + o] = scratch[tile.cs + src];
        }
    }
    for (var k = len; k > 0u; k--) {
        let nx = k - 1u + llen[tile.base + k - 1u];  // offset of the next token
        var ex = tile.cs + nx;
        if (nx < len) { ex = lexit[tile.base + nx]; }
        lexit[tile.base + k - 1u] = ex;
    }
    for (var o = 0u; o < LDW; o++) {
        var ptr = TERM;
        if (o < len) {
            let ex = lexit[tile.base + o];
            if (ex < tile.end) { ptr = (t + 1u) * LDW + (ex - (tile.cs + LC)); }
        }
        lptr0[t * LDW + o] = ptr;
        atomicStore(&lmark[t * LDW + o], select(0u, 1u, t == tile.first && o == 0u));
    }
}

// Long words, step 5 (one thread per node, ceil(log2(tiles of the longest region))
// dispatches, lptr0/lptr1 swapped each time): after round k, every node within 2^(k+1) - 1
// exits of the region's first byte is marked (a node marked in the same round only marks
// further nodes of the same chain, so the unordered stores are harmless).
@compute @workgroup_size(WG)
fn long_jump(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let j = global_id(wid, nwg, lid);
    if (j >= lparams.nnodes) { return; }
    let nx = lptr0[j];
    if (nx == TERM) {
        lptr1[j] = TERM;
        return;
    }
    if (atomicLoad(&lmark[j]) != 0u) { atomicStore(&lmark[nx], 1u); }
    lptr1[j] = lptr0[nx];
}

// Long words, step 6 (one thread per tile): from the tile's marked entry, follow the chain
// through the tile: token ids stay in scratch at token starts, NO_TOKEN elsewhere; the tokens
// are added to their blocks' counts. At most LDW + LC loop iterations.
@compute @workgroup_size(WG)
fn long_emit(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let t = global_id(wid, nwg, lid);
    if (t >= lparams.ntiles) { return; }
    let tile = long_tile(t);
    var e = NO_TOKEN;
    for (var o = 0u; o < LDW && tile.cs + o < tile.ce; o++) {
        if (atomicLoad(&lmark[t * LDW + o]) != 0u) {
            e = tile.cs + o;
            break;
        }
    }
    if (e == NO_TOKEN) {  // cannot happen: every tile of a region has one entry on the chain
        atomicAdd(&info[INFO_LONG_ERRORS], 1u);
        return;
    }
    var blk = tile.cs / (WG * CHUNK);
    var cnt = 0u;
    for (var i = tile.cs; i < tile.ce; i++) {
        if (i == e) {
            e += llen[tile.base + (i - tile.cs)];
            let b = i / (WG * CHUNK);
            if (b != blk) {
                atomicAdd(&counts[blk], cnt);
                cnt = 0u;
                blk = b;
            }
            cnt += 1u;
        } else {
            scratch[i] = NO_TOKEN;
        }
    }
    atomicAdd(&counts[blk], cnt);
}

// Exclusive scan of one u32 per thread over the workgroup, in `rank` order (rank is the
// thread's position: subgroup_id * subgroup_size + subgroup_invocation_id with subgroups,
// local_invocation_index without). Returns (exclusive prefix, workgroup total). Starts with a
// barrier, so scan_buf may be reused from one call to the next.
//#if SUBGROUPS
fn wg_scan(x: u32, sg_id: u32, lane: u32, nsg: u32) -> vec2<u32> {
    let excl = subgroupExclusiveAdd(x);
    let tot = subgroupAdd(x);
    workgroupBarrier();
    if (lane == 0u) { scan_buf[sg_id] = tot; }
    workgroupBarrier();
    var before = 0u;
    var all = 0u;
    for (var j = 0u; j < nsg; j++) {
        let t = scan_buf[j];
        before += select(0u, t, j < sg_id);
        all += t;
    }
    return vec2<u32>(before + excl, all);
}
//#else
fn wg_scan(x: u32, lid: u32) -> vec2<u32> {
    workgroupBarrier();
    scan_buf[lid] = x;
    workgroupBarrier();
    for (var off = 1u; off < WG; off <<= 1u) {
        var t = 0u;
        if (lid >= off) { t = scan_buf[lid - off]; }
        workgroupBarrier();
        scan_buf[lid] += t;
        workgroupBarrier();
    }
    return vec2<u32>(scan_buf[lid] - x, scan_buf[WG - 1u]);
}
//#endif

// Pass 2 (one workgroup). Block counts → exclusive block offsets; info[0] = tokens in slice.
@compute @workgroup_size(WG)
//#if SUBGROUPS
fn trie_prefix_sum(@builtin(subgroup_id) sg_id: u32,
                   @builtin(subgroup_invocation_id) lane: u32,
                   @builtin(subgroup_size) sg_size: u32,
                   @builtin(num_subgroups) nsg: u32) {
    let rank = sg_id * sg_size + lane;
//#else
fn trie_prefix_sum(@builtin(local_invocation_index) lid: u32) {
    let rank = lid;
//#endif
//#if POISON_WORKGROUP
    poison_scan(rank);
//#endif
    let nb = params.num_blocks;
    let per = (nb + WG - 1u) / WG;
    let lo = min(rank * per, nb);
    let hi = min(lo + per, nb);
    var s = 0u;
    for (var i = lo; i < hi; i++) { s += atomicLoad(&counts[i]); }
//#if SUBGROUPS
    let sc = wg_scan(s, sg_id, lane, nsg);
//#else
    let sc = wg_scan(s, lid);
//#endif
    var run = sc.x;
    for (var i = lo; i < hi; i++) {
        block_off[i] = run;
        run += atomicLoad(&counts[i]);
    }
    if (rank == 0u) { atomicStore(&info[INFO_TOKENS], sc.y); }
}

// Index of the last document starting at or before byte pos (pos is a document start).
fn doc_index(pos: u32) -> u32 {
    var lo = 0u;
    var hi = params.num_docs;  // first index with doc_starts[i] > pos lies in [lo, hi]
    for (var k = 0u; k < 32u && lo < hi; k++) {
        let mid = (lo + hi) >> 1u;
        if (doc_starts[mid] <= pos) { lo = mid + 1u; } else { hi = mid; }
    }
    return lo - 1u;
}

fn put_token(g: u32, v: u32) {
    if (OUT16) {
        atomicOr(&out[g >> 1u], v << ((g & 1u) * 16u));
    } else {
        atomicStore(&out[g], v);
    }
}

// Pass 3. Workgroup w compacts the token starts of block w in CHUNK/4 rounds; in each round the
// threads read 4 consecutive scratch entries each (WG*4 consecutive bytes in all), rank them by
// a workgroup scan and write them to consecutive output slots (coalesced).
@compute @workgroup_size(WG)
//#if SUBGROUPS
fn trie_tokenizer_compact(@builtin(workgroup_id) wid: vec3<u32>,
                          @builtin(num_workgroups) nwg: vec3<u32>,
                          @builtin(subgroup_id) sg_id: u32,
                          @builtin(subgroup_invocation_id) lane: u32,
                          @builtin(subgroup_size) sg_size: u32,
                          @builtin(num_subgroups) nsg: u32) {
    let rank = sg_id * sg_size + lane;
//#else
fn trie_tokenizer_compact(@builtin(workgroup_id) wid: vec3<u32>,
                          @builtin(num_workgroups) nwg: vec3<u32>,
                          @builtin(local_invocation_index) lid: u32) {
    let rank = lid;
//#endif
//#if POISON_WORKGROUP
    poison_scan(rank);
//#endif
    // With long-word regions pending, the compaction runs after them (resume = 2), not now.
//#if SUBGROUPS
    if (rank == 0u) {
//#else
    if (lid == 0u) {
//#endif
        wg_skip = select(0u, 1u, atomicLoad(&info[INFO_REGIONS]) != 0u && params.resume != 2u);
    }
    if (workgroupUniformLoad(&wg_skip) != 0u) { return; }
    let block = linear_workgroup(wid, nwg);
    if (block >= params.num_blocks) { return; }
    let n = params.n;
    var run = block_off[block];
    let base = block * WG * CHUNK;
    for (var r = 0u; r < CHUNK / 4u; r++) {
        let p0 = base + (r * WG + rank) * 4u;
        var v = vec4<u32>(NO_TOKEN);
        for (var j = 0u; j < 4u; j++) {
            if (p0 + j < n) { v[j] = scratch[p0 + j]; }
        }
        let cnt = u32(v.x != NO_TOKEN) + u32(v.y != NO_TOKEN) + u32(v.z != NO_TOKEN)
                + u32(v.w != NO_TOKEN);
//#if SUBGROUPS
        let sc = wg_scan(cnt, sg_id, lane, nsg);
//#else
        let sc = wg_scan(cnt, lid);
//#endif
        var g = run + sc.x;
        for (var j = 0u; j < 4u; j++) {
            if (v[j] != NO_TOKEN) {
                put_token(g, v[j]);
                if (doc_start(p0 + j)) { doc_tok[doc_index(p0 + j)] = g + 1u; }
                g += 1u;
            }
        }
        run += sc.y;
    }
}
