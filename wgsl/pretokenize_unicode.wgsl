// pretokenize_unicode.wgsl — word starts of tiktoken-style regex pre-tokenizers (GPT-2 family,
// cl100k_base, Llama 3, Qwen2, Qwen3.5, o200k_base), exactly as `regex.finditer(pat_str)`
// splits, on the GPU.
//
// UTF-8 is decoded here: a byte starts a code point unless a valid sequence starting at one of
// the 3 bytes before it covers it; a byte of no valid sequence is a code point of its own of
// class "other" (as `bytes.decode("utf-8", "surrogateescape")` makes it U+DC80..U+DCFF, which
// regex classes as other). Classes come from the table of torch_gpubpe/core/unicode_gen.py.
//
// Every rule of the patterns reads a few code points around a position, except three that
// read a whole run (derivation: torch_gpubpe/encoding/regex_pretok.py): cl100k's digit groups of 1-3
// counted from the left of a digit run, whether the CR/LF run before a whitespace is absorbed
// by a punctuation match (` ?[^\s\p{L}\p{N}]+[\r\n]*`), and what ends a whitespace run (a
// non-space, CR/LF, or the end of the document). Those are two small automata, one read left
// to right (F: digit count mod 3 × "the last non-CR/LF code point was other", 6 states) and one
// right to left (B: the first code point that is not a non-CR/LF space is CR/LF, L/N/other,
// or the end: 3 states). A chunk's effect on an automaton is a function on its states; the
// functions compose associatively, so three passes scan them exactly at any size:
//   pt_classify   one thread per 32 bytes: code of each byte, the chunk's F and B functions,
//                 a workgroup scan of them (per thread: the exclusive prefix/suffix in its
//                 block), the block's total
//   pt_scan_blocks one workgroup: the state entering every block (F from the left, B from
//                 the right)
//   pt_mark       one thread per 32 bytes: the states at its chunk, then each byte's word
//                 start from the local rules, written as one u32 of the mask
// Every loop is bounded by 32 bytes, 7 states or the number of blocks / WG (lavapipe's cap).
// GPT-2's rules need neither automaton, so GPT-2 takes one pass instead, pt_local: the codes of
// a block and of TILE_HALO bytes on each side into workgroup memory, then pt_mark's rules.
//
// o200k_base has automata of its own (section "o200k" below; derivation in
// torch_gpubpe/encoding/regex_pretok.py): F is the finditer process itself (7 states: which match the
// previous code point is in) × digits mod 3; B is the space-run state above × "the run of
// [\p{Lu}\p{Lt}] from here ends in a non-letter" (the backtracking of [U]*[L]+).
//
// Bindings (group 0; each entry point uses a subset, layouts are "auto"):
//   0 text     : storage, read        array<u32>  bytes packed 4 per u32 (LE); length >=
//                                                 ceil(n / 4) + 1, zero padded
//   1 doc_bits : storage, read        array<u32>  bit i set iff a document starts at byte i;
//                                                 bit n set iff byte n is not part of the last
//                                                 document (length >= n / 32 + 1)
//   2 table    : storage, read        array<u32>  [0, STAGE1_LEN): block of cp >> 8; then the
//                                                 blocks' class bytes, 4 per u32
//   3 codes    : storage, read_write  array<u32>  byte codes (below), 4 per u32; ceil(n/32)*8
//   4 thr      : storage, read_write  array<u32>  per thread: (F prefix, B suffix) functions of
//                                                 the threads before/after it in its block
//   5 blk      : storage, read_write  array<u32>  per block: (F total, B total, F state in,
//                                                 B state in); 4 u32 each
//   6 mask     : storage, read_write  array<u32>  bit i set iff byte i starts a word;
//                                                 ceil(n / 32)
//   7 params   : uniform              Params

struct Params {
    n: u32,           // bytes in the buffer
    num_blocks: u32,  // ceil(n / (WG * 32))
    c0: u32,          // the automata read bytes [c0, c1) only (a slice's core; halo outside)
    c1: u32,
    f_in: u32,        // F state before byte c0 (unless c0 starts a document)
    b_in: u32,        // B state at byte c1 (unless c1 starts a document)
    sets_at: u32,     // word of `table` where DeepSeek LLM's letter and punctuation bitmaps begin
}

@group(0) @binding(0) var<storage, read> text: array<u32>;
@group(0) @binding(1) var<storage, read> doc_bits: array<u32>;
@group(0) @binding(2) var<storage, read> table: array<u32>;
@group(0) @binding(3) var<storage, read_write> codes: array<u32>;
@group(0) @binding(4) var<storage, read_write> thr: array<u32>;
@group(0) @binding(5) var<storage, read_write> blk: array<u32>;
@group(0) @binding(6) var<storage, read_write> mask: array<u32>;
@group(0) @binding(7) var<uniform> params: Params;

override WG: u32 = 256u;
// The pattern family, one of the PAT_* below (torch_gpubpe.encoding.regex_pretok.PAT_CONSTS
// names the family of each): a constant of the pipeline, so that the driver compiles only that
// family's rules.
override PATTERN: u32;

const CHUNK: u32 = 32u;            // bytes per thread = bits of one mask word
const STAGE1_LEN: u32 = 4352u;     // 0x110000 >> 8
const PAT_GPT2: u32 = 0u;
const PAT_CL100K: u32 = 1u;
const PAT_QWEN2: u32 = 2u;
const PAT_O200K: u32 = 3u;
// Llama 3: cl100k's rules without its `\s++$` (the pattern cl100k_base had before tiktoken
// rewrote it possessively: a space run after CR/LF at the end splits as Qwen2's does).
const PAT_LLAMA3: u32 = 4u;
// Qwen3.5: Qwen2's rules with \p{M} a letter (`[\p{L}\p{M}]+`, `[^\s\p{L}\p{M}\p{N}]`): a
// mark is never the optional `[^\r\n\p{L}\p{N}]` before letters on its own, since the letter
// run that follows may take it too and both give one match.
const PAT_QWEN35: u32 = 5u;
// StarCoder (Refact): GPT-2's rules run on the pieces between digits, each digit its own
// piece (Hugging Face's Digits(individual_digits) before ByteLevel's regex): no space joins
// a digit, and a space run before a digit is one match (the piece ends there).
const PAT_STARCODER: u32 = 6u;
// DeepSeek Coder: Hugging Face's splits one after the other ([\r\n]; \s?\p{L}+; \s?\p{P}+;
// the CJK ranges [\u0800-\u9FA5\uAC00-\uD7FF]+; each digit), every piece kept. Each split
// only adds boundaries, and each is told from the code points beside it (ds_starts). Its
// codes hold no contraction fold: fold bit 0 is \p{P}, bit 1 the CJK ranges.
const PAT_DSCODER: u32 = 7u;
// No split: a document is one word (SentencePiece BPE, a tokenizer.json without pre-tokenizer).
const PAT_WHOLE: u32 = 8u;
// DeepSeek LLM: DeepSeek Coder's way with its own letter and punctuation lists (bitmaps in
// `table` at params.sets_at), `\s+$` after them (a B automaton of its own), and the same CJK
// ranges and digits; fold bit 0 is its punctuation, bit 1 the CJK ranges, bit 2 its letters
// (dl_starts).
const PAT_DSLLM: u32 = 9u;
// nanochat: Llama 3's rules with digits in groups of 2 (`\p{N}{1,2}`).
const PAT_NANOCHAT: u32 = 10u;
// SentencePiece words: a word starts at a run of U+2581 (▁) after another code point. No
// split for the ids (a document is one word), but a vocab without a token that joins a code
// point to a following ▁ never merges across such a start, so the words give the same ids.
const PAT_METASPACE: u32 = 11u;
const FOLD_META: u32 = 12u;
const META_CODE: u32 = K_O | (FOLD_META << 3u);  // U+2581
const FOLD_P: u32 = 1u;
const FOLD_CJK: u32 = 2u;
const FOLD_DL: u32 = 4u;
const SETS_LIMIT: u32 = 0x1E960u;  // torch_gpubpe.core.patterns.SETS_LIMIT
fn gpt2_like() -> bool {
    return PATTERN == PAT_GPT2 || PATTERN == PAT_STARCODER;
}
// \p{N}{1,3} (nanochat: {1,2}): digit runs split in groups from the left (else one digit
// per match)
fn digits_by_three() -> bool {
    return PATTERN == PAT_CL100K || PATTERN == PAT_LLAMA3
        || PATTERN == PAT_NANOCHAT;
}
fn digit_group() -> u32 { return select(3u, 2u, PATTERN == PAT_NANOCHAT); }

