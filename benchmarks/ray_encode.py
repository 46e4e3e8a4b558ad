"""Benchmark: the Ray Data pipeline (torch_gpubpe.ray.TokenizeBatches, one GPU actor) against
the single-process encoder on the same parquet files.

    python3 benchmarks/ray_encode.py --help
    python3 benchmarks/ray_encode.py --parquet /tmp/pq --repeat 8        # H200: ~7 GB of text
    python3 benchmarks/ray_encode.py --parquet /tmp/pq --num-gpus 0 --max-files 2   # lavapipe

Both sides read the same files (``--repeat`` lists them K times) and produce the same tokens
(total token count checked equal):

* single process: ``pyarrow.parquet`` row batches (read one ahead on a thread) →
  ``Tokenizer.submit_arrow`` (zero copy Arrow → packed), two batches in flight;
* Ray: ``ray.data.read_parquet`` → ``map_batches(TokenizeBatches, batch_format="pyarrow",
  num_gpus=1, concurrency=1)`` → the driver iterates the token batches (counts tokens).

Prints MB/s of text for both, the ratio, the SM clock and GPU busy share while each ran, Ray's
per-operator stats (where the rest of the time goes), which adapter the actor opened and why
(``torch_gpubpe.devices``), then the machine / date / command footer.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from _report import GPUMonitor, print_footer, sm_clock_now  # noqa: E402

from torch_gpubpe.encoder import Tokenizer  # noqa: E402
from torch_gpubpe.vocab import Vocab  # noqa: E402


def parquet_files(paths: list[str]) -> list[str]:
    out = []
    for p in paths:
        q = Path(p)
        out += sorted(str(f) for f in q.glob("*.parquet")) if q.is_dir() else [str(q)]
    if not out:
        sys.exit(f"no parquet files in {paths}")
    return out


def text_bytes(files: list[str], column: str) -> int:
    total = 0
    for f in files:
        for b in pq.ParquetFile(f).iter_batches(columns=[column], batch_size=65_536):
            total += pc.sum(pc.binary_length(b.column(0))).as_py() or 0
    return total


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


def single_process(vocab: Vocab, files: list[str], a) -> tuple[int, float, str]:
    """Tokens and seconds of the plain single-process encode (two batches in flight)."""
    tok = Tokenizer(vocab)
    tok.encode_batch(["warm up the session"])
    how, submit = "Tokenizer.submit_arrow", tok.submit_arrow

    def batches():
        for f in files:
            for b in pq.ParquetFile(f).iter_batches(columns=[a.text_column],
                                                    batch_size=a.batch_size):
                yield b.column(0)

    tokens = 0
    t0 = time.perf_counter()
    with ThreadPoolExecutor(1) as pool:
        it = batches()
        nxt = pool.submit(next, it, None)
        pending = []
        while True:
            col = nxt.result()
            if col is None:
                break
            nxt = pool.submit(next, it, None)
            pending.append(submit(col))
            if len(pending) == 2:
                tokens += len(pending.pop(0).result().ids)
        for p in pending:
            tokens += len(p.result().ids)
    return tokens, time.perf_counter() - t0, how


def ray_pipeline(ray, vocab: Vocab, files: list[str], a) -> tuple[int, float, float, int, str]:
    """Tokens, seconds (after ray.init), seconds to the first token batch and its tokens,
    Ray's stats."""
    from torch_gpubpe.ray import TokenizeBatches

    t0 = time.perf_counter()
    ds = ray.data.read_parquet(files, columns=[a.text_column])
    ds = ds.map_batches(TokenizeBatches,
                        fn_constructor_kwargs={"vocab": vocab, "text_column": a.text_column,
                                               "keep_columns": []},
                        batch_format="pyarrow", batch_size=a.batch_size,
                        concurrency=a.concurrency,
                        **({"num_gpus": a.num_gpus} if a.num_gpus else {}))
    tokens, first, first_tokens = 0, None, 0
    for b in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
        col = b.column("input_ids")
        tokens += sum(len(c.values) for c in col.chunks)
        if first is None:
            first, first_tokens = time.perf_counter() - t0, tokens
    return tokens, time.perf_counter() - t0, first or 0.0, first_tokens, ds.stats()


