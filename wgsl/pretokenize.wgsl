// pretokenize.wgsl — GPU pre-tokenization (DESIGN.md §2, seed §1 `bpe_word_boundary`).
//
// Bindings (group 0):
//   0 text      : storage, read        array<u32>  input bytes packed 4 per u32, little-endian;
//                                                  length ceil(n / 4) (+ padding)
//   1 doc_bits  : storage, read        array<u32>  bit i set iff byte i starts a document;
//                                                  length ceil((n + 1) / 32)
//   2 symbols   : storage, read_write  array<u32>  output: byte | WORD_START_BIT, length n
//   3 params    : uniform              Params      n = number of bytes

struct Params {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> text: array<u32>;
@group(0) @binding(1) var<storage, read> doc_bits: array<u32>;
@group(0) @binding(2) var<storage, read_write> symbols: array<u32>;
@group(0) @binding(3) var<uniform> params: Params;

override WG: u32 = 256u;

fn text_byte(i: u32) -> u32 { return (text[i >> 2u] >> ((i & 3u) * 8u)) & 0xFFu; }
fn doc_start(i: u32) -> bool { return ((doc_bits[i >> 5u] >> (i & 31u)) & 1u) != 0u; }

// One thread per 4 bytes (one input word); reads a one-byte halo on each side.
@compute @workgroup_size(WG)
fn bpe_word_boundary(@builtin(workgroup_id) wid: vec3<u32>,
                     @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let w = linear_workgroup(wid, nwg) * WG + lid;
    let n = params.n;
    let base = w * 4u;
    if (base >= n) { return; }
    for (var k = 0u; k < 4u; k++) {
        let i = base + k;
        if (i >= n) { break; }
        let cur = text_byte(i);
        let has_prev = i > 0u && !doc_start(i);
        let has_next = i + 1u < n && !doc_start(i + 1u);
        var prev = 0u;
        if (has_prev) { prev = text_byte(i - 1u); }
        var next = 0u;
        if (has_next) { next = text_byte(i + 1u); }
        let ws = is_word_start(prev, cur, next, has_prev, has_next);
        symbols[i] = cur | select(0u, WORD_START_BIT, ws);
    }
}
