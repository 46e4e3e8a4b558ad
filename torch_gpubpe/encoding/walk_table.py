"""The table the GPU walk encodes with, for a vocab and a mode: the vocab itself, or for
SentencePiece BPE (``units="chars"``) its byte-level form with prefix tokens, expanded after
the readback (:mod:`torch_gpubpe.core.sentencepiece`); and the vocabs it refuses.
"""

from __future__ import annotations

from torch_gpubpe.core.vocab import Vocab
from torch_gpubpe.errors import InputError


def walk_table(vocab: Vocab, mode: str):
    """``(table, units)``: the :class:`Vocab` the walk's trie and tables are built from, and
    the :class:`~torch_gpubpe.core.sentencepiece.ByteUnits` that expands its extra ids (None
    for byte-level vocabs).

    Raises:
        InputError: the vocab lacks continuation bytes (0x80-0xBF), which most non-ASCII
            characters hold: Hugging Face drops them from words, the encoder would refuse
            nearly every non-ASCII text.
        ValueError: a SentencePiece vocab in greedy mode.
    """
    inside = [b for b in vocab.missing_bytes if 0x80 <= b <= 0xBF]
    if inside:
        raise InputError(
            f"the vocab has no token for the single bytes "
            f"{', '.join(f'0x{b:02X}' for b in inside)}, which continue most UTF-8 "
            "characters: Hugging Face drops them from words, the GPU encoder would refuse "
            "nearly every non-ASCII text (it never loses text)")
    if vocab.units != "chars":
        return vocab, None
    if mode != "bpe":
        raise ValueError("a SentencePiece BPE vocab encodes in mode 'bpe' only")
    from torch_gpubpe.core.sentencepiece import byte_units

    units = byte_units(vocab)
    return units.vocab, units
