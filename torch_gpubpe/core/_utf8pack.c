/* UTF-8 of CPython str objects, many documents per call, without the GIL (torch_gpubpe).

   Compiled on first use by torch_gpubpe/core/utf8_native.py (cc -O3 -shared) and called
   through ctypes.CDLL, which releases the GIL for the whole call. Python hands over the
   addresses of the objects (id()) and the layout of PEP 393 str objects it has checked for this
   interpreter (torch_gpubpe/core/cpython_layout.py); nothing here calls into Python.

   Kinds in the per-document arrays:
     0   bytes copied as they are (a bytes object's buffer, an ASCII str's characters, a
         non-ASCII str's cached UTF-8)
     1,2,4  PEP 393 characters of that many bytes, transcoded to UTF-8
     -1  not handled here (not an exact str or bytes, or a non-compact str): Python packs it

   Lone surrogates become U+FFFD and a high surrogate followed by a low one becomes the
   character they encode, exactly as torch_gpubpe.core.reference.to_bytes makes them (its
   encode("utf-16", "surrogatepass").decode("utf-16", "replace")).
*/
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__) && !defined(GPUBPE_NO_SIMD)
#define GPUBPE_SSE2 1
#include <emmintrin.h>
#endif

#define EXPORT __attribute__((visibility("default")))

/* ---- reading the objects ------------------------------------------------------------------ */

EXPORT int64_t gpubpe_scan(int64_t n, const uint64_t *obj, uint64_t str_type,
                           uint64_t bytes_type, const int64_t *layout, uint64_t *src,
                           int64_t *len, int8_t *kind)
{
    /* layout: data offset of a compact ASCII str, of a compact non-ASCII str, offsets of the
       cached UTF-8's length and pointer, offset of a bytes object's buffer. Returns the number
       of documents of kind -1. */
    int64_t unhandled = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *o = (const uint8_t *)(uintptr_t)obj[i];
        uint64_t type;
        int64_t size;
        memcpy(&type, o + 8, 8);
        memcpy(&size, o + 16, 8);
        if (type == bytes_type) {
            src[i] = (uint64_t)(uintptr_t)(o + layout[4]);
            len[i] = size;
            kind[i] = 0;
            continue;
        }
        if (type == str_type) {
            uint32_t st;
            memcpy(&st, o + 32, 4);
            if (st & 32u) {                 /* compact */
                if (st & 64u) {             /* ASCII: the characters are the UTF-8 */
                    src[i] = (uint64_t)(uintptr_t)(o + layout[0]);
                    len[i] = size;
                    kind[i] = 0;
                    continue;
                }
                uint64_t u;
                int64_t ulen;
                memcpy(&u, o + layout[3], 8);
                memcpy(&ulen, o + layout[2], 8);
                if (u && ulen > 0) {        /* UTF-8 cached in the object (a non-ASCII str
                                               has some: length 0 is a cache being filled by
                                               another thread, its pointer set first) */
                    src[i] = u;
                    len[i] = ulen;
                    kind[i] = 0;
                    continue;
                }
                int k = (int)((st >> 2) & 7u);
                if (k == 1 || k == 2 || k == 4) {
                    src[i] = (uint64_t)(uintptr_t)(o + layout[1]);
                    len[i] = size;
                    kind[i] = (int8_t)k;
                    continue;
                }
            }
        }
        src[i] = 0;
        len[i] = 0;
        kind[i] = -1;
        unhandled++;
    }
    return unhandled;
}

/* ---- sizes -------------------------------------------------------------------------------- */

/* UTF-8 bytes of n characters: 1 + [c >= 0x80] + [c >= 0x800] + [c >= 0x10000] each, a lone
   surrogate 3 (U+FFFD), a valid pair 4 in all (2 less than 3 + 3). Counted in blocks with small
   accumulators (vectorised by the compiler); the pairs in a second pass, only where a
   surrogate was seen. */