def actor_adapter(ray, a) -> str:
    """Which adapter a GPU actor opens, and why (devices.last_choice)."""
    def probe():
        from torch_gpubpe import devices
        from torch_gpubpe.gpu import get_gpu
        from torch_gpubpe.ray import _pin_assigned_gpu

        _pin_assigned_gpu()
        g = get_gpu()
        c = devices.last_choice
        return (f"{g.adapter_name}; CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}"
                f"; {c.reason if c else 'wgpu default'}")

    return ray.get(ray.remote(num_gpus=a.num_gpus or 0)(probe).remote())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parquet", nargs="+", required=True, help="parquet files or folders")
    ap.add_argument("--text-column", default="text")
    ap.add_argument("--repeat", type=int, default=1, help="list the files K times (more bytes)")
    ap.add_argument("--max-files", type=int, help="use the first N files")
    ap.add_argument("--vocab", help="vocab.json (default: train one on --train-bytes)")
    ap.add_argument("--vocab-size", type=int, default=32_768)
    ap.add_argument("--train-bytes", type=float, default=100e6)
    ap.add_argument("--batch-size", type=int, default=4096, help="rows per batch (both sides)")
    ap.add_argument("--num-gpus", type=float, default=1, help="GPUs per Ray actor (0: lavapipe)")
    ap.add_argument("--concurrency", type=int, default=1, help="Ray GPU actors")
    ap.add_argument("--cpus", type=int, default=os.cpu_count(), help="CPUs for ray.init")
    a = ap.parse_args()

    files = parquet_files(a.parquet)[: a.max_files]
    if a.repeat > 1:   # distinct names (ray.data.read_parquet reads a path listed twice once)
        import tempfile

        links = Path(tempfile.mkdtemp(prefix="ray_encode_"))
        rep = []
        for k in range(a.repeat):
            for i, f in enumerate(files):
                (links / f"{k:03d}_{i:05d}.parquet").symlink_to(Path(f).resolve())
                rep.append(str(links / f"{k:03d}_{i:05d}.parquet"))
        files = rep
    nbytes = text_bytes(files, a.text_column)
    print(f"input: {len(files)} parquet files (x{a.repeat}), "
          f"{nbytes / 1e9:.3f} GB of text; batch {a.batch_size:,} rows; SM clock before "
          f"{sm_clock_now()}")
    vocab = get_vocab(a, files)

    with GPUMonitor() as mon1:
        tok1, s1, how = single_process(vocab, files, a)
    print(f"single process: {tok1:,} tokens in {s1:.2f} s = {nbytes / s1 / 1e6:,.1f} MB/s "
          f"({how}); {mon1.summary()}")

    import ray

    t0 = time.perf_counter()
    ray.init(num_cpus=a.cpus, num_gpus=a.num_gpus and max(1, int(a.num_gpus + 0.999)),
             include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO))}})
    print(f"ray {ray.__version__}: init {time.perf_counter() - t0:.1f} s, resources "
          f"{ray.cluster_resources()}")
    print(f"actor adapter: {actor_adapter(ray, a)}")
    with GPUMonitor() as mon2:
        tok2, s2, first, tok_first, stats = ray_pipeline(ray, vocab, files, a)
    # steady state: the text after the first token batch (its share estimated from tokens)
    rest = nbytes * (1 - tok_first / max(tok2, 1))
    steady = rest / max(s2 - first, 1e-9)
    print(f"ray pipeline: {tok2:,} tokens in {s2:.2f} s = {nbytes / s2 / 1e6:,.1f} MB/s "
          f"(first token batch after {first:.1f} s: actor start, GPU open, first batch; "
          f"after it {steady / 1e6:,.1f} MB/s); {mon2.summary()}")
    with GPUMonitor() as mon3:
        tok3, s3, _ = single_process(vocab, files, a)
    print(f"single process again: {s3:.2f} s = {nbytes / s3 / 1e6:,.1f} MB/s; {mon3.summary()}")
    ray.shutdown()
    best = min(s1, s3)
    print("\n| path | seconds | MB/s | tokens |\n|---|---:|---:|---:|")
    print(f"| single process (best of 2) | {best:.2f} | {nbytes / best / 1e6:,.1f} | {tok1:,} |")
    print(f"| Ray Data, {a.concurrency} GPU actor(s) | {s2:.2f} | {nbytes / s2 / 1e6:,.1f} | "
          f"{tok2:,} |")
    print(f"| Ray Data, after the first token batch | {s2 - first:.2f} | {steady / 1e6:,.1f} | "
          f"{tok2 - tok_first:,} |")
    print(f"\nRay / single process: {best / s2:.0%} of the single-process throughput end to "
          f"end, {steady / (nbytes / best):.0%} in steady state")
    print("\nRay Data stats (where the time goes):\n" + stats)
    if not tok1 == tok2 == tok3:
        sys.exit(f"token counts differ: {tok1} / {tok2} / {tok3}")
    print_footer()


if __name__ == "__main__":
    main()
