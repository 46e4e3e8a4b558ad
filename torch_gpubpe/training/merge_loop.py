"""One training run's merge loop on the GPU: :class:`MergeLoop` owns every submit and readback.

Flow (DESIGN.md §3; the kernels are recorded by the algorithm's module,
:mod:`~torch_gpubpe.training.wordlist_loop` or :mod:`~torch_gpubpe.training.seed_loop`, over the
shared :class:`~torch_gpubpe.training.pair_table.PairTable`):

1. ``clear_table`` + ``pair_count`` once;
2. per merge the algorithm's dispatches, batches of 16, 32, … up to ``batch`` merges recorded
   into one command buffer and one submit (native calls through
   :mod:`~torch_gpubpe.gpu.wgpu_internals`); the merge list stays on the GPU and only the state
   words (+ for progress, the merges the batch may have learned) are read back per
   batch, while the next batch already runs;
3. between batches: the pair table recounted (and grown) when half full; a probe sequence that
   ran out ends the run (the caller restarts with a 4× table: same result); carried walks
   continued.
"""

from __future__ import annotations

import time

import numpy as np

from torch_gpubpe import notices
from torch_gpubpe.gpu.wgpu_internals import map_read_mode, raw_recorder, timestamp_period_ns
import torch_gpubpe.training.seed_loop as seed_loop
import torch_gpubpe.training.wordlist_loop as wordlist_loop
from torch_gpubpe.training.pair_table import PairTable
from torch_gpubpe.training.profiler import KernelProfiler
from torch_gpubpe.training.progress import ProgressReporter

ALGORITHMS = ("wordlist", "seed")    # the default first
MAX_CONTINUATIONS_PER_SUBMIT = 64    # wl_continue dispatches per submit (doubling from 1)
# GPU time aimed at per submit of the merge loop: merges per batch and wl_continue dispatches
# per submit are capped by the GPU time measured per merge / per dispatch, so the interval
# between two submits stays near this (the GPU is never held for long by one submit: a merge's
# walk over one very long word can take many dispatches).
TARGET_SUBMIT_S = 0.020


def algorithm_module(algorithm: str):
    """The module of ``algorithm``'s kernels (``SHADER``, ``STEP``, its kernel class)."""
    return {"wordlist": wordlist_loop, "seed": seed_loop}[algorithm]


