"""A batch larger than one slice (DESIGN.md §6). Several documents are encoded in groups of whole
documents (:func:`group_bounds`, two groups in flight); one document larger than a slice is cut
at word starts into slices of at most the session's limit, encoded one after the other on one
slot. One word longer than a slice is cut
inside it: greedy mode keeps the tokens the cut cannot have changed and restarts at a token
boundary; merge-order mode checks the join (:func:`torch_gpubpe.encoding.merge_walk.junction_ok`)
and, where it is not a valid pair, drops the token before the cut and encodes again from there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from torch_gpubpe.core.copy_pool import parallel_copy
from torch_gpubpe.core.packing import word_start_mask
from torch_gpubpe.encoding.batch import BatchEncoding
from torch_gpubpe.encoding.merge_walk import junction_ok
from torch_gpubpe.encoding.slot import Slot, doc_offsets

if TYPE_CHECKING:  # (annotations only)
    from torch_gpubpe.encoding.session import Session


def encode_sliced(sess: Session, slot: Slot, data: np.ndarray, offsets: np.ndarray,
                  tok_len: np.ndarray, id_dtype) -> tuple[np.ndarray, np.ndarray]:
    """Multi-pass encoding of a batch above the slice limit (cut at word starts) on ``slot``
    (one not in flight); ``tok_len``: bytes of each ordinary token id. Returns ``(ids,
    offsets)`` as :class:`~torch_gpubpe.encoding.tokenizer.BatchEncoding` holds them."""
    total = len(data)
    starts = offsets[:-1]
    first = np.full(len(starts), -1, np.int64)
    pieces: list[np.ndarray] = []
    base = 0
    s = 0
    # A regex pre-tokenizer splits the whole batch first (on the GPU, in its own slices):
    # the cuts and each slice's walk need the split of the documents around them.
    words = sess.pretok.mask(data, offsets) if sess.pretok is not None else None
    mid_word = False  # this slice starts inside a word (the previous one was cut in it)
    while s < total:
        e, truncated = cut(data, offsets, s, sess.limit, words)
        k0, k1 = np.searchsorted(starts, [s, e], side="left")
        end_bit = e == total or bool(np.isin(e, starts[k1:k1 + 1]).any())
        slot.start(data, s, e, (starts[k0:k1] - s).astype(np.uint32), end_bit,
                   None if words is None else words[s:e])
        ids, doc_tok, _ = slot.finish()
        if mid_word and sess.bpe is not None and len(ids):
            sess.junction_checks += 1
            if not junction_ok(sess.bpe, pieces, ids):  # pop the token before the cut, redo
                sess.junction_retries += 1
                s, base = pop_last_token(pieces, s, base, tok_len)
                mid_word = not (bool(words[s]) if words is not None
                                else at_word_start(data, offsets, s))
                continue
        if truncated:  # keep the tokens that the cut cannot have changed (see cut)
            lens = tok_len[ids]
            tstart = np.cumsum(lens) - lens
            keep = int(np.searchsorted(tstart, (e - s) - sess.trie.max_depth, side="right"))
            e = s + int(tstart[keep]) if keep < len(ids) else e
            ids = ids[:keep]
        got = doc_tok.astype(np.int64) - 1
        first[k0:k1] = np.where(got >= 0, got + base, -1)
        pieces.append(ids.copy())
        base += len(ids)
        s = e
        mid_word = truncated
    ids = np.concatenate(pieces) if pieces else np.zeros(0, id_dtype)
    return ids, doc_offsets(first, len(ids))


def pop_last_token(pieces: list[np.ndarray], s: int, base: int, tok_len: np.ndarray
                   ) -> tuple[int, int]:
    """Drop the last token kept so far (merge-order slicing); returns the new (s, base)."""
    k = max(i for i, p in enumerate(pieces) if len(p))
    s -= int(tok_len[int(pieces[k][-1])])
    pieces[k] = pieces[k][:-1]
    return s, base - 1


def at_word_start(data: np.ndarray, offsets: np.ndarray, pos: int) -> bool:
    """Whether byte ``pos`` of the packed batch starts a word (DESIGN.md §2)."""
    lo, hi = max(pos - 1, 0), min(pos + 2, len(data))
    st = offsets[:-1]
    rel = st[(st >= lo) & (st < hi)] - lo
    return bool(word_start_mask(data[lo:hi], np.append(rel, hi - lo))[pos - lo])


def cut(data: np.ndarray, offsets: np.ndarray, s: int, limit: int,
        words: np.ndarray | None = None) -> tuple[int, bool]:
    """End of the slice starting at ``s``: the last word start in ``(s, s + limit]``, or
    ``(s + limit, True)`` when one word covers all of it (then the caller keeps only tokens
    starting at least ``max_depth`` bytes before the end, and the next slice resumes at the
    first dropped token: greedy matching restarted at a token boundary gives the same ids)."""
    total = len(data)
    if total - s <= limit:
        return total, False
    hi = s + limit
    width = 4096
    while True:
        a = max(s + 1, hi - width)
        lo_ = a - 1
        hi_ = min(total, hi + 2)
        sub = data[lo_:hi_]
        st = offsets[:-1]
        rel = st[(st >= lo_) & (st < hi_)] - lo_
        mask = (word_start_mask(sub, np.append(rel, len(sub))) if words is None
                else words[lo_:hi_])
        idx = np.flatnonzero(mask[1 : hi - lo_ + 1])
        if len(idx):
            return lo_ + 1 + int(idx[-1]), False
        if a == s + 1:
            return hi, True
        width *= 4


def group_bounds(offsets: np.ndarray, target: int, max_docs: int) -> list[int]:
    """Document indices that cut a packed batch (``offsets``) into consecutive groups of at
    most ``max_docs`` documents and, where a group has more than one, at most ``target``
    bytes."""
    out, a, n = [0], 0, len(offsets) - 1
    while a < n:
        b = int(np.searchsorted(offsets, offsets[a] + target, side="right")) - 1
        a = min(max(b, a + 1), a + max_docs, n)
        out.append(a)
    return out


def text_groups(texts, target: int) -> list[tuple[int, list]] | None:
    """``texts`` (a list of documents) cut into consecutive groups of about ``target``
    characters (bytes for bytes-like items), each with the index of its first document, or
    None when they hold less than two groups' worth, or an item has no length (the packer
    names it)."""
    try:
        sizes = np.fromiter(map(len, texts), np.int64, len(texts))
    except TypeError:
        return None
    offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if len(texts) < 2 or offsets[-1] <= 2 * target:
        return None
    bounds = group_bounds(offsets, target, len(texts))
    return [(a, texts[a:b]) for a, b in zip(bounds, bounds[1:])]


def encode_in_groups(submit, groups) -> BatchEncoding:
    """One :class:`~torch_gpubpe.encoding.batch.BatchEncoding` of consecutive groups of
    documents, each handed to ``submit`` (which keeps two in flight, completing the oldest)
    as the one before it runs."""
    done = [submit(g) for g in groups]
    return concat_encodings([q.result() for q in done])


def concat_encodings(parts: list[BatchEncoding]) -> BatchEncoding:
    """Consecutive groups' encodings as one: ids copied by the copy pool's threads (one thread
    copying hundreds of MB of ids, and faulting in the pages, was a tenth of a large call)."""
    sizes = np.array([len(be.ids) for be in parts], np.int64)
    base = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(sizes, out=base[1:])
    offs = [np.zeros(1, np.int64)] + [be.offsets[1:] + b for be, b in zip(parts, base)]
    ids = np.empty(int(base[-1]), parts[0].ids.dtype if parts else np.uint16)
    for be, a, b in zip(parts, base, base[1:]):
        parallel_copy(ids[a:b], be.ids)
    return BatchEncoding(ids, np.concatenate(offs))