// Byte code: bits 0-2 class K_*, bits 3-6 fold (1 + index in "sdmtlvre" of the contraction
// letter it matches under (?i); FOLD_APOS for U+0027), bit 7 the code point is that letter in
// ASCII lower case (GPT-2's contractions are case-sensitive). CONT: not a code point start.
const K_L: u32 = 0u;
const K_N: u32 = 1u;
const K_O: u32 = 2u;
const K_SP: u32 = 3u;   // U+0020
const K_WS: u32 = 4u;   // other \s but CR, LF
const K_NL: u32 = 5u;   // CR, LF
const K_M: u32 = 6u;    // o200k only: \p{M} (other for the other families)
const K_NONE: u32 = 7u; // no code point (before a document start, past its end)
const FOLD_APOS: u32 = 9u;
// o200k only: fold 10 is U+002F, fold 11 a letter of both case classes (\p{Lm}, \p{Lo}: none
// folds to a contraction letter, torch_gpubpe/core/unicode_gen.py checks), bit 7 a letter of the
// upper class only (\p{Lu}, \p{Lt}); a letter of neither has bit 7 clear (\p{Ll}).
const FOLD_SLASH: u32 = 10u;
const FOLD_BOTH: u32 = 11u;
const CONT: u32 = 0xFFu;

const F_ID: u32 = 0x2C688u;  // 0 | 1<<3 | 2<<6 | 3<<9 | 4<<12 | 5<<15
const B_ID: u32 = 0x24u;     // 0 | 1<<2 | 2<<4
const F_OTHER: u32 = 3u;     // F state d = 0, p = 1
const B_NL: u32 = 0u;
const B_WORD: u32 = 1u;
const B_END: u32 = 2u;

var<workgroup> wf: array<u32, 256>;
var<workgroup> wb: array<u32, 256>;

fn doc_start(i: u32) -> bool { return ((doc_bits[i >> 5u] >> (i & 31u)) & 1u) != 0u; }
// codes: word w (bytes 4w..4w+3) of thread t = w / 8 (its 32-byte chunk) is stored at
// (t / 256) * 2048 + (w % 8) * 256 + t % 256, so that the threads of a subgroup, each at the
// same byte of its own chunk, touch consecutive words (coalesced) instead of words 8 apart.
fn code_word(w: u32) -> u32 {
    let t = w >> 3u;
    return ((t >> 8u) << 11u) | ((w & 7u) << 8u) | (t & 255u);
}
// pt_local (GPT-2: rules that read only the code points around a byte, no automata) keeps the
// codes of its block and TILE_HALO bytes on each side in workgroup memory instead: byte i at
// word w = (i + TILE_HALO - tile_b0) / 4, stored at w + w / 8 (a pad word per 8: the threads
// of a subgroup, each at the same byte of its own 32-byte chunk, hit distinct banks).
const TILE_HALO: u32 = 32u;
const TILE_WORDS: u32 = (256u * CHUNK + 2u * TILE_HALO) / 4u * 9u / 8u + 1u;  // WG = 256
var<workgroup> tile: array<u32, TILE_WORDS>;
var<private> in_tile: bool;   // false but in pt_local
var<private> tile_b0: u32;    // pt_local: the first byte of the workgroup's block
fn tile_word(i: u32) -> u32 {
    let w = (i + TILE_HALO - tile_b0) >> 2u;
    return w + (w >> 3u);
}
// The codes word holding byte i.
fn codes_word_at(i: u32) -> u32 {
    if (in_tile) { return tile[tile_word(i)]; }
    return codes[code_word(i >> 2u)];
}
fn code_at(i: u32) -> u32 { return (codes_word_at(i) >> ((i & 3u) * 8u)) & 0xFFu; }

// ---- UTF-8 ------------------------------------------------------------------------------
// Length of the valid UTF-8 sequence starting at byte j (Unicode Table 3-7: no overlong
// forms, no surrogates, at most U+10FFFF) within its document and the buffer; 0 if none.
fn seq_len(j: u32) -> u32 {
    // the doc-start bits of j..j+4 as the block loops hold them in registers (reads past the
    // buffers' ends are bounds-checked by wgpu and masked by `room`)
    let r = j & 31u;
    let d0 = doc_bits[j >> 5u];
    let d1 = doc_bits[(j >> 5u) + 1u];
    let d = select((d0 >> r) | (d1 << (32u - r)), d0, r == 0u) & 0x1Fu;
    return seq_len4(text4(j), d, params.n - j);
}

// Bytes j..j+3 (little endian) in one u32.
fn text4(j: u32) -> u32 {
    let sh = (j & 3u) * 8u;
    let w0 = text[j >> 2u];
    return select((w0 >> sh) | (text[(j >> 2u) + 1u] << (32u - sh)), w0, sh == 0u);
}

// seq_len from registers: q = bytes j..j+3 (LE), d = doc-start bits of j..j+3 (bit k: j + k),
// room = n - j.
fn seq_len4(q: u32, d: u32, room: u32) -> u32 {
    let b0 = q & 0xFFu;
    if (b0 < 0x80u) { return 1u; }
    var len = 0u;
    var lo = 0x80u;
    var hi = 0xBFu;
    if (b0 >= 0xC2u && b0 <= 0xDFu) { len = 2u; }
    else if (b0 >= 0xE0u && b0 <= 0xEFu) {
        len = 3u;
        if (b0 == 0xE0u) { lo = 0xA0u; }
        if (b0 == 0xEDu) { hi = 0x9Fu; }
    } else if (b0 >= 0xF0u && b0 <= 0xF4u) {
        len = 4u;
        if (b0 == 0xF0u) { lo = 0x90u; }
        if (b0 == 0xF4u) { hi = 0x8Fu; }
    } else { return 0u; }
    if (len > room || (d & ((1u << len) - 2u)) != 0u) { return 0u; }
    let b1 = (q >> 8u) & 0xFFu;
    if (b1 < lo || b1 > hi) { return 0u; }
    if (len >= 3u && ((q >> 16u) & 0xC0u) != 0x80u) { return 0u; }
    if (len == 4u && ((q >> 24u) & 0xC0u) != 0x80u) { return 0u; }
    return len;
}
fn decode4(q: u32, len: u32) -> u32 {
    if (len == 1u) { return q & 0xFFu; }
    if (len == 2u) { return ((q & 0x1Fu) << 6u) | ((q >> 8u) & 0x3Fu); }
    if (len == 3u) {
        return ((q & 0x0Fu) << 12u) | (((q >> 8u) & 0x3Fu) << 6u) | ((q >> 16u) & 0x3Fu);
    }
    return ((q & 0x07u) << 18u) | (((q >> 8u) & 0x3Fu) << 12u) | (((q >> 16u) & 0x3Fu) << 6u)
         | ((q >> 24u) & 0x3Fu);
}

