"""A model's tokenizer files as a :class:`~torch_gpubpe.core.vocab.Vocab` and the split it
needs: what ``Tokenizer.from_tiktoken``, ``from_hf`` and ``from_sentencepiece`` load."""

from __future__ import annotations

import json
import os

from torch_gpubpe.core.vocab import Vocab
from torch_gpubpe.encoding.hf_call import template_of, token_lookup
from torch_gpubpe.errors import InputError


def tiktoken_file(path: str | os.PathLike, pattern: str | None) -> tuple[Vocab, str]:
    """A tiktoken file's merge-order ranks (:func:`torch_gpubpe.core.vocab_files.load_tiktoken`)
    and its split: ``pattern``, or else the sidecar's (``path + ".json"``: ``"pattern"``).

    Raises:
        InputError: no pattern given nor in a sidecar; VocabNotFoundError: no file there.
        VocabFormatError, OSError: see :func:`~torch_gpubpe.core.vocab_files.load_tiktoken`.
    """
    from torch_gpubpe.core.vocab import missing
    from torch_gpubpe.core.vocab_files import load_tiktoken, tiktoken_metadata

    missing(path)  # first: a missing file is named as such
    vocab = load_tiktoken(path)
    if pattern is None:
        pattern = tiktoken_metadata(path).get("pattern")
        if pattern is None:
            raise InputError(f"{path}: no split pattern (no sidecar {path}.json with "
                             "\"pattern\"); pass pattern='gpt2', 'cl100k', 'qwen2', "
                             "'o200k' or a pat_str, or 'bytes-classes' for a file that "
                             "`train --out` wrote (this project's split, DESIGN.md §2)")
    return vocab, pattern


def hf_file(path: str | os.PathLike, pattern: str | None
            ) -> tuple[Vocab, str, tuple | None, int | None, tuple[bool, bool], tuple[str, str],
                       frozenset[int]]:
    """A Hugging Face ``tokenizer.json`` (byte-level or SentencePiece BPE,
    :func:`torch_gpubpe.core.vocab_files.vocab_from_hf_dict`; a folder: its
    ``tokenizer.json``), the split its pre-tokenizer implies
    (:func:`torch_gpubpe.core.patterns.from_hf_pre_tokenizer`) or ``pattern``, the ids its
    post-processor puts around a text (:func:`torch_gpubpe.encoding.hf_call.template_of`) and
    its padding id (None without ``"padding"``), the post-processor's offset rule:
    ``(trim_offsets, add_prefix_space)`` of a ``ByteLevel`` / ``RobertaProcessing`` step, and
    the sides its ``"padding"`` and ``"truncation"`` take (``"left"`` / ``"right"``), and the
    ids of its added tokens not marked special.

    Raises:
        InputError: a pre-tokenizer the GPU cannot split exactly.
        VocabFormatError, OSError: the file is not a supported ``tokenizer.json``.
    """
    from torch_gpubpe.core.patterns import from_hf_pre_tokenizer

    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    vocab = Vocab.load(path)
    with open(path, encoding="utf-8") as f:
        obj = json.load(f)
    if pattern is None:
        pattern = from_hf_pre_tokenizer(obj.get("pre_tokenizer"))
    template = template_of(obj.get("post_processor"), token_lookup(vocab))
    pad = obj.get("padding") if isinstance(obj.get("padding"), dict) else {}
    pad_id = pad.get("pad_id") if isinstance(pad.get("pad_id"), int) else None
    pp = obj.get("post_processor") if isinstance(obj.get("post_processor"), dict) else {}
    steps = pp.get("processors", []) if pp.get("type") == "Sequence" else [pp]
    rule = [d for d in steps if isinstance(d, dict)
            and d.get("type") in ("ByteLevel", "RobertaProcessing")]
    trim = (any(d.get("trim_offsets", True) for d in rule),
            any(d.get("add_prefix_space", True) for d in rule))
    trunc = obj.get("truncation") if isinstance(obj.get("truncation"), dict) else {}
    sides = tuple("left" if d.get("direction") == "Left" else "right" for d in (pad, trunc))
    plain = frozenset(a["id"] for a in obj.get("added_tokens") or []
                      if isinstance(a, dict) and a.get("special") is False
                      and isinstance(a.get("id"), int))
    return vocab, pattern, template, pad_id, trim, sides, plain