def check_algorithm(algorithm: str) -> str:
    """``algorithm`` if it is one of :data:`ALGORITHMS`, else ``ValueError``."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    return algorithm


def pow2_at_least(x: int) -> int:
    """The smallest power of two ≥ ``x`` (1 for ``x`` ≤ 1)."""
    return 1 << max(0, int(x - 1).bit_length())


_noticed: set[str] = set()


def notice_once(msg: str) -> None:
    """Warn ``msg`` (:func:`torch_gpubpe.notices.warn`) the first time only, per process."""
    if msg not in _noticed:
        _noticed.add(msg)
        notices.warn(msg)


class MergeLoop:
    """One training run: the algorithm's kernels on a :class:`~torch_gpubpe.training.pair_table.
    PairTable`, driven in batches of merges (this class owns every submit and readback).

    Flow: clear_table + pair_count once; batches of 16, 32, … up to ``batch`` merges recorded
    into one command buffer and one submit each, two in flight; per batch only the state
    words (and, for progress, the merges the batch may have learned: their counts) are read
    back (the merge list stays on the GPU). Between batches: when half the pair table is
    taken (keys whose count fell to 0 stay) it is recounted from the current stream, grown
    when the live pairs fill a quarter; a probe sequence that ran out (S_OVERFLOW) ends the
    run (the caller retrains with a 4× table: same merges); word list: walks carried past
    their budget (S_PAUSE) are continued (wl_continue) before the next batch.
    """

    def __init__(self, trainer, algorithm: str, wide: bool, sym, wid, starts, lens,
                 wts, num_merges: int, min_frequency: int, rows: int, batch: int, st: dict,
                 profile: bool, budget: int | None) -> None:
        mod = algorithm_module(algorithm)
        g = self.g = trainer.gpu
        info = trainer.info[algorithm]
        self.c = c = info.consts
        self.st, self.batch, self.num_merges = st, batch, num_merges
        self.is_cpu = trainer.is_cpu
        self.n = n = len(sym)
        self.max_rows = max(c["COLS"], pow2_at_least(g.binding_bytes(4) // (8 * c["COLS"]))
                            // 2)
        pipes = trainer.pipelines(algorithm, wide, profile)
        self.walk_counters = profile and "S_WALK_STEPS" in c
        self.walk_totals = dict.fromkeys(("entries", "steps", "probes", "depth", "blocks"), 0)
        # (u32 counters on the GPU, wrapping)
        self.walk_last = dict.fromkeys(self.walk_totals, 0)
        if algorithm == "seed":
            params = {"tile_cap": mod.SeedKernels.tile_cap(n, c["TILE"])}
        else:
            budget = int(budget or mod.default_budget(g, trainer.is_cpu))
            params = {"budget": budget, **mod.long_params(trainer.is_cpu)}
            st["walk_budget"] = budget
        self.table = PairTable(g, info, num_merges, min_frequency, wts, rows, params,
                               f"train_{algorithm}")
        if algorithm == "seed":
            self.k = mod.SeedKernels(g, pipes, info, self.table, sym, wid)
            state = {"S_N": n}
        else:
            wgs = mod.grid_workgroups(len(lens), trainer.is_cpu)
            self.k = mod.WordListKernels(g, pipes, info, self.table, sym, wid, starts, lens,
                                         num_merges, wgs, trainer.is_cpu)
            state = self.k.initial_state()
            st["walk_workgroups"] = self.k.workgroups
        self.table.write_state(**state)
        st["table_slots"] = self.table.slots
        self.profiler = (KernelProfiler(g, mod.STEP) if profile and g.has_timestamps else None)
        # GPU time of each batch of merges, at least the time between timestamps written at
        # the start and end of its pass (slots 0, 1: the two readback buffers), read back with
        # it: what the TARGET_SUBMIT_S cap divides by. (From wall time alone a CPU adapter
        # misleads: there a batch runs inside the NEXT submit call, so the batch looks free
        # and the next one would be sized far past TARGET_SUBMIT_S.)
        self.ts = None
        if g.has_timestamps:
            U = g.wgpu.BufferUsage
            self.ts = (g.device.create_query_set(label="train.batch_ts", type="timestamp",
                                                 count=4),
                       g.buffer(256 * 2, U.QUERY_RESOLVE | U.COPY_SRC, "train.batch_ts"),
                       timestamp_period_ns(g.device.queue) / 1e9)
        self.occ_mark = 0       # table occupancy at the last readback / rebuild
        self._last_submit: float | None = None   # perf_counter at the last submit (_submit)
        self._last_cpu = 0.0        # process_time at the last submit
        self._last_kind = "-"       # what the last submit was
        self._waited = 0.0          # seconds blocked on the GPU since the last submit
        self._in_submit = 0.0       # seconds the last queue.submit call took
        self.key_rate = 0.0     # new table keys per step (peak; on a CPU adapter halving)
        self.words = c["STATE_WORDS"]
        self.continue_reps = 1      # wl_continue dispatches in the first submit of a pause
        self.done_word = c.get("S_DONE")   # word list: a recorded merge not yet committed
        self.pause_word = c.get("S_PAUSE")
        self._gpu_bytes()

    def _gpu_bytes(self) -> None:
        b = self.table.gpu_bytes() + self.k.gpu_bytes()
        self.st["gpu_memory_bytes"] = max(self.st.get("gpu_memory_bytes", 0), b)

    # -- submits and readbacks ------------------------------------------------------------------
    def _submit(self, enc, what: str) -> None:
        """Submit ``enc``; keep the largest interval between the starts of two submits of the
        run (``stats["max_submit_gap_s"]``; ``["max_submit_gap_after"]`` / ``["_before"]``, the
        kinds of the submits that opened and ended it: init (a CPU adapter's first writes of
        its buffers, ``WordListKernels.init_pieces``), count, merges, continue;
        ``["max_submit_gap_wait_s"]``, of it the host blocked on GPU readbacks, and
        ``["max_submit_gap_in_submit_s"]``, in the submit call that opened it (a CPU adapter
        runs the work there); the rest is host work; ``["submits"]`` counts them;
        ``["max_submit_gap_cpu_s"]``, the most CPU time this process (all its threads: a CPU
        adapter's work too) spent between two submits): the longest
        the GPU waited for the host or one submit ran (:data:`TARGET_SUBMIT_S` caps the GPU
        work per submit, also on one very long word)."""
        t = time.perf_counter()
        cpu = time.process_time()
        st, last = self.st, self._last_submit
        if last is not None:
            # (this process's CPU time over the gap, all threads: on a CPU adapter the GPU
            # work is in it, so it tells a slow submit from a busy machine)
            st["max_submit_gap_cpu_s"] = max(st.get("max_submit_gap_cpu_s", 0.0),
                                             cpu - self._last_cpu)
        self._last_cpu = cpu
        if last is not None and t - last > st.get("max_submit_gap_s", 0.0):
            # (after: the submit that opened the gap; wait: of the gap, the host blocked on
            # the GPU (readbacks: GPU work and latency); in_submit: in that submit call; the
            # rest host work)
            st["max_submit_gap_s"], st["max_submit_gap_before"] = t - last, what
            st["max_submit_gap_after"] = self._last_kind
            st["max_submit_gap_wait_s"] = self._waited
            st["max_submit_gap_in_submit_s"] = self._in_submit
        self._last_submit, self._last_kind, self._waited = t, what, 0.0
        st["submits"] = st.get("submits", 0) + 1
        self.g.device.queue.submit([enc.finish()])
        # (a CPU adapter runs the work inside submit: that time is GPU work there)
        self._in_submit = time.perf_counter() - t

    def _wait(self, promise, what: str) -> None:
        t = time.perf_counter()
        self.g.wait_promise(promise, what)
        self._waited += time.perf_counter() - t

    def _state(self) -> np.ndarray:
        t = time.perf_counter()
        v = self.g.read_u32(self.table.buffers["state"], 0, self.words, what="training state")
        self._waited += time.perf_counter() - t
        return v

    def _count(self, merges_done: int, n: int, setup: bool = False) -> None:
        """clear_table + pair_count over the current stream (``setup``: first the
        algorithm's own set-up dispatches, if it has any, after its buffers' first writes on a
        CPU adapter: bounded submits of their own, ``init_pieces``)."""
        pieces = self.k.init_pieces() if setup and hasattr(self.k, "init_pieces") else []
        for record in pieces:
            enc = self.g.device.create_command_encoder(label="train.init")
            record(enc)
            self._submit(enc, "init")
        if pieces:
            self.st["init_submits"] = self.st.get("init_submits", 0) + len(pieces)
        plans = self.k.count_plans(setup) if hasattr(self.k, "count_plans") else [(None, [])]
        if len(plans) > 1:      # a CPU adapter: the passes over the stream split into submits
            for wg0, steps in plans:
                if wg0 is not None:
                    self.table.set_state_word("S_WG0", wg0)
                enc = self.g.device.create_command_encoder(label="train.count")
                cp = enc.begin_compute_pass(label="train.count")
                raw_recorder().plan(cp, steps)(1)
                cp.end()
                self._submit(enc, "count")
            self.st["count_submits"] = self.st.get("count_submits", 0) + len(plans)
            return
        enc = self.g.device.create_command_encoder(label="train.count")
        cp = enc.begin_compute_pass(label="train.count")
        if setup and hasattr(self.k, "record_setup"):
            self.k.record_setup(cp)
        self.k.record_count(cp, merges_done, n)
        cp.end()
        self._submit(enc, "count")

    def _window(self, recorded: int, done: int, cnt: int) -> int:
        """The merges, from merge ``recorded`` on, that a batch of ``cnt`` steps copies back
        for progress (``done``: the merges read back so far): every merge it can learn. Each
        step learns at least one merge (until training stops) and at most
        ``merges_per_step``, so the steps queued before it (``recorded - done`` of them) end
        at merge ``recorded`` or later and it ends by ``done + merges_per_step × (recorded -
        done + cnt)``. Seed (one merge per step): ``cnt``."""
        per = self.k.merges_per_step
        return min(self.num_merges, done + per * (recorded - done + cnt)) - recorded

    def _record(self, k0: int, cnt: int, buf, slot: int = 0, window: int = 0):
        """Submit ``cnt`` steps from merge k0 on and the copy of state + merges k0 ..
        k0+window-1 (+ the pass's two timestamps, query slot ``slot``) into ``buf``; the map's
        promise, and whether the timestamps were written (not in a profiled batch)."""
        g, b = self.g, self.table.buffers
        enc = g.device.create_command_encoder(label="train.merges")
        prof = self.profiler is not None and self.profiler.wants(k0)
        if prof:
            for k in range(k0, k0 + cnt):
                for name, pipe, bg, grid in self.k.steps(k):
                    cp = self.profiler.begin(enc, name, k - k0)
                    raw_recorder().plan(cp, [(pipe, bg, grid)])(1)
                    cp.end()
            self.profiler.resolve(enc)
        else:
            cp = self._timed_pass(enc, "train.merges", slot)
            self.k.record_merges(cp, k0, cnt)
            cp.end()
        nbytes = 4 * self.words
        enc.copy_buffer_to_buffer(b["state"], 0, buf, 0, nbytes)
        if window:
            enc.copy_buffer_to_buffer(b["merges"], 16 * k0, buf, nbytes, 16 * window)
        if not prof:
            self._copy_ts(enc, slot, buf, nbytes + 16 * window)
        self._submit(enc, "merges")
        self.st["merge_submits"] = self.st.get("merge_submits", 0) + 1
        if prof:
            self.profiler.collect()
        return buf.map_async(map_read_mode(), 0, nbytes + 16 * window + 16), not prof

    def _timed_pass(self, enc, label: str, slot: int):
        """A compute pass, with start/end timestamps into query slot ``slot`` when the
        adapter has them."""
        if self.ts is None:
            return enc.begin_compute_pass(label=label)
        return enc.begin_compute_pass(label=label, timestamp_writes={
            "query_set": self.ts[0], "beginning_of_pass_write_index": 2 * slot,
            "end_of_pass_write_index": 2 * slot + 1})

    def _copy_ts(self, enc, slot: int, dst, offset: int) -> None:
        """Resolve slot ``slot``'s two timestamps and copy them (16 B) to ``dst`` at ``offset``."""
        if self.ts is not None:
            enc.resolve_query_set(self.ts[0], 2 * slot, 2, self.ts[1], 256 * slot)
            enc.copy_buffer_to_buffer(self.ts[1], 256 * slot, dst, offset, 16)

    def _ts_seconds(self, raw: np.ndarray, at: int) -> float | None:
        """The GPU seconds between the two u64 timestamps at u32 index ``at`` of ``raw``, or
        None without timestamps (or a value that cannot be a pass's time)."""
        if self.ts is None:
            return None
        t = raw[at:at + 4].view(np.uint64)
        d = (int(t[1]) - int(t[0])) * self.ts[2]
        return d if 0 <= d < 3600 else None

    def _continue_walks(self) -> np.ndarray:
        """Run wl_continue until no walk is carried (doubling the dispatches per submit up to
        MAX_CONTINUATIONS_PER_SUBMIT, and to what TARGET_SUBMIT_S allows at the GPU time
        measured per dispatch; a pause starts at the last one's count); release the hold; the
        state."""
        reps = self.continue_reps
        self.st["walks_paused"] += 1
        while True:
            enc = self.g.device.create_command_encoder(label="train.continue")
            cp = enc.begin_compute_pass(label="train.continue")
            self.k.record_continue(cp, reps)
            cp.end()
            t = time.perf_counter()
            self._submit(enc, "continue")
            self.st["continuation_dispatches"] += reps
            self.st["continue_submits"] = self.st.get("continue_submits", 0) + 1
            stv = self._state()
            # (submit → state read: the dispatches' GPU time plus one round trip; nothing else
            # is in flight here, so the wall time is right; on a CPU adapter the timestamps
            # undercount it)
            per = (time.perf_counter() - t) / reps
            self.st["continue_s_per_dispatch"] = per
            cap = max(1, int(TARGET_SUBMIT_S / per)) if per > 0 else MAX_CONTINUATIONS_PER_SUBMIT
            if not stv[self.pause_word]:
                break
            reps = max(1, min(2 * reps, MAX_CONTINUATIONS_PER_SUBMIT, cap))
        # the next pause starts where this one's time per dispatch allows
        self.continue_reps = max(1, min(reps, cap))
        self.table.set_state_word("S_HOLD", 0)
        return stv

    def _tally(self, stv: np.ndarray) -> None:
        """Add the walk counters' growth since the last state read (each a wrapping u32;
        a batch adds far less than 2^32)."""
        if not self.walk_counters:
            return
        for key in self.walk_totals:
            v = int(stv[self.c[f"S_WALK_{key.upper()}"]])
            self.walk_totals[key] += (v - self.walk_last[key]) % (1 << 32)
            self.walk_last[key] = v

    def _drain(self, inflight: list) -> None:
        for b2, p2, *_ in inflight:
            self._wait(p2, "training state readback")
            b2.unmap()
        inflight.clear()

    def run(self, progress: ProgressReporter | None, t0: float) -> list[tuple[int, int]] | None:
        """The merge loop; None when the pair table overflowed (caller restarts larger).
        ``progress`` is told each batch's merges (their counts: the merges read back with the
        state words)."""
        g, st, c = self.g, self.st, self.c
        t_c = time.perf_counter()
        self._count(0, self.n, setup=True)
        self.occ_mark = int(self._state()[c["S_OCC"]])
        st["table_initial_load"] = self.occ_mark / self.table.slots
        t_up = time.perf_counter()
        st["seconds_upload"] = t_up - t0
        st["seconds_upload_gpu"] = t_up - t_c     # set-up + first pair count, waited for
        U = g.wgpu.BufferUsage
        nbytes = 4 * self.words
        # The merges read back per batch, for progress only (none without): at most one batch
        # is queued when one is recorded, so a window (_window) spans ≤ 2 batches' merges.
        most = (0 if progress is None else
                min(self.num_merges, (2 * self.k.merges_per_step - 1) * self.batch))
        staging = [g.buffer(nbytes + 16 * most + 16, U.MAP_READ | U.COPY_DST,
                            f"train.readback{i}") for i in (0, 1)]
        # (buffer, promise, timed, k0, cnt, submitted at, window), oldest first, ≤ 2
        inflight: list = []
        recorded = done = nbatches = n_now = 0
        stopped = need_rebuild = False
        size = 1                # doubles per batch (to self.batch) while the GPU time allows
        cap = self.batch        # merges per batch the GPU time per merge allows
        prev_done = 0.0         # when the last batch's readback completed
        while True:
            if need_rebuild and not inflight:
                self._rebuild(done, n_now)
                need_rebuild = False
            if (not stopped and not need_rebuild and recorded < self.num_merges
                    and len(inflight) < 2):
                cnt = min(size, cap, self.num_merges - recorded)
                buf = staging[nbatches % 2]
                win = 0 if progress is None else self._window(recorded, done, cnt)
                if win > most:
                    raise RuntimeError(f"a batch's merges ({win}) overrun the readback ({most})")
                t_sub = time.perf_counter()
                inflight.append((buf, *self._record(recorded, cnt, buf, nbatches % 2, win),
                                 recorded, cnt, t_sub, win))
                recorded += cnt
                nbatches += 1
                size = min(self.batch, size * 2)
                if len(inflight) < 2 and recorded < self.num_merges:
                    continue        # keep one batch queued behind the one being read
            if not inflight:
                break
            buf, promise, timed, k0, cnt, t_sub, win = inflight.pop(0)
            self._wait(promise, "training state readback")
            t_done = time.perf_counter()
            # the batch's GPU time: from its submit, or from the end of the one before it
            # (batches queue back to back), to its readback
            gpu_s = t_done - max(t_sub, prev_done)
            prev_done = t_done
            raw = np.frombuffer(buf.read_mapped(0, nbytes + 16 * win + 16), np.uint32).copy()
            buf.unmap()
            ts = self._ts_seconds(raw, self.words + 4 * win) if timed else None
            if ts is not None:     # (CPU adapters: the wall estimate far from the timestamps)
                gpu_s = max(gpu_s, ts)
            raw = raw[:self.words + 4 * win]
            done_before = done
            stv = raw[:self.words]
            if stv[c["S_OVERFLOW"]]:
                self._drain(inflight)
                return None
            if self.pause_word is not None and stv[self.pause_word]:
                # A walk ran out of budget: the queued batch did nothing (S_HOLD); continue
                # the carried walks, then go on from the merges done.
                self._drain(inflight)
                self._tally(stv)
                stv = self._continue_walks()
                recorded = int(stv[c["S_K"]]) + int(stv[self.done_word])
                # A CPU adapter's batches start again at one merge: the rest of a paused
                # batch (and all of the one queued behind it) were held, dispatches that do
                # nothing but still cost there (a GPU holds a merge in microseconds).
                if self.is_cpu:
                    size = 1
            self._tally(stv)
            done = int(stv[c["S_K"]]) + (int(stv[self.done_word]) if self.done_word else 0)
            stopped = stopped or bool(stv[c["S_STOP"]])
            # A word-list step may make several merges: what is recorded is at least the
            # merges done and one per queued step.
            recorded = max(recorded if "S_SH" not in c else 0,
                           done + sum(f[4] for f in inflight))
            if "S_SH" in c:
                st["merge_steps"] = int(stv[c["S_SH"]])
            got = min(cnt, max(0, done - k0))
            if got == cnt and not (self.pause_word is not None and raw[self.pause_word]):
                per = gpu_s / cnt
                st["seconds_gpu_per_merge_max"] = max(st.get("seconds_gpu_per_merge_max", 0.0),
                                                      per)
                cap = max(1, min(self.batch, int(TARGET_SUBMIT_S / per) if per > 0
                                 else self.batch))
            if progress is not None:
                el = time.perf_counter() - t_up
                progress.batch(done_before, done, k0, raw[self.words:].reshape(-1, 4),
                               done / el if el > 0 else 0.0)
            n_now = int(stv[c["S_N"]])
            occ = int(stv[c["S_OCC"]])
            # New keys per step, over the last batch read. Before a rebuild can take effect
            # the queued batch and the next one add keys: the trigger projects them to half
            # the table (a probe sequence runs out only near a full one, MAX_PROBE rows: twice
            # the projection still fits; past that the run restarts larger, exact). On a GPU
            # at the most keys per step seen and two full batches; on a CPU adapter at a peak
            # that halves per batch and the batches' real sizes: the first merges add the
            # most keys (the most frequent pairs), and two full batches at their rate can grow
            # a long word's table several times past what the run needs, where find_max4's
            # rescans cost with the table. On a GPU the larger projection costs nothing: the
            # extra rebuild it may cause drops dead keys, which makes the merges no slower.
            if occ >= self.occ_mark:
                rate = (occ - self.occ_mark) / max(1, cnt)
                self.key_rate = max(self.key_rate / 2 if self.is_cpu else self.key_rate, rate)
            self.occ_mark = occ
            st["table_max_load"] = max(st.get("table_max_load", 0.0), occ / self.table.slots)
            if self.is_cpu:
                coming = sum(f[4] for f in inflight) + min(size, cap,
                                                           max(0, self.num_merges - recorded))
            else:
                coming = 2 * self.batch
            ahead = int(self.key_rate * coming)
            if not stopped and (occ + ahead) * 2 > self.table.slots:
                need_rebuild = True   # once the queued batch has drained (the final stream)
        merges = g.read_u32(self.table.buffers["merges"], 0, 4 * done, what="merge list readback")
        st["seconds_merge"] = time.perf_counter() - t_up
        steps = st.get("merge_steps") or done
        if done and steps:
            st["merges_per_step"] = done / steps
        if self.profiler is not None:
            # (the profiler times steps: a word-list step may make several merges)
            per_step = self.profiler.per_merge_us()
            st["gpu_us_per_step"] = per_step
            st["gpu_us_per_merge"] = {k: v * steps / max(1, done) for k, v in per_step.items()}
        if hasattr(self.k, "long_stats"):
            st.update(self.k.long_stats())
            if st["long_chains_serial"]:
                notice_once("torch_gpubpe.train: more long chains than the long-chain table "
                             "holds in one merge; the rest were walked by one thread each "
                             "(stats['long_chains_serial'])")
        if self.walk_counters and done:
            for key, total in self.walk_totals.items():
                st[f"walk_{key}_per_merge"] = total / done
        m = merges.reshape(-1, 4)
        return [(int(a), int(b)) for a, b in zip(m[:, 0], m[:, 1])]

    def _rebuild(self, merges_done: int, n: int) -> None:
        """Recount the pair table from the current stream (drops the keys whose count fell to
        0); grow it first when the live pairs would fill more than a quarter of it."""
        t0 = time.perf_counter()
        try:
            self._rebuild_table(merges_done, n)
        finally:
            self.st["seconds_rebuilds"] = (self.st.get("seconds_rebuilds", 0.0)
                                           + time.perf_counter() - t0)

    def _rebuild_table(self, merges_done: int, n: int) -> None:
        self.st["rebuilds"] += 1
        occ_word = self.c["S_OCC"]
        self._count(merges_done, n)
        occ = int(self._state()[occ_word])
        need = occ + int(self.key_rate * 2 * self.batch)   # live keys + what 2 batches add
        t = self.table
        if need * 4 > t.slots and t.rows < self.max_rows:
            rows = t.rows
            while need * 4 > rows * self.c["COLS"] and rows < self.max_rows:
                rows *= 2
            t.resize(rows)
            self.k.rebind()
            self.st["table_slots"] = t.slots
            self._gpu_bytes()
            self._count(merges_done, n)
            occ = int(self._state()[occ_word])
        self.occ_mark = occ

