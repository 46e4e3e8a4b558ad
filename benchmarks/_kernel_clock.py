"""Shared by benchmarks/encode.py and benchmarks/gpt2.py: GPU time per pass, from timestamp
queries, at the GPU's loaded clock, the same method for every column.

A GPU that waits on the host clocks down (to a fraction of its loaded clock), and a timing taken
after a gap measures the gap's clock, not the kernel. So, for each column (a group of
tokenizers timed together: e.g. a merge-order build and greedy mode on the same vocab):

1. warm-up: submits of the column's own work, two in flight (the GPU has the next submit queued
   while the host reads one back: no idle gap), for at least ``warm_s`` seconds, untimed;
2. then ``rounds`` rounds over the batches, the group's tokenizers interleaved batch by batch
   (A B A B ...: both see the same clock), still two in flight, each submit running the
   batch's passes ``reps`` times back to back (:class:`RepeatSlot`: ``session.profile_repeat``)
   and EVERY repetition timed (``session.rep_pass_us``);
3. per tokenizer, pass and batch: the minimum and the median over its ``reps * rounds``
   repetitions, each summed over the batches (``all passes``: the same of each repetition's
   sum of passes);
4. the SM clock (``nvidia-smi``) sampled every 0.1 s during the column (warm-up excluded).

The tokenizers timed are :class:`ClockTokenizer` s (``ClockTokenizer(vocab, profile=True)``):
a :class:`~torch_gpubpe.Tokenizer` whose session (:class:`RepeatSession`) records the passes
repeatedly, through the encoder's extension hooks (``Tokenizer.session_class``,
``Session.slot_class``, ``Slot.record_slice`` / ``resolve_timestamps`` / ``read_meta``).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from torch_gpubpe.encoding.session import Session
from torch_gpubpe.encoding.slot import Slot
from torch_gpubpe.encoding.tokenizer import Tokenizer
from torch_gpubpe.gpu import wgpu_internals as wi

REP_STRIDE = 32  # timestamp queries per repetition (256-byte aligned resolve offsets)
MAX_REPEAT = 4096 // REP_STRIDE + 1


class RepeatSlot(Slot):
    """A batch slot that records each fresh slice's passes ``sess.profile_repeat`` times back
    to back when timed, so that the GPU runs at its loaded clock; each repetition starts afresh
    and each is timed: the last in ``sess.last_pass_us`` (as the product does), all of them in
    ``sess.rep_pass_us``."""

    reps_timed = 0  # repetitions before the last of the slice in flight
    rep_cap = 0

    def _ensure_rep_queries(self, k: int) -> None:
        """Timestamp queries for ``k`` repetitions before the last: repetition ``r`` writes at
        ``REP_STRIDE * r``."""
        if self.rep_cap >= k:
            return
        if k + 1 > MAX_REPEAT:
            raise ValueError(f"profile_repeat {k + 1}: at most {MAX_REPEAT}")
        g, U = self.sess.gpu, self.sess.gpu.wgpu.BufferUsage
        lab = f"encode[{self.idx}]"
        self.rep_qs = g.device.create_query_set(label=f"{lab}.rep_timestamps", type="timestamp",
                                                count=k * REP_STRIDE)
        self.rep_resolve = g.buffer(8 * REP_STRIDE * k, U.QUERY_RESOLVE | U.COPY_SRC,
                                    f"{lab}.rep_resolve")
        self.rb_reps = g.buffer(8 * REP_STRIDE * k, U.MAP_READ | U.COPY_DST, f"{lab}.rb_reps")
        self.rep_cap = k

    def record_slice(self, enc, n: int, has_mask: bool, ts_at) -> None:
        reps = self.sess.profile_repeat if ts_at is not None else 1
        self.reps_timed = reps - 1 if reps > 1 else 0
        if self.reps_timed:
            self._ensure_rep_queries(self.reps_timed)
        for r in range(self.reps_timed):
            super().record_slice(enc, n, has_mask, (self.rep_qs, REP_STRIDE * r))
        super().record_slice(enc, n, has_mask, ts_at)

    def resolve_timestamps(self, enc, ts_at, k: int) -> None:
        if ts_at[0] is self.query_set:  # the last repetition: as the product does
            super().resolve_timestamps(enc, ts_at, k)
            return
        enc.resolve_query_set(ts_at[0], ts_at[1], k, self.rep_resolve, 8 * ts_at[1])
        enc.copy_buffer_to_buffer(self.rep_resolve, 8 * ts_at[1], self.rb_reps, 8 * ts_at[1],
                                  8 * k)

    def read_meta(self):
        out = super().read_meta()
        if self.query_set is None:
            return out
        reps = []
        if self.reps_timed:
            nb = 8 * REP_STRIDE * self.reps_timed
            self.sess.gpu.wait_map(self.rb_reps, wi.map_read_mode(), 0, nb,
                                   what="repeated pass timestamps")
            try:
                rt = np.frombuffer(self.rb_reps.read_mapped(0, nb), np.uint64).astype(np.int64)
            finally:
                self.rb_reps.unmap()
            names, tick = self.timed_passes(), self.sess.ns_per_tick
            for r in range(self.reps_timed):
                b = REP_STRIDE * r
                reps.append({name: (rt[b + 2 * k + 1] - rt[b + 2 * k]) * tick / 1e3
                             for k, name in enumerate(names)})
        self.sess.rep_pass_us = reps + [dict(self.sess.last_pass_us)]
        return out


class RepeatSession(Session):
    """The encoder's session with :class:`RepeatSlot` slots: ``profile_repeat`` (times each
    slice's passes are recorded, 1 by default) and ``rep_pass_us`` (every repetition's
    ``last_pass_us`` of the last slice)."""

    slot_class = RepeatSlot

    def __init__(self, *args, **kwargs) -> None:
        self.profile_repeat = 1
        self.rep_pass_us: list[dict[str, float]] = []
        super().__init__(*args, **kwargs)


class ClockTokenizer(Tokenizer):
    """A :class:`~torch_gpubpe.Tokenizer` whose session is a :class:`RepeatSession`."""

    session_class = RepeatSession

METHOD = ("GPU ms per pass from timestamp queries: each column after a >= {warm:g} s warm-up of "
          "back-to-back submits, its tokenizers interleaved batch by batch (ABAB, two submits in "
          "flight: no host wait between), each batch's passes run {reps}x back to back per submit, "
          "{rounds} round(s), every repetition timed; min = the fastest repetition of each batch, "
          "median = the median one, summed over the {nb} batches; SM clock sampled during the "
          "timed part of each column")


def clock_summary(samples: list[int]) -> str:
    """``"1,980 MHz (min 1,980, max 1,980, 12 samples)"`` (median first), or n/a."""
    if not samples:
        return "n/a (no nvidia-smi)"
    return (f"{int(statistics.median(samples)):,} MHz (min {min(samples):,}, "
            f"max {max(samples):,}, {len(samples)} samples)")


def time_columns(group: dict, jobs: list, reps: int = 8, rounds: int = 2,
                 warm_s: float = 0.25) -> dict:
    """Time the tokenizers of ``group`` (name -> ``ClockTokenizer(profile=True)``) on ``jobs`` (one
    callable per batch: ``job(tok) -> PendingEncoding``, e.g. ``lambda t: t.submit_packed(d,
    o)``), interleaved as the module docstring says.

    Returns ``{name: {"min": {pass: µs}, "median": {pass: µs}, "samples": repetitions per
    batch, "continuations": continuation dispatches (not in the pass times), "multi_slice":
    batches over one slice (their times are the last slice's)}}`` plus ``"clock"``: the SM
    clock samples (MHz, list) and ``"clock_summary"``.
    """
    from _report import GPUMonitor

    toks = list(group.items())
    sess = {n: t._session() for n, t in toks}
    for n, s in sess.items():
        if not isinstance(s, RepeatSession):
            raise TypeError(f"time_columns: {n} is not a ClockTokenizer")
    for s in sess.values():
        s.profile_repeat = reps
    per = {n: [[] for _ in jobs] for n in group}  # name -> batch -> list of {pass: µs}
    cont0 = {n: s.continuation_dispatches for n, s in sess.items()}
    multi = dict.fromkeys(group, 0)
    order = [(n, b) for _ in range(rounds) for b in range(len(jobs)) for n, _t in toks]
    pending: list = []  # (name, batch index or None for warm-up, slices before, future)

    def drain_one() -> None:
        n, b, s0, fut = pending.pop(0)
        fut.result()
        s = sess[n]
        if b is None:
            return
        if s.slices - s0 > 1:
            multi[n] += 1
        per[n][b].extend(dict(d) for d in s.rep_pass_us)

    def submit(n: str, b: int | None, job) -> None:
        if len(pending) >= 2:
            drain_one()
        pending.append((n, b, sess[n].slices, job(group[n])))

    try:
        t0 = time.perf_counter()
        k = 0
        while time.perf_counter() - t0 < warm_s or k < len(toks):  # warm-up, untimed
            n, b = order[k % len(order)]
            submit(n, None, jobs[b])
            k += 1
        with GPUMonitor() as mon:
            for n, b in order:
                submit(n, b, jobs[b])
            while pending:
                drain_one()
    finally:
        for s in sess.values():
            s.profile_repeat = 1
        while pending:  # (an exception: leave no submit behind)
            pending.pop(0)[3].result()
    out: dict = {}
    for n in group:
        mins: dict[str, float] = {}
        meds: dict[str, float] = {}
        for reps_b in per[n]:
            if not reps_b:
                continue
            names = list(reps_b[0])
            for k in names + ["all passes"]:
                vals = [sum(d.values()) if k == "all passes" else d.get(k, 0.0) for d in reps_b]
                mins[k] = mins.get(k, 0.0) + min(vals)
                meds[k] = meds.get(k, 0.0) + statistics.median(vals)
        out[n] = {"min": mins, "median": meds, "samples": reps * rounds,
                  "continuations": sess[n].continuation_dispatches - cont0[n],
                  "multi_slice": multi[n]}
    clocks = [c for c, _ in mon.samples]
    out["clock"] = clocks
    out["clock_summary"] = clock_summary(clocks)
    return out
