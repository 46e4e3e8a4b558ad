r"""GPU word starts of the regex pre-tokenizers of GPT-2, cl100k_base, Qwen2 and o200k_base,
exactly as ``regex.finditer(pat_str)`` splits (wgsl/pretokenize_unicode.wgsl; patterns and oracle in
:mod:`torch_gpubpe.core.patterns`).

UTF-8 is decoded on the GPU and each code point classified through a two-level table built from
the installed ``regex`` module (:mod:`torch_gpubpe.core.unicode_gen`). Derivation of the rules: a
match of these patterns can be told from the code points around it, except for three facts
about whole runs — how many digits precede in a digit run (cl100k groups them by 3 from the
left), whether a CR/LF run follows an "other" (then ``[\r\n]*`` of the punctuation match took
it), and what ends a run of spaces (a non-space, CR/LF, or the document's end: ``\s+(?!\S)``,
``\s*[\r\n]``, ``\s++$``). Those are carried by two finite automata, scanned across threads,
workgroups and blocks by composing their transition functions (associative), so no rule
depends on where a chunk, workgroup or slice begins. GPT-2's pattern has none of the three
(its digit runs are not grouped, its punctuation takes no CR/LF, and ``\s+(?!\S)`` only
looks at the code point after a space), so GPT-2 runs one pass, ``pt_local``, from the codes of
its workgroup's block and a 32-byte halo kept in workgroup memory.

o200k_base (derivation; checked against ``regex`` on every string of up to 5 code points over
13 classes, tests/test_encode_regex_pretok.py). Classes: u = ``[\p{Lu}\p{Lt}]``, l = ``\p{Ll}``,
b = ``[\p{Lm}\p{Lo}\p{M}]`` (both case classes; a mark is not ``\p{L}``, so it is also
"other" for ``[^\r\n\p{L}\p{N}]?`` and ``[^\s\p{L}\p{N}]+``), W = u ∪ l ∪ b. No
alternative matches the empty string and every code point is matched by one, so the matches
tile the text and the word starts are the finditer process itself. At a match start p:

* a code point of W: a letter match (a mark as prefix gives the same end as a mark as b).
  ``[U]*`` takes the run of u/b; if an l follows, ``[L]+`` takes the run of l/b after it and
  the match ends before the next u. If no l follows, the match backtracks to end after the
  last b of the run (a new match, of ``[U]+`` alone, takes the u's left), or, with no b, the
  second alternative takes the whole run. Either way the last match of a W run reaches its
  end and takes a contraction there;
* "other" or a space before a code point of W: the prefix of a letter match;
* "other" otherwise, or U+0020 before "other": ``[^\s\p{L}\p{N}]+`` takes the run of
  other and marks, then ``[\r\n/]*`` the run of CR, LF and "/" after it;
* a digit: ``\p{N}{1,3}``;
* a space otherwise: ``\s*[\r\n]+`` to the run's last CR/LF if it has one, else
  ``\s+(?!\S)`` leaves the last space of the run to the code point after it (unless the
  run ends the document), and a space before a digit, CR/LF... alone is ``\s+``.

So the left automaton F is "which match the previous code point is in" (7 states: none that
takes more, letter match before / after an l, the other-run, its CR/LF/"/" tail, a contraction
with 1 or 2 code points to go), read with a lookahead of 2 code points (prefixes,
contractions), times the digit count mod 3; the right automaton is the space-run state times
"the u run from here is followed by a non-letter" (the backtracking).

Slices: a batch above the storage-binding limit is cut at document boundaries or between two
ASCII bytes whose classes fix both automata (not after a digit or CR/LF, not before a
non-CR/LF space; o200k: after a space, a digit or a letter of no contraction, before no
non-CR/LF space, no upper-case letter, no digit after a digit); each slice carries a 64-byte
halo of context on each side. A document with no such point across a whole slice (hundreds of
MB of digits or spaces; for o200k also of text with no ASCII such as " a", e.g. CJK without
spaces) is refused by name.

Example::

    >>> from torch_gpubpe.encoding.regex_pretok import word_starts
    >>> [m.nonzero()[0].tolist() for m in word_starts(["I'm  ok 12345"], "cl100k")]
    [[0, 1, 3, 4, 7, 8, 11]]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from torch_gpubpe.errors import InputError
from torch_gpubpe.core.patterns import (DEFAULT, FAMILIES, SETS_LIMIT, classes_of, resolve,
                                        set_words, sets_at, table_words)
from torch_gpubpe.core.packing import pack_documents
from torch_gpubpe.encoding.layout import WG
from torch_gpubpe.gpu.shaders import parse_wgsl, shader_source

_SHADER = "pretokenize_unicode"
_C = parse_wgsl(shader_source(_SHADER)).consts
# (WG: threads per workgroup; pt_local's tile, TILE_WORDS in the WGSL, is sized for 256 of them)
CHUNK = _C["CHUNK"]        # bytes per thread = bits of one mask word
BLOCK = WG * CHUNK
HALO = 64                  # context bytes on each side of a slice cut inside a document
# Classes of the kernel, for the ASCII bytes that may end or begin a slice.
K_L, K_N, K_O, K_SP, K_WS, K_NL = (_C[k] for k in ("K_L", "K_N", "K_O", "K_SP", "K_WS", "K_NL"))
if _C["STAGE1_LEN"] * 256 != 0x110000:
    raise ImportError("wgsl/pretokenize_unicode.wgsl STAGE1_LEN does not cover 0x110000 code points")
if _C["SETS_LIMIT"] != SETS_LIMIT:
    raise ImportError("wgsl/pretokenize_unicode.wgsl SETS_LIMIT is not torch_gpubpe.core.patterns'")
PAT_CONSTS = {"gpt2": "PAT_GPT2", "cl100k": "PAT_CL100K", "qwen2": "PAT_QWEN2",
              "o200k": "PAT_O200K", "llama3": "PAT_LLAMA3", "qwen35": "PAT_QWEN35",
              "starcoder": "PAT_STARCODER", "deepseek-coder": "PAT_DSCODER", "whole": "PAT_WHOLE",
              "deepseek-llm": "PAT_DSLLM", "nanochat": "PAT_NANOCHAT",
              "metaspace-words": "PAT_METASPACE"}
"""Each family's constant in wgsl/pretokenize_unicode.wgsl: its value is the pipeline's
``PATTERN`` override."""
if set(PAT_CONSTS) != set(FAMILIES) or \
        len({_C[c] for c in PAT_CONSTS.values()}) != len(PAT_CONSTS):
    raise ImportError("wgsl/pretokenize_unicode.wgsl's PAT_* do not name each family of "
                      "torch_gpubpe.core.patterns.FAMILIES once")


def _ascii_kinds() -> np.ndarray:
    base = classes_of(np.arange(128)) & 3
    kind = np.choose(base, [K_L, K_N, K_O, K_WS]).astype(np.int64)
    kind[0x20], kind[0x0A], kind[0x0D] = K_SP, K_NL, K_NL
    return kind


def _f_state_after(kind: int) -> int:
    """F state after a code point of ``kind`` that resets it (not a digit, not CR/LF)."""
    return _C["F_OTHER"] if kind == K_O else 0


def _b_state_at(kind: int) -> int:
    """B state at a code point of ``kind`` that sets it (not a non-CR/LF space)."""
    return _C["B_NL"] if kind == K_NL else _C["B_WORD"]


def _o200k_cuts() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """o200k's safe cut points between ASCII bytes x, y (``safe[x, y]``), the F state after x
    (``f_after[x, y]``) and the B state at y (``b_at[y]``), as wgsl/pretokenize_unicode.wgsl's
    o200k automata define them. F after x does not depend on what came before when x is a
    space (its match ends at x or takes y as its prefix's word), a digit (its match ends,
    and y is no digit) or a letter that no contraction holds; B at y does not depend on what
    follows when y is no space of a run and no upper-case letter."""
    base = classes_of(np.arange(128)) & 3
    letter, digit, other, space = base == 0, base == 1, base == 2, base == 3
    upper = np.zeros(128, bool)
    upper[ord("A") : ord("Z") + 1] = True
    contr = np.zeros(128, bool)
    contr[[ord(c) for c in "sdmtlvreSDMTLVRE"]] = True
    nl = np.zeros(128, bool)
    nl[[0x0A, 0x0D]] = True
    run_space = space & ~nl          # U+0020 and the other ASCII \s but CR, LF
    sp = np.zeros(128, bool)
    sp[0x20] = True
    x_ok = run_space | digit | (letter & ~contr)
    y_ok = ~run_space & ~upper
    safe = np.zeros((256, 256), bool)
    safe[:128, :128] = x_ok[:, None] & y_ok[None, :] & ~(digit[:, None] & digit[None, :])
    f = np.zeros((256, 256), np.int64)
    O_END, O_LU, O_LL, O_Q = (_C[k] for k in ("O_END", "O_LU", "O_LL", "O_Q"))
    for x in np.flatnonzero(x_ok):
        for y in range(128):
            if digit[x]:
                st = O_END
            elif letter[x]:
                st = O_LU if upper[x] else O_LL
            elif letter[y]:
                st = O_LU                  # the space is the prefix of y's letter match
            elif sp[x] and other[y]:
                st = O_Q                   # ` ?[^\s\p{L}\p{N}]+`
            else:
                st = O_END
            f[x, y] = st
    b = np.zeros(256, np.int64)
    for y in range(128):
        b[y] = (_C["B_NL"] if nl[y] else _C["B_WORD"]) | (0 if letter[y] else 4)
    return safe, f, b


def _dsllm_b_at() -> np.ndarray:
    """DeepSeek LLM's B state (wgsl ``DL_*``) at each ASCII code point that sets it: its letters
    ``DL_T``, its other punctuation ``DL_EQ``, the rest ``DL_EO`` (a space never starts a
    slice's right halo)."""
    bits = np.unpackbits(set_words()[:4].view(np.uint8), bitorder="little")
    sets_limit = SETS_LIMIT // 32
    punct = np.unpackbits(set_words()[sets_limit : sets_limit + 4].view(np.uint8),
                          bitorder="little")
    out = np.where(bits[:128] == 1, _C["DL_T"],
                   np.where(punct[:128] == 1, _C["DL_EQ"], _C["DL_EO"]))
    out[[0x0A, 0x0D]] = _C["DL_T"]
    return out


SCANNED_PASSES = ("pt_classify", "pt_scan_blocks", "pt_mark")


def passes(family: str) -> tuple[str, ...]:
    """The entry points of wgsl/pretokenize_unicode.wgsl that split ``family``, in order:
    GPT-2's rules and the like are local (no automata): one pass, ``pt_local``; the others
    scan."""
    if resolve(family) in ("gpt2", "starcoder", "deepseek-coder", "whole", "metaspace-words"):
        return ("pt_local",)
    return SCANNED_PASSES


def pipeline_specs(family: str) -> list[tuple[str, str, dict]]:
    """``(shader, entry point, constants)`` of the pipelines that split ``family`` (for
    :meth:`~torch_gpubpe.gpu.device.GPU.compile_pipelines`)."""
    fam = resolve(family)
    return [(_SHADER, e, {"WG": WG, "PATTERN": _C[PAT_CONSTS[fam]]}) for e in passes(fam)]


class UnicodePreTokenizer:
    """The passes of wgsl/pretokenize_unicode.wgsl for one pattern family (:attr:`PASSES`:
    ``pt_classify → pt_scan_blocks → pt_mark``; GPT-2, whose rules read only the code points
    around a byte, one pass ``pt_local``).

    Args:
        pattern: a name or ``pat_str`` of :func:`torch_gpubpe.core.patterns.resolve`.
        max_slice_bytes: bytes per GPU pass (default: what one storage binding holds); smaller
            values are for tests of the slicing.
    Raises:
        InputError: a pattern the GPU cannot split exactly, or ``"bytes-classes"`` (that rule
            is :class:`torch_gpubpe.encoding.pretokenize.GPUPreTokenizer`).
    """

    def __init__(self, pattern: str, *, gpu=None, max_slice_bytes: int | None = None) -> None:
        fam = resolve(pattern)
        if fam == DEFAULT:
            raise InputError("the byte-class rule is torch_gpubpe.encoding.pretokenize.GPUPreTokenizer")
        from torch_gpubpe.gpu.device import get_gpu

        self.family = fam
        self.gpu = g = gpu or get_gpu()
        self.PASSES = passes(fam)
        self.pipes = dict(zip(self.PASSES, g.compile_pipelines(pipeline_specs(fam))))
        U = g.wgpu.BufferUsage
        tw = table_words(with_sets=fam == "deepseek-llm")   # (only its shader reads them)
        self.table = g.buffer(tw.nbytes, U.STORAGE | U.COPY_DST, "pretok_unicode.table")
        g.device.queue.write_buffer(self.table, 0, tw)
        limit = (g.binding_bytes(1) - 2 * BLOCK) // BLOCK * BLOCK  # positions < 2^31
        self.max_slice_bytes = max(4 * HALO, min(limit, max_slice_bytes or limit))
        self._kind = _ascii_kinds()
        k = self._kind
        if fam == "o200k":
            self._safe, self._f_after, self._b_at = _o200k_cuts()
        else:
            before = np.zeros(256, bool)   # byte c-1 of a cut point c
            before[:128] = (k != K_N) & (k != K_NL)
            at = np.zeros(256, bool)       # byte c of a cut point c
            at[:128] = (k != K_SP) & (k != K_WS)
            self._safe = before[:, None] & at[None, :]
            self._f_after = np.zeros((256, 256), np.int64)
            self._f_after[:128, :] = np.array([_f_state_after(int(x)) for x in k])[:, None]
            self._b_at = np.zeros(256, np.int64)
            self._b_at[:128] = [_b_state_at(int(x)) for x in k]
            if fam == "deepseek-llm":
                self._b_at[:128] = _dsllm_b_at()
        self._cap = 0

    def scratch(self, cap: int, text, bits, label: str) -> PreTokScratch:
        """GPU buffers for slices of up to ``cap`` bytes over the caller's ``text`` and
        ``bits`` buffers (layouts of wgsl/pretokenize_unicode.wgsl bindings 0 and 1); its
        ``mask`` buffer receives the word starts."""
        return PreTokScratch(self, cap, text, bits, label)

    PASSES = SCANNED_PASSES

    def record(self, enc, sc: PreTokScratch, n: int, c0: int = 0, c1: int | None = None,
               f_in: int = 0, b_in: int = 0, timestamps=None) -> None:
        """Write the parameters and record the passes over ``n`` bytes into ``enc``
        (the caller submits); the automata read bytes ``[c0, c1)`` with states ``f_in`` before
        ``c0`` and ``b_in`` at ``c1`` (both ignored at document starts). ``timestamps``:
        ``(query_set, first)``: pass k writes its begin and end at ``first + 2k``, ``+ 2k + 1``
        (the order of :attr:`PASSES`)."""
        g = self.gpu
        nb = -(-n // BLOCK)
        c1 = n if c1 is None else c1
        g.device.queue.write_buffer(sc.params, 0, np.array(
            [n, nb, c0, c1, f_in, b_in, sets_at()], np.uint32))
        grids = {"pt_classify": g.grid(nb), "pt_scan_blocks": (1, 1), "pt_mark": g.grid(nb),
                 "pt_local": g.grid(nb)}
        for k, e in enumerate(self.PASSES):
            grid = grids[e]
            kw = {}
            if timestamps is not None:
                kw["timestamp_writes"] = {"query_set": timestamps[0],
                                          "beginning_of_pass_write_index": timestamps[1] + 2 * k,
                                          "end_of_pass_write_index": timestamps[1] + 2 * k + 1}
            cp = enc.begin_compute_pass(label=e, **kw)
            cp.set_pipeline(self.pipes[e])
            cp.set_bind_group(0, sc.bg[e])
            cp.dispatch_workgroups(*grid)
            cp.end()

    def _ensure(self, n: int) -> None:
        if n <= self._cap:
            return
        g, U = self.gpu, self.gpu.wgpu.BufferUsage
        cap = min(max(n, int(self._cap * 1.5), BLOCK), self.max_slice_bytes + 2 * HALO)
        lab = "pretok_unicode"
        self.text = g.buffer(cap + 16, U.STORAGE | U.COPY_DST, f"{lab}.text")
        self.bits = g.buffer((cap + 1 + 31) // 32 * 4 + 8, U.STORAGE | U.COPY_DST, f"{lab}.doc_bits")
        self.sc = self.scratch(cap, self.text, self.bits, lab)
        self.rb = g.buffer(self.sc.mask.size, U.MAP_READ | U.COPY_DST, f"{lab}.readback")
        self._cap = cap

    # -- slicing -------------------------------------------------------------------------
    def _cut(self, data: np.ndarray, is_start: np.ndarray, c0: int, target: int) -> int:
        """The last cut point in ``(c0, target]``: a document start or a safe ASCII pair."""
        width = 1 << 16
        hi = target
        while hi > c0:
            a = max(c0 + 1, hi - width)
            c = np.arange(a, hi + 1)
            ok = is_start[c] | self._safe[data[c - 1], data[c]]
            idx = np.flatnonzero(ok)
            if len(idx):
                return int(c[idx[-1]])
            hi = a - 1
            width *= 4
        raise InputError(
            f"bytes {c0}..{target} of the batch hold no point where the {self.family!r} "
            "pre-tokenizer can be cut into GPU slices (a run of digits, spaces or CR/LF, or for "
            "o200k of text with no ASCII pair such as ' a', longer than a slice of "
            f"{self.max_slice_bytes} bytes); split such documents first")

    def mask(self, data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Word starts of a packed batch (:func:`torch_gpubpe.encoding.pretokenize.pack_documents`).

        Args:
            data: uint8, shape ``(n,)``; offsets: int64, shape ``(num_docs + 1,)``.
        Returns:
            bool array of shape ``(n,)``: True where a match of the pattern begins.
        Raises:
            InputError: a batch that cannot be sliced (see the module docs).
        """
        data = np.ascontiguousarray(data, np.uint8)
        n = len(data)
        out = np.zeros(n, bool)
        is_start = np.zeros(n + 1, bool)
        st = np.asarray(offsets, np.int64)
        is_start[st[st <= n]] = True
        is_start[n] = True
        c0 = 0
        while c0 < n:
            room = self.max_slice_bytes - 2 * HALO
            c1 = n if n - c0 <= room else self._cut(data, is_start, c0, c0 + room)
            lo, hi = max(0, c0 - HALO), min(n, c1 + HALO)
            f_in = 0 if is_start[c0] else int(self._f_after[data[c0 - 1], data[c0]])
            b_in = 0 if is_start[c1] else int(self._b_at[data[c1]])
            with self.gpu.operation(f"{self.family} pre-tokenization of bytes {c0}..{c1}"):
                m = self._run(data[lo:hi], is_start[lo : hi + 1], c0 - lo, c1 - lo, f_in, b_in)
            out[c0:c1] = m[c0 - lo : c1 - lo]
            c0 = c1
        return out

    def _run(self, buf: np.ndarray, starts: np.ndarray, c0: int, c1: int, f_in: int,
             b_in: int) -> np.ndarray:
        g = self.gpu
        n = len(buf)
        self._ensure(n)
        q = g.device.queue
        text = np.zeros((n + 3) // 4 * 4 + 4, np.uint8)
        text[:n] = buf
        q.write_buffer(self.text, 0, text)
        bits = np.packbits(starts, bitorder="little")
        bits = np.concatenate([bits, np.zeros(-len(bits) % 4 + 4, np.uint8)])
        q.write_buffer(self.bits, 0, bits)
        enc = g.device.create_command_encoder(label="pretok_unicode")
        self.record(enc, self.sc, n, c0, c1, f_in, b_in)
        q.submit([enc.finish()])
        words = g.read_u32(self.sc.mask, 0, -(-n // 32), staging=self.rb,
                           what="pre-tokenization mask readback")
        return np.unpackbits(words.view(np.uint8), bitorder="little")[:n].astype(bool)


class PreTokScratch:
    """Per-slice GPU buffers of :class:`UnicodePreTokenizer` (see :meth:`~UnicodePreTokenizer.scratch`).

    Attributes:
        mask: storage buffer, u32 words, bit i set iff byte i starts a word.
    """

    def __init__(self, pre: UnicodePreTokenizer, cap: int, text, bits, label: str) -> None:
        g, U = pre.gpu, pre.gpu.wgpu.BufferUsage
        nb = -(-max(cap, 1) // BLOCK)
        self.cap = cap
        self.mask = g.buffer(nb * WG * 4, U.STORAGE | U.COPY_SRC | U.COPY_DST, f"{label}.mask")
        self.params = g.buffer(32, U.UNIFORM | U.COPY_DST, f"{label}.params")
        bind = {0: text, 1: bits, 2: pre.table, 6: self.mask, 7: self.params}
        if "pt_classify" in pre.PASSES:  # the scanned passes' codes and automaton functions
            bind[3] = self.codes = g.buffer(nb * BLOCK, U.STORAGE, f"{label}.codes")
            bind[4] = self.thr = g.buffer(nb * WG * 8, U.STORAGE, f"{label}.thr")
            bind[5] = self.blk = g.buffer(nb * 16, U.STORAGE, f"{label}.blk")
        else:  # pt_local keeps its codes in workgroup memory; `codes` is bound, never read
            bind[3] = self.codes = g.buffer(16, U.STORAGE, f"{label}.codes_unused")
        info = parse_wgsl(shader_source(_SHADER))
        self.bg = {e: g.bind_group(pre.pipes[e],
                                   {b: bind[b] for b in info.entry_bindings(e).values()},
                                   label=f"{label}.{e}") for e in pre.PASSES}


_CACHE: dict[tuple[str, int | None], UnicodePreTokenizer] = {}


def _pretokenizer(family: str, max_slice_bytes: int | None) -> UnicodePreTokenizer:
    """One pre-tokenizer per (family, slice size) and device, kept for the process."""
    from torch_gpubpe.gpu.device import get_gpu

    key = (family, max_slice_bytes)
    pre = _CACHE.get(key)
    if pre is None or pre.gpu is not get_gpu():
        pre = _CACHE[key] = UnicodePreTokenizer(family, max_slice_bytes=max_slice_bytes)
    return pre


def word_starts(documents: Sequence[str | bytes], pattern: str = "gpt2", *,
                max_slice_bytes: int | None = None) -> list[np.ndarray]:
    """Per document, where the matches of ``pattern`` begin, computed on the GPU.

    Args:
        documents: ``str`` (UTF-8; lone surrogates → U+FFFD) or bytes-like items.
        pattern: ``"gpt2"`` (r50k/p50k), ``"cl100k"``, ``"qwen2"``, ``"o200k"`` or one of
            their ``pat_str``
            (:func:`torch_gpubpe.core.patterns.resolve`).
    Returns:
        one bool array per document, shape ``(len(doc_bytes),)``; equal to
        :func:`torch_gpubpe.core.patterns.reference_word_starts`.
    Raises:
        InputError: an unsupported pattern (named), or a bad document (index named).
    """
    pre = _pretokenizer(resolve(pattern), max_slice_bytes)
    data, offsets = pack_documents(documents)
    m = pre.mask(data, offsets) if len(data) else np.zeros(0, bool)
    return [m[offsets[k] : offsets[k + 1]] for k in range(len(offsets) - 1)]
