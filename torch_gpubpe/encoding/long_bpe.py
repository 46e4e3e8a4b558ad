"""Long words in merge-order mode (DESIGN.md §8): a word of many KB is cut into pieces that the
GPU walks side by side, instead of one thread walking it byte after byte.

Why the result is exact (the theory of github/rust-gems ``crates/bpe``'s README, see
:mod:`torch_gpubpe.core.bpe_tables`): each piece walked as a word of its own is the merge-order
encoding of its bytes, and a token sequence whose adjacent pairs are all *valid pairs* is the
encoding of its bytes. So the pieces joined are the word's encoding exactly when the pair at
every cut is valid; a cut whose pair is not valid is moved or removed and its pieces walked
again, until every cut passes. Nothing is assumed about where the word's true token boundaries
lie: the cuts are only guesses, checked.

The guesses, per long word (its walk at ``pos``, out of budget after the slice's first walk):

1. Cuts every ``piece`` bytes, from a token start of the walk so far (halfway between the word
   start and ``pos``, where the walk's tokens stay; its frontier may still be popped). ``piece``
   is a multiple of 768 = 3 × 256: a run of one repeated character of 1–4 bytes encodes with a
   period of its length × 2^k bytes from a boundary (equal tokens merge in pairs), which
   divides 768 up to 256 bytes (768 for 3-byte characters), so such runs pass every cut at
   once.
2. A cut whose pair fails moves to a token start near the middle of the piece before it (that
   piece's own walk, far from both of its ends, is the word's walk there in practice); the
   piece after the moved cut is walked again. The piece before it keeps its tokens: a prefix of
   an encoding up to one of its token boundaries is the encoding of those bytes.
3. A cut that still fails is removed, and the two pieces around it are walked as one; after
   that, a word with a failing cut is walked on from the last cut before it (the rounds are
   bounded: the worst case is the one-thread walk).

The cuts are word starts in the walk's word-start bits (``word_mask`` / the byte-class bits);
each piece's walk is a resumed walk (``state``) of the continuation loop of
:meth:`torch_gpubpe.encoding.slot.Slot.submit_readback`; ``bpe_long_aux`` in
``wgsl/encode_bpe.wgsl`` checks the pairs, finds the token starts and, at the end, recounts the
tokens of each block (re-walked pieces counted theirs again). :class:`LongBpeWords` is a base of
:class:`~torch_gpubpe.encoding.slot.Slot`.
"""

from __future__ import annotations

import numpy as np

from torch_gpubpe.encoding.layout import NO_TOKEN, WG
from torch_gpubpe.errors import GPUOperationError
from torch_gpubpe.notices import warn_once

PIECE_UNIT = 768
"""Cuts are a multiple of this many bytes apart (3 × 256, see the module docstring)."""
FEW_WALKS = 64
"""At most this many walks out of budget after a slice's first walk: their words are looked at
for cutting at once (each continuation dispatch of a long walk is one thread's serial work)."""
AFTER_DISPATCHES = 3
"""More walks than :data:`FEW_WALKS` (many long documents of a SentencePiece model that keeps
documents whole): their words are looked at after this many continuation dispatches, which end
most of them."""
MIN_PIECES = 4
"""A word is cut when at least this many pieces lie ahead of its walk."""
MAX_WORDS = 1024
"""Words cut in one slice at most (the longest; each costs a few host writes)."""
AUX_PAIR, AUX_BOUNDARY, AUX_RECOUNT = 0, 1, 2  # wgsl/encode_bpe.wgsl's bpe_long_aux modes


def cut_gap(max_depth: int, chunk: int) -> int:
    """The fewest bytes between a cut and the next cut or its word's ends: more than a token
    (a piece is never one token, which a word start could take whole), a chunk (each piece
    starts in a chunk of its own, whose walk state it is) and 64 bytes (the word-start bits of
    a cut lie in a 32-bit word strictly inside its word)."""
    return max(max_depth, chunk, 64) + 1


