"""Benchmark: the Ray Data recipes (torch_gpubpe.integrations.ray, one GPU actor) against the single-process
``encode`` CLI on the same parquet files, in one run, with a timeline of where Ray's time goes.

    python3 benchmarks/ray_encode.py --help
    # H200: >= 3 GB of parquet made from the repo's own corpus (repeated)
    python3 benchmarks/ingest.py --make-data --corpora torch_gpubpe/corpus --target-bytes 3.2e9 \\
        --files 16 --formats parquet --data /tmp/ingest
    python3 benchmarks/ray_encode.py --parquet /tmp/ingest/parquet --vocab /tmp/v65k/vocab.json
    # lavapipe (no GPU): small files, Ray actor without a GPU
    python3 benchmarks/ray_encode.py --parquet /tmp/ingest-small/parquet --num-gpus 0 \\
        --vocab-size 1024 --train-bytes 2e6 --cpus 2

Every path reads the same files (``--repeat`` lists them K times) and gives the same token count
(checked):

* ``encode`` CLI: ``python3 -m torch_gpubpe encode --data-files ... --out TMP`` as a user runs
  it (a new process: imports, GPU open, FileReader, the GPU, flat ids written to disk), timed
  whole and by its own summary line (reading to the last write);
* in-process loop: FileReader → ``Tokenizer.submit_arrow``, two batches in flight, session
  already open (the encoder's ceiling on these files: no process start, nothing written);
* Ray ``files``: ``tokenize_files`` (a dataset of the paths; each call runs the CLI's pipeline,
  ``torch_gpubpe.encoding.stream``, over its files: one FileReader, read-ahead, pack thread, two GPU
  batches in flight; token tables to the driver);
* Ray ``shards``: ``tokenize_files(out_dir=...)``: the actor writes a Megatron part per file
  (ShardWriter, as the CLI), then ``merge_shard_lists`` (renames) makes one list;
* Ray ``parquet``: ``ray.data.read_parquet`` → ``tokenize_dataset`` (Ray tasks read, the
  object store carries the text to the actor);
* Ray ``readtasks``: ``ray.data.from_items(paths)`` → ``map_batches`` Ray tasks that read with
  FileReader → ``tokenize_dataset`` (the CLI's reader in Ray's read tasks: what the object
  store hop costs without Ray's parquet reader).

``--runs files:2 shards:2 parquet:2`` says which Ray runs (``pipeline:calls at once in the
actor``, for files/shards optionally ``:files per call``), one after another in the same cluster; the first run also pays Ray's cold workers
(importing ray.data), as a user's first job does. ``--preload-runs files:2 shards:2`` then
runs these in a second cluster whose prestarted workers imported ray.data and torch_gpubpe
before taking work (Ray's system config ``preload_python_modules``). Each Ray run is timed
from the call that builds the dataset to the last token batch at the driver, or the merged
shard list (``ray.init`` apart: a cluster is already up where such jobs run). Printed per Ray run: the timeline (driver planning, actor process, ``__init__``,
GPU open, first batch at the actor, first token batch at the driver, last call), the steady state
(the actor's window: first call start to last call end; MB/s; share of the window with a call
running; time the actor's calls spent in Ray between yields), the actor's environment
(``OMP_NUM_THREADS``, Arrow's CPU pool, niceness), its CPU in cores against the CLI's, the
pipeline's stages in the actor's calls beside the CLI's (``encode --debug``'s names: reader /
upload / GPU; also a column of the table), where the time beyond the CLI's goes, from what size Ray reaches 80% of the CLI, GPU busy/SM clock (nvidia-smi), Ray's
per-operator stats; then machine / date / command.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from _report import GPUMonitor, gpu_sample, print_footer, sm_clock_now  # noqa: E402

from torch_gpubpe.encoding.tokenizer import Tokenizer  # noqa: E402
from torch_gpubpe.integrations.ray import (DEFAULT_BATCH_ROWS, TokenizeBatches, TokenizeFiles,  # noqa: E402
                              merge_shard_lists, tokenize_dataset, tokenize_files)
from torch_gpubpe.core.vocab import Vocab  # noqa: E402


# What the preloaded cluster's workers import at start (--preload-runs): Ray Data (the actor
# pool's worker class), the recipe, the encoder and the reader; the actor's own start then
# skips them.
KINDS = ("files", "shards", "parquet", "readtasks")
PRELOAD = "ray.data,torch_gpubpe.integrations.ray,torch_gpubpe.encoding.tokenizer,torch_gpubpe.io.readers,pyarrow.parquet"


def parquet_files(paths: list[str]) -> list[str]:
    out = []
    for p in paths:
        q = Path(p)
        out += sorted(str(f) for f in q.glob("*.parquet")) if q.is_dir() else [str(q)]
    if not out:
        sys.exit(f"no parquet files in {paths} (make some: benchmarks/ingest.py --make-data)")
    return out


def text_bytes(files: list[str], column: str) -> int:
    """Bytes of text in the files (each distinct file read once: --repeat lists links)."""
    sizes: dict[str, int] = {}
    for f in {str(Path(f).resolve()) for f in files}:
        sizes[f] = sum(pc.sum(pc.binary_length(b.column(0))).as_py() or 0 for b in
                       pq.ParquetFile(f).iter_batches(columns=[column], batch_size=65_536))
    return sum(sizes[str(Path(f).resolve())] for f in files)


def get_vocab(a, files: list[str]) -> Vocab:
    if a.vocab:
        return Vocab.load(a.vocab)
    from torch_gpubpe.training.trainer import train

    docs, size = [], 0
    for f in files:
        for b in pq.ParquetFile(f).iter_batches(columns=[a.text_column], batch_size=4096):
            for t in b.column(0).to_pylist():
                docs.append(t)
                size += len(t)
            if size >= a.train_bytes:
                break
        if size >= a.train_bytes:
            break
    t0 = time.perf_counter()
    v = train(docs, a.vocab_size, special_tokens=["<|endoftext|>"])
    print(f"vocab: trained {len(v):,} tokens on {size / 1e6:.0f} MB in "
          f"{time.perf_counter() - t0:.1f} s")
    return v


class StampedMonitor(GPUMonitor):
    """GPUMonitor whose samples carry their wall time: ``(time, clock, util)`` in ``stamped``."""

    def _run(self) -> None:
        self.stamped = []
        while not self._stop.is_set():
            s = gpu_sample()
            if s is None:
                return
            self.samples.append(s)
            self.stamped.append((time.time(), *s))
            self._stop.wait(self.period)

    def window(self, t0: float, t1: float) -> str:
        w = [(c, u) for t, c, u in getattr(self, "stamped", []) if t0 <= t <= t1]
        if not w:
            return "GPU busy n/a"
        return (f"GPU busy {sum(u for _, u in w) / len(w):.0f}%, SM clock mean "
                f"{sum(c for c, _ in w) / len(w):,.0f} MHz ({len(w)} samples)")


def single_process(vocab: Vocab, files: list[str], a) -> tuple[int, float]:
    """Tokens and seconds of the in-process loop: the ``encode`` CLI's reader
    (:class:`torch_gpubpe.io.readers.FileReader`: row groups read ahead on threads) into
    ``Tokenizer.submit_arrow``, two batches in flight, the session opened before the clock
    starts and nothing written (the encoder's ceiling on these files)."""
    from torch_gpubpe.io.readers import FileReader

    tok = Tokenizer(vocab)
    tok.encode_batch(["warm up the session"])
    tokens = 0
    t0 = time.perf_counter()
    pending = []
    for b in FileReader(files, text_column=a.text_column).batches():
        pending.append(tok.submit_arrow(b.values))
        if len(pending) == 2:
            tokens += len(pending.pop(0).result().ids)
    for p in pending:
        tokens += len(p.result().ids)
    return tokens, time.perf_counter() - t0


def cli_encode(vocab_path: str, files: list[str], a) -> dict:
    """The ``encode`` CLI in a new process on the files (flat ids to a temporary folder beside
    the first file's, removed after): whole-command seconds, its own seconds and token count
    (from its summary line), its --debug stage times."""
    import re
    import subprocess

    out = tempfile.mkdtemp(prefix="ray_encode_cli_", dir=a.cli_out_dir)
    cmd = [sys.executable, "-m", "torch_gpubpe", "encode", "--vocab", vocab_path,
           "--data-files", *files, "--text-column", a.text_column, "--out", out,
           "--overwrite", "--no-progress", "--debug"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO)] + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x]))
    import resource

    def children_cpu() -> float:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime

    c0 = children_cpu()
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    whole = time.perf_counter() - t0
    cpu = children_cpu() - c0
    shutil.rmtree(out, ignore_errors=True)
    if res.returncode:
        sys.exit(f"encode CLI failed ({res.returncode}): {res.stderr[-2000:]}")
    m = re.search(r"→ ([\d,]+) tokens .* in ([\d.]+) s \(", res.stdout)
    st = re.search(r"seconds: (.*?);", res.stdout)
    return {"whole": whole, "inside": float(m.group(2)), "tokens": int(m.group(1).replace(",", "")),
            "stages": st.group(1) if st else "", "cpu": cpu}


