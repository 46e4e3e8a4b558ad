"""The long-word passes of a batch slot (DESIGN.md §8): a word whose walk gets
``long_word_bytes`` past its chunk is finished by ``wgsl/encode.wgsl``'s ``long_periods`` →
``long_match`` → ``long_exits`` → ceil(log2(tiles)) × ``long_jump`` → ``long_emit``, then the
prefix sum and the compaction: the same ids as one walk (the token chain IS the greedy walk), in
O(n log n) work over the regions only. :class:`LongWordPasses` is a base of
:class:`torch_gpubpe.encoding.slot.Slot`, whose buffers and passes it uses.
"""

from __future__ import annotations

import numpy as np

from torch_gpubpe.encoding.layout import DOC_OFF, META_HEAD, REG_INLINE, WG
from torch_gpubpe.errors import GPUOperationError
from torch_gpubpe.gpu import wgpu_internals as _wi


class LongWordPasses:
    """The long-word half of :class:`~torch_gpubpe.encoding.slot.Slot` (its buffers, bind
    groups and submits)."""

    def long_regions(self) -> np.ndarray:
        """int64 ``(R, 2)``: first byte and end byte of each long-word region, ascending."""
        g = self.sess.gpu
        if self.long_errors or self.nreg > self.reg_cap:
            raise GPUOperationError(
                f"encoding a slice of {self.n} bytes: the long-word path reported "
                f"{self.long_errors} errors ({self.nreg} regions, room for {self.reg_cap}) on "
                f"{g.adapter_name}")
        if self.nreg <= REG_INLINE:
            flat = self.reg_inline[: 2 * self.nreg]
        else:
            flat = g.read_u32(self.meta, META_HEAD, 2 * self.nreg,
                              what="long-word regions readback")
        reg = flat.astype(np.int64).reshape(-1, 2)
        if not ((reg[:, 0] < reg[:, 1]) & (reg[:, 1] <= self.n)).all():
            raise GPUOperationError(
                f"encoding a slice of {self.n} bytes: invalid long-word regions on "
                f"{g.adapter_name}")
        return reg[np.argsort(reg[:, 0], kind="stable")]

    def ensure_long(self, positions: int, nreg: int) -> None:
        """Buffers of the long-word passes for ``positions`` long indices and ``nreg`` regions
        (grown ×1.5, at most ``sess.long_cap`` positions), and their bind groups."""
        s = self.sess
        g, U = s.gpu, s.gpu.wgpu.BufferUsage
        lab = f"encode[{self.idx}].long"
        if positions > self.cap_long or nreg > self.cap_lreg:
            self.cap_long = min(max(positions, int(self.cap_long * 1.5), 1 << 16), s.long_cap)
            self.cap_lreg = max(nreg, int(self.cap_lreg * 1.5), 64)
            nodes = self.cap_long // s.lc * s.ldw
            self.llen = g.buffer(4 * self.cap_long, U.STORAGE, f"{lab}.len")
            self.lexit = g.buffer(4 * self.cap_long, U.STORAGE, f"{lab}.exit")
            self.lptr = [g.buffer(4 * nodes, U.STORAGE, f"{lab}.ptr{k}") for k in (0, 1)]
            self.lmark = g.buffer(4 * nodes, U.STORAGE, f"{lab}.mark")
            self.ltab = g.buffer(16 * self.cap_lreg, U.STORAGE | U.COPY_DST, f"{lab}.regions")
            self.lparams = g.buffer(32, U.UNIFORM | U.COPY_DST, f"{lab}.params")
            self.lbg = None
        if self.lbg is not None:
            return
        b = {0: self.text, 2: s.nodes, 3: s.edges, 4: self.scratch, 5: self.counts, 7: self.meta,
             24: self.ltab, 25: self.lparams, 26: self.llen, 27: self.lexit, 28: self.lptr[0],
             29: self.lptr[1], 30: self.lmark}

        def bg(name, uses, **swap):
            return g.bind_group(s.pipes[name], {k: swap.get(f"b{k}", b[k]) for k in uses},
                                label=f"{lab}.{name}")

        self.lbg = {
            "lperiods": bg("lperiods", (0, 24, 25, 26)),
            "lmatch": bg("lmatch", (0, 2, 3, 4, 24, 25, 26)),
            "lexits": bg("lexits", (4, 24, 25, 26, 27, 28, 30)),
            "ljump": [bg("ljump", (25, 28, 29, 30)),
                      bg("ljump", (25, 28, 29, 30), b28=self.lptr[1], b29=self.lptr[0])],
            "lemit": bg("lemit", (4, 5, 7, 24, 25, 26, 30)),
        }

    def encode_long_words(self) -> tuple[int, np.ndarray]:
        """Encode the slice's long-word regions in parallel (wgsl/encode.wgsl, long_periods →
        long_match →
        long_exits → ceil(log2(tiles)) × long_jump → long_emit), then the prefix sum and the
        compaction; one submit per group of regions that fits ``sess.long_cap`` (one group unless
        the slice is near the binding limit). Returns ``(total, doc_tok)`` as ``_read_meta``."""
        s, g = self.sess, self.sess.gpu
        reg = self.long_regions()
        tiles = -(-(reg[:, 1] - reg[:, 0]) // s.lc)
        if int(tiles.max()) * s.lc > s.long_cap:  # a region is at most a slice (limit + lc)
            raise RuntimeError(f"long-word region of {int(tiles.max()) * s.lc} B above the "
                               f"group capacity {s.long_cap} B")
        groups, a, acc = [], 0, 0
        for i, t in enumerate(tiles.tolist()):
            if acc and acc + t * s.lc > s.long_cap:
                groups.append((a, i))
                a, acc = i, 0
            acc += t * s.lc
        groups.append((a, len(tiles)))
        s.long_regions += len(reg)
        for gi, (a, b) in enumerate(groups):
            tl = tiles[a:b]
            ntiles = int(tl.sum())
            tab = np.zeros((b - a, 4), np.uint32)
            tab[:, 0], tab[:, 1] = reg[a:b, 0], reg[a:b, 1]
            tab[:, 2] = np.cumsum(tl) - tl
            rounds = int(tl.max() - 1).bit_length()  # 2^rounds >= tiles of the longest region
            self.ensure_long(ntiles * s.lc, b - a)
            q = g.device.queue
            q.write_buffer(self.ltab, 0, tab)
            q.write_buffer(self.lparams, 0, np.array(
                [self.n, b - a, ntiles, ntiles * s.ldw, 0, 0, 0, 0], np.uint32))
            if gi == len(groups) - 1:
                self.write_params(resume=2)  # the compaction after the last group runs
            enc = g.device.create_command_encoder(label=f"encode[{self.idx}].long_words")
            cp = enc.begin_compute_pass(label="long_words")
            s.dispatch(cp, "lperiods", self.lbg["lperiods"], g.grid(-(-ntiles // WG)))
            s.dispatch(cp, "lmatch", self.lbg["lmatch"], g.grid(-(-ntiles * s.lc // WG)))
            s.dispatch(cp, "lexits", self.lbg["lexits"], g.grid(-(-ntiles // WG)))
            for r in range(rounds):
                s.dispatch(cp, "ljump", self.lbg["ljump"][r % 2],
                           g.grid(-(-ntiles * s.ldw // WG)))
            s.dispatch(cp, "lemit", self.lbg["lemit"], g.grid(-(-ntiles // WG)))
            cp.end()
            if gi == len(groups) - 1:
                self.record_passes(enc, first=False, continuations=0, scan=True)
            q.submit([enc.finish()])
            s.long_submits += 1
            s.long_dispatches += 4 + rounds
        self.meta_promise = self.rb_meta.map_async(_wi.map_read_mode(), 0,
                                                   DOC_OFF + 4 * self.ndocs)
        total, _, doc_tok = self.read_meta()
        if self.long_errors:
            raise GPUOperationError(
                f"encoding a slice of {self.n} bytes: {self.long_errors} long-word tiles found "
                f"no token chain on {g.adapter_name}")
        return total, doc_tok