fn decode(j: u32, len: u32) -> u32 { return decode4(text4(j), len); }

// Table class byte of code point cp (torch_gpubpe/core/unicode_gen.py).
// pt_classify: the class bytes of U+0000..U+007F (4 per u32), read once per workgroup.
var<workgroup> ascii_cls: array<u32, 32>;
fn cp_class(cp: u32) -> u32 {
    if (cp < 0x80u) { return (ascii_cls[cp >> 2u] >> ((cp & 3u) * 8u)) & 0xFFu; }
    let block = table[cp >> 8u];
    let k = block * 256u + (cp & 0xFFu);
    return (table[STAGE1_LEN + (k >> 2u)] >> ((k & 3u) * 8u)) & 0xFFu;
}

// Byte code of a code point (see the K_* constants).
fn cp_code(cp: u32) -> u32 {
    if (PATTERN == PAT_METASPACE) { return select(K_O, META_CODE, cp == 0x2581u); }
    let t = cp_class(cp);
    if (PATTERN == PAT_O200K) { return o_code(cp, t); }
    var k = K_O;
    switch (t & 3u) {
        case 0u: { k = K_L; }
        case 1u: { k = K_N; }
        case 3u: {
            k = K_WS;
            if (cp == 0x20u) { k = K_SP; }
            if (cp == 0x0Au || cp == 0x0Du) { k = K_NL; }
        }
        default: {
            k = K_O;
            if (PATTERN == PAT_QWEN35 && (t & 12u) != 0u) { k = K_L; }  // \p{M}
        }
    }
    var fold = t >> 4u;
    if (PATTERN == PAT_DSLLM) {
        fold = 0u;
        if (cp < SETS_LIMIT) {
            let w = params.sets_at + (cp >> 5u);
            let bit = 1u << (cp & 31u);
            if ((table[w] & bit) != 0u) { fold |= FOLD_DL; }
            if ((table[w + (SETS_LIMIT >> 5u)] & bit) != 0u) { fold |= FOLD_P; }
        }
        if ((cp >= 0x800u && cp <= 0x9FA5u) || (cp >= 0xAC00u && cp <= 0xD7FFu)) {
            fold |= FOLD_CJK;
        }
        return k | (fold << 3u);
    }
    if (PATTERN == PAT_DSCODER) {
        fold = select(0u, FOLD_P, fold == 15u);
        if ((cp >= 0x800u && cp <= 0x9FA5u) || (cp >= 0xAC00u && cp <= 0xD7FFu)) {
            fold |= FOLD_CJK;
        }
        return k | (fold << 3u);
    }
    if (fold == 15u) { fold = 0u; }  // \p{P}: only DeepSeek Coder reads it
    if (cp == 0x27u) { fold = FOLD_APOS; }
    let exact = fold >= 1u && fold <= 8u && cp >= 0x61u && cp <= 0x7Au;
    return k | (fold << 3u) | select(0u, 0x80u, exact);
}

// ---- the automata -----------------------------------------------------------------------
// F state s = d + 3 p: d = digits since the digit run began, mod the group (3; nanochat 2);
// p = the last code point before, CR/LF skipped, is "other". A function on F states holds 6
// entries of 3 bits.
fn f_step(k: u32, s: u32) -> u32 {
    if (k == K_N) { return (s % 3u + 1u) % digit_group(); }
    if (k == K_NL) { return (s / 3u) * 3u; }
    if (k == K_O) { return F_OTHER; }
    return 0u;
}
// A transition function in a u32: entry s (w bits) is the image of state s.
fn tf_entry(f: u32, s: u32, w: u32) -> u32 { return (f >> (w * s)) & ((1u << w) - 1u); }
// f, then g, over n states of w bits
fn tf_chain(f: u32, g: u32, n: u32, w: u32) -> u32 {
    var out = 0u;
    for (var s = 0u; s < n; s++) { out |= tf_entry(g, tf_entry(f, s, w), w) << (w * s); }
    return out;
}
fn f_get(f: u32, s: u32) -> u32 { return tf_entry(f, s, 3u); }
fn f_const(s: u32) -> u32 { return s * 0x9249u; }  // s in all 6 entries
// f, then the code point of class k
fn f_then(f: u32, k: u32) -> u32 {
    if (k != K_N && k != K_NL) { return f_const(f_step(k, 0u)); }  // the same from any state
    var out = 0u;
    for (var s = 0u; s < 6u; s++) { out |= f_step(k, f_get(f, s)) << (3u * s); }
    return out;
}
// a, then b
fn f_compose(a: u32, b: u32) -> u32 { return tf_chain(a, b, 6u, 3u); }

// B state: what ends the run of non-CR/LF spaces at a position: B_NL, B_WORD or B_END.
// A function on B states holds 3 entries of 2 bits; B(i) = e_i(B(i + 1)).
fn b_step(k: u32, s: u32) -> u32 {
    if (k == K_SP || k == K_WS || k == K_NONE) { return s; }
    if (k == K_NL) { return B_NL; }
    return B_WORD;
}
fn b_get(f: u32, s: u32) -> u32 { return tf_entry(f, s, 2u); }
fn b_const(s: u32) -> u32 { return s * 0x15u; }
// the code point of class k, before (to the left of) f
fn b_before(k: u32, f: u32) -> u32 {
    var out = 0u;
    for (var s = 0u; s < 3u; s++) { out |= b_step(k, b_get(f, s)) << (2u * s); }
    return out;
}
// a to the left of b: apply b, then a
fn b_compose(a: u32, b: u32) -> u32 { return tf_chain(b, a, 3u, 2u); }

// DeepSeek LLM's B automaton: whether a run of spaces ends its piece (`\s+$`, dl_starts).
// States of the text from a position on: DL_T (true), DL_EO / DL_EQ (a non-space that is in
// neither list / punctuation but no letter), DL_SF (other spaces, then DL_EO), DL_IF (U+3000s,
// then DL_EQ). A function holds 5 entries of 3 bits.
const DL_T: u32 = 0u;
const DL_EO: u32 = 1u;
const DL_EQ: u32 = 2u;
const DL_SF: u32 = 3u;
const DL_IF: u32 = 4u;
const DLB_ID: u32 = 0x4688u;  // 0 | 1<<3 | 2<<6 | 3<<9 | 4<<12
// the state at a code point of code c (CONT: none, K_NONE: the end) before state s
fn dlb_step(c: u32, s: u32) -> u32 {
    if (c == CONT) { return s; }
    let k = c & 7u;
    if (k == K_NONE || k == K_NL) { return DL_T; }
    let p = (((c >> 3u) & 15u) & FOLD_P) != 0u;
    if (k != K_SP && k != K_WS) {
        if ((((c >> 3u) & 15u) & FOLD_DL) != 0u) { return DL_T; }
        return select(DL_EO, DL_EQ, p);
    }
    if (p) {  // U+3000
        if (s == DL_EQ || s == DL_IF) { return DL_IF; }
        return DL_T;
    }
    if (s == DL_EO || s == DL_SF) { return DL_SF; }
    return DL_T;
}
fn dlb_get(f: u32, s: u32) -> u32 { return tf_entry(f, s, 3u); }
fn dlb_const(s: u32) -> u32 { return s * 0x1249u; }
// f, then the code point c to its left
fn dlb_then(f: u32, c: u32) -> u32 {
    var out = 0u;
    for (var s = 0u; s < 5u; s++) { out |= dlb_get(f, dlb_step(c, s)) << (3u * s); }
    return out;
}
// a to the left of b
fn dlb_compose(a: u32, b: u32) -> u32 { return tf_chain(b, a, 5u, 3u); }

