// common.wgsl — helpers shared by every torch_gpubpe shader (prepended to each file).
// Byte classes and the word-start rule of DESIGN.md §2; linear ids over 2-D grids; the
// entry-point parameter of the kernels with a subgroup path.

// "No token" in the encoder's tables and buffers (torch_gpubpe.core.trie.NO_TOKEN).
const NO_TOKEN: u32 = 0xFFFFFFFFu;

// The encoder's `info` counters (binding 7 of encode.wgsl and encode_bpe.wgsl), read back by
// the host (torch_gpubpe.encoding.layout's INFO_* names the same slots). [0, INFO_HEAD) is
// cleared by the host; from INFO_HEAD on, (first byte, end byte) of each long-word region.
const INFO_TOKENS: u32 = 0u;         // tokens in the slice (trie_prefix_sum)
const INFO_UNFINISHED: u32 = 1u;     // chunks whose walk ran out of budget
const INFO_CONT_LO: u32 = 2u;        // 0xFFFFFFFF - the lowest block of such a chunk
const INFO_CONT_HI: u32 = 3u;        // 1 + the highest block of such a chunk
const INFO_REGIONS: u32 = 4u;        // long-word regions found
const INFO_LONG_ERRORS: u32 = 5u;    // errors of the long-word path (must stay 0)
const INFO_BAD_TOKENS: u32 = 6u;     // merge-order mode: BAD_TOKENs written
const INFO_HEAD: u32 = 8u;

const WORD_START_BIT: u32 = 0x10000u;   // carried on a symbol (seed §1)
const SYMBOL_MASK: u32 = 0xFFFFu;       // low bits of a packed symbol (byte or id < 2^16)

const CLS_LETTER: u32 = 0u;
const CLS_DIGIT: u32 = 1u;
const CLS_SPACE: u32 = 2u;
const CLS_PUNCT: u32 = 3u;
const CLS_NEWLINE: u32 = 4u;

// DESIGN.md §2 byte class; the (b - base) <= range trick is the seed's.
fn byte_class(b: u32) -> u32 {
    if (b == 0x0Au || b == 0x0Du) { return CLS_NEWLINE; }
    if (b == 0x20u || b == 0x09u || b == 0x0Bu || b == 0x0Cu) { return CLS_SPACE; }
    if (b - 0x30u <= 9u) { return CLS_DIGIT; }
    if (b >= 0x80u || (b | 0x20u) - 0x61u <= 25u) { return CLS_LETTER; }
    return CLS_PUNCT;
}

fn is_wordlike(c: u32) -> bool { return c != CLS_SPACE && c != CLS_NEWLINE; }

// Whether `cur` starts a word (DESIGN.md §2). `has_prev`: a byte `prev` of the same document
// precedes it; `has_next`: a byte `next` of the same document follows it.
fn is_word_start(prev: u32, cur: u32, next: u32, has_prev: bool, has_next: bool) -> bool {
    if (!has_prev) { return true; }
    let c = byte_class(cur);
    let p = byte_class(prev);
    if (c != p && !(prev == 0x20u && is_wordlike(c))) { return true; }
    return cur == 0x20u && p == CLS_SPACE && has_next && is_wordlike(byte_class(next));
}

// Linear workgroup id of a 2-D grid (dispatches past 65,535 workgroups).
fn linear_workgroup(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// Murmur3 finaliser (seed §2): the hash mix of the training pair table and the word table.
fn fmix(h0: u32) -> u32 {
    var h = h0;
    h ^= h >> 16u;
    h *= 0x85ebca6bu;
    h ^= h >> 13u;
    h *= 0xc2b2ae35u;
    h ^= h >> 16u;
    return h;
}

// An invocation's place in its workgroup, as one entry-point parameter: the kernels with a
// subgroup path declare these builtins here once. The subgroup members exist only in SUBGROUPS
// builds (the builtins fail shader creation on adapters without the feature).
struct Lanes {
    @builtin(local_invocation_index) lid: u32,
//#if SUBGROUPS
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_id) sg_id: u32,
//#endif
}

// The `sg` argument of the subgroup-aware reductions and scans: (lane, subgroup size,
// subgroup id); zeros without subgroups, where their portable paths ignore it.
fn lanes_sg(l: Lanes) -> vec3<u32> {
//#if SUBGROUPS
    return vec3<u32>(l.lane, l.sg_size, l.sg_id);
//#else
    return vec3<u32>(0u);
//#endif
}

// The invocation's element index for a workgroup scan: (subgroup, lane) order with subgroups,
// whatever the hardware's lid ↔ lane mapping, so that a subgroup's lanes hold consecutive
// elements; lid without.
fn lanes_elem(l: Lanes) -> u32 {
//#if SUBGROUPS
    return l.sg_id * l.sg_size + l.lane;
//#else
    return l.lid;
//#endif
}