#define BLOCK 4096
static int64_t size1(const uint8_t *s, int64_t n)
{
    int64_t total = n;
    for (int64_t i = 0; i < n; i += BLOCK) {
        int64_t m = n - i < BLOCK ? n - i : BLOCK;
        uint16_t acc = 0;
        for (int64_t k = 0; k < m; k++)
            acc += (uint16_t)(s[i + k] >> 7);
        total += acc;
    }
    return total;
}

#define PAIRS(s, n, total)                                                                       \
    for (int64_t i = 0; i + 1 < n; i++)                                                          \
        if (s[i] >= 0xD800 && s[i] <= 0xDBFF && s[i + 1] >= 0xDC00 && s[i + 1] <= 0xDFFF) {     \
            total -= 2;                                                                          \
            i++;                                                                                 \
        }

/* Kinds 2 and 4, T the code unit. The accumulators and the surrogate mask are of type T too:
   lanes as wide as the units, so the compiler vectorises the count (a wider mask widens the
   lanes of kind 2); a block's count fits either (at most 3 * BLOCK). For uint16_t the third
   comparison is always false (-Wtype-limits says so; the code is the one the two functions
   written out gave). */
#define SIZE_WIDE(NAME, T)                                                                       \
    static int64_t NAME(const T *s, int64_t n)                                                   \
    {                                                                                            \
        int64_t total = n;                                                                       \
        T sur = 0;                                                                               \
        for (int64_t i = 0; i < n; i += BLOCK) {                                                 \
            int64_t m = n - i < BLOCK ? n - i : BLOCK;                                           \
            T acc = 0;                                                                           \
            for (int64_t k = 0; k < m; k++) {                                                    \
                T c = s[i + k];                                                                  \
                acc += (T)((c >= 0x80) + (c >= 0x800) + (c >= 0x10000));                         \
                sur |= (T)((c & (T)~(T)0x7FF) == 0xD800);                                        \
            }                                                                                    \
            total += acc;                                                                        \
        }                                                                                        \
        if (sur)                                                                                 \
            PAIRS(s, n, total)                                                                   \
        return total;                                                                            \
    }

SIZE_WIDE(size2, uint16_t)
SIZE_WIDE(size4, uint32_t)

EXPORT int64_t gpubpe_measure(int64_t n, const uint64_t *src, const int64_t *len,
                              const int8_t *kind, int64_t *size)
{
    /* size[i]: UTF-8 bytes of document i (its len for kind 0, -1 for kind -1); returns the
       total of the others. */
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        const void *p = (const void *)(uintptr_t)src[i];
        int64_t m = len[i], z;
        switch (kind[i]) {
        case 0: z = m; break;
        case 1: z = size1(p, m); break;
        case 2: z = size2(p, m); break;
        case 4: z = size4(p, m); break;
        default: size[i] = -1; continue;
        }
        size[i] = z;
        total += z;
    }
    return total;
}

/* ---- transcoding -------------------------------------------------------------------------- */

static inline uint8_t *put(uint8_t *o, uint32_t c)
{
    if (c < 0x80) {
        *o++ = (uint8_t)c;
    } else if (c < 0x800) {
        *o++ = (uint8_t)(0xC0 | (c >> 6));
        *o++ = (uint8_t)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        *o++ = (uint8_t)(0xE0 | (c >> 12));
        *o++ = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
        *o++ = (uint8_t)(0x80 | (c & 0x3F));
    } else {
        *o++ = (uint8_t)(0xF0 | (c >> 18));
        *o++ = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
        *o++ = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
        *o++ = (uint8_t)(0x80 | (c & 0x3F));
    }
    return o;
}

/* Each encodes units s[*i..n) into o, stopping once *i reaches `stop` (a pair is not split:
   its high half is read with the low one, so *i may end at stop + 1); returns the new o.
   With SSE2, 16 characters are looked at a time: all ASCII, they are packed to 16 bytes at
   once; else the ASCII ones before the first other one are (the 16 bytes stored, only those
   kept), then that one character is encoded on its own; a block of 8 two-byte characters
   (U+0080..U+07FF, kind 2) is encoded at once; other blocks character by character (`run`).
   A store of 16 bytes never passes the room: it is made only with 16 characters left before
   `stop`, whose UTF-8 takes at least 16 bytes. Without SSE2 (or with GPUBPE_NO_SIMD defined:
   the tests build both), 64-bit words of ASCII. */