// ---- o200k ------------------------------------------------------------------------------
// F main state: which match of `regex.finditer` the previous code point is in.
const O_END: u32 = 0u;  // none that takes more: the next code point starts a match or not
                        // by the whitespace rules (after digits, spaces, a contraction's end)
const O_LU: u32 = 1u;   // a letter match, no [\p{Ll}] since its start (also: after its prefix)
const O_LL: u32 = 2u;   // a letter match past a [\p{Ll}]
const O_Q: u32 = 3u;    // ` ?[^\s\p{L}\p{N}]+`: its run of other/marks
const O_T: u32 = 4u;    // its `[\r\n/]*` tail
const O_C1: u32 = 5u;   // an attached contraction, 1 code point to go
const O_C2: u32 = 6u;   // 2 to go
// A function on F states: 7 main entries of 3 bits, then at bit 24 3 digit entries of 2 bits.
// A state s = main | digits mod 3 << 3.
const OF_ID: u32 = 0x241AC688u;
// B states s = b | y << 2 (b: B_NL, B_WORD, B_END as above; y: the run of upper-class letters
// from here is followed by a non-letter or the end). A function: 3 b entries of 2 bits, then
// at bit 8 the images of y = 0 and y = 1.
const OR_ID: u32 = 0x224u;
const OR_END: u32 = 6u;  // B_END | 1 << 2

fn o_code(cp: u32, t: u32) -> u32 {
    let cases = t & 12u;
    var k = K_O;
    var fold = t >> 4u;
    if (fold == 15u) { fold = 0u; }  // \p{P}: only DeepSeek Coder reads it
    var hi = 0u;
    switch (t & 3u) {
        case 0u: {
            k = K_L;
            if (cases == 12u) { fold = FOLD_BOTH; }
            if (cases == 4u) { hi = 0x80u; }
        }
        case 1u: { k = K_N; }
        case 3u: {
            k = K_WS;
            if (cp == 0x20u) { k = K_SP; }
            if (cp == 0x0Au || cp == 0x0Du) { k = K_NL; }
        }
        default: { if (cases != 0u) { k = K_M; } }
    }
    if (cp == 0x27u) { fold = FOLD_APOS; }
    if (cp == 0x2Fu) { fold = FOLD_SLASH; }
    return k | (fold << 3u) | hi;
}
fn o_fold(c: u32) -> u32 { return (c >> 3u) & 15u; }
// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] ∪ [\p{Ll}\p{Lm}\p{Lo}\p{M}] (a CONT or K_NONE code is not)
fn o_w(c: u32) -> bool { return c != CONT && ((c & 7u) == K_L || (c & 7u) == K_M); }
fn o_upper(c: u32) -> bool { return (c & 7u) == K_L && (c & 0x80u) != 0u && c != CONT; }
fn o_both(c: u32) -> bool {
    return c != CONT && (((c & 7u) == K_L && o_fold(c) == FOLD_BOTH) || (c & 7u) == K_M);
}
fn o_q(c: u32) -> bool { return c != CONT && ((c & 7u) == K_O || (c & 7u) == K_M); }
fn o_slash(c: u32) -> bool { return (c & 7u) == K_O && o_fold(c) == FOLD_SLASH && c != CONT; }

// Length in code points (2, 3) of the contraction `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at a code
// point of code c followed by codes c1, c2 (K_NONE past the document), or 0.
fn o_contr(c: u32, c1: u32, c2: u32) -> u32 {
    if (o_fold(c) != FOLD_APOS || (c & 7u) != K_O) { return 0u; }
    if ((c1 & 7u) != K_L) { return 0u; }
    let f1 = o_fold(c1);
    if (f1 >= 1u && f1 <= 4u) { return 2u; }
    if ((c2 & 7u) != K_L) { return 0u; }
    let f2 = o_fold(c2);
    if ((f1 == 5u && f2 == 5u) || ((f1 == 6u || f1 == 7u) && f2 == 8u)) { return 3u; }
    return 0u;
}

// The main state after a code point (code c, next code nx) that starts a match.
fn o_start(c: u32, nx: u32) -> u32 {
    let k = c & 7u;
    if (k == K_L || k == K_M) {
        if (o_upper(c) || o_both(c)) { return O_LU; }
        return O_LL;
    }
    if (k == K_O) { return select(O_Q, O_LU, o_w(nx)); }       // prefix of a letter match
    if (k == K_SP) {
        if (o_w(nx)) { return O_LU; }
        return select(O_END, O_Q, (nx & 7u) == K_O);           // ` ?[^\s\p{L}\p{N}]+`
    }
    if (k == K_WS) { return select(O_END, O_LU, o_w(nx)); }
    return O_END;
}
// The main state after code c (next code nx, contraction length cl there) from main state s.
fn o_step(s: u32, c: u32, nx: u32, cl: u32) -> u32 {
    if (s == O_C2) { return O_C1; }
    if (s == O_C1) { return O_END; }
    if (s == O_LU || s == O_LL) {
        if (o_upper(c)) { return O_LU; }
        if (o_both(c)) { return s; }
        if (o_w(c)) { return O_LL; }
        if (cl == 2u) { return O_C1; }
        if (cl == 3u) { return O_C2; }
    }
    if (s == O_Q) {
        if (o_q(c)) { return O_Q; }
        if ((c & 7u) == K_NL) { return O_T; }
    }
    if (s == O_T && ((c & 7u) == K_NL || o_slash(c))) { return O_T; }
    return o_start(c, nx);
}
fn od_step(c: u32, d: u32) -> u32 { return select(0u, (d + 1u) % 3u, (c & 7u) == K_N); }
fn of_get(f: u32, s: u32) -> u32 {
    return ((f >> (3u * (s & 7u))) & 7u) | (((f >> (24u + 2u * (s >> 3u))) & 3u) << 3u);
}
fn of_const(s: u32) -> u32 { return (s & 7u) * 0x49249u | ((s >> 3u) * 0x15u) << 24u; }
fn of_state_step(s: u32, c: u32, nx: u32, cl: u32) -> u32 {
    return o_step(s & 7u, c, nx, cl) | (od_step(c, s >> 3u) << 3u);
}
// f, then the code point c
fn of_then(f: u32, c: u32, nx: u32, cl: u32) -> u32 {
    var out = 0u;
    for (var s = 0u; s < 7u; s++) { out |= o_step((f >> (3u * s)) & 7u, c, nx, cl) << (3u * s); }
    for (var d = 0u; d < 3u; d++) {
        out |= od_step(c, (f >> (24u + 2u * d)) & 3u) << (24u + 2u * d);
    }
    return out;
}
fn of_compose(a: u32, b: u32) -> u32 {
    var out = 0u;
    for (var s = 0u; s < 7u; s++) {
        out |= ((b >> (3u * ((a >> (3u * s)) & 7u))) & 7u) << (3u * s);
    }
    for (var d = 0u; d < 3u; d++) {
        let m = (a >> (24u + 2u * d)) & 3u;
        out |= ((b >> (24u + 2u * m)) & 3u) << (24u + 2u * d);
    }
    return out;
}
// B: the y part of one code point (CONT or K_NONE: unchanged)
fn oy_step(c: u32, y: u32) -> u32 {
    if (c == CONT || (c & 7u) == K_NONE) { return y; }
    if (!o_w(c)) { return 1u; }
    if (o_upper(c)) { return y; }
    return 0u;
}
fn or_step(c: u32, s: u32) -> u32 {
    var k = K_NONE;
    if (c != CONT) { k = c & 7u; }
    return b_step(k, s & 3u) | (oy_step(c, s >> 2u) << 2u);
}
fn or_get(f: u32, s: u32) -> u32 {
    return ((f >> (2u * (s & 3u))) & 3u) | (((f >> (8u + (s >> 2u))) & 1u) << 2u);
}
fn or_const(s: u32) -> u32 { return (s & 3u) * 0x15u | (s >> 2u) * 0x300u; }
// the code point c to the left of f
fn or_before(c: u32, f: u32) -> u32 {
    var out = 0u;
    let k = select(c & 7u, K_NONE, c == CONT);
    for (var s = 0u; s < 3u; s++) { out |= b_step(k, (f >> (2u * s)) & 3u) << (2u * s); }
    for (var y = 0u; y < 2u; y++) { out |= oy_step(c, (f >> (8u + y)) & 1u) << (8u + y); }
    return out;
}
// a to the left of b
fn or_compose(a: u32, b: u32) -> u32 {
    var out = 0u;
    for (var s = 0u; s < 3u; s++) {
        out |= ((a >> (2u * ((b >> (2u * s)) & 3u))) & 3u) << (2u * s);
    }
    for (var y = 0u; y < 2u; y++) {
        out |= ((a >> (8u + ((b >> (8u + y)) & 1u))) & 1u) << (8u + y);
    }
    return out;
}

