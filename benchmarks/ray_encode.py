"""Benchmark: the Ray Data pipeline (torch_gpubpe.ray.tokenize_dataset = TokenizeBatches on one
GPU actor) against the single-process encoder on the same parquet files, with a timeline of
where the Ray run's time goes.

    python3 benchmarks/ray_encode.py --help
    # H200: >= 3 GB of parquet made from the repo's own corpus (repeated), ~4 minutes in all
    python3 benchmarks/ingest.py --make-data --corpora torch_gpubpe/corpus --target-bytes 3.2e9 \\
        --files 16 --formats parquet --data /tmp/ingest
    python3 benchmarks/ray_encode.py --parquet /tmp/ingest/parquet
    # lavapipe (no GPU): small files, Ray actor without a GPU
    python3 benchmarks/ray_encode.py --parquet /tmp/ingest-small/parquet --num-gpus 0 \\
        --vocab-size 1024 --train-bytes 2e6

Both sides read the same files (``--repeat`` lists them K times) and produce the same tokens
(total token count checked equal):

* single process: ``pyarrow.parquet`` row batches (read one ahead on a thread) →
  ``Tokenizer.submit_arrow`` (zero copy Arrow → packed), two batches in flight;
* Ray: ``ray.data.read_parquet`` → ``tokenize_dataset`` (``map_batches(TokenizeBatches,
  batch_format="pyarrow", num_gpus=1)``, one actor, ``--calls-per-actor`` calls at once) → the
  driver iterates the token batches (counts tokens).

Prints: ``ray.init`` (cluster start-up, not in the Ray run's time), the Ray run end to end
(from ``read_parquet`` to the last token batch at the driver), a timeline (driver planning,
actor process start, the actor's ``__init__``: GPU pin/open/warm-up, first batch in, first
batch out at the driver, last batch), the steady state (the actor's encoding window: first call
start → last call end, bytes/s, share of the window with a call running), GPU busy and SM clock
(nvidia-smi) over the whole run and over the steady window, Ray's per-operator stats, then the
machine / date / command footer.
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

from torch_gpubpe.encoder import Tokenizer  # noqa: E402
from torch_gpubpe.ray import DEFAULT_BATCH_ROWS, TokenizeBatches, tokenize_dataset  # noqa: E402
from torch_gpubpe.vocab import Vocab  # noqa: E402


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
    from torch_gpubpe.trainer import train

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
    """Tokens and seconds of the single-process encode: the ``encode`` CLI's reader
    (:class:`torch_gpubpe.readers.FileReader`: row groups read ahead on threads) into
    ``Tokenizer.submit_arrow``, two batches in flight. (Until 2026-12-01 15:30 UTC it read with
    ``pq.ParquetFile.iter_batches`` on one thread: reader-bound at ~400 MB/s on the H200 while
    the CLI ran ~1.5 GB/s, an easy baseline.)"""
    from torch_gpubpe.readers import FileReader

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


def _process_start() -> float | None:
    """This process's start (wall time, s) from /proc; None where there is no /proc."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        btime = next(int(x.split()[1]) for x in Path("/proc/stat").read_text().splitlines()
                     if x.startswith("btime"))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


class TracedTokenizeBatches(TokenizeBatches):
    """TokenizeBatches that appends its start-up and per-call wall times to a JSON-lines file
    (the benchmark's timeline; same tokens)."""

    def __init__(self, vocab, *, trace: str, **kw) -> None:
        t = time.time()
        self._trace = trace
        self._log({"ev": "process", "t": _process_start()})
        self._log({"ev": "init_start", "t": t, "cpu": time.process_time()})
        super().__init__(vocab, **kw)
        self._log({"ev": "init_end", "t": time.time(), "timings": self.timings,
                   "adapter": _adapter_name()})

    def _log(self, rec: dict) -> None:
        with open(self._trace, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), **rec}) + "\n")

    def __call__(self, batch):
        t = time.time()
        out = super().__call__(batch)
        nbytes = pc.sum(pc.binary_length(batch.column(self.text_column))).as_py() or 0
        self._log({"ev": "call", "t": t, "t_end": time.time(), "rows": batch.num_rows,
                   "bytes": nbytes})
        return out


def _adapter_name() -> str:
    from torch_gpubpe import devices
    from torch_gpubpe.gpu import get_gpu

    c = devices.last_choice
    return (f"{get_gpu().adapter_name}; CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES')}; {c.reason if c else 'wgpu default'}")


