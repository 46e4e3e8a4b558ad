"""Benchmark: reading JSON Lines files (.jsonl.gz / .jsonl.zst / .jsonl) alone, per stage: how
fast the reader gives documents, and where its CPU time goes (issue 13: ``encode`` from jsonl.gz
must keep up with the GPU). No GPU is used.

Stages, each on all ``--threads`` (default: the CPU count, at most 16):

``inflate``    each file decompressed on its own thread (as the reader does), into reused
               buffers: ISA-L (python-isal, when installed) and zlib (pyarrow's gzip stream);
               MB/s of decompressed bytes, and per core (bytes / CPU seconds of the process)
``parse``      ``pyarrow.json.read_json`` of ``--chunk-bytes`` chunks already in memory (the
               first ``--parse-mb`` MB decompressed), one block per chunk, chunks on a thread
               pool: the reader's parse step alone
``reader``     ``FileReader(files).batches()``: the whole reader (decompress + parse + UTF-8
               check), MB/s of document text and of decompressed JSON; with a GIL probe (a
               thread that sleeps 1 ms in a loop: how late it wakes = how long other threads
               held the GIL, or the machine had no free core)
``documents``  ``readers.documents(FileReader(files), batch_bytes=64 MB)``: the packed batches
               the ``encode`` CLI takes from its reader thread
``reader without isal``  the whole reader in a child process where ``import isal`` fails
               (what a machine without python-isal gets; ``--no-isal-run`` skips it)

Data: the ``jsonl/*.jsonl.gz`` files of ``benchmarks/ingest.py --make-data`` (``--data``), or
any files given with ``--files``::

    python3 benchmarks/read_jsonl.py --data /tmp/ingest            # the H200 run (16 files)
    python3 benchmarks/read_jsonl.py --data /tmp/ingest-small --parse-mb 200
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import print_footer, sm_clock_now  # noqa: E402


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _thread_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each thread of this process, by native id (Linux)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return out


def _group(name: str) -> str:
    for prefix, g in (("gpubpe-decompress", "decompress threads"),
                      ("gpubpe-read", "parse pool"), ("MainThread", "main thread")):
        if name.startswith(prefix):
            return g
    return "other Python threads"


class GILProbe:
    """A thread that sleeps ``period`` s in a loop; its lateness on waking is the time it
    waited for the GIL (or for a core). It also samples each thread's CPU time (Linux /proc)
    and sums it by thread group: decompress threads, parse pool, main thread, native threads
    (Arrow's and others' without a Python name)."""

    def __init__(self, period: float = 1e-3) -> None:
        self.period, self.late = period, []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._cpu0 = _thread_cpu()
        self._cpu: dict[int, float] = {}
        self._names: dict[int, str] = {}

    def _sample(self) -> None:
        for t in threading.enumerate():
            if t.native_id is not None:
                self._names.setdefault(t.native_id, t.name)
        self._cpu.update(_thread_cpu())

    def _run(self) -> None:
        k = 0
        while not self._stop.is_set():
            t = time.perf_counter()
            time.sleep(self.period)
            self.late.append(time.perf_counter() - t - self.period)
            k += 1
            if k % 20 == 0:
                self._sample()

    def cpu_by_group(self) -> str:
        groups: dict[str, float] = {}
        for tid, c in self._cpu.items():
            if tid == self._t.native_id:
                continue
            g = _group(self._names[tid]) if tid in self._names else "native threads"
            groups[g] = groups.get(g, 0.0) + c - self._cpu0.get(tid, 0.0)
        return "CPU by threads: " + ", ".join(f"{g} {c:.2f} s" for g, c in
                                              sorted(groups.items(), key=lambda x: -x[1]))

    def __enter__(self) -> GILProbe:
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()
        self._sample()

    def summary(self) -> str:
        if not self.late:
            return "GIL probe: no samples"
        a = np.array(self.late) * 1e3
        return (f"GIL probe: woke {a.mean():.2f} ms late on average (p50 {np.median(a):.2f}, "
                f"p99 {np.percentile(a, 99):.2f}, max {a.max():.1f} ms; {len(a)} wake-ups)")


def row(name: str, wall: float, nbytes: int, cpu: float, extra: str = "") -> None:
    rate = nbytes / wall / 1e6 if wall > 0 else float("inf")
    core = nbytes / cpu / 1e6 if cpu > 0 else float("inf")
    print(f"  {name:<40} {wall:8.2f} s {rate:9,.0f} MB/s  {core:6,.0f} MB/s per core "
          f"(CPU {cpu:6.2f} s)  {extra}", flush=True)


def opener(kind: str):
    import pyarrow as pa

    if kind == "isal":
        from isal import igzip

        return lambda p: igzip.open(p, "rb")
    if kind == "zlib":
        return lambda p: pa.input_stream(p, compression="gzip")
    return lambda p: pa.input_stream(p, compression=kind)


def inflate_all(paths: list[str], kind: str, threads: int, chunk: int) -> int:
    op = opener(kind)

    def one(p: str) -> int:
        buf = np.empty(chunk, np.uint8)
        mv = memoryview(buf)
        n = 0
        with op(p) as f:
            while True:
                k = f.readinto(mv)
                if not k:
                    return n
                n += k

    with ThreadPoolExecutor(threads) as pool:
        return sum(pool.map(one, paths))


def parse_stage(paths: list[str], args, threads: int) -> None:
    import pyarrow as pa
    import pyarrow.json as pj

    from torch_gpubpe.io.readers import _open_raw  # the reader's own decompressor choice

    limit = int(args.parse_mb * 1e6)
    chunks: list[bytes] = []
    have = 0
    tail = b""
    for p in paths:
        with _open_raw(p) as f:
            while have < limit:
                got = f.read(args.chunk_bytes)
                if not got:
                    break
                got = tail + got
                cut = got.rfind(b"\n") + 1
                chunks.append(got[:cut])
                tail = got[cut:]
                have += cut
        tail = b""
        if have >= limit:
            break
    schema = pa.schema([(args.text_column, pa.large_string())])
    popts = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")

    def parse(c: bytes) -> int:
        t = pj.read_json(pa.py_buffer(c), parse_options=popts,
                         read_options=pj.ReadOptions(use_threads=False, block_size=len(c) + 1))
        arr = t.column(0).combine_chunks()
        arr.validate(full=True)
        return len(arr)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(parse, chunks[: 2 * threads]))  # warm up
        c0, t0 = cpu_seconds(), time.perf_counter()
        rows = sum(pool.map(parse, chunks))
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    row(f"parse (pyarrow.json, {args.chunk_bytes >> 20} MiB chunks)", wall, have, cpu,
        f"{have / 1e6:,.0f} MB of JSON, {rows:,} rows")


def reader_stage(paths: list[str], args, threads: int, name: str) -> dict:
    from torch_gpubpe.io.readers import FileReader

    out = {}
    for run in range(args.runs):
        r = FileReader(paths, text_column=args.text_column, threads=threads,
                       chunk_bytes=args.chunk_bytes)
        with GILProbe() as probe:
            c0, t0 = cpu_seconds(), time.perf_counter()
            text = docs = 0
            first = None
            for b in r.batches():
                if first is None:
                    first = time.perf_counter() - t0
                text += b.nbytes
                docs += len(b)
            wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        row(f"{name}, run {run + 1}", wall, text, cpu,
            f"{docs:,} docs; first batch after {first or 0:.2f} s; stats {r.stats}")
        print(f"    {probe.summary()}", flush=True)
        print(f"    {probe.cpu_by_group()} (sampled every 20 ms)", flush=True)
        out = {"seconds": wall, "text_bytes": text, "cpu": cpu, "stats": r.stats}
    return out


def documents_stage(paths: list[str], args, threads: int) -> None:
    from torch_gpubpe.io.readers import FileReader, documents

    r = FileReader(paths, text_column=args.text_column, threads=threads,
                   chunk_bytes=args.chunk_bytes)
    c0, t0 = cpu_seconds(), time.perf_counter()
    text = n = 0
    for p in documents(r, batch_bytes=64 << 20):
        text += p.nbytes
        n += 1
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    row("documents(FileReader), 64 MB batches", wall, text, cpu, f"{n} packed batches")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/gpubpe-ingest",
                    help="folder of benchmarks/ingest.py --make-data (its jsonl/*.jsonl.gz)")
    ap.add_argument("--files", nargs="+", help="JSON Lines files instead of --data")
    ap.add_argument("--threads", type=int, default=None,
                    help="reader threads (default: CPU count, at most 16)")
    ap.add_argument("--chunk-bytes", type=int, default=None,
                    help="decompressed bytes per parse task (default: the reader's)")
    ap.add_argument("--parse-mb", type=float, default=1000, help="MB held for the parse stage")
    ap.add_argument("--runs", type=int, default=2, help="runs of the whole reader")
    ap.add_argument("--text-column", default="text")
    ap.add_argument("--stages", default="inflate,parse,reader,documents,noisal")
    ap.add_argument("--no-isal-run", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.no_isal_run:
        sys.modules["isal"] = None  # import isal fails: as on a machine without python-isal
    from torch_gpubpe.io import readers

    if args.chunk_bytes is None:
        args.chunk_bytes = readers.DEFAULT_CHUNK_BYTES
    paths = args.files or sorted(glob.glob(os.path.join(args.data, "jsonl", "*.jsonl*")))
    if not paths:
        sys.exit(f"no files: --files, or --data with jsonl/*.jsonl* ({args.data})")
    threads = max(1, min(args.threads or os.cpu_count() or 1, 16))
    if args.no_isal_run:
        reader_stage(paths, args, threads, "reader without isal")
        return
    size = sum(os.path.getsize(p) for p in paths)
    info = Path(args.data, "ingest.json")
    note = ""
    if not args.files and info.exists():
        d = json.loads(info.read_text())
        note = f", {d['bytes'] / 1e6:,.1f} MB of text ({d['note']})"
    print(f"input: {len(paths)} files, {size / 1e6:,.1f} MB on disk{note}; {threads} threads, "
          f"chunks of {args.chunk_bytes >> 20} MiB; SM clock now {sm_clock_now()} (unused)")
    print("columns: wall clock, MB/s (decompressed bytes for inflate/parse, document text for "
          "the reader), MB/s per CPU-second of the process, notes")
    stages = set(args.stages.split(","))
    if "inflate" in stages:
        kinds = []
        if readers._isal_igzip() is not None and all(p.endswith(".gz") for p in paths):
            kinds.append("isal")
        if all(p.endswith(".gz") for p in paths):
            kinds.append("zlib")
        for ext, kind in ((".zst", "zstd"), (".zstd", "zstd")):
            if all(p.endswith(ext) for p in paths):
                kinds.append(kind)
        for kind in kinds:
            c0, t0 = cpu_seconds(), time.perf_counter()
            n = inflate_all(paths, kind, threads, args.chunk_bytes)
            row(f"inflate ({kind}, a thread per file)", time.perf_counter() - t0, n,
                cpu_seconds() - c0, f"{n / 1e6:,.0f} MB of JSON out of {size / 1e6:,.0f} MB")
        if readers._isal_igzip() is None:
            print("  inflate (isal): python-isal is not installed (pip install isal)")
    if "parse" in stages:
        parse_stage(paths, args, threads)
    if "reader" in stages:
        reader_stage(paths, args, threads, "FileReader(files).batches()")
    if "documents" in stages:
        documents_stage(paths, args, threads)
    if "noisal" in stages and readers._isal_igzip() is not None and any(
            p.endswith(".gz") for p in paths):
        cmd = [sys.executable, __file__, "--no-isal-run", "--runs", "1",
               "--chunk-bytes", str(args.chunk_bytes), "--threads", str(threads),
               "--text-column", args.text_column, "--files", *paths]
        r = subprocess.run(cmd, capture_output=True, text=True)
        print(r.stdout.rstrip() or r.stderr.strip()[-2000:], flush=True)
    print_footer()


if __name__ == "__main__":
    main()
