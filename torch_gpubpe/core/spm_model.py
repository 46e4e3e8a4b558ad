"""A SentencePiece ``tokenizer.model`` (BPE with byte fallback: Llama 2, Mistral, TinyLlama,
CodeLlama) as the ``tokenizer.json`` Hugging Face's converter makes of it, which
:func:`torch_gpubpe.core.sentencepiece.vocab_from_spm_hf` reads (no wgpu, no torch).

The file is a protobuf read with the ``sentencepiece`` package (``pip install sentencepiece``).
Its BPE merges the adjacent pair whose joined piece scores highest; as Hugging Face's converter
does, every split of each piece into two pieces becomes a merge, the merges in the order of the
joined piece's score (the pieces' order on ties). SentencePiece's ids are the definition.

Refused by name: another model type (Unigram: not merges), no byte fallback, a normalization rule
other than ``identity`` (NFKC's precompiled character map), ``remove_extra_whitespaces`` (spaces
collapsed before BPE), and user-defined pieces (matched before BPE).
"""

from __future__ import annotations

import os

from torch_gpubpe.errors import VocabFormatError

METASPACE = "\u2581"
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6
_BPE = 2  # TrainerSpec.ModelType


def read_model(path: str | os.PathLike) -> object:
    """The ``ModelProto`` of a SentencePiece model file.

    Raises:
        ImportError: no ``sentencepiece`` package; VocabFormatError: not a model file.
    """
    try:
        from sentencepiece import sentencepiece_model_pb2
    except ImportError as e:
        raise ImportError("reading a SentencePiece .model needs the sentencepiece package "
                          "(pip install sentencepiece)") from e
    with open(path, "rb") as f:
        data = f.read()
    m = sentencepiece_model_pb2.ModelProto()
    try:
        m.ParseFromString(data)
    except Exception as e:  # (protobuf's DecodeError)
        raise VocabFormatError(f"{path}: not a SentencePiece model file ({e})") from e
    if not m.pieces:
        raise VocabFormatError(f"{path}: not a SentencePiece model file (no pieces)")
    return m


def hf_dict_from_model(path: str | os.PathLike) -> dict:
    """The ``tokenizer.json`` object of a SentencePiece BPE model file (Hugging Face's converter's
    form: model ``BPE`` with ``byte_fallback``, normalizer ``Prepend("▁")`` + ``Replace(" ",
    "▁")``, no pre-tokenizer, control and unknown pieces as special added tokens).

    Raises:
        VocabFormatError: a model this project does not encode exactly (module docs), named.
    """
    m = read_model(path)
    ts, ns = m.trainer_spec, m.normalizer_spec
    if ts.model_type != _BPE:
        raise VocabFormatError(f"{path}: SentencePiece model type {ts.model_type} is not BPE "
                               "(Unigram models are not merges)")
    if not ts.byte_fallback:
        raise VocabFormatError(f"{path}: a SentencePiece BPE model without byte fallback "
                               "(unknown characters would be <unk>) is not supported")
    if ns.name not in ("identity", "") or ns.precompiled_charsmap:
        raise VocabFormatError(f"{path}: normalization rule {ns.name!r} (a precompiled "
                               "character map) is not supported; 'identity' is")
    if ns.remove_extra_whitespaces:
        raise VocabFormatError(f"{path}: remove_extra_whitespaces (SentencePiece collapses "
                               "spaces before BPE) is not supported")
    if not ns.escape_whitespaces:
        raise VocabFormatError(f"{path}: escape_whitespaces is off (spaces not written as "
                               "'▁') : not supported")
    vocab, scores, added = {}, {}, []
    for i, p in enumerate(m.pieces):
        if p.type == _USER_DEFINED:
            raise VocabFormatError(f"{path}: user-defined piece {p.piece!r} (matched before "
                                   "BPE) is not supported")
        if p.piece in vocab:
            raise VocabFormatError(f"{path}: piece {p.piece!r} appears twice")
        vocab[p.piece] = i
        if p.type in (_CONTROL, _UNKNOWN):
            added.append({"id": i, "content": p.piece, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True})
        elif p.type == _NORMAL:  # (unused pieces are never made)
            scores[p.piece] = p.score
    merges = []
    for piece, score in scores.items():
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece))
                 if piece[:k] in scores and piece[k:] in scores]
        local.sort(key=lambda lr: (vocab[lr[0]], vocab[lr[1]]))
        merges += [(score, vocab[piece], lr) for lr in local]
    merges.sort(key=lambda x: (-x[0], x[1]))
    steps = [{"type": "Replace", "pattern": {"String": " "}, "content": METASPACE}]
    if ns.add_dummy_prefix:
        steps.insert(0, {"type": "Prepend", "prepend": METASPACE})
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": steps}, "pre_tokenizer": None,
        "post_processor": None, "decoder": None,
        "model": {"type": "BPE", "dropout": None, "unk_token": ts.unk_piece or None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for _, _, (a, b) in merges]},
    }