#ifdef GPUBPE_SSE2
#define LOAD(p) _mm_loadu_si128((const __m128i *)(p))
#define STORE(p, v) _mm_storeu_si128((__m128i *)(p), v)
#define ASCII_BLOCKS_enc1                                                                        \
    run = 16;                                                                                    \
    while (i + 16 <= stop) {                                                                     \
        __m128i v = LOAD(s + i);                                                                 \
        unsigned m = (unsigned)_mm_movemask_epi8(v);                                             \
        STORE(o, v);                                                                             \
        if (!m) {                                                                                \
            i += 16;                                                                             \
            o += 16;                                                                             \
            continue;                                                                            \
        }                                                                                        \
        unsigned lead = (unsigned)__builtin_ctz(m);                                              \
        i += lead;                                                                               \
        o += lead;                                                                               \
        run = lead ? 1 : 16;                                                                     \
        break;                                                                                   \
    }

#define ASCII_BLOCKS_enc2                                                                        \
    run = 16;                                                                                    \
    while (i + 16 <= stop) {                                                                     \
        const __m128i z = _mm_setzero_si128(), h7 = _mm_set1_epi16((short)0xFF80);              \
        __m128i a = LOAD(s + i), b = LOAD(s + i + 8);                                            \
        unsigned ma = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(a, h7), z));    \
        unsigned mb = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(b, h7), z));    \
        unsigned m = ma | (mb << 16);                                                            \
        if (m == 0xFFFFFFFFu || (m & 1u)) {                                                     \
            STORE(o, _mm_packus_epi16(a, b));                                                    \
            if (m == 0xFFFFFFFFu) {                                                              \
                i += 16;                                                                         \
                o += 16;                                                                         \
                continue;                                                                        \
            }                                                                                    \
            unsigned lead = (unsigned)__builtin_ctz(~m) >> 1;                                    \
            i += lead;                                                                           \
            o += lead;                                                                           \
            run = 1;                                                                             \
            break;                                                                               \
        }                                                                                        \
        if (!ma && _mm_movemask_epi8(_mm_cmpeq_epi16(                                            \
                       _mm_and_si128(a, _mm_set1_epi16((short)0xF800)), z)) == 0xFFFF) {         \
            __m128i lo = _mm_or_si128(_mm_srli_epi16(a, 6), _mm_set1_epi16(0xC0));              \
            __m128i hi = _mm_or_si128(_mm_and_si128(a, _mm_set1_epi16(0x3F)),                    \
                                      _mm_set1_epi16(0x80));                                     \
            STORE(o, _mm_or_si128(lo, _mm_slli_epi16(hi, 8)));   /* 8 two-byte characters */  \
            i += 8;                                                                              \
            o += 16;                                                                             \
            continue;                                                                            \
        }                                                                                        \
        run = 8;                                                                                 \
        break;                                                                                   \
    }

#define ASCII_BLOCKS_enc4                                                                        \
    run = 16;                                                                                    \
    while (i + 16 <= stop) {                                                                     \
        const __m128i z = _mm_setzero_si128(), h7 = _mm_set1_epi32((int)0xFFFFFF80);            \
        __m128i a = LOAD(s + i), b = LOAD(s + i + 4), c = LOAD(s + i + 8), d = LOAD(s + i + 12); \
        uint64_t m = (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi32(_mm_and_si128(a, h7), z)) \
            | (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi32(_mm_and_si128(b, h7), z)) << 16 \
            | (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi32(_mm_and_si128(c, h7), z)) << 32 \
            | (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi32(_mm_and_si128(d, h7), z)) << 48; \
        STORE(o, _mm_packus_epi16(_mm_packs_epi32(a, b), _mm_packs_epi32(c, d)));               \
        if (m == ~0ull) {                                                                        \
            i += 16;                                                                             \
            o += 16;                                                                             \
            continue;                                                                            \
        }                                                                                        \
        unsigned lead = (unsigned)__builtin_ctzll(~m) >> 2;                                      \
        i += lead;                                                                               \
        o += lead;                                                                               \
        run = lead ? 1 : 4;                                                                      \
        break;                                                                                   \
    }
