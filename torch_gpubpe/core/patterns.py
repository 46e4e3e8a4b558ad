"""The regex pre-tokenizers of real vocabularies (tiktoken's ``pat_str``), by name, and their
CPU oracle (no wgpu, no torch).

A vocabulary made by GPT-2, cl100k_base, Llama 3, Qwen2, Qwen3.5 or o200k_base gives its model's
ids only under that model's split. The GPU computes those splits exactly (:mod:`torch_gpubpe.encoding.regex_pretok`); this module
names the patterns it can do, refuses the others by name, and holds the reference: ``regex``
itself, the engine the patterns are written for.

Families (:data:`FAMILIES`):

* ``"gpt2"`` — GPT-2, r50k_base, p50k_base, p50k_edit (both the original and tiktoken's
  possessive spelling of the pattern, which split alike).
* ``"cl100k"`` — cl100k_base.
* ``"llama3"`` — Llama 3 (and DBRX, ChatGLM4): cl100k_base's pattern as it was before tiktoken
  spelled it possessively, without ``\\s++$`` (a whitespace run after CR/LF at the very end
  splits differently).
* ``"qwen2"`` — Qwen2 (Llama 3's with one digit per ``\\p{N}``).
* ``"qwen35"`` — Qwen3.5 (Qwen2's with ``\\p{M}`` counted as a letter).
* ``"starcoder"`` — StarCoder and Refact: GPT-2's split of the text between digits, each digit
  its own piece (Hugging Face's ``Digits(individual_digits=True)`` before ``ByteLevel``).
* ``"deepseek-coder"`` — DeepSeek Coder: Hugging Face's ``Split`` steps ``[\\r\\n]``,
  ``\\s?\\p{L}+``, ``\\s?\\p{P}+``, the CJK ranges ``[\\u0800-\\u9FA5\\uAC00-\\uD7FF]+``,
  then ``Digits(individual_digits=True)``, each on the pieces of the one before
  (:data:`STAGES_OF`; no single ``pat_str`` spells it).
* ``"deepseek-llm"`` — DeepSeek LLM: Hugging Face's ``Split`` steps ``[\\r\\n]``, ``\\s?`` then
  its own list of letters (:data:`DSLLM_LETTERS`), ``\\s?`` then its own punctuation
  (:data:`DSLLM_PUNCT`), ``\\s+$`` (a piece's trailing spaces), DeepSeek Coder's CJK ranges, then
  ``Digits(individual_digits=True)``.
* ``"whole"`` — no split: each document is one word (SentencePiece BPE; a ``tokenizer.json``
  with no pre-tokenizer).
* ``"metaspace-words"`` — SentencePiece's words: a word starts at each run of ``▁`` (U+2581)
  that follows another code point (``▁+[^▁]*|[^▁]+``, :data:`METASPACE_WORDS_PATTERN`). The
  encoder cuts a SentencePiece vocab's documents there when no token of the vocab joins a code
  point to a following ``▁`` (the ids are those of no split: BPE never merges across such a
  start), so that long documents are many short words.
* ``"nanochat"`` — nanochat's GPT-4-style split (rustbpe's default there): Llama 3's with digits
  in groups of 2 (``\\p{N}{1,2}``).
* ``"o200k"`` — o200k_base and o200k_harmony (GPT-4o, gpt-oss): letter-case classes
  (``[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+`` and the other
  way round, with backtracking between the two classes), case-insensitive contractions attached
  to the word, ``[\\r\\n/]*`` after punctuation.
* ``"bytes-classes"`` — this project's own byte-class rule (DESIGN.md §2), the default of its
  vocabularies; not a regex of this module (see :mod:`torch_gpubpe.encoding.pretokenize`).

Bytes that are not valid UTF-8 (DESIGN.md §1 lets ``bytes`` documents hold any bytes): each
byte of an invalid sequence is one code point of class "other", exactly as
``bytes.decode("utf-8", "surrogateescape")`` turns it into U+DC80..U+DCFF, which ``regex`` sees
as neither letter, digit nor space. (tiktoken has no exact rule for such bytes: its private
``_encode_bytes`` splits the valid prefix and re-encodes the rest heuristically.)

Example::

    >>> from torch_gpubpe.core.patterns import reference_word_starts, split
    >>> split("I'm  ok 12345", "cl100k")
    [b'I', b"'m", b' ', b' ok', b' ', b'123', b'45']
    >>> split("I'm  ok 12345", "gpt2")
    [b'I', b"'m", b' ', b' ok', b' 12345']
    >>> split("HelloWORLDFoo DON'T it's", "o200k")
    [b'Hello', b'WORLDFoo', b" DON'T", b" it's"]
"""