def _process_start() -> float | None:
    """This process's start (wall time, s) from /proc; None where there is no /proc."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        btime = next(int(x.split()[1]) for x in Path("/proc/stat").read_text().splitlines()
                     if x.startswith("btime"))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


class _Traced:
    """Start-up and per-call wall times appended to a JSON-lines file (the benchmark's
    timeline; same tokens as the class traced)."""

    def _trace_init(self, trace: str, vocab, kw: dict) -> None:
        import threading

        t = time.time()
        self._trace = trace
        self._log({"ev": "process", "t": _process_start(), "env": _worker_env()})
        self._log({"ev": "init_start", "t": t, "cpu": time.process_time()})
        super().__init__(vocab, **kw)
        self._log({"ev": "init_end", "t": time.time()})

        def opened():
            self.ready()
            self._log({"ev": "gpu_ready", "t": time.time(), "timings": self.timings,
                       "adapter": _adapter_name()})
        threading.Thread(target=opened, daemon=True).start()

    def _log(self, rec: dict) -> None:
        with open(self._trace, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), **rec}) + "\n")


class TracedTokenizeBatches(_Traced, TokenizeBatches):
    def __init__(self, vocab, *, trace: str, **kw) -> None:
        self._trace_init(trace, vocab, kw)

    def __call__(self, batch):
        t, cpu = time.time(), time.process_time()
        out = super().__call__(batch)
        nbytes = pc.sum(pc.binary_length(batch.column(self.text_column))).as_py() or 0
        self._log({"ev": "call", "t": t, "t_end": time.time(), "rows": batch.num_rows,
                   "bytes": nbytes, "in_ray": 0.0, "tables": 1, "cpu": cpu,
                   "cpu_end": time.process_time()})
        return out


class TracedTokenizeFiles(_Traced, TokenizeFiles):
    def __init__(self, vocab, *, trace: str, **kw) -> None:
        self._trace_init(trace, vocab, kw)

    def __call__(self, batch):
        """Also the time between a yield and the next request (Ray's: the table made a block,
        put in the object store) and when the first table was ready."""
        t, in_ray, n, rows, first = time.time(), 0.0, 0, 0, None
        cpu = time.process_time()
        for out in super().__call__(batch):
            first = first or time.time()
            n, rows = n + 1, rows + out.num_rows
            y = time.perf_counter()
            yield out
            in_ray += time.perf_counter() - y
        # self.stats: the pipeline's stages summed over the calls that have ended (this one's
        # included: its reading thread merged them before the last table came)
        self._log({"ev": "call", "t": t, "t_first": first, "t_end": time.time(), "rows": rows,
                   "bytes": 0, "in_ray": in_ray, "tables": n, "cpu": cpu,
                   "cpu_end": time.process_time(), "stats": self.stats})


def _worker_env() -> dict:
    """What sizes a worker's thread pools and shares its cores: Ray sets OMP_NUM_THREADS
    (1 without num_cpus), which sizes Arrow's CPU pool; Ray's workers run niced (15)."""
    try:
        aff = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        aff = None
    return {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "pa.cpu_count": pa.cpu_count(),
            "pa.io_thread_count": pa.io_thread_count(), "os.cpu_count": os.cpu_count(),
            "affinity": aff, "nice": os.nice(0)}


def _adapter_name() -> str:
    from torch_gpubpe.gpu import adapters as devices
    from torch_gpubpe.gpu.device import get_gpu

    c = devices.last_choice
    return (f"{get_gpu().adapter_name}; CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES')}; {c.reason if c else 'wgpu default'}")


def read_file_tables(batch, text_column: str):
    """A Ray read task of the ``readtasks`` runs: the batch's files read with FileReader (2
    threads: 16 such tasks run at once on 16 CPUs), one text table per row group."""
    from torch_gpubpe.io.readers import FileReader

    for path in batch.column("path").to_pylist():
        for b in FileReader([path], text_column=text_column, threads=2).batches():
            yield pa.table({text_column: b.values})


def ray_pipeline(ray, vocab: Vocab, files: list[str], a, kind: str, calls: int,
                 trace: str, per_call: int | None = None) -> dict:
    """One Ray run: tokens, driver times (wall), Ray's stats. ``per_call``: files per call
    (files / shards runs; default ``--files-per-call``)."""
    r: dict = {"t0": time.time()}
    common = dict(num_gpus=a.num_gpus or None, actors=a.concurrency, calls_per_actor=calls,
                  text_column=a.text_column, trace=trace)
    if kind in ("files", "shards"):
        out = None
        if kind == "shards":   # each actor writes a Megatron part per file (no EOT: the
            out = Path(tempfile.mkdtemp(prefix="ray_encode_shards_", dir=a.cli_out_dir))
            common.update(out_dir=str(out / ".parts"), fmt="megatron", eot=None)  # CLI's count)
        ds = tokenize_files(files, vocab, files_per_call=per_call or a.files_per_call,
                            cls=TracedTokenizeFiles, **common)
        r["planned"] = time.time()
        if out is not None:
            (out / ".parts").mkdir()
            rows = ds.take_all()
            r["last_part"] = time.time()
            info = merge_shard_lists(rows, out, fmt="megatron")
            r["end"], r["tokens"], r["stats"] = time.time(), info["num_tokens"], ds.stats()
            r["first_out"] = None
            shutil.rmtree(out, ignore_errors=True)
            return r
    else:
        if kind == "readtasks":   # Ray tasks read with FileReader; the object store carries
            ds = ray.data.from_items([{"path": f} for f in files],  # the text to the actor
                                     override_num_blocks=len(files))
            ds = ds.map_batches(read_file_tables, batch_size=1, batch_format="pyarrow",
                                fn_kwargs={"text_column": a.text_column})
        else:
            ds = ray.data.read_parquet(files).select_columns([a.text_column])
        ds = tokenize_dataset(ds, vocab, batch_size=a.ray_batch_size, keep_columns=[],
                              cls=TracedTokenizeBatches, **common)
    r["planned"] = time.time()
    tokens = 0
    for b in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
        col = b.column("input_ids")
        tokens += sum(len(c.values) for c in col.chunks)
        r.setdefault("first_out", time.time())
    r["end"], r["tokens"], r["stats"] = time.time(), tokens, ds.stats()
    return r


def intervals_union(iv: list[tuple[float, float]]) -> float:
    total, end = 0.0, -1e30
    for s, e in sorted(iv):
        if e > end:
            total += e - max(s, end)
            end = e
    return total


STAGES = ("first_batch_read", "wait_gpu_open", "wait_reader", "upload_and_submit",
          "wait_gpu_and_readback")


def actor_summary(trace: str) -> dict:
    """The actors' CPU over their windows (process CPU, first call start → last call end, per
    actor process, summed), the windows' seconds, the environment the first actor saw, and the
    pipeline's stages summed over the calls (TokenizeFiles' stats; none for TokenizeBatches)."""
    evs = [json.loads(x) for x in Path(trace).read_text().splitlines()]
    env = next((e.get("env") for e in evs if e["ev"] == "process" and e.get("env")), None)
    cpu = win = 0.0
    stages: dict = {}
    for pid in {e["pid"] for e in evs if e["ev"] == "call"}:
        calls = [e for e in evs if e["ev"] == "call" and e["pid"] == pid]
        if all("cpu" in c for c in calls):
            cpu += max(c["cpu_end"] for c in calls) - min(c["cpu"] for c in calls)
        win += max(c["t_end"] for c in calls) - min(c["t"] for c in calls)
        st = [c["stats"] for c in calls if c.get("stats")]
        if st:
            for k, v in max(st, key=lambda x: x.get("calls", 0)).get("seconds", {}).items():
                stages[k] = stages.get(k, 0.0) + v
    return {"env": env, "cpu": cpu, "window": win, "stages": stages}


def where_short(summ: dict, base: dict) -> str:
    """A table cell: the actors' cores busy against the CLI's, and where the pipeline's calls
    spent their time (shares of wait_reader / upload_and_submit / wait_gpu_and_readback)."""
    out = []
    if summ["cpu"] and summ["window"]:
        out.append(f"{summ['cpu'] / summ['window']:.1f} cores busy"
                   + (f" (CLI {base['cpu'] / base['whole']:.1f})" if base.get("cpu") else ""))
    st = summ["stages"]
    loop = sum(st.get(k, 0.0) for k in STAGES[2:])
    if loop:
        out.append("calls: " + " / ".join(f"{n} {st.get(k, 0.0) / loop:.0%}" for n, k in
                                          zip(("reader", "upload", "GPU"), STAGES[2:])))
    return "; ".join(out) or "n/a"


def report_timeline(r: dict, trace: str, nbytes: int, base: dict, mon) -> None:
    """Timeline, steady state and where the time beyond the CLI's goes. ``base``: the CLI's
    best whole-command seconds, its fixed part (whole - inside) and its inside rate."""
    evs = [json.loads(x) for x in Path(trace).read_text().splitlines()]
    calls = [e for e in evs if e["ev"] == "call"]
    init_s = next((e["t"] for e in evs if e["ev"] == "init_start"), None)
    init_e = next((e["t"] for e in evs if e["ev"] == "init_end"), None)
    gpu = next((e for e in evs if e["ev"] == "gpu_ready"), None)
    proc = next((e["t"] for e in evs if e["ev"] == "process" and e["t"]), None)
    t0 = r["t0"]

    def at(t):
        return "    n/a  " if t is None else f"{t - t0:7.2f} s"

    lines = [(r["planned"], "driver: dataset planned (lazy)"),
             (proc, "actor process started (a worker Ray may have started before)")]
    cpu = next((e.get("cpu") for e in evs if e["ev"] == "init_start"), None)
    lines += [(init_s, "actor __init__ starts (the worker imported ray.data, torch_gpubpe, "
                       f"unpickled the class; process CPU so far "
                       f"{'n/a' if cpu is None else f'{cpu:.2f} s'})"),
              (init_e, "actor __init__ returns (the GPU opens on a thread)")]
    if gpu:
        tm = ", ".join(f"{k} {v:.2f} s" for k, v in gpu["timings"].items())
        lines.append((gpu["t"], f"GPU session open ({tm}); adapter: {gpu['adapter']}"))
    if not calls:
        lines.append((r["end"], "driver done: no call traced"))
    else:
        first = min(calls, key=lambda c: c["t"])
        last = max(calls, key=lambda c: c["t_end"])
        lines.append((first["t"], f"first call reaches the actor ({first['rows']:,} rows)"))
        firsts = [c["t_first"] for c in calls if c.get("t_first")]
        if firsts:
            lines.append((min(firsts), "first token table ready in the actor"))
        if r.get("last_part"):
            lines.append((r["last_part"], "driver has every part's row; merge starts"))
        if r.get("first_out"):
            lines.append((r["first_out"], "first token batch at the driver"))
        lines += [(last["t_end"], f"last call ends ({len(calls)} calls)"),
                  (r["end"], "driver done (every token batch / the shard list merged)")]
    print("\ntimeline (s after the dataset was built):")
    for t, what in sorted(lines, key=lambda x: -1e30 if x[0] is None else x[0]):
        print(f"  {at(t)}  {what}")
    if not calls:
        return
    win = last["t_end"] - first["t"]
    busy = intervals_union([(c["t"], c["t_end"]) for c in calls])
    inside = sum(c["t_end"] - c["t"] for c in calls)
    in_ray = sum(c.get("in_ray", 0.0) for c in calls)
    gpu_wait = max(0.0, gpu["t"] - first["t"]) if gpu else 0.0
    steady = max(win - gpu_wait, 1e-9)
    rate, cli_rate = nbytes / steady, nbytes / max(base["steady"], 1e-9)
    print(f"steady state (the actor's window, first call start → last call end, less "
          f"{gpu_wait:.2f} s waiting for the GPU session): {steady:.2f} s, {rate / 1e6:,.1f} MB/s "
          f"= {rate / cli_rate:.0%} of the CLI's steady rate ({cli_rate / 1e6:,.1f} MB/s: its "
          f"time less its first batch read and GPU-open wait); a call running "
          f"{busy / max(win, 1e-9):.0%} of the window ({inside / max(busy, 1e-9):.2f} at once on "
          f"average; {len(calls)} calls, {sum(c.get('tables', 1) for c in calls)} token tables)"
          + (f"; the calls spent {in_ray:.2f} s in Ray between yields (blocks made and put)"
             if in_ray else "") + f"; {mon.window(first['t'], last['t_end'])}")
    summ = actor_summary(trace)
    if summ["env"]:
        print("the actor's environment (what sizes its thread pools and shares its cores): "
              + ", ".join(f"{k}={v}" for k, v in summ["env"].items()) + "; the driver's: "
              + ", ".join(f"{k}={v}" for k, v in _worker_env().items()))
    if summ["cpu"]:
        print(f"actor CPU over its window: {summ['cpu']:.2f} s in {summ['window']:.2f} s = "
              f"{summ['cpu'] / summ['window']:.1f} cores busy"
              + (f"; the CLI: {base['cpu']:.2f} s in its {base['whole']:.2f} s = "
                 f"{base['cpu'] / base['whole']:.1f} cores" if base.get("cpu") else ""))
    if summ["stages"]:
        st, cli = summ["stages"], base.get("stages", {})
        print("where the actor's calls spent their time (the encode CLI's pipeline on each "
              "call's reading thread, summed over the calls, encode --debug's names; with "
              "calls at once the sums may pass the window): "
              + ", ".join(f"{k} {st.get(k, 0.0):.2f} s" for k in STAGES)
              + "; the CLI's: " + ", ".join(f"{k} {cli.get(k, 0.0):.2f} s" for k in STAGES)
              + " (wait_reader: the GPU waits for the reader; upload_and_submit: the host "
                "copies into the GPU's buffers; wait_gpu_and_readback: the GPU is the limit)")
    e2e = r["end"] - t0
    lost = {"start-up (dataset built → first call at the actor)": first["t"] - t0,
            "wait for the GPU session (opening on a thread while the first batch is read)":
                gpu_wait,
            "steady encoding": steady,
            "tail (last call end → driver done)": r["end"] - last["t_end"]}
    fixed, fixed_cli = e2e - steady, base["whole"] - base["steady"]
    print(f"end to end {e2e:.2f} s = " + " + ".join(f"{k} {v:.2f} s" for k, v in lost.items())
          + f"; the CLI: {base['whole']:.2f} s = fixed (process start, imports, first batch, "
          f"GPU open, final fsync) {fixed_cli:.2f} s + steady {base['steady']:.2f} s; Ray is "
          f"{base['whole'] / e2e:.0%} of the CLI's throughput end to end")
    # Ray at S bytes: fixed + S / rate; the CLI: fixed_cli + S / cli_rate; 80% where
    # CLI time >= 0.8 Ray time, i.e. S (1 / cli_rate - 0.8 / rate) >= 0.8 fixed - fixed_cli
    den = 1 / cli_rate - 0.8 / rate
    if den > 0:
        need = (0.8 * fixed - fixed_cli) / den
        print(f"with {fixed:.2f} s fixed against the CLI's {fixed_cli:.2f} s, and the steady "
              f"rates, Ray reaches 80% of the CLI end to end from "
              f"{max(need, 0) / 1e9:,.2f} GB of text")
    else:
        print(f"the steady rate is below 80% of the CLI's: the 80% is out of reach at any size "
              f"(Ray end to end tends to {rate / cli_rate:.0%})")


def ray_stats_summary(stats: str) -> str:
    keep = ("Operator", "Remote wall time", "Remote cpu time", "Block transform",
            "Output size bytes per block", "Ray Data throughput", "Dataset throughput",
            "iterator", "Total time", "waiting", "blocked", "User time", "batch")
    return "\n".join(x for x in stats.splitlines() if any(k in x for k in keep))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parquet", nargs="+", required=True, help="parquet files or folders")
    ap.add_argument("--text-column", default="text")
    ap.add_argument("--repeat", type=int, default=1, help="list the files K times (more bytes)")
    ap.add_argument("--max-files", type=int, help="use the first N files")
    ap.add_argument("--vocab", help="vocab.json (default: train one on --train-bytes)")
    ap.add_argument("--vocab-size", type=int, default=32_768)
    ap.add_argument("--train-bytes", type=float, default=100e6)
    ap.add_argument("--runs", nargs="+", default=["files:2", "shards:2", "parquet:2"],
                    help="Ray runs, in order, each PIPELINE:CALLS[:FILES_PER_CALL] (files = "
                         "tokenize_files, "
                         "token tables to the driver; shards = tokenize_files(out_dir=): the "
                         "actor writes Megatron parts, merged after (as the CLI, tokens on "
                         "disk); parquet = read_parquet + tokenize_dataset; readtasks = Ray "
                         "tasks read with FileReader (from_items + map_batches), then "
                         "tokenize_dataset; CALLS: calls at once in the actor; "
                         "FILES_PER_CALL, files/shards runs: instead of --files-per-call, e.g. "
                         "shards:1:32 = one call over 32 files, the CLI's pipeline once)")
    ap.add_argument("--preload-runs", nargs="*", default=["files:2", "shards:2"],
                    help="then these runs in a second cluster whose prestarted workers import "
                         f"{PRELOAD} before taking work (Ray's system config "
                         "preload_python_modules, env RAY_preload_python_modules); none: "
                         "--preload-runs with no value")
    ap.add_argument("--settle", type=float, default=5.0,
                    help="seconds after ray.init of the preloaded cluster (workers import)")
    ap.add_argument("--ray-batch-size", type=int, default=DEFAULT_BATCH_ROWS,
                    help="parquet runs: rows per batch (TokenizeBatches call)")
    ap.add_argument("--files-per-call", type=int, default=4,
                    help="files/shards runs: files per call (tokenize_files' default)")
    ap.add_argument("--cli-runs", type=int, default=2,
                    help="encode CLI runs (half before Ray, half after; 0: none)")
    ap.add_argument("--cli-out-dir", help="where the CLI writes (default: the temp folder)")
    ap.add_argument("--footer-actors", type=int, default=2,
                    help="RAY_DATA_PARQUET_FOOTER_NUM_ACTORS (Ray 2.60's default: 32)")
    ap.add_argument("--read-unit-mb", type=int, default=128,
                    help="RAY_DATA_PARQUET_BIN_PACKING_BYTES in MiB: parquet read per block "
                         "(Ray 2.60's default: 128)")
    ap.add_argument("--num-gpus", type=float, default=1, help="GPUs per Ray actor (0: lavapipe)")
    ap.add_argument("--concurrency", type=int, default=1, help="Ray GPU actors")
    ap.add_argument("--cpus", type=int, default=os.cpu_count(), help="CPUs for ray.init")
    a = ap.parse_args()
    def specs(given: list[str], opt: str) -> list[tuple[str, int, int | None]]:
        out = []
        for spec in given:
            kind, _, rest = spec.partition(":")
            calls, _, per = rest.partition(":")
            if kind not in KINDS or not calls.isdigit() or int(calls) < 1 or \
                    (per and (not per.isdigit() or int(per) < 1 or kind not in ("files",
                                                                              "shards"))):
                sys.exit(f"{opt}: {spec!r} is not KIND:N or files/shards:N:FILES_PER_CALL, "
                         f"KIND one of {KINDS}")
            out.append((kind, int(calls), int(per) if per else None))
        return out

    runs, preload_runs = specs(a.runs, "--runs"), specs(a.preload_runs, "--preload-runs")

    files = parquet_files(a.parquet)[: a.max_files]
    if a.repeat > 1:   # distinct names (ray.data.read_parquet reads a path listed twice once)
        links = Path(tempfile.mkdtemp(prefix="ray_encode_"))
        rep = []
        for k in range(a.repeat):
            for i, f in enumerate(files):
                (links / f"{k:03d}_{i:05d}.parquet").symlink_to(Path(f).resolve())
                rep.append(str(links / f"{k:03d}_{i:05d}.parquet"))
        files = rep
    nbytes = text_bytes(files, a.text_column)
    shm = shutil.disk_usage("/dev/shm").free / 1e9 if os.path.isdir("/dev/shm") else 0.0
    print(f"input: {len(files)} parquet files (x{a.repeat}), {nbytes / 1e9:.3f} GB of text; "
          f"{a.ray_batch_size:,} rows per call (parquet runs), {a.files_per_call} file(s) per "
          f"call (files runs); SM clock before {sm_clock_now()}; load average "
          f"{os.getloadavg()[0]:.1f}; /dev/shm free {shm:.1f} GB (Ray's object store)")
    vocab = get_vocab(a, files)
    vocab_path = a.vocab
    if not vocab_path:
        vocab_path = str(Path(tempfile.mkdtemp(prefix="ray_encode_vocab_")) / "vocab.json")
        vocab.save(vocab_path)

    clis, loops = [], []

    def baselines(n_cli: int) -> None:
        for _ in range(n_cli):
            with GPUMonitor() as mon:
                c = cli_encode(vocab_path, files, a)
            clis.append(c)
            print(f"encode CLI: {c['tokens']:,} tokens, whole command {c['whole']:.2f} s = "
                  f"{nbytes / c['whole'] / 1e6:,.1f} MB/s, inside {c['inside']:.2f} s = "
                  f"{nbytes / c['inside'] / 1e6:,.1f} MB/s; {mon.summary()}; stages: "
                  f"{c['stages']}")
        with GPUMonitor() as mon:
            tok, sec = single_process(vocab, files, a)
        loops.append((tok, sec))
        print(f"in-process loop: {tok:,} tokens in {sec:.2f} s = {nbytes / sec / 1e6:,.1f} MB/s "
              f"(FileReader → submit_arrow, session open, nothing written); {mon.summary()}")

    baselines((a.cli_runs + 1) // 2)

    # Workers inherit the driver's environment through the raylet it starts: no runtime_env
    # (which would start workers of their own), the package on the path, few footer actors.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    os.environ["RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"] = str(a.footer_actors)
    os.environ["RAY_DATA_PARQUET_BIN_PACKING_BYTES"] = str(a.read_unit_mb << 20)
    import ray
    import ray.data  # noqa: F401

    done = []

    def cluster(specs: list[tuple[str, int]], preload: bool) -> None:
        """A local cluster (ray.init, not counted), the runs in it, ray.shutdown."""
        env_pre = "RAY_preload_python_modules"
        if preload:      # Ray's system config: prestarted workers import these first
            os.environ[env_pre] = PRELOAD
        else:
            os.environ.pop(env_pre, None)
        t0 = time.perf_counter()
        ray.init(num_cpus=a.cpus, num_gpus=a.num_gpus and max(1, int(a.num_gpus + 0.999)),
                 include_dashboard=False, log_to_driver=False)
        t_init = time.perf_counter() - t0
        if preload:      # let the prestarted workers finish their imports (a cluster is up
            time.sleep(a.settle)            # well before a job arrives)
        print(f"ray {ray.__version__}: ray.init (cluster start-up, not counted) {t_init:.1f} s"
              f"{f' + {a.settle:g} s settle' if preload else ''}; resources "
              f"{ray.cluster_resources()}; RAY_DATA_PARQUET_FOOTER_NUM_ACTORS={a.footer_actors},"
              f" RAY_DATA_PARQUET_BIN_PACKING_BYTES={a.read_unit_mb} MiB; {env_pre}="
              f"{os.environ.get(env_pre, '(unset)')}")
        ray.data.DataContext.get_current().enable_progress_bars = False
        try:
            for kind, calls, per in specs:
                label = kind + (f", {per} file(s) per call" if per else "") + (
                    " (workers preloaded)" if preload else "")
                trace = tempfile.mktemp(prefix="ray_encode_trace_", suffix=".jsonl")
                with StampedMonitor() as mon2:
                    r = ray_pipeline(ray, vocab, files, a, kind, calls, trace, per)
                s2 = r["end"] - r["t0"]
                print(f"ray {label}, {calls} call(s) at once: {r['tokens']:,} tokens in "
                      f"{s2:.2f} s = {nbytes / s2 / 1e6:,.1f} MB/s end to end; "
                      f"{mon2.summary()}")
                done.append((label, calls, r, trace, mon2))
        finally:
            ray.shutdown()

    cluster(runs, False)
    if preload_runs:
        cluster(preload_runs, True)
    baselines(a.cli_runs // 2)

    loop_s = min(s for _, s in loops)
    print("\n| path | seconds | MB/s | of the CLI (whole command) | tokens | where the time "
          "goes |\n|---|---:|---:|---:|---:|---|")
    base = None
    if clis:
        c = min(clis, key=lambda c: c["whole"])
        inside = min(c["inside"] for c in clis)
        st = dict((k, float(v)) for k, v in (x.rsplit(" ", 1) for x in c["stages"].split(", ")
                                             if " " in x))
        steady = c["inside"] - st.get("first_batch_read", 0.0) - st.get("wait_gpu_open", 0.0)
        base = {"whole": c["whole"], "inside": inside, "steady": steady, "cpu": c["cpu"],
                "stages": st}
        loop = sum(st.get(k, 0.0) for k in STAGES[2:]) or 1.0
        print(f"| `encode` CLI, whole command (best of {len(clis)}) | {c['whole']:.2f} | "
              f"{nbytes / c['whole'] / 1e6:,.1f} | 100% | {c['tokens']:,} | "
              f"{c['cpu'] / c['whole']:.1f} cores busy; loop: " + " / ".join(
                  f"{n} {st.get(k, 0.0) / loop:.0%}" for n, k in
                  zip(("reader", "upload", "GPU"), STAGES[2:])) + " |")
        print(f"| `encode` CLI, inside (its summary; best) | {inside:.2f} | "
              f"{nbytes / inside / 1e6:,.1f} | | | |")
    else:
        base = {"whole": loop_s, "inside": loop_s, "steady": loop_s}
    print(f"| in-process loop, session open (best of {len(loops)}) | {loop_s:.2f} | "
          f"{nbytes / loop_s / 1e6:,.1f} | {base['whole'] / loop_s:.0%} | {loops[0][0]:,} | |")
    for label, calls, r, trace, _ in done:
        s2 = r["end"] - r["t0"]
        print(f"| Ray `{label}`, {a.concurrency} GPU actor(s), {calls} call(s) at once, end to "
              f"end | {s2:.2f} | {nbytes / s2 / 1e6:,.1f} | {base['whole'] / s2:.0%} | "
              f"{r['tokens']:,} | {where_short(actor_summary(trace), base)} |")
    for label, calls, r, trace, mon2 in done:
        e2e = r["end"] - r["t0"]
        print(f"\n=== Ray `{label}`, {calls} call(s) at once: {base['whole'] / e2e:.0%} of the "
              f"CLI's throughput end to end ({loop_s / e2e:.0%} of the in-process loop's) ===")
        report_timeline(r, trace, nbytes, base, mon2)
        print("\nRay Data stats (per operator):\n" + ray_stats_summary(r["stats"]))
    counts = ({t for t, _ in loops} | {c["tokens"] for c in clis}
              | {r["tokens"] for _, _, r, _, _ in done})
    for _, _, _, trace, _ in done:
        Path(trace).unlink(missing_ok=True)
    if len(counts) != 1:
        sys.exit(f"token counts differ: {sorted(counts)}")
    print_footer()


if __name__ == "__main__":
    main()