def spm_file(path: str | os.PathLike) -> tuple[Vocab, str]:
    """A SentencePiece BPE ``tokenizer.model`` with byte fallback
    (:func:`torch_gpubpe.core.vocab_files.load_sentencepiece`), no split (``"whole"``).

    Raises:
        VocabFormatError: a model this project does not encode exactly, named.
        ImportError: no ``sentencepiece`` package; OSError.
    """
    from torch_gpubpe.core.vocab_files import load_sentencepiece

    return load_sentencepiece(path), "whole"


def split_of(vocab: Vocab, pre_tokenizer: str | None) -> str:
    """The family a ``Tokenizer`` of ``vocab`` splits with: ``pre_tokenizer``, else the vocab's
    recorded one, else ``"bytes-classes"``.

    Raises:
        InputError: a pattern the GPU cannot split exactly, or one other than the vocab's.
    """
    from torch_gpubpe.core.patterns import resolve

    fam = resolve(pre_tokenizer or vocab.pre_tokenizer or "bytes-classes")
    if vocab.pre_tokenizer and fam != vocab.pre_tokenizer:
        raise InputError(f"pre_tokenizer={pre_tokenizer!r}, but the vocab was trained with "
                         f"{vocab.pre_tokenizer!r}: its ids need that split (leave "
                         "pre_tokenizer out)")
    return fam


def gpu_split(vocab: Vocab, family: str) -> tuple[str, str | None]:
    """The split the GPU walks with for ``family`` (:func:`split_of`): the same, except that a
    SentencePiece vocab (no split, ``"whole"``) is cut into ``"metaspace-words"`` where that
    gives the same ids (no token joins a code point to a following ``▁``; no
    ``ignore_merges``), so that a long document is many short words. Returns ``(split, note)``;
    ``note`` says why a SentencePiece vocab stays whole (its long documents take the long-word
    path), else ``None``."""
    if family != "whole" or vocab.units != "chars":
        return family, None
    from torch_gpubpe.core.sentencepiece import joined_to_metaspace

    if vocab.ignore_merges:
        why = "its ignore_merges looks each whole document up"
    elif (t := joined_to_metaspace(vocab)) is not None:
        why = f"its token {t.decode('utf-8', 'replace')!r} joins a character to the \u2581 after it"
    else:
        return "metaspace-words", None
    return "whole", (f"this SentencePiece vocab is encoded one document per word on the GPU "
                     f"({why}): long documents take the slower long-word path")


def implied_split(path: str | os.PathLike) -> str | None:
    """The word split a vocab file implies: a ``*.tiktoken`` file's sidecar pattern
    (``path.json``), a ``tokenizer.json``'s pre-tokenizer, none for a SentencePiece
    ``*.model`` (``"whole"``); ``None`` for this project's ``vocab.json`` (the split it records,
    or DESIGN.md §2's) and a tiktoken file without a sidecar.

    Raises:
        InputError: the file implies a split the GPU cannot do exactly (names it).
    """
    from pathlib import Path

    from torch_gpubpe.core.patterns import from_hf_pre_tokenizer
    from torch_gpubpe.core.vocab import vocab_file
    from torch_gpubpe.core.vocab_files import tiktoken_metadata

    p = vocab_file(path)
    if p.suffix == ".tiktoken":
        return tiktoken_metadata(p).get("pattern")
    if p.suffix == ".model":
        return "whole"
    if p.name.endswith(".json") and p.name != "vocab.json" and Path(p).is_file():
        with open(p, encoding="utf-8") as f:
            obj = json.load(f)
        if isinstance(obj, dict) and "model" in obj and "format" not in obj:
            return from_hf_pre_tokenizer(obj.get("pre_tokenizer"))
    return None
