"""Benchmark: packing ``list[str]`` into UTF-8 (the host step before every GPU upload) — the
threaded, GIL-free packer (:mod:`torch_gpubpe._cpython_str`, what ``Tokenizer.encode_batch``,
``submit`` and ``train(list_of_str)`` use) against ``str.encode`` per document on one thread
(what they did before), on the same documents.

Usage::

    python3 benchmarks/pack.py                        # encode.py's 5 corpora, 102 MB
    python3 benchmarks/pack.py --max-bytes 20000000 --threads 1 2 4 8

Rows: ``str.encode`` + join (the old packer), ``pack_documents`` (the new one: default threads),
the new one with each ``--threads`` count, the encoder's upload path with each count (the
parts copied by ``copy_parts`` into one reused buffer, as into the mapped upload buffer):
transcoded first into scratch then copied (``utf8_parts`` + ``copy_parts``), or measured
first and transcoded straight into the buffer (``defer=True``: what ``_pack(keep_parts=True)``
now does), and ``train``'s batching (``wordcount._batches``,
8 MiB pieces). Each is the best of ``--repeat`` runs: wall seconds, MB/s, and the CPU seconds
of the whole process (all threads). Needs no GPU; the bytes of every row are checked equal.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import print_footer  # noqa: E402
from encode import CORPORA, DEFAULT_CORPORA, read_docs  # noqa: E402

import numpy as np  # noqa: E402

from torch_gpubpe import _cpython_str  # noqa: E402
from torch_gpubpe.pretokenize import pack_documents  # noqa: E402
from torch_gpubpe.reference import to_bytes  # noqa: E402
from torch_gpubpe.wordcount import _batches  # noqa: E402


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
    return (*min(runs), out if isinstance(out, bytes) else
            b"".join(x.tobytes() for x in out) if isinstance(out, list) else out.tobytes())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, action="append", help="a .jsonl.gz (repeatable)")
    ap.add_argument("--max-bytes", type=int, default=102_000_000)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    docs = read_docs(args.corpus or [CORPORA / f"{n}.jsonl.gz" for n in DEFAULT_CORPORA],
                     args.max_bytes)
    nbytes = sum(len(d.encode()) for d in docs)
    na = sum(len(d.encode()) for d in docs if not d.isascii())
    print(f"{len(docs)} documents, {nbytes / 1e6:.1f} MB ({na / 1e6:.1f} MB in non-ASCII "
          f"documents); threaded packer available: {_cpython_str.available()} "
          f"{_cpython_str.fallbacks() or ''}")
    rows = [("str.encode per document, joined (before)",
             lambda: b"".join([to_bytes(d) for d in docs])),
            ("pack_documents (threaded, default)", lambda: pack_documents(docs)[0])]
    for t in args.threads:
        rows.append((f"utf8_parts + join_parts, {t} thread(s)",
                     lambda t=t: _cpython_str.join_parts(_cpython_str.utf8_parts(docs, threads=t))))
    buf = np.ones(nbytes, np.uint8)   # (touched: as the mapped upload buffer, reused)

    def upload(t: int, defer: bool) -> np.ndarray:
        _cpython_str.copy_pool()   # (its 8 threads made before THREADS changes)
        old, _cpython_str.THREADS = _cpython_str.THREADS, t
        try:
            _cpython_str.copy_parts(buf, _cpython_str.utf8_parts(docs, threads=t, defer=defer))
        finally:
            _cpython_str.THREADS = old
        return buf

    for t in args.threads:
        rows.append((f"upload path, scratch + copy, {t} thread(s)",
                     lambda t=t: upload(t, False)))
        rows.append((f"upload path, deferred (written once), {t} thread(s)",
                     lambda t=t: upload(t, True)))
    rows.append(("train's batching (wordcount._batches, 8 MiB)",
                 lambda: [d for d, _ in _batches(docs, 8 << 20, {})]))
    want = None
    print(f"\n{'packer':<52} {'wall s':>8} {'MB/s':>8} {'CPU s':>8}")
    for name, fn in rows:
        wall, cpu, out = best(fn, args.repeat)
        want = out if want is None else want
        assert out == want, f"{name}: other bytes"
        print(f"{name:<52} {wall:8.3f} {nbytes / wall / 1e6:8.0f} {cpu:8.3f}")
    print_footer()


if __name__ == "__main__":
    main()