// The automata of the pattern: o200k's or the others'.
fn fx_id() -> u32 { return select(F_ID, OF_ID, PATTERN == PAT_O200K); }
fn bx_id() -> u32 {
    if (PATTERN == PAT_DSLLM) { return DLB_ID; }
    return select(B_ID, OR_ID, PATTERN == PAT_O200K);
}
fn fx_get(f: u32, s: u32) -> u32 {
    if (PATTERN == PAT_O200K) { return of_get(f, s); }
    return f_get(f, s);
}
fn bx_get(f: u32, s: u32) -> u32 {
    if (PATTERN == PAT_O200K) { return or_get(f, s); }
    if (PATTERN == PAT_DSLLM) { return dlb_get(f, s); }
    return b_get(f, s);
}
fn fx_compose(a: u32, b: u32) -> u32 {
    if (PATTERN == PAT_O200K) { return of_compose(a, b); }
    return f_compose(a, b);
}
fn bx_compose(a: u32, b: u32) -> u32 {
    if (PATTERN == PAT_O200K) { return or_compose(a, b); }
    if (PATTERN == PAT_DSLLM) { return dlb_compose(a, b); }
    return b_compose(a, b);
}

// Code of the code point starting at byte j (a code point start), K_NONE past its document.
fn text_code(j: u32) -> u32 {
    if (j >= params.n || doc_start(j)) { return K_NONE; }
    let len = seq_len(j);
    if (len == 0u) { return K_O; }
    return cp_code(decode(j, len));
}
fn text_next(j: u32) -> u32 { return j + max(seq_len(j), 1u); }

// The codes of the bytes [lo, hi) of one thread's chunk (lo < hi), stored in codes or, with
// `tiled`, in the workgroup's tile; without `tiled`, the chunk's F and B functions.
fn chunk_codes(lo: u32, hi: u32, tiled: bool) -> vec2<u32> {
    let n = params.n;
    let o200k = PATTERN == PAT_O200K;
    let dsllm = PATTERN == PAT_DSLLM;
    var fa = fx_id();
    var ba = bx_id();
    // valid-sequence lengths of the 3 bytes before the current one (same document)
    var l1 = 0u;
    var l2 = 0u;
    var l3 = 0u;
    // (seq_len never lets a sequence cross a document start, so no reset is needed)
    for (var j = max(lo, 3u) - 3u; j < lo; j++) {
        l3 = l2; l2 = l1; l1 = seq_len(j);
    }
    // Registers: the text words of bytes [i & ~3, +8) and the document-start bits of the
    // chunk and the next 32 bytes (lo is a multiple of 32), read once per 4 / 32 bytes.
    var w0 = text[lo >> 2u];
    var w1 = text[(lo >> 2u) + 1u];
    let d0 = doc_bits[lo >> 5u];
    let d1 = doc_bits[(lo >> 5u) + 1u];
    let c0 = params.c0;
    let c1 = params.c1;
    var word = 0u;
    for (var i = lo; i < hi; i++) {
        let r = i - lo;
        let sh = (i & 3u) * 8u;
        if (sh == 0u && r != 0u) { w0 = w1; w1 = text[(i >> 2u) + 1u]; }
        let q = select((w0 >> sh) | (w1 << (32u - sh)), w0, sh == 0u);
        let d = select((d0 >> r) | (d1 << (32u - r)), d0, r == 0u) & 0x1Fu;
        let ds = (d & 1u) != 0u;
        let covered = l1 >= 2u || l2 >= 3u || l3 >= 4u;
        let len = seq_len4(q, d, n - i);
        var code = CONT;
        if (!covered) {
            if (len == 0u) { code = K_O; } else { code = cp_code(decode4(q, len)); }
        }
        word |= code << sh;
        if (sh == 24u || i + 1u == hi) {
            if (tiled) { tile[tile_word(i)] = word; } else { codes[code_word(i >> 2u)] = word; }
            word = 0u;
        }
        l3 = l2; l2 = l1; l1 = len;
        if (tiled || i < c0 || i >= c1) { continue; }
        let k = select(code & 7u, K_NONE, code == CONT);
        let end = (d & 2u) != 0u;  // a document starts at i + 1: this one ends here
        if (o200k) {
            if (code != CONT) {  // the symbol reads up to 2 code points ahead (from the text)
                let j1 = i + max(len, 1u);
                let cn = text_code(j1);
                var cl = 0u;
                if (o_fold(code) == FOLD_APOS && (cn & 7u) == K_L) {
                    cl = o_contr(code, cn, text_code(text_next(j1)));
                }
                if (ds) { fa = of_const(of_state_step(0u, code, cn, cl)); }
                else { fa = of_then(fa, code, cn, cl); }
            }
            var e = or_before(code, OR_ID);
            if (end) { e = or_const(or_step(code, OR_END)); }
            ba = or_compose(ba, e);
        } else {
            if (code != CONT) {
                if (ds) { fa = f_const(f_step(k, 0u)); } else { fa = f_then(fa, k); }
            }
            if (dsllm) {
                if (end) { ba = dlb_const(dlb_get(ba, dlb_step(code, DL_T))); }
                else { ba = dlb_then(ba, code); }
                continue;
            }
            // B: this byte to the left of what follows; a document end is B_END. A space
            // (or no code point) passes the state through; anything else sets it.
            if (end) { ba = b_const(b_get(ba, b_step(k, B_END))); }
            else if (k != K_SP && k != K_WS && k != K_NONE) {
                ba = b_const(b_get(ba, b_step(k, B_END)));
            }
        }
    }
    return vec2<u32>(fa, ba);
}

// Workgroup scans over (wf, wb): wf[i] = the inclusive prefix composition of F, wb[i] the
// inclusive suffix composition of B, from each thread's (fa, ba). Called in uniform control flow.
fn scan_workgroup(lid: u32, fa: u32, ba: u32) {
    wf[lid] = fa;
    wb[lid] = ba;
    workgroupBarrier();
    for (var off = 1u; off < WG; off <<= 1u) {
        var xf = wf[lid];
        var xb = wb[lid];
        if (lid >= off) { xf = fx_compose(wf[lid - off], xf); }
        if (lid + off < WG) { xb = bx_compose(xb, wb[lid + off]); }
        workgroupBarrier();
        wf[lid] = xf;
        wb[lid] = xb;
        workgroupBarrier();
    }
}

