// wordcount.wgsl — counting the words of a corpus on the GPU for training (DESIGN.md §2 words,
// §3 "words may be deduplicated with counts first"; the issue's "hash the words into a global
// table").
//
// A batch of whole documents (bytes packed 4 per u32, document starts as a bitmap, as in
// pretokenize.wgsl) is counted into a hash table that lives across batches:
//   wc_starts   one thread per 32 bytes: the word-start bitmap of the batch (the §2 rule of
//               common.wgsl; bit n set as an end sentinel) and the number of words
//               (P.from_mask: from a regex family's word starts, `pmask`)
//   wc_insert   one thread per byte; at a word start: its length (next set bit, ≤ MAXW bytes,
//               else the position goes to `longs` for the host), a hash of its bytes, then
//               open addressing: a free slot is claimed with the word's position + 1 (CAS); an
//               occupied slot holds the position of another word of this batch or the offset
//               of a word already in `store` — the two words' bytes are compared, so equal
//               keys mean equal words, never only equal hashes; +1 to the slot's 64-bit count
//   wc_persist  one thread per slot claimed in this batch: the word (length, bytes) is copied
//               to `store` and the slot re-keyed with its store offset | STORED (the batch's
//               text is overwritten by the next batch)
//   wc_compact  one thread per slot: (store offset, count lo, count hi) of every word → out
//   wc_rehash   one thread per `out` entry: into a larger, empty table (all words distinct:
//               first free slot)
// Race freedom: a claimed slot's key is final within a dispatch (a position of this batch or a
// store offset), and the bytes it points at were written before the dispatch began.
// The table: open addressing with triangular (quadratic) probing and a CAS on the key, as in
// Alcantara et al. 2009, "Real-time parallel hashing on the GPU"; the hash is FNV-1a over the
// bytes finished by Murmur3's fmix (common.wgsl).
// Counts are exact 64-bit integers (carry of the low word into the high word).

struct Params {
    n: u32,          // bytes in the batch
    slots: u32,      // table slots (a power of two)
    nout: u32,       // wc_rehash: entries of `out`
    from_mask: u32,  // wc_starts: 1 = the word starts are a regex family's, in `pmask`
}

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> text: array<u32>;
@group(0) @binding(2) var<storage, read> doc_bits: array<u32>;
@group(0) @binding(3) var<storage, read_write> starts: array<u32>;
@group(0) @binding(4) var<storage, read_write> keys: array<atomic<u32>>;
@group(0) @binding(5) var<storage, read_write> counts: array<atomic<u32>>;
@group(0) @binding(6) var<storage, read_write> store: array<u32>;
@group(0) @binding(7) var<storage, read_write> state: array<atomic<u32>>;
@group(0) @binding(8) var<storage, read_write> longs: array<u32>;
@group(0) @binding(9) var<storage, read_write> out: array<u32>;
// wc_starts with P.from_mask: the word starts wgsl/pretokenize_unicode.wgsl computed over the
// same text (bit i of word t set iff byte 32t + i starts a match of the family's regex)
@group(0) @binding(10) var<storage, read> pmask: array<u32>;

const WG: u32 = 256u;
const EMPTY: u32 = 0u;            // (a cleared buffer is an empty table)
const STORED: u32 = 0x80000000u;  // key = store offset | STORED, or text position + 1
const MAXW: u32 = 256u;           // longest word counted here (bytes); longer → longs
override MAX_PROBE: u32 = 128u;  // (tests lower it to force the CPU fallback)
const NONE: u32 = 0xFFFFFFFFu;

// state words
const S_TOP: u32 = 0u;       // store words in use
const S_OCC: u32 = 1u;       // occupied slots
const S_NLONG: u32 = 2u;     // entries of longs (this batch)
const S_OVERFLOW: u32 = 3u;  // 1: a probe sequence ran out (host: larger table, recount)
const S_NWORDS: u32 = 4u;    // words of this batch
const S_NOUT: u32 = 5u;      // entries written by wc_compact
const S_NEED: u32 = 6u;      // store words the slots claimed in this batch will take

var<workgroup> wg_count: atomic<u32>;

