"""Benchmark + check: training's memory budget on corpora with very many distinct words (issue 17
§2). Public API only (``torch_gpubpe.train``), each case in a fresh process so that its peak RSS
is its own.

Cases (``--cases``, default all):

``unique``   ``--words`` (default 50 M) distinct random 8-letter words, each once
             (``--per-doc`` per document), plus common words (2,000 of 2–6 letters,
             Zipf-distributed, ``--common-per-doc`` per document; made with numpy a chunk of
             documents at a time),
             streamed from a Hugging Face ``IterableDataset`` made with
             ``IterableDataset.from_generator`` (generated, no network):
             (a) ``prune_below=0`` under ``--max-memory``: exact training cannot fit, so it must
                 be refused *while counting* (time to the error, how much was read);
             (b) ``prune_below=2`` under ``--max-memory``: the word tables spill sorted runs to
                 disk, the runs are merged exactly, the single words dropped; the merges must
                 equal ``train_from_word_counts`` of the common words' counts (computed
                 separately from the same seed).
``longword`` ``--long-docs`` (default 1,000) documents, each ONE word of ``--long-mb`` MB (random
             letters): (c) ``longword-budget``, under ``--max-memory``: refused while
             counting, once the long words held prove that the merge phase (~40 GB) cannot
             fit, the peak RSS within the budget; (e) ``longword-prune``, the same
             documents with ``prune_below=2`` under ``--max-memory``: all counted (a later
             document could repeat a word), the long words grouped and spilled as runs, merged
             with the pruning applied: every word is dropped (each occurs once), the peak RSS
             within the budget (lavapipe before the fix: 1.04 GB under 0.8 GB at 60 words,
             1.8 GB at 300); (d) ``longword-default``
             (only when named in ``--cases``): the default budget, trained (1 GB of symbols:
             slow) or the named error it gives.

Each line: wall time, peak RSS (``VmHWM`` of the child, ``_report.peak_rss_bytes``), the GPU memory used (``nvidia-smi``
``memory.used`` sampled every 0.2 s, peak minus the idle value; n/a without it), the SM clock
and busy %, the stats that matter (spilled runs, pruned words, unique words) or the error.

    python3 benchmarks/count_memory.py                                # H200: 50 M words, 1,000 x 1 MB
    python3 benchmarks/count_memory.py --words 2e5 --long-docs 4 --long-mb 0.05 \\
        --max-memory 3G --vocab-size 300                             # lavapipe, small
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from _report import GPUMonitor, peak_rss_bytes, print_footer, sm_clock_now  # noqa: E402

A_MUL = 1_000_003          # odd, not a multiple of 13: i -> i*A mod 26^8 is a bijection
SPACE26 = 26 ** 8
N_COMMON = 2_000


def common_words() -> list[bytes]:
    rng = np.random.default_rng(1)
    out: set[bytes] = set()
    while len(out) < N_COMMON:
        n = int(rng.integers(2, 7))
        out.add(b" " + bytes((rng.integers(0, 26, n) + 97).astype(np.uint8)))
    return sorted(out)


def common_table() -> tuple[np.ndarray, np.ndarray]:
    """The common words as a zero-padded ``(N_COMMON, 7)`` uint8 table and their lengths."""
    words = common_words()
    table = np.zeros((N_COMMON, 7), np.uint8)
    for i, w in enumerate(words):
        table[i, : len(w)] = np.frombuffer(w, np.uint8)
    return table, np.array([len(w) for w in words], np.int64)


def chunk_docs(args) -> int:
    """Documents generated at once (about a million random words: vectorised, bounded)."""
    return max(1, 1_000_000 // args.per_doc)


_ZIPF_CDF = np.cumsum(np.arange(1, N_COMMON + 1, dtype=np.float64) ** -1.3)
_ZIPF_CDF /= _ZIPF_CDF[-1]


def common_draws(args, c: int, ndocs: int) -> np.ndarray:
    """Indices, shape ``(ndocs, common_per_doc)``, of the common words of the documents of
    chunk ``c``: Zipf(1.3) truncated to N_COMMON (inverse CDF), one generator per chunk."""
    rng = np.random.default_rng([1_000, c])
    u = rng.random((ndocs, args.common_per_doc))
    return np.minimum(np.searchsorted(_ZIPF_CDF, u, side="right"), N_COMMON - 1)


def _chunks(args):
    """``(chunk index, first document, documents)`` of the corpus."""
    ndocs = -(-int(args.words) // args.per_doc)
    per_chunk = chunk_docs(args)
    for c, d0 in enumerate(range(0, ndocs, per_chunk)):
        yield c, d0, min(per_chunk, ndocs - d0)


def unique_docs(args):
    """Document texts: ``per_doc`` distinct random words (" " + 8 letters: word ``i`` is
    ``i * A_MUL + 12,345 mod 26^8`` in base 26, so all differ) + ``common_per_doc`` common
    words; made a chunk of documents at a time with numpy (no Python loop per word)."""
    table, tlen = common_table()
    per, cpd = args.per_doc, args.common_per_doc
    # base-26 digits, four at a time: digits k of code are LUT4[code % 26^4] (k < 4), then
    # LUT4[code // 26^4]
    lut4 = ((np.arange(26 ** 4)[:, None] // 26 ** np.arange(4)) % 26 + 97).astype(np.uint8)
    total = int(args.words)
    for c, d0, nd in _chunks(args):
        ids = np.arange(d0 * per, (d0 + nd) * per, dtype=np.int64).reshape(nd, per)
        code = (ids * A_MUL + 12_345) % SPACE26
        tok = np.zeros((nd, per + cpd, 9), np.uint8)
        tok[:, :per, 0] = 32
        tok[:, :per, 1:5] = lut4[code % 26 ** 4]
        tok[:, :per, 5:] = lut4[code // 26 ** 4]
        draws = common_draws(args, c, nd)
        tok[:, per:, :7] = table[draws]
        lens = np.empty((nd, per + cpd), np.int64)
        lens[:, :per] = np.where(ids < total, 9, 0)       # the last document may be short
        lens[:, per:] = tlen[draws]
        flat = tok[np.arange(9) < lens[:, :, None]]
        off = np.zeros(nd + 1, np.int64)
        np.cumsum(lens.sum(axis=1), out=off[1:])
        text = flat.tobytes().decode("ascii")
        for k in range(nd):
            yield {"text": text[off[k]: off[k + 1]]}


def common_counts(args) -> dict[bytes, int]:
    """How often each common word occurs in :func:`unique_docs`'s corpus (same draws)."""
    common = common_words()
    counts = np.zeros(N_COMMON, np.int64)
    for c, _, nd in _chunks(args):
        counts += np.bincount(common_draws(args, c, nd).ravel(), minlength=N_COMMON)
    return {w: int(n) for w, n in zip(common, counts.tolist()) if n}