// ---- pass 1 ------------------------------------------------------------------------------
@compute @workgroup_size(WG)
fn pt_classify(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let block = linear_workgroup(wid, nwg);
    let t = block * WG + lid;
    let n = params.n;
    let lo = t * CHUNK;
    let hi = min(lo + CHUNK, n);
    for (var k = lid; k < 32u; k += WG) { ascii_cls[k] = table[STAGE1_LEN + table[0] * 64u + k]; }
    workgroupBarrier();
    var fa = fx_id();
    var ba = bx_id();
    if (lo < n) {
        let fb = chunk_codes(lo, hi, false);
        fa = fb.x;
        ba = fb.y;
    }
    // workgroup scans: inclusive prefix of F, inclusive suffix of B
    scan_workgroup(lid, fa, ba);
    var pf = fx_id();
    if (lid > 0u) { pf = wf[lid - 1u]; }
    var sb = bx_id();
    if (lid + 1u < WG) { sb = wb[lid + 1u]; }
    thr[2u * t] = pf;
    thr[2u * t + 1u] = sb;
    if (lid == 0u && block < params.num_blocks) {
        blk[4u * block] = wf[WG - 1u];
        blk[4u * block + 1u] = wb[0];
    }
}

// ---- pass 2 (one workgroup) -------------------------------------------------------------
@compute @workgroup_size(WG)
fn pt_scan_blocks(@builtin(local_invocation_index) lid: u32) {
    let nb = params.num_blocks;
    let per = (nb + WG - 1u) / WG;
    let lo = min(lid * per, nb);
    let hi = min(lo + per, nb);
    var fa = fx_id();
    var ba = bx_id();
    for (var w = lo; w < hi; w++) {
        fa = fx_compose(fa, blk[4u * w]);
        ba = bx_compose(ba, blk[4u * w + 1u]);
    }
    scan_workgroup(lid, fa, ba);
    var fs = params.f_in;
    if (lid > 0u) { fs = fx_get(wf[lid - 1u], fs); }
    for (var w = lo; w < hi; w++) {
        blk[4u * w + 2u] = fs;
        fs = fx_get(blk[4u * w], fs);
    }
    var bs = params.b_in;
    if (lid + 1u < WG) { bs = bx_get(wb[lid + 1u], bs); }
    for (var k = lo; k < hi; k++) {
        let w = hi - 1u - (k - lo);
        blk[4u * w + 3u] = bs;
        bs = bx_get(blk[4u * w + 1u], bs);
    }
}

// ---- pass 3: the rules ------------------------------------------------------------------
fn is_space(k: u32) -> bool { return k == K_SP || k == K_WS || k == K_NL; }

// Start of the code point before the one at i in the same document, or i if none.
fn prev_cp(i: u32) -> u32 {
    if (i == 0u || doc_start(i)) { return i; }
    var j = i - 1u;
    if (code_at(j) == CONT && j > 0u) { j -= 1u; }
    if (code_at(j) == CONT && j > 0u) { j -= 1u; }
    if (code_at(j) == CONT && j > 0u) { j -= 1u; }
    return j;
}
// Start of the code point after the one at i in the same document, or n if none.
fn next_cp(i: u32) -> u32 {
    let n = params.n;
    var j = i + 1u;
    if (j < n && code_at(j) == CONT) { j += 1u; }
    if (j < n && code_at(j) == CONT) { j += 1u; }
    if (j < n && code_at(j) == CONT) { j += 1u; }
    if (j >= n || doc_start(j)) { return n; }
    return j;
}
fn code_or_none(j: u32, none_pos: u32) -> u32 {
    if (j == none_pos) { return K_NONE; }
    return code_at(j);
}

// Whether the "other" code point at j begins a match (all three families agree): after a
// letter, digit, CR/LF or other space it does; after "other" it continues that run; after
// U+0020 that space takes it (` ?[^\s\p{L}\p{N}]+`).
fn other_starts(j: u32) -> bool {
    let p = prev_cp(j);
    if (p == j) { return true; }
    let pk = code_at(p) & 7u;
    return pk != K_O && pk != K_SP;
}

// Length in code points of a contraction beginning at the apostrophe at j (2 or 3), or 0.
fn contraction_len(j: u32) -> u32 {
    let c = code_at(j);
    if (((c >> 3u) & 15u) != FOLD_APOS) { return 0u; }
    let n = params.n;
    let j1 = next_cp(j);
    if (j1 == n) { return 0u; }
    let c1 = code_at(j1);
    var f1 = (c1 >> 3u) & 15u;
    let gpt2 = gpt2_like();
    if (gpt2 && (c1 & 0x80u) == 0u) { f1 = 0u; }
    if (f1 >= 1u && f1 <= 4u) { return 2u; }  // s d m t
    if (f1 < 5u || f1 > 7u) { return 0u; }
    let j2 = next_cp(j1);
    if (j2 == n) { return 0u; }
    let c2 = code_at(j2);
    var f2 = (c2 >> 3u) & 15u;
    if (gpt2 && (c2 & 0x80u) == 0u) { f2 = 0u; }
    if ((f1 == 5u && f2 == 5u) || ((f1 == 6u || f1 == 7u) && f2 == 8u)) { return 3u; }  // ll ve re
    return 0u;
}
fn contraction_at(j: u32) -> u32 {
    if ((code_at(j) & 7u) != K_O) { return 0u; }
    let len = contraction_len(j);
    if (len == 0u || !other_starts(j)) { return 0u; }
    return len;
}

// B state of the code point after i (i a non-CR/LF space), scanning at most to `hi`.
fn b_after(i: u32, hi: u32, b_hi: u32) -> u32 {
    for (var j = i + 1u; j < hi; j++) {
        if (doc_start(j)) { return B_END; }
        let c = code_at(j);
        if (c == CONT) { continue; }
        let k = c & 7u;
        if (k != K_SP && k != K_WS) { return b_step(k, B_END); }
    }
    if (doc_start(hi)) { return B_END; }
    return b_hi;
}

// The code points p1, p2, p3 before the current one in its document, as pt_mark carries them
// from one code point to the next: the codes of p1 and p2 (K_NONE: no such code point) and
// contraction_at of p1, p2, p3 (0 where there is none).
struct Hist {
    c1: u32,
    c2: u32,
    t1: u32,
    t2: u32,
    t3: u32,
}

// The history before the code point that follows byte lo - 1 (lo: a chunk's first byte).
fn hist_before(lo: u32) -> Hist {
    var h = Hist(K_NONE, K_NONE, 0u, 0u, 0u);
    if (lo == 0u || doc_start(lo)) { return h; }
    let p1 = prev_cp(lo);  // the code point holding byte lo - 1
    h.c1 = code_at(p1);
    h.t1 = contraction_at(p1);
    let p2 = prev_cp(p1);
    if (p2 == p1) { return h; }
    h.c2 = code_at(p2);
    h.t2 = contraction_at(p2);
    let p3 = prev_cp(p2);
    if (p3 != p2) { h.t3 = contraction_at(p3); }
    return h;
}

// contraction_at(i) for the code point i of code c after a code point of code cp (K_NONE: none).
fn contraction_here(i: u32, c: u32, cp: u32) -> u32 {
    if ((c & 7u) != K_O || ((c >> 3u) & 15u) != FOLD_APOS) { return 0u; }
    let pk = cp & 7u;
    if (pk == K_O || pk == K_SP) { return 0u; }  // !other_starts(i)
    return contraction_len(i);
}

