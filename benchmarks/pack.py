"""Benchmark: packing ``list[str]`` into UTF-8 (the host step before every GPU upload), on the
two shapes the library sees — the encoder's (encode.py's 5 corpora, 102 MB, a few thousand
documents of ~30 KB) and the trainer's (documents of ~11 KB cut from every corpus, the mean of
a typical training corpus) — by both packers: ``to_bytes`` per document + join (what every
packer does without the compiled one), and the compiled one of
:mod:`torch_gpubpe.core.str_pack` with each ``--threads`` count: one array (``pack``), the
encoder's upload path (``Packed`` measured, then ``copy_parts`` into one reused buffer, as
into the mapped upload buffer) and the trainer's batches (``pack_batches`` / the per-document
loop, 8 MiB, each batch copied into one reused stage buffer and dropped, as count_pipeline
does).

Usage::

    python3 benchmarks/pack.py                              # both shapes, threads 1 2 4 8 16
    python3 benchmarks/pack.py --shape train --jsonl corpus.jsonl --threads 1 4 16

Each row is the best of ``--repeat`` runs: wall seconds, MB/s, the CPU seconds of the whole
process (all threads) and MB per CPU second (≈ one thread's throughput: robust to a loaded
machine). Needs no GPU; the bytes of every row are checked equal.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import sys
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import print_footer  # noqa: E402
from encode import CORPORA, DEFAULT_CORPORA, read_docs  # noqa: E402

import numpy as np  # noqa: E402

from torch_gpubpe.core import str_pack  # noqa: E402
from torch_gpubpe.core.copy_pool import copy_parts  # noqa: E402
from torch_gpubpe.core.reference import to_bytes  # noqa: E402
from torch_gpubpe.training.wordcount import document_batches as _batches  # noqa: E402


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def best(fn, repeat: int) -> tuple[float, float, bytes]:
    """(wall s, process CPU s) of the fastest of ``repeat`` runs, and its bytes (made after
    the timing)."""
    runs = []
    for _ in range(repeat):
        t, c = time.perf_counter(), cpu_s()
        out = fn()
        runs.append((time.perf_counter() - t, cpu_s() - c))
    if callable(out):
        out = out()
    return (*min(runs), out if isinstance(out, bytes) else
            b"".join(x.tobytes() for x in out) if isinstance(out, list) else out.tobytes())


def trainer_docs(paths: list[Path], max_bytes: int, piece: int) -> list[str]:
    """Documents of about ``piece`` characters (a typical training corpus's mean: 11 KB):
    the corpora's texts in turn, short ones joined (by a newline) and long ones cut, repeated
    (each repeat new objects, cut at another phase) until ``max_bytes`` UTF-8 bytes."""
    texts = [json.loads(line)["text"] for p in paths for line in gzip.open(p, "rt")]
    docs, total, phase, cur = [], 0, 0, []
    while total < max_bytes:
        for t in texts:
            cur.append(t)
            if sum(map(len, cur)) < piece:
                continue
            t, cur = "\n".join(cur), []
            for a in range(-phase if phase else 0, len(t), piece):
                d = t[max(a, 0) : a + piece]
                if d:
                    docs.append(d)
                    total += len(d.encode("utf-8", "surrogatepass"))
                if total >= max_bytes:
                    return docs
        phase = (phase + piece // 3 + 1) % piece
    return docs


@contextmanager
def packer_off():
    """The compiled packer not used (the paths taken without it)."""
    saved = dict(str_pack._state)
    str_pack._state["lib"] = None
    try:
        yield
    finally:
        str_pack._state.clear()
        str_pack._state.update(saved)


def rows_for(docs: list[str], nbytes: int, threads: list[int], shape: str) -> list:
    rows = [("to_bytes per document, joined (fallback)",
             lambda: b"".join([to_bytes(d) for d in docs]))]
    for t in threads:
        rows.append((f"str_pack.pack, {t} thr", lambda t=t: str_pack.pack(docs, threads=t)[0]))
    buf = np.ones(nbytes, np.uint8)   # (touched: as the mapped upload buffer, reused)

    def upload(t: int) -> np.ndarray:
        copy_parts(buf, [str_pack.Packed(docs, threads=t)])
        return buf

    for t in threads:
        rows.append((f"upload path: Packed + copy_parts, {t} thr", lambda t=t: upload(t)))
    stage = np.ones(16 << 20, np.uint8)

    def batches(t: int | None):
        it = (_batches(docs, 8 << 20, {}) if t is None
              else str_pack.pack_batches(docs, 8 << 20, {}, threads=t))
        sizes = []
        for data, _ in it:
            stage[: len(data)] = data   # (as count_pipeline's packer: copied, then dropped)
            sizes.append(len(data))
        return lambda: b"".join(d.tobytes() for d, _ in (
            _batches(docs, 8 << 20, {}) if t is None else
            str_pack.pack_batches(docs, 8 << 20, {}, threads=t)))

    def old_batches():
        with packer_off():
            return batches(None)

    if shape == "train":
        rows.append(("train batches, to_bytes per document, 8 MiB", old_batches))
        for t in threads:
            rows.append((f"train batches, str_pack.pack_batches, {t} thr",
                         lambda t=t: batches(t)))
    return rows


def run_shape(name: str, docs: list[str], threads: list[int], repeat: int) -> None:
    nbytes = sum(len(to_bytes(d)) for d in docs)
    na = sum(len(to_bytes(d)) for d in docs if not d.isascii())
    kinds = {1: 0, 2: 0, 4: 0}
    for d in docs:
        if not d.isascii():
            m = max(d)
            kinds[1 if m < "\u0100" else 2 if m < "\U00010000" else 4] += len(to_bytes(d))
    print(f"\n== {name}: {len(docs):,} documents, {nbytes / 1e6:.1f} MB, mean "
          f"{nbytes / max(len(docs), 1) / 1e3:.1f} KB ({na / 1e6:.1f} MB in non-ASCII documents:"
          f" kind 1 {kinds[1] / 1e6:.1f}, kind 2 {kinds[2] / 1e6:.1f}, kind 4 "
          f"{kinds[4] / 1e6:.1f} MB)")
    want = None
    print(f"{'packer':<50} {'wall s':>8} {'MB/s':>8} {'CPU s':>8} {'MB/CPU s':>9}")
    for label, fn in rows_for(docs, nbytes, threads, name):
        wall, cpu, out = best(fn, repeat)
        want = out if want is None else want
        assert out == want, f"{label}: other bytes"
        print(f"{label:<50} {wall:8.3f} {nbytes / wall / 1e6:8.0f} {cpu:8.3f} "
              f"{nbytes / max(cpu, 1e-9) / 1e6:9.0f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=["encode", "train", "both"], default="both")
    ap.add_argument("--corpus", type=Path, action="append", help="a .jsonl.gz (repeatable)")
    ap.add_argument("--max-bytes", type=int, default=102_000_000, help="encode shape")
    ap.add_argument("--train-bytes", type=float, default=150e6, help="train shape")
    ap.add_argument("--train-doc-chars", type=int, default=11_000)
    ap.add_argument("--jsonl", type=Path, help="train shape: these documents as they are "
                    "(JSON lines with a 'text' field)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"compiled packer: {str_pack.available()}, str_pack.THREADS {str_pack.THREADS}, "
          f"BATCH_THREADS {str_pack.BATCH_THREADS}; fallbacks {str_pack.fallbacks() or {}}")
    if args.shape in ("encode", "both"):
        docs = read_docs(args.corpus or [CORPORA / f"{n}.jsonl.gz" for n in DEFAULT_CORPORA],
                         args.max_bytes)
        run_shape("encode", docs, args.threads, args.repeat)
        del docs
    if args.shape in ("train", "both"):
        if args.jsonl:
            with open(args.jsonl, encoding="utf-8") as f:
                docs = [json.loads(line)["text"] for line in f]
        else:
            paths = args.corpus or sorted(CORPORA.glob("*.jsonl.gz"))
            docs = trainer_docs(paths, int(args.train_bytes), args.train_doc_chars)
        run_shape("train", docs, args.threads, args.repeat)
    print_footer()


if __name__ == "__main__":
    main()