fn text_byte(i: u32) -> u32 { return (text[i >> 2u] >> ((i & 3u) * 8u)) & 0xFFu; }
fn doc_start(i: u32) -> bool { return ((doc_bits[i >> 5u] >> (i & 31u)) & 1u) != 0u; }
fn store_byte(o: u32, j: u32) -> u32 { return (store[o + 1u + (j >> 2u)] >> ((j & 3u) * 8u)) & 0xFFu; }

// ---- wc_starts ---------------------------------------------------------------------------------
@compute @workgroup_size(WG)
fn wc_starts(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    if (lid == 0u) { atomicStore(&wg_count, 0u); }
    workgroupBarrier();
    let t = linear_workgroup(wid, nwg) * WG + lid;
    let n = P.n;
    let base = t * 32u;
    var bits = 0u;
    if (base <= n && P.from_mask == 1u) {
        if (base < n) { bits = pmask[t]; }
        if (base + 32u > n) { bits = (bits & ((1u << (n - base)) - 1u)) | (1u << (n - base)); }
    } else if (base <= n) {
        for (var k = 0u; k < 32u; k++) {
            let i = base + k;
            if (i == n) { bits |= 1u << k; break; }     // end sentinel
            let cur = text_byte(i);
            let has_prev = i > 0u && !doc_start(i);
            let has_next = i + 1u < n && !doc_start(i + 1u);
            var prev = 0u;
            if (has_prev) { prev = text_byte(i - 1u); }
            var next = 0u;
            if (has_next) { next = text_byte(i + 1u); }
            if (is_word_start(prev, cur, next, has_prev, has_next)) { bits |= 1u << k; }
        }
    }
    if (base <= n) {
        starts[t] = bits;
        var words = countOneBits(bits);
        if (base + 32u > n) { words -= 1u; }           // the sentinel is not a word
        if (words != 0u) { atomicAdd(&wg_count, words); }
    }
    workgroupBarrier();
    if (lid == 0u) {
        let c = atomicLoad(&wg_count);
        if (c != 0u) { atomicAdd(&state[S_NWORDS], c); }
    }
}

fn is_start(i: u32) -> bool { return ((starts[i >> 5u] >> (i & 31u)) & 1u) != 0u; }

// The next word start after i (≤ n: bit n is set), or NONE when it is more than MAXW bytes on.
fn next_start(i: u32) -> u32 {
    let j0 = i + 1u;
    var w = j0 >> 5u;
    var bits = starts[w] & (0xFFFFFFFFu << (j0 & 31u));
    for (var k = 0u; k < MAXW / 32u + 1u; k++) {
        if (bits != 0u) {
            let j = (w << 5u) + firstTrailingBit(bits);
            if (j - i > MAXW) { return NONE; }
            return j;
        }
        w += 1u;
        bits = starts[w];
    }
    return NONE;
}

// FNV-1a over the bytes, then the Murmur3 finaliser (fmix, common.wgsl); the same for text
// and store words.

fn hash_text(p: u32, len: u32) -> u32 {
    var h = 0x811c9dc5u ^ len;
    for (var j = 0u; j < len; j++) { h = (h ^ text_byte(p + j)) * 0x01000193u; }
    return fmix(h);
}

fn hash_store(o: u32) -> u32 {
    let len = store[o];
    var h = 0x811c9dc5u ^ len;
    for (var j = 0u; j < len; j++) { h = (h ^ store_byte(o, j)) * 0x01000193u; }
    return fmix(h);
}

// Whether the word at text position p (len bytes) equals the word a table key points at.
fn same_word(p: u32, len: u32, key: u32) -> bool {
    if ((key & STORED) != 0u) {
        let o = key & ~STORED;
        if (store[o] != len) { return false; }
        for (var j = 0u; j < len; j++) {
            if (store_byte(o, j) != text_byte(p + j)) { return false; }
        }
        return true;
    }
    let q = key - 1u;
    if (q == p) { return true; }
    let e = next_start(q);
    if (e == NONE || e - q != len) { return false; }
    for (var j = 0u; j < len; j++) {
        if (text_byte(q + j) != text_byte(p + j)) { return false; }
    }
    return true;
}