// DeepSeek Coder: whether the code point at i (code c, after one of code pc) begins a piece.
fn ds_starts(i: u32, c: u32, pc: u32) -> bool {
    let k = c & 7u;
    let pk = pc & 7u;
    let f = (c >> 3u) & 15u;
    let pf = (pc >> 3u) & 15u;
    if (k == K_NL || pk == K_NL || k == K_N || pk == K_N) { return true; }
    if ((f & FOLD_CJK) != (pf & FOLD_CJK)) { return true; }
    let p = (f & FOLD_P) != 0u;
    let pp = (pf & FOLD_P) != 0u;
    if (k == K_SP || k == K_WS) {
        // `\s?` of a letter or punctuation match after it, or the end of one before it
        let nx = next_cp(i);
        if (nx != params.n) {
            let nc = code_at(nx);
            if ((nc & 7u) == K_L || (((nc >> 3u) & 15u) & FOLD_P) != 0u) { return true; }
        }
        return pk == K_L || pp;
    }
    if (k == K_L) { return pk != K_L && pk != K_SP && pk != K_WS; }
    if (p) { return !pp && pk != K_SP && pk != K_WS; }
    return pk == K_L || pp;  // other: the end of a letter or punctuation match
}

// DeepSeek LLM: the classes of a code (K_NONE: none) its rules read.
fn dl_ws(c: u32) -> bool { let k = c & 7u; return k == K_SP || k == K_WS || k == K_NL; }
fn dl_nl(c: u32) -> bool { return (c & 7u) == K_NL; }
fn dl_l(c: u32) -> bool { return (((c >> 3u) & 15u) & FOLD_DL) != 0u; }
fn dl_p(c: u32) -> bool { return (((c >> 3u) & 15u) & FOLD_P) != 0u; }
fn dl_cjk(c: u32) -> bool { return (((c >> 3u) & 15u) & FOLD_CJK) != 0u; }
fn dl_code(j: u32) -> u32 {
    if (j >= params.n || doc_start(j)) { return K_NONE; }
    return code_at(j);
}

// DeepSeek LLM's `\s+$` at the run of spaces from i, after a non-space of the same piece:
// whether the run reaches the end of its piece (the splits before it end a piece inside the
// run or right after it), from the B automaton's state at hi (b_hi) and the codes before it.
fn dl_run_ends_piece(i: u32, hi: u32, b_hi: u32) -> bool {
    // the first code point at or after i that sets the state, or hi
    var e = i + 1u;
    var st = b_hi;
    loop {
        if (e >= hi) { if (doc_start(hi)) { st = DL_T; } break; }
        if (doc_start(e)) { st = DL_T; break; }
        let c = code_at(e);
        if (c != CONT && (!dl_ws(c) || dl_nl(c))) { st = dlb_step(c, DL_T); break; }
        e += 1u;
    }
    for (var j = e; j > i; j--) { st = dlb_step(code_at(j - 1u), st); }
    return st == DL_T;
}

// DeepSeek LLM: whether code point b at i starts a piece, a = the code point before it (same
// document). Each Split only adds piece boundaries; the boundaries of `[\r\n]`, `\s?L+` and
// `\s?P+` (L, P: its lists) at a position are told from the code points a, b, c, d around it
// (c, d: the two after b) and, for `\s?`, whether the boundaries before mark c; then `\s+$`,
// the CJK runs and the digits.
fn dl_starts(i: u32, b: u32, a: u32, hi: u32, b_hi: u32) -> bool {
    if (dl_nl(a) || dl_nl(b)) { return true; }
    // \s?L+: a start at a space before L, or at L after neither L nor a space; an end after L
    let nx = next_cp(i);
    let c = dl_code(nx);
    if (dl_ws(b) && !dl_l(b) && dl_l(c)) { return true; }
    if (dl_l(b) && !dl_l(a) && !dl_ws(a)) { return true; }
    if (dl_l(a) && !dl_l(b)) { return true; }
    // \s?P+ on those pieces: the space before P takes it unless a piece starts at P
    if (dl_ws(b) && !dl_p(b) && dl_p(c)) {
        var d = K_NONE;
        if (nx != params.n) { d = dl_code(next_cp(nx)); }
        let c_starts = dl_ws(c) && !dl_l(c) && dl_l(d);  // (b is a space: no other rule marks c)
        if (!c_starts) { return true; }
    }
    if (dl_p(b) && !dl_p(a) && !dl_ws(a)) { return true; }
    if (dl_p(a) && !dl_p(b)) { return true; }
    // \s+$: the trailing spaces of a piece
    if (dl_cjk(a) != dl_cjk(b)) { return true; }
    if ((b & 7u) == K_N || (a & 7u) == K_N) { return true; }
    return dl_ws(b) && !dl_ws(a) && dl_run_ends_piece(i, hi, b_hi);
}

// Whether the code point at i (code c, history h) starts a match; fs = F state before it,
// b_hi = B state at hi.
fn starts_word(i: u32, c: u32, fs: u32, hi: u32, b_hi: u32, h: Hist) -> bool {
    if (h.c1 == K_NONE) { return true; }
    let pat = PATTERN;
    if (pat == PAT_DSCODER) { return ds_starts(i, c, h.c1); }
    if (pat == PAT_DSLLM) { return dl_starts(i, c, h.c1, hi, b_hi); }
    if (pat == PAT_WHOLE) { return false; }
    if (pat == PAT_METASPACE) { return c == META_CODE && h.c1 != META_CODE; }
    let k = c & 7u;
    let pk = h.c1 & 7u;
    let gpt2 = gpt2_like();
    let digit_pieces = pat == PAT_STARCODER;
    if (is_space(k)) {
        if (gpt2) {
            if (!is_space(pk)) { return true; }
            let nx = next_cp(i);
            if (nx == params.n) { return false; }
            let nk = code_at(nx) & 7u;
            // \s+(?!\S) leaves one to the code point after the run, unless a digit piece
            // follows (the run ends its piece)
            return !is_space(nk) && !(digit_pieces && nk == K_N);
        }
        if (k == K_NL) { return !is_space(pk) && pk != K_O; }  // else absorbed or in the run
        if (pk == K_L || pk == K_N || pk == K_O) { return true; }
        if (pk != K_NL) {  // a space after a space: the last of a run before a non-space
            let nx = next_cp(i);
            return nx != params.n && !is_space(code_at(nx) & 7u);
        }
        // after CR/LF: the first code point after an absorbed CR/LF run, or the rest of the
        // run after its last CR/LF (`\s*[\r\n]`), unless it reaches the end of the document
        // (cl100k: `\s++$` took all; Qwen2 splits there too) or another CR/LF
        if (fs >= F_OTHER) { return true; }
        let b = b_after(i, hi, b_hi);
        if (pat == PAT_CL100K) { return b == B_WORD; }
        return b != B_NL;
    }
    if (is_space(pk)) {
        if (gpt2) { return pk != K_SP || (digit_pieces && k == K_N); }
        if (pk == K_NL) { return true; }
        if (k == K_L) { return false; }   // [^\r\n\p{L}\p{N}]?+\p{L}++
        if (k == K_O) { return pk != K_SP; }
        return true;
    }
    if (k == K_O) { return pk != K_O; }
    if (k == K_N) {
        if (pk != K_N || digit_pieces) { return true; }
        if (pat == PAT_GPT2) { return false; }
        if (!digits_by_three()) { return true; }
        return fs % 3u == 0u;  // \p{N}{1,3}+ ({1,2}) from the left of the run
    }
    // a letter: inside or right after a contraction?
    if (h.t1 >= 2u || h.t2 == 3u) { return false; }
    if (h.t2 == 2u || h.t3 == 3u) { return true; }
    if (pk == K_L) { return false; }
    if (pk == K_N) { return true; }
    if (gpt2) { return true; }
    // a starting "other" takes the letters after it: !other_starts(p1)
    let ppk = h.c2 & 7u;
    return h.c2 != K_NONE && (ppk == K_O || ppk == K_SP);
}

