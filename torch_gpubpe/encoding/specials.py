"""Special tokens around the GPU encoder, on the host: tiktoken's ``allowed_special`` /
``disallowed_special`` (:func:`special_sets`, :func:`split_at_specials`: a document is split at
its allowed special spellings and the text between them is encoded as separate pieces, as
tiktoken does) and a ``bos``/``eos`` id around every document of a flat batch
(:func:`insert_special_tokens`: the host twin of ``wgsl/specials.wgsl``, which the GPU path is
tested against).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from collections.abc import Set as AbstractSet
from typing import Literal, Union

import numpy as np

from torch_gpubpe.encoding.batch import BatchEncoding
from torch_gpubpe.errors import InputError

EOT = "<|endoftext|>"
SpecialSet = Union[Literal["all"], AbstractSet[str], Collection[str]]
"""``allowed_special`` / ``disallowed_special``: ``"all"`` or a collection of spellings."""


def special_sets(known: frozenset[str], allowed: SpecialSet, disallowed: SpecialSet
                 ) -> tuple[frozenset[str], frozenset[str]]:
    """``(allowed, disallowed)`` as sets of spellings, from the arguments of
    :meth:`Tokenizer.encode` and the vocab's special tokens ``known``.

    Raises:
        InputError: a str other than ``"all"``, or a name that is not in ``known``.
    """

    def named(arg, what: str) -> frozenset[str]:
        if isinstance(arg, str):
            if arg == "all":
                return known
            raise InputError(f"{what} must be 'all' or a set of special tokens, got {arg!r} "
                             f"(a str; write {{{arg!r}}} for one token)")
        out = frozenset(arg)
        unknown = sorted(out - known)
        if unknown:
            raise InputError(f"{what}: {unknown} are not special tokens of this vocab "
                             f"(its special tokens: {sorted(known)})")
        return out

    a = named(allowed, "allowed_special")
    d = known - a if isinstance(disallowed, str) and disallowed == "all" else (
        named(disallowed, "disallowed_special") - a)
    return a, d


def split_at_specials(texts, ids_of: dict[str, int], allowed: frozenset[str],
                      disallowed: frozenset[str]) -> tuple[list, list[list[int]] | None]:
    """Split each document at its allowed special spellings.

    Returns:
        ``(pieces, plan)``: the text pieces of every document, in order, and per document its
        steps: ``>= 0`` a special id (``ids_of`` of its spelling), ``-1`` the next text piece;
        ``(texts, None)`` when no document spells a special token (each is its own piece).
    Raises:
        InputError: ``texts`` is one str/bytes, an item is neither, or a document spells a
            special token of ``disallowed`` (names it and its position).
    """
    if isinstance(texts, (str, bytes, bytearray, memoryview)):
        raise InputError("encode_batch expects a sequence of documents, not one str/bytes; "
                         "use encode() for one document")
    order = sorted(allowed, key=lambda t: (-len(t), t))  # longest spelling first
    pat_s = re.compile("|".join(map(re.escape, order))) if order else None
    pat_b = re.compile(b"|".join(re.escape(t.encode()) for t in order)) if order else None
    bad_s = re.compile("|".join(map(re.escape, sorted(disallowed, key=len, reverse=True))))
    bad_b = re.compile(b"|".join(re.escape(t.encode()) for t in sorted(disallowed, key=len,
                                                                       reverse=True)))
    # A document holding none of the spellings' first characters is passed over without a
    # regex (str.__contains__ scans far faster than an alternation of literals).
    heads = next((h for h in ({t[:n] for t in allowed | disallowed} for n in (2, 1))
                  if len(h) <= 8), None)
    heads_b = None if heads is None else [h.encode() for h in heads]
    pieces: list = []
    plan: list[list[int]] = []  # per document: >= 0 a special id, -1 the next text piece
    found = False
    for k, text in enumerate(texts):
        if isinstance(text, (bytearray, memoryview)):
            text = bytes(text)
        if not isinstance(text, (str, bytes)):
            raise InputError(f"document {k}: text must be str or bytes, got "
                             f"{type(text).__name__}")
        is_str = isinstance(text, str)
        if heads is not None and not any(h in text for h in (heads if is_str else heads_b)):
            if text:
                pieces.append(text)
            plan.append([-1] if text else [])
            continue
        pat, bad = (pat_s, bad_s) if is_str else (pat_b, bad_b)
        steps: list[int] = []
        pos = 0
        for m in (pat.finditer(text) if pat is not None else ()):
            if disallowed:
                refuse(bad, text, pos, m.start(), k)
            if m.start() > pos:
                pieces.append(text[pos : m.start()])
                steps.append(-1)
            steps.append(ids_of[m.group() if is_str else m.group().decode()])
            found = True
            pos = m.end()
        if disallowed:
            refuse(bad, text, pos, len(text), k)
        if pos < len(text):
            pieces.append(text[pos:])
            steps.append(-1)
        plan.append(steps)
    return (pieces, plan) if found else (list(texts), None)


def encode_with_specials(encode, texts, ids_of: dict[str, int], allowed: frozenset[str],
                         disallowed: frozenset[str], id_dtype) -> BatchEncoding:
    """Split each document at its allowed special spellings (:func:`split_at_specials`), encode
    the text pieces in one batch (``encode(pieces)``, a BatchEncoding), and put the special ids
    between them; the batch as one piece each where no document spells a special token."""
    pieces, plan = split_at_specials(texts, ids_of, allowed, disallowed)
    if plan is None:
        return encode(pieces)
    be = encode(pieces)
    out: list[np.ndarray] = []
    offsets = np.zeros(len(plan) + 1, np.int64)
    j = 0
    for k, steps in enumerate(plan):
        n = 0
        for st in steps:
            if st < 0:
                a = be[j]
                j += 1
            else:
                a = np.array([st], id_dtype)
            out.append(a)
            n += len(a)
        offsets[k + 1] = offsets[k] + n
    ids = np.concatenate(out) if out else np.zeros(0, id_dtype)
    return BatchEncoding(ids.astype(id_dtype, copy=False), offsets)


def refuse(bad, text, lo: int, hi: int, k: int) -> None:
    """Raise InputError if ``bad`` (a pattern of disallowed spellings) matches document ``k``'s
    ``text[lo:hi]``."""
    m = bad.search(text, lo, hi)
    if m is not None:
        is_str = isinstance(text, str)
        tok = m.group() if is_str else m.group().decode()
        raise InputError(
            f"document {k} contains the special token {tok!r} at "
            f"{'character' if is_str else 'byte'} {m.start()}, which disallowed_special "
            f"refuses; pass allowed_special={{{tok!r}}} to encode it as its id, or "
            "disallowed_special=() to encode it as text")


def insert_special_tokens(ids: np.ndarray, offsets: np.ndarray, bos_id: int | None,
                          eos_id: int | None, dtype=None) -> tuple[np.ndarray, np.ndarray]:
    """``bos_id`` before and/or ``eos_id`` after every document of a flat batch, on the host
    (the same result as wgsl/specials.wgsl, which the GPU path is tested against).

    Args:
        ids: token ids of all documents back to back, shape ``(n_tokens,)``.
        offsets: int64, shape ``(num_docs + 1,)``; document k is ``ids[offsets[k]:offsets[k+1]]``.
        dtype: of the returned ids (default: ``ids``'s).
    Returns:
        ``(ids, offsets)`` in the same layout, the specials included.
    """
    offsets = np.asarray(offsets, np.int64)
    nb, ne = int(bos_id is not None), int(eos_id is not None)
    seg = offsets + np.arange(len(offsets), dtype=np.int64) * (nb + ne)
    out = np.empty(int(seg[-1]), ids.dtype if dtype is None else dtype)
    keep = np.ones(len(out), bool)
    if nb:
        out[seg[:-1]] = bos_id
        keep[seg[:-1]] = False
    if ne:
        out[seg[1:] - 1] = eos_id
        keep[seg[1:] - 1] = False
    out[keep] = ids[: int(offsets[-1])]
    return out, seg