def long_docs(args):
    n = int(args.long_mb * 1e6)
    for d in range(args.long_docs):
        rng = np.random.default_rng(d)
        yield {"text": (rng.integers(0, 26, n) + 97).astype(np.uint8).tobytes().decode("ascii")}


# ------------------------------------------------------------------------------------------------
def child(args) -> None:
    """One case in this (fresh) process; prints one JSON line."""
    import datasets

    import torch_gpubpe
    from torch_gpubpe.errors import InputError

    gen = unique_docs if args.child.startswith("unique") else long_docs
    ds = datasets.IterableDataset.from_generator(gen, gen_kwargs={"args": args},
                                                 features=datasets.Features(
                                                     {"text": datasets.Value("string")}))
    prune = 2 if args.child in ("unique-prune", "longword-prune") else 0
    budget = None if args.child == "longword-default" else int(parse_size(args.max_memory))
    st: dict = {}
    out: dict = {"case": args.child}
    t0 = time.perf_counter()
    try:
        vocab = torch_gpubpe.train(ds, args.vocab_size, min_frequency=2, prune_below=prune,
                                   max_memory=budget, stats=st)
        out["merges"] = len(vocab.merges)
        if args.child == "unique-prune":
            from torch_gpubpe.training.trainer import train_from_word_counts

            want = train_from_word_counts(common_counts(args), args.vocab_size, min_frequency=2)
            out["merges_equal_common_words_training"] = list(vocab.merges) == list(want.merges)
    except InputError as e:
        out["error"] = str(e)
    out["seconds"] = time.perf_counter() - t0
    out["peak_rss_bytes"] = peak_rss_bytes()
    for k in ("corpus_bytes", "num_documents", "unique_words", "spilled_runs", "spill_bytes",
              "seconds_spill", "seconds_merge_runs", "pruned_words", "seconds_count",
              "seconds_merge", "gpu_memory_bytes", "count_gpu_memory_bytes",
              "estimated_merge_memory_bytes", "max_memory_bytes", "count_pipeline"):
        if k in st:
            out[k] = st[k]
    print(json.dumps(out), flush=True)