// o200k: whether the code point at i (code c, next code nx, contraction length cl) starts a
// match; s = F state before it, y / nl = the B state after it (its y, its b == B_NL).
fn o_starts(i: u32, s: u32, c: u32, nx: u32, cl: u32, y: bool, nl: bool) -> bool {
    let p1 = prev_cp(i);
    if (p1 == i) { return true; }
    let k = c & 7u;
    let pc = code_at(p1);
    let m = s & 7u;
    if (k == K_N) { return (s >> 3u) == 0u; }           // \p{N}{1,3} from the left of the run
    if (m == O_C1 || m == O_C2) { return false; }
    if (m == O_LU || m == O_LL) {
        // [U]*[L]+ ends at an upper after a lower; in a run of U's that no lower follows it
        // ends after the last code point of both classes (backtracking), before the U's left
        if (o_upper(c)) { return m == O_LL || (o_both(pc) && y); }
        if (o_w(c)) { return false; }
        return cl == 0u;                                 // an attached contraction, or the end
    }
    if (m == O_Q) { return !(o_q(c) || k == K_NL); }
    if (m == O_T) { return !(k == K_NL || o_slash(c)); }
    let pk = pc & 7u;
    if (!is_space(k) || !is_space(pk)) { return true; }
    if (k == K_NL) { return false; }                     // inside `\s*[\r\n]+`
    if (pk == K_NL) { return !nl; }                      // after the last CR/LF of the run
    return is_space(nx & 7u) == false && (nx & 7u) != K_NONE;  // \s+(?!\S) leaves one
}

fn o_mark(lo: u32, chunk_end: u32, hi: u32, fs_in: u32, r_hi: u32) -> u32 {
    let n = params.n;
    // B states after each code point of [lo, hi), right to left
    var ybits = 0u;
    var nlbits = 0u;
    var r = r_hi;
    for (var q = lo; q < hi; q++) {
        let j = hi - 1u - (q - lo);
        if (doc_start(j + 1u)) { r = OR_END; }
        let c = code_at(j);
        if (c == CONT) { continue; }
        ybits |= ((r >> 2u) & 1u) << (j - lo);
        if ((r & 3u) == B_NL) { nlbits |= 1u << (j - lo); }
        r = or_step(c, r);
    }
    var fs = fs_in;
    var bits = 0u;
    for (var i = lo; i < chunk_end; i++) {
        let c = code_at(i);
        if (c == CONT) { continue; }
        let in_core = i >= params.c0 && i < params.c1;
        if (in_core && doc_start(i)) { fs = 0u; }
        let j1 = next_cp(i);
        let c1 = code_or_none(j1, n);
        var cl = 0u;
        if (o_fold(c) == FOLD_APOS && j1 != n) {
            cl = o_contr(c, c1, code_or_none(next_cp(j1), n));
        }
        let b = i - lo;
        if (o_starts(i, fs, c, c1, cl, ((ybits >> b) & 1u) != 0u, ((nlbits >> b) & 1u) != 0u)) {
            bits |= 1u << b;
        }
        if (in_core) { fs = of_state_step(fs, c, c1, cl); }
    }
    return bits;
}

@compute @workgroup_size(WG)
fn pt_mark(@builtin(workgroup_id) wid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let block = linear_workgroup(wid, nwg);
    let t = block * WG + lid;
    let n = params.n;
    let lo = t * CHUNK;
    if (lo >= n || block >= params.num_blocks) { return; }
    let chunk_end = min(lo + CHUNK, n);
    let fs = fx_get(thr[2u * t], blk[4u * block + 2u]);
    let b_end = bx_get(thr[2u * t + 1u], blk[4u * block + 3u]);
    let hi = min(chunk_end, max(params.c1, lo));
    if (PATTERN == PAT_O200K) {
        mask[t] = o_mark(lo, chunk_end, hi, fs, b_end);
        return;
    }
    mask[t] = mark_chunk(lo, chunk_end, hi, fs, b_end);
}

// The word starts of one thread's chunk [lo, chunk_end) (GPT-2, cl100k, Qwen2): F state fs_in
// before lo, B state b_end at hi. The codes word and the document starts of the chunk are read
// once per 4 / 32 bytes; the code points before each one are carried along (Hist) instead of
// being looked up again per byte.
fn mark_chunk(lo: u32, chunk_end: u32, hi: u32, fs_in: u32, b_end: u32) -> u32 {
    var fs = fs_in;
    let dw = doc_bits[lo >> 5u];
    var h = hist_before(lo);
    var cw = 0u;
    var bits = 0u;
    for (var i = lo; i < chunk_end; i++) {
        if ((i & 3u) == 0u) { cw = codes_word_at(i); }
        let c = (cw >> ((i & 3u) * 8u)) & 0xFFu;
        if (c == CONT) { continue; }
        let ds = ((dw >> (i - lo)) & 1u) != 0u;
        if (ds) { h = Hist(K_NONE, K_NONE, 0u, 0u, 0u); }
        let in_core = i >= params.c0 && i < params.c1;
        if (in_core && ds) { fs = 0u; }
        if (starts_word(i, c, fs, hi, b_end, h)) { bits |= 1u << (i - lo); }
        if (in_core) { fs = f_step(c & 7u, fs); }
        h = Hist(c, h.c1, contraction_here(i, c, h.c1), h.t1, h.t2);
    }
    return bits;
}

// The code of byte j (CONT inside a code point) from the text alone.
fn code_global(j: u32) -> u32 {
    for (var k = 1u; k <= 3u; k++) {
        if (j >= k && seq_len(j - k) > k) { return CONT; }
    }
    let len = seq_len(j);
    if (len == 0u) { return K_O; }
    return cp_code(decode(j, len));
}

// ---- GPT-2: one pass ---------------------------------------------------------------------
// GPT-2's rules read only the code points around a byte (no automata: pt_mark ignores F and B
// for it), so one pass does it all: the codes of the block and of TILE_HALO bytes on each side
// into workgroup memory, then each thread's word starts from them.
@compute @workgroup_size(WG)
fn pt_local(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let block = linear_workgroup(wid, nwg);
    let t = block * WG + lid;
    let n = params.n;
    let lo = t * CHUNK;
    let hi = min(lo + CHUNK, n);
    let b0 = block * WG * CHUNK;
    tile_b0 = b0;
    for (var k = lid; k < 32u; k += WG) { ascii_cls[k] = table[STAGE1_LEN + table[0] * 64u + k]; }
    workgroupBarrier();
    if (lo < n) {
        _ = chunk_codes(lo, hi, true);
    }
    // the halo: 2 * TILE_HALO / 4 words, one per thread (bytes past n or before 0: never read)
    let hw = TILE_HALO / 4u;
    if (lid < 2u * hw) {
        var j0 = b0 + WG * CHUNK + 4u * (lid - hw);
        if (lid < hw) { j0 = b0 + 4u * lid - TILE_HALO; }
        var word = 0u;
        if (lid >= hw || b0 >= TILE_HALO) {
            for (var q = 0u; q < 4u; q++) {
                if (j0 + q < n) { word |= code_global(j0 + q) << (8u * q); }
            }
        }
        tile[tile_word(j0)] = word;
    }
    workgroupBarrier();
    if (lo >= n || block >= params.num_blocks) { return; }
    in_tile = true;
    mask[t] = mark_chunk(lo, hi, hi, 0u, B_END);
}