#else
#define ASCII_BLOCKS_WORDS(MASK, PER)                                                            \
    run = 16;                                                                                    \
    while (i + PER <= stop) {                                                                    \
        uint64_t w[PER * sizeof s[0] / 8], any = 0;                                              \
        memcpy(w, s + i, sizeof w);                                                              \
        for (unsigned k = 0; k < sizeof w / 8; k++)                                              \
            any |= w[k];                                                                         \
        if (any & MASK)                                                                          \
            break;                                                                               \
        for (unsigned k = 0; k < PER; k++)                                                       \
            o[k] = (uint8_t)s[i + k];                                                            \
        i += PER;                                                                                \
        o += PER;                                                                                \
    }
#define ASCII_BLOCKS_enc1 ASCII_BLOCKS_WORDS(0x8080808080808080ull, 8)
#define ASCII_BLOCKS_enc2 ASCII_BLOCKS_WORDS(0xFF80FF80FF80FF80ull, 16)
#define ASCII_BLOCKS_enc4 ASCII_BLOCKS_WORDS(0xFFFFFF80FFFFFF80ull, 8)
#endif

static uint8_t *enc1(const uint8_t *s, int64_t n, int64_t *pi, int64_t stop, uint8_t *o)
{
    int64_t i = *pi, run;
    (void)n;
    while (i < stop) {
        ASCII_BLOCKS_enc1
        int64_t lim = stop - i < run ? stop : i + run;
        while (i < lim) {
            uint8_t c = s[i++];
            if (c < 0x80) {
                *o++ = c;
            } else {
                *o++ = (uint8_t)(0xC0 | (c >> 6));
                *o++ = (uint8_t)(0x80 | (c & 0x3F));
            }
        }
    }
    *pi = i;
    return o;
}

#define ENC_WIDE(NAME, T)                                                                        \
    static uint8_t *NAME(const T *s, int64_t n, int64_t *pi, int64_t stop, uint8_t *o)         \
    {                                                                                            \
        int64_t i = *pi, run;                                                                    \
        while (i < stop) {                                                                       \
            ASCII_BLOCKS_##NAME                                                                  \
            int64_t lim = stop - i < run ? stop : i + run;                                       \
            while (i < lim) {                                                                    \
                uint32_t c = s[i++];                                                             \
                if (c < 0x80) {                                                                  \
                    *o++ = (uint8_t)c;                                                           \
                    continue;                                                                    \
                }                                                                                \
                if (c >= 0xD800 && c <= 0xDFFF) {                                                \
                    if (c <= 0xDBFF && i < n && s[i] >= 0xDC00 && s[i] <= 0xDFFF) {              \
                        c = 0x10000 + ((c - 0xD800) << 10) + (s[i] - 0xDC00);                    \
                        i++;                                                                     \
                    } else {                                                                     \
                        c = 0xFFFD;                                                              \
                    }                                                                            \
                }                                                                                \
                o = put(o, c);                                                                   \
            }                                                                                    \
        }                                                                                        \
        *pi = i;                                                                                 \
        return o;                                                                                \
    }

ENC_WIDE(enc2, uint16_t)
ENC_WIDE(enc4, uint32_t)

static const int BOUND[5] = {1, 2, 3, 0, 4};   /* UTF-8 bytes per unit at most, by kind */

/* Document i's units [*pi, stop) into o (at most BOUND * (stop - *pi) + 4 bytes). */
static uint8_t *enc(int k, const void *p, int64_t m, int64_t *pi, int64_t stop, uint8_t *o)
{
    switch (k) {
    case 1: return enc1(p, m, pi, stop, o);
    case 2: return enc2(p, m, pi, stop, o);
    default: return enc4(p, m, pi, stop, o);
    }
}