def parse_size(s: str) -> float:
    s = str(s).strip().upper()
    mult = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    return float(s[:-1]) * mult[s[-1]] if s[-1] in mult else float(s)


class GPUMemory:
    """Peak ``memory.used`` of GPU 0 (MiB) over a job, sampled every 0.2 s; None without
    nvidia-smi."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _query(self) -> int | None:
        if not shutil.which("nvidia-smi"):
            return None
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                                  "--format=csv,noheader,nounits", "-i", "0"],
                                 capture_output=True, text=True, timeout=5).stdout
            return int(out.strip().splitlines()[0])
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
            return None

    def _run(self) -> None:
        while not self._stop.is_set():
            v = self._query()
            if v is None:
                return
            self.samples.append(v)
            self._stop.wait(0.2)

    def __enter__(self) -> GPUMemory:
        self.idle = self._query()
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()

    def summary(self) -> str:
        if self.idle is None or not self.samples:
            return "GPU memory n/a (no nvidia-smi)"
        return f"GPU memory peak {max(self.samples) - self.idle:,} MiB above idle"


def run_case(args, case: str) -> None:
    cmd = [sys.executable, __file__, "--child", case, "--words", str(args.words),
           "--per-doc", str(args.per_doc), "--common-per-doc", str(args.common_per_doc),
           "--long-docs", str(args.long_docs), "--long-mb", str(args.long_mb),
           "--max-memory", str(args.max_memory), "--vocab-size", str(args.vocab_size)]
    with GPUMonitor() as mon, GPUMemory() as mem:
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        print(f"{case:18s} FAILED rc={p.returncode}\n{p.stderr[-3000:]}")
        return
    r = json.loads(lines[-1])
    head = (f"{case:18s} {wall:7.1f} s (train() {r['seconds']:.1f} s) | peak RSS "
            f"{r['peak_rss_bytes'] / 1e9:.2f} GB | {mem.summary()} | {mon.summary()}")
    print(head)
    for k, v in r.items():
        if k not in ("case", "seconds", "peak_rss_bytes"):
            print(f"    {k}: {v}")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases",
                    default="unique-exact,unique-prune,longword-budget,longword-prune",
                    help="comma-separated; also longword-default (trains on 1 GB of distinct "
                         "1 MB words with the default budget: long, not in the default set)")
    ap.add_argument("--words", type=float, default=50e6, help="distinct random words (50 M)")
    ap.add_argument("--per-doc", type=int, default=2_000,
                    help="random words per document (datasets costs ~100-300 us per row)")
    ap.add_argument("--common-per-doc", type=int, default=2_000)
    ap.add_argument("--long-docs", type=int, default=1_000)
    ap.add_argument("--long-mb", type=float, default=1.0)
    ap.add_argument("--max-memory", default="6G", help="the budget of the budgeted cases")
    ap.add_argument("--vocab-size", type=int, default=1_024)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    print(f"count_memory: {args.words:,.0f} distinct words ({args.per_doc} per document + "
          f"{args.common_per_doc} common), {args.long_docs} x {args.long_mb} MB one-word "
          f"documents, budget --max-memory {args.max_memory}, vocab {args.vocab_size}; SM clock "
          f"now {sm_clock_now()}")
    for case in args.cases.split(","):
        run_case(args, case)
    print_footer()


if __name__ == "__main__":
    main()
