"""Shared by benchmarks/encode.py and benchmarks/gpt2.py: GPU time per pass, from timestamp
queries, at the GPU's loaded clock, the same method for every column.

A GPU that waits on the host clocks down (to a fraction of its loaded clock), and a timing taken
after a gap measures the gap's clock, not the kernel. So, for each column (a group of
tokenizers timed together: e.g. a merge-order build and greedy mode on the same vocab):

1. warm-up: submits of the column's own work, two in flight (the GPU has the next submit queued
   while the host reads one back: no idle gap), for at least ``warm_s`` seconds, untimed;
2. then ``rounds`` rounds over the batches, the group's tokenizers interleaved batch by batch
   (A B A B ...: both see the same clock), still two in flight, each submit running the
   batch's passes ``reps`` times back to back (``session.profile_repeat``) and EVERY repetition
   timed (``session.rep_pass_us``);
3. per tokenizer, pass and batch: the minimum and the median over its ``reps * rounds``
   repetitions, each summed over the batches (``all passes``: the same of each repetition's
   sum of passes);
4. the SM clock (``nvidia-smi``) sampled every 0.1 s during the column (warm-up excluded).

Public API plus the encoder's timing hooks (``Tokenizer(profile=True)``, ``profile_repeat``,
``last_pass_us`` / ``rep_pass_us``).
"""

from __future__ import annotations

import statistics
import time

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
    """Time the tokenizers of ``group`` (name -> ``Tokenizer(profile=True)``) on ``jobs`` (one
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
