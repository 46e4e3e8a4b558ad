"""Build the code-point class table of the Unicode pre-tokenizers (run at build time, output
checked in as ``torch_gpubpe/tables/unicode_classes.npz``).

The classes follow **Unicode ``UNICODE_VERSION``**, the version of the regex engines of the
tokenizers whose ids users compare with: tiktoken's (``fancy-regex`` over Rust ``regex``) and
Hugging Face tokenizers' (Oniguruma) agree with each other and with Python ``regex`` built for that
version on every class of every code point (checked by the tests against the installed tiktoken and
tokenizers). A newer ``regex`` knows newer code points (Unicode 17 assigned 4,644 letters): a table
built from it would split those differently from tiktoken, so the generator refuses any ``regex``
but the one for ``UNICODE_VERSION`` (``pip install regex==REGEX_VERSION``), and ``--report``
lists, without failing, the code points whose class the installed ``regex`` or tiktoken sees
differently from the table.

The table is made by running ``regex`` over a string of all 0x110000 code points (surrogates
included), so a class can never disagree with the patterns it serves. The ``regex`` version and
its Unicode version are recorded in the file.

One byte per code point:

======  ===================================================================================
bits    meaning
======  ===================================================================================
0-1     base class: 0 ``\\p{L}``, 1 ``\\p{N}``, 2 other, 3 ``\\s`` (regex's White_Space)
2       ``[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]`` (o200k's upper-case-like class)
3       ``[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]`` (o200k's lower-case-like class)
4-7     0, or 1 + the index in ``CONTRACTION_LETTERS`` of the letter it matches under ``(?i)``,
        or 15 for ``\\p{P}`` (punctuation: "other", no mark, no contraction letter)
======  ===================================================================================

Stored as a two-level table: ``stage1[cp >> 8]`` (uint16) is a block number, ``stage2[block,
cp & 255]`` (uint8) the class byte.

Run: ``python -m torch_gpubpe.core.unicode_gen`` (rewrites the data file; needs ``regex`` for
``UNICODE_VERSION``), ``... --check`` (the file is what that ``regex`` builds) or ``... --report``
(any ``regex``: what a newer Unicode would change; exits 0).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

UNICODE_VERSION = "16.0.0"   # tiktoken 0.14 and tokenizers 0.23's regex engines
REGEX_VERSION = "2025.9.18"  # the last ``regex`` release for UNICODE_VERSION (the test oracle's pin)
CONTRACTION_LETTERS = "sdmtlvre"  # the letters after ' in every family's contractions
NUM_CP = 0x110000
DATA_FILE = Path(__file__).resolve().parent / "tables" / "unicode_classes.npz"


def regex_version() -> str:
    """The installed ``regex`` distribution's version (``regex.__version__`` is the engine's)."""
    from importlib import metadata

    return metadata.version("regex")


def regex_unicode_version() -> str:
    """The Unicode version the installed ``regex`` declares ("This module supports Unicode X")."""
    from importlib import metadata

    import regex

    text = metadata.metadata("regex").get_payload() or ""
    m = regex.search(r"supports Unicode (\d+\.\d+(?:\.\d+)?)", text)
    if not m:
        raise RuntimeError("the installed regex package does not state its Unicode version")
    return m.group(1)


CLASS_PATTERNS = {
    "L": r"\p{L}", "N": r"\p{N}", "S": r"\s",
    "upper": r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", "lower": r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]",
    "P": r"\p{P}",
    **{f"(?i){c}": f"(?i:{c})" for c in CONTRACTION_LETTERS},
}


def regex_members(pattern: str) -> np.ndarray:
    """bool ``(0x110000,)``: the code points the installed ``regex`` matches with ``pattern``."""
    import regex

    hit = np.zeros(NUM_CP, bool)
    hit[[m.start() for m in regex.finditer(pattern, "".join(map(chr, range(NUM_CP))))]] = True
    return hit


def tiktoken_members(pattern: str) -> np.ndarray:
    """bool ``(0x110000,)``: the code points tiktoken's regex engine matches with ``pattern``
    (surrogates, which tiktoken cannot take, are False). tiktoken encodes only the matches of its
    ``pat_str``, so over a byte-only vocabulary the decoded output is the matched code points."""
    import tiktoken

    cps = np.r_[0:0xD800, 0xE000:NUM_CP]
    enc = tiktoken.Encoding(name="unicode-probe", pat_str=pattern,
                            mergeable_ranks={bytes([b]): b for b in range(256)}, special_tokens={})
    matched = enc.decode_bytes(enc.encode_ordinary("".join(map(chr, cps)))).decode()
    hit = np.zeros(NUM_CP, bool)
    hit[np.frombuffer(matched.encode("utf-32-le"), np.uint32)] = True
    return hit


def class_bytes(members=regex_members) -> np.ndarray:
    """uint8 array of shape ``(0x110000,)``: the class byte of every code point (module docs),
    as ``members(pattern)`` (:func:`regex_members` or :func:`tiktoken_members`) sees them."""
    P = CLASS_PATTERNS
    L, N, S = members(P["L"]), members(P["N"]), members(P["S"])
    if (L & N).any() or (L & S).any() or (N & S).any():
        raise RuntimeError("regex's \\p{L}, \\p{N} and \\s overlap: the table cannot hold them")
    out = np.full(NUM_CP, 2, np.uint8)
    out[L], out[N], out[S] = 0, 1, 3
    out[members(P["upper"])] |= 4
    out[members(P["lower"])] |= 8
    for k, letter in enumerate(CONTRACTION_LETTERS):
        hit = members(P[f"(?i){letter}"])
        if (out[hit] >> 4).any():
            raise RuntimeError(f"a code point folds to two contraction letters ({letter})")
        out[hit] |= (k + 1) << 4
    punct = members(P["P"])
    if (out[punct] != 2).any():
        raise RuntimeError("a \\p{P} code point is a letter, digit, space, mark or contraction "
                           "letter: the table cannot mark it")
    out[punct] |= 0xF0
    both, neither = (out & 12) == 12, (out & 12) == 0
    if (out[both] >> 4).any() or ((out[both] & 3) % 2).any() or ((out & 3) == 0)[neither].any():
        # wgsl/pretokenize_unicode.wgsl's o200k codes: a code point of both case classes is a
        # letter or other (a mark) and folds to no contraction letter; every letter has a class
        raise RuntimeError("o200k's case classes do not fit the shader's byte codes")
    return out


def two_level(cls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(stage1 uint16 (4352,), stage2 uint8 (blocks, 256))`` with identical blocks shared."""
    blocks = cls.reshape(-1, 256)
    uniq, inverse = np.unique(blocks, axis=0, return_inverse=True)
    return inverse.reshape(-1).astype(np.uint16), uniq.astype(np.uint8)


