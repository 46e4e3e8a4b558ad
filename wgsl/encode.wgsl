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
//   6 state      : storage, read_write  array<u32>          per chunk: 0 = done, else 1 + byte
//                                                          where an out-of-budget walk resumes
//   7 info       : storage, read_write  array<atomic<u32>>  [0] tokens in the slice (written by
//                                                          trie_prefix_sum), [1] chunks that ran
//                                                          out of budget, [2] 0xFFFFFFFF - the
//                                                          lowest block of such a chunk, [3] 1 +
//                                                          the highest; 4 u32, cleared by host
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

struct Params {
    n: u32,            // bytes in the slice (halo excluded)
    resume: u32,       // 0: first walk of the slice; 1: continue the chunks of `state`
    budget: u32,       // walk steps per thread per dispatch (lavapipe caps loops at 65,535)
    num_blocks: u32,   // ceil(n / BLOCK)
    num_docs: u32,     // documents starting in the slice (length of doc_starts)
    block_base: u32,   // resume = 1: the dispatch covers blocks block_base.. only
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

override WG: u32 = 256u;        // threads per workgroup (a multiple of every subgroup size)
override CHUNK: u32 = 32u;      // bytes per thread in trie_tokenizer_chunked; a multiple of 4
override OUT16: bool = false;   // write ids as u16 (vocab of at most 65,536 ids)

const NO_TOKEN: u32 = 0xFFFFFFFFu;

// Workgroup memory of trie_tokenizer_chunked (4,100 B): root LUT and depth-1 node metadata.
var<workgroup> root_lut: array<u32, 256>;
var<workgroup> d1_fc: array<u32, 256>;
var<workgroup> d1_nc: array<u32, 256>;
var<workgroup> d1_tid: array<u32, 256>;
var<workgroup> wg_count: atomic<u32>;
// Workgroup memory of the scans (1,024 B): subgroup totals, or the whole scan without subgroups.
var<workgroup> scan_buf: array<u32, 256>;

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
    // Root LUT and depth-1 cache (seed §4); the root's children are edges 0..255, one per byte.
    let root_fc = nodes[0];
    for (var b = lid; b < 256u; b += WG) {
        let d1 = edges[2u * (root_fc + b) + 1u];
        root_lut[b] = d1;
        d1_fc[b] = nodes[3u * d1];
        d1_nc[b] = nodes[3u * d1 + 1u];
        d1_tid[b] = nodes[3u * d1 + 2u];
    }
    if (lid == 0u) { atomicStore(&wg_count, 0u); }
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
            atomicAdd(&info[1], 1u);
            atomicMax(&info[2], 0xFFFFFFFFu - block);
            atomicMax(&info[3], block + 1u);
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
    }
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
    if (rank == 0u) { atomicStore(&info[0], sc.y); }
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