from __future__ import annotations

import functools
import json

import numpy as np

from torch_gpubpe.errors import InputError
from torch_gpubpe.core.reference import to_bytes
from torch_gpubpe.core.vocab import TRAINED_SPLITS

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
R50K_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|"""
                  r""" ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                 r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
                  r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
# nanochat's (GPT-4's, digits in groups of 2): split as Llama 3's with {1,2}
NANOCHAT_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}|"""
                    r""" ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+""")
QWEN35_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"""
                  r""" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
# One regex for Digits(individual_digits) then GPT-2's regex on each piece: a digit is a match
# of its own, and `\s+(?!\S)` sees a digit as the end of its piece.
STARCODER_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+|\s+(?![^\s\p{N}])|\s+"""
O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])

DSCODER_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
# DeepSeek LLM's own letter and punctuation lists (its tokenizer.json, as written there)
DSLLM_LETTERS = (
    "[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1"
    "\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5"
    "\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a"
    "\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d"
    "\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3"
    "\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115"
    "\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f"
    "\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
    "\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf"
    "\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f"
    "\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    "\U000118a0-\U000118df\U0001e900-\U0001e943]")
DSLLM_PUNCT = "[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]"
STAGES_OF = {"deepseek-coder": (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", DSCODER_CJK, r"\p{N}"),
             "deepseek-llm": (r"[\r\n]", r"\s?" + DSLLM_LETTERS + "+", r"\s?" + DSLLM_PUNCT + "+",
                              r"\s+$", DSCODER_CJK, r"\p{N}"),
             "whole": ()}
"""Families that are Hugging Face ``Split(..., "Isolated")`` steps applied one after the other,
each to the pieces of the one before (the last, ``\\p{N}``, is ``Digits(individual_digits)``)."""
FAMILIES = ("gpt2", "cl100k", "qwen2", "o200k", "llama3", "qwen35", "starcoder",
            "deepseek-coder", "whole", "deepseek-llm", "nanochat", "metaspace-words")
"""Regex families the GPU pre-tokenizer does exactly."""
DEFAULT = "bytes-classes"
"""DESIGN.md §2's byte-class rule (this project's vocabularies)."""

# Names and spellings users give, to their family.
_NAMES = {
    "gpt2": "gpt2", "r50k_base": "gpt2", "p50k_base": "gpt2", "p50k_edit": "gpt2",
    "cl100k": "cl100k", "cl100k_base": "cl100k",
    "qwen2": "qwen2",
    "llama3": "llama3", "llama-3": "llama3", "llama-bpe": "llama3",
    "qwen35": "qwen35", "qwen3.5": "qwen35",
    "starcoder": "starcoder", "refact": "starcoder",
    "deepseek-coder": "deepseek-coder", "whole": "whole", "none": "whole",
    "deepseek-llm": "deepseek-llm", "nanochat": "nanochat", "metaspace-words": "metaspace-words",
    "o200k": "o200k", "o200k_base": "o200k", "o200k_harmony": "o200k",
}
_BY_PATTERN = {GPT2_PATTERN: "gpt2", R50K_PATTERN: "gpt2", CL100K_PATTERN: "cl100k",
               QWEN2_PATTERN: "qwen2", O200K_PATTERN: "o200k", LLAMA3_PATTERN: "llama3",
               QWEN35_PATTERN: "qwen35", STARCODER_PATTERN: "starcoder",
               NANOCHAT_PATTERN: "nanochat"}
PATTERN_OF = {"gpt2": R50K_PATTERN, "cl100k": CL100K_PATTERN, "qwen2": QWEN2_PATTERN,
              "o200k": O200K_PATTERN, "llama3": LLAMA3_PATTERN, "qwen35": QWEN35_PATTERN,
              "starcoder": STARCODER_PATTERN, "nanochat": NANOCHAT_PATTERN}
"""The ``pat_str`` of each family (the reference splits with it)."""
if set(PATTERN_OF) != set(TRAINED_SPLITS):
    raise ImportError("torch_gpubpe.core.vocab.TRAINED_SPLITS differs from PATTERN_OF")
METASPACE_WORDS_PATTERN = "\u2581+[^\u2581]*|[^\u2581]+"
"""The ``"metaspace-words"`` split as a regex (the reference; not a model's ``pat_str``)."""
HF_PATTERN_OF = {fam: p.replace("{1,3}+", "{1,3}") for fam, p in PATTERN_OF.items()}
"""The same patterns spelled for Hugging Face's engine (Oniguruma reads ``{1,3}+`` as a
repeated ``{1,3}``, not a possessive one: Llama 3's ``tokenizer.json`` drops the ``+``)."""
_BY_PATTERN.update({p: fam for fam, p in HF_PATTERN_OF.items()})


def resolve(pattern: str) -> str:
    """The family of ``pattern``: a name (``"gpt2"``, ``"r50k_base"``, ``"cl100k_base"``,
    ``"qwen2"``, ``"o200k_base"``, ``"bytes-classes"``…) or a tiktoken ``pat_str`` spelled exactly as one of them.

    Returns:
        one of :data:`FAMILIES`, or :data:`DEFAULT`.
    Raises:
        InputError: a pattern the GPU cannot split exactly (any other regex), naming it and
            the ones it can.
    """
    if not isinstance(pattern, str):
        raise InputError(f"pattern must be a str (a name or a pat_str), got {type(pattern).__name__}")
    from torch_gpubpe.core.vocab import SPLIT_PATTERN, SPLIT_PATTERN_PY

    if pattern in (DEFAULT, "bytes", SPLIT_PATTERN, SPLIT_PATTERN_PY):  # DESIGN.md §2's split
        return DEFAULT
    fam = _NAMES.get(pattern.lower()) or _BY_PATTERN.get(pattern)
    if fam:
        return fam
    raise InputError(
        f"pre-tokenizer pattern {repr(pattern)[:200]} cannot be split exactly on the GPU; supported: "
        f"{', '.join(sorted(_NAMES))}, {DEFAULT!r}, or one of their pat_str spellings "
        "(torch_gpubpe.core.patterns.PATTERN_OF)")


def from_hf_pre_tokenizer(pre_tokenizer: object) -> str:
    """The family of a Hugging Face ``tokenizer.json`` ``"pre_tokenizer"`` entry.

    Accepted: ``ByteLevel`` with ``use_regex`` (GPT-2's split) and no ``add_prefix_space``;
    ``Sequence[Split(Regex(pat), "Isolated"), ByteLevel(use_regex=False)]`` with ``pat`` one of
    :func:`resolve`'s ``pat_str`` (Llama 3, Qwen2); ``Sequence[Digits(individual_digits),
    ByteLevel]`` (StarCoder).

    Raises:
        InputError: any other pre-tokenizer (named), or a pattern the GPU cannot split exactly.
    """
    def byte_level(d: dict, regex_split: bool) -> bool:
        return (d.get("type") == "ByteLevel" and not d.get("add_prefix_space", False)
                and bool(d.get("use_regex", True)) == regex_split)

    if pre_tokenizer is None:
        return "whole"
    d = pre_tokenizer if isinstance(pre_tokenizer, dict) else {}
    if byte_level(d, True):
        return "gpt2"
    steps = d.get("pretokenizers") if d.get("type") == "Sequence" else None
    for fam, stages in STAGES_OF.items():
        if stages and _is_stages(steps, stages):
            return fam
    if (isinstance(steps, list) and len(steps) == 2 and isinstance(steps[0], dict)
            and steps[0].get("type") == "Digits" and steps[0].get("individual_digits")
            and isinstance(steps[1], dict) and byte_level(steps[1], True)):
        return "starcoder"
    if (isinstance(steps, list) and len(steps) == 2 and isinstance(steps[0], dict)
            and steps[0].get("type") == "Split" and steps[0].get("behavior") == "Isolated"
            and not steps[0].get("invert", False) and isinstance(steps[1], dict)
            and byte_level(steps[1], False)):
        pat = (steps[0].get("pattern") or {}).get("Regex")
        if isinstance(pat, str):
            return resolve(pat)
    raise InputError(f"Hugging Face pre-tokenizer {json.dumps(pre_tokenizer)[:300]} is not one "
                     "the GPU splits exactly (ByteLevel with its regex, or Split(Regex) of a "
                     "supported pattern + ByteLevel without it)")


def _is_stages(steps: object, stages: tuple[str, ...]) -> bool:
    """Whether ``tokenizer.json`` pre-tokenizer steps are ``Split(stage, "Isolated")`` for each
    stage but the last, ``Digits(individual_digits=True)``, then ``ByteLevel`` without regex."""
    if not isinstance(steps, list) or len(steps) != len(stages) + 1:
        return False
    if not all(isinstance(s, dict) for s in steps):
        return False
    def spelled(p: object) -> object:  # (a file may hold CR and LF themselves, or escaped)
        return p.replace("\r", "\\r").replace("\n", "\\n") if isinstance(p, str) else p

    for step, pat in zip(steps, stages[:-1]):
        if (step.get("type") != "Split" or step.get("behavior") != "Isolated"
                or step.get("invert", False)
                or spelled((step.get("pattern") or {}).get("Regex")) != spelled(pat)):
            return False
    last, bl = steps[-2], steps[-1]
    return (last.get("type") == "Digits" and bool(last.get("individual_digits"))
            and bl.get("type") == "ByteLevel" and not bl.get("add_prefix_space", False)
            and not bl.get("use_regex", True))


def _stage_starts(text: str, stages: tuple[str, ...]) -> list[int]:
    """Piece starts (char offsets) of ``Split(stage, "Isolated")`` steps one after the other."""
    import regex

    cuts = {0, len(text)}
    for pat in stages:
        rx = regex.compile(pat)
        bounds = sorted(cuts)
        for a, b in zip(bounds, bounds[1:]):
            for m in rx.finditer(text, a, b):
                cuts.add(m.start())
                cuts.add(m.end())
    return sorted(c for c in cuts if c < len(text))


@functools.cache
def _compiled(family: str):
    import regex

    return regex.compile(METASPACE_WORDS_PATTERN if family == "metaspace-words"
                         else PATTERN_OF[family])


@functools.cache
def oracle_substitutes() -> dict[int, int]:
    """``str.translate`` table that keeps the oracle on the table's Unicode version.

    A ``regex`` built for a newer Unicode than the table's (``table()[2]["unicode_version"]``,
    the version of tiktoken's and HF tokenizers' engines) classes newly assigned code points
    as letters, digits or marks where the reference tokenizers see unassigned ones. Each such
    code point maps to a stand-in of the same UTF-8 length whose class the table and this
    ``regex`` agree on, so ``regex.finditer`` splits as the table's version would; the patterns
    read nothing of a non-ASCII code point but its class. Empty when the versions match (the
    table itself is checked against tiktoken and tokenizers on every code point by the tests).
    """
    from torch_gpubpe.core.unicode_gen import NUM_CP, class_bytes, regex_unicode_version

    stage1, stage2, meta = table()
    if regex_unicode_version() == meta["unicode_version"]:
        return {}
    cps = np.arange(NUM_CP)
    ours = stage2[stage1[cps >> 8], cps & 0xFF]
    theirs = class_bytes()
    agree = (ours == theirs) & (cps >= 0x80) & ((cps < 0xD800) | (cps >= 0xE000))
    length = 1 + (cps >= 0x80) + (cps >= 0x800) + (cps >= 0x10000)
    moved = np.flatnonzero((ours != theirs) & ((cps < 0xD800) | (cps >= 0xE000)))
    stand_in: dict[tuple[int, int], int] = {}
    for cp in moved.tolist():
        key = (int(ours[cp]), int(length[cp]))
        if key not in stand_in:
            same = np.flatnonzero(agree & (ours == key[0]) & (length == key[1]))
            if not len(same):
                raise RuntimeError(f"no code point of class {key[0]} and UTF-8 length {key[1]} "
                                   "is classed alike by the table and this regex")
            stand_in[key] = int(same[0])
    return {cp: stand_in[(int(ours[cp]), int(length[cp]))] for cp in moved.tolist()}


def _char_byte_lengths(text: str) -> np.ndarray:
    """UTF-8 length of each char of a surrogateescape-decoded string (escapes are 1 byte)."""
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    lens = 1 + (cps >= 0x80) + (cps >= 0x800) + (cps >= 0x10000)
    lens[(cps >= 0xDC80) & (cps <= 0xDCFF)] = 1
    return lens.astype(np.int64)


def reference_word_starts(document: str | bytes, pattern: str) -> np.ndarray:
    """Where ``regex.finditer(pat_str)`` starts its matches, per byte (the oracle), under the
    table's Unicode version (:func:`oracle_substitutes`).

    Args:
        document: ``str`` (UTF-8 encoded first, lone surrogates → U+FFFD) or bytes (invalid
            UTF-8: one "other" code point per byte, module docs).
        pattern: a family name or ``pat_str`` (:func:`resolve`), not ``"bytes-classes"``.
    Returns:
        bool array of shape ``(len(utf8_bytes),)``: True where a match begins.
    """
    fam = resolve(pattern)
    if fam == DEFAULT:
        raise InputError("reference_word_starts is for regex patterns; the byte-class rule's "
                         "reference is torch_gpubpe.core.reference.word_starts")
    data = to_bytes(document)
    text = data.decode("utf-8", "surrogateescape")
    lens = _char_byte_lengths(text)
    if subs := oracle_substitutes():
        text = text.translate(subs)  # same lengths: the offsets below still hold
    char_off = np.zeros(len(text) + 1, np.int64)
    np.cumsum(lens, out=char_off[1:])
    if fam in STAGES_OF:
        starts = np.array(_stage_starts(text, STAGES_OF[fam]), np.int64)
    else:
        starts = np.fromiter((m.start() for m in _compiled(fam).finditer(text)), np.int64)
    out = np.zeros(len(data), bool)
    out[char_off[starts]] = True
    return out


def split(document: str | bytes, pattern: str) -> list[bytes]:
    """``document``'s UTF-8 bytes cut at :func:`reference_word_starts`."""
    data = to_bytes(document)
    cuts = np.flatnonzero(reference_word_starts(data, pattern)).tolist() + [len(data)]
    return [data[a:b] for a, b in zip(cuts, cuts[1:])]


# -- the code-point class table (torch_gpubpe/core/unicode_gen.py) ------------------------------
@functools.cache
def table() -> tuple[np.ndarray, np.ndarray, dict]:
    """``(stage1 uint16 (4352,), stage2 uint8 (blocks, 256), meta)`` of the checked-in table;
    ``meta`` records the ``regex`` and Unicode versions it was built from."""
    from torch_gpubpe.core.unicode_gen import DATA_FILE

    with np.load(DATA_FILE, allow_pickle=False) as z:
        return z["stage1"], z["stage2"], json.loads(str(z["meta"]))


def table_words(with_sets: bool = True) -> np.ndarray:
    """The table as the GPU reads it: stage1 as u32, then stage2's bytes packed 4 per u32, then
    :func:`set_words` (at :func:`sets_at`). ``with_sets=False``: zeros in their place, for the
    families whose shader never reads them (all but DeepSeek LLM): building the sets runs
    ``regex`` over every code point, a tenth of a second on a fresh process's critical path."""
    stage1, stage2, _ = table()
    sets = set_words() if with_sets else np.zeros(2 * SETS_LIMIT // 32, np.uint32)
    return np.concatenate([stage1.astype(np.uint32), stage2.reshape(-1).view(np.uint32), sets])


def sets_at() -> int:
    """The word of :func:`table_words` where :func:`set_words` begins."""
    stage1, stage2, _ = table()
    return len(stage1) + stage2.size // 4


SETS_LIMIT = 0x1E960
"""Code points past the last of :data:`DSLLM_LETTERS` and :data:`DSLLM_PUNCT` (a multiple of 32)."""


@functools.cache
def set_words() -> np.ndarray:
    """DeepSeek LLM's letter and punctuation lists as the GPU reads them: a bitmap over code
    points ``[0, SETS_LIMIT)`` for each, u32 words, letters first (bit ``cp % 32`` of word
    ``cp // 32``)."""
    import regex

    cps = np.arange(SETS_LIMIT)
    ok = (cps < 0xD800) | (cps > 0xDFFF)
    text = "".join(map(chr, cps[ok].tolist()))
    out = []
    for cls in (DSLLM_LETTERS, DSLLM_PUNCT):
        hit = np.zeros(SETS_LIMIT, bool)
        at = np.fromiter((m.start() for m in regex.finditer(cls, text)), np.int64)
        hit[cps[ok][at]] = True
        out.append(np.packbits(hit, bitorder="little").view(np.uint32))
    return np.concatenate(out)


def classes_of(cps: np.ndarray) -> np.ndarray:
    """Table class bytes (uint8) of code points ``cps`` (any int array)."""
    stage1, stage2, _ = table()
    cps = np.asarray(cps, np.int64)
    return stage2[stage1[cps >> 8], cps & 0xFF]