fn count_add(slot: u32, lo: u32, hi: u32) {
    let old = atomicAdd(&counts[2u * slot], lo);
    let h = hi + select(0u, 1u, old + lo < old);
    if (h != 0u) { atomicAdd(&counts[2u * slot + 1u], h); }
}

// ---- wc_insert ---------------------------------------------------------------------------------
@compute @workgroup_size(WG)
fn wc_insert(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let p = linear_workgroup(wid, nwg) * WG + lid;
    if (p >= P.n || !is_start(p)) { return; }
    let e = next_start(p);
    if (e == NONE) {
        longs[atomicAdd(&state[S_NLONG], 1u)] = p;
        return;
    }
    let len = e - p;
    let mask = P.slots - 1u;
    var slot = hash_text(p, len) & mask;
    var probe = 1u;
    for (var it = 0u; it < 2u * MAX_PROBE; it++) {
        var cur = atomicLoad(&keys[slot]);
        if (cur == EMPTY) {
            let r = atomicCompareExchangeWeak(&keys[slot], EMPTY, p + 1u);
            if (r.exchanged) {
                atomicAdd(&state[S_OCC], 1u);
                atomicAdd(&state[S_NEED], 1u + (len + 3u) / 4u);
                count_add(slot, 1u, 0u);
                return;
            }
            cur = r.old_value;
            if (cur == EMPTY) { continue; }   // spurious weak-CAS failure: this slot again
        }
        if (same_word(p, len, cur)) {
            count_add(slot, 1u, 0u);
            return;
        }
        if (probe > MAX_PROBE) { break; }
        slot = (slot + probe) & mask;
        probe += 1u;
    }
    atomicStore(&state[S_OVERFLOW], 1u);
}

// ---- wc_persist ----------------------------------------------------------------------------------
@compute @workgroup_size(WG)
fn wc_persist(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let slot = linear_workgroup(wid, nwg) * WG + lid;
    if (slot >= P.slots) { return; }
    let key = atomicLoad(&keys[slot]);
    if (key == EMPTY || (key & STORED) != 0u) { return; }
    let q = key - 1u;
    let len = next_start(q) - q;               // ≤ MAXW: only such words are claimed
    let size = 1u + (len + 3u) / 4u;
    let o = atomicAdd(&state[S_TOP], size);    // the host sized `store` from S_NEED
    store[o] = len;
    for (var k = 0u; k < size - 1u; k++) {
        var v = 0u;
        for (var b = 0u; b < 4u; b++) {
            let j = 4u * k + b;
            if (j < len) { v |= text_byte(q + j) << (8u * b); }
        }
        store[o + 1u + k] = v;
    }
    atomicStore(&keys[slot], o | STORED);
}

// ---- wc_compact / wc_rehash ------------------------------------------------------------------------
@compute @workgroup_size(WG)
fn wc_compact(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let slot = linear_workgroup(wid, nwg) * WG + lid;
    if (slot >= P.slots) { return; }
    let key = atomicLoad(&keys[slot]);
    if (key == EMPTY) { return; }
    let i = atomicAdd(&state[S_NOUT], 1u);
    out[3u * i] = key & ~STORED;
    out[3u * i + 1u] = atomicLoad(&counts[2u * slot]);
    out[3u * i + 2u] = atomicLoad(&counts[2u * slot + 1u]);
}

@compute @workgroup_size(WG)
fn wc_rehash(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = linear_workgroup(wid, nwg) * WG + lid;
    if (i >= P.nout) { return; }
    let o = out[3u * i];
    let mask = P.slots - 1u;
    var slot = hash_store(o) & mask;
    var probe = 1u;
    for (var it = 0u; it < 2u * MAX_PROBE; it++) {
        let r = atomicCompareExchangeWeak(&keys[slot], EMPTY, o | STORED);
        if (r.exchanged) {
            atomicAdd(&state[S_OCC], 1u);
            atomicStore(&counts[2u * slot], out[3u * i + 1u]);
            atomicStore(&counts[2u * slot + 1u], out[3u * i + 2u]);
            return;
        }
        if (r.old_value == EMPTY) { continue; }
        if (probe > MAX_PROBE) { break; }
        slot = (slot + probe) & mask;
        probe += 1u;
    }
    atomicStore(&state[S_OVERFLOW], 1u);
}