def piece_bytes(max_depth: int, chunk: int) -> int:
    """Bytes between cuts: a multiple of :data:`PIECE_UNIT`, at least 4 × :func:`cut_gap` (a
    cut moved into the middle of a piece keeps a gap on each side)."""
    return PIECE_UNIT * max(1, -(-4 * cut_gap(max_depth, chunk) // PIECE_UNIT))


class LongWords:
    """The cut long words of one slice: flat arrays over all their pieces, in byte order.
    ``cut[i]`` is where piece ``i`` starts; ``head[i]``: it is its word's first piece (its start
    is the word start, not a cut); ``wend[i]``: its word's end."""

    def __init__(self, cut: np.ndarray, head: np.ndarray, wend: np.ndarray) -> None:
        self.cut, self.head, self.wend = cut, head, wend
        self.round = 1

    def ends(self) -> np.ndarray:
        """Each piece's end (the next piece's start, or its word's end)."""
        nxt = np.empty_like(self.cut)
        nxt[:-1] = self.cut[1:]
        nxt[-1] = self.wend[-1]
        last = np.ones(len(self.cut), bool)
        last[:-1] = self.head[1:]
        nxt[last] = self.wend[last]
        return nxt

    def drop(self, keep: np.ndarray) -> None:
        self.cut, self.head, self.wend = self.cut[keep], self.head[keep], self.wend[keep]


class LongBpeWords:
    """The merge-order long-word half of :class:`~torch_gpubpe.encoding.slot.Slot` (its
    buffers, bind groups and submits)."""

    lw: LongWords | None = None  # the slice's cut words while their pieces are walked
    aux_cap = 0

    def word_bits_buffer(self):
        """The buffer of the walk's word-start bits (binding 16)."""
        return self.pt.mask if self.sess.pretok is not None else self.wbits

    def cut_long_words(self, lo: int, hi: int) -> tuple[int, tuple[int, int]] | None:
        """Cut the words of the walks still unfinished in blocks ``[lo, hi)`` that have at least
        :data:`MIN_PIECES` pieces ahead. Returns ``(walks, (lo, hi))``: the walks the next
        continuation dispatches run (the unfinished ones and one per new piece) and their
        blocks; None when no word was cut (the walks continue as they are)."""
        s, g = self.sess, self.sess.gpu
        ch = s.chunk
        st = g.read_u32(self.state, 8 * lo * WG, 2 * (hi - lo) * WG,
                        what="long-word walk states").reshape(-1, 2)
        # (chunks past the slice's end keep whatever an earlier, interrupted slice left there:
        # the walk never reads them)
        act = np.flatnonzero(st[:, 0])
        act = act[(lo * WG + act.astype(np.int64)) * ch < self.n]
        if not len(act):
            return None
        chunk = lo * WG + act.astype(np.int64)
        pos = st[act, 0].astype(np.int64) - 1
        n = self.n
        K = piece_bytes(s.trie.max_depth, ch)
        bits = self.word_bits_buffer()
        nw = (n + 31) // 32
        w0 = int(chunk.min()) * ch // 32
        w1 = min(nw, int(pos.max()) // 32 + 1 + (1 << 16))
        while True:  # read the word-start bits until every unfinished word's end is in them
            words = g.read_u32(bits, 4 * w0, w1 - w0, what="long-word word starts")
            nz = np.flatnonzero(words) + w0
            after = np.searchsorted(nz, pos // 32 + 1)  # first nonzero word after pos's
            # (a word start in pos's own word, after pos, ends the word too)
            if w1 >= nw or (after < len(nz)).all():
                break
            w1 = min(nw, w0 + 2 * (w1 - w0))
        # Each walk's word: its start, the highest word-start bit of its chunk at or below pos;
        # its end, the lowest bit after pos (or the slice's end).
        cs = chunk * ch
        ws_ = np.full(len(pos), -1, np.int64)
        for j in range(-(-ch // 32)):
            w = cs // 32 + j
            m = words[np.minimum(w, w1 - 1) - w0].astype(np.int64)  # (past pos: masked off)
            lo_bit = np.clip(cs - 32 * w, 0, 32)
            hi_bit = np.clip(pos - 32 * w + 1, 0, 32)  # bits [lo_bit, hi_bit) of word w
            m &= ((1 << hi_bit) - 1) & ~((1 << lo_bit) - 1)
            top = np.where(m > 0, 32 * w + np.floor(np.log2(np.maximum(m, 1))).astype(np.int64),
                           -1)
            ws_ = np.maximum(ws_, top)
        if (ws_ < 0).any():
            p = int(pos[ws_ < 0][0])
            raise GPUOperationError(
                f"encoding a slice of {n} bytes: an unfinished walk at byte {p} has no word "
                f"start in its chunk on {g.adapter_name}")
        own = words[pos // 32 - w0].astype(np.int64) >> (pos % 32 + 1)  # bits after pos
        i = np.searchsorted(nz, pos // 32 + 1)
        has_next = i < len(nz)
        nxt = nz[np.minimum(i, len(nz) - 1)] if len(nz) else np.zeros_like(pos)
        nxt = np.where(has_next, nxt, w0)
        nw_bits = words[nxt - w0].astype(np.int64)
        low = lambda x: np.log2(np.maximum(x & -x, 1)).astype(np.int64)  # noqa: E731
        we_ = np.where(own > 0, pos + 1 + low(own),
                       np.where(has_next, 32 * nxt + low(nw_bits), n))
        we_ = np.minimum(we_, n)
        keep = (we_ - pos) // K >= MIN_PIECES
        # the longest words first, at most MAX_WORDS of them (the rest continue as they are)
        order = np.argsort(-(we_ - pos)[keep], kind="stable")[:MAX_WORDS]
        if keep.sum() > MAX_WORDS:
            s.long_bpe_uncut += int(keep.sum()) - MAX_WORDS
            warn_once("long_bpe_uncut", f"torch_gpubpe: more than {MAX_WORDS} long words in "
                      "one slice in merge-order mode; the shorter ones are walked by one GPU "
                      "thread each (Tokenizer session counter long_bpe_uncut)")
        sel = np.sort(np.flatnonzero(keep)[order])
        if not len(sel):
            return None
        ws_, we_, p_ = ws_[sel], we_[sel], pos[sel]
        # The cuts' phase: a token start of the walk halfway between its word start and pos
        # (far enough behind the walk's frontier to stay; pos itself may still be popped), or
        # the word start.
        gap = cut_gap(s.trie.max_depth, ch)
        far = np.flatnonzero(p_ - ws_ >= 2 * gap)
        anchor = ws_.copy()
        if len(far):
            mid = self.aux(AUX_BOUNDARY, (ws_[far] + p_[far]) // 2, s.trie.max_depth + 1)
            mid = mid.astype(np.int64)
            ok = (mid != NO_TOKEN) & (mid <= p_[far])
            anchor[far[ok]] = mid[ok]
        cuts, heads, wends, starts, clear = [], [], [], [], []
        for ws, we, p, a in zip(ws_.tolist(), we_.tolist(), p_.tolist(), anchor.tolist()):
            j0 = (p + gap - a + K - 1) // K  # the first cut at least gap past pos
            m = (we - K - a) // K - j0 + 1   # ... and each with >= K bytes after it
            if m + 1 < MIN_PIECES:
                continue
            v = a + K * np.arange(j0, j0 + m, dtype=np.int64)
            clear.append(p)
            cuts += [np.array([ws], np.int64), v]
            heads += [np.array([True]), np.zeros(m, bool)]
            wends.append(np.full(m + 1, we, np.int64))
            starts.append(v)
        if not cuts:
            return None
        lw = LongWords(np.concatenate(cuts), np.concatenate(heads), np.concatenate(wends))
        self.lw = lw
        # the dead bits past each walk's position: its end moves to the first cut, and its
        # exploration past pos may have marked positions of the pieces (a dead bit holds for
        # one walk's start and end)
        self.write_cuts(lw, np.concatenate(starts), clear_from=np.array(clear, np.int64))
        s.long_bpe_words += int(lw.head.sum())
        s.long_bpe_pieces += len(lw.cut)
        cb = np.concatenate([chunk, lw.cut[~lw.head] // ch]) // WG
        return len(act) + int((~lw.head).sum()), (min(lo, int(cb.min())),
                                                  max(hi, int(cb.max()) + 1))

    def write_cuts(self, lw: LongWords, walk_from: np.ndarray,
                   clear_from: np.ndarray | None) -> None:
        """Write each cut word's word-start bits (its start, then its cuts), the states of the
        pieces to walk (they start at ``walk_from``), and clear the dead bits of each word that
        walks from its ``clear_from`` to its end (None: none)."""
        s, g = self.sess, self.sess.gpu
        ch, q = s.chunk, g.device.queue
        bits = self.word_bits_buffer()
        first = np.flatnonzero(lw.head)
        wstart, wend = lw.cut[first], lw.wend[first]
        last = np.append(first[1:], len(lw.cut))  # each word's pieces: [first, last)
        walk_from = np.sort(walk_from)
        wa, wb = np.searchsorted(walk_from, wstart), np.searchsorted(walk_from, wend)
        enc = None
        if clear_from is not None:
            enc = g.device.create_command_encoder(label=f"encode[{self.idx}].long_bpe_dead")
        for k in range(len(first)):
            ws, we = int(wstart[k]), int(wend[k])
            # bits: the words strictly inside the word hold no word start but its cuts
            a, b = ws // 32 + 1, (we - 1) // 32
            if b > a:
                m = np.zeros(b - a, np.uint32)
                c = lw.cut[first[k] + 1: last[k]]
                np.bitwise_or.at(m, c // 32 - a, (np.uint32(1) << (c % 32).astype(np.uint32)))
                q.write_buffer(bits, 4 * a, m)
            # states: the chunks strictly between the word's start and end start no word of
            # their own (their walkers are idle), each cut lies in one of them (cut_gap)
            f = walk_from[wa[k]: wb[k]]
            ca, cb = ws // ch + 1, we // ch
            if cb > ca:
                sv = np.zeros((cb - ca, 2), np.uint32)
                sv[:, 1] = NO_TOKEN
                inner = f[f != ws]
                sv[inner // ch - ca, 0] = (inner + 1).astype(np.uint32)
                q.write_buffer(self.state, 8 * ca, sv)
            if (f == ws).any():  # the word's first piece walks again (every walk has ended)
                q.write_buffer(self.state, 8 * (ws // ch), np.array([ws + 1, NO_TOKEN],
                                                                    np.uint32))
            if enc is not None and len(f):
                c0, c1 = int(clear_from[k]) // 32, (we - 1) // 32 + 1
                enc.clear_buffer(self.dead, 4 * c0, 4 * (c1 - c0))
        if enc is not None:
            q.submit([enc.finish()])

    def aux(self, mode: int, items: np.ndarray, reach: int) -> np.ndarray:
        """Run ``bpe_long_aux`` in ``mode`` over ``items`` (u32) and read back its output."""
        s, g = self.sess, self.sess.gpu
        U = g.wgpu.BufferUsage
        m = max(len(items), 1)
        if self.aux_cap < m:
            self.aux_cap = max(m, 2 * self.aux_cap, 1024)
            self.aux_in = g.buffer(4 * self.aux_cap, U.STORAGE | U.COPY_DST,
                                   f"encode[{self.idx}].aux_in")
            self.aux_out = g.buffer(4 * self.aux_cap, U.STORAGE | U.COPY_SRC,
                                    f"encode[{self.idx}].aux_out")
            self.aux_params = g.buffer(16, U.UNIFORM | U.COPY_DST,
                                       f"encode[{self.idx}].aux_params")
        # (a bind group per call: the slot's scratch and counts are replaced when it grows)
        b = {4: self.scratch, 5: self.counts, 13: s.tokinfo, 14: s.pairs, 17: s.bounds,
             21: s.spines, 24: self.aux_params, 25: self.aux_in, 26: self.aux_out}
        bg = g.bind_group(s.long_bpe_pipeline(), b, label=f"encode[{self.idx}].aux")
        q = g.device.queue
        q.write_buffer(self.aux_params, 0, np.array([mode, len(items), self.n, reach], np.uint32))
        if len(items):
            q.write_buffer(self.aux_in, 0, items.astype(np.uint32))
        enc = g.device.create_command_encoder(label=f"encode[{self.idx}].long_bpe_aux")
        cp = enc.begin_compute_pass(label="long_bpe_aux")
        grid = self.nb if mode == AUX_RECOUNT else -(-len(items) // WG)
        s.dispatch(cp, "long_bpe_aux", bg, g.grid(max(grid, 1)))
        cp.end()
        q.submit([enc.finish()])
        if mode == AUX_RECOUNT:
            return np.zeros(0, np.uint32)
        return g.read_u32(self.aux_out, 0, len(items), what="long-word cut checks")

    def check_cuts(self) -> tuple[int, tuple[int, int]] | None:
        """After every walk of the slice has ended: check the pair at each cut; move or remove
        the failing cuts (module docstring) and return the walks to run as
        :meth:`cut_long_words` does, or None when every cut passed (the word is encoded; the
        block counts are then recounted)."""
        s, lw = self.sess, self.lw
        md = s.trie.max_depth
        K = piece_bytes(md, s.chunk)
        gap = cut_gap(md, s.chunk)
        junc = np.flatnonzero(~lw.head)
        ok = self.aux(AUX_PAIR, lw.cut[junc], md + 1) if len(junc) else np.zeros(0, np.uint32)
        s.long_bpe_checks += len(junc)
        bad = junc[ok == 0]
        if not len(bad):
            self.aux(AUX_RECOUNT, np.zeros(0, np.uint32), 0)
            self.lw = None
            return None
        s.long_bpe_failed += len(bad)
        ends = lw.ends()
        wi = np.cumsum(lw.head) - 1
        first = np.flatnonzero(lw.head)
        keep = np.ones(len(lw.cut), bool)
        if lw.round == 1:  # move each failing cut into the piece before it
            prev_start, cur = lw.cut[bad - 1], lw.cut[bad]
            p = self.aux(AUX_BOUNDARY, cur - K // 2, md + 1).astype(np.int64)
            fine = (p != NO_TOKEN) & (p - prev_start >= gap) & (ends[bad] - p >= gap)
            lw.cut[bad[fine]] = p[fine]
            keep[bad[~fine]] = False
            walk = set(lw.cut[bad[fine]].tolist())
            gone = bad[~fine]
            s.long_bpe_moved += int(fine.sum())
        elif lw.round == 2:
            keep[bad] = False
            walk, gone = set(), bad
        else:  # rounds are bounded: a word still failing is walked on from its last good cut
            first_bad = np.full(len(first), len(lw.cut), np.int64)
            np.minimum.at(first_bad, wi[bad], bad)
            gone = np.flatnonzero(~lw.head & (np.arange(len(lw.cut)) >= first_bad[wi]))
            keep[gone] = False
            walk = set()
            s.long_bpe_walked_on += len(np.unique(wi[bad]))
            warn_once("long_bpe_walked_on", "torch_gpubpe: a long word's cuts kept failing "
                      "their checks in merge-order mode; the rest of it is walked by one GPU "
                      "thread (slow for MB-long words; Tokenizer session counter "
                      "long_bpe_walked_on)")
        s.long_bpe_removed += len(gone)
        # a removed cut: the piece before it (the last kept start before the cut) walks again
        kept = np.flatnonzero(keep)
        walk.update(lw.cut[kept[np.searchsorted(kept, gone) - 1]].tolist())
        lw.round += 1
        lw.drop(keep)
        walk_from = np.array(sorted(walk), np.int64)
        wi = np.cumsum(lw.head) - 1
        clear = np.full(len(first), np.iinfo(np.int64).max, np.int64)
        np.minimum.at(clear, wi[np.searchsorted(lw.cut, walk_from)], walk_from)
        self.write_cuts(lw, walk_from, clear)
        s.long_bpe_rewalks += len(walk_from)
        cb = walk_from // s.chunk // WG
        return len(walk_from), (int(cb.min()), int(cb.max()) + 1)