def changed_classes(table: np.ndarray, other: np.ndarray) -> dict[str, list[int]]:
    """The code points of each class (:data:`CLASS_PATTERNS` key) that ``other`` (class bytes,
    e.g. :func:`class_bytes` under a newer ``regex``) places differently from ``table``."""
    fields = {"L": (3, 0), "N": (3, 1), "S": (3, 3), "upper": (4, 4), "lower": (8, 8),
              **{f"(?i){c}": (0xF0, (k + 1) << 4) for k, c in enumerate(CONTRACTION_LETTERS)},
              "P": (0xF0, 0xF0)}
    return {name: np.flatnonzero(((table & mask) == val) != ((other & mask) == val)).tolist()
            for name, (mask, val) in fields.items()
            if (((table & mask) == val) != ((other & mask) == val)).any()}


def report(table: np.ndarray) -> str:
    """What the installed ``regex`` (and tiktoken, where installed) would change in ``table``."""

    lines = [f"table: Unicode {UNICODE_VERSION}; installed regex {regex_version()} "
             f"(Unicode {regex_unicode_version()})"]
    peers = [("regex", regex_members)]
    try:
        import tiktoken

        peers.append((f"tiktoken {tiktoken.__version__}", tiktoken_members))
    except ImportError:
        pass
    for name, members in peers:
        changed = changed_classes(table, class_bytes(members))
        if not changed:
            lines.append(f"{name}: every code point in the table's class")
        for cls, cps in changed.items():
            shown = " ".join(f"U+{c:04X}" for c in cps[:12])
            lines.append(f"{name}: {cls}: {len(cps)} code points differ ({shown}"
                         f"{' ...' if len(cps) > 12 else ''})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    import sys


    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--report"]:
        with np.load(DATA_FILE, allow_pickle=False) as z:
            stage1, stage2 = z["stage1"], z["stage2"]
        cps = np.arange(NUM_CP)
        print(report(stage2[stage1[cps >> 8], cps & 255]))
        return
    if argv == ["--check"]:  # the table == what this regex (the pinned one) builds: exit 0
        with np.load(DATA_FILE, allow_pickle=False) as z:
            stage1, stage2 = z["stage1"], z["stage2"]
        fresh = two_level(class_bytes())
        if regex_unicode_version() != UNICODE_VERSION or not (
                np.array_equal(fresh[0], stage1) and np.array_equal(fresh[1], stage2)):
            raise SystemExit(f"{DATA_FILE} is not what regex {regex_version()} (Unicode "
                             f"{regex_unicode_version()}) builds")
        print(f"{DATA_FILE}: as regex {regex_version()} builds it (Unicode {UNICODE_VERSION})")
        return
    if regex_unicode_version() != UNICODE_VERSION:
        raise SystemExit(f"this regex ({regex_version()}) is for Unicode "
                         f"{regex_unicode_version()}; the table follows Unicode {UNICODE_VERSION} "
                         f"(tiktoken's and HF tokenizers' engines): pip install "
                         f"regex=={REGEX_VERSION}")
    stage1, stage2 = two_level(class_bytes())
    meta = {"regex_version": regex_version(), "unicode_version": regex_unicode_version(),
            "contraction_letters": CONTRACTION_LETTERS}
    DATA_FILE.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(DATA_FILE, stage1=stage1, stage2=stage2, meta=np.array(json.dumps(meta)))
    print(f"wrote {DATA_FILE}: {len(stage2)} blocks, {meta}")


if __name__ == "__main__":
    main()
