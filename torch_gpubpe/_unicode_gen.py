"""Build the code-point class table of the Unicode pre-tokenizers (run at build time, output
checked in as ``torch_gpubpe/tables/unicode_classes.npz``).

Every class is what the installed ``regex`` module — the engine tiktoken's ``pat_str`` patterns
are written for — says of each code point: the table is made by running ``regex`` over a string
of all 0x110000 code points (surrogates included), so a class can never disagree with the
patterns it serves. The ``regex`` version and its Unicode version are recorded in the file.

One byte per code point:

======  ===================================================================================
bits    meaning
======  ===================================================================================
0-1     base class: 0 ``\\p{L}``, 1 ``\\p{N}``, 2 other, 3 ``\\s`` (regex's White_Space)
2       ``[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]`` (o200k's upper-case-like class)
3       ``[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]`` (o200k's lower-case-like class)
4-7     0, or 1 + the index in ``CONTRACTION_LETTERS`` of the letter it matches under ``(?i)``
======  ===================================================================================

Stored as a two-level table: ``stage1[cp >> 8]`` (uint16) is a block number, ``stage2[block,
cp & 255]`` (uint8) the class byte.

Run: ``python -m torch_gpubpe._unicode_gen`` (rewrites the data file).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

CONTRACTION_LETTERS = "sdmtlvre"  # the letters after ' in every family's contractions
NUM_CP = 0x110000
DATA_FILE = Path(__file__).resolve().parent / "tables" / "unicode_classes.npz"


def regex_unicode_version() -> str:
    """The Unicode version the installed ``regex`` declares ("This module supports Unicode X")."""
    from importlib import metadata

    import regex

    text = metadata.metadata("regex").get_payload() or ""
    m = regex.search(r"supports Unicode (\d+\.\d+(?:\.\d+)?)", text)
    if not m:
        raise RuntimeError("the installed regex package does not state its Unicode version")
    return m.group(1)


def class_bytes() -> np.ndarray:
    """uint8 array of shape ``(0x110000,)``: the class byte of every code point (module docs)."""
    import regex

    everything = "".join(map(chr, range(NUM_CP)))

    def members(pattern: str) -> np.ndarray:
        hit = np.zeros(NUM_CP, bool)
        hit[[m.start() for m in regex.finditer(pattern, everything)]] = True
        return hit

    L, N, S = members(r"\p{L}"), members(r"\p{N}"), members(r"\s")
    if (L & N).any() or (L & S).any() or (N & S).any():
        raise RuntimeError("regex's \\p{L}, \\p{N} and \\s overlap: the table cannot hold them")
    out = np.full(NUM_CP, 2, np.uint8)
    out[L], out[N], out[S] = 0, 1, 3
    out[members(r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]")] |= 4
    out[members(r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]")] |= 8
    for k, letter in enumerate(CONTRACTION_LETTERS):
        hit = members(f"(?i:{letter})")
        if (out[hit] >> 4).any():
            raise RuntimeError(f"a code point folds to two contraction letters ({letter})")
        out[hit] |= (k + 1) << 4
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


def main() -> None:
    import regex

    stage1, stage2 = two_level(class_bytes())
    meta = {"regex_version": regex.__version__, "unicode_version": regex_unicode_version(),
            "contraction_letters": CONTRACTION_LETTERS}
    DATA_FILE.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(DATA_FILE, stage1=stage1, stage2=stage2, meta=np.array(json.dumps(meta)))
    print(f"wrote {DATA_FILE}: {len(stage2)} blocks, {meta}")


if __name__ == "__main__":
    main()