EXPORT int64_t gpubpe_encode(int64_t n, const uint64_t *src, const int64_t *len,
                             const int8_t *kind, uint8_t *dst, int64_t cap, int64_t *size,
                             uint8_t *bounce, int64_t bounce_cap, int64_t mode)
{
    /* The UTF-8 of documents 0..n-1 back to back from dst (cap bytes of room); size[i] set to
       each one's bytes (0 for kind -1: nothing written). Characters are transcoded straight
       into dst where the room left holds the document's bound (BOUND bytes per unit), unless
       mode & 1; else into the bounce buffer (bounce_cap >= 64 bytes) a piece at a time, each
       piece copied to dst by memcpy: dst is then written in order in large pieces (mode 1:
       for write-combined mapped memory) and needs only the exact room. Returns the bytes
       written, or -1 - i when document i did not fit (nothing written past cap). */
    uint8_t *o = dst, *end = dst + cap;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *p = (const uint8_t *)(uintptr_t)src[i];
        int64_t m = len[i];
        int k = kind[i];
        uint8_t *start = o;
        if (k < 0) {
            size[i] = 0;
            continue;
        }
        if (k == 0) {
            if (m > end - o)
                return -1 - i;
            memcpy(o, p, (size_t)m);
            o += m;
        } else if (!(mode & 1) && m <= (end - o) / BOUND[k] - 1) {
            int64_t j = 0;                  /* room for the bound: straight into dst */
            o = enc(k, p, m, &j, m, o);
        } else if (!bounce) {
            return -1 - i;
        } else {
            int64_t step = (bounce_cap - 8) / BOUND[k], j = 0;
            while (j < m) {
                int64_t stop = m - j < step ? m : j + step;
                uint8_t *b = enc(k, p, m, &j, stop, bounce);   /* (a pair: +4 bytes at most) */
                int64_t got = b - bounce;
                if (got > end - o)
                    return -1 - i;
                memcpy(o, bounce, (size_t)got);
                o += got;
            }
        }
        size[i] = o - start;
    }
    return o - dst;
}

/* ---- SentencePiece's Metaspace normalizer --------------------------------------------------- */

/* The spaces (0x20) in src[0..n). */
EXPORT int64_t gpubpe_count_spaces(const uint8_t *src, int64_t n)
{
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) c += src[i] == 0x20;
    return c;
}

/* Documents k = 0..ndocs-1, bytes src[off[k]..off[k+1]), written to dst with every space as
   U+2581's UTF-8 (E2 96 81), and with `prepend` one more U+2581 before each non-empty one;
   dst_off[k] = where document k begins in dst. Returns the bytes written. All but the range's
   last three bytes are written without a branch, one 4-byte store each (the byte, or E2 96 81),
   the output advanced by one or three; the extra bytes are overwritten by the bytes that
   follow (at least three more), so nothing is written past this range's output (another
   thread's). Little-endian machines only; others take the plain loop. */
EXPORT int64_t gpubpe_metaspace(const uint8_t *src, const int64_t *off, int64_t ndocs,
                                int64_t prepend, uint8_t *dst, int64_t *dst_off)
{
    uint8_t *o = dst;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const int64_t fast_end = off[ndocs] - 3;   /* input index: the branch-free part ends here */
#else
    const int64_t fast_end = 0;                /* (other byte orders: the plain loop only) */
#endif
    for (int64_t k = 0; k < ndocs; k++) {
        dst_off[k] = o - dst;
        int64_t i = off[k], end = off[k + 1];
        if (prepend && i < end) { o[0] = 0xE2; o[1] = 0x96; o[2] = 0x81; o += 3; }
        int64_t stop = end < fast_end ? end : fast_end;
#ifdef GPUBPE_SSE2
        /* 16 bytes at a time: a block without a space copied whole; otherwise its bytes as
           below, the space test taken from the block's mask */
        for (; i + 16 <= stop; i += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(src + i));
            unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(0x20)));
            if (!m) { _mm_storeu_si128((__m128i *)o, v); o += 16; continue; }
            uint8_t *p = o;
            for (int j = 0; j < 16; j++) {
                uint32_t sp = (m >> j) & 1;
                uint32_t w = sp ? 0x8196E2u : src[i + j];   /* (little-endian: E2 96 81) */
                memcpy(p, &w, 4);
                p += 1 + 2 * sp;
            }
            o = p;
        }