def ray_pipeline(ray, vocab: Vocab, files: list[str], a, calls: int, trace: str) -> dict:
    """The Ray run: tokens, driver times (wall), Ray's stats."""
    r: dict = {"t0": time.time()}
    ds = ray.data.read_parquet(files).select_columns([a.text_column])
    ds = tokenize_dataset(ds, vocab, num_gpus=a.num_gpus or None, actors=a.concurrency,
                          batch_size=a.ray_batch_size, calls_per_actor=calls,
                          text_column=a.text_column, keep_columns=[], trace=trace,
                          cls=TracedTokenizeBatches)
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


def report_timeline(r: dict, trace: str, nbytes: int, single_rate: float, mon) -> None:
    evs = [json.loads(x) for x in Path(trace).read_text().splitlines()]
    calls = [e for e in evs if e["ev"] == "call"]
    init_s = next((e["t"] for e in evs if e["ev"] == "init_start"), None)
    init_e = next((e for e in evs if e["ev"] == "init_end"), None)
    proc = next((e["t"] for e in evs if e["ev"] == "process" and e["t"]), None)
    t0 = r["t0"]

    def at(t):
        return "n/a" if t is None else f"{t - t0:7.2f} s"

    print("\ntimeline of the Ray run (s after read_parquet was called):")
    print(f"  {at(r['planned'])}  driver: read_parquet + map_batches planned")
    print(f"  {at(proc)}  actor process started (Ray spawns it when execution starts)")
    cpu = next((e.get("cpu") for e in evs if e["ev"] == "init_start"), None)
    print(f"  {at(init_s)}  actor __init__ starts (after the worker imported ray, ray.data, "
          f"torch_gpubpe and unpickled the class; process CPU so far "
          f"{'n/a' if cpu is None else f'{cpu:.2f} s'})")
    if init_e:
        tm = ", ".join(f"{k} {v:.2f} s" for k, v in init_e["timings"].items())
        print(f"  {at(init_e['t'])}  actor __init__ done ({tm}); adapter: {init_e['adapter']}")
    if calls:
        first, last = min(calls, key=lambda c: c["t"]), max(calls, key=lambda c: c["t_end"])
        print(f"  {at(first['t'])}  first batch reaches the actor ({first['rows']:,} rows)")
        print(f"  {at(r.get('first_out'))}  first token batch at the driver")
        print(f"  {at(last['t_end'])}  last call ends ({len(calls)} calls)")
    print(f"  {at(r['end'])}  driver has every token batch")
    if not calls:
        return
    win = last["t_end"] - first["t"]
    busy = intervals_union([(c["t"], c["t_end"]) for c in calls])
    inside = sum(c["t_end"] - c["t"] for c in calls)
    rate = nbytes / max(win, 1e-9)
    print(f"\nsteady state (actor's window, first call start → last call end): {win:.2f} s, "
          f"{rate / 1e6:,.1f} MB/s = {rate / single_rate:.0%} of the single process; a call "
          f"running {busy / max(win, 1e-9):.0%} of the window (calls overlap: "
          f"{inside / max(busy, 1e-9):.2f} at once on average), per call "
          f"{inside / len(calls) * 1e3:.1f} ms for {nbytes / len(calls) / 1e6:.1f} MB; "
          f"{mon.window(first['t'], last['t_end'])}")
    e2e = r["end"] - t0
    lost = {"before the first batch reached the actor": first["t"] - t0,
            "steady window beyond the single-process time": win - nbytes / single_rate,
            "after the last call (output to the driver)": r["end"] - last["t_end"]}
    print(f"where the {e2e - nbytes / single_rate:.2f} s beyond the single-process time go: "
          + "; ".join(f"{k} {v:.2f} s" for k, v in lost.items()))
    fixed = first["t"] - t0 + r["end"] - last["t_end"]      # start-up + tail, size-independent
    if rate > 0.8 * single_rate:
        need = 0.8 * fixed / (1 / single_rate - 0.8 / rate)
        print(f"with {fixed:.2f} s fixed (start-up + tail) and the steady rate, Ray reaches 80% of "
              f"the single process end to end from {need / 1e9:,.1f} GB of text")
    else:
        print("the steady rate is below 80% of the single process: Ray stays below 80% at any "
              "size")


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
    ap.add_argument("--batch-size", type=int, default=4096, help="single process: rows per batch")
    ap.add_argument("--ray-batch-size", type=int, default=DEFAULT_BATCH_ROWS,
                    help="Ray: rows per batch (TokenizeBatches call)")
    ap.add_argument("--calls-per-actor", type=int, nargs="+", default=[2],
                    help="Ray: tasks (input blocks) at once in the actor (1: one at a time); "
                         "several values: one Ray run each, in the same cluster")
    ap.add_argument("--footer-actors", type=int, default=2,
                    help="RAY_DATA_PARQUET_FOOTER_NUM_ACTORS (Ray 2.60's default: 32)")
    ap.add_argument("--read-unit-mb", type=int, default=128,
                    help="RAY_DATA_PARQUET_BIN_PACKING_BYTES in MiB: parquet read per block "
                         "(Ray 2.60's default: 128)")
    ap.add_argument("--num-gpus", type=float, default=1, help="GPUs per Ray actor (0: lavapipe)")
    ap.add_argument("--concurrency", type=int, default=1, help="Ray GPU actors")
    ap.add_argument("--cpus", type=int, default=os.cpu_count(), help="CPUs for ray.init")
    a = ap.parse_args()

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
          f"batch {a.batch_size:,} rows (single process), {a.ray_batch_size:,} rows (Ray); SM "
          f"clock before {sm_clock_now()}; load average {os.getloadavg()[0]:.1f}; /dev/shm "
          f"free {shm:.1f} GB (Ray's object store; it falls back to /tmp when too small)")
    vocab = get_vocab(a, files)

    with GPUMonitor() as mon1:
        tok1, s1 = single_process(vocab, files, a)
    print(f"single process: {tok1:,} tokens in {s1:.2f} s = {nbytes / s1 / 1e6:,.1f} MB/s "
          f"(FileReader → Tokenizer.submit_arrow); {mon1.summary()}")

    # Workers inherit the driver's environment through the raylet it starts: no runtime_env
    # (which would start workers of their own), the package on the path, few footer actors.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    os.environ["RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"] = str(a.footer_actors)
    os.environ["RAY_DATA_PARQUET_BIN_PACKING_BYTES"] = str(a.read_unit_mb << 20)
    t0 = time.perf_counter()
    import ray
    import ray.data  # noqa: F401 - the driver's import, timed with the cluster start

    t_imp = time.perf_counter() - t0
    ray.init(num_cpus=a.cpus, num_gpus=a.num_gpus and max(1, int(a.num_gpus + 0.999)),
             include_dashboard=False, log_to_driver=False)
    print(f"ray {ray.__version__}: import ray + ray.data {t_imp:.1f} s, ray.init (cluster "
          f"start-up) {time.perf_counter() - t0 - t_imp:.1f} s; resources "
          f"{ray.cluster_resources()}; RAY_DATA_PARQUET_FOOTER_NUM_ACTORS={a.footer_actors}, "
          f"RAY_DATA_PARQUET_BIN_PACKING_BYTES={a.read_unit_mb} MiB")
    ray.data.DataContext.get_current().enable_progress_bars = False
    runs = []
    for calls in a.calls_per_actor:
        trace = tempfile.mktemp(prefix="ray_encode_trace_", suffix=".jsonl")
        with StampedMonitor() as mon2:
            r = ray_pipeline(ray, vocab, files, a, calls, trace)
        s2 = r["end"] - r["t0"]
        print(f"ray pipeline, {calls} call(s) at once: {r['tokens']:,} tokens in {s2:.2f} s = "
              f"{nbytes / s2 / 1e6:,.1f} MB/s end to end (after ray.init); {mon2.summary()}")
        runs.append((calls, r, trace, mon2))
    with GPUMonitor() as mon3:
        tok3, s3 = single_process(vocab, files, a)
    print(f"single process again: {s3:.2f} s = {nbytes / s3 / 1e6:,.1f} MB/s; {mon3.summary()}")
    ray.shutdown()
    best = min(s1, s3)
    print("\n| path | seconds | MB/s | tokens | first token batch at the driver |\n"
          "|---|---:|---:|---:|---:|")
    print(f"| single process (best of 2) | {best:.2f} | {nbytes / best / 1e6:,.1f} | {tok1:,} "
          "| |")
    for calls, r, _, _ in runs:
        s2 = r["end"] - r["t0"]
        print(f"| Ray Data, {a.concurrency} GPU actor(s), {calls} call(s) at once, end to end | "
              f"{s2:.2f} | {nbytes / s2 / 1e6:,.1f} | {r['tokens']:,} | "
              f"{r.get('first_out', r['end']) - r['t0']:.2f} s |")
    for calls, r, trace, mon2 in runs:
        print(f"\n=== Ray run, {calls} call(s) at once: {best / (r['end'] - r['t0']):.0%} of the "
              "single-process throughput end to end ===")
        report_timeline(r, trace, nbytes, nbytes / best, mon2)
        print("\nRay Data stats (per operator):\n" + ray_stats_summary(r["stats"]))
    counts = {tok1, tok3, *(r["tokens"] for _, r, _, _ in runs)}
    if len(counts) != 1:
        sys.exit(f"token counts differ: {tok1} / {tok3} / {[r['tokens'] for _, r, _, _ in runs]}")
    print_footer()


if __name__ == "__main__":
    main()
