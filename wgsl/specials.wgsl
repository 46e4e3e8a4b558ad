// specials.wgsl — a special token before and/or after every document, put in by the GPU while
// the ids of a batch are read back (the token ids are read back into the output arrays once;
// llm.c's shards want <|endoftext|> before each document, Megatron's --append-eod after it).
//
// In:  `src`, the compacted ids of a slice (encode.wgsl's `out`: document d's ids are
//      src[off_d .. off_{d+1}), off non-decreasing, empty documents included);
//      `seg[d] = off_d + d × K` for d = 0..ndocs, K = HAS_BOS + HAS_EOS ≥ 1 (strictly increasing).
// Out: `dst` = [bos] ids of doc 0 [eos] [bos] ids of doc 1 [eos] ...: position q lies in the
//      segment of the last d with seg[d] <= q (a binary search, ≤ 32 steps); r = q − seg[d];
//      bos at r = 0, eos at q = seg[d + 1] − 1, else the id src[q − d × K − HAS_BOS].
// One thread per u32 word of `dst` (OUT16: two u16 ids per word, little-endian, as `out`), so
// no two threads write one word. Work per thread is bounded (two searches, DESIGN.md §8).
//
// Bindings (group 0):
//   0 src    : storage, read        array<u32>  ids (u32 each, or OUT16: two u16 per u32)
//   1 dst    : storage, read_write  array<u32>  same layout, sp.n_out ids
//   2 seg    : storage, read        array<u32>  ndocs + 1 segment starts (seg[ndocs] = n_out)
//   3 sp     : uniform              SpParams
struct SpParams {
    n_out: u32,     // ids in dst = ids in src + ndocs × K
    ndocs: u32,     // documents (≥ 1)
    bos: u32,       // the id put before every document, or NO_ID
    eos: u32,       // the id put after every document, or NO_ID
}

@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<storage, read> seg: array<u32>;
@group(0) @binding(3) var<uniform> sp: SpParams;

override WG: u32 = 256u;
override OUT16: bool = false;
const NO_ID: u32 = 0xFFFFFFFFu;

fn src_id(i: u32) -> u32 {
    if (OUT16) {
        return (src[i >> 1u] >> ((i & 1u) * 16u)) & 0xFFFFu;
    }
    return src[i];
}

fn id_at(q: u32) -> u32 {
    var lo = 0u;            // seg[lo] <= q < seg[hi]
    var hi = sp.ndocs;
    for (var step = 0u; step < 32u && hi - lo > 1u; step++) {
        let mid = (lo + hi) >> 1u;
        if (seg[mid] <= q) { lo = mid; } else { hi = mid; }
    }
    let has_bos = u32(sp.bos != NO_ID);
    let k = has_bos + u32(sp.eos != NO_ID);
    if (has_bos == 1u && q == seg[lo]) { return sp.bos; }
    if (sp.eos != NO_ID && q + 1u == seg[lo + 1u]) { return sp.eos; }
    return src_id(q - lo * k - has_bos);
}

@compute @workgroup_size(WG)
fn insert_specials(@builtin(workgroup_id) wid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let w = linear_workgroup(wid, nwg) * WG + lid;
    if (OUT16) {
        let q = 2u * w;
        if (q >= sp.n_out) { return; }
        var v = id_at(q);
        if (q + 1u < sp.n_out) { v |= id_at(q + 1u) << 16u; }
        dst[w] = v;
    } else {
        if (w >= sp.n_out) { return; }
        dst[w] = id_at(w);
    }
}