#endif
        for (; i < stop; i++) {
            uint32_t sp = src[i] == 0x20;
            uint32_t w = sp ? 0x8196E2u : src[i];
            memcpy(o, &w, 4);
            o += 1 + 2 * sp;
        }
        for (; i < end; i++) {
            if (src[i] == 0x20) { o[0] = 0xE2; o[1] = 0x96; o[2] = 0x81; o += 3; }
            else *o++ = src[i];
        }
    }
    return o - dst;
}

/* The first i in [0, n) with table[src[i]] set, or -1. With `high_only` (every set entry is
   >= 0x80) eight ASCII bytes at a time are passed over with one test. */
EXPORT int64_t gpubpe_find_bytes(const uint8_t *src, int64_t n, const uint8_t *table,
                                 int64_t high_only)
{
    int64_t i = 0;
    if (high_only) {
        for (; i + 8 <= n; i += 8) {
            uint64_t w;
            memcpy(&w, src + i, 8);
            if (!(w & 0x8080808080808080ULL)) continue;
            for (int64_t j = i; j < i + 8; j++) if (table[src[j]]) return j;
        }
    }
    for (; i < n; i++) if (table[src[i]]) return i;
    return -1;
}

/* ---- SentencePiece's byte fallback ---------------------------------------------------------- */

/* Byte-fallback expansion over documents, run by several threads on ranges of documents. A
   token id t >= first is a prefix token: it stands for lens[t - first] byte tokens, listed in
   table[(t - first) * width ...] (uint32). Ids are elem = 2 or 4 bytes each. */

/* The ids that expanding ids[0..n) adds. */
EXPORT int64_t gpubpe_expand_count(const void *ids, int64_t n, int64_t elem, int64_t first,
                                   const uint8_t *lens)
{
    int64_t c = 0;
    if (elem == 2) {
        const uint16_t *p = (const uint16_t *)ids;
        for (int64_t i = 0; i < n; i++) if (p[i] >= first) c += lens[p[i] - first] - 1;
    } else {
        const uint32_t *p = (const uint32_t *)ids;
        for (int64_t i = 0; i < n; i++) if (p[i] >= first) c += lens[p[i] - first] - 1;
    }
    return c;
}

#define GPUBPE_EXPAND_DOCS(T)                                                              \
    do {                                                                                   \
        const T *in = (const T *)ids;                                                      \
        T *dst = (T *)out;                                                                 \
        for (int64_t k = 0; k < ndocs; k++) {                                              \
            new_off[k] = o;                                                                \
            for (int64_t i = off[k]; i < off[k + 1]; i++) {                                \
                uint32_t t = in[i];                                                        \
                if (t < (uint64_t)first) { dst[o++] = (T)t; continue; }                    \
                const uint32_t *e = table + (int64_t)(t - first) * width;                  \
                for (int64_t j = 0; j < lens[t - first]; j++) dst[o++] = (T)e[j];          \
            }                                                                              \
        }                                                                                  \
    } while (0)

/* Documents k = 0..ndocs-1, ids[off[k]..off[k+1]), expanded into out; new_off[k] = where
   document k begins in out. Returns the ids written. */
EXPORT int64_t gpubpe_expand(const void *ids, int64_t elem, int64_t first, const uint32_t *table,
                             int64_t width, const uint8_t *lens, const int64_t *off,
                             int64_t ndocs, void *out, int64_t *new_off)
{
    int64_t o = 0;
    if (elem == 2) GPUBPE_EXPAND_DOCS(uint16_t);
    else GPUBPE_EXPAND_DOCS(uint32_t);
    return o;
}
